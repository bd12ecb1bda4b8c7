"""Side-by-side benchmark of llmsim and the fastest peer we know (`@copilotkit/aimock`), issue 7.

    python bench/perf.py                      # full run (~3 minutes), table on stdout
    python bench/perf.py --duration 3 --n 100 # quick development run
    python bench/perf.py --rounds 3           # W1-W5: median of 3 alternating runs per server
    python bench/perf.py --snapshot           # run llmsim from a copy taken at start (shared tree)
    python bench/perf.py --baseline bd76b8f --only W1,W2,W3,W4 --rounds 2   # and an earlier commit

W1-W6 and how each is measured: docs/benchmarks.md#benchperf. Results also go to
bench/results/perf-<time>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import baseline
import peer
import procstat
import report
import servers
import wrkrun
from report import HIGHER, LOWER, NEUTRAL, Row

BENCH = Path(__file__).resolve().parent
PROMPT = "Say something."
WRK = {  # id: (title, path, stream, end marker)
    "W1": ("W1 chat, non-streaming", "/v1/chat/completions", False, None),
    "W2": ("W2 responses, non-streaming", "/v1/responses", False, None),
    "W3": ("W3 chat, streaming", "/v1/chat/completions", True, "data: [DONE]"),
    "W4": ("W4 responses, streaming", "/v1/responses", True, "event: response.completed"),
}
MB = 1024 * 1024


def log(message: str) -> None:
    print(f"[perf {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def body(path: str, model: str, stream: bool) -> dict:
    doc = {"model": model}
    if "chat" in path:
        doc["messages"] = [{"role": "user", "content": PROMPT}]
    else:
        doc["input"] = PROMPT
    if stream:
        doc["stream"] = True
    return doc


def probe(url: str, doc: dict, marker: str | None, timeout: float = 30) -> str | None:
    """None when one request succeeds (200, whole stream); else why not, e.g. "HTTP 404"."""
    request = urllib.request.Request(url, data=json.dumps(doc).encode(), method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Authorization": "Bearer sk-bench"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            text = r.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except OSError as exc:
        return f"request failed: {exc}"
    if marker and marker not in text:
        return f"stream did not end with {marker!r}"
    return None


def lateness(server) -> dict | None:
    """`lateness_ms` of GET /llmsim/stats (after the 0.25 s in which workers share their stats)."""
    time.sleep(0.5)
    try:
        with urllib.request.urlopen(server.url + "/llmsim/stats", timeout=10) as r:
            return json.loads(r.read())["lateness_ms"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


class Bench:
    def __init__(self, args):
        self.args = args
        self.commands: list[str] = []
        self.results: dict = {}
        self.rows: list[Row] = []
        self.versus: dict = {}      # W1-W4 with --baseline: see versus()
        self.bodies: dict = {}
        self.files = args.files
        self.files.mkdir(parents=True, exist_ok=True)
        self.extra = shlex.split(args.llmsim_args or "")
        self.failed: dict = {}
        self.with_peer = not args.no_peer and peer.install()
        self.baseline = baseline.prepare(args.baseline, args.baseline_uvicorn) if args.baseline else None

    def note(self, command: str) -> None:
        if command not in self.commands:
            self.commands.append(command)

    def start_servers(self, label: str, llmsim_flags: list[str], peer_options: dict,
                      with_baseline: bool = False) -> dict:
        """Start llmsim (the baseline, the peer) for one configuration: {"llmsim": s, "peer": s}.

        A server that fails to start is left out, and `self.failed[name]` says why.
        """
        starters = {"llmsim": lambda: servers.llmsim(*llmsim_flags, *self.extra, repo=self.args.llmsim_repo)}
        if with_baseline and self.baseline:
            b = self.baseline
            starters["baseline"] = lambda: servers.llmsim(*llmsim_flags, *self.extra, repo=b.src, python=b.python,
                                                          name=f"baseline {b.rev}")
        if self.with_peer:
            starters["peer"] = lambda: peer.start(**peer_options, directory=self.files / f"aimock-{label}")
        started, self.failed = {}, {}
        for name, start in starters.items():
            try:
                started[name] = start()
            except RuntimeError as exc:
                lines = str(exc).strip().splitlines()
                errors = [line for line in lines if re.match(r"\w+(Error|Exception)\b", line)]
                log(f"{name} did not start: {(errors or lines)[-1]}")
                self.failed[name] = {"na": f"did not start: {str(exc)[-1000:]}"}
                continue
            self.note(started[name].command)
            procstat.wait_idle(started[name].pid)
        return started

    # W1-W4 ---------------------------------------------------------------------------------
    def wrk_workloads(self, ids: list[str]) -> None:
        a = self.args
        flags = ["--profile", "instant", "--target-tokens", str(a.tokens)]
        started = self.start_servers("instant", flags, {"tokens": a.tokens}, with_baseline=True)
        try:
            for wid in ids:
                title, path, stream, marker = WRK[wid]
                doc = body(path, a.model, stream)
                body_file = self.files / f"{wid}.json"
                body_file.write_text(json.dumps(doc))
                self.bodies[wid] = doc
                runs: dict[str, list[dict]] = {name: [] for name in started}
                for round_no in range(a.rounds):     # alternate who goes first: drift hits both
                    servers_now = list(started.items())
                    for name, server in servers_now if round_no % 2 == 0 else servers_now[::-1]:
                        runs[name].append(guarded(self.wrk_one, wid, server, path, doc, body_file, marker))
                rate = "complete_per_s" if stream else "requests_per_s"
                self.results[wid] = {name: median_run(found, rate) for name, found in runs.items()} | self.failed
                if self.baseline:
                    self.versus[wid] = versus(runs, rate)
                self.wrk_rows(wid, title, stream)
        finally:
            for server in started.values():
                server.stop()

    def wrk_one(self, wid, server, path, doc, body_file, marker) -> dict:
        a = self.args
        url = server.url + path
        why = probe(url, doc, marker)
        if why:
            log(f"{wid} {server.name}: n/a ({why})")
            return {"na": why}
        options = dict(threads=a.threads, connections=a.connections)
        if a.warmup > 0:
            wrkrun.run(url, body_file, marker, duration=a.warmup, **options)
        log(f"{wid} {server.name}: wrk {a.duration:g}s")
        with procstat.Usage(server.pid, interval=0.5) as usage:
            result = wrkrun.run(url, body_file, marker, duration=a.duration, **options)
        self.note(result.command)
        out = result.as_dict()
        out["server_cpu_s"] = usage.cpu_s
        out["server_peak_rss_mb"] = usage.peak_rss / MB
        if result.requests_per_s is None:
            out["na"] = "wrk failed: " + result.output[-500:]
        return out

    def wrk_rows(self, wid: str, title: str, stream: bool) -> None:
        r = self.results[wid]
        get = lambda name, fn: None if "na" in r.get(name, {"na": 1}) else fn(r[name])
        failed = lambda x: sum(x["counts"].get(k, 0) for k in ("incomplete", "bad_status", "status_errors",
                                                            "timeouts", "read_errors", "connect_errors"))
        if stream:
            self.rows.append(Row(title, "complete streams/s", get("llmsim", lambda x: x["complete_per_s"]),
                                 get("peer", lambda x: x["complete_per_s"])))
        else:
            self.rows.append(Row(title, "requests/s", get("llmsim", lambda x: x["requests_per_s"]),
                                 get("peer", lambda x: x["requests_per_s"])))
        for pct in ("50", "99"):
            self.rows.append(Row(title, f"latency p{pct} ms", get("llmsim", lambda x, p=pct: x["latency_ms"].get(p)),
                                 get("peer", lambda x, p=pct: x["latency_ms"].get(p)), LOWER, 2))
        self.rows.append(Row(title, "failed/incomplete", get("llmsim", failed), get("peer", failed), LOWER, 0))

    # W5 ------------------------------------------------------------------------------------
    def paced(self, n: int) -> None:
        """N paced streams on each server; with --rounds, fresh servers each round (lateness
        counts from a server's start), alternating which runs first, and the run with the
        median client gap p99 counts."""
        a = self.args
        wid = f"W5 N={n}"
        flags = ["--ttft-ms", f"{a.ttft_ms:g}", "--tbt-ms", f"{a.tbt_ms:g}",
                 "--target-tokens", str(a.paced_tokens)]
        runs: dict[str, list[dict]] = {}
        for round_no in range(a.rounds):
            started = self.start_servers("paced", flags, {"tokens": a.paced_tokens, "ttft_ms": a.ttft_ms,
                                                          "tbt_ms": a.tbt_ms})
            try:
                order = list(started.items())
                for name, server in order if round_no % 2 == 0 else order[::-1]:
                    runs.setdefault(name, []).append(guarded(self.paced_one, server, n))
            finally:
                for server in started.values():
                    server.stop()
        # a server that failed to start in some round keeps the rounds it ran
        self.results[wid] = self.failed | {name: median_run(found, PACED_KEY, PACED_ROUNDS)
                                           for name, found in runs.items()}
        r = self.results[wid]
        title = f"W5 paced {a.paced_api}, N={n}"
        get = lambda name, *keys: _dig(r.get(name), *keys)
        for label, keys, better, digits in (
                ("TTFT p50 ms", ("ttft_ms", "p50"), LOWER, 1), ("TTFT p99 ms", ("ttft_ms", "p99"), LOWER, 1),
                ("gap p50 ms", ("gap_ms", "p50"), f"near {a.tbt_ms:g}", 2), ("gap p99 ms", ("gap_ms", "p99"), LOWER, 2),
                ("completed %", ("completed_pct",), HIGHER, 1),
                ("server CPU s", ("server_cpu_s",), LOWER, 2), ("peak RSS MB", ("server_peak_rss_mb",), LOWER, 1),
                ("lateness p50 ms", ("lateness_ms", "p50"), LOWER, 2),
                ("lateness p99 ms", ("lateness_ms", "p99"), LOWER, 2)):
            self.rows.append(Row(title, label, get("llmsim", *keys), get("peer", *keys), better, digits))

    def paced_one(self, server, n: int) -> dict:
        a = self.args
        path = "/v1/chat/completions" if a.paced_api == "chat" else "/v1/responses"
        marker = "data: [DONE]" if a.paced_api == "chat" else "event: response.completed"
        why = probe(server.url + path, body(path, a.model, True), marker)   # also a warm-up
        if why:
            log(f"W5 N={n} {server.name}: n/a ({why})")
            return {"na": why}
        procstat.wait_idle(server.pid)
        cmd = [sys.executable, str(BENCH / "paced.py"), server.url, "--api", a.paced_api, "--n", str(n),
               "--model", a.model, "--timeout", f"{a.paced_timeout:g}"]
        self.note(shlex.join(cmd))
        log(f"W5 N={n} {server.name}: {n} paced streams")
        with procstat.Usage(server.pid) as usage:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=a.paced_timeout + 60)
        out = _paced_json(proc.stdout)
        if out is None:
            return {"na": "client failed: " + (proc.stdout + proc.stderr)[-500:]}
        out["completed_pct"] = 100.0 * out["completed_fraction"]
        out["server_cpu_s"] = usage.cpu_s
        out["server_peak_rss_mb"] = usage.peak_rss / MB
        out["lateness_ms"] = lateness(server) if server.name == "llmsim" else None
        return out

    # W6 ------------------------------------------------------------------------------------
    def idle(self) -> None:
        a = self.args
        wid = f"W6 N={a.idle_n}"
        flags = ["--ttft-ms", f"{a.idle_ttft_ms:g}", "--tbt-ms", f"{a.tbt_ms:g}",
                 "--target-tokens", str(a.paced_tokens)]
        started = self.start_servers("idle", flags, {"tokens": a.paced_tokens, "ttft_ms": a.idle_ttft_ms,
                                                     "tbt_ms": a.tbt_ms})
        self.results[wid] = dict(self.failed)
        try:
            for name, server in started.items():
                self.results[wid][name] = guarded(self.idle_one, server)
        finally:
            for server in started.values():
                server.stop()
        r = self.results[wid]
        title = f"W6 {a.idle_n} idle streams"
        for label, key, better in (("RSS before MB", "rss_before_mb", NEUTRAL),
                                   ("RSS with streams MB", "rss_streams_mb", LOWER),
                                   ("peak RSS MB", "peak_rss_mb", LOWER),
                                   ("KB per open stream", "kb_per_stream", LOWER),
                                   ("streams open", "open", HIGHER)):
            self.rows.append(Row(title, label, _dig(r.get("llmsim"), key), _dig(r.get("peer"), key),
                                 better, 0 if key == "open" else 1))

    def idle_one(self, server) -> dict:
        a = self.args
        cmd = [sys.executable, str(BENCH / "paced.py"), server.url, "--api", a.paced_api, "--n", str(a.idle_n),
               "--model", a.model, "--hold", f"{a.hold:g}"]
        self.note(shlex.join(cmd))
        log(f"W6 {server.name}: {a.idle_n} idle streams for {a.hold:g}s")
        path = "/v1/chat/completions" if a.paced_api == "chat" else "/v1/responses"
        warm(server.url + path, body(path, a.model, True))
        procstat.wait_idle(server.pid)
        before = procstat.rss_bytes(server.pid)
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        with procstat.Usage(server.pid) as usage:
            line = proc.stdout.readline()
            at_hold = procstat.rss_bytes(server.pid)
            try:
                stdout, stderr = proc.communicate("\n", timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                stdout, stderr = proc.communicate()
        out = _paced_json(stdout)
        if not line.startswith("HOLDING") or out is None:
            return {"na": "client failed: " + (line + stdout + stderr)[-500:]}
        if not out["open"] and any(k.startswith("HTTP") for k in out["errors"]):
            return {"na": ", ".join(out["errors"]), **out}
        out.update(rss_before_mb=before / MB, rss_streams_mb=at_hold / MB, peak_rss_mb=usage.peak_rss / MB,
                   server_cpu_s=usage.cpu_s,
                   kb_per_stream=(at_hold - before) / 1024 / out["open"] if out["open"] else None)
        return out

    # ---------------------------------------------------------------------------------------
    def run(self) -> dict:
        a = self.args
        chosen = [w.strip().upper() for w in a.only.split(",")] if a.only else [*WRK, "W5", "W6"]
        if not self.with_peer:
            log("peer not installed or disabled: llmsim only")
        wrk_ids = [w for w in chosen if w in WRK]
        if wrk_ids:
            self.wrk_workloads(wrk_ids)
        if "W5" in chosen:
            for n in a.n:
                self.paced(n)
        if "W6" in chosen:
            self.idle()
        return {"meta": meta(a, self.with_peer), "commands": self.commands, "bodies": self.bodies,
                "peer_fixtures": {"wrk": peer.fixture(a.tokens),
                                  "paced": peer.fixture(a.paced_tokens, a.ttft_ms, a.tbt_ms),
                                  "idle": peer.fixture(a.paced_tokens, a.idle_ttft_ms, a.tbt_ms)},
                "results": self.results, "versus_baseline": self.versus,
                "table": [row.as_dict() for row in self.rows]}


PACED_KEY = ("gap_ms", "p99")             # W5: the run with the median of this counts
PACED_ROUNDS = (("gap_ms", "p99"), ("ttft_ms", "p99"), ("lateness_ms", "p99"))   # listed per round


def median_run(runs: list[dict], rate: str | tuple, listed: tuple = ()) -> dict:
    """The run with the median `rate` (a key, or a path of keys) of one server's rounds (all
    its figures come from that run), with every round's rate (or its `listed` figures) under
    "rounds"; n/a when no round measured."""
    path = rate if isinstance(rate, tuple) else (rate,)
    measured = sorted((r for r in runs if "na" not in r and _dig(r, *path) is not None),
                      key=lambda r: _dig(r, *path))
    if not measured:
        return runs[0]
    rounds = [{"/".join(keys): _dig(r, *keys) for keys in listed} if listed else _dig(r, *path) for r in runs]
    return {**measured[(len(measured) - 1) // 2], "rounds": rounds}


def versus(runs: dict[str, list[dict]], rate: str) -> dict:
    """One workload's rounds with a baseline: per server the best round's rate (noise on a
    shared machine only slows a round down), every round's rate and server CPU per request
    (µs), and the current code's ratios to the baseline and to the peer, of the best rounds
    and of each round (the servers of one round ran back to back)."""
    def cpu_us(r: dict) -> float | None:
        n = r.get("counts", {}).get("requests")
        return r["server_cpu_s"] / n * 1e6 if n and r.get("server_cpu_s") is not None else None

    out: dict = {"servers": {}}
    for name, found in runs.items():
        rates = [None if "na" in r else r.get(rate) for r in found]
        good = [x for x in rates if x is not None]
        cpus = [None if "na" in r else cpu_us(r) for r in found]
        out["servers"][name] = {"best": max(good) if good else None, "rounds": rates,
                                "cpu_us_per_request": cpus,
                                "cpu_us_best": min((c for c in cpus if c is not None), default=None)}
    mine = out["servers"].get("llmsim", {})
    for other in ("baseline", "peer"):
        theirs = out["servers"].get(other)
        if not theirs or mine.get("best") is None or not theirs["best"]:
            out[f"vs_{other}"] = None
            continue
        out[f"vs_{other}"] = mine["best"] / theirs["best"]
        if mine.get("cpu_us_best") and theirs.get("cpu_us_best"):      # per request: theirs / mine
            out[f"cpu_vs_{other}"] = theirs["cpu_us_best"] / mine["cpu_us_best"]
        paired = [a / b if a is not None and b else None for a, b in zip(mine["rounds"], theirs["rounds"])]
        out[f"vs_{other}_rounds"] = paired
        # the median of the rounds' ratios: each round's servers ran back to back, so a drift of the
        # host's speed over minutes moves both sides of a ratio (the best rounds may fall in different minutes)
        out[f"vs_{other}_median"] = statistics.median(x for x in paired if x is not None) \
            if any(x is not None for x in paired) else None
    return out


def versus_lines(doc: dict) -> list[str]:
    """The table of W1-W4 against the baseline and the peer (empty without --baseline)."""
    vs = doc.get("versus_baseline") or {}
    if not vs:
        return []
    b = doc["meta"]["baseline"]
    fmt = lambda x, d=1, suffix="": "n/a" if x is None else f"{x:,.{d}f}{suffix}"
    rows = [("workload", "current", f"baseline {b['rev']}", "aimock", "cur/base", "cur/aimock",
             "cur/base by round", "median", "CPU µs/req cur / base / aimock", "CPU base/cur")]
    for wid, r in vs.items():
        srv = r["servers"]
        get = lambda name, key, srv=srv: srv.get(name, {}).get(key)
        rows.append((wid, fmt(get("llmsim", "best")), fmt(get("baseline", "best")), fmt(get("peer", "best")),
                     fmt(r.get("vs_baseline"), 3, "x"), fmt(r.get("vs_peer"), 2, "x"),
                     " / ".join(fmt(x, 3) for x in r.get("vs_baseline_rounds") or []) or "n/a",
                     fmt(r.get("vs_baseline_median"), 3, "x"),
                     " / ".join(fmt(get(n, "cpu_us_best"), 0) for n in ("llmsim", "baseline", "peer")),
                     fmt(r.get("cpu_vs_baseline"), 3, "x")))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    where = "run from that directory" if b["sha"].startswith("(") else f"{b['sha'][:12]}, its own venv"
    lines = [f"W1-W4 against baseline {b['rev']} ({where}) and the peer: each server's "
             "best round (req/s or complete streams/s)"]
    for n, row in enumerate(rows):
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        if n == 0:
            lines.append("-" * len(lines[-1]))
    lines.append("CPU µs/req: the server's CPU time over the requests wrk completed, least of the rounds; "
                 "CPU base/cur above 1: the current code spends less per request (another load on the "
                 "machine moves it less than throughput)")
    for wid, r in vs.items():
        lines.append(f"{wid} rounds: " + "; ".join(
            f"{name} " + " / ".join(fmt(x) for x in s["rounds"]) for name, s in r["servers"].items()))
    return [*lines, ""]


def guarded(fn, *args) -> dict:
    """Run one workload on one server; an unexpected failure becomes that cell's n/a."""
    try:
        return fn(*args)
    except Exception as exc:   # noqa: BLE001 - one broken cell must not cost the whole run
        log(f"{fn.__name__}: {type(exc).__name__}: {exc}")
        return {"na": f"{type(exc).__name__}: {exc}"}


