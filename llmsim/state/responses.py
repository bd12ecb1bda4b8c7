"""Conversation state of the Responses API, over the store: what a request continues
(`previous_response_id` or `conversation`), and what it leaves behind.

A stored response keeps the items it answered: for a `previous_response_id` chain that is the
whole history plus its own input, so continuing any response is one look-up. Input items are
kept as the client sent them (with an id each) and take their API shape (`stored_item` in
templates/store.yaml) when read, which most stored responses never are. A response in a
conversation keeps its own input; the conversation holds the rest and gets the input and
output items appended when the response ends. `store: false` keeps nothing at all.

The WebSocket mode and any other caller use `history(response_id)` (items) or
`history_turns(response_id)` (turns ready for planning), and `save`/`add_to_conversation` to keep what
it answered.
"""
from __future__ import annotations

import logging
from typing import Any, Awaitable, Coroutine, Sequence

import orjson

from llmsim.ids import Ids
from llmsim.errors import (InvalidRequestError, NotFoundError, PreviousResponseNotFoundError, ServerError,
                           ServiceUnavailableError)
from llmsim.pacing import transport
from llmsim.render.jsonbytes import dumps
from llmsim.sim import inputs
from llmsim.state.background import Jobs, alive_here
from llmsim.state.prior import NO_PRIOR, Prior
from llmsim.state.store import Frames, Store, StoredResponse
from llmsim.state.webhooks import Webhooks

log = logging.getLogger("llmsim")

# Item types whose ids have a format of their own (llmsim/data/ids.yaml); others get `item`'s.
ITEM_KINDS = frozenset({"message", "function_call", "function_call_output", "reasoning"})
CANCEL_ATTEMPTS = 20
# A kept Replay holds its request, whose input the entry also keeps as JSON: only requests
# this small (a few KB of text) are kept that way; larger ones are kept as bytes.
REPLAY_MAX_INPUT_TOKENS = 2048


def new_item_id(ids: Ids, item: dict, rng) -> str:
    kind = item.get("type", "message")
    return ids.make(kind if kind in ITEM_KINDS else "item", rng)


def response_not_found(response_id: str) -> NotFoundError:
    return NotFoundError(f"Response with id '{response_id}' not found.", param="response_id")


def conversation_not_found(conversation_id: str, param: str | None = None) -> NotFoundError:
    return NotFoundError(f"Conversation with id '{conversation_id}' not found.", param=param)


def conversation_id(body: dict) -> str | None:
    ref = body.get("conversation")
    return ref.get("id") if isinstance(ref, dict) else ref


def wants_store(body: dict) -> bool:
    return body.get("store") is not False


def _answered(prior: Prior, own: list[dict]) -> list[dict]:
    """The input items a response keeps: a chain's whole history, else its own input."""
    return [*prior.items, *own] if prior.source == "previous_response_id" else own


def _check_background(body: dict) -> None:
    if body.get("background") and not wants_store(body):
        raise InvalidRequestError("Background responses must be stored: store=false cannot be "
                                  "used with background=true.", param="background",
                                  code="unsupported_parameter")


