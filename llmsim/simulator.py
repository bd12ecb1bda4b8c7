"""The simulator: settings, data and templates loaded once, and per-request planning context."""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from llmsim import datafiles
from llmsim.clock import Clock
from llmsim.errors import ConfigError, InvalidRequestError
from llmsim.faults.catalogue import FaultInjector
from llmsim.faults.kinds import load_kinds
from llmsim.faults.scripted import Scripts
from llmsim.ids import Ids
from llmsim.observe.stats import Stats
from llmsim.pacing.draining import Drain
from llmsim.replay.player import Player
from llmsim.render.templates import TemplateSet
from llmsim.settings import Settings
from llmsim.sim import latency, tokens
from llmsim.sim.models import Catalogue
from llmsim.sim.responses_plan import Context
from llmsim.sim.reasoning import ReasoningRules
from llmsim.sim.scenarios import ScenarioSet
from llmsim.state.liveconfig import LiveConfig
from llmsim.state.ratelimits import RateLimiter, limits_of
from llmsim.state.responses import ResponseState
from llmsim.state.serving import Serving
from llmsim.state.store import open_store

# With --seed, timestamps are simulated too (this epoch plus one second per request), so the
# same seed and the same requests give the same bytes.
SEEDED_EPOCH = 1_767_225_600  # 2026-01-01T00:00:00Z


SEED_HEADER = "x-llmsim-seed"


