"""`llmsim serve ...`: every flag maps onto a `Settings` field of the same name."""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
from pathlib import Path

from llmsim.errors import ConfigError
from llmsim.server import listening
from llmsim.settings import Settings, for_worker, to_worker_environ


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llmsim", description="LLM API traffic simulator")
    sub = p.add_subparsers(dest="command", required=True)
    top = sub.add_parser("top", help="live terminal dashboard of a running server (q quits)")
    top.add_argument("url", nargs="?", help="the server's root URL (default http://127.0.0.1:8080)")
    top.add_argument("--interval", type=float, default=0.5, help="seconds between refreshes (default 0.5)")
    top.add_argument("--once", action="store_true", help="print one frame and exit")
    serve = sub.add_parser("serve", help="run the simulator server")
    serve.add_argument("--host", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8080)")
    serve.add_argument("--config", help="YAML config file with settings")
    serve.add_argument("--profile", help="force one latency profile for all models (e.g. instant)")
    serve.add_argument("--ttft-ms", type=float, help="fixed time to first token, every model")
    serve.add_argument("--tbt-ms", type=float, help="fixed gap between tokens, every model")
    serve.add_argument("--target-tokens", type=int, help="generated length in tokens (default 100)")
    serve.add_argument("--seed", type=int, help="make text, latency and ids reproducible")
    serve.add_argument("--templates", help="directory of templates overriding ours")
    serve.add_argument("--spec", help="OpenAPI document overriding ours")
    serve.add_argument("--log-level", help="critical|error|warning|info|debug|trace")
    serve.add_argument("--generator", help="lorem|echo|fixed|random|sequence")
    serve.add_argument("--fixed-text", help="text said by the fixed generator")
    serve.add_argument("--allow-any-model", action="store_true", default=None,
                       help="answer for model names not in the catalogue")
    serve.add_argument("--usage-semantics", help="llmsim or openai usage arithmetic (default: as --compat says)")
    serve.add_argument("--keepalive-ms", type=float, help="SSE keep-alive comment interval before the first token")
    serve.add_argument("--metrics", action=argparse.BooleanOptionalAction, default=None,
                       help="keep live stats for /llmsim/stats and /metrics (default on)")
    serve.add_argument("--trace", metavar="FILE", help="append one JSONL line per request (intended timing)")
    serve.add_argument("--log-format", help="access log on stderr: off (default), text or json")
    serve.add_argument("--stats-dir", help="directory where worker processes share stats snapshots")
    serve.add_argument("--ws-max-age-s", type=float, help="close Responses WebSocket connections after this many seconds (default 3600)")
    serve.add_argument("--ws-max-connections", type=int, help="refuse WebSocket upgrades beyond this many open connections (default 1000)")
    serve.add_argument("--tool-call-probability", type=float,
                       help="chance 0-1 that tool_choice auto calls a function (default 0.5)")
    serve.add_argument("--errors", type=_yaml, help="fault rates per request, YAML or kind=rate pairs, "
                       "e.g. 'rate_limit=0.01,server_error=0.001' (kinds: llmsim/data/faults.yaml)")
    serve.add_argument("--fault-schedule", type=_yaml,
                       help="scheduled faults as YAML, e.g. '[{kind: rate_limit, count: 3}]'")
    serve.add_argument("--api-key", dest="api_keys", action="append",
                       help="accept this Bearer API key (repeatable); with none, no authentication")
    serve.add_argument("--max-body-bytes", type=int, help="largest request body accepted (default 32 MiB)")
    serve.add_argument("--store", help="state store: lmdb:DIR, a SQLite file path or redis://host:port/db "
                       "or memory (default: memory with one worker, a temp LMDB store the --workers share)")
    serve.add_argument("--store-max-entries", type=int, help="stored responses (and conversations) kept (default 10000)")
    serve.add_argument("--store-ttl-s", type=float, help="seconds a stored entry lives after its last write (default 3600)")
    serve.add_argument("--workers", type=int, help="server processes sharing the port (default 1)")
    serve.add_argument("--reuse-port", action=argparse.BooleanOptionalAction, default=None,
                       help="with --workers: each worker listens on its own SO_REUSEPORT socket, so "
                       "the kernel spreads bursts of connections over them (default: on where "
                       "supported; --no-reuse-port shares one socket)")
    serve.add_argument("--pin-workers", action=argparse.BooleanOptionalAction, default=None,
                       help="with as many --workers as usable CPUs: each worker on a CPU of its "
                       "own (default: on, where supported)")
    serve.add_argument("--data", help="directory of data files (models.yaml, profiles.yaml, faults.yaml, "
                       "reasoning.yaml, ids.yaml; each optional) overriding ours")
    serve.add_argument("--server", help="tuned (default: llmsim's own protocol, accept loop and fast "
                       "lane, on the uvicorn, connexion and starlette releases it was tested with) or "
                       "plain (stock uvicorn and connexion)")
    serve.add_argument("--compat", help="llmsim (default: the product spec) or openai: which side applies "
                       "where they differ (effort rules, usage arithmetic, summary null or []; "
                       "openapi/departures.yaml)")
    serve.add_argument("--responses-done", action=argparse.BooleanOptionalAction, default=None,
                       help="end Responses SSE streams with data: [DONE] (default off, as OpenAI)")
    serve.add_argument("--base-path", dest="base_paths", action="append",
                       help="mount the API under this prefix (repeatable; default /openai/v1 and /v1; "
                       "'' mounts /responses, /chat/completions, ... without one)")
    serve.add_argument("--webhook-url", dest="webhook_urls", action="append",
                       help="send background responses' webhook events to this URL (repeatable)")
    serve.add_argument("--webhook-secret", help="sign webhook events with this secret (whsec_...)")
    serve.add_argument("--webhook-attempts", type=int, help="tries per webhook delivery (default 5)")
    serve.add_argument("--webhook-backoff-s", type=float,
                       help="seconds before a webhook's first retry, doubling each retry (default 0.5)")
    serve.add_argument("--webhook-faults", type=_yaml,
                       help="webhook delivery faults, e.g. 'delay_ms=500,duplicate=0.5'")
    serve.add_argument("--scenarios", metavar="FILE",
                       help="scenario file: scripted turns (header x-llmsim-scenario) and rules")
    serve.add_argument("--default-scenario", metavar="NAME",
                       help="the scenario a request that names none plays")
    # record and replay (llmsim.replay)
    serve.add_argument("--replay", metavar="DIR", help="answer requests matching a fixture in DIR "
                       "(written by `llmsim record`) as recorded; others are simulated")
    serve.add_argument("--replay-speed", type=float, help="replay the recorded timing this many times "
                       "faster (default 1; 0: no waiting)")
    serve.add_argument("--replay-strict", action="store_true", default=None,
                       help="with --replay: a request no fixture matches gets a 404 instead of a simulated answer")
    # the serving model (docs/serving-model.md): off unless set here or in a model's profile
    serve.add_argument("--max-concurrency", type=int, help="requests a model answers at once per "
                       "process; more wait in order, the wait counting in their TTFT")
    serve.add_argument("--max-queue", type=int, help="requests waiting for a slot beyond which a "
                       "request gets 429 (default: no cap)")
    serve.add_argument("--prefill-ms-per-token", type=float,
                       help="TTFT grows by this many ms per uncached input token")
    serve.add_argument("--load-slowdown", type=float, help="the inter-token gap's factor with every "
                       "slot busy (linear in the running requests; needs --max-concurrency)")
    serve.add_argument("--prefix-cache", action=argparse.BooleanOptionalAction, default=None,
                       help="cache input token blocks: cached_tokens in usage, prefill only the rest")
    serve.add_argument("--prefix-block-tokens", type=int, help="tokens per cached block (default 16)")
    serve.add_argument("--prefix-cache-blocks", type=int,
                       help="cached blocks kept per model, least recently used out (default 65536)")
    # admin access (llmsim.api.guard)
    serve.add_argument("--admin-key", help="the Bearer key llmsim's own routes that change behaviour "
                       "(POST/DELETE /llmsim/...) need; without one, any --api-key")
    serve.add_argument("--protect-stats", action=argparse.BooleanOptionalAction, default=None,
                       help="with keys configured, the read-only routes (stats, metrics) need one too")
    serve.add_argument("--store-max-bytes", type=int, help="an LMDB or SQLite store's largest file size "
                       "in bytes; when it is full, requests that write get 503 (default: no limit)")
    serve.add_argument("--graceful-timeout", dest="graceful_timeout_s", type=float, metavar="S",
                       help="on SIGTERM, stop accepting and let requests in flight finish for up to S "
                       "seconds; streams still running then end with their API's error event "
                       "(default: wait for them all)")
    # rate limits (llmsim.state.ratelimits); per model and key: the config key rate_limits
    serve.add_argument("--rate-limit-rpm", type=int, help="requests per minute for every API key and model")
    serve.add_argument("--rate-limit-tpm", type=int, help="tokens per minute for every API key and model")
    serve.add_argument("--rate-limits", type=_yaml, help="limits per model and key, YAML: "
                       "'{default: {rpm: 500}, models: {gpt-4o: {tpm: 30000}}, keys: {KEY: {rpm: 5}}}'")
    # a full store, a stopped server's background responses (llmsim.state.store, llmsim.state.background)
    serve.add_argument("--store-evict-when-full", action=argparse.BooleanOptionalAction, default=None,
                       help="a full LMDB or SQLite store evicts its oldest responses and conversations and "
                       "writes again, instead of answering 503 (default: on)")
    serve.add_argument("--background-lease-s", type=float, metavar="S",
                       help="a background response whose server renewed no lease for S seconds (or stopped, "
                       "on this machine) is marked failed (default 10)")
    # slow and surplus clients (llmsim.server.deadlines, llmsim.api.front)
    serve.add_argument("--header-timeout", dest="header_timeout_s", type=float, metavar="S",
                       help="disconnect a client that has not sent its request head S seconds after "
                       "connecting (default 10)")
    serve.add_argument("--body-timeout", dest="body_timeout_s", type=float, metavar="S",
                       help="answer 408 and close the connection when a request body has not all "
                       "arrived S seconds after its head (default 30)")
    serve.add_argument("--max-connections", type=int, metavar="N",
                       help="beyond N connections with a request in flight or a WebSocket open (per "
                       "process), answer 503 and close the connection (default: no limit)")
    record = sub.add_parser("record", help="proxy to an OpenAI-compatible server, writing each exchange "
                            "as a fixture for `llmsim serve --replay`")
    record.add_argument("--upstream", required=True, help="the upstream server's root URL, e.g. http://127.0.0.1:8080")
    record.add_argument("--out", required=True, help="directory the fixtures are written to (made if missing)")
    record.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    record.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    return p


