"""Plan one Anthropic Messages answer: content blocks (thinking, then text or tool uses), the
stop reason and usage, with due times.

Shares the planning core with the OpenAI APIs (inputs, textgen, latency, reasoning rules,
toolcalls). What is Anthropic's own:

* input: `system`, and messages whose blocks are text, images, documents, tool uses, tool
  results and thinking; thinking blocks of earlier turns are not counted (Anthropic strips
  them), tool definitions are.
* thinking (`thinking: {type: enabled, budget_tokens}`): as many tokens as the reasoning rules
  give at THINKING_EFFORT for the visible output, at most the budget; they come first, are
  counted inside `max_tokens` and `output_tokens`, and end with a signature.
* stopping: `stop_sequences` (the text ends before the first one found: `stop_sequence`),
  `max_tokens` (what is left after thinking), a tool use (`tool_use`), else `end_turn`.
* prompt caching: `usage` counts input as the OpenAI APIs do (`input_tokens` all of it,
  `cached_tokens` the part read from a cache); templates/anthropic.yaml reports Anthropic's
  split (`input_tokens` = the rest). The prefix up to the last block with `cache_control`
  (tools, then system, then messages), when it has at least MIN_CACHED tokens, is the plan's
  `marked_tokens`: what is not read of it is written (`cache_creation_input_tokens`). What is
  read comes from the serving model's prefix cache when it is on for the model (any repeated
  prefix, in whole blocks: llmsim.state.prefixcache), else from a `PromptCache`.
* tools: `input_schema` is the function's parameters; `tool_choice` auto | any | tool | none,
  `disable_parallel_tool_use`; a user turn holding tool results counts as a tool turn (so an
  agent loop ends with text). Server tools (a `type` other than custom) are accepted, never used.
* message threads (`thread`, a beta): refused with Anthropic's `thread_unsupported_request`, on
  which the SDKs' thread helpers and default tool runners resend the full conversation unthreaded.
* structured outputs: `output_config.format` (or the beta's `output_format`) `json_schema`: the
  text block is a value of the schema (llmsim.sim.structured); `output_config.effort` is accepted.
"""
from __future__ import annotations

import base64
import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson

