"""SIGTERM with streams still running past `--graceful-timeout`: each ends with its API's
terminal error event (not a cut stream; a followed background response's too), a stream short enough finishes whole, and the
server exits 0. One shutdown per server kind; every stream kind runs through it at once."""
from __future__ import annotations

import asyncio
import json
import signal
import threading
import time

import httpx
import openai
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

import sse
from conftest import LiveServer
from oai_schemas import validate_response_event, validate_ws_error

pytestmark = [pytest.mark.live, pytest.mark.slow]
GRACE = 1.5         # --graceful-timeout: every long stream still runs then
LONG_S = 8.0        # how long a long stream would take (200 tokens, 40 ms apart)
MODEL = "gpt-4o"
SHUTDOWN = "shutting down"      # in every error's message


def openai_responses(server, out: dict, **kwargs) -> None:
    events = out["events"] = []
    with server.client(timeout=30).responses.create(model=MODEL, input="Go on.", stream=True, **kwargs) as stream:
        for event in stream:
            events.append(event.model_dump(exclude_unset=True))


def openai_chat(server, out: dict) -> None:
    chunks = out["chunks"] = []
    try:
        for chunk in server.client(timeout=30).chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "Go on."}], stream=True):
            chunks.append(chunk)
    except openai.APIError as exc:      # the SDK raises the error chunk
        out["error"] = exc


def raw_sse(url: str, body: dict, out: dict, headers: dict | None = None) -> None:
    with httpx.stream("POST", url, json=body, headers=headers, timeout=30) as response:
        text = ""
        for piece in response.iter_text():
            text += piece
            out["events"] = sse.parse(text[:text.rfind("\n\n") + 2])
        out["text"] = text


async def websocket_turn(server, out: dict) -> None:
    events = out["events"] = []
    url = server.url.replace("http://", "ws://") + "/v1/responses"
    async with connect(url) as ws:
        await ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "Go on."}))
        try:
            while True:
                events.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
        except ConnectionClosed as closed:
            out["close"] = closed.rcvd.code if closed.rcvd else None
            out["closed_at"] = time.monotonic()


def started(out: dict, key: str = "events") -> bool:
    return len(out.get(key) or ()) >= 3


@pytest.fixture(scope="module", params=["tuned", "plain"])
def shutdown(request):
    """Streams of every kind running, SIGTERM, and what each client saw."""
    server = LiveServer("--server", request.param, "--ttft-ms", "0", "--tbt-ms", "40", "--target-tokens", "200",
                        "--graceful-timeout", str(GRACE))
    seen = {name: {} for name in ("responses", "background", "short", "chat", "anthropic", "gemini", "websocket")}
    jobs = [
        (openai_responses, (server, seen["responses"])),
        (lambda out: openai_responses(server, out, background=True), (seen["background"],)),
        (openai_chat, (server, seen["chat"])),
        (raw_sse, (server.url + "/v1/messages", {"model": "claude-sonnet-4-6", "max_tokens": 1000, "stream": True,
                                                  "messages": [{"role": "user", "content": "Go on."}]},
                   seen["anthropic"], {"anthropic-version": "2023-06-01"})),
        (raw_sse, (server.url + "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse",
                   {"contents": [{"role": "user", "parts": [{"text": "Go on."}]}]}, seen["gemini"])),
        (lambda out: asyncio.run(websocket_turn(server, out)), (seen["websocket"],)),
    ]
    threads = [threading.Thread(target=run, args=args, daemon=True) for run, args in jobs]
    try:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 20
        while not (all(started(seen[n]) for n in ("responses", "background", "anthropic", "gemini", "websocket"))
                   and started(seen["chat"], "chunks")) and time.monotonic() < deadline:
            time.sleep(0.02)
        short = threading.Thread(target=openai_responses, args=(server, seen["short"]),
                                 kwargs={"max_output_tokens": 16}, daemon=True)    # 0.64 s: within the grace
        short.start()
        while not started(seen["short"]) and time.monotonic() < deadline:
            time.sleep(0.01)
        signalled = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        for thread in [*threads, short]:
            thread.join(LONG_S + 10)
        ended = time.monotonic() - signalled
        server.proc.wait(15)
        exited = time.monotonic() - signalled
        print(f"\nSIGTERM (--server {request.param}, --graceful-timeout {GRACE}): every client saw its "
              f"terminal event within {ended:.2f} s (the WebSocket's error frame and close within "
              f"{seen['websocket'].get('closed_at', float('nan')) - signalled:.2f} s); exit status "
              f"{server.proc.returncode} after {exited:.2f} s")
        yield {"seen": seen, "ended": ended, "status": server.proc.returncode, "output": server.output()}
    finally:
        server.stop()


def test_the_server_exits_0_soon_after_the_graceful_timeout(shutdown):
    assert shutdown["status"] == 0, shutdown["output"][-2000:]
    assert GRACE - 0.5 < shutdown["ended"] < GRACE + 3


def cut_by_the_shutdown(events: list[dict]) -> dict:
    """A Responses stream's events, each valid, numbered without a gap, cut short (not run to
    its end) by a `response.failed` saying the server shut down; that response."""
    for event in events:
        validate_response_event(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    last = events[-1]
    assert last["type"] == "response.failed" and last["response"]["status"] == "failed"
    assert last["response"]["error"]["code"] == "server_error"
    assert SHUTDOWN in last["response"]["error"]["message"]
    assert 3 <= sum(e["type"] == "response.output_text.delta" for e in events) < 200
    return last["response"]


def test_a_responses_stream_past_the_timeout_ends_with_response_failed(shutdown):
    cut_by_the_shutdown(shutdown["seen"]["responses"]["events"])


def test_a_followed_background_response_ends_with_response_failed(shutdown):
    assert cut_by_the_shutdown(shutdown["seen"]["background"]["events"])["background"] is True


def test_a_stream_that_ends_within_the_timeout_finishes_with_every_event(shutdown):
    events = shutdown["seen"]["short"]["events"]
    assert events[-1]["type"] == "response.incomplete"
    assert sum(e["type"] == "response.output_text.delta" for e in events) == 16


def test_a_chat_stream_ends_with_the_error_chunk(shutdown):
    seen = shutdown["seen"]["chat"]
    assert len(seen["chunks"]) >= 3
    error = seen.get("error")
    assert isinstance(error, openai.APIError), seen
    assert SHUTDOWN in error.message and error.body["type"] == "server_error"


def test_an_anthropic_stream_ends_with_an_error_event(shutdown):
    seen = shutdown["seen"]["anthropic"]
    name, data = sse.parse(seen["text"])[-1]
    assert name == "error" and data["type"] == "error"
    assert data["error"]["type"] == "api_error" and SHUTDOWN in data["error"]["message"]


def test_a_gemini_stream_ends_with_an_error_event(shutdown):
    seen = shutdown["seen"]["gemini"]
    _, data = sse.parse(seen["text"])[-1]
    assert data["error"]["code"] == 503 and data["error"]["status"] == "UNAVAILABLE"
    assert SHUTDOWN in data["error"]["message"]


def test_a_websocket_response_gets_an_error_frame_then_the_socket_closes(shutdown):
    seen = shutdown["seen"]["websocket"]
    last = seen["events"][-1]
    validate_ws_error(last)
    assert last["type"] == "error" and last["status"] == 503 and SHUTDOWN in last["error"]["message"]
    assert [e["sequence_number"] for e in seen["events"]] == list(range(len(seen["events"])))
    assert seen["close"] == 1012
