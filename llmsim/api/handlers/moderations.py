"""POST /moderations: a verdict per input, from the word list (data/moderation.yaml)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.api import answer
from llmsim.sim import latency, moderation
from llmsim.sim.plan import Usage
from llmsim.simulator import Simulator

if TYPE_CHECKING:   # a type only
    from llmsim.api.current import Current


class ModerationsHandlers:
    def __init__(self, sim: Simulator, current: Current):
        self.sim = sim
        self.received_at, self.request_headers = current.received_at, current.request_headers
        self.template = sim.templates["moderations"]
        self.rules = moderation.Rules.load(sim.settings.data_file("moderation.yaml"), sim.profiles)  # at start-up
        self.profile = sim.profile_for(self.rules)     # (its `latency`, unless --profile says otherwise)

    async def create(self, body: dict):
        sim = self.sim
        start = sim.clock.began(self.received_at())
        fault = sim.faults.begin("moderations", body, self.request_headers())
        if fault.waits:                 # a timeout's error, or what a shared schedule decides
            await fault.wait()
        model = body.get("model") or self.rules.default_model
        pairs = moderation.inputs(body["input"], model, self.rules.reads_images(model))
        results = [moderation.judge(self.rules, text, images) for text, images in pairs]
        rng, _ = sim.draw()
        sched = latency.schedule(self.profile, rng, 0, 0)
        n = moderation.count(pairs)
        plan = moderation.ModerationPlan(sim.ids.make("moderation", rng), model, results,
                                         Usage(n, 0, 0, n), sched.first_token, sched.end)
        sim.stats.record(plan, "moderations")
        return await answer.reply(sim, self.template, plan, start)
