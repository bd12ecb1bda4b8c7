"""Instructions one request costs inside the app, counted by valgrind's callgrind.

    python bench/instructions.py                  # every workload of bench/inproc.py
    python bench/instructions.py resp_stream --n 500

CPU time on this machine moves by 10-30% between runs of the same build (another process on
the other core, the host), so small changes drown in it. An instruction count hardly moves:
the same build gives the same figure within ~0.5% (string hashing is seeded alike in every
run), whatever else the machine is doing. Each workload runs in its own process under
callgrind with instrumentation off while the app starts and warms up (`bench/inproc.py`'s
requests, no sockets), on for `--n` requests, then off. Fewer instructions is not always less
time (cache misses, system calls), so a change worth keeping shows in the wrk figures of
`bench/perf.py` too. Needs valgrind (`apt-get install valgrind`).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import inproc  # noqa: E402  (puts the repo first on sys.path)
from llmsim.app import create_app  # noqa: E402
from llmsim.settings import Settings  # noqa: E402

WARM_UP = 200


def instrument(on: bool) -> None:
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(os.getpid())],
                   check=True, stdout=subprocess.DEVNULL)


async def child(name: str, n: int, flags: dict) -> None:
    """Runs under callgrind: start the app, warm up, count `n` requests."""
    logging.disable(logging.WARNING)
    app = create_app(Settings(**{"profile": "instant", "target_tokens": 32, **flags}))
    await inproc.lifespan(app)
    path, doc = inproc.WORKLOADS[name]
    one = inproc.requester(app, path, json.dumps(doc).encode())
    for _ in range(WARM_UP):
        await one()
    instrument(True)
    for _ in range(n):
        await one()
    instrument(False)


def count(name: str, n: int, flags: dict) -> int:
    """Instructions per request of workload `name`."""
    with tempfile.TemporaryDirectory(prefix="llmsim-callgrind-") as scratch:
        run = subprocess.run(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no",
             f"--callgrind-out-file={scratch}/callgrind.out", sys.executable, __file__,
             "--child", name, "--n", str(n), "--flags", json.dumps(flags)],
            capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    found = re.search(r"I\s+refs:\s+([\d,]+)", run.stderr)
    if run.returncode != 0 or found is None:
        raise SystemExit(f"{name}: callgrind run failed (exit {run.returncode}):\n{run.stderr[-2000:]}")
    return int(found.group(1).replace(",", "")) // n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workloads", nargs="*", help=f"some of {', '.join(inproc.WORKLOADS)} (default: all)")
    p.add_argument("--n", type=int, default=200, help="requests counted per workload")
    p.add_argument("--flags", type=json.loads, default={}, help="extra Settings as JSON")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        asyncio.run(child(args.child, args.n, args.flags))
        return
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        p.error("needs valgrind and callgrind_control on PATH (apt-get install valgrind)")
    unknown = set(args.workloads) - set(inproc.WORKLOADS)
    if unknown:
        p.error(f"unknown workload(s) {', '.join(sorted(unknown))}; known: {', '.join(inproc.WORKLOADS)}")
    for name in args.workloads or inproc.WORKLOADS:
        print(f"{name:20s} {count(name, args.n, args.flags):>10,} instructions per request", flush=True)


if __name__ == "__main__":
    main()