def _seed(raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise InvalidRequestError(f"{SEED_HEADER}: expected an integer, got {raw!r}",
                                  param=SEED_HEADER, code="invalid_value") from None


@dataclass
class Simulator:
    settings: Settings
    catalogue: Catalogue
    profiles: dict[str, latency.Profile]
    rules: ReasoningRules
    templates: TemplateSet
    clock: Clock
    ids: Ids

    @classmethod
    def load(cls, settings: Settings, clock: Clock | None = None) -> "Simulator":
        if settings.data and not Path(settings.data).is_dir():
            raise ConfigError(f"data: {settings.data}: not a directory (--data names a directory of "
                              "models.yaml, profiles.yaml, faults.yaml, reasoning.yaml, ids.yaml, moderation.yaml)")
        data = settings.data_file
        profiles = latency.load_profiles(data("profiles.yaml"))
        if settings.profile is not None and settings.profile not in profiles:
            raise ConfigError(f"profile: unknown latency profile {settings.profile!r} "
                              f"(allowed: {', '.join(sorted(profiles))})")
        try:
            catalogue = Catalogue.load(data("models.yaml"), set(profiles), settings.allow_any_model,
                                       settings.served_models)
        except ConfigError as exc:      # a --data profiles.yaml replaces ours whole: say so, name it
            if data("profiles.yaml").parent == datafiles.DATA_DIR:
                raise
            raise ConfigError(f"{exc}; {data('profiles.yaml')} replaces the packaged profiles.yaml whole: start "
                              f"from a copy of {datafiles.DATA_DIR / 'profiles.yaml'}") from None
        # The BPE ranks of most models, loaded now rather than in the first request's TTFT;
        # another encoding (cl100k_base: gpt-4, gpt-3.5) loads when first used, so a server
        # whose models never use it does not pay its load time and memory.
        tokens.encoding(tokens.DEFAULT)
        rules = ReasoningRules.load(data("reasoning.yaml"))
        templates = TemplateSet(settings.templates_dir, {"settings": settings})
        formats = Ids(datafiles.load(data("ids.yaml"), "ids")["ids"])
        return cls(settings, catalogue, profiles, rules, templates, clock or Clock(), formats)

    def __post_init__(self):
        self._counter = itertools.count()
        self._seeded = random.Random(self.settings.seed) if self.settings.seed is not None else None
        self._shared = random.Random()    # unseeded requests share one generator
        self._wall = self.clock.wall
        self._profiles: dict[str, latency.Profile] = {}     # by a model's `latency`, for the settings in force
        self.stats = Stats(self.settings.metrics, self.settings.stats_dir)
        self.drain = Drain()    # the app's shutdown and its paced streams (llmsim.pacing.draining)
        self.faults = FaultInjector(load_kinds(self.settings.data_file("faults.yaml")), self.settings, self.clock, self.templates["faults"],
                                    self.drain, self.catalogue)
        self.store = open_store(self.settings)    # stored responses and conversations
        if self.store.capabilities.shared_faults is not None:
            self.faults.share(self.store.capabilities.shared_faults)     # one fault schedule for every process
        self.state = ResponseState(self)          # what requests continue and leave (uses store)
        s = self.settings                         # recorded exchanges answering matching requests
        self.replay = Player(s.replay, self.clock, self.drain, s.replay_speed, s.replay_strict, s.seed) if s.replay else None
        scenarios = ScenarioSet.load(self.settings.scenarios, list(self.faults.kinds),
                                     self.settings.default_scenario)
        self.scripts = Scripts(scenarios, self.faults, self.store.capabilities.attempts)
        shared = self.settings.stats_dir if self.settings.workers > 1 else None     # a host's slots
        self.serving = Serving(self.store, self.profiles, shared)   # slots, queues and the prefix cache (off by default)
        self.serving.refresh(self.settings)
        self.stats.serving_state = self.serving.snapshot
        self.limiter = RateLimiter(self.settings, self.store, self.templates)   # rate limits (or none)
        self.live = LiveConfig(self.settings, self.store, self.reconfigure, self.vet)   # PATCH /llmsim/config
        self.reconfigured: list = []    # called with the new settings (the pipeline reassembles)

    # ---- runtime control (llmsim.state.liveconfig) ----
    def vet(self, settings: Settings) -> None:
        """What the schema cannot check of changed settings; raises ConfigError."""
        if settings.profile is not None and settings.profile not in self.profiles:
            raise ConfigError(f"profile: unknown latency profile {settings.profile!r} "
                              f"(allowed: {', '.join(sorted(self.profiles))})")
        self.faults.check_rates(settings.errors or {}, ConfigError, "errors")
        if limits_of(settings) is not None:
            self.templates["ratelimits"]        # ConfigError when --templates has none

    def reconfigure(self, settings: Settings) -> None:
        """Serve the requests that start from now on with `settings`."""
        old, self.settings = self.settings, settings
        self._profiles.clear()
        self.limiter.configure(settings)
        self.serving.refresh(settings)
        if settings.errors != old.errors and self.faults.shared is None:
            self.faults.rates = self.faults.check_rates(settings.errors or {}, ConfigError, "errors")
        for listener in self.reconfigured:
            listener(settings)

    async def patch(self, changes: dict) -> None:
        """PATCH /llmsim/config: check, share and apply; fault rates go to a shared store's schedule."""
        await self.live.patch(changes)
        if "errors" in changes and self.faults.shared is not None:
            await self.faults.update(None, False, changes["errors"] or {})

    async def reset_settings(self) -> None:
        """DELETE /llmsim/config: the start-up settings again, everywhere."""
        changed_errors = "errors" in self.live.changes
        await self.live.reset()
        if changed_errors and self.faults.shared is not None:
            await self.faults.update(None, False, self.settings.errors or {})

    def refresh(self) -> None:
        """As a request starts: changes other processes made (llmsim.state.liveconfig)."""
        self.live.refresh()

    def profile_for(self, model) -> latency.Profile:
        """The latency profile of `model` under the settings in force (found once per
        `model.latency` until they change)."""
        profile = self._profiles.get(model.latency)
        if profile is None:
            profile = self._profiles[model.latency] = self._profile(model)
        return profile

    def _profile(self, model) -> latency.Profile:
        s = self.settings
        profile = self.profiles[s.profile or model.latency]
        if s.ttft_ms is None and s.tbt_ms is None and s.latency_factor == 1:
            return profile
        f = s.latency_factor        # fixed times, then every time multiplied by latency_factor
        ttft = latency.Dist(s.ttft_ms, 0) if s.ttft_ms is not None else profile.ttft
        tbt = latency.Dist(s.tbt_ms, 0) if s.tbt_ms is not None else profile.tbt
        ttft, tbt = latency.Dist(ttft.mean * f, ttft.sd * f), latency.Dist(tbt.mean * f, tbt.sd * f)
        return latency.Profile(f"{profile.name}+fixed", ttft, tbt, profile.serving)

    def draw(self) -> tuple[random.Random, int]:
        """A random generator and a creation time for one request (both fixed by --seed).

        With --seed each request gets its own generator, so concurrent requests cannot
        change each other's draws; without it one shared generator does (seeding a fresh
        one from the OS would cost more than the request's draws)."""
        if self._seeded is not None:
            return random.Random(self._seeded.getrandbits(64)), SEEDED_EPOCH + next(self._counter)
        return self._shared, int(self.clock.wall())

    def context(self, model_id: str, headers: Mapping[str, str] | None = None, *, model=None,
                profile: latency.Profile | None = None) -> Context:
        """Everything planning needs for one request; raises ModelNotFoundError. A request
        header `x-llmsim-seed: N` seeds its generator with N, whatever --seed says. `model` and
        `profile`: a model outside the catalogue (moderations') and its latency."""
        if model is None:
            model = self.catalogue.get(model_id)
        if self._seeded is None:        # (`draw`, written out)
            rng, created = self._shared, int(self._wall())
        else:
            rng, created = self.draw()
        if headers is not None and (seed := headers.get(SEED_HEADER)) is not None:
            rng = random.Random(f"llmsim-request:{_seed(seed)}")
        if profile is None:
            profile = self._profiles.get(model.latency) or self.profile_for(model)
        return Context(self.settings, model, profile, self.rules, rng, created, self.ids)
