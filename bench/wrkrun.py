"""Run `wrk --latency` with bench/wrk/post.lua and parse what it prints.

Throughput and the latency distribution come from wrk's own text (`Requests/sec:`, the
`Latency Distribution` block); the complete / incomplete / bad-status counts come from the
`PERF_JSON` line printed by the script's done().
"""
from __future__ import annotations

import json
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "wrk" / "post.lua"
UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}


@dataclass
class WrkResult:
    command: str
    requests_per_s: float | None = None
    latency_ms: dict[str, float] = field(default_factory=dict)    # "50" -> ms, "99" -> ms
    counts: dict = field(default_factory=dict)                    # the PERF_JSON line
    output: str = ""

    @property
    def complete_per_s(self) -> float | None:
        c = self.counts
        if not c.get("duration_us") or not c.get("checked"):
            return None
        return c["complete"] / (c["duration_us"] / 1e6)

    def as_dict(self) -> dict:
        return {"command": self.command, "requests_per_s": self.requests_per_s,
                "complete_per_s": self.complete_per_s, "latency_ms": self.latency_ms,
                "counts": self.counts, "output": self.output}


def to_ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)([a-z]+)", text).groups()
    return float(number) * UNITS[unit]


def parse(output: str, command: str = "") -> WrkResult:
    result = WrkResult(command=command, output=output)
    if m := re.search(r"^Requests/sec:\s+([\d.]+)", output, re.M):
        result.requests_per_s = float(m.group(1))
    if block := re.search(r"Latency Distribution\n((?:[ \t]+\d+%[ \t]+\S+[ \t]*\n)+)", output):
        for pct, value in re.findall(r"(\d+)%\s+(\S+)", block.group(1)):
            result.latency_ms[pct] = to_ms(value)
    if m := re.search(r"^PERF_JSON (.*)$", output, re.M):
        result.counts = json.loads(m.group(1))
    return result


def run(url: str, body_file: Path, marker: str | None = None, *, threads: int = 2,
        connections: int = 64, duration: float = 10, timeout: float = 10) -> WrkResult:
    cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(duration))}s",
           f"--timeout={max(1, round(timeout))}s", "--latency", "-s", str(SCRIPT), url, "--", str(body_file)]
    if marker:
        cmd.append(marker)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + timeout + 60)
    return parse(proc.stdout + proc.stderr, shlex.join(cmd))
