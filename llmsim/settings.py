"""The one frozen `Settings` object and the only reader of `LLMSIM_*` environment variables.

Precedence, lowest first: built-in defaults, the YAML config file (`--config` /
`LLMSIM_CONFIG`), `LLMSIM_<NAME>` environment variables, command-line flags. Every source
is checked against `schemas/config.yaml`; a bad value raises ConfigError naming the key,
where it came from and what is allowed.
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping

import yaml

from llmsim import datafiles
from llmsim.errors import ConfigError

ENV_PREFIX = "LLMSIM_"


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8080
    config: str | None = None
    profile: str | None = None          # force one latency profile for every model
    ttft_ms: float | None = None        # force a fixed time to first token
    tbt_ms: float | None = None         # force a fixed gap between tokens
    target_tokens: int = 100
    seed: int | None = None
    templates: str | None = None        # override directory of templates
    spec: str | None = None             # override OpenAPI document
    log_level: str = "info"
    generator: str = "lorem"
    fixed_text: str = "This is a simulated response."
    allow_any_model: bool = False
    usage_semantics: str | None = None  # alias of compat's usage arithmetic; when set, it wins
    keepalive_ms: float | None = None
    tool_call_probability: float = 0.5
    metrics: bool = True                # live stats (/llmsim/stats, /metrics); off: headers only
    trace: str | None = None            # JSONL file, one line per request: intended vs actual
    log_format: str = "off"             # access log on stderr: off | text | json
    stats_dir: str | None = None        # where --workers share stats snapshots (serve sets one)
    ws_max_age_s: float = 3600.0        # Responses WebSocket: close connections older than this
    ws_max_connections: int = 1000      # Responses WebSocket: refuse upgrades beyond this many
    errors: dict | None = None          # fault kind -> probability per request (llmsim.faults.catalogue)
    fault_schedule: list | None = None  # scheduled faults: [{kind, count, every, ...}]
    api_keys: list | None = None        # accepted `Authorization: Bearer` keys (config: auth.api_keys)
    max_body_bytes: int = 33554432      # larger request bodies get 413
    store: str | None = None            # memory, lmdb:DIR, SQLite path or redis:// URL (None: memory;
                                        # serve --workers N: a temp LMDB store)
    store_max_entries: int = 10000      # stored responses (and conversations) kept
    store_ttl_s: float | None = 3600.0  # seconds a stored entry lives after its last write
    workers: int = 1                    # server processes sharing the port
    reuse_port: bool = True             # --workers: each worker on its own SO_REUSEPORT socket
    pin_workers: bool = True            # --workers: each worker on a CPU of its own (llmsim.server.affinity)
    data: str | None = None             # directory whose models/profiles/faults/reasoning/ids.yaml override ours
    server: str = "tuned"               # tuned | plain: stock uvicorn and connexion (llmsim.server.versions)
    compat: str = "llmsim"              # llmsim (the product spec) | openai: where the two differ |
                                        # vllm: openai plus vLLM's extras (llmsim.sim.vllm, openapi/vllm.yaml)
    responses_done: bool = False        # end Responses SSE streams with `data: [DONE]`
    base_paths: tuple = ("/openai/v1", "/v1")   # where the API document's routes are mounted ("": bare)

    webhook_urls: list | None = None    # where background responses' webhook events go (llmsim.state.webhooks)
    webhook_secret: str | None = None   # whsec_<base64 key>: signs them (Standard Webhooks)
    webhook_attempts: int = 5           # tries per delivery before it is dropped
    webhook_backoff_s: float = 0.5      # first retry's wait; it doubles each retry (capped)
    webhook_faults: dict | None = None  # {delay_ms: N, duplicate: probability}
    replay: str | None = None           # directory of fixtures (llmsim record --out) answering matching requests
    replay_speed: float = 1.0           # recorded times divided by this (0: no waiting)
    replay_strict: bool = False         # a request no fixture matches gets a 404 instead of a simulated answer

    scenarios: str | None = None        # scenario file: scripted turns and rules (llmsim.sim.scenarios)
    default_scenario: str | None = None  # the scenario a request naming none plays

    # the serving model (llmsim.state.serving); None: as the model's profile says (off unless it says)
    max_concurrency: int | None = None  # requests a model answers at once, per process
    max_queue: int | None = None        # requests waiting for a slot beyond which 429 (None: no cap)
    prefill_ms_per_token: float | None = None   # TTFT += this per uncached input token
    load_slowdown: float | None = None  # the gap's factor with every slot busy (1: none)
    prefix_cache: bool | None = None    # hash input token blocks: cached_tokens, shorter prefill
    prefix_block_tokens: int = 16       # tokens per cached block
    prefix_cache_blocks: int = 65536    # blocks kept per model (least recently used out)

    admin_key: str | None = None        # needed by llmsim's own routes that change behaviour (llmsim.api.guard)
    protect_stats: bool = False         # their read-only routes need a key too
    store_max_bytes: int | None = None  # LMDB / SQLite store: the file's largest size (full: 503s)
    graceful_timeout_s: float | None = None     # SIGTERM: streams in flight may finish for this long

    rate_limit_rpm: int | None = None   # requests per minute, every (API key, model) (llmsim.state.ratelimits)
    rate_limit_tpm: int | None = None   # tokens per minute, every (API key, model)
    rate_limits: dict | None = None     # {default: {rpm, tpm}, models: {NAME: ...}, keys: {KEY: ...}}

    store_evict_when_full: bool = True  # a full LMDB / SQLite store evicts its oldest entries, then writes
    background_lease_s: float = 10.0    # a background response whose process renewed no lease for this long
                                        # (or is gone from this machine) is marked failed (llmsim.state.background)
    header_timeout_s: float | None = 10.0   # a connection's request head must arrive within this (else closed)
    body_timeout_s: float | None = 30.0     # a request's body must arrive within this after its head (else 408)
    max_connections: int | None = None  # connections with a request or WebSocket open, per process, beyond which 503

    @property
    def usage(self) -> str:
        """The usage arithmetic (llmsim or openai): `usage_semantics` when set, else `compat`'s
        (vllm counts as OpenAI does)."""
        return self.usage_semantics or ("openai" if self.compat == "vllm" else self.compat)

    @property
    def templates_dir(self) -> Path:
        return Path(self.templates) if self.templates else datafiles.TEMPLATES_DIR

    def data_file(self, name: str) -> Path:
        """The data file `name` (e.g. models.yaml): the --data directory's, when it has one, else ours."""
        if self.data:
            path = Path(self.data) / name
            if path.is_file():
                return path
        return datafiles.DATA_DIR / name

    @property
    def spec_path(self) -> Path:
        return Path(self.spec) if self.spec else datafiles.OPENAPI_DIR / "openapi.yaml"

    def replace(self, **changes: Any) -> "Settings":
        return build(self, changes, "arguments")

    @classmethod
    def load(cls, cli: Mapping[str, Any] | None = None,
             environ: Mapping[str, str] | None = None) -> "Settings":
        """Merge defaults, config file, environment and CLI values (later wins)."""
        environ = os.environ if environ is None else environ
        cli = {k: v for k, v in (cli or {}).items() if v is not None}
        env = _from_environ(environ)
        config_path = cli.get("config") or env.get("config")
        settings = cls()
        if config_path:
            settings = build(settings, _read_config(Path(config_path)), f"config file {config_path}")
        settings = build(settings, env, "environment")
        return build(settings, cli, "command line")


