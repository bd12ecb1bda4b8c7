"""`--reuse-port` (the default with `--workers`): one listening socket per worker process,
so the kernel spreads connections over them.

With one socket shared by every `--workers` process (uvicorn's way, `--no-reuse-port`), each
worker that wakes for it takes half of the connections waiting (llmsim.server.accepting), so how
a burst is split depends on which wakes when. Sockets bound to the same address with
SO_REUSEPORT each get their own share of new connections instead (by a hash of the
connection's addresses).

The supervisor binds a `WorkerSocket` (never listening, it holds the address) and hands it
to uvicorn's process manager; a worker receives it by unpickling, which binds a socket of
its own to the same address. A restarted worker does the same.
"""
from __future__ import annotations

import socket


def reuse_port_supported() -> bool:
    return hasattr(socket, "SO_REUSEPORT")


def bind_reuse_port(family: int, address: tuple, cls: type = socket.socket) -> socket.socket:
    sock = cls(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    sock.set_inheritable(True)
    return sock


class WorkerSocket(socket.socket):
    """Pickles (to a spawned worker) as "bind another socket to my address"."""

    def __reduce__(self):
        return bind_reuse_port, (self.family, self.getsockname()[:2])


def worker_socket(host: str, port: int) -> WorkerSocket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return bind_reuse_port(family, (host, port), WorkerSocket)


def run_workers(config, reuse_port: bool) -> None:
    """uvicorn's process manager (`Multiprocess`, given the sockets: not its documented API,
    hence here) for `--workers` of the tuned server. By default the workers share one listening
    socket, and each takes half of the connections waiting when it wakes
    (llmsim.server.accepting). With `reuse_port` (the default), each worker listens on its own
    SO_REUSEPORT socket, the kernel spreads connections over them and each worker accepts all
    of its own at once: best for bursts of streams in bench/perf.py, and as good for wrk."""
    from uvicorn.supervisors import Multiprocess
    if reuse_port and reuse_port_supported():
        sock = worker_socket(config.host, config.port)
    else:
        sock = config.bind_socket()
    try:
        Multiprocess(config, sockets=[sock]).run()
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