class ResponseState:
    def __init__(self, simulator):
        self.simulator = simulator
        self.store: Store = simulator.store
        self.shapes = simulator.templates["store"]
        self.ids = simulator.ids
        # the events that hold the response (by name), in a stream and in a fault's tail
        self.snapshots = {**simulator.templates["responses"].snapshots, **simulator.templates["faults"].snapshots,
                          **self.shapes.snapshots}
        self.keeps_now = self.store.capabilities.keeps_now     # a store that writes at once (memory)
        self._put_json = self.keeps_now.put_json if self.keeps_now is not None else None
        self._put_replay = self.keeps_now.put_replay if self.keeps_now is not None else None
        self.jobs = Jobs(simulator, self)
        self.webhooks = Webhooks(simulator, self.store)

    def render(self, shape: str, **values) -> Any:
        """A stored shape's value (rendered by the template's generated JSON writer)."""
        return orjson.loads(self.shapes.body_json(shape=shape, **values))

    # ---- what a request continues -------------------------------------------------------
    def prior(self, body: dict) -> Prior | Coroutine[Any, Any, Prior]:
        """What `body` continues: NO_PRIOR at once for a request that continues nothing (most:
        no store read, no coroutine), else a coroutine resolving `previous_response_id` /
        `conversation`. An error when both are given, or when either names nothing (400
        `previous_response_not_found`, as OpenAI answers; 404 for a conversation)."""
        previous = conversation = None
        if "previous_response_id" in body or "conversation" in body:      # (few requests)
            previous, conversation = body.get("previous_response_id"), conversation_id(body)
            if previous and conversation:
                raise InvalidRequestError(
                    "Mutually exclusive parameters: Ensure you are only providing one of: "
                    "'previous_response_id' or 'conversation'.", param="conversation",
                    code="mutually_exclusive_parameters")
        if body.get("background"):
            _check_background(body)
        if previous or conversation:
            return self._read_prior(previous, conversation)
        return NO_PRIOR

    async def _read_prior(self, previous: str | None, conversation: str | None) -> Prior:
        if previous:
            record = await self.store.get_response(previous)
            if record is None:
                raise PreviousResponseNotFoundError(previous)     # 400, as OpenAI (HTTP and WebSocket)
            if record.active:
                raise InvalidRequestError(f"Previous response with id '{previous}' is still "
                                          f"{record.status.replace('_', ' ')}.",
                                          param="previous_response_id")
            return Prior(self.history_of(record), "previous_response_id")
        if conversation:
            items = await self.store.conversation_items(conversation)
            if items is None:
                raise conversation_not_found(conversation, "conversation")
            return Prior(items, "conversation", conversation)
        return NO_PRIOR

    async def history(self, response_id: str) -> list[dict] | None:
        """The store hook: what a follow-up to `response_id` continues (the items it answered,
        then its output), or None when no such response is stored (unknown, deleted, expired)."""
        record = await self.store.get_response(response_id)
        return None if record is None else self.history_of(record)

    async def history_turns(self, response_id: str) -> list[inputs.Turn] | None:
        """`history` as planning turns (`plan_response(..., history=...)`), or None."""
        items = await self.history(response_id)
        return None if items is None else inputs.items_turns(items, "previous_response_id")

    # ---- what a request leaves ------------------------------------------------------------
    def input_items(self, body: dict, rng) -> list[dict]:
        """The request's own input items as kept: as sent, each with an id."""
        raw = body.get("input")
        if isinstance(raw, str):        # a user message, as the list form would give it
            return [{"role": "user", "content": raw, "id": self.ids.make("message", rng)}]
        return [item if item.get("id") else {**item, "id": new_item_id(self.ids, item, rng)} for item in raw or ()]

    def item(self, item: dict, rng) -> dict:
        """An item as a conversation keeps it: in its API shape, with an id."""
        return self.render("stored_item", item=item, item_id=item.get("id") or new_item_id(self.ids, item, rng))

    def shaped(self, items: list[dict]) -> list[dict]:
        """Kept input items in their API shape (shaping a shaped item changes nothing)."""
        return [self.render("stored_item", item=item, item_id=item["id"]) for item in items]

    def inputs_of(self, record: StoredResponse) -> list[dict]:
        return self.shaped(record.input_items)

    def history_of(self, record: StoredResponse) -> list[dict]:
        """The conversation a follow-up continues: what it answered, then what it said."""
        return [*self.shaped(record.input_items), *record.output_items]

    def save(self, body: dict, prior: Prior, own: list[dict], snapshot: dict | bytes | Replay,
             frames: Sequence[bytes] = (), plan=None, owner: str | None = None) -> Awaitable[None] | None:
        """Keep a response (with its first SSE frames) unless the request said `store: false`:
        at once (None: no record, no coroutine) in a store that can keep the JSON a handler
        wrote, else an awaitable that keeps it. `snapshot` is the response object, the JSON a
        handler wrote from `plan` (whose id and status it carries), kept as written, or the
        Replay that renders it when read."""
        if not wants_store(body):
            return None
        answered = _answered(prior, own)
        background = bool(body.get("background"))
        if snapshot.__class__ is bytes:
            if self._put_json is not None:      # a store that keeps it at once
                self._put_json(plan.id, snapshot, plan.status, answered, background, prior.conversation)
                return None
            record = StoredResponse(plan.id, None, answered, background, prior.conversation,
                                    response_json=snapshot, status=plan.status)
        elif snapshot.__class__ is Replay:
            plan = snapshot.plan
            record = StoredResponse(plan.id, None, answered, background, prior.conversation,
                                    status=plan.status, render=snapshot.response_json)
        else:
            record = StoredResponse(snapshot["id"], snapshot, answered, background, prior.conversation,
                                    owner=owner)
        return self.store.put_response(record, frames)

    @staticmethod
    async def _saved(saving: Awaitable[None] | None) -> None:
        if saving is not None:
            await saving

    async def add_to_conversation(self, body: dict, prior: Prior, own: list[dict], snapshot: dict | bytes) -> None:
        """A response ended: its input and output join its conversation, if it has one."""
        if prior.conversation and wants_store(body):
            response = orjson.loads(snapshot) if snapshot.__class__ is bytes else snapshot
            await self.store.add_items(prior.conversation, [*self.shaped(own), *(response.get("output") or [])])

    async def notify_ended(self, snapshot: dict) -> None:
        """A background response ended (completed, failed, incomplete; a cancel says so itself):
        its webhook events."""
        await self.webhooks.notify_ended(snapshot)

    def record_stream(self, chunks: transport.Paced, body: dict, prior: Prior, own: list[dict],
                 replay: Replay | None = None) -> transport.Paced:
        """The same SSE stream, whose events and final response are kept when it ends
        (not when the client left or the stream was dropped). With `replay` (what renders the
        same events again) and a store that keeps what it can render later (the memory
        store), only the number of events is recorded: nothing is parsed, serialised or
        packed unless the response is read (requests of up to `REPLAY_MAX_INPUT_TOKENS`)."""
        recording = Recording(keep_chunks=replay is None or self.keeps_now is None
                              or replay.plan.usage.input_tokens > REPLAY_MAX_INPUT_TOKENS)
        chunks.on_chunk = recording.add
        if recording.keep_chunks:
            chunks.on_end = lambda: self._keep(recording.frames(), body, prior, own)
        else:
            chunks.on_end = lambda: self._keep_replay(replay, recording.events, body, prior, own)
        return chunks

    def _keep_replay(self, replay: Replay, events: int, body: dict, prior: Prior,
                     own: list[dict]) -> Awaitable[None] | None:
        """Keep a stream as what renders it again: at once (no record, no coroutine) in a store
        that can and for a response in no conversation; else an awaitable that does."""
        put = self._put_replay
        if put is None or prior.conversation or body.get("store") is False:     # (wants_store)
            return self._keep_replay_later(replay, events, body, prior, own)
        plan = replay.plan
        put(plan.id, plan.status, replay.response_json, replay.frames_blob, events,
            _answered(prior, own), bool(body.get("background")))
        return None

    async def _keep_replay_later(self, replay: Replay, events: int, body: dict, prior: Prior,
                                 own: list[dict]) -> None:
        await self._saved(self.save(body, prior, own, replay, Frames.later(replay.frames_blob, events)))
        if prior.conversation:          # its output joins the conversation: rendered now
            await self.add_to_conversation(body, prior, own, replay.response_json())

    async def _keep(self, frames: Frames, body: dict, prior: Prior, own: list[dict]) -> None:
        snapshot = latest_snapshot(frames.blob, self.snapshots)
        if snapshot is not None:
            try:
                await self._saved(self.save(body, prior, own, snapshot, frames))
                await self.add_to_conversation(body, prior, own, snapshot)
            except ServiceUnavailableError as exc:      # the stream was sent whole; it is not kept
                log.warning("response %s streamed but not stored: %s", snapshot.get("id"), exc.message)

    # ---- stored responses -----------------------------------------------------------------
    async def get(self, response_id: str) -> StoredResponse:
        record = await self.store.get_response(response_id)
        if record is None:
            raise response_not_found(response_id)
        return record

    async def cancel(self, response_id: str) -> dict:
        """Cancel a queued or running background response, wherever it runs; cancelling a
        cancelled one again returns it; anything else is a 400."""
        for _ in range(CANCEL_ATTEMPTS):
            record = await self.get(response_id)
            if not record.background:
                raise InvalidRequestError("Cannot cancel a synchronous response.", param="response_id")
            if record.status == "cancelled":
                return record.response
            if not record.active:
                raise InvalidRequestError(f"Cannot cancel a {record.status} response.", param="response_id")
            cancelled = self.render("cancelled_response", response=record.response)
            [(_, frame)] = self.shapes.frames(response=cancelled, first_seq=record.events)
            if await self.store.append_events(response_id, [frame], cancelled, expect_events=record.events):
                self.jobs.interrupt(response_id)
                await self.webhooks.notify_ended(cancelled)
                return cancelled
        raise ServerError("The response changed too often to be cancelled; please retry.")


    async def fail_orphans(self) -> int:
        """Mark `failed` (with an error saying why) every background response a stopped server
        left queued or running in a persistent store: whose owner is gone (llmsim.state.background:
        its process on this machine is no more, or its lease ran out). How many there were."""
        leases = self.store.capabilities.leases
        if leases is None:
            return 0
        mine, running = self.jobs.owner, self.jobs.running
        records = [record for response_id in await leases.active_responses() if response_id not in running
                   and (record := await self.store.get_response(response_id)) is not None and record.active
                   and record.owner != mine]
        here = {owner: alive_here(owner) for owner in {record.owner for record in records} - {None}}
        elsewhere = sorted(owner for owner, alive in here.items() if alive is None)
        leased = await leases.live_owners(elsewhere) if elsewhere else set()
        failed_count = 0
        for record in records:
            if record.owner is not None and (here[record.owner] or record.owner in leased):
                continue
            response_id = record.id
            failed = self.render("orphaned_response", response=record.response)
            [(_, frame)] = self.shapes.frames(response=failed, first_seq=record.events)
            if await self.store.append_events(response_id, [frame], failed, expect_events=record.events):
                failed_count += 1
        if failed_count:
            log.warning("%d background responses left running by a stopped server marked failed", failed_count)
        return failed_count


