"""A graceful shutdown as streams see it: which still running are ended, and when.

uvicorn, on SIGTERM (or Ctrl-C), stops accepting, closes every WebSocket at once (code 1012),
lets HTTP requests in flight run for up to `timeout_graceful_shutdown` (`--graceful-timeout`),
then cancels what is left: a cut stream with no terminal event. The app's `Drain` hears the same signal
first (its handler wraps the server's, installed as the app starts serving: stock uvicorn's and
the tuned server's alike) and ends those streams itself, each with its API's terminal error
(templates/faults.yaml, as a mid-stream fault): a Responses WebSocket response in flight at
once, and uvicorn hears the signal once those have sent their error frames (it closes every
WebSocket as its shutdown begins); paced SSE streams `ENDS_EARLY` seconds before
uvicorn's timeout, so that their last events are out before it cancels anything. A stream
learns it is being ended from its frames (llmsim.faults.injection: `begun` / `ended`),
and the pacer (`Pacer.end_all`) or the task pacing it (`sleepers`; a background response's,
`late_sleepers`) asks it for what is left. One `Drain` per app (`Simulator.drain`), holding
the app's pacers: two apps in one process share no shutdown and no paced stream.
"""
from __future__ import annotations

import asyncio
import signal
import threading

from llmsim.pacing.pacer import Pacers

ENDS_EARLY = 0.2        # seconds before uvicorn's graceful timeout that streams still running end
WEBSOCKETS_END = 0.5    # seconds WebSocket responses may take to send their error frames before
                        # the server hears the signal (and closes their sockets)
SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM") if hasattr(signal, name))


class Drain:
    """The shutdown of an app's server, and the pacers of the app's streams: one per app (the
    simulator's `drain`), living as long as the app; each lifespan starts it afresh."""

    def __init__(self):
        self.pacers = Pacers()              # the app's paced streams, one timer per event loop
        self._ending: asyncio.TimerHandle | None = None    # `end`, at the graceful timeout
        self.loop: asyncio.AbstractEventLoop | None = None
        self.timeout: float | None = None   # --graceful-timeout (None: streams run to their end)
        self.begun = False                  # a shutdown signal came
        self.ended = False                  # streams still running are being ended
        self.sleepers: set[asyncio.Task] = set()    # WebSocket responses waiting for their next event
        self.late_sleepers: set[asyncio.Task] = set()   # background responses waiting for theirs
        self._wrapped: dict[int, object] = {}       # signal -> the handler ours wraps

    def serving(self, timeout: float | None) -> None:
        """The app starts serving (its lifespan): hear the server's shutdown signals too."""
        self.loop, self.timeout = asyncio.get_running_loop(), timeout
        self._cancel_ending()               # (a shutdown of an earlier lifespan: not this one's)
        self.begun = self.ended = False
        self.pacers.serving(self.loop)
        self.sleepers.clear()
        self.late_sleepers.clear()
        if threading.current_thread() is not threading.main_thread():
            return                          # (an app served in a test's thread: no signals)
        for sig in SIGNALS:
            handler = signal.getsignal(sig)
            if callable(handler) and handler != self._on_signal and sig not in self._wrapped:
                # the server's (uvicorn's), or another app's: called after ours
                self._wrapped[sig] = handler
                signal.signal(sig, self._on_signal)

    def stopped(self) -> None:
        """The app stops (its lifespan ends): the server's handlers as they were. After a
        shutdown signal, with a graceful timeout, what still runs ends now (background
        responses, which no request waits for: the server may stop before the timeout)."""
        if self.begun and self.timeout is not None and self.loop is not None and not self.loop.is_closed():
            self.end()
        self._cancel_ending()
        self.pacers.stopped()
        for sig, handler in list(self._wrapped.items()):
            if signal.getsignal(sig) == self._on_signal:
                signal.signal(sig, handler)
                del self._wrapped[sig]  # (else another app's handler wraps ours: it still passes on)

    def _on_signal(self, signum, frame) -> None:
        """The server's handler, once the WebSocket responses in flight have sent their error
        frames (uvicorn closes every WebSocket as its shutdown begins); at once if the loop
        is gone or the shutdown has begun already (a second Ctrl-C: uvicorn's forced exit)."""
        handler = self._wrapped.get(signum)
        if self.begun or self.loop is None or self.loop.is_closed():
            if callable(handler):
                handler(signum, frame)
            return
        self.loop.call_soon_threadsafe(self._shut_down, handler, signum)

    def _shut_down(self, handler, signum) -> None:
        ending = self.begin()
        if not ending:
            handler(signum, None)
            return

        async def then():
            await asyncio.wait(ending, timeout=WEBSOCKETS_END)
            handler(signum, None)
        self.loop.create_task(then())

    def begin(self) -> list[asyncio.Task]:
        """Shutting down: WebSocket responses in flight end now (their tasks, returned, close
        their sockets once the error frame is sent); with a graceful timeout, every other
        stream still running ends just before it."""
        if self.begun:
            return []
        self.begun = True
        ending = list(self.sleepers)
        for task in ending:
            task.cancel()
        if self.timeout is not None:
            self._ending = asyncio.get_running_loop().call_later(max(0.0, self.timeout - ENDS_EARLY), self.end)
        return ending

    def _cancel_ending(self) -> None:
        if self._ending is not None:
            self._ending.cancel()
            self._ending = None

    def end(self) -> None:
        """The graceful timeout is (nearly) over: end every paced stream still running, and
        every background response (whose followers' streams then end with it)."""
        if self.ended:
            return
        self.ended = True
        self._cancel_ending()
        self.pacers.end_all()
        for task in list(self.late_sleepers):
            task.cancel()

    def stopping(self, until: str) -> bool:
        """Whether a stream paced `until` "begun" (a WebSocket response) or "ended" (a
        background response) ends now (llmsim.pacing.transport.due_lists)."""
        return self.begun if until == "begun" else self.ended

    def waiting(self, until: str) -> set[asyncio.Task]:
        """Where the task pacing such a stream waits (cancelled when it is to end)."""
        return self.sleepers if until == "begun" else self.late_sleepers

