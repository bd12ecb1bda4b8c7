"""The peer we compare against: `@copilotkit/aimock` (Node), installed into bench/.peer/.

`python bench/peer.py install` installs it; `python bench/peer.py serve [--tokens N ...]` runs
it, configured to match llmsim: one catch-all fixture of N one-token words, and for paced
streams ttft = T - G, tps = 1000 / G, so its first content chunk is due when llmsim's
`--ttft-ms T --tbt-ms G` first token is. How each setting was read from the package:
docs/benchmarks.md#benchpeer.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import servers

PACKAGE = "@copilotkit/aimock"
PEER_DIR = Path(__file__).resolve().parent / ".peer"
PACKAGE_DIR = PEER_DIR / "node_modules" / "@copilotkit" / "aimock"
CLI = PACKAGE_DIR / "dist" / "cli.js"
TOKEN = " hello"


def installed() -> bool:
    return CLI.exists() and shutil.which("node") is not None


def version() -> str | None:
    try:
        return json.loads((PACKAGE_DIR / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def install() -> bool:
    """npm-install the peer into bench/.peer/ if it is missing; False if that is impossible."""
    if installed():
        return True
    if not shutil.which("npm") or not shutil.which("node"):
        return False
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(PEER_DIR), PACKAGE],
                   check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return installed()


def fixture(tokens: int, ttft_ms: float | None = None, tbt_ms: float | None = None) -> dict:
    """One catch-all fixture: `tokens` content deltas, paced like llmsim's --ttft-ms/--tbt-ms."""
    entry: dict = {"match": {}, "response": {"content": TOKEN * tokens}, "chunkSize": len(TOKEN)}
    if ttft_ms is not None or tbt_ms is not None:
        gap = tbt_ms or 0.0
        profile: dict = {"ttft": max(0.0, (ttft_ms or 0.0) - gap), "jitter": 0}
        if gap > 0:
            profile["tps"] = 1000.0 / gap
        entry["streamingProfile"] = profile
    return {"fixtures": [entry]}


def start(tokens: int = 32, ttft_ms: float | None = None, tbt_ms: float | None = None,
          port: int | None = None, directory: Path | None = None) -> servers.Server:
    """Run aimock on a free loopback port with the fixture above (install first)."""
    if not installed():
        raise RuntimeError(f"{PACKAGE} is not installed; run: python bench/peer.py install")
    directory = Path(directory or tempfile.mkdtemp(prefix="aimock-"))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "fixtures.json"
    path.write_text(json.dumps(fixture(tokens, ttft_ms, tbt_ms), indent=1))
    port = port or servers.free_port()
    cmd = ["node", str(CLI), "-p", str(port), "-h", servers.HOST, "-f", str(path)]
    server = servers.Server("aimock", cmd, port, "/health", cwd=directory)
    server.fixture_path = path
    return server


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=["install", "serve"])
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--ttft-ms", type=float)
    p.add_argument("--tbt-ms", type=float)
    p.add_argument("--port", type=int)
    args = p.parse_args()
    if not install():
        raise SystemExit(f"could not install {PACKAGE} (need node and npm)")
    if args.command == "install":
        print(f"{PACKAGE} {version()} in {PACKAGE_DIR}")
        return
    server = start(args.tokens, args.ttft_ms, args.tbt_ms, args.port)
    print(f"{server.command}\nlistening on {server.url} (fixtures {server.fixture_path}); Ctrl-C stops")
    try:
        server.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
