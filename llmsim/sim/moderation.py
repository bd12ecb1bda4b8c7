"""Moderation (/v1/moderations): a word list (data/moderation.yaml) decides what is flagged.

Per category, an input containing one of its terms is flagged there with a score at or above
the threshold (higher the more terms it holds); every other category gets a small score drawn
from the text, so the same input always gets the same result.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from llmsim import datafiles
from llmsim.errors import ConfigError, InvalidRequestError, ModelNotFoundError
from llmsim.sim import latency, tokens
from llmsim.sim.responses_plan import Usage
from llmsim.sim.plans import Untimed

ENCODING = "o200k_base"       # what moderation inputs are counted in (for stats)


@dataclass(frozen=True, slots=True)
class Category:
    name: str
    pattern: re.Pattern | None       # None: flags nothing
    images: bool


class Rules:
    def __init__(self, categories: list[Category], threshold: float, models: dict[str, bool], latency: str):
        self.categories = {c.name: c for c in categories}
        self.threshold = threshold
        self.models = models            # id -> reads images
        self.default_model = next(iter(models))
        self.latency = latency

    def reads_images(self, model: str) -> bool:
        """Whether `model` reads images (ModelNotFoundError: not a moderation model)."""
        if model not in self.models:
            raise ModelNotFoundError(model)
        return self.models[model]

    @classmethod
    def load(cls, path: Path, profiles) -> "Rules":
        doc = datafiles.load(path, "moderation")
        latency = doc.get("latency", "embedding")
        if latency not in profiles:
            raise ConfigError(f"{path}: at latency: unknown profile {latency!r} "
                              f"(expected one of: {', '.join(sorted(profiles))})")
        categories = []
        for name, spec in doc["categories"].items():
            terms = sorted(spec.get("terms") or (), key=len, reverse=True)
            pattern = (re.compile(r"\b(?:" + "|".join(r"\s+".join(map(re.escape, t.split())) for t in terms)
                                  + r")", re.IGNORECASE) if terms else None)
            categories.append(Category(name, pattern, bool(spec.get("images"))))
        models = {name: bool((spec or {}).get("images")) for name, spec in doc["models"].items()}
        return cls(categories, doc.get("threshold", 0.5), models, latency)


@dataclass(slots=True)
class Result:
    """One input's verdict: `flagged`, and per category (any name; the template lists them)
    `is_flagged(name)`, `score(name)` and `applied(name)`, the input types it applied to."""
    rules: Rules
    text: str
    images: int
    hits: dict[str, int]

    @property
    def flagged(self) -> bool:
        return any(self.hits.values())

    def is_flagged(self, name: str) -> bool:
        return self.hits.get(name, 0) > 0

    def score(self, name: str) -> float:
        hits, low = self.hits.get(name, 0), self.rules.threshold
        if hits:            # from the threshold towards 1, closer with every further term
            return round(low + (1 - low) * (1 - 0.5 ** hits) * 0.98, 6)
        digest = hashlib.blake2b(f"{name}\x00{self.text}".encode(), digest_size=4).digest()
        return round(low * 0.002 * int.from_bytes(digest, "big") / 2 ** 32 + 1e-6, 9)

    def applied(self, name: str) -> list[str]:
        category = self.rules.categories.get(name)
        kinds = ["text"] if self.text else []
        if self.images and category is not None and category.images:
            kinds.append("image")
        return kinds


@dataclass(slots=True)
class ModerationPlan(Untimed):     # (llmsim.sim.plans: no token times, nothing to cut)
    id: str
    model: str
    results: list[Result]
    usage: Usage
    first_token_at: float
    end_at: float

    def token_times(self) -> list:
        """No streamed tokens: the answer arrives whole (no inter-token gaps to observe)."""
        return []


def judge(rules: Rules, text: str, images: int) -> Result:
    hits = {name: len(c.pattern.findall(text)) for name, c in rules.categories.items() if c.pattern is not None}
    return Result(rules, text, images, hits)


def inputs(given, model: str, reads_images: bool) -> list[tuple[str, int]]:
    """(text, image count) per result: each string of a list is one input; a list of
    text and image parts is one input."""
    if isinstance(given, str):
        return [(given, 0)]
    if not given or isinstance(given[0], str):
        return [(text, 0) for text in given]
    images = sum(1 for part in given if part["type"] == "image_url")
    if images and not reads_images:
        raise InvalidRequestError(f"The model '{model}' does not support image inputs.", param="input",
                                  code="invalid_value")
    return [(" ".join(part["text"] for part in given if part["type"] == "text"), images)]


def count(pairs: list[tuple[str, int]]) -> int:
    return sum(tokens.count(text, ENCODING) + images * tokens.IMAGE_TOKENS for text, images in pairs)


@dataclass(frozen=True, slots=True)
class Model:
    """A moderation model as planning and rate limits see it (not in the chat catalogue)."""
    id: str
    max_output_tokens: int = 0
    encoding: str = ENCODING


def plan_moderation(body: dict, rules: Rules, ctx) -> ModerationPlan:
    """A verdict per input, due at the latency of `ctx.profile` (the rules' `latency`, unless
    --profile says otherwise)."""
    model = ctx.model.id
    pairs = inputs(body["input"], model, rules.reads_images(model))
    results = [judge(rules, text, images) for text, images in pairs]
    sched = latency.schedule(ctx.profile, ctx.rng, 0, 0)
    n = count(pairs)
    return ModerationPlan(ctx.ids.make("moderation", ctx.rng), model, results, Usage(n, 0, 0, n),
                          sched.first_token, sched.end)