def warm(url: str, doc: dict, seconds: float = 1.5) -> None:
    """Send one request and give up after `seconds` (the server has parsed and planned it)."""
    request = urllib.request.Request(url, data=json.dumps(doc).encode(), method="POST",
                                      headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=seconds) as r:
            r.read()
    except (OSError, ValueError):
        pass


def snapshot(repo: Path, dest: Path) -> Path:
    """Copy what `python -m llmsim serve` reads (llmsim/, templates/, openapi/) into `dest`, so
    edits made in a shared working tree during the run cannot change or break the server."""
    for name in ("llmsim", "templates", "openapi"):
        shutil.copytree(repo / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _dig(doc, *keys):
    for key in keys:
        if not isinstance(doc, dict) or "na" in doc and key not in doc:
            return None
        doc = doc.get(key)
    return doc


def paced_rounds_lines(results: dict) -> list[str]:
    """Each W5 round's figures, when there were several."""
    lines = []
    for wid, by_server in results.items():
        for name, r in by_server.items() if wid.startswith("W5") else ():
            rounds = r.get("rounds") if isinstance(r, dict) else None
            if rounds and len(rounds) > 1:
                figures = ", ".join(f"{key.replace('_ms/', ' ')} " + " / ".join(
                    "n/a" if one.get(key) is None else f"{one[key]:.1f}" for one in rounds)
                    for key in rounds[0] if any(one.get(key) is not None for one in rounds))
                lines.append(f"{wid} {name} rounds (ms): {figures}")
    return [*lines, ""] if lines else []


def _paced_json(stdout: str) -> dict | None:
    for line in stdout.splitlines():
        if line.startswith("PACED_JSON "):
            return json.loads(line[len("PACED_JSON "):])
    return None


def _version(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        return (out.stdout or out.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return None


def meta(args, with_peer: bool) -> dict:
    repo = str(args.source_repo)
    return {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": sys.argv,
            "llmsim_repo": repo, "llmsim_ran_from": str(args.llmsim_repo),
            "load_average_before": args.load_before, "load_average_after": os.getloadavg(),
            "llmsim_commit": _version(["git", "-C", repo, "rev-parse", "--short", "HEAD"]),
            "llmsim_dirty": bool(_version(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"])),
            "peer": f"{peer.PACKAGE} {peer.version()}" if with_peer else None,
            "node": _version(["node", "--version"]) if with_peer else None,
            "wrk": _version(["wrk", "--version"]), "python": platform.python_version(),
            "cpus": os.cpu_count(), "settings": {k: str(v) for k, v in vars(args).items()},
            "baseline": {"rev": args.baseline, "sha": baseline.resolve(args.baseline, args.source_repo),
                         "uvicorn": args.baseline_uvicorn} if args.baseline else None}


def main() -> None:
    p = argparse.ArgumentParser(description="llmsim vs @copilotkit/aimock (issue 7)")
    p.add_argument("--duration", type=float, default=10, help="wrk seconds per run (W1-W4)")
    p.add_argument("--warmup", type=float, default=2, help="wrk warm-up seconds before each run (0: none)")
    p.add_argument("--rounds", type=int, default=1,
                   help="W1-W5 runs per server, alternating which goes first; the median counts "
                        "(W5: fresh servers each round, median client gap p99)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--tokens", type=int, default=32, help="reply length for W1-W4")
    p.add_argument("--n", type=int, nargs="+", default=[100, 1000], help="W5 concurrencies")
    p.add_argument("--ttft-ms", type=float, default=200)
    p.add_argument("--tbt-ms", type=float, default=20)
    p.add_argument("--paced-tokens", type=int, default=50)
    p.add_argument("--paced-api", choices=["chat", "responses"], default="chat", help="API for W5/W6")
    p.add_argument("--paced-timeout", type=float, default=60)
    p.add_argument("--idle-n", type=int, default=1000, help="W6 open streams")
    p.add_argument("--idle-ttft-ms", type=float, default=60000)
    p.add_argument("--hold", type=float, default=5, help="W6 seconds to hold the streams before reading RSS")
    p.add_argument("--model", default="gpt-4o")
    p.add_argument("--only", help="comma-separated workloads, e.g. W1,W5")
    p.add_argument("--no-peer", action="store_true")
    p.add_argument("--llmsim-args", help='extra llmsim serve flags for every server, e.g. "--workers 2"')
    p.add_argument("--llmsim-repo", type=Path, default=servers.REPO, help="checkout to run llmsim from")
    p.add_argument("--out", type=Path, help="JSON results file (default bench/results/perf-<time>.json)")
    p.add_argument("--files", type=Path, default=BENCH / "results" / "files",
                   help="where request bodies and peer fixtures are written")
    p.add_argument("--baseline", metavar="REV",
                   help="also run this earlier commit in W1-W4 (installed in its own venv by bench/baseline.py)")
    p.add_argument("--baseline-uvicorn", default=baseline.UVICORN, help="uvicorn version for the baseline's venv")
    p.add_argument("--snapshot", action="store_true",
                   help="run llmsim from a copy of --llmsim-repo taken at start (shared working trees)")
    args = p.parse_args()
    servers.raise_nofile()
    args.load_before = os.getloadavg()
    args.source_repo = args.llmsim_repo
    if args.snapshot:
        args.llmsim_repo = snapshot(args.source_repo, Path(tempfile.mkdtemp(prefix="llmsim-snapshot-")))
        log(f"running llmsim from the snapshot {args.llmsim_repo}")

    bench = Bench(args)
    try:
        doc = bench.run()
    finally:
        if args.snapshot:
            shutil.rmtree(args.llmsim_repo, ignore_errors=True)
    out = args.out or BENCH / "results" / f"perf-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    print(summary_text(doc, bench.rows, args, out))


def summary_text(doc: dict, rows: list[Row], a, out: Path) -> str:
    m = doc["meta"]
    lines = [
        f"llmsim {m['llmsim_commit']}{' (+uncommitted changes)' if m['llmsim_dirty'] else ''} "
        f"vs {m['peer'] + ' (node ' + m['node'] + ')' if m['peer'] else 'no peer'}, "
        f"{m['cpus']} CPUs, loopback, {m['time']}, load average "
        f"{m['load_average_before'][0]:.1f} before / {m['load_average_after'][0]:.1f} after",
        f"W1-W4: wrk -t{a.threads} -c{a.connections} -d{a.duration:g}s --latency after a {a.warmup:g}s warm-up, "
        f"{a.tokens}-token replies (llmsim --profile instant)"
        + (f"; median of {a.rounds} rounds per server, alternating which runs first" if a.rounds > 1 else ""),
        f"W5: {a.paced_api} streams, {a.ttft_ms:g} ms TTFT, {a.tbt_ms:g} ms gaps, {a.paced_tokens} tokens"
        + (f"; of {a.rounds} rounds (fresh servers, alternating), the run with the median gap p99"
           if a.rounds > 1 else "") + f"; W6: {a.idle_ttft_ms:g} ms TTFT, streams held {a.hold:g}s",
        "", report.render(rows, "peer"), "", *versus_lines(doc), *paced_rounds_lines(doc["results"]),
        "ratios are llmsim / peer; on a shared machine only ratios from one run mean anything.",
        "W5 peer pacing: aimock streamingProfile ttft = TTFT - gap, tps = 1000/gap, jitter 0 (its role-only",
        "chunk comes first), so its first content token is due when llmsim's is. TTFT = request written to",
        "first non-empty content delta; gaps between content deltas (0 when a late server sends several",
        "tokens in one write); lateness from GET /llmsim/stats.",
        "", "commands:", *("  " + c for c in doc["commands"]), "", "request bodies (wrk):",
        *(f"  {wid}: {json.dumps(b)}" for wid, b in doc["bodies"].items()),
        "peer fixtures (content = N x \" hello\"):",
        *(f"  {k}: {json.dumps(v).replace(peer.TOKEN * n, f'{n} x {peer.TOKEN!r}')}"
          for (k, v), n in zip(doc["peer_fixtures"].items(), (a.tokens, a.paced_tokens, a.paced_tokens))),
        "", f"results: {out}"]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