NAMES = tuple(f.name for f in fields(Settings))


def build(base: Settings, values: Mapping[str, Any], source: str) -> Settings:
    unknown = sorted(set(values) - set(NAMES))
    if unknown:
        raise ConfigError(f"{source}: unknown setting {unknown[0]!r}; known settings: {', '.join(NAMES)}")
    datafiles.check(dict(values), "config", source)
    return dataclasses.replace(base, **values)


def _from_environ(environ: Mapping[str, str]) -> dict[str, Any]:
    values = {}
    for name in NAMES:
        raw = environ.get(ENV_PREFIX + name.upper())
        if raw is None:
            continue
        try:
            values[name] = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            values[name] = raw
        if isinstance(values[name], (int, float, bool)) and name in ("host", "fixed_text", "config",
                                                                  "templates", "spec", "profile", "store",
                                                                  "trace", "stats_dir", "log_format", "data",
                                                                  "webhook_secret", "scenarios",
                                                                  "default_scenario", "admin_key"):
            values[name] = raw
        if name in ("api_keys", "webhook_urls") and isinstance(values[name], str):   # LLMSIM_API_KEYS=k1,k2
            values[name] = [key.strip() for key in values[name].split(",") if key.strip()]
    return values


def _read_config(path: Path) -> dict[str, Any]:
    doc = datafiles.read_yaml(path) or {}
    if not isinstance(doc, dict):
        raise ConfigError(f"config file {path}: expected a mapping of setting names to values")
    auth = doc.pop("auth", None)    # `auth: {api_keys: [...]}` is another spelling of `api_keys`
    if auth is not None:
        if not isinstance(auth, dict) or set(auth) - {"api_keys"}:
            raise ConfigError(f"config file {path}: at auth: expected a mapping with the key api_keys")
        doc["api_keys"] = auth.get("api_keys")
    return {key.replace("-", "_"): value for key, value in doc.items()}


WORKER_ENV = ENV_PREFIX + "WORKER_SETTINGS"     # not a setting: how `serve` hands settings over


def to_worker_environ(settings: Settings) -> dict[str, str]:
    """Environment for `--workers` processes: every setting, as one JSON value."""
    return {WORKER_ENV: json.dumps(dataclasses.asdict(settings))}


def for_worker(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings `serve` handed over (see `to_worker_environ`)."""
    environ = os.environ if environ is None else environ
    return Settings(**json.loads(environ[WORKER_ENV]))
