"""`llmsim record` in a subprocess, for the tests that record through it."""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx

from llmsim.testing import free_port


class Recorder:
    """`llmsim record` in a subprocess on a free port; ready when /health passes through it
    (the upstream's answer, not that of another server which took the port first)."""

    def __init__(self, upstream: str, out: Path):
        upstream_pid = httpx.get(f"{upstream}/health", timeout=10).json()["pid"]
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.openai_url = f"{self.url}/v1"
        self.proc = subprocess.Popen([sys.executable, "-m", "llmsim", "record", "--upstream", upstream,
                                      "--out", str(out), "--port", str(self.port)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                health = httpx.get(f"{self.url}/health", timeout=2)
                if health.status_code == 200 and health.json()["pid"] == upstream_pid:
                    return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("llmsim record did not start")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    @staticmethod
    def wait_for_fixtures(out: Path, endpoint: str, count: int = 1, timeout: float = 10) -> None:
        """Until `out` holds `count` fixtures of `endpoint` (each is written once its answer ends)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [p for p in out.glob("*.json") if json.loads(p.read_text()).get("endpoint") == endpoint]
            if len(found) >= count:
                return
            time.sleep(0.05)
        raise AssertionError(f"no {endpoint} fixture in {out} after {timeout:g} s")

