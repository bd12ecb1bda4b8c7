"""`llmsim serve`'s protocol fed raw bytes on a real loop: a transport that keeps what the
protocol writes, and a wait until what the protocols read is handled (tests/server)."""
from __future__ import annotations

import asyncio

from llmsim.server.corking import CorkedHttpToolsProtocol


class Transport(asyncio.Transport):
    """What the protocol writes, in order; `closed` once it closes."""

    def __init__(self):
        super().__init__()
        self.data = bytearray()
        self.writes: list[bytes] = []
        self.closed = False

    def get_extra_info(self, name, default=None):
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def write(self, data):
        self.data += data
        self.writes.append(bytes(data))

    def is_closing(self):
        return self.closed

    def close(self):
        self.closed = True

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass



async def handled(*protocols: CorkedHttpToolsProtocol, timeout: float = 5) -> None:
    """Until what the protocols read is handled: started two loop steps after it was read
    (llmsim.server.starting), then, for a request that waited, its task done."""
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    await asyncio.wait_for(asyncio.gather(*(t for p in protocols for t in p.tasks)), timeout)