def _yaml(text: str):
    """A flag value as YAML; `a=1,b=2` is read as the mapping {a: 1, b: 2}."""
    import yaml
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise argparse.ArgumentTypeError(f"not valid YAML: {exc}") from None
    if isinstance(value, str) and "=" in value:
        pairs = [part.partition("=") for part in value.split(",") if part.strip()]
        value = {key.strip(): yaml.safe_load(raw) for key, _, raw in pairs}
    return value


def main(argv: list[str] | None = None) -> int:
    args = vars(parser().parse_args(argv))
    command = args.pop("command")
    if command == "top":                    # a client of a running server: no settings
        from llmsim.observe.dashboard import main as top
        return top(**args)
    if command == "record":                 # a proxy: no settings either
        return record(**args)
    try:
        settings = Settings.load(args)
        if command == "serve":
            return serve(settings)
    except ConfigError as exc:
        print(f"llmsim: configuration error: {exc}", file=sys.stderr)
        return 2
    return 1


class Terminated(BaseException):
    """SIGTERM: raised where the process is, so that it unwinds (and removes its scratch
    directories) before it exits."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated(signum)


def serve(settings: Settings) -> int:
    """Run the server: one process (its store in memory unless `--store` names one), or
    `--workers N` processes sharing the port, the embedded store (a temp LMDB directory
    unless `--store` names one) and stats snapshots.
    SIGTERM (uvicorn re-raises it once it has shut down gracefully: requests in flight
    finished, or ended after `--graceful-timeout`) is a clean stop: exit status 0, once the
    scratch directories are removed."""
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return _serve(settings)
    except Terminated:
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def record(upstream: str, out: str, host: str, port: int) -> int:
    """`llmsim record`: the recording proxy (llmsim.replay.recorder) until Ctrl-C or SIGTERM."""
    import uvicorn

    from llmsim.replay.recorder import create_recorder
    server = uvicorn.Server(uvicorn.Config(create_recorder(upstream, out), host=host, port=port,
                                           log_level="warning", access_log=False))
    server.run()
    return 0 if server.started else STARTUP_FAILURE


STARTUP_FAILURE = 3     # the exit status uvicorn gives a server that could not start


UNUSED_OPTIONAL = ("connexion.apps.flask", "connexion.frameworks.flask", "httpx._main")


def skip_unused_optional_modules() -> None:
    """A server process never loads connexion's Flask side (its `flask` extra) nor httpx's
    command line (rich, pygments): both packages import them under `except ImportError` and
    carry on without, and not loading them keeps each server process smaller (bench/memory.py).
    Done by the command that owns the process, before the app is imported, never on import."""
    for name in UNUSED_OPTIONAL:
        sys.modules.setdefault(name, None)


def _serve(settings: Settings) -> int:
    skip_unused_optional_modules()
    import uvicorn

    from llmsim.server.versions import choose
    settings = settings.replace(server=choose(settings.server))
    tuned = settings.server == "tuned"
    # --workers share a temp LMDB store (one process keeps its store in memory) and a stats
    # snapshot directory, in memory where there is one; both go when the server stops
    shared = settings.workers > 1
    with _scratch(shared and settings.store is None, "llmsim-") as store_scratch, \
            _scratch(shared and settings.stats_dir is None, "llmsim-stats-", _memory_dir()) as stats_scratch:
        settings = _shared_paths(settings, store_scratch and Path(store_scratch), stats_scratch and Path(stats_scratch))
        if settings.stats_dir:          # made here: a worker starting as the server stops must
            Path(settings.stats_dir).mkdir(parents=True, exist_ok=True)    # not make it again
        # no X-Forwarded-* rewriting: nothing here reads a request's client address or scheme,
        # and uvicorn's middleware for it was one more layer on every request
        options = dict(host=settings.host, port=settings.port, log_level=settings.log_level,
                       access_log=False, lifespan="on", proxy_headers=False,
                       timeout_graceful_shutdown=settings.graceful_timeout_s)
        if tuned:       # llmsim.server's protocol and accept loop; `plain`: uvicorn's defaults
            options.update(http=http_protocol(), loop="llmsim.server.accepting:new_event_loop")
        else:           # uvicorn's protocol, its request head timed (llmsim.server.deadlines)
            options.update(http="llmsim.server.deadlines:PlainProtocol")
        if settings.workers == 1:
            from llmsim.app import create_app
            config = uvicorn.Config(create_app(settings), **options)  # bad settings fail before it listens
            server = uvicorn.Server(config)
            try:    # tuned: a socket of its own (see llmsim.server.accepting)
                server.run(sockets=[config.bind_socket()]) if tuned else server.run()
            except KeyboardInterrupt:   # uvicorn re-raises Ctrl-C once it has shut down
                pass
            if not server.started:
                return STARTUP_FAILURE
        else:
            check_in_child(settings)    # bad settings fail before any worker starts
            os.environ.update(to_worker_environ(settings))
            worker_config = dict(factory=True, workers=settings.workers, **options)
            if not tuned:               # uvicorn's own process manager and socket
                with contextlib.suppress(KeyboardInterrupt):
                    uvicorn.run("llmsim.cli:worker_app", **worker_config)
                return 0
            if not (settings.reuse_port and listening.reuse_port_supported()):
                worker_config["loop"] = "llmsim.server.accepting:new_shared_event_loop"
            listening.run_workers(uvicorn.Config("llmsim.cli:worker_app", **worker_config), settings.reuse_port)
    return 0


def check_in_child(settings: Settings) -> None:
    """Build the app once in a short-lived process, raising its ConfigError here: the
    supervisor of `--workers` processes then never holds an app (nor a tokenizer) itself."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
        error = child.submit(_build_app, settings).result()
    if error is not None:
        raise ConfigError(error)


