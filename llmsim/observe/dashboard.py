"""`llmsim top [URL]`: a live terminal dashboard of a running server's /llmsim/stats.

Polls every `--interval` seconds (0.5 by default) and redraws with rich: request, token and
error rates with 60 s sparklines, active requests and streams, simulated latency
percentiles, SSE lateness, errors by kind and the busiest models. `q` or Ctrl-C quits and
gives the terminal back; `--once` prints one frame and exits (scripts, tests).
`render(stats, url)` builds a frame from a stats dict, so it is testable headless.
"""
from __future__ import annotations

import contextlib
import os
import select
import sys
import time

import httpx
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

DEFAULT_URL = "http://127.0.0.1:8080"
SPARKS = "▁▂▃▄▅▆▇█"
TOP_ROWS = 8
WIDE = 120              # columns needed to show the panels side by side


def sparkline(values: list[float], width: int = 60) -> str:
    """One block character per value (the last `width`), scaled to the largest."""
    values = list(values)[-width:]
    peak = max(values, default=0)
    if not peak:
        return SPARKS[0] * len(values)
    return "".join(SPARKS[min(len(SPARKS) - 1, int(v / peak * (len(SPARKS) - 1) + 0.5))] for v in values)


def _num(value, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}"


def _uptime(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m{rest % 60:02d}s" if hours else f"{rest // 60}m{rest % 60:02d}s"


def _throughput(stats: dict) -> Panel:
    table = Table(box=None, expand=True, padding=(0, 1))
    table.add_column("per second", min_width=10, no_wrap=True)
    for window in ("1s", "10s", "60s"):
        table.add_column(window, justify="right", min_width=9, no_wrap=True)
    table.add_column("last 60 s", no_wrap=True, overflow="crop", ratio=1)
    rates, timeline = stats["rates"], stats["timeline"]
    for label, key, series, style in (("requests", "requests_per_s", "requests", "green"),
                                      ("tokens", "tokens_per_s", "tokens", "cyan"),
                                      ("errors", "errors_per_s", "errors", "red")):
        table.add_row(label, *(_num(rates[key][w]) for w in ("1s", "10s", "60s")),
                      Text(sparkline(timeline[series]), style=style))
    return Panel(table, title="throughput", border_style="green")


def _requests(stats: dict) -> Panel:
    req, ws, tokens = stats["requests"], stats["websocket"], stats["tokens"]
    table = Table.grid(padding=(0, 2))
    table.add_column()
    table.add_column(justify="right")
    by_status = "  ".join(f"{k} {v:,}" for k, v in sorted(req["by_status"].items())) or "-"
    for label, value in (("total", req["total"]), ("active", req["active"]),
                         ("active streams", req["active_streams"]), ("streaming", req["streaming"]),
                         ("non-streaming", req["non_streaming"]), ("by status", by_status),
                         ("websocket conns", f'{ws["active"]:,} open / {ws["connections"]:,}'),
                         ("websocket turns", ws["turns"]),
                         ("tokens in / out", f'{tokens["prompt"]:,} / {tokens["completion"]:,}'),
                         ("reasoning tokens", tokens["reasoning"])):
        table.add_row(label, _num(value) if not isinstance(value, str) else value)
    return Panel(table, title="requests", border_style="blue")


def _latency(stats: dict) -> Panel:
    table = Table(box=None, expand=True, padding=(0, 1))
    table.add_column("ms", no_wrap=True)
    for name in ("p50", "p90", "p99", "max"):
        table.add_column(name, justify="right", no_wrap=True)
    lat = stats["latency_ms"]
    for label, key in (("ttft (sim)", "ttft"), ("total (sim)", "total"),
                       ("inter-token (sim)", "inter_token"), ("http (measured)", "http")):
        table.add_row(label, *(_num(lat[key].get(q), 1) for q in ("p50", "p90", "p99", "max")))
    late = stats["lateness_ms"]
    table.add_row("sse lateness", *(_num(late.get(q), 2) for q in ("p50", "p90", "p99", "max")))
    return Panel(table, title=f"latency  (lateness over {late.get('count') or 0:,} batches)",
                 border_style="magenta")


def _errors(stats: dict) -> Panel:
    errors = stats["errors"]
    table = Table(box=None, expand=True, padding=(0, 1))
    table.add_column("kind")
    table.add_column("count", justify="right")
    rows = [(kind, n, "") for kind, n in errors["real"].items()]
    rows += [(kind, n, " (injected)") for kind, n in errors["injected"].items()]
    for kind, n, note in sorted(rows, key=lambda r: -r[1])[:TOP_ROWS]:
        table.add_row(Text(kind + note, style="yellow" if note else "red"), _num(n))
    if not rows:
        table.add_row(Text("none", style="dim"), "")
    return Panel(table, title=f"errors ({errors['total']:,})", border_style="red")


def _models(stats: dict) -> Panel:
    table = Table(box=None, expand=True, padding=(0, 1))
    for name, justify in (("model", "left"), ("requests", "right"), ("running", "right"),
                          ("tokens out", "right")):
        table.add_column(name, justify=justify, no_wrap=name != "model")
    for name, m in list(stats["models"].items())[:TOP_ROWS]:
        table.add_row(name, _num(m["requests"]), _num(m["running"]),
                      _num(m["completion_tokens"] + m["reasoning_tokens"]))
    if not stats["models"]:
        table.add_row(Text("none yet", style="dim"), "", "", "")
    return Panel(table, title="models", border_style="cyan")


def render(stats: dict, url: str, error: str | None = None):
    """One dashboard frame for a /llmsim/stats body."""
    header = Text.assemble(("llmsim top", "bold"), f"  {url}  ",
                           f"up {_uptime(stats['uptime_s'])}  ", f"workers {stats['workers']}  ",
                           ("" if stats.get("enabled", True) else "metrics off  ", "yellow"),
                           ("q quits", "dim"))
    if error:
        header.append(f"  (stale: {error})", style="bold red")
    return Group(header, _throughput(stats), _Panels(_requests(stats), _latency(stats),
                                                     _errors(stats), _models(stats)))


class _Panels:
    """Panels two by two, or one under another on a terminal narrower than `WIDE`."""

    def __init__(self, *panels):
        self.panels = panels

    def __rich_console__(self, console, options):
        if options.max_width < WIDE:
            yield from self.panels
            return
        grid = Table.grid(expand=True)
        grid.add_column(ratio=1)
        grid.add_column(ratio=1)
        for left, right in zip(self.panels[::2], self.panels[1::2]):
            grid.add_row(left, right)
        yield grid


def fetch(client: httpx.Client, url: str) -> dict:
    response = client.get(url.rstrip("/") + "/llmsim/stats")
    response.raise_for_status()
    return response.json()


QUIT_KEYS = ("q", "\x03")      # q, Ctrl-C


class Keys:
    """Single key presses from a terminal (cbreak mode, restored on exit); none otherwise."""

    def __enter__(self):
        self.fd = None
        if sys.stdin.isatty():
            import termios
            import tty
            self.fd = sys.stdin.fileno()
            self.saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
            mode = termios.tcgetattr(self.fd)   # Ctrl-C arrives as a key, not as a signal that
            mode[3] &= ~termios.ISIG            # could interrupt a screen update half-way
            termios.tcsetattr(self.fd, termios.TCSANOW, mode)
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            import termios
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)

    def wait(self, seconds: float) -> str:
        """The key pressed within `seconds` ('' if none)."""
        if self.fd is None:
            time.sleep(seconds)
            return ""
        ready, _, _ = select.select([self.fd], [], [], seconds)
        return os.read(self.fd, 1).decode(errors="replace") if ready else ""


def main(url: str | None = None, interval: float = 0.5, once: bool = False,
         console: Console | None = None) -> int:
    url = url or DEFAULT_URL
    if "://" not in url:
        url = "http://" + url
    console = console or Console()
    with httpx.Client(timeout=max(2.0, interval * 4)) as client:
        try:
            stats = fetch(client, url)
        except (httpx.HTTPError, ValueError) as exc:
            console.print(f"llmsim top: cannot read {url}/llmsim/stats: {exc}", style="red")
            return 1
        if once:
            console.print(render(stats, url))
            return 0
        with contextlib.suppress(KeyboardInterrupt), Keys() as keys, \
                Live(render(stats, url), console=console, screen=True, auto_refresh=False) as live:
            while keys.wait(interval).lower() not in QUIT_KEYS:
                error = None
                try:
                    stats = fetch(client, url)
                except (httpx.HTTPError, ValueError) as exc:
                    error = type(exc).__name__
                live.update(render(stats, url, error), refresh=True)
    return 0
