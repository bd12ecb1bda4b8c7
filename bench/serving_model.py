"""The serving model (docs/serving-model.md), measured against its formulas on a live server.

Starts `llmsim serve` with the serving model on, then through the official SDK:
- rising concurrency (every request at once): TTFT and median inter-token gap per request;
- rising prompt length (one request at a time, nothing cached): TTFT;
- a 2000-word prompt whose first fraction is shared with an earlier one: the prefix-cache hit rate.
Each is plotted, measured against predicted, as PNGs in docs/img/ (matplotlib: the `bench`
extra), and the largest relative deviation is printed.

usage: python bench/serving_model.py [--out docs/img]
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import openai  # noqa: E402

from llmsim.testing import start  # noqa: E402

TTFT_MS, TBT_MS, TOKENS = 200.0, 20.0, 20
SLOTS, PREFILL_MS, SLOWDOWN, BLOCK = 4, 0.2, 2.0, 16
CONCURRENCY = (1, 2, 3, 4, 6, 8, 12, 16)
WORDS = (10, 250, 500, 1000, 2000, 4000)
SHARED = (0.0, 0.25, 0.5, 0.75, 1.0)


def factor(running: int) -> float:
    return 1 + (SLOWDOWN - 1) * (min(running, SLOTS) - 1) / (SLOTS - 1)


def service_s(prompt: int, running: int) -> float:
    """A slot's time: prefill, TTFT, then the gaps at this load."""
    return (PREFILL_MS * prompt + TTFT_MS + (TOKENS - 1) * TBT_MS * factor(running)) / 1000


async def stream(client, content: str) -> tuple[float, list[float], int]:
    """(TTFT, the gaps between content tokens, prompt tokens) of one streamed Chat completion."""
    began, times, prompt = time.perf_counter(), [], 0
    chunks = await client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": content}], stream=True,
        stream_options={"include_usage": True})
    async for chunk in chunks:
        if chunk.choices and chunk.choices[0].delta.content:
            times.append(time.perf_counter())
        if chunk.usage is not None:
            prompt = chunk.usage.prompt_tokens
    return times[0] - began, [b - a for a, b in zip(times, times[1:])], prompt


def words(n: int) -> str:
    return f"{uuid.uuid4().hex} " + " ".join(f"word{i % 89}" for i in range(n))


async def concurrency_sweep(client) -> list[tuple[int, float, float, float, float]]:
    """(concurrency, measured TTFT, predicted TTFT, measured gap, predicted gap) per request."""
    rows = []
    for c in CONCURRENCY:
        results = await asyncio.gather(*(stream(client, f"hi {i}") for i in range(c)))
        ordered = sorted(results)                   # by TTFT: the queue's order
        for k, (ttft, gaps, prompt) in enumerate(ordered):
            wave, last = k // SLOTS, (c - 1) // SLOTS
            running = SLOTS if wave < last else c - last * SLOTS
            predicted = wave * service_s(prompt, SLOTS) + (PREFILL_MS * prompt + TTFT_MS) / 1000
            rows.append((c, ttft, predicted, statistics.median(gaps), TBT_MS * factor(running) / 1000))
    return rows


async def length_sweep(client) -> list[tuple[int, float, float]]:
    rows = []
    for n in WORDS:
        ttft, _, prompt = await stream(client, words(n))
        rows.append((prompt, ttft, (TTFT_MS + PREFILL_MS * prompt) / 1000))
    return rows


async def cache_sweep(client) -> list[tuple[float, float, float]]:
    """(shared fraction, measured hit rate, predicted) for a 2000-word prompt."""
    rows = []
    for shared in SHARED:
        base = words(2000).split(" ")
        cut = int(len(base) * shared)
        await client.responses.create(model="gpt-4o", input=" ".join(base))
        other = base[:cut] + [f"other{i % 89}" for i in range(len(base) - cut)]
        if cut == 0:
            other[0] = uuid.uuid4().hex
        answer = await client.responses.create(model="gpt-4o", input=" ".join(other))
        usage = answer.usage
        measured = usage.input_tokens_details.cached_tokens / usage.input_tokens
        shared_tokens = usage.input_tokens * shared     # about: the words are about one token each
        predicted = min(shared_tokens, usage.input_tokens - 1) // BLOCK * BLOCK / usage.input_tokens
        rows.append((shared, measured, predicted))
    return rows


def deviation(pairs) -> float:
    return max(abs(m - p) / p for m, p in pairs if p)


def plot(out: Path, conc, lengths, cache) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out.mkdir(parents=True, exist_ok=True)

    def figure(name, xlabel, ylabel, series, title):
        fig, ax = plt.subplots(figsize=(6, 4))
        for label, xs, ys, style in series:
            ax.plot(xs, ys, style, label=label)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(out / name, dpi=100)
        plt.close(fig)
    xs = [r[0] for r in conc]
    figure("serving-ttft-vs-concurrency.png", "concurrent requests", "TTFT (s)",
           [("measured", xs, [r[1] for r in conc], "o"), ("predicted", xs, [r[2] for r in conc], "x")],
           f"TTFT per request, {SLOTS} slots (queue order)")
    figure("serving-gap-vs-concurrency.png", "concurrent requests", "median gap (ms)",
           [("measured", xs, [r[3] * 1000 for r in conc], "o"),
            ("predicted", xs, [r[4] * 1000 for r in conc], "x")],
           f"Inter-token gap, load slowdown {SLOWDOWN}")
    figure("serving-ttft-vs-input-tokens.png", "input tokens", "TTFT (s)",
           [("measured", [r[0] for r in lengths], [r[1] for r in lengths], "o-"),
            ("predicted", [r[0] for r in lengths], [r[2] for r in lengths], "x--")],
           f"TTFT, prefill {PREFILL_MS} ms per uncached token")
    figure("serving-prefix-hit-rate.png", "shared prefix (fraction of the prompt)", "cached / input tokens",
           [("measured", [r[0] for r in cache], [r[1] for r in cache], "o-"),
            ("predicted", [r[0] for r in cache], [r[2] for r in cache], "x--")],
           f"Prefix cache hit rate, {BLOCK}-token blocks")


async def measure(url: str):
    client = openai.AsyncOpenAI(base_url=url, api_key="sk-bench", max_retries=0, timeout=120)
    await client.models.list()
    await stream(client, "warm up")
    conc = await concurrency_sweep(client)
    lengths = await length_sweep(client)
    cache = await cache_sweep(client)
    await client.close()
    return conc, lengths, cache


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(REPO / "docs" / "img"))
    args = p.parse_args()
    with start(profile=None, ttft_ms=TTFT_MS, tbt_ms=TBT_MS, target_tokens=TOKENS, max_concurrency=SLOTS,
               prefill_ms_per_token=PREFILL_MS, load_slowdown=SLOWDOWN, prefix_cache=True) as server:
        conc, lengths, cache = asyncio.run(measure(server.openai_url))
    plot(Path(args.out), conc, lengths, cache)
    worst = 0.0
    for name, pairs in (("TTFT vs concurrency", [(r[1], r[2]) for r in conc]),
                        ("gap vs concurrency", [(r[3], r[4]) for r in conc]),
                        ("TTFT vs input tokens", [(r[1], r[2]) for r in lengths]),
                        ("prefix hit rate", [(r[1], r[2]) for r in cache])):
        print(f"{name}: largest deviation {deviation(pairs):.1%}")
        worst = max(worst, deviation(pairs))
    print(f"largest deviation: {worst:.1%}")
    print(f"plots: {args.out}")


if __name__ == "__main__":
    main()
