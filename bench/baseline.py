"""An earlier llmsim commit in a virtual environment of its own, to run beside the current code.

    python bench/baseline.py bd76b8f          # prepare it (cached) and print its python and tree

(bench/perf.py --baseline DIR runs a directory, e.g. a copy of the tree before a change, with
this interpreter instead: an A/B of an uncommitted variant in one run.)

`prepare(REV)` extracts the commit (`git archive`, no worktree) into bench/.baselines/<sha>/src
and installs it *editable* into bench/.baselines/<sha>/venv, so a commit whose wheel lacked its
templates still finds them in its tree. The libraries it shares with the current code are
pinned to the versions the running interpreter has (`pip freeze` as constraints), uvicorn to
`--uvicorn` (0.54.0: the newest that the tuned server's private hooks know): the two sides
then differ in llmsim's code only. A ready marker makes the next call instant; a broken
install is rebuilt.
"""
from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
CACHE = BENCH / ".baselines"
UVICORN = "0.54.0"


@dataclass
class Baseline:
    rev: str          # as asked, e.g. "bd76b8f"
    sha: str
    python: Path      # the venv's interpreter
    src: Path         # the extracted tree (cwd of its server)


def log(message: str) -> None:
    print(f"[baseline] {message}", file=sys.stderr, flush=True)


def resolve(rev: str, repo: Path = REPO) -> str:
    if Path(rev).is_dir():
        return "(directory)"
    out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", f"{rev}^{{commit}}"],
                         capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"--baseline {rev}: not a commit in {repo} ({out.stderr.strip()})")
    return out.stdout.strip()


def _constraints() -> str:
    """The running interpreter's packages as pins, minus llmsim and anything not from an index."""
    out = subprocess.run([sys.executable, "-m", "pip", "freeze", "--exclude", "llmsim"],
                         capture_output=True, text=True, check=True).stdout
    return "".join(line + "\n" for line in out.splitlines()
                   if line and not line.startswith(("-e", "#")) and " @ " not in line)


def prepare(rev: str, uvicorn: str = UVICORN, repo: Path = REPO, cache: Path = CACHE) -> Baseline:
    """`rev` installed (cached); a directory instead (a copy of a tree, for A/B runs of
    uncommitted variants) is run as it is, by this interpreter."""
    if Path(rev).is_dir():
        return Baseline(rev, "(directory)", Path(sys.executable), Path(rev).resolve())
    sha = resolve(rev, repo)
    home = cache / f"{sha[:12]}-uvicorn{uvicorn}"
    src, venv, ready = home / "src", home / "venv", home / "READY"
    python = venv / "bin" / "python"
    found = Baseline(rev, sha, python, src)
    if ready.exists() and python.exists():
        return found
    log(f"installing {rev} ({sha[:12]}) into {home}")
    shutil.rmtree(home, ignore_errors=True)
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", sha],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(src, filter="data")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    (home / "constraints.txt").write_text(_constraints())
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    wanted = ["-e", str(src), f"uvicorn[standard]=={uvicorn}"]
    done = subprocess.run([*pip, "-c", str(home / "constraints.txt"), *wanted], capture_output=True, text=True)
    if done.returncode:     # the old commit wants other versions than ours: let pip choose
        log("pinned install failed; installing with the commit's own requirements:\n" + done.stderr[-2000:])
        done = subprocess.run([*pip, *wanted], capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"baseline {rev}: pip install failed:\n{done.stderr[-3000:]}")
    check = subprocess.run([str(python), "-c", "import llmsim, sys; print(llmsim.__file__)"],
                           cwd="/", capture_output=True, text=True, check=True).stdout.strip()
    if not check.startswith(str(src)):
        raise SystemExit(f"baseline {rev}: its venv imports llmsim from {check}, not {src}")
    freeze = subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True, text=True).stdout
    ready.write_text(f"{rev} {sha}\n{freeze}")
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rev")
    p.add_argument("--uvicorn", default=UVICORN)
    args = p.parse_args()
    b = prepare(args.rev, args.uvicorn)
    print(f"{b.rev} = {b.sha}\npython {b.python}\ntree   {b.src}")


if __name__ == "__main__":
    main()
