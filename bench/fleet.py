"""A fleet of N backends (`llmsim fleet`, default 16): start-up time, idle CPU and memory per backend.

    python bench/fleet.py [--backends 16] [--idle-s 20] [--rounds 1]

Start-up: from starting `llmsim fleet` to its control address answering (every backend then
listens) and to every backend's /health answering 200. Idle CPU: the whole tree (supervisor and
backends) over --idle-s seconds with no traffic, as a share of one core. Memory per backend:
RSS (what `ps` shows, counting pages shared with the supervisor that forked it), PSS (shared
pages split between the processes sharing them) and USS (pages of its own), from
/proc/PID/smaps_rollup, after one request to each. The fleet: N backends, half one model's
replicas, the rest one backend each with a model and settings of its own.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procstat import cpu_seconds, tree  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MODELS = ["gpt-4o", "gpt-4.1", "claude-sonnet-4-5", "gemini-2.5-flash", "o4-mini", "deepseek-chat"]


def fleet_doc(n: int) -> dict:
    half = n // 2
    backends = [{"name": "mini", "replicas": half, "models": ["gpt-4o-mini"], "settings": {"profile": "fast"}}]
    for i in range(n - half):
        backends.append({"name": f"b{i}", "models": [MODELS[i % len(MODELS)]],
                         "settings": {"ttft_ms": 100 + 10 * i, "tbt_ms": 10, "max_concurrency": 4}})
    return {"backends": backends}


def smaps(pid: int) -> dict[str, int]:
    """Rss, Pss, Private_Clean + Private_Dirty (USS) in bytes."""
    found = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("Rss", "Pss", "Private_Clean", "Private_Dirty"):
                found[key] = int(rest.split()[0]) * 1024
    return {"rss": found["Rss"], "pss": found["Pss"], "uss": found["Private_Clean"] + found["Private_Dirty"]}


def own_cpu_seconds(pid: int) -> float:
    """User + system CPU of the process itself (not its children)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_round(n: int, idle_s: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fleet.yaml"
        path.write_text(yaml.safe_dump(fleet_doc(n)))
        control = f"http://127.0.0.1:{free_port()}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLMSIM_")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        began = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "llmsim", "fleet", str(path), "--control-port",
                                 control.rsplit(":", 1)[1]], stdout=subprocess.DEVNULL, env=env)
        try:
            listing = None
            while listing is None:
                if proc.poll() is not None or time.monotonic() - began > 300:
                    raise SystemExit(f"the fleet did not start (exit {proc.returncode})")
                try:
                    listing = httpx.get(f"{control}/llmsim/fleet", timeout=2).json()["backends"]
                except httpx.HTTPError:
                    time.sleep(0.02)
            listening = time.monotonic() - began
            startup_cpu = cpu_seconds(proc.pid)     # supervisor and backends, from exec to listening
            supervisor_cpu = own_cpu_seconds(proc.pid)
            pending = {b["url"] for b in listing}
            while pending:
                for url in list(pending):
                    try:
                        if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                            pending.discard(url)
                    except httpx.HTTPError:
                        pass
            healthy = time.monotonic() - began
            time.sleep(2)                           # the start-up's last steps settle
            cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
            time.sleep(idle_s)
            idle = (cpu_seconds(proc.pid) - cpu0) / (time.monotonic() - t0)
            for b in listing:                       # one request each: a backend that has answered
                model = (b["models"] or ["gpt-4o"])[0]
                httpx.post(f"{b['url']}/v1/chat/completions", timeout=30,
                           json={"model": model, "messages": [{"role": "user", "content": "Hi"}]})
            memory = [smaps(b["pid"]) for b in listing]
            supervisor = smaps(proc.pid)
            processes = len(tree(proc.pid))
        finally:
            proc.terminate()
            proc.wait(30)
    return {"listening_s": listening, "startup_cpu_s": startup_cpu, "supervisor_cpu_s": supervisor_cpu,
            "healthy_s": healthy, "idle_cpu": idle, "memory": memory,
            "supervisor": supervisor, "processes": processes}


def mb(x: float) -> str:
    return f"{x / 2**20:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", type=int, default=16)
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(f"fleet of {args.backends} backends, {os.cpu_count()} CPUs, load average {load} before")
    for r in range(args.rounds):
        result = one_round(args.backends, args.idle_s)
        mem = result["memory"]
        per = {k: statistics.median(m[k] for m in mem) for k in ("rss", "pss", "uss")}
        total_pss = sum(m["pss"] for m in mem) + result["supervisor"]["pss"]
        print(f"round {r + 1}: start-up {result['listening_s']:.2f} s to the control address, "
              f"{result['healthy_s']:.2f} s to every /health 200 ({result['startup_cpu_s']:.2f} CPU-seconds, "
              f"{result['supervisor_cpu_s']:.2f} of them the supervisor's); idle CPU {100 * result['idle_cpu']:.2f}% "
              f"of one core over {args.idle_s:g} s ({result['processes']} processes)")
        print(f"  per backend (median MB): RSS {mb(per['rss'])}, PSS {mb(per['pss'])}, USS {mb(per['uss'])}; "
              f"supervisor RSS {mb(result['supervisor']['rss'])} MB; fleet total PSS {mb(total_pss)} MB")


if __name__ == "__main__":
    main()
