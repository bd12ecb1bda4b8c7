"""Plan one answer: everything a template and a transport need, computed once per request.

A plan is plain data: ids, the visible text cut into tokens with their due times, the
reasoning tokens and summary, tool calls, usage and the schedule. It depends only on the
request, the settings, the model catalogue and an injected random generator, so the same
seed and the same requests give the same plan.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Iterator

from llmsim.sim import builtins, inputs, latency, logprobs, steps, structured, textgen, toolcalls
from llmsim.sim.steps import Context
from llmsim.sim.scenarios import Answer


LOGPROBS = "message.output_text.logprobs"     # the `include` value that asks for logprobs


@dataclass(slots=True)
class Token:
    text: str
    at: float


@dataclass(slots=True)
class SummaryPart:
    index: int
    text: str
    deltas: list[Token]


@dataclass(slots=True)
class ReasoningItem:
    id: str
    tokens: int
    summary: list[SummaryPart] | None      # None: no summary was requested
    encrypted_content: str | None
    start_at: float
    end_at: float
    kind: str = "reasoning"


class TimedPieces:
    """Visible text as `pieces` (one per token) and their due `times`; a stream template
    walks `timed_pieces`, (piece, due time) pairs, which no object per token is made for.
    `logprobs` (None unless the request asked for them) holds one entry per piece
    (llmsim.sim.logprobs.TokenLogprob); `timed_logprobs` walks (piece, due time, entry)."""
    __slots__ = ()

    @property
    def timed_pieces(self) -> Iterator[tuple[str, float]]:
        return zip(self.pieces, self.times)

    @property
    def timed_logprobs(self) -> Iterator[tuple[str, float, Any]]:
        return zip(self.pieces, self.times, self.logprobs or ())

    def keep(self, k: int) -> None:
        """Only the first k tokens (and the text they make)."""
        self.pieces, self.times = self.pieces[:k], self.times[:k]
        self.text = "".join(self.pieces)
        if self.logprobs is not None:
            self.logprobs = self.logprobs[:k]

    def shift(self, delta: float) -> None:
        """Every token `delta` seconds later."""
        self.times = tuple(t + delta for t in self.times)


@dataclass(slots=True)
class MessageItem(TimedPieces):
    id: str
    text: str
    pieces: tuple[str, ...]
    times: tuple[float, ...]
    start_at: float
    status: str = "completed"
    kind: str = "message"
    logprobs: list | None = None
    citations: tuple = ()      # builtins.Citation: url_citation annotations (a web search's)

    @property
    def end_at(self) -> float:
        """When its last token is due (a refusal item's output_item.done)."""
        return self.times[-1] if self.times else self.start_at

    @property
    def annotations(self) -> list:
        """The citations that lie within the text (all of them, unless a fault cut it short)."""
        n = len(self.text)
        return [c for c in self.citations if c.end <= n]


@dataclass(slots=True)
class Usage:
    input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    total_tokens: int
    cached_tokens: int = 0

    @classmethod
    def make(cls, input_tokens: int, visible: int, reasoning: int, semantics: str) -> "Usage":
        if semantics == "openai":
            return cls(input_tokens, visible + reasoning, reasoning, input_tokens + visible + reasoning)
        return cls(input_tokens, visible, reasoning, input_tokens + visible + reasoning)

    def with_visible(self, visible: int) -> "Usage":
        """The same usage (input, reasoning, cached, semantics) with `visible` output tokens
        (what a fault that cuts the answer leaves)."""
        old = self.total_tokens - self.input_tokens - self.reasoning_tokens
        return Usage(self.input_tokens, self.output_tokens - old + visible, self.reasoning_tokens,
                     self.total_tokens - old + visible, self.cached_tokens)


@dataclass(slots=True)
class Plan:
    """One simulated answer. `output` holds items in order; `end_at` is when it is done."""
    id: str
    created_at: int
    model: str
    req: dict[str, Any]
    output: list[Any]
    usage: Usage
    status: str
    incomplete_reason: str | None
    first_token_at: float
    end_at: float
    effort: str | None = None

    @property
    def output_text(self) -> str:
        output = self.output
        if len(output) == 1:        # most answers: one message (no generator to run)
            item = output[0]
            return item.text if item.kind == "message" else ""
        return "".join([item.text for item in output if item.kind == "message"])

    @property
    def completed_at(self) -> int:
        return self.created_at + int(self.end_at)

    # -- the Plan protocol (llmsim.sim.plans) --
    def token_times(self) -> list:
        """The due times of each message item's tokens (reasoning and calls have none here)."""
        return [times for item in self.output if (times := getattr(item, "times", None)) is not None and len(times)]

    def cut(self, k: int) -> None:
        """A content filter stopped the message after k tokens: incomplete, reason content_filter."""
        visible = 0
        for item in self.output:
            if item.kind == "message":
                item.keep(k)
                item.status = "incomplete"
                visible += len(item.pieces)
                if item.times:
                    self.end_at = item.times[-1]
        self.status, self.incomplete_reason = "incomplete", "content_filter"
        self.usage = self.usage.with_visible(visible)

    def truncate(self) -> None:
        """Cut mid-value (messages in half, the last call's arguments in half): incomplete,
        reason max_output_tokens."""
        messages = [item for item in self.output if item.kind in ("message", "refusal")]
        calls = [item for item in self.output if item.kind == "function_call"]
        visible = 0
        for item in messages:
            item.keep(len(item.pieces) // 2)
            item.status = "incomplete"
            visible += len(item.pieces)
            if item.times:
                self.end_at = item.times[-1]
        if calls:
            visible += toolcalls.halve(calls)
            self.end_at = calls[-1].end_at
        self.status, self.incomplete_reason = "incomplete", "max_output_tokens"
        self.usage = self.usage.with_visible(visible)


def plan_response(body: dict, ctx: Context, history: list[inputs.Turn] | None = None,
                  generate: bool = True, script: Answer | None = None) -> Plan:
    """Plan a Responses API answer (reasoning item, a built-in tool's items, then the message;
    or reasoning and function calls).

    `history` is the conversation a `previous_response_id` continues (it counts as input);
    `generate=False` (a WebSocket warm-up) plans a completed response with no output and no latency;
    `script` (llmsim.sim.scenarios.Answer) is said instead of generated text or calls.
    """
    # Checks whose answer is known at once are not called (a Python call costs more than the
    # test, and most requests pass them all): images for a vision model, the context window,
    # effort for a model that does not reason, tools for a request naming none.
    rng, rules, model = ctx.rng, ctx.rules, ctx.model
    turns = inputs.responses_turns(body)
    if history:
        turns = [*history, *turns]
    if not model.vision:
        inputs.check_vision(turns, model)
    input_tokens = inputs.count(turns, model.encoding)
    cap = body.get("max_output_tokens")
    if input_tokens > model.context_window or cap is not None:
        steps.check_context(ctx, input_tokens, cap, "max_output_tokens")
    reasoning_req = body.get("reasoning") or {}
    effort = steps.effort(ctx, reasoning_req.get("effort"), "reasoning.effort") if model.reasons else None
    tools = body.get("tools") or body.get("tool_choice") is not None
    tool_req = toolcalls.responses_request(body) if tools else None
    if not generate:
        usage = Usage.make(input_tokens, 0, 0, ctx.settings.usage)
        return Plan(ctx.ids.make("response", rng), ctx.created_at, body["model"], body, [], usage,
                    "completed", None, 0.0, 0.0, effort)
    names = builtin = None
    if tools and script is None:
        last_role = turns[-1].role if turns else None
        decision = builtins.choose(body, tool_req, rng, ctx.settings.tool_call_probability, last_role)
        builtin = decision if isinstance(decision, dict) else None
        if decision is None or decision == builtins.FUNCTION:   # FUNCTION: a call is already decided
            probability = 1.0 if decision else ctx.settings.tool_call_probability
            names = toolcalls.choose(tool_req, rng, probability, last_role)
    if script is not None and script.calls:
        return _plan_calls(body, ctx, steps.script_calls(script, ctx), input_tokens, cap, effort)
    if names:
        return _plan_calls(body, ctx, toolcalls.make_calls(names, tool_req, rng, model.encoding, ctx.ids),
                           input_tokens, cap, effort)
    schema = structured.responses_schema(body) if "text" in body else None
    text = (steps.visible_text(ctx, turns, cap, schema) if script is None
            else steps.scripted_text(script, cap, model.encoding))
    reasoning_tokens = rules.tokens(effort, text.tokens) if effort is not None else 0
    sched = latency.schedule(ctx.profile, rng, reasoning_tokens, len(text.pieces))
    response_id = ctx.ids.make("response", rng)
    output: list[Any] = []
    if reasoning_tokens:
        output.append(_reasoning_item(body, ctx, reasoning_tokens, reasoning_req.get("summary"), sched))
    message = MessageItem(ctx.ids.make("message", rng), text.text, text.pieces, sched.token_times,
                          sched.reasoning_end, "incomplete" if text.truncated else "completed")
    if script is not None and script.refusal:
        message.kind = "refusal"            # a message whose content is a refusal part
    if "include" in body and LOGPROBS in (body["include"] or ()):
        message.logprobs = logprobs.make(text.pieces, body.get("top_logprobs") or 0,
                                         body.get("temperature"), rng, model.encoding)
    output.append(message)
    end = sched.end
    if builtin is not None:     # the tool's item(s) first, then the message, later by the tool's time
        items = builtins.make(builtin, body, ctx, inputs.last_user_text(turns), sched.reasoning_end)
        delay = items[-1].end_at - sched.reasoning_end
        message.start_at += delay
        message.shift(delay)
        end += delay
        output[-1:-1] = items
        if items[0].kind == "web_search_call":
            message.citations = tuple(builtins.citations(items[0].urls, message.text))
    usage = Usage.make(input_tokens, text.tokens, reasoning_tokens, ctx.settings.usage)
    return Plan(response_id, ctx.created_at, body["model"], body, output, usage,
                "incomplete" if text.truncated else "completed",
                "max_output_tokens" if text.truncated else None,
                sched.first_token, end, effort)


def _plan_calls(body: dict, ctx: Context, calls: list[toolcalls.FunctionCall], input_tokens: int,
                cap: int | None, effort: str | None) -> Plan:
    """A Responses answer that calls functions: reasoning item, then one function_call item per call."""
    if cap is not None:
        calls = toolcalls.fit(calls, cap, ctx.model.encoding)
    visible = sum(call.tokens for call in calls)
    reasoning_tokens = ctx.rules.tokens(effort, visible)
    sched = latency.schedule(ctx.profile, ctx.rng, reasoning_tokens, toolcalls.units(calls))
    toolcalls.place(calls, sched.token_times, sched.reasoning_end)
    response_id = ctx.ids.make("response", ctx.rng)
    output: list[Any] = []
    if reasoning_tokens:
        summary_kind = (body.get("reasoning") or {}).get("summary")
        output.append(_reasoning_item(body, ctx, reasoning_tokens, summary_kind, sched))
    output.extend(calls)
    cut = toolcalls.truncated(calls)
    usage = Usage.make(input_tokens, visible, reasoning_tokens, ctx.settings.usage)
    return Plan(response_id, ctx.created_at, body["model"], body, output, usage,
                "incomplete" if cut else "completed", "max_output_tokens" if cut else None,
                sched.first_token, sched.end, effort)


def _reasoning_item(body: dict, ctx: Context, n_tokens: int, summary_kind: str | None,
                    sched: latency.Schedule) -> ReasoningItem:
    rng = ctx.rng
    summary = None
    words = ctx.rules.summary_words(summary_kind, n_tokens)
    if words:
        text = textgen.words_text(words, rng)
        pieces = [w if i == 0 else " " + w for i, w in enumerate(text.split(" "))]
        times = latency.spread(sched.first_token, sched.reasoning_end, len(pieces))
        summary = [SummaryPart(0, text, [Token(p, t) for p, t in zip(pieces, times)])]
    encrypted = None
    if "reasoning.encrypted_content" in (body.get("include") or ()):
        encrypted = "gAAAAA" + base64.urlsafe_b64encode(rng.randbytes(96)).decode()
    return ReasoningItem(ctx.ids.make("reasoning", rng), n_tokens, summary, encrypted,
                         sched.first_token, sched.reasoning_end)
