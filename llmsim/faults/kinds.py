"""The fault catalogue's entries (`data/faults.yaml`) and a fault chosen for one request.
Below both the triggers that choose one (llmsim.faults.catalogue) and what it does (llmsim.faults.injection).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from llmsim import datafiles
from llmsim.errors import ServerError

# Fixed words a catalogue message may name as a placeholder, filled in as the catalogue loads.
WORDS = {"{server_had_an_error}": ServerError.UNEXPECTED}


@dataclass(frozen=True, slots=True)
class Kind:
    """One catalogue entry (see data/faults.yaml for the meaning of each field)."""
    name: str
    status: int
    type: str
    code: str | None
    param: str | None
    message: str
    headers: dict[str, str]
    effect: str
    after_tokens: int | None
    retry_after: float | None
    timeout_after_ms: float
    apis: dict[str, dict] = field(default_factory=dict)   # per API: status, type, code, message

    def for_api(self, api: str) -> "Kind":
        """The kind as `api` sends it (its `apis` entry applied)."""
        changes = self.apis.get(api)
        return replace(self, **changes) if changes else self


def load_kinds(path=None) -> dict[str, Kind]:
    doc = datafiles.load(path or datafiles.DATA_DIR / "faults.yaml", "faults")
    return {name: Kind(name, k["status"], k["type"], k.get("code"), k.get("param"), _fill_words(k["message"]),
                       dict(k.get("headers") or {}), k.get("effect", "error"), k.get("after_tokens"),
                       k.get("retry_after"), float(k.get("timeout_after_ms", 0)),
                       {api: {**change, "message": _fill_words(change["message"])} if "message" in change else change
                        for api, change in (k.get("apis") or {}).items()})
            for name, k in doc["kinds"].items()}


def _fill_words(message: str) -> str:
    for placeholder, words in WORDS.items():
        message = message.replace(placeholder, words)
    return message


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault chosen for one request: the kind plus its effective parameters."""
    kind: Kind
    after_tokens: int | None
    retry_after: float | None
    timeout_after_ms: float
    source: str                       # header | schedule | rate
