"""Scripted answers: scenarios (named scripts of turns) and rules, read from a scenario file
(`--scenarios FILE`, checked against schemas/scenarios.yaml at start-up).

Which turn a scenario plays is derived from the request alone: the number of assistant
turns already in its history (a run of assistant messages, function calls and reasoning
items counts as one turn; Responses history includes what `previous_response_id` or
`conversation` continues). So every worker and host plays the same turn, and a retry plays
the turn it retries.

A script's turns are grouped into steps: each answer turn (text, tool_calls, refusal, json)
with the error turns just before it. Step k answers a request with k assistant turns in its
history; each error turn before it fails the first `attempts` requests that reach it with
that history (counted in the shared state: llmsim.faults.scripted), then the answer plays.

This module is pure: it chooses, the caller counts attempts and plans the answer.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import orjson

from llmsim import datafiles
from llmsim.errors import ConfigError, InvalidRequestError
from llmsim.sim.inputs import Turn

HEADER = "x-llmsim-scenario"
METADATA_KEY = "llmsim_scenario"
ANSWER_KINDS = ("text", "tool_calls", "refusal", "json")
KINDS = (*ANSWER_KINDS, "error")
ERROR_OPTIONS = ("attempts", "after_tokens", "retry_after", "timeout_after_ms")


@dataclass(frozen=True, slots=True)
class Answer:
    """What the model says instead of generated text: `text` (a refusal's when `refusal`),
    or `calls`, (name, arguments JSON text) pairs."""
    text: str | None = None
    calls: tuple[tuple[str, str], ...] | None = None
    refusal: bool = False


@dataclass(frozen=True, slots=True)
class ErrorTurn:
    kind: str                          # a fault kind
    params: Mapping[str, Any]          # after_tokens, retry_after, timeout_after_ms
    attempts: int = 1


@dataclass(frozen=True, slots=True)
class Step:
    errors: tuple[ErrorTurn, ...]
    answer: Answer | None              # None: error turns at the end of the script


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    steps: tuple[Step, ...]
    on_exhausted: str = "repeat_last"


@dataclass(frozen=True, slots=True)
class Rule:
    when: Mapping[str, Any]
    step: Step
    pattern: re.Pattern | None = None


@dataclass(slots=True)
class Choice:
    """A request's scripted part: error turns to pass (each with the key its attempts are
    counted under), then the answer (None: simulate as usual)."""
    errors: list[tuple[str, ErrorTurn]] = field(default_factory=list)
    answer: Answer | None = None


def _answer(turn: Mapping[str, Any]) -> Answer:
    if "text" in turn:
        return Answer(text=turn["text"])
    if "refusal" in turn:
        return Answer(text=turn["refusal"], refusal=True)
    if "json" in turn:
        return Answer(text=orjson.dumps(turn["json"]).decode())
    return Answer(calls=tuple((c["name"], c["arguments"] if isinstance(c.get("arguments"), str)
                               else orjson.dumps(c.get("arguments") or {}).decode())
                              for c in turn["tool_calls"]))


def _turn(turn: Mapping[str, Any], where: str, source: str, fault_kinds: Sequence[str]) -> ErrorTurn | Answer:
    kinds = [k for k in KINDS if k in turn]
    if len(kinds) != 1:
        found = f"{' and '.join(kinds)}" if kinds else "none of them"
        raise ConfigError(f"{source}: at {where}: a turn has exactly one of {', '.join(KINDS)} "
                          f"(found {found})")
    kind = kinds[0]
    options = [k for k in ERROR_OPTIONS if k in turn]
    if kind != "error" and options:
        raise ConfigError(f"{source}: at {where}.{options[0]}: only an error turn takes "
                          f"{', '.join(ERROR_OPTIONS)}")
    if kind != "error":
        return _answer(turn)
    if turn["error"] not in fault_kinds:
        raise ConfigError(f"{source}: at {where}.error: unknown fault kind {turn['error']!r} "
                          f"(allowed: {', '.join(sorted(fault_kinds))})")
    params = {k: turn[k] for k in ("after_tokens", "retry_after", "timeout_after_ms") if k in turn}
    return ErrorTurn(turn["error"], params, turn.get("attempts", 1))


def _steps(turns: Sequence[Any], where: str, source: str, fault_kinds: Sequence[str]) -> tuple[Step, ...]:
    steps, errors = [], []
    for i, raw in enumerate(turns):
        turn = _turn(raw, f"{where}[{i}]", source, fault_kinds)
        if isinstance(turn, ErrorTurn):
            errors.append(turn)
        else:
            steps.append(Step(tuple(errors), turn))
            errors = []
    if errors:
        steps.append(Step(tuple(errors), None))
    return tuple(steps)


class ScenarioSet:
    """The scenarios and rules of one file (empty: no file), and the choice per request."""

    def __init__(self, scenarios: Mapping[str, Scenario] | None = None, rules: Sequence[Rule] = (),
                 default: str | None = None):
        self.scenarios = dict(scenarios or {})
        self.rules = list(rules)
        self.default = default

    @classmethod
    def load(cls, path: str | None, fault_kinds: Sequence[str], default: str | None = None) -> "ScenarioSet":
        if path is None:
            if default is not None:
                raise ConfigError(f"default_scenario: {default!r} names a scenario, but no scenario "
                                  "file is given (--scenarios FILE)")
            return cls()
        source = str(path)
        doc = datafiles.load(Path(path), "scenarios")
        scenarios = {}
        for name, raw in (doc.get("scenarios") or {}).items():
            where = f"scenarios.{name}.turns"
            scenarios[name] = Scenario(name, _steps(raw["turns"], where, source, fault_kinds),
                                       raw.get("on_exhausted", "repeat_last"))
        rules = []
        for i, raw in enumerate(doc.get("rules") or ()):
            turn = _turn(raw["respond"], f"rules[{i}].respond", source, fault_kinds)
            step = Step((turn,), None) if isinstance(turn, ErrorTurn) else Step((), turn)
            pattern = None
            if "user_matches" in raw["when"]:
                try:
                    pattern = re.compile(raw["when"]["user_matches"])
                except re.error as exc:
                    raise ConfigError(f"{source}: at rules[{i}].when.user_matches: not a valid "
                                      f"regular expression: {exc}") from None
            rules.append(Rule(raw["when"], step, pattern))
        if default is not None and default not in scenarios:
            raise ConfigError(f"default_scenario: {source} has no scenario {default!r} "
                              f"(allowed: {', '.join(sorted(scenarios)) or 'none'})")
        return cls(scenarios, rules, default)

    def wanted(self, body: Mapping[str, Any], headers: Mapping[str, str] | None) -> bool:
        """Whether a request may be scripted (else it is simulated without looking further)."""
        return bool(self.rules or self.default is not None
                    or (headers is not None and headers.get(HEADER) is not None)
                    or METADATA_KEY in (body.get("metadata") or ()))

    def selected(self, body: Mapping[str, Any], headers: Mapping[str, str] | None) -> Scenario | None:
        name, param = (headers or {}).get(HEADER), HEADER
        if name is None:
            name, param = (body.get("metadata") or {}).get(METADATA_KEY), f"metadata.{METADATA_KEY}"
        if name is None:
            name = self.default
        if name is None:
            return None
        scenario = self.scenarios.get(name)
        if scenario is None:
            known = ", ".join(sorted(self.scenarios)) or "none: start the server with --scenarios FILE"
            raise InvalidRequestError(f"Unknown scenario {name!r} (known scenarios: {known}).",
                                      param=param, code="unknown_scenario")
        return scenario

    def choose(self, body: Mapping[str, Any], headers: Mapping[str, str] | None, turns: list[Turn]) -> Choice:
        """The request's scripted part (an empty Choice: nothing applies)."""
        scenario = self.selected(body, headers)
        if scenario is not None:
            index = assistant_turns(turns)
            steps = scenario.steps
            if index < len(steps):
                step = steps[index]
            elif scenario.on_exhausted == "loop":
                step = steps[index % len(steps)]
            elif scenario.on_exhausted == "error":
                raise InvalidRequestError(
                    f"Scenario {scenario.name!r} has no turn {index + 1}: its {len(steps)} turns are "
                    "played (on_exhausted: error).", param=None, code="scenario_exhausted")
            else:                           # repeat_last: the last answer, its errors not again
                last = next((s for s in reversed(steps) if s.answer is not None), None)
                return Choice([], last.answer if last else None)
            prefix = f"scenario:{scenario.name}:{index}:{history_hash(turns)}"
            return Choice([(f"{prefix}:{i}", e) for i, e in enumerate(step.errors)], step.answer)
        for i, rule in enumerate(self.rules):
            if matches(rule, body, turns):
                prefix = f"rule:{i}:{history_hash(turns)}"
                return Choice([(f"{prefix}:{j}", e) for j, e in enumerate(rule.step.errors)], rule.step.answer)
        return Choice()

    def rules_after(self, key: str, body: Mapping[str, Any], turns: list[Turn]) -> Choice:
        """After an error rule's attempts are used up: the next rule that matches."""
        if not key.startswith("rule:"):
            return Choice()
        start = int(key.split(":")[1]) + 1
        for i, rule in enumerate(self.rules[start:], start):
            if matches(rule, body, turns):
                prefix = f"rule:{i}:{history_hash(turns)}"
                return Choice([(f"{prefix}:{j}", e) for j, e in enumerate(rule.step.errors)], rule.step.answer)
        return Choice()


