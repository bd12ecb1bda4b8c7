"""llmsim's token counting (llmsim.sim.bpe) against tiktoken's: memory and CPU per token.

    python bench/tokenizer.py            # both encodings: resident MB, load time, µs per token

Memory is what loading one encoding adds to a fresh process's RSS (malloc_trim'd, as the
server does), each measured in its own subprocess. Speed is the best of 5 counts of each
text, with llmsim's cache of merged pre-tokens cleared first: every text is new to it, as a
prompt no earlier request sent (llmsim.sim.tokens also remembers whole texts it counted: a
system prompt sent again costs a lookup). tiktoken is loaded offline as the tests load it,
and measured as llmsim held it before llmsim.sim.bpe: without its Python copy of the ranks.
"""
from __future__ import annotations

import argparse
import base64
import random
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

MEASURE = """
import ctypes, gc, sys, time
sys.path.insert(0, {tests!r})
def rss():
    return int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS')).split()[1]) / 1024
if {which!r} == 'llmsim':
    from llmsim.sim import tokens as module
    load = module.encoding
else:
    import counting
    def load(name):                       # as llmsim held it: without the Python copy of the ranks
        counting.reference(name)._mergeable_ranks = None
gc.collect(); ctypes.CDLL('libc.so.6').malloc_trim(0)
before, started = rss(), time.perf_counter()
load({name!r})
took = time.perf_counter() - started
gc.collect(); ctypes.CDLL('libc.so.6').malloc_trim(0)
print(rss() - before, took)
"""


def load_cost(which: str, name: str) -> tuple[float, float]:
    code = MEASURE.format(tests=str(REPO / "tests"), which=which, name=name)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    megabytes, seconds = out.stdout.split()
    return float(megabytes), float(seconds)


def texts() -> dict[str, str]:
    rng = random.Random(1)
    return {
        "English prose (README.md)": (REPO / "README.md").read_text(),
        "Python code (llmsim/*.py)": "\n".join(p.read_text() for p in sorted((REPO / "llmsim").glob("*.py"))[:15]),
        "CJK text (random ideographs)": "".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(5000)),
        "base64 (30 KB of random bytes)": base64.b64encode(rng.randbytes(30_000)).decode(),
        "one letter x 20,000": "a" * 20_000,
    }


def per_token(count, text: str, clear) -> float:
    best = float("inf")
    for _ in range(5):
        clear()
        started = time.perf_counter()
        tokens = count(text)
        best = min(best, time.perf_counter() - started)
    return best / tokens * 1e6


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    from counting import reference
    from llmsim.sim import tokens
    for name in tokens.ENCODINGS:
        ours_mb, ours_s = load_cost("llmsim", name)
        theirs_mb, theirs_s = load_cost("tiktoken", name)
        print(f"\n{name}: resident after loading {ours_mb:.1f} MB (tiktoken {theirs_mb:.1f} MB), "
              f"load {ours_s:.2f} s (tiktoken {theirs_s:.2f} s)")
        ours, theirs = tokens.encoding(name), reference(name)
        print(f"  {'text':34} {'tokens':>8} {'llmsim µs/token':>16} {'tiktoken':>9} {'ratio':>6}")
        for label, text in texts().items():
            a = per_token(ours.count, text, ours._remembered.cache_clear)
            b = per_token(lambda t, theirs=theirs: len(theirs.encode_ordinary(t)), text, lambda: None)
            print(f"  {label:34} {ours.count(text):>8} {a:>16.2f} {b:>9.2f} {a / b:>5.1f}x")


if __name__ == "__main__":
    main()
