"""Instructions a request costs in `llmsim serve` (uvicorn and all), counted by callgrind.

    python bench/instructions.py                    # W1-W4 of bench/perf.py
    python bench/instructions.py W4 --n 500 -- --store lmdb:/tmp/bench.lmdb   # flags after -- go to serve
    python bench/instructions.py W2 --baseline bd76b8f          # and an earlier commit (bench/baseline.py)
    python bench/instructions.py W2 --connections 64            # wrk's 64 connections, not one

The same build gives the same count within ~0.5%, whatever else the machine does. Needs
valgrind. Why and how: docs/benchmarks.md#benchinstructions.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import baseline  # noqa: E402
import perf  # noqa: E402
import servers  # noqa: E402
import wrkrun  # noqa: E402

SERVER_FLAGS = ("--profile", "instant", "--target-tokens", "32")
MODEL = "gpt-4o"


def available() -> bool:
    return bool(shutil.which("valgrind") and shutil.which("callgrind_control"))


def count(path: str, body: bytes, flags: tuple[str, ...] = (), n: int = 200, warm_up: int = 50,
          python: str | Path = sys.executable, repo: Path = servers.REPO, connections: int = 1,
          seconds: float = 30, out_file: str = "/dev/null") -> float:
    """Instructions per request of `POST path` with `body` (answered 200, read to its end), by
    the llmsim of `repo` run by `python`; with `connections` > 1, under wrk for `seconds`."""
    port = servers.free_port()
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    if python != sys.executable:        # another venv: our PYTHONPATH must not hand it this tree
        env.pop("PYTHONPATH", None)
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out_file}",
         str(python), "-m", "llmsim", "serve", "--port", str(port), "--log-level", "warning",
         *SERVER_FLAGS, *flags],
        cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        conn = _connect(port, proc)
        if connections > 1:
            n = _under_wrk(port, path, body, proc, connections, seconds, warm_up)
            conn.close()
        else:
            _one_by_one(conn, path, body, proc, n, warm_up)
    finally:
        proc.terminate()
        err = proc.communicate(timeout=300)[1]
    found = re.search(r"Collected : (\d+)", err)
    if not found:
        raise SystemExit(f"callgrind run failed:\n{err[-2000:]}")
    return int(found.group(1)) / n


def _under_wrk(port: int, path: str, body: bytes, proc, connections: int, seconds: float, warm_up: int,
               switch=None) -> int:
    """Count while wrk keeps `connections` connections busy; the requests it completed.
    `switch(proc, "on" | "off")` turns counting on and off (default: callgrind's)."""
    switch = switch or _instrument
    body_file = Path(tempfile.mkdtemp(prefix="instructions-")) / "body.json"
    body_file.write_bytes(body)
    url = f"http://127.0.0.1:{port}{path}"
    options = dict(threads=1, connections=connections, timeout=60)
    wrkrun.run(url, body_file, duration=max(2.0, warm_up / 25))
    switch(proc, "on")
    result = wrkrun.run(url, body_file, duration=seconds, **options)
    switch(proc, "off")
    done = result.counts.get("requests")
    errors = sum(result.counts.get(k, 0) for k in ("status_errors", "read_errors", "timeouts", "connect_errors"))
    if not done or errors:
        raise SystemExit(f"wrk against the instrumented server: {done} requests, {errors} errors\n"
                         + result.output[-1500:])
    return done


def _one_by_one(conn, path: str, body: bytes, proc, n: int, warm_up: int, switch=None) -> None:
    """Count `n` requests sent one after another on a keep-alive connection (`switch`: as
    `_under_wrk`'s)."""
    switch = switch or _instrument
    def send(times: int) -> None:
        for _ in range(times):
            conn.request("POST", path, body, {"content-type": "application/json"})
            answer = conn.getresponse()
            answer.read()
            if answer.status != 200:
                raise SystemExit(f"POST {path}: the server answered {answer.status}")
    send(warm_up)
    switch(proc, "on")
    send(n)
    switch(proc, "off")


def _instrument(proc, state: str) -> None:
    subprocess.run(["callgrind_control", "-i", state, str(proc.pid)], capture_output=True, check=True)


def _connect(port: int, proc) -> http.client.HTTPConnection:
    """A keep-alive connection once the (slow, instrumented) server answers /health."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("llmsim exited at start-up")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            conn.request("GET", "/health")
            conn.getresponse().read()
            return conn
        except OSError:
            time.sleep(0.5)
    raise SystemExit("llmsim under valgrind did not start in 300 s")


def command_line(doc: str, seconds: float, more=None):
    """(args, serve flags, sides) of a per-request counter's command line (this script's and
    bench/opcodes.py's): the workloads, --n, --connections, --seconds, --baseline, what `more`
    adds, and the flags after `--` for `llmsim serve`; sides: (name, python, repo) to count."""
    argv = sys.argv[1:]
    serve_flags = tuple(argv[argv.index("--") + 1:]) if "--" in argv else ()
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workloads", nargs="*", help="some of W1 W2 W3 W4 (default: all)")
    p.add_argument("--n", type=int, default=200, help="requests counted per workload (one connection)")
    p.add_argument("--connections", type=int, default=1, help="above 1: count under wrk with this many connections")
    p.add_argument("--seconds", type=float, default=seconds, help="with --connections: wrk's seconds")
    p.add_argument("--baseline", metavar="REV", help="also count this earlier commit (bench/baseline.py)")
    if more is not None:
        more(p)
    args = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    unknown = set(args.workloads) - set(perf.WRK)
    if unknown:
        p.error(f"unknown workload(s) {', '.join(sorted(unknown))}; known: {', '.join(perf.WRK)}")
    args.workloads = args.workloads or list(perf.WRK)
    sides = [("current", sys.executable, servers.REPO)]
    if args.baseline:
        b = baseline.prepare(args.baseline)
        sides.append((args.baseline, b.python, b.src))
    return args, serve_flags, sides


def main() -> None:
    if not available():
        raise SystemExit("needs valgrind and callgrind_control on PATH (apt-get install valgrind)")
    args, serve_flags, sides = command_line(__doc__, 30, lambda p: p.add_argument(
        "--out", help="callgrind output file prefix (default: none written), for callgrind_annotate"))
    for name in args.workloads:
        title, path, stream, _ = perf.WRK[name]
        body = json.dumps(perf.body(path, MODEL, stream)).encode()
        found = []
        for side, python, repo in sides:
            out = f"{args.out}.{name}.{side}" if args.out else "/dev/null"
            found.append(count(path, body, serve_flags, args.n, python=python, repo=repo,
                               connections=args.connections, seconds=args.seconds, out_file=out))
            print(f"{title:30s} {side:>10s} {found[-1]:>12,.0f} instructions per request", flush=True)
        if len(found) == 2:
            print(f"{title:30s} current/{args.baseline}: {found[0] / found[1]:.3f}", flush=True)


if __name__ == "__main__":
    main()
