"""Plan one Chat Completions answer: n choices, each text or tool calls, with due times.

Shares the Responses planning core (responses_plan.Context, inputs, textgen, latency, reasoning
rules, toolcalls). Per choice: the visible output (text, or calls) is planned first;
reasoning tokens follow from it with the same effort multipliers and are spent before the
first visible token. All choices share one time to first token. `chunks` is the merged,
time-ordered stream: per choice a role chunk when its first token is due, one chunk per
token (or tool-call start and argument fragment), and a finish chunk.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter
from typing import Any, Iterable, Iterator, NamedTuple

from llmsim.errors import InvalidRequestError
from llmsim.sim import inputs, latency, logprobs, steps, structured, toolcalls, vllm
from llmsim.sim.responses_plan import Context, TimedPieces, Usage
from llmsim.sim.scenarios import Answer

# Content part types each role may send; every part carries its payload under its type's name.
PART_TYPES = {
    "system": ("text",), "developer": ("text",), "tool": ("text",), "function": ("text",),
    "user": ("text", "image_url", "input_audio", "file"),
    "assistant": ("text", "refusal"),
}
# Fields a message of each role must carry besides `role` (assistant: content or a call).
REQUIRED_FIELDS = {"system": ("content",), "developer": ("content",), "user": ("content",),
                   "tool": ("content", "tool_call_id"), "function": ("content", "name"),
                   "assistant": ()}


@dataclass(slots=True)
class Choice(TimedPieces):
    index: int
    text: str | None                       # None when the choice calls tools
    pieces: tuple[str, ...]                # one per visible token (`tokens`: with due times)
    times: tuple[float, ...]
    tool_calls: list[toolcalls.FunctionCall]
    finish_reason: str
    first_at: float
    end_at: float
    visible_tokens: int
    reasoning_tokens: int
    logprobs: list[logprobs.TokenLogprob] | None = None   # requested: one per piece ([] for calls)
    refusal: str | None = None             # a refusal's text (its pieces are the refusal's; text None)


# The chunk kinds that carry one output token each (chat.yaml's `delta`).
DELTA_KINDS = frozenset(("content", "tool_call", "arguments", "content_logprobs", "refusal"))


class Chunk(NamedTuple):
    """One streamed chunk; `kind` names the template object `chat_{kind}_choice` that renders
    it. The stream template unpacks each (chat.yaml), so a plain tuple of these seven serves
    as well (`text_chunks` makes those: cheaper to build). A content chunk of a choice with
    logprobs carries its token's entry in `logprob`."""
    kind: str                              # role | content | content_logprobs | tool_call | arguments | finish
    choice: Choice
    at: float
    text: str = ""
    call: toolcalls.FunctionCall | None = None
    call_index: int = 0
    logprob: logprobs.TokenLogprob | None = None


@dataclass(slots=True)
class ChatPlan(steps.Choices):     # (the Plan protocol: finish_reason content_filter / length)
    id: str
    created: int
    model: str
    req: dict[str, Any]
    choices: list[Choice]
    usage: Usage
    first_token_at: float
    end_at: float
    effort: str | None
    include_usage: bool
    service_tier: str
    _chunks: list[Chunk] | None = field(default=None, repr=False, compare=False)
    continuous_usage: bool = False          # --compat vllm: every chunk carries the usage so far

    @property
    def counted_chunks(self) -> Iterator[tuple]:
        """`chunks`, each with the output tokens sent up to it (stream_options.continuous_usage_stats)."""
        sent = 0
        for chunk in self.chunks:
            if chunk[0] in DELTA_KINDS:
                sent += 1
            yield (*chunk, sent)

    @property
    def chunks(self) -> Iterable[Chunk]:
        """The merged stream. One choice without tool calls is already in time order, and its
        chunks are made as the stream reads them (an open stream holds no list of them);
        otherwise the merged list is built on first use."""
        if self._chunks is None and len(self.choices) == 1 and not self.choices[0].tool_calls:
            return text_chunks(self.choices[0])
        if self._chunks is None:
            self._chunks = merged_chunks(self.choices)
        return self._chunks

    def replan_chunks(self) -> None:
        """The choices changed (a content filter cut them): build the stream again."""
        self._chunks = None

    @property
    def time_to_first_token(self) -> float:
        """Simulated time to the first visible token, in ms."""
        return round(self.first_token_at * 1000, 3)

    @property
    def throughput_after_first_token(self) -> float | None:
        """Simulated tokens per second after the first one (None when all came at once)."""
        span = self.end_at - self.first_token_at
        if not span > 0:                # (an instant answer: nothing to count)
            return None
        choices = self.choices
        later = (choices[0].visible_tokens if len(choices) == 1       # (no generator to run)
                 else sum([c.visible_tokens for c in choices])) - 1
        return round(later / span, 3) if later > 0 else None


