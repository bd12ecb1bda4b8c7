"""How `llmsim serve`'s protocol (llmsim.server.corking) starts the requests it reads.

uvicorn starts each request as an asyncio task the moment its headers are read. llmsim
starts them in batches instead, with the same timing as a task that first waits one loop step:

* **After the next read of sockets.** The loop reads sockets only between steps, and a step
  runs every request read before it: of a burst written within a millisecond, the requests
  the first read found would all be handled before the rest were read, and those requests'
  simulated time would start that late. Starting a step later, every request already
  arrived is read, and stamped (`received_at`), before any is handled.
* **At once, until the request first waits.** Many requests never wait (a JSON answer or
  a whole stream under `--profile instant` is written before its handler returns), and for
  them a task, and the loop steps that run it, are pure cost; a batch's two callbacks are
  shared by all its requests. Kept because bench/instructions.py shows the eager start saves
  more than 3% of W1's and W2's instructions (figures in bench/RESULTS.md). A request that
  does wait (a paced stream, a slow client's body) goes on in a task from where it
  stopped, in the same `contextvars` context, as Python 3.12's eager tasks do. Until then
  `asyncio.current_task()` is None, so only requests the app says can run so
  (`app.eager(scope)`: llmsim.api.front's own JSON operations, unless the store needs a task) do.

One `Starter` per event loop (llmsim.server.corking.for_loop): two callbacks per batch, not a task
per request.
"""
from __future__ import annotations

import asyncio
import contextvars
from typing import Any, Callable, Coroutine

Start = tuple[Callable[[Any], Coroutine], Any, set, bool]  # run, its argument, the tasks to join, eagerly


class Starter:
    __slots__ = ("loop", "waiting")

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.waiting: list[Start] = []

    def add(self, run: Callable[[Any], Coroutine], arg: Any, tasks: set, eagerly: bool) -> None:
        """Start `run(arg)` after the loop's next read of sockets: `eagerly`, or as a task
        (for code that needs `asyncio.current_task()` from its start: anyio's, starlette's).
        A task joins `tasks` until done (uvicorn waits for those at shutdown)."""
        if not self.waiting:
            self.loop.call_soon(self._after_next_reads)
        self.waiting.append((run, arg, tasks, eagerly))

    def _after_next_reads(self) -> None:
        batch, self.waiting = self.waiting, []
        self.loop.call_soon(self._start, batch)

    def _start(self, batch: list[Start]) -> None:
        loop = self.loop
        for run, arg, tasks, eagerly in batch:
            if eagerly:
                start_eagerly(loop, run(arg), tasks)
            else:
                task = loop.create_task(run(arg))
                task.add_done_callback(tasks.discard)
                tasks.add(task)


def start_eagerly(loop: asyncio.AbstractEventLoop, coro: Coroutine, tasks: set) -> None:
    """Run `coro` now, in a copy of the current context, until it first waits; then in a
    task (added to `tasks` until done). Like a task, what it raises is reported to the loop's
    exception handler, not to the caller."""
    context = contextvars.copy_context()
    try:
        awaited = context.run(coro.send, None)
    except StopIteration:
        return
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        loop.call_exception_handler({"message": "Exception in a request", "exception": exc})
        return
    task = loop.create_task(_Rest(coro, awaited), context=context)
    task.add_done_callback(tasks.discard)
    tasks.add(task)


class _Rest(Coroutine):
    """What is left of a coroutine that ran until it waited on `awaited` (a future, or None
    for one loop step), as a coroutine for a task to drive: its first step hands the task
    that wait; every later one, and any exception thrown in (a cancellation, even before
    the first step), goes to the coroutine where it stopped."""
    __slots__ = ("coro", "awaited", "started")

    def __init__(self, coro: Coroutine, awaited: Any):
        self.coro, self.awaited, self.started = coro, awaited, False

    def send(self, value: Any) -> Any:
        if not self.started:
            self.started = True
            awaited, self.awaited = self.awaited, None
            return awaited
        return self.coro.send(value)

    def throw(self, exc, *args) -> Any:
        self.started = True
        self.awaited = None
        return self.coro.throw(exc, *args)

    def close(self) -> None:
        self.coro.close()

    def __await__(self):
        raise TypeError("driven by its task only")

    @property
    def __name__(self) -> str:          # what the task's repr names
        return getattr(self.coro, "__qualname__", "request")