class Recording:
    """The events of a stream as written (keep-alive comments left out), counted as they go;
    without `keep_chunks`, only counted."""
    __slots__ = ("chunks", "events", "keep_chunks")

    def __init__(self, keep_chunks: bool = True):
        self.chunks: list[bytes] = []
        self.events = 0
        self.keep_chunks = keep_chunks

    def add(self, batch: list, chunk: bytes) -> None:
        if batch:
            if self.keep_chunks:
                self.chunks.append(chunk)
            self.events += len(batch)

    def frames(self) -> Frames:
        return Frames(b"".join(self.chunks), self.events)


class Replay:
    """A stream rendered again, byte for byte, from the template and plan it was rendered
    from (rendering depends on nothing else), in place of its kept bytes. Its response is
    the last snapshot event's, as a kept stream's is (a template whose stream has none:
    its body)."""
    __slots__ = ("template", "plan", "req")

    def __init__(self, template, plan, req: dict):
        self.template, self.plan, self.req = template, plan, req

    def frames_blob(self) -> bytes:
        return b"".join([frame for _, frame in self.template.frames(plan=self.plan, req=self.req)])

    def response_json(self) -> bytes:
        last = None
        for event in self.template.marked(plan=self.plan, req=self.req):
            if event.role.snapshot is not None:
                last = event
        if last is None:
            return self.template.body_json(plan=self.plan, req=self.req)
        return dumps(last.data[last.role.snapshot])


def latest_snapshot(stream: bytes, snapshots: dict[str | None, str]) -> dict | None:
    """The response object of the last snapshot event in SSE bytes: the state a GET returns.
    `snapshots` maps each event name (None: unnamed) whose step declares `snapshot` to the
    key of its data holding the response (`Template.snapshots`). Only the frames holding
    such a key are parsed, from the end."""
    found, found_at = None, -1
    for key in set(snapshots.values()):
        needle = b'"' + key.encode() + b'":{'
        end = len(stream)
        while (at := stream.rfind(needle, 0, end)) > found_at:
            before = stream.rfind(b"\n\n", 0, at)
            start = before + 2 if before >= 0 else 0
            stop = stream.find(b"\n\n", at)
            end = start
            if start <= found_at:
                break
            head, _, data = stream[start:stop if stop >= 0 else len(stream)].partition(b"data: ")
            name = head[len(b"event: "):].rstrip(b"\n").decode() if head.startswith(b"event: ") else None
            if snapshots.get(name) != key:
                continue
            try:
                event = orjson.loads(data)
            except orjson.JSONDecodeError:
                continue
            if isinstance(event, dict) and isinstance(event.get(key), dict):
                found, found_at = event[key], start
                break
    return found
