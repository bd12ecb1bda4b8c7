"""Background responses: the simulation runs as a server-side task, not tied to a connection.

`Jobs.start` stores the response as `queued` (its `response.created` event) and returns at
once; the task then renders the rest of the event stream on the plan's schedule and appends
each batch of due events to the store, the snapshot following every lifecycle event
(`in_progress`, then `completed`). Each append is conditional on the response still being
active, so a cancel from any process (which appends the final event itself) stops the run.

Readers: `follow` streams a response's events after a sequence number, from this process's
job when it runs here (no polling: woken by each batch), otherwise from the store (polled).
"""
from __future__ import annotations

import asyncio
import logging
from typing import AsyncIterator, Iterator, Protocol, Sequence

from llmsim.pacing import transport
from llmsim.render import sse
from llmsim.render.templates import MarkedEvent
from llmsim.state.prior import Prior
from llmsim.state.store import ACTIVE, Store

log = logging.getLogger("llmsim")
POLL_S = 0.02      # how often a reader in another process looks for new events


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
                   plan=None) -> None: ...

    async def conclude(self, body: dict, prior: Prior, own: list[dict], snapshot) -> None: ...

    async def ended(self, snapshot: dict) -> None: ...


class Jobs:
    """The background responses running in this process."""

    def __init__(self, sim, state: Recorder):
        self.sim = sim
        self.state = state
        self.running: dict[str, Job] = {}

    async def start(self, body: dict, prior: Prior, own: list[dict], events: Iterator[MarkedEvent],
                    start: float, admission=None) -> tuple[Job, dict]:
        """Store the queued response and run the rest of `events` in a task (once `admission`,
        the serving model's slot or place in its queue, when given, has its turn)."""
        try:
            first = next(events)   # (responses.yaml: response.created, status queued)
            snapshot = latest_response([first])
            frame = sse.frame(first)
            await self.state.save(body, prior, own, snapshot, [frame])
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
            async for batch in transport.due_lists(pairs, start, self.sim.clock):
                frames = [sse.frame(event) for event in batch]
                snapshot = latest_response(batch)
                if not await store.append_events(job.id, frames, snapshot, expect_events=len(job.frames)):
                    break     # cancelled, deleted or expired meanwhile
                job.publish(frames)
                if snapshot is not None and snapshot.get("status") not in ACTIVE:
                    await self.state.conclude(body, prior, own, snapshot)
                    await self.state.ended(snapshot)
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
        clock, store = self.sim.clock, self.state.store
        while True:
            frames, status = await store.events(response_id, after)
            if frames:
                after += len(frames)
                yield b"".join(frames)
            if status not in ACTIVE or not live:
                return
            if not frames:
                await clock.sleep_until(clock.now() + POLL_S)
