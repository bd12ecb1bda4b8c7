"""Background responses: the simulation runs as a server-side task, not tied to a connection.

`Jobs.start` stores the response `queued` and returns; its task appends each batch of due
events to the store. Invariants: every append is conditional on the response still being
active, so a cancel from any process stops the run; a response a stopped server left running
is never resumed, only marked `failed` (`orphaned_response`), and only once its owner (machine,
pid, start time) is gone here or its lease ran out (`Leases`, a store capability).
The story: docs/internals.md#statebackground, docs/durability.md.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
from typing import AsyncIterator, Iterator, Protocol, Sequence

from llmsim.pacing import transport
from llmsim.render import sse
from llmsim.render.templates import MarkedEvent
from llmsim.state.prior import Prior
from llmsim.state.store import ACTIVE, Store

log = logging.getLogger("llmsim")
POLL_S = 0.02      # how often a reader in another process looks for new events
STOP_WAIT_S = 5.0  # how long a stopping server waits for the background responses it ended to be kept


def _proc(path: str) -> str:
    try:
        with open(path) as file:
            return file.read().strip()
    except OSError:
        return ""


def _start_time(pid: int | str) -> str:
    """When process `pid` started (clock ticks since boot: /proc/PID/stat's 22nd field); '' if
    there is no such process (or no /proc)."""
    fields = _proc(f"/proc/{pid}/stat").rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 and fields[0] != "Z" else ""     # (a zombie is gone)


@functools.cache
def _machine() -> str:
    """This host, boot and pid namespace: where a pid names one process."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return f"{socket.gethostname()}|{_proc('/proc/sys/kernel/random/boot_id')}|{namespace}"


def owner_id() -> str:
    """This process, as the owner of the background responses it runs: its machine, pid and
    start time (a later process with the same pid is another owner)."""
    pid = os.getpid()
    return f"{_machine()}|{pid}|{_start_time(pid)}"


def alive_here(owner: str) -> bool | None:
    """Whether the process `owner` (an `owner_id`) of this machine and pid namespace still
    runs; None for another machine's (only its lease tells)."""
    parts = owner.split("|")
    if len(parts) != 5 or not parts[1] or "|".join(parts[:3]) != _machine():
        return None
    return _start_time(parts[3]) == parts[4]


class Job:
    """One background response run by this process: its frames so far, and who waits."""

    def __init__(self, response_id: str, frames: list[bytes]):
        self.id = response_id
        self.frames = frames
        self.done = False
        self.task: asyncio.Task | None = None
        self._changed = asyncio.Event()

    def publish(self, frames: list[bytes]) -> None:
        if frames:
            self.frames.extend(frames)
            self._wake()

    def finish(self) -> None:
        self.done = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def follow(self, after: int) -> AsyncIterator[bytes]:
        sent = after + 1
        while True:
            changed = self._changed
            if sent < len(self.frames):
                chunk = b"".join(self.frames[sent:])
                sent = len(self.frames)
                yield chunk
            elif self.done:
                return
            else:
                await changed.wait()


def latest_response(batch: list[MarkedEvent]) -> dict | None:
    """The response object of the batch's last event whose step declares a `snapshot`."""
    for event in reversed(batch):
        key = event.role.snapshot
        if key is not None:
            return event.data[key]
    return None


class Recorder(Protocol):
    """What background responses need of the response state (llmsim.state.responses.ResponseState)."""
    store: Store

    async def save(self, body: dict, prior: Prior, own: list[dict], snapshot, frames: Sequence[bytes] = (),
                   plan=None, owner: str | None = None) -> None: ...

    async def add_to_conversation(self, body: dict, prior: Prior, own: list[dict], snapshot) -> None: ...

    async def notify_ended(self, snapshot: dict) -> None: ...

    async def fail_orphans(self) -> int: ...


class Jobs:
    """The background responses running in this process."""

    def __init__(self, simulator, state: Recorder):
        self.simulator = simulator
        self.state = state
        self.running: dict[str, Job] = {}
        self.lease_s = simulator.settings.background_lease_s
        self._leasing: asyncio.Task | None = None
        self._owner: tuple[int, str] | None = None

    @property
    def owner(self) -> str:
        """`owner_id()`, read once per process (a forked worker is another)."""
        pid = os.getpid()
        if self._owner is None or self._owner[0] != pid:
            self._owner = (pid, owner_id())
        return self._owner[1]

    def serving(self) -> None:
        """The server started: keep this process's lease and sweep others' orphans, when the
        store is shared (it can keep leases)."""
        if self.state.store.capabilities.leases is not None and self._leasing is None:
            self._leasing = asyncio.create_task(self._lease())

    async def stopped(self) -> None:
        """The server stops: its lease is no longer renewed; the background responses a
        shutdown ended (llmsim.pacing.draining) have up to `STOP_WAIT_S` to keep their ending."""
        if self._leasing is not None:
            self._leasing.cancel()
            await asyncio.wait([self._leasing])
            self._leasing = None
        ending = [job.task for job in self.running.values() if job.task is not None]
        if ending and self.simulator.drain.ended:
            await asyncio.wait(ending, timeout=STOP_WAIT_S)

    async def _lease(self) -> None:
        """Renew this process's lease every lease_s / 3 seconds, then fail the background
        responses whose owner is gone (a store out of reach: next time)."""
        leases, owner = self.state.store.capabilities.leases, self.owner
        while True:
            try:
                await leases.renew_lease(owner, self.lease_s)
                await self.state.fail_orphans()
            except Exception as exc:    # noqa: BLE001 - e.g. Redis away: 503s say so already
                log.warning("background responses: could not renew the lease or sweep: %s", exc)
            await asyncio.sleep(self.lease_s / 3)

    async def start(self, body: dict, prior: Prior, own: list[dict], events: Iterator[MarkedEvent],
                    start: float, admission=None) -> tuple[Job, dict]:
        """Store the queued response and run the rest of `events` in a task (once `admission`,
        the serving model's slot or place in its queue, when given, has its turn)."""
        try:
            first = next(events)   # (responses.yaml: response.created, status queued)
            snapshot = latest_response([first])
            frame = sse.frame(first)
            if (saving := self.state.save(body, prior, own, snapshot, [frame], owner=self.owner)) is not None:
                await saving
        except BaseException:
            if admission is not None:
                admission.abandon()
            raise
        job = Job(snapshot["id"], [frame])
        self.running[job.id] = job
        job.task = asyncio.create_task(self._run(job, body, prior, own, events, start, admission))
        return job, snapshot

    async def _run(self, job: Job, body: dict, prior: Prior, own: list[dict],
                   events: Iterator[MarkedEvent], start: float, admission=None) -> None:
        store = self.state.store
        ticket = None
        try:
            pairs = ((event.at, event) for event in events)
            if admission is not None:       # queued until the serving model gives it a slot
                ticket = await admission.ticket()
                start, pairs = ticket.start, ticket.timed(pairs)
            # (a shutdown's graceful timeout ends it: the rest of `events`, a stoppable
            # stream, is then its terminal error, which followers read too)
            async for batch in transport.due_lists(pairs, start, self.simulator.clock, until="ended",
                                                   drain=self.simulator.drain):
                frames = [sse.frame(event) for event in batch]
                snapshot = latest_response(batch)
                if not await store.append_events(job.id, frames, snapshot, expect_events=len(job.frames)):
                    break     # cancelled, deleted or expired meanwhile
                job.publish(frames)
                if snapshot is not None and snapshot.get("status") not in ACTIVE:
                    await self.state.add_to_conversation(body, prior, own, snapshot)
                    await self.state.notify_ended(snapshot)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("background response %s failed", job.id)
        finally:
            if ticket is not None:
                ticket.release()
            elif admission is not None:
                admission.abandon()
            try:
                more, _ = await store.events(job.id, len(job.frames) - 1)   # e.g. a cancel's event
                job.publish(more)
            except Exception:
                log.exception("background response %s: could not read its last events", job.id)
            job.finish()
            self.running.pop(job.id, None)

    def interrupt(self, response_id: str) -> None:
        """Stop this process's run of a response that was just cancelled."""
        job = self.running.get(response_id)
        if job is not None and job.task is not None:
            job.task.cancel()

    async def follow(self, response_id: str, after: int, live: bool = True) -> AsyncIterator[bytes]:
        """SSE bytes of the events after sequence number `after`: until the response ends when
        `live` (a background response, possibly running in another process), else those stored."""
        job = self.running.get(response_id)
        if job is not None:
            async for chunk in job.follow(after):
                yield chunk
            return
        clock, store = self.simulator.clock, self.state.store
        while True:
            frames, status = await store.events(response_id, after)
            if frames:
                after += len(frames)
                yield b"".join(frames)
            if status not in ACTIVE or not live:
                return
            if not frames:
                await clock.sleep_until(clock.now() + POLL_S)
