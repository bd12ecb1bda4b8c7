"""A small lab of "hosts" on one machine: network namespaces on one bridge, nothing outside them.

`Lab` makes a switch namespace holding a bridge (10.200.0.1/24) and, per host, a namespace with
one veth (`eth0`, 10.200.0.N/24) whose peer is a port of that bridge. The root namespace gets
no interface, address or route: the processes of the lab listen on the lab's private addresses,
and the test reaches them through Unix sockets (paths in the filesystem, which every namespace
shares) that nginx, running in the switch namespace, listens on. `Lab.close()` kills every process
the lab started and deletes its namespaces (their interfaces go with them); it runs even when
starting failed half-way.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

SUBNET = "10.200.0"


def unavailable() -> str | None:
    """Why the lab cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (ip netns add)"
    if shutil.which("ip") is None:
        return "needs iproute2 (the ip command)"
    name = f"llmsim-probe-{uuid.uuid4().hex[:8]}"
    probe = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"ip netns add does not work here: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


class Lab:
    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.tag = uuid.uuid4().hex[:8]            # unique namespace names per run
        self.switch = f"llmsim-{self.tag}-switch"
        self.namespaces: list[str] = []
        self.procs: list[subprocess.Popen] = []
        self.next_address = 2
        try:
            self._netns(self.switch)
            ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            ip("-n", self.switch, "addr", "add", f"{SUBNET}.1/24", "dev", "br0")
            ip("-n", self.switch, "link", "set", "br0", "up")
        except BaseException:
            self.close()
            raise

    def _netns(self, name: str) -> None:
        ip("netns", "add", name)
        self.namespaces.append(name)
        ip("-n", name, "link", "set", "lo", "up")

    def host(self, role: str) -> tuple[str, str]:
        """A new namespace wired to the bridge: (its name, its address)."""
        name, address = f"llmsim-{self.tag}-{role}", f"{SUBNET}.{self.next_address}"
        self.next_address += 1
        self._netns(name)
        port = f"p{address.rsplit('.', 1)[1]}"
        ip("link", "add", "eth0", "netns", name, "type", "veth", "peer", "name", port, "netns", self.switch)
        ip("-n", self.switch, "link", "set", port, "master", "br0")
        ip("-n", self.switch, "link", "set", port, "up")
        ip("-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
        ip("-n", name, "link", "set", "eth0", "up")
        return name, address

    def start(self, namespace: str, argv: list[str], log: str, **kwargs) -> subprocess.Popen:
        """`argv` inside `namespace` (`ip netns exec` execs it: the pid is the process's own)."""
        out = open(self.workdir / log, "wb")
        proc = subprocess.Popen(["ip", "netns", "exec", namespace, *argv], stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, **kwargs)
        out.close()
        self.procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        path = self.workdir / name
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)       # its own session: only what it started
        deadline = time.monotonic() + 10
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        for name in reversed(self.namespaces):
            # anything still inside a namespace this lab made was started by it
            pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self.namespaces.clear()
