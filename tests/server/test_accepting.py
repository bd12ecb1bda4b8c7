"""The serving loop accepts a burst of connections at once and has room for them
(llmsim.server.accepting): connections opened together are served together."""
from __future__ import annotations

import asyncio
import resource
import socket
import sys

import pytest

from llmsim.server import accepting

uvloop_only = pytest.mark.skipif(accepting.uvloop is None, reason="uvloop is not installed")


class Recorded(asyncio.Protocol):
    """Notes the loop iteration in which each connection was made, and echoes."""

    def __init__(self, made: list[int], iteration: list[int]):
        self.made, self.iteration = made, iteration

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.made.append(self.iteration[0])

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


def connections_made_per_iteration(loop: asyncio.AbstractEventLoop, n: int) -> list[int]:
    """Open `n` connections while the loop is not running, then run it: the loop
    iteration (counted by a callback that reschedules itself) of each `connection_made`."""
    made: list[int] = []
    iteration = [0]
    listener = socket.create_server(("127.0.0.1", 0), backlog=n)

    async def main() -> None:
        server = await loop.create_server(lambda: Recorded(made, iteration), sock=listener)

        def tick() -> None:
            iteration[0] += 1
            loop.call_soon(tick)
        clients = [socket.create_connection(listener.getsockname()) for _ in range(n)]
        loop.call_soon(tick)            # the connections wait in the kernel until now
        while len(made) < n and iteration[0] < 10 * n:
            await asyncio.sleep(0)
        clients[0].sendall(b"ping")
        echoed = await loop.run_in_executor(None, clients[0].recv, 4)
        assert echoed == b"ping"
        for client in clients:
            client.close()
        server.close()
        await server.wait_closed()

    loop.run_until_complete(main())
    loop.close()
    return made


@uvloop_only
def test_a_burst_of_connections_is_made_within_a_few_loop_iterations():
    """(uvloop's own server makes one connection per iteration: here 40 iterations.)"""
    made = connections_made_per_iteration(accepting.new_event_loop(), 40)
    assert len(made) == 40
    assert max(made) - min(made) <= 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_the_descriptor_table_is_sized_before_serving():
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(4096, soft)
    accepting.make_room_for_connections(table=wanted)
    status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines()
                  if ":\t" in line)
    assert int(status["FDSize"]) >= wanted


def test_the_soft_limit_on_open_files_is_raised_to_the_hard_one():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        pytest.skip("no hard limit")
    if soft == hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 1024), hard))
        if resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard:
            pytest.skip("the hard limit is 1024 or less")
    accepting.make_room_for_connections(table=64)
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard


@uvloop_only
@pytest.mark.skipif(not hasattr(socket, "TCP_INFO"), reason="the kernel does not report queue lengths")
def test_a_worker_sharing_its_socket_takes_half_of_the_connections_waiting():
    """With --no-reuse-port the workers share one socket: each wakes and takes half, so a
    burst is split between them rather than landing whole on the first to wake."""
    loop = accepting.new_shared_event_loop()
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)

    made: list[int] = []

    async def main() -> int:
        server = await loop.create_server(lambda: Recorded(made, [0]), sock=listener,
                                          start_serving=False)
        clients = [socket.create_connection(listener.getsockname()) for _ in range(40)]
        listener.setblocking(False)
        server._accept_waiting()            # one wake-up, as the loop would call it
        for _ in range(5):
            await asyncio.sleep(0)
        for client in clients:
            client.close()
        server.close()
        return len(made)

    try:
        assert loop.run_until_complete(main()) == 20
    finally:
        loop.close()
