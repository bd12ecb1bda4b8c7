"""The planning steps every provider's planner shares, public, in the order a planner takes them:
count, then the context check (`check_context`); the reasoning effort (`effort`); calls or text
(`visible_text`, `scripted_text`, `script_calls`); stop sequences (`stop_list`, `stop`);
reasoning against the output cap (`within_cap`, then `cut_text` or toolcalls.fit); then cut,
schedule and place (latency.schedule, toolcalls.place, `shift_choice`), and the cuts a fault
makes to choices afterwards (`cut_choices`, `truncate_choices`).

Each step is pure: what it reads is its arguments (the request, plan.Context, an injected rng),
so planners stay deterministic for a seed. Provider planners (plan, chatplan, completionplan,
messages, geminiplan) call these, never each other's private helpers.
"""
from __future__ import annotations

from typing import Any, Sequence

from llmsim.sim import textgen, tokens, toolcalls
from llmsim.sim.plan import Context, check_context, scripted_text, visible_text
from llmsim.sim.scenarios import Answer

__all__ = ["check_context", "visible_text", "scripted_text", "effort", "script_calls", "stop_list", "stop",
           "within_cap", "cut_text", "shift_choice", "cut_choices", "truncate_choices", "choice_times"]


def effort(ctx: Context, wanted: str | None, param: str) -> str | None:
    """The reasoning effort (the reasoning rules', checked against the model); None for a
    model that does not reason."""
    model = ctx.model
    return ctx.rules.effort(model, wanted, param, ctx.settings.compat) if model.reasons else None


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
    """Move a choice (chatplan.Choice) in time, so that every choice shares the first one's TTFT."""
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
    _replanned(plan)


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
    _replanned(plan)


def _replanned(plan: Any) -> None:
    plan.replan_chunks()
    plan.end_at = max(choice.end_at for choice in plan.choices)
    plan.usage = plan.usage.with_visible(sum(c.visible_tokens for c in plan.choices))


def choice_times(choices: Sequence[Any]) -> list:
    """The due times of the choices' visible tokens (a choice of calls has none)."""
    return [times for choice in choices if len(times := choice.times)]
