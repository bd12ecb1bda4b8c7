"""`llmsim top`: frames rendered headless from a stats dict, `--once` against a live server,
and the interactive mode in a pseudo-terminal quitting on q and on Ctrl-C."""
from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from llmsim.observe import dashboard, statsview
from llmsim.observe.stats import Stats
from llmsim.render.templates import TemplateSet

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fake_plan(model: str, ttft: float, gap: float, tokens: int):
    times = [ttft + gap * i for i in range(tokens)]
    return SimpleNamespace(model=model, first_token_at=ttft, end_at=times[-1],
                           usage=SimpleNamespace(input_tokens=12, reasoning_tokens=0,
                                                 total_tokens=12 + tokens),
                           token_times=lambda: [times])        # (llmsim.sim.plans.Plan)


@pytest.fixture
def stats_body() -> dict:
    stats = Stats()
    for _ in range(3):
        stats.record(fake_plan("gpt-4o-mini", 0.25, 0.02, 10), "responses")
    stats.record(fake_plan("o3", 1.5, 0.01, 4), "chat")
    stats.error("model_not_found")
    stats.error("rate_limit", injected=True)
    stats.lateness.observe(0.0008)
    view = statsview.view(statsview.merge([stats.snapshot()]))
    return TemplateSet(Path(REPO) / "templates")["stats"].body(view=view)     # the wire shape


def frame(stats_body: dict, width: int = 140) -> str:
    console = Console(record=True, width=width, color_system=None)
    console.print(dashboard.render(stats_body, "http://sim:8080"))
    return console.export_text()


def test_frame_shows_rates_latency_errors_and_models(stats_body):
    text = frame(stats_body)
    for expected in ("llmsim top", "http://sim:8080", "throughput", "requests", "tokens",
                     "ttft (sim)", "250.0", "inter-token (sim)", "20.0",
                     "sse lateness", "0.80", "model_not_found", "rate_limit (injected)",
                     "gpt-4o-mini", "o3", "q quits"):
        assert expected in text, expected


def test_frame_lists_busiest_model_first(stats_body):
    text = frame(stats_body)
    assert text.index("gpt-4o-mini") < text.index("o3 ")


def test_sparkline_scales_to_the_peak():
    assert dashboard.sparkline([0, 1, 2, 4]) == "▁▃▅█"
    assert dashboard.sparkline([0, 0, 0]) == "▁▁▁"
    assert len(dashboard.sparkline(list(range(100)), width=60)) == 60


def test_frame_renders_in_a_narrow_terminal(stats_body):
    assert "throughput" in frame(stats_body, width=80)


def test_once_prints_a_frame_of_a_live_server(live_server_factory):
    server = live_server_factory("--profile", "instant")    # its own: the shared one's busiest models vary
    server.client().responses.create(model="gpt-4o-mini", input="hi")
    done = subprocess.run([sys.executable, "-m", "llmsim", "top", server.url, "--once"], cwd=REPO,
                          capture_output=True, text=True, timeout=30, env={**os.environ, "COLUMNS": "140"})
    assert done.returncode == 0, done.stderr
    assert "llmsim top" in done.stdout and server.url in done.stdout
    assert "gpt-4o-mini" in done.stdout


@pytest.mark.live
def test_unreachable_server_is_a_one_line_error():
    done = subprocess.run([sys.executable, "-m", "llmsim", "top", "http://127.0.0.1:9", "--once"],
                          cwd=REPO, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert "cannot read http://127.0.0.1:9/llmsim/stats" in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def run_in_terminal(url: str):
    """`llmsim top URL` on a 40x140 pseudo-terminal: (process, master fd)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 140, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "llmsim", "top", url, "--interval", "0.2"],
                            cwd=REPO, stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),  # Ctrl-C signals it
                            env={**os.environ, "TERM": "xterm-256color"})
    os.close(slave)
    return proc, master


def read_until(master: int, needle: bytes, timeout: float = 20.0) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while needle not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                seen += os.read(master, 65536)
            except OSError:
                break
    return seen


@pytest.mark.parametrize("key", [b"q", b"\x03"], ids=["q", "ctrl-c"])
def test_interactive_dashboard_quits_cleanly(server, key):
    proc, master = run_in_terminal(server.url)
    try:
        assert b"throughput" in read_until(master, b"throughput")
        os.write(master, key)
        assert proc.wait(timeout=30) == 0
        rest = read_until(master, b"\x1b[?1049l", timeout=10)      # left the alternate screen
        assert b"Traceback" not in rest
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
