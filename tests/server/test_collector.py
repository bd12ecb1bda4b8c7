"""When a serving process lets CPython's cyclic collector run (llmsim.server.collector): young
collections rarely, a full pass never on its own under load, when the process goes quiet,
and at the latest `max_wait` apart under load that never does."""
from __future__ import annotations

import asyncio
import gc

from llmsim.app import create_app
from llmsim.server.collector import NEVER, YOUNG, Collector
from llmsim.settings import Settings


class FakeGC:
    """The parts of the `gc` module the policy uses, counting full collections."""

    def __init__(self, promoted: int = 1):
        self.threshold = (700, 10, 10)
        self.promoted = promoted        # young collections since the last full one
        self.full = self.frozen = self.unfrozen = 0

    def collect(self):
        self.full += 1
        self.promoted = 0

    def freeze(self):
        self.frozen += 1

    def unfreeze(self):
        self.unfrozen += 1

    def get_threshold(self):
        return self.threshold

    def set_threshold(self, *threshold):
        self.threshold = threshold

    def get_count(self):       # CPython counts young collections in the middle slot
        return (0, self.promoted, 0)


def serving(fake: FakeGC, **kwargs) -> Collector:
    collector = Collector(gc_module=fake, **kwargs)
    collector.serving(now=0.0)
    fake.full = 0
    fake.promoted = 3
    return collector


def test_serving_freezes_start_up_and_lets_only_young_collections_start_on_their_own():
    fake = FakeGC()
    Collector(gc_module=fake).serving(now=0.0)
    assert (fake.frozen, fake.threshold) == (1, (YOUNG, NEVER, NEVER))


def test_the_objects_a_burst_of_requests_holds_at_once_start_no_collection():
    """5,000 container objects alive at once (CPython's default policy collects every 700,
    a W4 run: 2-3 ms apart) and gone again: no collection walks them."""
    collector = Collector()
    runs = []

    def count_runs(phase, info):
        if phase == "start":
            runs.append(info["generation"])
    collector.serving(now=0.0)
    gc.callbacks.append(count_runs)
    try:
        held = [{"event": i} for i in range(5_000)]
        del held
    finally:
        gc.callbacks.remove(count_runs)
        collector.stopped()
    assert runs == []


def test_no_full_collection_while_requests_are_in_flight():
    fake = FakeGC()
    collector = serving(fake)
    for i in range(50):
        collector.request_ended(now=2.0 + i / 10, in_flight=5)
    assert fake.full == 0


def test_a_full_collection_runs_when_the_last_request_in_flight_ends():
    fake = FakeGC()
    collector = serving(fake)
    collector.request_ended(now=2.0, in_flight=1)
    collector.request_ended(now=2.1, in_flight=0)
    assert fake.full == 1


def test_a_quiet_process_collects_at_most_once_per_quiet_gap():
    fake = FakeGC()
    collector = serving(fake, quiet_gap=1.0)
    for i in range(20):                 # one request at a time, 0.1 s apart
        fake.promoted += 1
        collector.request_ended(now=2.0 + i / 10, in_flight=0)
    assert fake.full == 2               # at 2.0 and at 3.0


def test_nothing_promoted_since_the_last_pass_means_no_pass():
    fake = FakeGC()
    collector = serving(fake)
    fake.promoted = 0
    collector.request_ended(now=5.0, in_flight=0)
    assert fake.full == 0


def test_load_that_never_goes_quiet_still_gets_a_full_collection_every_max_wait():
    fake = FakeGC()
    collector = serving(fake, max_wait=60.0)
    for second in range(1, 181):
        collector.request_ended(now=float(second), in_flight=900)
    assert fake.full == 3               # at 60, 120 and 180 s


def test_the_pass_runs_where_the_server_schedules_it_and_only_once_until_then():
    fake = FakeGC()
    scheduled = []
    collector = serving(fake, schedule=scheduled.append)
    collector.request_ended(now=2.0, in_flight=0)
    collector.request_ended(now=9.0, in_flight=0)
    assert (len(scheduled), fake.full) == (1, 0)
    scheduled[0]()
    assert fake.full == 1


def test_an_app_leaves_the_processes_policy_as_it_found_it():
    """The app's lifespan installs the policy and its end restores CPython's (tests and
    embedders run apps inside their own processes)."""
    before = gc.get_threshold()
    app = create_app(Settings(profile="instant"))
    seen = []

    async def lifespan():
        messages = asyncio.Queue()
        for kind in ("lifespan.startup", "lifespan.shutdown"):
            messages.put_nowait({"type": kind})

        async def send(message):
            if message["type"] == "lifespan.startup.complete":
                seen.append(gc.get_threshold())
        await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, messages.get, send)

    asyncio.run(lifespan())
    assert seen == [(YOUNG, NEVER, NEVER)]
    assert gc.get_threshold() == before


def test_an_app_not_serving_leaves_collection_to_cpython():
    """Without its lifespan (an app driven in-process) or once stopped, a request's end
    starts no full collection: CPython's own thresholds are in place and collect."""
    fake = FakeGC()
    collector = Collector(gc_module=fake)
    collector.request_ended(now=100.0, in_flight=0)
    assert fake.full == 0
    stopped = serving(fake)
    stopped.stopped()
    stopped.request_ended(now=100.0, in_flight=0)
    assert fake.full == 0
