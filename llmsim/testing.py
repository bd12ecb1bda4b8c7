"""Live llmsim servers for tests: a pytest plugin (entry point `pytest11`) with the fixtures
`llmsim_server` (one per session, `profile="instant"`) and `llmsim_server_factory(**settings)`
(one per call, any `llmsim.settings.Settings` field), and `start(**settings)`, the same server
as a context manager. The helpers import without pytest (bench/ scripts use `start`).

A `Server` is `llmsim serve` in a subprocess on a free port, given its settings as `LLMSIM_*`
variables (the test run's own are not passed on); `.url` is its root, `.openai_url` the base
URL for an OpenAI client. Settings are checked before it starts. More:
docs/internals.md#testing.
"""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Mapping, Sequence

ENV_PREFIX = "LLMSIM_"      # as llmsim.settings reads them (not imported: pytest loads this module early)
START_TIMEOUT_S = 60.0      # generous: on a busy machine building the app takes a while
PORT_ATTEMPTS = 3           # a free port may be taken by another process before the server binds it


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def answered_by(proc: subprocess.Popen, pid: object) -> bool:
    """Whether `pid` (the `pid` of a `/health` answer) is `proc` or one of its workers. A port
    found free may be taken by another server before `proc` binds it: that server's answer
    must not pass for `proc`'s. (Where /proc cannot tell a worker's parent, a worker passes.)"""
    if pid == proc.pid:
        return True
    try:
        with open(f"/proc/{int(pid)}/stat") as stat:
            return int(stat.read().rpartition(")")[2].split()[1]) == proc.pid
    except (OSError, ValueError, TypeError):
        return not os.path.isdir("/proc/self") and isinstance(pid, int)


class Server:
    """`llmsim serve` in a subprocess with command-line flags `args` and environment `env`
    (added to this process's environment less its `LLMSIM_*` variables), on `host` and
    `port` (default: a free one). It answers `/health` when the constructor returns."""

    def __init__(self, args: Sequence[str] = (), env: Mapping[str, str] | None = None, *,
                 host: str = "127.0.0.1", port: int | None = None, timeout: float = START_TIMEOUT_S):
        env = {**{k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}, **(env or {})}
        reachable = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host
        for attempt in range(1 if port else PORT_ATTEMPTS):
            self.port = port or free_port(reachable)
            self.url = f"http://{f'[{reachable}]' if ':' in reachable else reachable}:{self.port}"
            self._log = tempfile.TemporaryFile()    # a file, not a pipe: a chatty server never blocks
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "llmsim", "serve", "--host", host, "--port", str(self.port), *args],
                env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT)
            try:
                self._wait(timeout)
                return
            except RuntimeError:
                if port or attempt == PORT_ATTEMPTS - 1 or "Address already in use" not in self.output():
                    raise

    def _wait(self, timeout: float) -> None:
        import httpx
        deadline = time.monotonic() + timeout
        with httpx.Client(trust_env=False, timeout=2) as http:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"llmsim serve exited with status {self.proc.returncode}:\n"
                                       f"{self.output()}")
                with contextlib.suppress(httpx.HTTPError):
                    health = http.get(f"{self.url}/health")
                    if health.status_code == 200 and answered_by(self.proc, health.json().get("pid")):
                        self.base_paths = tuple(health.json()["base_paths"])
                        return
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"llmsim serve did not answer {self.url}/health within {timeout:g} s:\n"
                           f"{self.output()}")

    @property
    def openai_url(self) -> str:
        """The base URL for an OpenAI client: `OpenAI(base_url=server.openai_url, api_key=...)`:
        the server's `/v1` mount, else its first (`--base-path`)."""
        base = "/v1" if "/v1" in self.base_paths else self.base_paths[0]
        return self.url + base

    def output(self) -> str:
        """Everything the server has printed (stdout and stderr)."""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def stop(self) -> None:
        """SIGTERM (a graceful shutdown), SIGKILL if it has not exited 10 s later."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<llmsim.testing.Server {self.url}>"


def settings_environ(settings: Mapping[str, Any]) -> dict[str, str]:
    """The `LLMSIM_*` variables that give `llmsim serve` these settings, once they have been
    checked as the server checks them (raising its ConfigError). Values are YAML, which is
    how the server reads them."""
    import yaml
    from llmsim.settings import Settings
    config = settings.get("config")
    Settings.load({"config": config} if config else {}, environ={}).replace(**settings)
    return {ENV_PREFIX + name.upper(): yaml.safe_dump(value, default_flow_style=True).removesuffix("...\n").strip()
            for name, value in settings.items()}


def start(**settings: Any) -> Server:
    """A live server with these settings (any `llmsim.settings.Settings` field; `profile`
    defaults to "instant" and `host` to 127.0.0.1; `port` to a free one)."""
    settings = {"profile": "instant", **settings}
    env = settings_environ(settings)
    for name in ("host", "port"):       # flags: the Server names them
        env.pop(ENV_PREFIX + name.upper(), None)
    return Server(env=env, host=settings.get("host", "127.0.0.1"), port=settings.get("port"))


def pytest_configure(config) -> None:
    """pytest loaded this plugin: its fixtures (llmsim._fixtures, which imports pytest) join
    the run. Only pytest calls this, so importing this module needs no pytest."""
    config.pluginmanager.import_plugin("llmsim._fixtures")
