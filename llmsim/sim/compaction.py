"""Responses compaction (/v1/responses/compact): a long conversation becomes its user messages
and one `compaction` item, whose opaque `encrypted_content` carries a summary of the rest.

What is compacted (assistant messages, reasoning, tool calls and outputs, earlier compaction
items) gives a summary of about one word per `WORDS_PER_TOKEN` of its tokens; a following
request that sends the compaction item as input counts the summary's tokens
(llmsim.sim.inputs), as the model would read it. The summary is sealed, not encrypted: it is
what a real compaction's content stands in for (llmsim.sim.inputs: seal, summary_of).
"""
from __future__ import annotations

from dataclasses import dataclass

from llmsim.sim import inputs, latency, textgen, tokens
from llmsim.sim.responses_plan import Context, Usage
from llmsim.sim.plans import Untimed

WORDS_PER_TOKEN = 8         # the summary's words per compacted token
MIN_WORDS, MAX_WORDS = 16, 4096


@dataclass(slots=True)
class Kept:
    item: dict              # a user message, in its API shape
    kind: str = "kept"


@dataclass(slots=True)
class CompactionItem:
    id: str
    encrypted_content: str
    kind: str = "compaction"


@dataclass(slots=True)
class CompactionPlan(Untimed):     # (llmsim.sim.plans: its summary is sealed, not streamed)
    id: str
    created_at: int
    model: str
    output: list            # Kept items, then the CompactionItem
    usage: Usage
    first_token_at: float
    end_at: float


def plan_compaction(body: dict, ctx: Context, items: list[dict]) -> CompactionPlan:
    """`items`: the conversation (a previous response's, then the request's input), in API shape."""
    model, rng = ctx.model, ctx.rng
    turns = inputs.items_turns(items, "input")
    if body.get("instructions"):
        turns.insert(0, inputs.Turn("system", [body["instructions"]], path="instructions"))
    kept = [item for item in items if item.get("type", "message") == "message" and item.get("role") == "user"]
    compacted = inputs.count([t for t in turns if t.role != "user"], model.encoding) - tokens.REPLY_PRIMING
    words = min(MAX_WORDS, max(MIN_WORDS, compacted // WORDS_PER_TOKEN))
    summary = textgen.words_text(words, rng)
    output_tokens = tokens.count(summary, model.encoding)
    sched = latency.schedule(ctx.profile, rng, 0, output_tokens)
    item = CompactionItem(ctx.ids.make("compaction", rng), inputs.seal(summary))
    input_tokens = inputs.count(turns, model.encoding)
    return CompactionPlan(ctx.ids.make("response", rng), ctx.created_at, body["model"],
                          [*map(Kept, kept), item], Usage(input_tokens, output_tokens, 0, input_tokens + output_tokens),
                          sched.first_token, sched.end)