from llmsim.errors import ContextLengthError, InvalidRequestError, ThreadUnsupportedError
from llmsim.sim import inputs, latency, structured, textgen, toolcalls
from llmsim.sim.plan import Context, TimedPieces, Usage, visible_text

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
    marked_tokens: int = 0          # the prefix `cache_control` marks (0: none, or too short)
    effort: str | None = None

    @property
    def cache_creation_tokens(self) -> int:
        """The marked prefix's tokens not read from a cache: written to it."""
        return max(0, self.marked_tokens - self.usage.cached_tokens)

    @property
    def output(self) -> list[Block]:       # what stats read a plan's token times from
        return self.blocks

    def filtered(self, k: int) -> None:
        """A content filter stopped the answer after k visible tokens: stop_reason refusal."""
        for block in self.blocks:
            if block.kind == "text":
                block.keep(k)
                block.end_at = block.times[-1] if block.times else block.start_at
        self.blocks = [b for b in self.blocks if b.kind != "tool_use"]
        self.end_at = max([b.end_at for b in self.blocks], default=self.first_token_at)
        visible = sum(len(b.pieces) for b in self.blocks if b.kind == "text")
        read = self.usage.cached_tokens
        self.usage = Usage.make(self.usage.input_tokens, visible, self.usage.reasoning_tokens, "openai")
        self.usage.cached_tokens = read
        self.stop_reason, self.stop_sequence = "refusal", None

    def truncated(self) -> None:
        """truncated_output: the text cut in half, as if `max_tokens` had stopped it."""
        self.filtered(sum(len(b.pieces) for b in self.blocks if b.kind == "text") // 2)
        self.stop_reason = "max_tokens"


def turns(body: dict) -> list[inputs.Turn]:
    """The conversation as turns: the system prompt, the messages, and the tool definitions."""
    out = []
    system = body.get("system")
    if system:
        turn = inputs.Turn("system", path="system")
        inputs._content_texts(system, turn, "system")
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
                turn.texts += [block["name"], toolcalls._dumps(block["input"])]
            elif kind == "tool_result":
                result = inputs.Turn("tool", path=f"{where}.content[{j}]")
                inputs._content_texts(block.get("content"), result, f"{where}.content[{j}].content")
                turn.texts += result.texts
                turn.images += result.images
        out.append(turn)
    tools = body.get("tools")
    if tools:
        out.append(inputs.Turn("system", [toolcalls._dumps(tools)], path="tools"))
    return out


def cache_order(conversation: list[inputs.Turn]) -> list[inputs.Turn]:
    """`turns` in the order Anthropic's cache reads a prompt: tools, system, then messages."""
    if conversation and conversation[-1].path == "tools":
        return [conversation[-1], *conversation[:-1]]
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


class PromptCache:
    """Anthropic's explicit prompt caching, when the serving model's prefix cache is off: the
    marked prefixes written, each until it expires (on the server's clock); at most `size`,
    the oldest forgotten first. It stays beside the prefix cache because it is what
    Anthropic's API does on its own (only prefixes `cache_control` marks, exactly, for their
    `ttl`), which an app's caching can be tested against without the serving model; the
    prefix cache is an inference server's (any prefix, in blocks, LRU), used instead when on."""

    def __init__(self, clock, size: int = 10_000):
        self.clock, self.size = clock, size
        self.expiry: OrderedDict[bytes, float] = OrderedDict()

    def read(self, marked: tuple[dict, float, int] | None, model) -> int:
        """The tokens read for this request's marked prefix (`marked_tokens`), then kept."""
        if marked is None:
            return 0
        prefix, ttl, tokens_ = marked
        key = hashlib.sha256(json.dumps([model.id, prefix], sort_keys=True).encode()).digest()   # any integer
        now = self.clock.now()
        hit = self.expiry.get(key, 0.0) > now
        self.expiry[key] = now + ttl
        self.expiry.move_to_end(key)
        if len(self.expiry) > self.size:
            self.expiry.popitem(last=False)
        return tokens_ if hit else 0


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


def plan_message(body: dict, ctx: Context, cache: PromptCache | None = None) -> MessagePlan:
    if body.get("thread") is not None:
        raise ThreadUnsupportedError("This server does not keep message threads: send the full conversation "
                                     "without `thread`.", param="thread")
    model, rng, s = ctx.model, ctx.rng, ctx.settings
    enc = model.encoding
    conversation = turns(body)
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
    names = (toolcalls.choose(tool_req, rng, s.tool_call_probability, _last_role(messages))
             if tool_req else None)
    stop_sequence = None
    if names:
        calls = toolcalls.make_calls(names, tool_req, rng, enc, ctx.ids)
        wanted = sum(c.tokens for c in calls)
    else:
        text = visible_text(ctx, conversation, None, structured.anthropic_schema(body))
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
            except orjson.JSONDecodeError:      # cut short by max_tokens
                value = {}
            pieces = tuple(f.text for f in call.fragments)
            blocks.append(Block("tool_use", pieces, tuple(f.at for f in call.fragments), call.start_at,
                                call.end_at, id=ctx.ids.make(TOOL_USE_ID if TOOL_USE_ID in ctx.ids.formats else "call", rng), name=call.name, input=value))
    else:
        times = tuple(sched.token_times)
        blocks.append(Block("text", text.pieces, times, sched.reasoning_end, sched.end, text.text))
    marked = marked_tokens(body, model)
    usage = Usage.make(input_tokens, visible, thinking_tokens, "openai")   # thinking is output
    usage.cached_tokens = cache.read(marked, model) if cache is not None else 0
    return MessagePlan(ctx.ids.make("message", rng), ctx.created_at, body["model"], body, blocks, usage,
                       stop_reason, stop_sequence, sched.first_token, sched.end, marked[2] if marked else 0)
