"""Plan a legacy completions answer (/v1/completions): `n` choices per prompt, each planned as
a Chat choice (llmsim.sim.chat_plan) of that prompt alone, with no chat framing: its tokens are
the prompt's own. `max_tokens` defaults to 16, as OpenAI's does. With `echo`, a choice's text
starts with its prompt (the stream sends the prompt first). Prompts given as token arrays are
decoded to their text.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from llmsim.errors import ContextLengthError
from llmsim.sim import chat_plan, inputs, steps, tokens, vllm
from llmsim.sim.embeddings import decode
from llmsim.sim.responses_plan import Context, Usage
from llmsim.sim.scenarios import Answer

DEFAULT_MAX_TOKENS = 16
TURN_ENCODING = "o200k_base"    # what `turns` decodes token-array prompts with (no model at hand)


@dataclass(slots=True)
class CompletionPlan(chat_plan.ChatPlan):
    prompts: list[str] = field(default_factory=list)
    per_prompt: int = 1              # n
    echo: bool = False

    def prompt_of(self, choice) -> str:
        return self.prompts[choice.index // self.per_prompt]


def turns(body: dict, encoding: str = TURN_ENCODING) -> list[inputs.Turn]:
    """The prompts as user turns (what scenarios count, none of them an assistant's, and rules read)."""
    return [inputs.Turn("user", [text]) for text in _prompts(body.get("prompt"), encoding)[0]]


def as_text(script: Answer | None) -> Answer | None:
    """A script as completions can say it: its text; calls written out as text, one
    `name(arguments)` line each; a refusal's text as plain text (completions have no refusal)."""
    if script is None:
        return None
    if script.calls:
        return Answer(text="\n".join(f"{name}({arguments})" for name, arguments in script.calls))
    return Answer(text=script.text or "") if script.refusal else script


def plan_completion(body: dict, ctx: Context, history: list[inputs.Turn] | None = None,
                    script: Answer | None = None) -> CompletionPlan:
    """Plan a legacy completion: `n` choices per prompt. `script` (scenarios.Answer): what every
    choice says instead of generated text (`as_text`); `history` is accepted for the common
    planner signature and ignored: a prompt is its own whole context."""
    model = ctx.model
    texts, counts = _prompts(body["prompt"], model.encoding)
    cap = body.get("max_tokens")
    cap = DEFAULT_MAX_TOKENS if cap is None else cap
    steps.check_context(ctx, 0, cap, "max_tokens")
    longest = max(counts)
    if longest + cap > model.context_window:
        raise ContextLengthError(
            f"This model's maximum context length is {model.context_window} tokens, however you requested "
            f"{longest + cap} tokens ({longest} in your prompt; {cap} for the completion). Please reduce "
            "your prompt; or completion length.", param="prompt")
    stops = steps.stop_list(body.get("stop"))
    script = as_text(script)
    sampling = vllm.sampling(body, cap) if ctx.settings.compat == "vllm" else None
    n = body.get("n") or 1
    choices, first = [], None
    for p, text in enumerate(texts):
        turns = [inputs.Turn("user", [text])]
        for j in range(n):
            choice, sched = chat_plan.plan_choice(p * n + j, ctx, turns, cap, None, None, "user", stops,
                                                 None, script, sampling)
            if first is None:
                first = sched.first_token
            else:
                steps.shift_choice(choice, first - sched.first_token)
            choices.append(choice)
    visible = sum(c.visible_tokens for c in choices)
    usage = Usage.make(sum(counts), visible, 0, ctx.settings.usage)
    include_usage = bool(body.get("stream") and (body.get("stream_options") or {}).get("include_usage"))
    return CompletionPlan(ctx.ids.make("completion", ctx.rng), ctx.created_at, body["model"], body, choices,
                          usage, min(c.first_at for c in choices), max(c.end_at for c in choices), None,
                          include_usage, "default", continuous_usage=include_usage and chat_plan.continuous_usage(body, ctx),
                          prompts=texts, per_prompt=n, echo=bool(body.get("echo")))


def _prompts(given, encoding: str) -> tuple[list[str], list[int]]:
    """The prompts (token arrays decoded) and each one's token count; no prompt is an empty one
    (OpenAI's default, <|endoftext|>, which starts a text from nothing)."""
    if given is None:
        given = ""
    if isinstance(given, str) or (given and isinstance(given[0], int)):
        given = [given]
    texts, counts = [], []
    for i, item in enumerate(given):
        if isinstance(item, str):
            texts.append(item)
            counts.append(tokens.count(item, encoding))
        else:
            texts.append(decode(item, encoding, "prompt" if len(given) == 1 else f"prompt[{i}]"))
            counts.append(len(item))
    return texts, counts