def check_messages(messages: list[dict]) -> None:
    """What the request schema cannot say: per-role required fields and content part types."""
    for i, message in enumerate(messages):
        role = message["role"]
        for name in REQUIRED_FIELDS[role]:
            if message.get(name) is None:
                where = f"messages[{i}]"
                raise InvalidRequestError(f"Missing required parameter: '{where}.{name}'.",
                                          param=f"{where}.{name}", code="missing_required_parameter")
        if role == "assistant" and message.get("content") is None and not (
                message.get("tool_calls") or message.get("function_call") or message.get("refusal")):
            where = f"messages[{i}]"
            raise InvalidRequestError(
                f"Missing required parameter: '{where}.content' (or '{where}.tool_calls').",
                param=f"{where}.content", code="missing_required_parameter")
        content = message.get("content")
        if not isinstance(content, list):
            continue
        allowed, where = PART_TYPES[role], f"messages[{i}]"
        for j, part in enumerate(content):
            kind, at = part["type"], f"{where}.content[{j}]"
            if kind not in allowed:
                raise InvalidRequestError(
                    f"Invalid value: '{kind}'. Supported values are: {', '.join(repr(a) for a in allowed)}.",
                    param=f"{at}.type", code="invalid_value")
            if part.get(kind) is None:
                raise InvalidRequestError(f"Missing required parameter: '{at}.{kind}'.",
                                          param=f"{at}.{kind}", code="missing_required_parameter")


def turns(body: dict) -> list[inputs.Turn]:
    """The conversation of a Chat request as turns (what scenarios count and rules read)."""
    return inputs.chat_turns(body["messages"])


def plan_chat(body: dict, ctx: Context, script: Answer | None = None,
              history: list[inputs.Turn] | None = None) -> ChatPlan:
    """Plan a Chat Completions answer of `n` choices.

    `script` (llmsim.sim.scenarios.Answer): said by every choice instead of generated text or
    calls; `history`: turns said before the request's messages (counted as input)."""
    messages = body["messages"]
    check_messages(messages)
    # Checks whose answer is known at once are not called, as in llmsim.sim.responses_plan.plan_response.
    model = ctx.model
    turns = inputs.chat_turns(messages)
    if history:
        turns = [*history, *turns]
    if not model.vision:
        inputs.check_vision(turns, model)
    prompt_tokens = inputs.count(turns, model.encoding)
    param = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    cap = body.get(param)
    if prompt_tokens > model.context_window or cap is not None:
        steps.check_context(ctx, prompt_tokens, cap, param)
    effort = steps.effort(ctx, body.get("reasoning_effort"), "reasoning_effort") if model.reasons else None
    tools = body.get("tools") or body.get("tool_choice") is not None
    tool_req = toolcalls.chat_request(body) if tools else None
    last_role = turns[-1].role if tool_req is not None and turns else None     # (read only with tools)
    stops = steps.stop_list(stop) if (stop := body.get("stop")) else []
    schema = structured.chat_schema(body) if "response_format" in body else None
    sampling = (vllm.sampling(body, cap if cap is not None else model.max_output_tokens)
                if ctx.settings.compat == "vllm" else None)
    choices = []
    first_token = None
    visible = reasoning = 0
    for index in range(body.get("n") or 1):
        choice, sched = plan_choice(index, ctx, turns, cap, effort, tool_req, last_role, stops, schema, script,
                                    sampling)
        if first_token is None:
            first_token = sched.first_token
        elif first_token != sched.first_token:
            steps.shift_choice(choice, first_token - sched.first_token)
        visible += choice.visible_tokens
        reasoning += choice.reasoning_tokens
        choices.append(choice)
    if len(choices) == 1:
        first_at, end_at = choices[0].first_at, choices[0].end_at
    else:
        first_at, end_at = min(c.first_at for c in choices), max(c.end_at for c in choices)
    usage = Usage.make(prompt_tokens, visible, reasoning, ctx.settings.usage)
    tier = body.get("service_tier")
    include_usage = bool(body.get("stream") and (body.get("stream_options") or {}).get("include_usage"))
    plan_id = ctx.ids.make("chat_completion", ctx.rng)
    if body.get("logprobs"):          # drawn last: the rest of the plan is the same without them
        for choice in choices:
            if choice.refusal is not None:
                continue
            choice.logprobs = logprobs.make(choice.pieces, body.get("top_logprobs") or 0,
                                            body.get("temperature"), ctx.rng, model.encoding)
    return ChatPlan(plan_id, ctx.created_at, body["model"], body, choices,
                    usage, first_at, end_at, effort, include_usage,
                    "default" if tier in (None, "auto") else tier,
                    continuous_usage=include_usage and continuous_usage(body, ctx))


