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
    spec_accepted: tuple[str, ...] = ()   # --compat llmsim: efforts every reasoning model also accepts
    spec_default: str | None = None       # --compat llmsim: the effort when a request names none

    @classmethod
    def load(cls, path: Path) -> "ReasoningRules":
        doc = datafiles.load(path, "reasoning")
        spec = doc.get("compat_llmsim") or {}
        return cls(doc["efforts"], doc["summary_fraction"], tuple(spec.get("accepted") or ()),
                   spec.get("default"))

    def effort(self, model: Model, requested: str | None, param: str, compat: str) -> str | None:
        """The effort that applies, or None for a model that does not reason. `compat`
        llmsim: the product spec's rules (`compat_llmsim` of reasoning.yaml) on top of the
        model's; openai: the model's own accepted efforts and default (models.yaml)."""
        if not model.reasons:
            return None
        spec = compat == "llmsim"
        effort = requested or (spec and self.spec_default) or model.default_effort
        if effort not in model.efforts and not (spec and effort in self.spec_accepted):
            accepted = [*model.efforts, *(e for e in self.spec_accepted if spec and e not in model.efforts)]
            raise InvalidRequestError(
                f"Unsupported value: '{effort}' is not supported with the '{model.id}' model. "
                f"Supported values are: {', '.join(repr(e) for e in accepted)}.",
                param=param, code="unsupported_value")
        return effort

    def tokens(self, effort: str | None, output_tokens: int) -> int:
        if effort is None:
            return 0
        return round(self.efforts.get(effort, 0) * output_tokens)

    def summary_words(self, summary: str | None, reasoning_tokens: int) -> int:
        fraction = self.summary_fraction.get(summary or "", 0)
        return max(1, round(fraction * reasoning_tokens)) if fraction and reasoning_tokens else 0
