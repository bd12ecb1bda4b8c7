"""The planning steps every provider's planner shares, public, in the order a planner takes them:
count, then the context check (`check_context`); the reasoning effort (`effort`); calls or text
(`visible_text`, `scripted_text`, `script_calls`); stop sequences (`stop_list`, `stop`);
reasoning against the output cap (`within_cap`, then `cut_text` or toolcalls.fit); then cut,
schedule and place (latency.schedule, toolcalls.place, `shift_choice`), and the cuts a fault
makes to choices afterwards (`cut_choices`, `truncate_choices`).

Each step is pure: what it reads is its arguments (the request, `Context`, an injected rng),
so planners stay deterministic for a seed. Provider planners (responses_plan, chat_plan,
completions_plan, anthropic_plan, gemini_plan) call these, never each other's private helpers.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Sequence

from llmsim.errors import ContextLengthError, InvalidRequestError
from llmsim.ids import Ids
from llmsim.sim import inputs, latency, structured, textgen, tokens, toolcalls
from llmsim.sim.models import Model
from llmsim.sim.scenarios import Answer

__all__ = ["Context", "check_context", "visible_text", "scripted_text", "effort", "script_calls", "stop_list", "stop",
           "within_cap", "cut_text", "shift_choice", "cut_choices", "truncate_choices", "choice_times"]


@dataclass(slots=True)       # not frozen: one per request, and frozen fields cost a setattr each
class Context:
    """What planning needs from the server, besides the request."""
    settings: Any
    model: Model
    profile: latency.Profile
    rules: Any             # reasoning.ReasoningRules
    rng: random.Random
    created_at: int
    ids: Ids               # identifier formats (llmsim/data/ids.yaml)


def visible_text(ctx: Context, turns: list[inputs.Turn], cap: int | None,
                 schema: dict | None = None) -> textgen.Text:
    """The answer's text: JSON fitting `schema` (structured outputs), else the generator's."""
    if schema is not None:
        return structured.text(schema, ctx.rng, cap, ctx.model.encoding)
    s = ctx.settings
    if s.generator in textgen.PURE:     # says the same whatever the request: no input to read
        return textgen.generate(s.generator, s.target_tokens, cap, None, ctx.model.encoding)
    gen_input = textgen.GenerationInput(ctx.rng, inputs.last_user_text(turns), s.fixed_text)
    return textgen.generate(s.generator, s.target_tokens, cap, gen_input, ctx.model.encoding)


def scripted_text(script: Answer, cap: int | None, encoding: str) -> textgen.Text:
    """A scripted answer's text, cut into tokens (and at `cap`)."""
    return textgen.generate("fixed", 0, cap, textgen.GenerationInput(None, "", script.text or ""), encoding)


def check_context(ctx: Context, input_tokens: int, cap: int | None, param: str) -> None:
    """The input fits the model's context window and `cap` (named `param`) its output limit;
    else OpenAI's 400."""
    model = ctx.model
    if input_tokens > model.context_window:
        raise ContextLengthError(
            f"This model's maximum context length is {model.context_window} tokens. However, your "
            f"messages resulted in {input_tokens} tokens. Please reduce the length of the messages.",
            param="input" if param == "max_output_tokens" else "messages")
    if cap is not None and cap > model.max_output_tokens:
        raise InvalidRequestError(
            f"{param} is too large: {cap}. This model supports at most {model.max_output_tokens} "
            f"completion tokens, whereas you provided {cap}.", param=param, code="invalid_value")


def effort(ctx: Context, wanted: str | None, param: str) -> str | None:
    """The reasoning effort (the reasoning rules', checked against the model); None for a
    model that does not reason."""
    model = ctx.model
    return ctx.rules.effort(model, wanted, param, ctx.settings.compat) if model.reasons else None


def said(ctx: Context, tool_req: toolcalls.ToolRequest | None, last_role: str | None,
         turns: list[inputs.Turn], schema: dict | None, script: Answer | None):
    """What one answer says, before stops and caps: (names, calls, text), `names` the functions
    called (a script's, or drawn when the request names tools), else `text` (generated to fit
    `schema`, or the script's)."""
    if script is None:
        if tool_req:
            names = toolcalls.choose(tool_req, ctx.rng, ctx.settings.tool_call_probability, last_role)
            if names:
                return names, toolcalls.make_calls(names, tool_req, ctx.rng, ctx.model.encoding, ctx.ids), None
        return None, None, visible_text(ctx, turns, None, schema)
    if script.calls:
        return [name for name, _ in script.calls], script_calls(script, ctx), None
    return None, None, scripted_text(script, None, ctx.model.encoding)


