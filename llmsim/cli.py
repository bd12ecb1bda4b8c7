"""`llmsim serve|record|top ...`: the command line.

`serve`'s flags are built from the settings schema (llmsim/schemas/config.yaml, through
llmsim.settings): each maps onto the `Settings` field of its name, grouped in `--help` as the
schema groups them. A mistyped flag, a bad setting or a server that cannot start (port taken,
bad host, store out of reach) stops with one line naming it and the fix, never a traceback.
A subcommand is one entry of COMMANDS: a function adding its parser, one running it.
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import socket
import sys
import tempfile
from pathlib import Path

from llmsim import __version__
from llmsim import settings as schema
from llmsim.errors import ConfigError
from llmsim.server import listening
from llmsim.settings import Settings, for_worker, to_worker_environ


class Parser(argparse.ArgumentParser):
    """argparse without abbreviations (`--prot` is not `--protect-stats`), whose errors are one
    line naming the closest flag."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")

    def unknown(self, extra: list[str]):
        """Refuse the first argument nothing took, naming the closest flag."""
        word = extra[0]
        if not word.startswith("-"):
            self.error(f"unexpected argument {word!r}")
        flag = word.partition("=")[0]
        known = [s for action in self._actions for s in action.option_strings if s.startswith("--")]
        near = schema.closest(flag, known)
        self.error(f"unknown flag {flag}" + (f"; did you mean {near}?" if near else ""))


