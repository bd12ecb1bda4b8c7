"""Reasoning-token arithmetic (data/reasoning.yaml): effort -> reasoning tokens, summary size."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmsim import datafiles
from llmsim.errors import InvalidRequestError
from llmsim.sim.models import Model


@dataclass(frozen=True, slots=True)
class ReasoningRules:
    efforts: dict[str, float]
    summary_fraction: dict[str, float]

    @classmethod
    def load(cls, path: Path) -> "ReasoningRules":
        doc = datafiles.load(path, "reasoning")
        return cls(doc["efforts"], doc["summary_fraction"])

    def effort(self, model: Model, requested: str | None, param: str) -> str | None:
        """The effort that applies, or None for a model that does not reason."""
        if not model.reasons:
            return None
        effort = requested or model.default_effort
        if effort not in model.efforts:
            raise InvalidRequestError(
                f"Unsupported value: '{effort}' is not supported with the '{model.id}' model. "
                f"Supported values are: {', '.join(repr(e) for e in model.efforts)}.",
                param=param, code="unsupported_value")
        return effort

    def tokens(self, effort: str | None, output_tokens: int) -> int:
        if effort is None:
            return 0
        return round(self.efforts.get(effort, 0) * output_tokens)

    def summary_words(self, summary: str | None, reasoning_tokens: int) -> int:
        fraction = self.summary_fraction.get(summary or "", 0)
        return max(1, round(fraction * reasoning_tokens)) if fraction and reasoning_tokens else 0
