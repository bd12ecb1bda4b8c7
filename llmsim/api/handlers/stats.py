"""GET /llmsim/stats (JSON) and /llmsim/metrics, /metrics (Prometheus text)."""
from __future__ import annotations

from starlette.responses import Response

from llmsim.observe import metrics, statsview
from llmsim.pacing import transport
from llmsim.simulator import Simulator


class StatsHandlers:
    def __init__(self, simulator: Simulator):
        self.simulator = simulator
        self.template = simulator.templates["stats"]

    async def get(self):
        view = statsview.view(statsview.gather(self.simulator.stats))
        return transport.json_response(self.template.body_json(view=view))

    async def metrics(self, request=None):
        body = metrics.exposition(statsview.gather(self.simulator.stats))
        return Response(body, media_type=metrics.CONTENT_TYPE)
