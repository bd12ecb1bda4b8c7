"""One line per `bench/perf.py` run: how the llmsim / peer ratios moved between runs and builds.

    python bench/history.py                          # every run in bench/results/
    python bench/history.py --since 20261124 --markdown
    python bench/history.py bench/results/perf-20261124-1*.json

Each run is read from the JSON that bench/perf.py writes: when it ended, the build (`+` when
the tree was dirty), llmsim's extra arguments and `--only`, then W1-W4 rate ratios (the medians' ratio,
then W4 round by round), W5 N=1000 server lateness p99 of each round (ms), and W6 peak RSS,
llmsim against the peer (MB). A workload the run left out (`--only`) is blank.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
RATES = {"W1": "requests_per_s", "W2": "requests_per_s", "W3": "complete_per_s", "W4": "complete_per_s"}
COLUMNS = ["ended", "build", "options", "W1", "W2", "W3", "W4", "W4 rounds",
           "N=1000 lateness p99 (ms)", "W6 MB"]


def sides(results: dict, workload: str) -> tuple[dict, dict]:
    """llmsim's and the peer's figures for `workload` ({} for a side the run has not)."""
    both = results.get(workload) or {}
    return both.get("llmsim") or {}, both.get("peer") or {}


def rate_ratio(results: dict, workload: str) -> str:
    mine, peer = sides(results, workload)
    if not mine or not peer.get(RATES[workload]):
        return ""
    return f"{mine[RATES[workload]] / peer[RATES[workload]]:.2f}x"


def w4_rounds(results: dict) -> str:
    mine, peer = sides(results, "W4")
    return " / ".join(f"{a / b:.2f}" for a, b in zip(mine.get("rounds", ()), peer.get("rounds", ())) if b)


def lateness_rounds(results: dict) -> str:
    mine, _ = sides(results, "W5 N=1000")
    rounds = [r.get("lateness_ms/p99") for r in mine.get("rounds", [])]
    if not rounds and mine.get("lateness_ms"):
        rounds = [mine["lateness_ms"].get("p99")]
    return " / ".join(f"{value:.1f}" for value in rounds if value is not None)


def memory(results: dict) -> str:
    mine, peer = sides(results, "W6 N=1000")
    if not mine or not peer:
        return ""
    return f"{mine['peak_rss_mb']:.1f} / {peer['peak_rss_mb']:.1f}"


def options(settings: dict) -> str:
    """The run's llmsim arguments and workload choice (perf.py records absent ones as "None")."""
    given = {k: v for k, v in settings.items() if v not in (None, "None")}
    parts = [given["llmsim_args"]] if "llmsim_args" in given else []
    if "only" in given:
        parts.append(f"--only {given['only']}")
    return " ".join(parts)


def row(doc: dict) -> tuple[list[str], list[str]]:
    """A run's cells: what it was (when, build, options), then its figures."""
    meta, results = doc["meta"], doc["results"]
    build = meta.get("llmsim_commit") or "?"
    run = [meta["time"][:16].replace("T", " "), build + ("+" if meta.get("llmsim_dirty") else ""),
           options(meta.get("settings", {}))]
    return run, [*(rate_ratio(results, w) for w in RATES), w4_rounds(results),
                 lateness_rounds(results), memory(results)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="*", type=Path, help="perf JSON files (default: bench/results/perf-*.json)")
    p.add_argument("--since", default="", help="only runs whose file name is at or after perf-SINCE")
    p.add_argument("--markdown", action="store_true", help="a Markdown table instead of aligned text")
    args = p.parse_args()
    files = args.files or sorted(RESULTS.glob("perf-*.json"))
    rows = []
    for path in files:
        if args.since and path.name < f"perf-{args.since}":
            continue
        try:
            doc = json.loads(path.read_text())
            run, figures = row(doc)
        except (OSError, ValueError, KeyError) as exc:
            print(f"{path}: skipped ({exc.__class__.__name__}: {exc})", file=sys.stderr)
            continue
        if any(figures):
            rows.append(run + figures)
        else:
            print(f"{path}: skipped (none of the figures above)", file=sys.stderr)
    if args.markdown:
        print("| " + " | ".join(COLUMNS) + " |")
        print("|" + "---|" * len(COLUMNS))
        for cells in rows:
            print("| " + " | ".join(cells) + " |")
        return
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(COLUMNS)]
    for cells in [COLUMNS, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(cells, widths)).rstrip())


if __name__ == "__main__":
    main()
