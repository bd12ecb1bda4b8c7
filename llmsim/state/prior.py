"""What a request continues: history items (as the API returns them) and where from.
Below both the response state (llmsim.state.responses) and background responses, which use it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from llmsim.sim import inputs


@dataclass(slots=True)
class Prior:
    """What a request continues: history items (as the API returns them) and where from."""
    items: Sequence[dict] = field(default_factory=list)
    source: str = "input"             # "input" (nothing), "previous_response_id" or "conversation"
    conversation: str | None = None

    @property
    def turns(self) -> list[inputs.Turn]:
        return inputs.items_turns(self.items, self.source) if self.items else []


NO_PRIOR = Prior(items=())    # what a request that continues nothing continues (never changed)
