"""The serving model's slots and queues shared by the workers of one host (`--workers N`).

One small JSON file in the workers' stats directory, changed under an exclusive `fcntl` lock:
per model the pids holding a slot, the queue in order and the next number. Invariants: a slot
is taken only when free and nobody waits (FIFO); beyond `max_queue` waiting, 429; the places
of dead processes are taken back. `HostSlots` has the interface of
llmsim.state.serving.Slots. The story: docs/internals.md#statehostslots.
"""
from __future__ import annotations

import asyncio
import fcntl
import os
import time
from pathlib import Path

import orjson

from llmsim.observe.statsview import alive

FILE_NAME = "slots.state"       # in the stats directory (not *.json: those are the workers' snapshots)
RECLAIM_S = 1.0                 # how often a blocked process looks for dead processes' slots
FIRST_POLL_S = 0.002            # the first waiter looks this often for a free slot
LATER_POLL_S = 0.01             # the others, for their turn to be first
LOAD_S = 0.05                   # how long a read of the host's running requests is reused
HUGE = 1 << 62                  # the limit without `max_concurrency` (running is still counted)


class SlotFile:
    """The file every worker of a host reads and writes (one per process, for every model)."""

    def __init__(self, directory: str | Path):
        self.path = Path(directory) / FILE_NAME
        self.fd: int | None = None
        self.pid = os.getpid()
        self.reclaimed = -RECLAIM_S     # when this process last looked for dead processes

    def _change(self, model: str, change, exclusive: bool = True):
        """`change(state)` on the model's state, under the lock; written back when exclusive."""
        if self.fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            self.pid = os.getpid()
        fd = self.fd
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            raw = os.pread(fd, os.fstat(fd).st_size, 0)
            models = orjson.loads(raw) if raw else {}
            state = models.get(model)
            if state is None:
                state = models[model] = {"run": [], "queue": [], "next": 0}
            result = change(state)
            if exclusive:
                data = orjson.dumps(models)
                if data != raw:             # (a waiter whose turn has not come changes nothing)
                    os.pwrite(fd, data, 0)
                    os.ftruncate(fd, len(data))
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        return result

    def _reclaim(self, state: dict) -> None:
        """Take back the slots and places of dead processes (at most once a second)."""
        now = time.monotonic()
        if now - self.reclaimed < RECLAIM_S:
            return
        self.reclaimed = now
        living = {pid: alive(pid) for pid in {*state["run"], *(pid for _, pid in state["queue"])}}
        state["run"] = [pid for pid in state["run"] if living[pid]]
        state["queue"] = [entry for entry in state["queue"] if living[entry[1]]]

    def enter(self, model: str, limit: int, queue: int | None) -> int | None:
        """Take a slot (None) or a place in the queue (its number); -1: the queue is full."""
        def change(state):
            if len(state["run"]) >= limit or state["queue"]:
                self._reclaim(state)
            if len(state["run"]) < limit and not state["queue"]:
                state["run"].append(self.pid)
                return None
            if queue is not None and len(state["queue"]) >= queue:
                return -1
            number = state["next"]
            state["next"] = number + 1
            state["queue"].append([number, self.pid])
            return number
        return self._change(model, change)

    def take(self, model: str, number: int, limit: int) -> int:
        """Move place `number` into a slot when it is first and a slot is free: 0 when it
        did, else its position in the queue (1 is first)."""
        def change(state):
            queue = state["queue"]
            position = next((i for i, entry in enumerate(queue) if entry[0] == number), None)
            if position is None:            # (the file was removed meanwhile) take a slot
                state["run"].append(self.pid)
                return 0
            if position == 0 and len(state["run"]) < limit:
                del queue[0]
                state["run"].append(self.pid)
                return 0
            self._reclaim(state)
            return position + 1
        return self._change(model, change)

    def leave(self, model: str, number: int) -> None:
        def change(state):
            state["queue"] = [entry for entry in state["queue"] if entry[0] != number]
        self._change(model, change)

    def release(self, model: str) -> None:
        def change(state):
            if self.pid in state["run"]:
                state["run"].remove(self.pid)
        self._change(model, change)

    def counts(self) -> dict[str, tuple[int, int]]:
        """Per model: the host's requests holding a slot and waiting for one."""
        if not self.path.exists():
            return {}
        with open(self.path, "rb") as file:
            fcntl.flock(file.fileno(), fcntl.LOCK_SH)
            raw = file.read()
        models = orjson.loads(raw) if raw else {}
        return {model: (len(state["run"]), len(state["queue"])) for model, state in models.items()}

    def running(self, model: str) -> int:
        return self._change(model, lambda state: len(state["run"]), exclusive=False)


class HostSlots:
    """One model's slots on this host (llmsim.state.serving.Slots, shared through `SlotFile`)."""
    __slots__ = ("file", "model", "limit", "running", "waiting", "_load", "_load_at")

    def __init__(self, file: SlotFile, model: str):
        self.file, self.model = file, model
        self.limit = 1
        self.running = self.waiting = 0     # this process's
        self._load, self._load_at = 0, -LOAD_S

    def enter(self, limit: int | None, queue: int | None, capacity_error):
        """A slot (None) or a place to `wait` for; raises `capacity_error()` when the queue is full."""
        self.limit = limit = HUGE if limit is None else limit
        number = self.file.enter(self.model, limit, queue)
        if number is None:
            self.running += 1
        elif number < 0:
            raise capacity_error()
        else:
            self.waiting += 1
        return number

    async def wait(self, number: int) -> None:
        file, model = self.file, self.model
        try:
            while position := file.take(model, number, self.limit):
                await asyncio.sleep(FIRST_POLL_S if position == 1 else LATER_POLL_S)
        except BaseException:
            file.leave(model, number)
            raise
        finally:
            self.waiting -= 1
        self.running += 1

    def leave(self, number: int) -> None:
        """Give up a place never waited for."""
        self.waiting -= 1
        self.file.leave(self.model, number)

    def release(self) -> None:
        self.running -= 1
        self.file.release(self.model)

    def load(self) -> int:
        """The requests holding a slot on the host (read at most every LOAD_S seconds)."""
        now = time.monotonic()
        if now - self._load_at >= LOAD_S:
            self._load, self._load_at = self.file.running(self.model), now
        return self._load