def parser() -> Parser:
    p = Parser(prog="llmsim", description="LLM API traffic simulator")
    p.add_argument("--version", action="version", version=f"llmsim {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    p.commands = {}
    for name, (add, _run) in COMMANDS.items():
        p.commands[name] = add(sub)
    return p


def _add_serve(sub) -> Parser:
    serve = sub.add_parser("serve", help="run the simulator server",
                           description="Run the simulator server. Every flag is also an environment "
                           "variable LLMSIM_<NAME> and a --config key (docs/configuration.md).")
    for group, title in schema.GROUPS.items():
        flags = serve.add_argument_group(title)
        for name, spec in schema.PROPERTIES.items():
            if spec["group"] == group:
                flags.add_argument(*schema.flags(name), dest=name, **_flag_options(name))
    return serve


def _flag_options(name: str) -> dict:
    """argparse's options for a setting's flag, from its schema entry."""
    spec, kinds = schema.PROPERTIES[name], schema.types_of(name) - {"null"}
    shown = schema.shown_default(name)
    text = " ".join(spec["help"].split()) + ("" if shown == "none" else f" (default: {shown})")
    text = text.replace("`", "").replace("%", "%%")
    if kinds == {"boolean"}:
        return dict(action=argparse.BooleanOptionalAction, default=None, help=text)
    options = dict(metavar=spec.get("metavar"), help=text)
    if schema.repeatable(name):
        return dict(action="append", metavar=spec.get("metavar"), help=f"{text} (repeatable)")
    if kinds & {"object", "array"}:
        options["type"] = _yaml
    elif "string" not in kinds and "integer" in kinds:
        options["type"] = int
    elif "string" not in kinds and "number" in kinds:
        options["type"] = float
    return options


def _add_top(sub) -> Parser:
    top = sub.add_parser("top", help="live terminal dashboard of a running server (q quits)")
    top.add_argument("url", nargs="?", help="the server's root URL (default http://127.0.0.1:8080)")
    top.add_argument("--interval", type=float, default=0.5, help="seconds between refreshes (default 0.5)")
    top.add_argument("--once", action="store_true", help="print one frame and exit")
    return top


def _add_record(sub) -> Parser:
    record = sub.add_parser("record", help="proxy to an OpenAI-compatible server, writing each exchange "
                            "as a fixture for `llmsim serve --replay`")
    record.add_argument("--upstream", required=True, help="the upstream server's root URL, e.g. http://127.0.0.1:8080")
    record.add_argument("--out", required=True, help="directory the fixtures are written to (made if missing)")
    record.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    record.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    return record


def _add_fleet(sub) -> Parser:
    fleet = sub.add_parser("fleet", help="run a fleet of simulated backends from a YAML file (docs/fleet.md)")
    fleet.add_argument("file", help="the fleet file: backends, their models, settings and outages")
    fleet.add_argument("--control-port", type=int, help="port of the control address, GET /llmsim/fleet "
                       "(default: any free port, printed)")
    return fleet


def _run_fleet(args: dict) -> int:
    """A fleet file of its own (llmsim.fleet), each backend's settings in it."""
    from llmsim.fleet.supervisor import main as fleet
    return fleet(args["file"], args["control_port"])


def _yaml(text: str):
    """A flag value as YAML; `a=1,b=2` is read as the mapping {a: 1, b: 2}."""
    import yaml
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise argparse.ArgumentTypeError(f"not valid YAML: {' '.join(str(exc).split())}") from None
    if isinstance(value, str) and "=" in value:
        pairs = [part.partition("=") for part in value.split(",") if part.strip()]
        value = {key.strip(): yaml.safe_load(raw) for key, _, raw in pairs}
    return value


class StartupError(Exception):
    """The server cannot start (its port taken, its host or store out of reach): one line."""


def main(argv: list[str] | None = None) -> int:
    p = parser()
    namespace, extra = p.parse_known_args(argv)
    args = vars(namespace)
    command = args.pop("command")
    if extra:
        p.commands[command].unknown(extra)
    try:
        return COMMANDS[command][1](args)
    except ConfigError as exc:
        print(f"llmsim: configuration error: {exc}", file=sys.stderr)
        return 2
    except StartupError as exc:
        print(f"llmsim: cannot start: {exc}", file=sys.stderr)
        return STARTUP_FAILURE


def _run_top(args: dict) -> int:
    """A client of a running server: no settings."""
    from llmsim.observe.dashboard import main as top
    return top(**args)


def _run_serve(args: dict) -> int:
    return serve(Settings.load(args))


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


def _run_record(args: dict) -> int:
    """A proxy: no settings either."""
    return record(**args)


def record(upstream: str, out: str, host: str, port: int) -> int:
    """`llmsim record`: the recording proxy (llmsim.replay.recorder) until Ctrl-C or SIGTERM."""
    import uvicorn

    from llmsim.replay.recorder import create_recorder
    sock = listen(host, port)
    config = uvicorn.Config(create_recorder(upstream, out), host=host, port=port,
                            log_level="warning", access_log=False)
    print(f"llmsim record on {_url(host, sock.getsockname()[1])}: forwarding to {upstream}, "
          f"writing fixtures to {out} (Ctrl-C stops)", file=sys.stderr, flush=True)
    server = uvicorn.Server(config)
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=[sock])
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
    # the store's form, the port, the host, Redis: one line each, before anything starts; one
    # tuned process listens on the socket bound here (llmsim.server.accepting)
    from llmsim.observe import tracing
    tracing.check(settings)         # OpenTelemetry asked for but not installed: before the port
    sock = preflight(settings, keep=tuned and settings.workers == 1)
    # --workers share a temp LMDB store (one process keeps its store in memory) and a stats
    # snapshot directory, in memory where there is one; both go when the server stops
    shared = settings.workers > 1
    with _scratch(shared and settings.store is None, "llmsim-") as store_scratch, \
            _scratch(shared and settings.stats_dir is None, "llmsim-stats-", _memory_dir()) as stats_scratch:
        temp_store = store_scratch is not None
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
            try:
                config = uvicorn.Config(create_app(settings), **options)  # bad settings fail before it listens
            except BaseException:
                if sock is not None:
                    sock.close()
                raise
            if tuned:   # asleep while idle (llmsim.server.quiet)
                from llmsim.server.quiet import QuietServer
                server = QuietServer(config)
            else:
                server = uvicorn.Server(config)
            banner(settings, sock.getsockname()[1] if sock else settings.port)
            try:
                server.run(sockets=[sock] if sock else None)
            except KeyboardInterrupt:   # uvicorn re-raises Ctrl-C once it has shut down
                pass
            if not server.started:
                return STARTUP_FAILURE
        else:
            check_in_child(settings)    # bad settings fail before any worker starts
            banner(settings, settings.port, temp_store)
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


