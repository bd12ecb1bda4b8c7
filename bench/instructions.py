"""Instructions a request costs in `llmsim serve` (uvicorn and all), counted by callgrind.

    python bench/instructions.py                    # W1-W4 of bench/perf.py
    python bench/instructions.py W4 --n 500 -- --store lmdb:/tmp/bench.lmdb   # flags after -- go to serve

CPU time on this machine moves by 10-30% between runs of the same build (another process on
the other core, the host), so small changes drown in it. An instruction count hardly moves:
the same build gives the same figure within ~0.5% (string hashing is seeded alike in every
run), whatever else the machine is doing. The server (one worker, `--profile instant`,
32-token replies, as in bench/perf.py's W1-W4) runs under valgrind's callgrind with its
instrumentation off while it starts and warms up, on for `--n` requests sent one after
another on a keep-alive connection, then off. Fewer instructions is not always less time
(cache misses, system calls), so a change worth keeping shows in bench/perf.py too. Needs
valgrind (`apt-get install valgrind`); valgrind runs Python ~50x slower (~20 s a workload).
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
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import perf  # noqa: E402
import servers  # noqa: E402

SERVER_FLAGS = ("--profile", "instant", "--target-tokens", "32")
MODEL = "gpt-4o"


def available() -> bool:
    return bool(shutil.which("valgrind") and shutil.which("callgrind_control"))


def count(path: str, body: bytes, flags: tuple[str, ...] = (), n: int = 200, warm_up: int = 50) -> float:
    """Instructions per request of `POST path` with `body` (answered 200, read to its end)."""
    port = servers.free_port()
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=/dev/null",
         sys.executable, "-m", "llmsim", "serve", "--port", str(port), "--log-level", "warning",
         *SERVER_FLAGS, *flags],
        cwd=servers.REPO, env={**os.environ, "PYTHONHASHSEED": "0"},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        conn = _connect(port, proc)

        def send(times: int) -> None:
            for _ in range(times):
                conn.request("POST", path, body, {"content-type": "application/json"})
                answer = conn.getresponse()
                answer.read()
                if answer.status != 200:
                    raise SystemExit(f"POST {path}: the server answered {answer.status}")
        send(warm_up)
        _instrument(proc.pid, "on")
        send(n)
        _instrument(proc.pid, "off")
    finally:
        proc.terminate()
        err = proc.communicate(timeout=300)[1]
    found = re.search(r"Collected : (\d+)", err)
    if not found:
        raise SystemExit(f"callgrind run failed:\n{err[-2000:]}")
    return int(found.group(1)) / n


def _instrument(pid: int, state: str) -> None:
    subprocess.run(["callgrind_control", "-i", state, str(pid)], capture_output=True, check=True)


def _connect(port: int, proc) -> http.client.HTTPConnection:
    """A keep-alive connection once the (slow, instrumented) server answers /health."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("llmsim under valgrind exited at start-up")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            conn.request("GET", "/health")
            conn.getresponse().read()
            return conn
        except OSError:
            time.sleep(0.5)
    raise SystemExit("llmsim under valgrind did not start in 300 s")


def main() -> None:
    argv = sys.argv[1:]
    serve_flags = tuple(argv[argv.index("--") + 1:]) if "--" in argv else ()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workloads", nargs="*", help="some of W1 W2 W3 W4 (default: all)")
    p.add_argument("--n", type=int, default=200, help="requests counted per workload")
    args = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if not available():
        p.error("needs valgrind and callgrind_control on PATH (apt-get install valgrind)")
    unknown = set(args.workloads) - set(perf.WRK)
    if unknown:
        p.error(f"unknown workload(s) {', '.join(sorted(unknown))}; known: {', '.join(perf.WRK)}")
    for name in args.workloads or perf.WRK:
        title, path, stream, _ = perf.WRK[name]
        body = json.dumps(perf.body(path, MODEL, stream)).encode()
        print(f"{title:30s} {count(path, body, serve_flags, args.n):>12,.0f} instructions per request",
              flush=True)


if __name__ == "__main__":
    main()
