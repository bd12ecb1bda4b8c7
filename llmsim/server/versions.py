"""Which server `llmsim serve` runs: `tuned` (this package's protocol, request cycle, eager
start, accept loop, one socket per worker, CPU pinning, GC policy and the API's fast lane,
several of which reach into uvicorn's, connexion's and starlette's internals) or `plain`
(stock uvicorn and connexion, their public API only: `--reuse-port` and `--pin-workers` do
not apply).

The tuned server runs only on the releases it was tested with (`TESTED`, the same bounds as
the caps in pyproject.toml); on any other, `--server tuned` starts `plain` and says why in
one warning; without httptools (the tuned protocol's parser, which keeps the request
deadlines), it starts `plain` too.
"""
from __future__ import annotations

import logging
import re
from importlib import metadata
from importlib.util import find_spec
from typing import Callable

SERVERS = ("tuned", "plain")

# package -> (lowest release tested, first release not tested)
TESTED = {
    "uvicorn": ("0.30", "0.55"),
    "connexion": ("3.3", "3.4"),
    "starlette": ("0.37", "1.11"),
}

log = logging.getLogger("llmsim")


def _release(version: str) -> tuple[int, ...]:
    """A version's leading release numbers: "0.54.0rc1" -> (0, 54, 0)."""
    found = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(part) for part in found.group().split(".")) if found else ()


def untested(version_of: Callable[[str], str] = metadata.version) -> tuple[str, str] | None:
    """The first (package, installed version) outside `TESTED`, if any."""
    for package, (lowest, beyond) in TESTED.items():
        try:
            installed = version_of(package)
        except metadata.PackageNotFoundError:
            return package, "not installed"
        if not _release(lowest) <= _release(installed) < _release(beyond):
            return package, installed
    return None


def choose(requested: str, version_of: Callable[[str], str] = metadata.version) -> str:
    """The server to run for `--server requested`: `plain` when asked, or when the tuned
    server was not tested with an installed package (one warning names it)."""
    if requested != "tuned":
        return requested
    if find_spec("httptools") is None:
        log.warning("llmsim: httptools is not installed (pip install httptools): serving with --server plain")
        return "plain"
    found = untested(version_of)
    if found is None:
        return "tuned"
    package, installed = found
    lowest, beyond = TESTED[package]
    log.warning("llmsim: %s %s is not a release the tuned server was tested with (>=%s,<%s): "
                "serving with --server plain", package, installed, lowest, beyond)
    return "plain"