def preflight(settings: Settings, keep: bool = False) -> socket.socket | None:
    """What would otherwise fail after start-up, or with a traceback: the store's form, the
    address (a port taken, a host not of this machine) and a Redis store out of reach. With
    `keep`, the bound socket, for the server to listen on."""
    from llmsim.state.store import check_store
    check_store(settings.store)
    sock = listen(settings.host, settings.port)
    try:
        check_redis(settings.store)
    except BaseException:
        sock.close()
        raise
    if keep:
        return sock
    sock.close()
    return None


def _url(host: str, port: int) -> str:
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to `host:port` as uvicorn's `Config.bind_socket` binds it; StartupError
    naming the address and the fix when it cannot be."""
    where = _url(host, port).removeprefix("http://")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except (socket.gaierror, UnicodeError) as exc:
        sock.close()
        raise StartupError(f"host {host!r} (--host) is not an address of this machine "
                           f"({getattr(exc, 'strerror', None) or exc}); use e.g. 127.0.0.1, 0.0.0.0 or ::") from None
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise StartupError(f"{where}: Address already in use (another server?): stop it, or choose "
                               "another --port (--port 0 picks a free one)") from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise StartupError(f"host {host!r} (--host) is not an address of this machine; use e.g. "
                               "127.0.0.1, 0.0.0.0 or ::") from None
        if exc.errno == errno.EACCES:
            raise StartupError(f"{where}: permission denied (ports below 1024 need privileges): choose "
                               "another --port, e.g. 8080") from None
        raise StartupError(f"{where}: {exc.strerror or exc}") from None
    try:
        sock.listen(BACKLOG)    # claimed now: a second server's bind is refused from here on
    except OSError as exc:
        sock.close()
        raise StartupError(f"{where}: Address already in use (another server?): stop it, or choose another "
                           f"--port (--port 0 picks a free one) ({exc.strerror})") from None
    sock.set_inheritable(True)
    return sock


BACKLOG = 2048      # uvicorn's default


def check_redis(target: str | None) -> None:
    """A Redis store must answer now: a server that cannot reach its store refuses to start."""
    from llmsim.state.store import REDIS_SCHEMES, shown_store
    if not target or not target.startswith(REDIS_SCHEMES):
        return
    import redis
    client = redis.Redis.from_url(target, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise StartupError(f"the store {shown_store(target)} does not answer ({' '.join(str(exc).split())}): "
                           "start Redis there, or choose another --store") from None
    finally:
        client.close()


def banner(settings: Settings, port: int, temp_store: bool = False) -> None:
    """What is running, in a few lines on stderr: address, APIs, latency, store, workers."""
    from llmsim import datafiles
    from llmsim.api.apis import Apis
    from llmsim.state.store import shown_store
    apis = Apis.load(datafiles.OPENAPI_DIR, settings.spec_path)
    mounts = [f"openai at {', '.join(base or '/' for base in settings.base_paths)}",
              *(f"{doc.name} at {', '.join(dict.fromkeys(doc.own + doc.shared))}" for doc in apis.documents)]
    if settings.profile == "instant":
        latency = "none (--profile instant)"
    elif settings.profile or settings.ttft_ms is not None or settings.tbt_ms is not None:
        fixed = [f"{name} {value:g} ms" for name, value in (("ttft", settings.ttft_ms), ("gap", settings.tbt_ms))
                 if value is not None]
        latency = ", ".join([*([f"profile {settings.profile}"] if settings.profile else []), *fixed]) \
            + "; add --profile instant for no latency"
    else:
        latency = "each model's profile (seconds per answer); add --profile instant for no latency"
    store = "a temp LMDB store the workers share" if temp_store else shown_store(settings.store or "memory")
    workers = f"{settings.workers} worker{'s' if settings.workers > 1 else ''}"
    lines = [f"llmsim {__version__} serving {_url(settings.host, port)} ({workers}, {settings.server} server)",
             f"  APIs:    {'; '.join(mounts)}",
             f"  latency: {latency}",
             f"  store:   {store}"]
    print("\n".join(lines), file=sys.stderr, flush=True)


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


# a subcommand: (add its parser to the subparsers, run it with the parsed flags as a dict)
COMMANDS = {
    "serve": (_add_serve, _run_serve),
    "record": (_add_record, _run_record),
    "top": (_add_top, _run_top),
    "fleet": (_add_fleet, _run_fleet),
}


if __name__ == "__main__":
    sys.exit(main())
