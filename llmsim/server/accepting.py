"""An event loop that accepts waiting connections in batches (uvicorn's `loop` factory).

libuv accepts one connection per loop iteration, so under a burst connections were accepted
well after their requests were written (their simulated time starting that late).
`AcceptingLoop` (uvloop) watches the listening socket itself and accepts a batch each time it
is readable: all waiting when alone on the socket, half when workers share it. The factory
also raises the open-file limit and sizes the descriptor table once.
The story and figures: docs/internals.md#serveraccepting, bench/RESULTS.md.
"""
from __future__ import annotations

import asyncio
import os
import resource
import socket
import struct

ACCEPT_BATCH = 128
"""At most this many connections accepted per readiness event."""

SHARED_BATCH = 8
"""Per readiness event on a shared socket whose queue length the kernel does not report."""

DESCRIPTOR_TABLE = 16384
"""Descriptors the table is sized for at start-up (at most the soft limit): 128 KB of kernel
memory per process."""

ACCEPT_RETRY_DELAY = 1.0
"""Seconds without accepting after the process ran out of file descriptors (as asyncio)."""


try:
    import uvloop
except ImportError:                     # asyncio's loop accepts in batches already
    uvloop = None
else:
    class AcceptingLoop(uvloop.Loop):
        shared_socket = False       # other processes accept from the same listening socket

        async def create_server(self, protocol_factory, host=None, port=None, *, sock=None,
                                ssl=None, backlog=100, start_serving=True, **kwargs):
            if sock is None or ssl is not None or sock.family == socket.AF_UNIX or kwargs:
                return await super().create_server(protocol_factory, host, port, sock=sock, ssl=ssl,
                                                   backlog=backlog, start_serving=start_serving,
                                                   **kwargs)
            server = AcceptingServer(self, protocol_factory, sock, backlog, self.shared_socket)
            if start_serving:
                await server.start_serving()
            return server


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvicorn's loop setting `llmsim.server.accepting:new_event_loop`, for a process alone on its
    listening socket; makes room for connections."""
    make_room_for_connections()
    return asyncio.new_event_loop() if uvloop is None else AcceptingLoop()


def new_shared_event_loop() -> asyncio.AbstractEventLoop:
    """`llmsim.server.accepting:new_shared_event_loop`: for workers sharing one listening socket."""
    loop = new_event_loop()
    if uvloop is not None:
        loop.shared_socket = True
    return loop


def make_room_for_connections(table: int = DESCRIPTOR_TABLE) -> None:
    """Raise the soft limit on open files to the hard one, then size the descriptor table:
    a descriptor duplicated onto the highest number wanted makes the kernel grow the table
    now, once, rather than during a burst of connections."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != soft:
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    highest = (table if soft == resource.RLIM_INFINITY else min(table, soft)) - 1
    probe = os.open(os.devnull, os.O_RDONLY)
    try:
        if highest > probe:
            os.dup2(probe, highest, inheritable=False)
            os.close(highest)
    finally:
        os.close(probe)


class AcceptingServer(asyncio.AbstractServer):
    """A listening socket whose waiting connections are accepted in one go."""

    def __init__(self, loop, protocol_factory, sock: socket.socket, backlog: int,
                 shared: bool = False):
        self._loop = loop
        self._batch = self._half_of_waiting if shared else (lambda: ACCEPT_BATCH)
        self._protocol_factory = protocol_factory
        self._sock = sock
        self._backlog = backlog
        self._serving = False
        self._closed = loop.create_future()
        self._connecting: set[asyncio.Task] = set()

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return () if self._sock is None else (self._sock,)

    def get_loop(self):
        return self._loop

    def is_serving(self) -> bool:
        return self._serving

    async def start_serving(self) -> None:
        if self._serving or self._sock is None:
            return
        self._sock.setblocking(False)
        self._sock.listen(self._backlog)
        self._loop.add_reader(self._sock.fileno(), self._accept_waiting)
        self._serving = True

    async def serve_forever(self) -> None:
        await self.start_serving()
        await self.wait_closed()

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is None:
            return
        if self._serving:
            self._loop.remove_reader(sock.fileno())
            self._serving = False
        sock.close()
        if not self._closed.done():
            self._closed.set_result(None)

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)

    def _accept_waiting(self) -> None:
        accept = self._sock.accept
        for _ in range(self._batch()):
            try:
                conn, _address = accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue            # the client left before we accepted: nothing to serve
            except OSError as exc:  # out of file descriptors, most likely: pause, as asyncio does
                self._pause_accepting(exc)
                return
            conn.setblocking(False)
            task = self._loop.create_task(
                self._loop.connect_accepted_socket(self._protocol_factory, conn))
            self._connecting.add(task)
            task.add_done_callback(self._connected)

    def _half_of_waiting(self) -> int:
        """Half the connections waiting in the shared socket's queue (at least one): the
        other workers, woken too, take theirs; one left alone drains it in log2(n) steps."""
        try:   # a listening socket's tcp_info reports its accept queue's length as `unacked`
            info = self._sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 32)
            waiting = struct.unpack_from("I", info, 24)[0]
        except (AttributeError, OSError, struct.error):
            return SHARED_BATCH
        return min(ACCEPT_BATCH, max(1, (waiting + 1) // 2))

    def _connected(self, task: asyncio.Task) -> None:
        self._connecting.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._loop.call_exception_handler({"message": "could not set up an accepted connection",
                                               "exception": task.exception()})

    def _pause_accepting(self, exc: OSError) -> None:
        self._loop.call_exception_handler({"message": "accepting a connection failed; retrying in "
                                                      f"{ACCEPT_RETRY_DELAY:g} s", "exception": exc})
        self._loop.remove_reader(self._sock.fileno())
        self._loop.call_later(ACCEPT_RETRY_DELAY, self._resume_accepting)

    def _resume_accepting(self) -> None:
        if self._sock is not None and self._serving:
            self._loop.add_reader(self._sock.fileno(), self._accept_waiting)