def plan_choice(index: int, ctx: Context, turns: list, cap: int | None, effort: str | None,
                tool_req: toolcalls.ToolRequest | None, last_role: str | None, stops: list[str],
                schema: dict | None = None, script: Answer | None = None,
                sampling: vllm.Sampling | None = None):
    """One choice and its schedule: text or calls first, then the reasoning that led to it.
    `tool_req` None: the request names no tools; `schema`: the JSON the text must fit;
    `script`: what the choice says instead (llmsim.sim.scenarios.Answer); `sampling`: vLLM's
    answer-changing parameters (--compat vllm)."""
    rng, enc, s = ctx.rng, ctx.model.encoding, ctx.settings
    names, calls, text = steps.said(ctx, tool_req, last_role, turns, schema, script)
    if names:
        wanted = sum(c.tokens for c in calls)
    else:
        if sampling is not None and schema is None:     # (JSON that fits a schema is never lengthened)
            text = vllm.shape(text, sampling, stops, cap, enc)
        elif stops:
            text = steps.stop(text, stops, enc)
        wanted = text.tokens
    reasoning = ctx.rules.tokens(effort, wanted) if effort is not None else 0
    room = cap
    if cap is not None:         # (it spends the cap first)
        reasoning, room = steps.within_cap(reasoning, cap, s.usage == "openai")
    if names:
        if room is not None and wanted > room:
            calls = toolcalls.fit(calls, room, enc)
        units = toolcalls.units(calls)
    else:
        if room is not None and text.tokens > room:
            text = steps.cut_text(text, room, enc)
        units = len(text.pieces)
    sched = latency.schedule(ctx.profile, rng, reasoning, units)
    first_at = sched.token_times[0] if sched.token_times else sched.reasoning_end
    if names:
        toolcalls.place(calls, sched.token_times, first_at)
        finish = "length" if toolcalls.truncated(calls) else "tool_calls"
        choice = Choice(index, None, (), (), calls, finish, first_at, sched.end,
                        sum(c.tokens for c in calls), reasoning)
    else:
        choice = Choice(index, text.text, text.pieces, sched.token_times, [],
                        "length" if text.truncated else "stop", first_at, sched.end,
                        text.tokens, reasoning)
        if script is not None and script.refusal:
            choice.text, choice.refusal = None, text.text
    return choice, sched


def continuous_usage(body: dict, ctx: Context) -> bool:
    """vLLM's stream_options.continuous_usage_stats (only --compat vllm's schema admits it)."""
    return bool(ctx.settings.compat == "vllm" and (body.get("stream_options") or {}).get("continuous_usage_stats"))


def text_chunks(choice: Choice) -> Iterator[tuple]:
    """A choice without tool calls, chunk by chunk (`Chunk`'s fields): role, content (times
    only grow), finish."""
    yield "role", choice, choice.first_at, "", None, 0, None
    # zip makes each token's chunk (no Python step per token: the stream's hottest loop)
    if choice.logprobs is None:
        kind = "content" if choice.refusal is None else "refusal"
        yield from zip(repeat(kind), repeat(choice), choice.times, choice.pieces, repeat(None), repeat(0),
                       repeat(None))
    else:
        yield from zip(repeat("content_logprobs"), repeat(choice), choice.times, choice.pieces, repeat(None),
                       repeat(0), choice.logprobs)
    yield "finish", choice, choice.end_at, "", None, 0, None


def merged_chunks(choices: list[Choice]) -> list[Chunk]:
    """Every choice's chunks, merged by due time (ties keep choice order)."""
    out = []
    for choice in choices:
        out.append(Chunk("role", choice, choice.first_at))
        if choice.logprobs is None:
            kind = "content" if choice.refusal is None else "refusal"
            out += [Chunk(kind, choice, at, text) for text, at in zip(choice.pieces, choice.times)]
        else:
            out += [Chunk("content_logprobs", choice, at, text, logprob=entry)
                    for text, at, entry in zip(choice.pieces, choice.times, choice.logprobs)]
        for n, call in enumerate(choice.tool_calls):
            out.append(Chunk("tool_call", choice, call.start_at, call=call, call_index=n))
            for fragment in call.fragments:
                out.append(Chunk("arguments", choice, fragment.at, fragment.text, call, n))
        out.append(Chunk("finish", choice, choice.end_at))
    out.sort(key=itemgetter(2))        # by `at`
    return out
