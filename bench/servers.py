"""Start and stop the servers under test: llmsim (`python -m llmsim serve`) and any command.

Each server runs in its own session on a free loopback port, with the open-file limit raised
(1,000 concurrent streams need more than the usual 1,024 descriptors), and is considered up
when `GET health_path` answers 200.
"""
from __future__ import annotations

import os
import resource
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))


class Server:
    """A server subprocess; `.url` is its root, `.pid` the process whose tree we measure."""

    def __init__(self, name: str, cmd: list[str], port: int, health_path: str, cwd: Path = REPO,
                 env: dict | None = None):
        self.name, self.cmd, self.port, self.health_path = name, cmd, port, health_path
        self.url = f"http://{HOST}:{port}"
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(cmd, cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, preexec_fn=raise_nofile,
                                     start_new_session=True, env=env)
        self._wait()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def command(self) -> str:
        return shlex.join(self.cmd)

    def _wait(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}):\n{self.output()}")
            try:
                with urllib.request.urlopen(self.url + self.health_path, timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} did not answer {self.health_path} in {timeout:.0f}s:\n{self.output()}")

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def llmsim(*flags: str, port: int | None = None, repo: Path = REPO, python: str | Path | None = None,
           name: str = "llmsim") -> Server:
    """`python -m llmsim serve` run from `repo` (so another checkout can be measured), by
    `python` (default this interpreter; bench/baseline.py gives an earlier commit's venv)."""
    port = port or free_port()
    cmd = [str(python or sys.executable), "-m", "llmsim", "serve", "--host", HOST, "--port", str(port), *flags]
    env = None
    if python is not None:      # another tree: our PYTHONPATH must not hand it this tree's llmsim
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return Server(name, cmd, port, "/health", cwd=repo, env=env)
