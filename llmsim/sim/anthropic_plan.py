"""Plan one Anthropic Messages answer: content blocks (thinking, then text or tool uses), the
stop reason and usage, with due times.

Shares the planning core with the OpenAI APIs (inputs, textgen, latency, reasoning rules,
toolcalls, llmsim.sim.steps); Anthropic's own input, thinking, stopping, prompt caching, tools,
scripts, threads and structured outputs: docs/internals.md#simanthropic_plan. Invariants:
`usage` counts input as the OpenAI APIs do (templates/anthropic.yaml reports Anthropic's
split); thinking is counted inside `max_tokens` and `output_tokens`; what a cache read holds
the caller sets (`usage.cached_tokens`), never the planner. Pure: same request, seed, same plan.
"""
from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import orjson

from llmsim.errors import ContextLengthError, InvalidRequestError, ThreadUnsupportedError
from llmsim.sim import inputs, latency, steps, structured, textgen, toolcalls
from llmsim.sim.responses_plan import Context, TimedPieces, Usage
from llmsim.sim.scenarios import Answer

THINKING_EFFORT = "medium"      # reasoning.yaml's multiplier that sizes a thinking block
MIN_CACHED = 1024               # the shortest prefix Anthropic caches (Sonnet and Opus models)
CACHE_TTL = {"5m": 300.0, "1h": 3600.0}
TOOL_USE_ID = "tool_use"        # ids.yaml's format of a tool use's id (optional: else `call`'s)


@dataclass(slots=True)
class Block(TimedPieces):
    """One content block; `pieces` are its deltas (text, thinking or partial JSON)."""
    kind: str                      # thinking | text | tool_use
    pieces: tuple[str, ...]
    times: tuple[float, ...]
    start_at: float
    end_at: float
    text: str = ""                 # the text, or the thinking
    signature: str | None = None   # a thinking block's
    id: str = ""                   # a tool use's
    name: str = ""
    input: Any = None
    logprobs: None = None