def _build_app(settings: Settings) -> str | None:
    """The configuration error building the app raises, if any."""
    skip_unused_optional_modules()
    import asyncio

    from llmsim.api.front import sweep
    from llmsim.app import create_app
    try:
        app = create_app(settings)
    except ConfigError as exc:
        return str(exc)
    asyncio.run(sweep(app.fail_orphans))   # no worker runs yet: what the store holds as running was left
    return None


def http_protocol() -> str:
    """uvicorn's httptools protocol with one socket write per loop step (llmsim.server.corking);
    uvicorn's default where httptools is missing."""
    try:
        import httptools  # noqa: F401
    except ImportError:
        return "auto"
    return "llmsim.server.corking:CorkedHttpToolsProtocol"


def _memory_dir() -> str | None:
    """A directory in memory (tmpfs) where there is one: the workers' stats snapshots,
    replaced every 0.25 s, then never touch a disk. Replacing a file on ext4 mounted with
    `discard` waits for the device, and even with the write off the event loop a worker
    stalled while the snapshots were on such a disk (W5 of bench/perf.py; bench/RESULTS.md)."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


def _scratch(needed: bool, prefix: str, where: str | None = None):
    """A temp directory (in `where`) removed on exit, as a context giving its path; a context
    giving None when it is not `needed`."""
    return tempfile.TemporaryDirectory(prefix=prefix, dir=where) if needed else contextlib.nullcontext()


def _shared_paths(settings: Settings, store_scratch: Path | None, stats_scratch: Path | None = None) -> Settings:
    """What every process of one server shares, in the scratch directories `_serve` made:
    the temp LMDB store and the stats snapshot directory."""
    changes = {}
    if store_scratch is not None:
        changes["store"] = f"lmdb:{store_scratch / 'store.lmdb'}"
    if stats_scratch is not None:
        changes["stats_dir"] = str(stats_scratch / "stats")
    return settings.replace(**changes) if changes else settings


def worker_app():
    """uvicorn's app factory in each `--workers` process: the settings `serve` handed over,
    on a CPU of its own (llmsim.server.affinity) if the server is tuned."""
    skip_unused_optional_modules()
    from llmsim.app import create_app
    settings = for_worker()
    if settings.server == "tuned":
        from llmsim.server import affinity
        affinity.pin_worker(settings.workers, settings.pin_workers)
    return create_app(settings)


if __name__ == "__main__":
    sys.exit(main())
