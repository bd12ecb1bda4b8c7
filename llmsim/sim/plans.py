"""What every planned answer is, whichever API planned it: the `Plan` protocol.

Faults (llmsim.faults.injection), stats and the request log read a plan only through it, never
by its type: Responses' `responses_plan.Plan`, Chat's `ChatPlan`, legacy completions' `CompletionPlan`,
Anthropic's `MessagePlan`, Gemini's `GeminiPlan`, `EmbeddingPlan` and `ModerationPlan` all
satisfy it. `cut` and `truncate` change the plan in place, each in its API's own words (a
content filter: Responses incomplete/content_filter, Chat and completions finish_reason
content_filter, Anthropic stop_reason refusal, Gemini finishReason SAFETY; truncated output:
what the API says when its output cap stops an answer), and recount `usage` in the plan's own
usage semantics. An answer without output tokens (embeddings, moderations) has no token times
and nothing to cut.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:   # a type only
    from llmsim.sim.responses_plan import Usage


@runtime_checkable
class Plan(Protocol):
    """One planned answer: the model it names, its usage, when its first token and its end are
    due (seconds after its clock starts), its output tokens' due times, and how a fault cuts it
    short."""
    model: str
    usage: "Usage"
    first_token_at: float
    end_at: float

    def token_times(self) -> list[Sequence[float]]:
        """The due times of the visible output tokens, one non-empty sequence per message
        item, choice or block that has any ([] for embeddings and moderations)."""
        ...

    def cut(self, k: int) -> None:
        """A content filter stopped the answer after k visible tokens."""
        ...

    def truncate(self) -> None:
        """truncated_output: the answer cut in half, as if its output cap had stopped it."""
        ...


class Untimed:
    """The Plan protocol's methods of an answer without output tokens (embeddings, moderations,
    compaction): no token times, nothing for a fault to cut."""
    __slots__ = ()

    def token_times(self) -> list:
        return []

    def cut(self, k: int) -> None:
        pass

    def truncate(self) -> None:
        pass