def assistant_turns(turns: Sequence[Turn]) -> int:
    """How many assistant turns the history holds: runs of consecutive assistant items."""
    count, inside = 0, False
    for turn in turns:
        if turn.role == "assistant":
            count += not inside
            inside = True
        else:
            inside = False
    return count


def history_hash(turns: Sequence[Turn]) -> str:
    """A digest of what was said, by whom (ids left out)."""
    said = [(t.role, t.texts) for t in turns]
    return hashlib.sha256(orjson.dumps(said)).hexdigest()[:32]


def last_user_text(turns: Sequence[Turn]) -> str:
    for turn in reversed(turns):
        if turn.role == "user":
            return "\n".join(turn.texts)
    return ""


def tool_result_for(turns: Sequence[Turn]) -> str | None:
    """The name of the function whose result is the last input item (None: it is no tool result).
    A tool result is a `tool` or `function` turn, or a user turn that answers a call (`call_id`:
    Anthropic's tool_result blocks)."""
    if not turns or (turns[-1].role not in ("tool", "function") and turns[-1].call_id is None):
        return None
    last = turns[-1]
    if last.role == "function":             # Chat's legacy function message
        return last.name
    for turn in reversed(turns):
        for call_id, name in turn.calls:
            if call_id == last.call_id:
                return name
    return None


def matches(rule: Rule, body: Mapping[str, Any], turns: Sequence[Turn]) -> bool:
    when = rule.when
    if "model" in when and body.get("model") != when["model"]:
        return False
    if "has_tools" in when and bool(body.get("tools")) != when["has_tools"]:
        return False
    if "tool_result_for" in when and tool_result_for(turns) != when["tool_result_for"]:
        return False
    if "user_contains" in when and when["user_contains"].casefold() not in last_user_text(turns).casefold():
        return False
    if rule.pattern is not None and rule.pattern.search(last_user_text(turns)) is None:
        return False
    if "system_contains" in when:
        wanted = when["system_contains"].casefold()
        if not any(wanted in text.casefold() for t in turns if t.role in ("system", "developer")
                   for text in t.texts):
            return False
    return True
