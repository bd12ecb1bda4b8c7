"""The results table: one row per (workload, metric), llmsim and peer side by side with a ratio."""
from __future__ import annotations

from dataclasses import dataclass

HIGHER, LOWER, NEUTRAL = "higher", "lower", ""


@dataclass
class Row:
    workload: str
    metric: str
    llmsim: float | None
    peer: float | None
    better: str = HIGHER      # which direction is better, shown next to the ratio
    digits: int = 1

    @property
    def ratio(self) -> float | None:
        if self.llmsim is None or self.peer is None or not self.peer:
            return None
        return self.llmsim / self.peer

    def as_dict(self) -> dict:
        return {"workload": self.workload, "metric": self.metric, "llmsim": self.llmsim,
                "peer": self.peer, "ratio": self.ratio, "better": self.better}


def number(value: float | None, digits: int) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}"


def render(rows: list[Row], peer_name: str) -> str:
    header = ("workload", "metric", "llmsim", peer_name, "llmsim/peer", "better")
    lines = [header]
    previous = None
    for row in rows:
        ratio = "n/a" if row.ratio is None else f"{row.ratio:.2f}x"
        lines.append((row.workload if row.workload != previous else "", row.metric,
                      number(row.llmsim, row.digits), number(row.peer, row.digits), ratio, row.better))
        previous = row.workload
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = []
    for n, line in enumerate(lines):
        cells = [line[0].ljust(widths[0]), line[1].ljust(widths[1])]
        cells += [line[i].rjust(widths[i]) for i in (2, 3, 4)] + [line[5]]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("-" * len(out[0]))
    return "\n".join(out)
