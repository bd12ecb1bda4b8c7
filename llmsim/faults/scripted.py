"""A scripted request (llmsim.sim.scenarios): its error turns fail attempts through the fault
machinery, then its answer plays.

`Scripts.begin` takes the place of `FaultInjector.begin` for a request a scenario or a rule
may script: it returns the injection (what a fault does) and the answer to plan (None:
generate as usual). An error turn fails the first `attempts` requests that reach it with
the same history; the attempts are counted by `counter` (the store's `attempts` capability:
shared by every process of a Redis, LMDB or SQLite store; `Attempts`, this process's own, for memory). A
request no error turn fails goes on to the usual triggers (the fault header, the schedule,
the rates), so content faults apply to scripted answers too.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Awaitable, Mapping, Protocol

from llmsim.faults.catalogue import FaultInjector
from llmsim.faults.injection import Injection
from llmsim.sim.inputs import Turn
from llmsim.sim.scenarios import Answer, ScenarioSet

MAX_KEYS = 100_000      # histories an in-process counter remembers (the oldest are forgotten)


class SharedAttempts(Protocol):
    """A store's shared counter (llmsim.state.store.capabilities.Attempts)."""

    def attempt(self, key: str) -> Awaitable[int]: ...


class Attempts:
    """Attempts per key in this process (stores that share none)."""

    def __init__(self):
        self.counts: OrderedDict[str, int] = OrderedDict()

    async def attempt(self, key: str) -> int:
        n = self.counts.pop(key, 0) + 1
        self.counts[key] = n
        if len(self.counts) > MAX_KEYS:
            self.counts.popitem(last=False)
        return n


class Scripts:
    def __init__(self, scenarios: ScenarioSet, injector: FaultInjector,
                 counter: SharedAttempts | None = None):
        self.scenarios = scenarios
        self.injector = injector
        self.attempt = (counter or Attempts()).attempt     # a shared store's counter, else this process's

    def wanted(self, body: Mapping[str, Any], headers: Mapping[str, str] | None) -> bool:
        return self.scenarios.wanted(body, headers)

    async def begin(self, api: str, body: Mapping[str, Any], headers: Mapping[str, str] | None,
                    turns: list[Turn]) -> tuple[Injection, Answer | None]:
        """The request's injection (as `FaultInjector.begin` returns it) and its answer."""
        choice = self.scenarios.choose(body, headers, turns)
        while True:
            for key, error in choice.errors:
                if await self.attempt(key) <= error.attempts:
                    fault = self.injector.make(self.injector.kinds[error.kind], error.params, "scenario")
                    return self.injector.apply(fault, api, body), choice.answer
            if choice.answer is not None or not choice.errors:
                break
            choice = self.scenarios.rules_after(choice.errors[0][0], body, turns)   # an error rule passed
        return self.injector.begin(api, body, headers), choice.answer