@dataclass(slots=True)
class MessagePlan:
    id: str
    created_at: int
    model: str
    req: dict[str, Any]
    blocks: list[Block]
    usage: Usage
    stop_reason: str
    stop_sequence: str | None
    first_token_at: float
    end_at: float
    marked: tuple[dict, float, int] | None = None   # the prefix `cache_control` marks (`marked_tokens`)
    effort: str | None = None

    @property
    def marked_tokens(self) -> int:
        """The marked prefix's tokens (0: none, or too short to cache)."""
        return self.marked[2] if self.marked else 0

    @property
    def cache_creation_tokens(self) -> int:
        """The marked prefix's tokens not read from a cache: written to it."""
        return max(0, self.marked_tokens - self.usage.cached_tokens)

    # -- the Plan protocol (llmsim.sim.plans) --
    def token_times(self) -> list:
        """The due times of every block's deltas (thinking, text, tool-use JSON)."""
        return [times for block in self.blocks if len(times := block.times)]

    def cut(self, k: int) -> None:
        """A content filter stopped the answer after k visible tokens: stop_reason refusal."""
        for block in self.blocks:
            if block.kind == "text":
                block.keep(k)
                block.end_at = block.times[-1] if block.times else block.start_at
        self.blocks = [b for b in self.blocks if b.kind != "tool_use"]
        self.end_at = max([b.end_at for b in self.blocks], default=self.first_token_at)
        visible = sum(len(b.pieces) for b in self.blocks if b.kind == "text")
        self.usage = self.usage.with_visible(visible)
        self.stop_reason, self.stop_sequence = "refusal", None

    def truncate(self) -> None:
        """truncated_output: the text cut in half, as if `max_tokens` had stopped it."""
        self.cut(sum(len(b.pieces) for b in self.blocks if b.kind == "text") // 2)
        self.stop_reason = "max_tokens"


def turns(body: dict) -> list[inputs.Turn]:
    """The conversation as turns, in the order Anthropic's cache reads a prompt: the tool
    definitions, the system prompt, then the messages (so the last turn is the last message's)."""
    out = []
    tools = body.get("tools")
    if tools:
        out.append(inputs.Turn("system", [toolcalls.dumps(tools)], path="tools"))
    system = body.get("system")
    if system:
        turn = inputs.Turn("system", path="system")
        inputs.content_texts(system, turn, "system")
        out.append(turn)
    for i, message in enumerate(body.get("messages") or ()):
        where = f"messages[{i}]"
        turn = inputs.Turn(message["role"], path=where)
        content = message["content"]
        if isinstance(content, str):
            turn.texts.append(content)
        for j, block in enumerate(content if isinstance(content, list) else ()):
            kind = block["type"]
            if kind == "text":
                turn.texts.append(block["text"])
            elif kind == "image":
                turn.images += 1
                turn.path = f"{where}.content[{j}]"
            elif kind == "document":
                data = block["source"].get("data") if block["source"]["type"] == "text" else block.get("title")
                turn.texts.append(data if isinstance(data, str) else "")
            elif kind == "tool_use":
                turn.texts += [block["name"], toolcalls.dumps(block["input"])]
                turn.calls += ((block.get("id"), block["name"]),)
            elif kind == "tool_result":
                result = inputs.Turn("tool", path=f"{where}.content[{j}]")
                inputs.content_texts(block.get("content"), result, f"{where}.content[{j}].content")
                turn.texts += result.texts
                turn.images += result.images
                turn.call_id = block.get("tool_use_id")     # (a user turn that answers a call)
        out.append(turn)
    return out


def cache_order(conversation: list[inputs.Turn]) -> list[inputs.Turn]:
    """`turns` in the order Anthropic's cache reads a prompt: tools, system, then messages
    (already `turns`' order)."""
    return conversation


def count_input(body: dict, model) -> int:
    """The input tokens of a request: `usage.input_tokens`, and count_tokens' answer."""
    conversation = turns(body)
    if not model.vision:
        inputs.check_vision(conversation, model)
    return inputs.count(conversation, model.encoding)


def cached_prefix(body: dict) -> tuple[dict, float] | None:
    """The request cut after its last block with `cache_control` (tools, system, then
    messages), and that block's time to live in seconds; None when no block asks for caching."""
    last = None
    for i, tool in enumerate(body.get("tools") or ()):
        if tool.get("cache_control"):
            last = ({"tools": body["tools"][:i + 1]}, tool["cache_control"])
    system = body.get("system")
    for i, block in enumerate(system if isinstance(system, list) else ()):
        if block.get("cache_control"):
            last = ({"tools": body.get("tools"), "system": system[:i + 1]}, block["cache_control"])
    for i, message in enumerate(body.get("messages") or ()):
        content = message["content"]
        for j, block in enumerate(content if isinstance(content, list) else ()):
            if block.get("cache_control"):
                cut = {**message, "content": content[:j + 1]}
                last = ({"tools": body.get("tools"), "system": system,
                         "messages": [*body["messages"][:i], cut]}, block["cache_control"])
    if last is None:
        return None
    prefix, control = last
    return prefix, CACHE_TTL.get(control.get("ttl") or "5m", CACHE_TTL["5m"])


def marked_tokens(body: dict, model) -> tuple[dict, float, int] | None:
    """`cached_prefix` and its tokens, when it has at least MIN_CACHED of them."""
    found = cached_prefix(body)
    if found is None:
        return None
    tokens_ = count_input(found[0], model)
    return (*found, tokens_) if tokens_ >= MIN_CACHED else None


def marked_key(model_id: str, prefix: dict) -> bytes:
    """The prefix cache's key of a marked prefix (`marked_tokens`' first item) for a model."""
    return hashlib.blake2b(json.dumps([model_id, prefix], sort_keys=True).encode(), digest_size=16).digest()


def _last_role(messages: list[dict]) -> str | None:
    """`tool` for a user turn that returns tool results; else the last message's role."""
    if not messages:
        return None
    last = messages[-1]
    content = last["content"]
    if last["role"] == "user" and isinstance(content, list) and any(b["type"] == "tool_result" for b in content):
        return "tool"
    return last["role"]


def tool_request(body: dict) -> toolcalls.ToolRequest | None:
    tools, choice = body.get("tools") or (), body.get("tool_choice") or {"type": "auto"}
    functions = {t["name"]: t.get("input_schema") for t in tools if t.get("type") in (None, "custom")}
    kind = choice["type"]
    names = tuple(functions)
    if kind == "tool":
        if choice.get("name") not in functions:
            raise InvalidRequestError(f"tool_choice.name: tool '{choice.get('name')}' is not among the "
                                      "client tools in `tools`.", param="tool_choice.name")
        names = (choice["name"],)
    mode = {"auto": "auto", "any": "required", "tool": "required", "none": "none"}[kind]
    return toolcalls.ToolRequest(functions, mode, names, not choice.get("disable_parallel_tool_use"))


def _thinking_budget(body: dict, cap: int) -> int | None:
    thinking = body.get("thinking") or {}
    if thinking.get("type") != "enabled":
        return None
    budget = thinking["budget_tokens"]      # required with `enabled` (the request schema)
    if budget >= cap:
        raise InvalidRequestError("`max_tokens` must be greater than `thinking.budget_tokens`.",
                                  param="max_tokens")
    return budget


def plan_message(body: dict, ctx: Context, history: list[inputs.Turn] | None = None,
                 script: Answer | None = None) -> MessagePlan:
    """Plan a Messages answer. `history`: turns said before the request's messages (counted as
    input); `script` (scenarios.Answer): said instead of generated text or tool uses (a refusal:
    its text, stop_reason refusal). `usage.cached_tokens` is left 0: the caller sets it to what a
    cache read of the prompt gives (the prefix cache: its blocks, or its entry for the plan's `marked` prefix)."""
    if body.get("thread") is not None:
        raise ThreadUnsupportedError("This server does not keep message threads: send the full conversation "
                                     "without `thread`.", param="thread")
    model, rng = ctx.model, ctx.rng
    enc = model.encoding
    conversation = turns(body)
    if history:
        conversation = [*history, *conversation]
    if not model.vision:
        inputs.check_vision(conversation, model)
    input_tokens = inputs.count(conversation, enc)
    cap = body["max_tokens"]
    if cap > model.max_output_tokens:
        raise InvalidRequestError(f"max_tokens: {cap} > {model.max_output_tokens}, which is the maximum "
                                  f"allowed number of output tokens for {model.id}", param="max_tokens")
    if input_tokens + cap > model.context_window:
        raise ContextLengthError(f"input length and `max_tokens` exceed context limit: {input_tokens} + "
                                 f"{cap} > {model.context_window}, decrease input length or `max_tokens` "
                                 "and try again", param="messages")
    budget = _thinking_budget(body, cap)
    messages = body["messages"]
    tool_req = tool_request(body) if body.get("tools") or body.get("tool_choice") else None
    names, calls, text = steps.said(ctx, tool_req, _last_role(messages), conversation,
                                    structured.anthropic_schema(body) if script is None else None, script)
    stop_sequence = None
    if names:
        wanted = sum(c.tokens for c in calls)
    else:
        if body.get("stop_sequences"):
            text, stop_sequence = textgen.stopped(text, body["stop_sequences"], enc)
        wanted = text.tokens
    thinking = None
    if budget is not None:
        target = min(budget, max(1, ctx.rules.tokens(THINKING_EFFORT, wanted)))
        thinking = textgen.generate("random", target, None, textgen.GenerationInput(rng, "", ""), enc)
    thinking_tokens = thinking.tokens if thinking else 0
    room = cap - thinking_tokens
    if names:
        calls = toolcalls.fit(calls, room, enc) if wanted > room else calls
        units, visible = toolcalls.units(calls), sum(c.tokens for c in calls)
        stop_reason = "max_tokens" if toolcalls.truncated(calls) else "tool_use"
    else:
        if text.tokens > room:
            pieces = text.pieces[:room]
            text = textgen.Text(pieces, "".join(pieces), min(room, text.tokens), True)
            stop_sequence = None
        units, visible = len(text.pieces), text.tokens
        stop_reason = "max_tokens" if text.truncated else ("stop_sequence" if stop_sequence else "end_turn")
        if script is not None and script.refusal and not text.truncated:
            stop_reason, stop_sequence = "refusal", None
    sched = latency.schedule(ctx.profile, rng, thinking_tokens, units)
    blocks = []
    if thinking is not None:
        times = latency.spread(sched.first_token, sched.reasoning_end, len(thinking.pieces))
        signature = base64.b64encode(rng.randbytes(72)).decode()
        blocks.append(Block("thinking", thinking.pieces, tuple(times), sched.first_token,
                            sched.reasoning_end, thinking.text, signature))
    if names:
        toolcalls.place(calls, sched.token_times, sched.reasoning_end)
        for call in calls:
            try:
                value = orjson.loads(call.arguments)
            except orjson.JSONDecodeError:      # cut short by max_tokens (or a script's malformed text)
                value = {}
            pieces = tuple(f.text for f in call.fragments)
            blocks.append(Block("tool_use", pieces, tuple(f.at for f in call.fragments), call.start_at,
                                call.end_at, id=ctx.ids.make(TOOL_USE_ID if TOOL_USE_ID in ctx.ids.formats else "call", rng), name=call.name, input=value))
    else:
        times = tuple(sched.token_times)
        blocks.append(Block("text", text.pieces, times, sched.reasoning_end, sched.end, text.text))
    usage = Usage.make(input_tokens, visible, thinking_tokens, "openai")   # thinking is output
    return MessagePlan(ctx.ids.make("message", rng), ctx.created_at, body["model"], body, blocks, usage,
                       stop_reason, stop_sequence, sched.first_token, sched.end, marked_tokens(body, model))
