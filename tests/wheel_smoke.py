"""Smoke check of an INSTALLED llmsim (a wheel in a fresh venv), run by .ci/run:

    VENV/bin/python tests/wheel_smoke.py

Starts `llmsim serve` (the venv's console script) from an empty temporary directory, far from
any checkout, and checks what a user of the wheel sees: llmsim imports from site-packages, the
server starts without printing a warning, `POST /v1/responses` answers 200 with a JSON
response, the same request with `stream: true` answers a well-formed SSE stream that ends with
`response.completed`, and `/v1/responses` upgrades to a WebSocket (101) that answers a
`response.create`. Prints each check; exits non-zero with the reason on the first failure.
Uses only the standard library and llmsim's own dependencies (websockets).
"""
from __future__ import annotations

import http.client
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from websockets.sync.client import connect

CHECKOUT = Path(__file__).resolve().parents[1]
BODY = {"model": "gpt-4o-mini", "input": "Say hello."}


class SmokeFailure(Exception):
    pass


def check(condition: bool, what: str) -> None:
    if not condition:
        raise SmokeFailure(what)
    print(f"ok   {what}", flush=True)


def check_quiet(condition: bool, what: str) -> None:
    if not condition:
        raise SmokeFailure(what)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port: int, method: str, path: str, body: dict | None = None) -> tuple[int, str, bytes]:
    """(status, Content-Type, body) of one request on a connection of its own."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, json.dumps(body) if body is not None else None,
                     {"Content-Type": "application/json"} if body is not None else {})
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        conn.close()


def check_installed(workdir: Path) -> None:
    where = subprocess.run([sys.executable, "-c", "import llmsim; print(llmsim.__file__)"],
                           cwd=workdir, capture_output=True, text=True, check=True).stdout.strip()
    check("site-packages" in where and not where.startswith(str(CHECKOUT)),
          f"llmsim imports from the installed wheel ({where})")


def wait_ready(proc: subprocess.Popen, port: int, log: Path, processes: int) -> None:
    """Until /health answers and each of the server's `processes` has started its app."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SmokeFailure(f"llmsim serve exited with {proc.returncode}")
        try:
            healthy = request(port, "GET", "/health")[0] == 200
        except OSError:
            healthy = False
        if healthy and log.read_text().count("Application startup complete") >= processes:
            print(f"ok   llmsim serve answers /health on port {port}, {processes} process(es) started", flush=True)
            return
        time.sleep(0.2)
    raise SmokeFailure("llmsim serve not ready within 90 s")


def check_json(port: int) -> None:
    status, content_type, raw = request(port, "POST", "/v1/responses", BODY)
    check(status == 200, f"POST /v1/responses -> {status} (want 200)")
    check(content_type.startswith("application/json"), f"its Content-Type is JSON ({content_type})")
    doc = json.loads(raw)
    text = "".join(part.get("text", "") for item in doc.get("output", [])
                   for part in item.get("content") or [])
    check(doc.get("object") == "response" and doc.get("status") == "completed" and text != "",
          f"the body is a completed response with output text ({doc.get('id')})")


def check_sse(port: int) -> None:
    status, content_type, raw = request(port, "POST", "/v1/responses", {**BODY, "stream": True})
    check(status == 200, f"POST /v1/responses stream=true -> {status} (want 200)")
    check(content_type.startswith("text/event-stream"), f"its Content-Type is an event stream ({content_type})")
    events, event_name = [], None
    for line in raw.decode().splitlines():
        if line.startswith("event: "):
            event_name = line[len("event: "):]
        elif line.startswith("data: "):
            data = json.loads(line[len("data: "):])
            check_quiet(data.get("type") == event_name,
                        f"SSE data type {data.get('type')!r} matches its event line {event_name!r}")
            events.append(data)
            event_name = None
    types = [e["type"] for e in events]
    check(len(events) >= 3 and types[0] == "response.created" and types[-1] == "response.completed",
          f"the stream is {len(events)} events, response.created ... response.completed")
    numbers = [e.get("sequence_number") for e in events]
    check(numbers == list(range(numbers[0], numbers[0] + len(numbers))),
          "sequence_number counts up by one from event to event")
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    final = events[-1]["response"]
    text = "".join(part.get("text", "") for item in final.get("output", [])
                   for part in item.get("content") or [])
    check(deltas != "" and deltas == text, "the text deltas add up to the completed response's text")


def check_websocket(port: int) -> None:
    with connect(f"ws://127.0.0.1:{port}/v1/responses", open_timeout=30) as ws:
        check(ws.response.status_code == 101,
              f"GET /v1/responses upgrades to a WebSocket -> {ws.response.status_code} (want 101)")
        ws.send(json.dumps({"type": "response.create", **BODY}))
        types = []
        while not types or types[-1] not in ("response.completed", "response.failed", "error"):
            types.append(json.loads(ws.recv(timeout=30))["type"])
        check(types[0] == "response.created" and types[-1] == "response.completed",
              f"response.create over it answers {len(types)} events, ending response.completed")


def serve_and_check(workdir: Path, args: list[str], checks, processes: int = 1) -> None:
    """`llmsim serve ARGS` from `workdir`; run `checks` against it; stop it; then its output must
    hold no warning and no traceback."""
    llmsim = Path(sys.executable).parent / "llmsim"
    port = free_port()
    log = workdir / f"server-{port}.log"
    print(f"-- {llmsim} serve {' '.join(args)} --port {port}, from {workdir}", flush=True)
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(llmsim), "serve", *args, "--port", str(port)],
                                cwd=workdir, stdout=out, stderr=subprocess.STDOUT,
                                env={k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"})
    try:
        wait_ready(proc, port, log, processes)
        for run in checks:
            run(port)
        proc.terminate()
        proc.wait(timeout=30)
        output = log.read_text()
        warnings = [line for line in output.splitlines() if re.search(r"warn", line, re.I)]
        check(not warnings, "the server printed no warning" + "".join(f"\n    {w}" for w in warnings))
        check("Traceback" not in output, "the server logged no traceback")
    except Exception:
        print(f"--- server output ---\n{log.read_text()}", file=sys.stderr, flush=True)
        raise
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="llmsim-wheel-smoke-") as tmp:
        workdir = Path(tmp)
        try:
            check_installed(workdir)
            serve_and_check(workdir, ["--profile", "instant"], [check_json, check_sse, check_websocket])
            serve_and_check(workdir, ["--profile", "instant", "--workers", "2"], [check_json], processes=2)
        except Exception as exc:
            print(f"FAIL {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            return 1
    print("wheel smoke check: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
