"""Python opcodes a request costs in `llmsim serve`, function by function (sys.settrace).

    python bench/opcodes.py                         # W1-W4 of bench/perf.py, one connection
    python bench/opcodes.py W2 --baseline bd76b8f   # and an earlier commit, diffed by function
    python bench/opcodes.py W4 --connections 64     # under wrk's 64 connections
    python bench/opcodes.py W1 --top 40 -- --rate-limit-rpm 100000   # flags after -- go to serve

Counts are exact and the same on a busy machine; they find where Python time goes (about
ten nanoseconds of server CPU an opcode), wrk proves it. Why and how:
docs/benchmarks.md#benchopcodes.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import instructions  # noqa: E402
import perf  # noqa: E402
import servers  # noqa: E402

# Run in the server's process: SIGUSR1 starts counting, SIGUSR2 stops and writes the counts.
TRACER = r"""
import collections, json, os, signal, sys
counts = collections.Counter()
def tracer(frame, event, arg):
    frame.f_trace_opcodes = True
    code = frame.f_code
    key = code.co_filename.rsplit("/", 1)[-1] + ":" + code.co_name
    def local(frame, event, arg):
        if event == "opcode":
            counts[key] += 1
        return local
    return local
def on(*_):
    sys.settrace(tracer)
def off(*_):
    sys.settrace(None)
    with open(os.environ["BENCH_OPCODES_OUT"], "w") as f:
        json.dump(counts, f)
signal.signal(signal.SIGUSR1, on)
signal.signal(signal.SIGUSR2, off)
from llmsim.cli import main
sys.exit(main(sys.argv[1:]))
"""
GENERATED = re.compile(r"_w\d+|_stream\d+|_c\d+")    # template functions' names differ by build


def count(path: str, body: bytes, flags: tuple[str, ...] = (), n: int = 200, warm_up: int = 50,
          python: str | Path = sys.executable, repo: Path = servers.REPO, connections: int = 1,
          seconds: float = 10) -> dict[str, float]:
    """Opcodes per request by function ("file:function") of `POST path` with `body`, by the
    llmsim of `repo` run by `python`; with `connections` > 1, under wrk for `seconds`."""
    port = servers.free_port()
    out = Path(tempfile.mkdtemp(prefix="opcodes-")) / "counts.json"
    env = {**os.environ, "PYTHONHASHSEED": "0", "BENCH_OPCODES_OUT": str(out)}
    if python != sys.executable:        # another venv: our PYTHONPATH must not hand it this tree
        env.pop("PYTHONPATH", None)
    proc = subprocess.Popen(
        [str(python), "-c", TRACER, "serve", "--port", str(port), "--log-level", "warning",
         *instructions.SERVER_FLAGS, *flags],
        cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        conn = instructions._connect(port, proc)
        if connections > 1:
            conn.close()
            n = instructions._under_wrk(port, path, body, proc, connections, seconds, warm_up, _switch)
        else:
            instructions._one_by_one(conn, path, body, proc, n, warm_up, _switch)
        deadline = time.monotonic() + 30
        while not out.exists() or not out.stat().st_size:
            if time.monotonic() > deadline:
                raise SystemExit("the traced server wrote no counts")
            time.sleep(0.05)
        time.sleep(0.2)                 # (written whole by now)
        counts = Counter()
        for key, value in json.loads(out.read_text()).items():
            counts[GENERATED.sub("_N", key)] += value
        return {key: value / n for key, value in counts.items()}
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


def _switch(proc, state: str) -> None:
    """Counting on (SIGUSR1) or off, the counts written (SIGUSR2)."""
    proc.send_signal(signal.SIGUSR1 if state == "on" else signal.SIGUSR2)
    if state == "on":
        time.sleep(0.2)


def table(found: list[dict[str, float]], sides: list[str], top: int) -> list[str]:
    """The functions costing the most (one side), or differing the most (two), per request."""
    if len(found) == 1:
        rows = sorted(found[0].items(), key=lambda kv: -kv[1])[:top]
        return [f"  {value:8.1f}  {key}" for key, value in rows]
    new, old = found
    keys = set(new) | set(old)
    rows = sorted(keys, key=lambda k: -abs(new.get(k, 0) - old.get(k, 0)))[:top]
    lines = [f"  {'change':>8s}  {sides[0]:>9s}  {sides[1]:>9s}  function"]
    lines += [f"  {new.get(k, 0) - old.get(k, 0):+8.1f}  {new.get(k, 0):9.1f}  {old.get(k, 0):9.1f}  {k}" for k in rows]
    return lines


def main() -> None:
    def more(p) -> None:
        p.add_argument("--top", type=int, default=25, help="functions listed per workload")
        p.add_argument("--json", metavar="FILE", help="write every count, by workload and side, here")
    args, serve_flags, sides = instructions.command_line(__doc__, 10, more)
    everything = {}
    for name in args.workloads:
        title, path, stream, _ = perf.WRK[name]
        body = json.dumps(perf.body(path, instructions.MODEL, stream)).encode()
        found = [count(path, body, serve_flags, args.n, python=python, repo=repo,
                       connections=args.connections, seconds=args.seconds) for _, python, repo in sides]
        everything[name] = dict(zip([s[0] for s in sides], found))
        totals = " / ".join(f"{sum(f.values()):,.0f}" for f in found)
        ratio = f"  current/{args.baseline}: {sum(found[0].values()) / sum(found[1].values()):.3f}" if args.baseline else ""
        print(f"{title}: {totals} opcodes per request{ratio}", flush=True)
        print("\n".join(table(found, [s[0] for s in sides], args.top)), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(everything, indent=1))


if __name__ == "__main__":
    main()
