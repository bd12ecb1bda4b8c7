"""The client matrix's environments and runners (docs/clients.md), used by conftest.py and
the tests beside it. Each environment is made once from its requirements file
(requirements/NAME.txt; JavaScript: js/package.json) under LLMSIM_CLIENTS_CACHE (default
~/.cache/llmsim-clients), in a directory named after the file's hash: a changed pin makes a
new one, an unchanged one is reused (CI pays once). An environment that cannot be installed
(no package registry) skips its tests with the installer's last words; under CI (CI=true)
that is a failure instead. Child processes run offline (OFFLINE): nothing leaves the machine.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
FLOWS = HERE / "flows"
JS = HERE / "js"
CACHE = Path(os.environ.get("LLMSIM_CLIENTS_CACHE") or Path.home() / ".cache" / "llmsim-clients")
IN_CI = os.environ.get("CI", "").lower() == "true"
# Every generating endpoint runs under latency here (issue 61): a first token after 20 ms, 2 ms
# a token after it; tools are always called when offered (an agent's loop still ends: after a
# tool's result the model answers in text).
MATRIX_FLAGS = ("--ttft-ms", "20", "--tbt-ms", "2", "--tool-call-probability", "1", "--target-tokens", "40")
# Child processes get no proxy and no hub: nothing leaves the machine.
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "NO_PROXY": "*", "DO_NOT_TRACK": "1",
           "OTEL_SDK_DISABLED": "true", "PYTHONWARNINGS": "ignore"}


_FAILED: dict[str, str] = {}      # what could not be installed in this process: not tried again


def _unavailable(what: str, log: str) -> None:
    tail = "\n".join(log.strip().splitlines()[-5:])
    message = _FAILED.setdefault(what, f"{what} could not be installed (a package registry is needed):\n{tail}")
    if IN_CI:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def _digest(*paths: Path) -> str:
    h = hashlib.sha256(sys.version.encode())
    for path in paths:
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _locked_build(target: Path, build) -> Path:
    """`target`, built by `build(tmp_dir)` unless a finished one is there (`.ok` inside);
    one builder at a time (an exclusive lock), others wait and reuse its result."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".ok").exists():
            return target
        if target.exists():
            shutil.rmtree(target)
        build(target)
        (target / ".ok").write_text("")
        return target


class PythonEnv:
    def __init__(self, root: Path):
        self.root = root
        self.python = str(root / "bin" / "python")

    def bin(self, name: str) -> str:
        return str(self.root / "bin" / name)


def python_env(name: str) -> PythonEnv:
    """The virtual environment of requirements/NAME.txt, made on first use."""
    requirements = HERE / "requirements" / f"{name}.txt"
    if f"requirements/{name}.txt" in _FAILED:
        _unavailable(f"requirements/{name}.txt", "")
    target = CACHE / f"py-{name}-{_digest(requirements)}"

    def build(path: Path):
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        done = subprocess.run([str(path / "bin" / "pip"), "install", "--disable-pip-version-check", "-q",
                               "-r", str(requirements)], capture_output=True, text=True, timeout=3000)
        if done.returncode != 0:
            shutil.rmtree(path, ignore_errors=True)
            _unavailable(f"requirements/{name}.txt", done.stdout + done.stderr)
    return PythonEnv(_locked_build(target, build))


def node_env() -> Path:
    """js/ with its node_modules installed (npm, exact versions of js/package.json)."""
    if shutil.which("npm") is None or shutil.which("node") is None:
        _unavailable("node and npm", "npm: not found (.ci/run installs it)")
    if "js/package.json" in _FAILED:
        _unavailable("js/package.json", "")
    target = CACHE / f"js-{_digest(JS / 'package.json')}"

    def build(path: Path):
        path.mkdir(parents=True)
        shutil.copy(JS / "package.json", path / "package.json")
        done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=path,
                              capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            shutil.rmtree(path, ignore_errors=True)
            _unavailable("js/package.json", done.stdout + done.stderr)
    return _locked_build(target, build)


def child_env(hub_offline: bool = True, **extra: str) -> dict:
    """The environment of a client's process: ours without proxies or PYTHONPATH, OFFLINE's
    switches on (`hub_offline=False`: without HF_HUB_OFFLINE and TRANSFORMERS_OFFLINE, which
    make aiperf 0.13 read a tokenizer's local path as a hub name)."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy") and k != "PYTHONPATH"}
    offline = OFFLINE if hub_offline else {k: v for k, v in OFFLINE.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    return {**env, **offline, **extra}


def run_flows(command: list[str], url: str, cwd: Path, timeout: float = 600) -> dict:
    """Run a flows script (flows/_harness.py, js/flows/harness.mjs): {flow: None or its error}."""
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=child_env(LLMSIM_URL=url))
    lines = done.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise AssertionError(f"{command} gave no results (exit {done.returncode}):\n"
                             f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}") from None