def script_calls(script: Answer | None, ctx: Context) -> list[toolcalls.FunctionCall] | None:
    """A script's function calls (None: the script says text, or there is no script)."""
    if script is None or not script.calls:
        return None
    return toolcalls.scripted(script.calls, ctx.rng, ctx.model.encoding, ctx.ids)


def stop_list(stop: Any) -> list[str]:
    """A request's stop sequences (a string or a list; empty ones dropped)."""
    if not stop:
        return []
    return [s for s in ([stop] if isinstance(stop, str) else stop) if s]


def stop(text: textgen.Text, stops: list[str], encoding: str) -> textgen.Text:
    """The text before the first stop sequence in it (llmsim.sim.textgen.stopped)."""
    return textgen.stopped(text, stops, encoding)[0]


def within_cap(reasoning: int, cap: int | None, spends_cap: bool) -> tuple[int, int | None]:
    """(reasoning tokens, room left for the visible output): when reasoning `spends_cap` (it is
    counted in the output cap), it is cut to the cap and spends it first."""
    if cap is None or not spends_cap:
        return reasoning, cap
    reasoning = min(reasoning, cap)
    return reasoning, cap - reasoning


def cut_text(text: textgen.Text, room: int, encoding: str) -> textgen.Text:
    """The text cut to `room` tokens (truncated)."""
    pieces = text.pieces[:max(0, room)]
    kept = "".join(pieces)
    return textgen.Text(tuple(pieces), kept, min(room, tokens.count(kept, encoding)), True)


def shift_choice(choice: Any, delta: float) -> None:
    """Move a choice (chat_plan.Choice) in time, so that every choice shares the first one's TTFT."""
    if not delta:
        return
    choice.first_at += delta
    choice.end_at += delta
    choice.shift(delta)
    for call in choice.tool_calls:
        call.start_at += delta
        call.end_at += delta
        for fragment in call.fragments:
            fragment.at += delta


def cut_choices(plan: Any, k: int, reason: str = "content_filter") -> None:
    """Every text choice of a plan with `choices` (Chat, completions, Gemini) stopped after
    k tokens, with finish_reason `reason`; usage recounted."""
    for choice in plan.choices:
        if choice.text is not None:
            choice.keep(k)
            choice.visible_tokens = len(choice.pieces)
            choice.end_at = choice.times[-1] if choice.times else choice.first_at
        choice.finish_reason = reason
    _replan(plan)


def truncate_choices(plan: Any) -> None:
    """Every choice cut mid-value (text in half, the last call's arguments in half),
    finish_reason length; usage recounted."""
    for choice in plan.choices:
        if choice.tool_calls:
            choice.visible_tokens = toolcalls.halve(choice.tool_calls)
            choice.end_at = choice.tool_calls[-1].end_at
        else:
            choice.keep(len(choice.pieces) // 2)
            if choice.refusal is not None:
                choice.text, choice.refusal = None, choice.text
            choice.visible_tokens = len(choice.pieces)
            choice.end_at = choice.times[-1] if choice.times else choice.first_at
        choice.finish_reason = "length"
    _replan(plan)


def _replan(plan: Any) -> None:
    plan.replan_chunks()
    plan.end_at = max(choice.end_at for choice in plan.choices)
    plan.usage = plan.usage.with_visible(sum(c.visible_tokens for c in plan.choices))


def choice_times(choices: Sequence[Any]) -> list:
    """The due times of the choices' visible tokens (a choice of calls has none)."""
    return [times for choice in choices if len(times := choice.times)]


class Choices:
    """The Plan protocol's methods of a plan made of choices (Chat, completions, Gemini's
    candidates): each choice's token times; a cut or truncation of every choice, which the
    API's template words (finish_reason content_filter / length; finishReason SAFETY / MAX_TOKENS)."""
    __slots__ = ()

    def token_times(self) -> list:
        return choice_times(self.choices)

    def cut(self, k: int) -> None:
        cut_choices(self, k)

    def truncate(self) -> None:
        truncate_choices(self)
