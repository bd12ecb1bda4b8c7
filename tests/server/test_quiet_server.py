"""The tuned server sleeps while idle (llmsim.server.quiet): no tick wakes it, yet each
response's `date` is the current second, and a signal still stops it at once."""
from __future__ import annotations

import signal
import time
from email.utils import parsedate_to_datetime

import httpx
import pytest
import uvicorn

from conftest import LiveServer
from llmsim.server.quiet import DatedState

NEVER_S = 30        # a server the signal did not wake would never stop; a busy machine is slow


def test_the_server_headers_are_made_once_a_second_with_that_seconds_date():
    now = [1_700_000_000.2]
    config = uvicorn.Config(app=None, headers=[("x-served-by", "llmsim")])
    config.encoded_headers = [(b"x-served-by", b"llmsim")]
    timers = []         # (delay, callback): the loop's timers
    state = DatedState(config, clock=lambda: now[0], later=lambda delay, callback: timers.append((delay, callback)))
    first = state.default_headers
    assert first == [(b"date", b"Tue, 14 Nov 2023 22:13:20 GMT"), (b"x-served-by", b"llmsim")]
    assert len(timers) == 1 and timers[0][0] == pytest.approx(0.8)     # due when the second ends
    now[0] += 0.7
    assert state.default_headers is first           # the same second: the same list, no new timer
    assert len(timers) == 1
    now[0] += 0.2
    timers.pop()[1]()                               # the second ended
    assert state.default_headers[0] == (b"date", b"Tue, 14 Nov 2023 22:13:21 GMT")
    assert len(timers) == 1


def test_a_server_without_the_date_header_sends_none():
    config = uvicorn.Config(app=None, date_header=False)
    config.encoded_headers = [(b"server", b"uvicorn")]
    assert DatedState(config, clock=lambda: 5.0).default_headers == [(b"server", b"uvicorn")]


@pytest.fixture(scope="module")
def idle_server():
    server = LiveServer("--profile", "instant")
    yield server
    server.stop()


def _date_of(response: httpx.Response) -> float:
    return parsedate_to_datetime(response.headers["date"]).timestamp()


@pytest.mark.live
def test_an_idle_servers_answers_carry_the_current_date(idle_server):
    for _ in range(2):
        time.sleep(2.2)             # idle for a while: nothing refreshed the date meanwhile
        before = time.time()
        response = httpx.get(f"{idle_server.url}/health", timeout=10)
        after = time.time()
        assert int(before) - 1 <= _date_of(response) <= after   # to the second (one of slack)
    first = _date_of(httpx.get(f"{idle_server.url}/health", timeout=10))
    time.sleep(1.1)
    assert _date_of(httpx.get(f"{idle_server.url}/health", timeout=10)) > first


@pytest.mark.live
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_idle_server_stops_when_signalled(how):
    server = LiveServer("--profile", "instant")
    try:
        assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
        time.sleep(0.5)             # asleep: no request, no tick
        server.proc.send_signal(how)
        assert server.proc.wait(NEVER_S) == 0
    finally:
        server.stop()
    assert "Finished server process" in server.output()
