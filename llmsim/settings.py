"""The one frozen `Settings` object and the only reader of `LLMSIM_*` environment variables.

`schemas/config.yaml` is the one source of every setting: its name, group, default, help and
allowed values. `Settings` holds the typed values (its defaults read from the schema); the
`serve` flags (llmsim.cli), the environment parsing here and docs/configuration.md's tables
(`python -m llmsim.settings docs/configuration.md`) are built from it.
Precedence, lowest first: defaults, the YAML config file (`--config` / `LLMSIM_CONFIG`),
`LLMSIM_<NAME>` environment variables, command-line flags. Every source is checked against
the schema; a bad value, an unknown key or an unknown `LLMSIM_*` variable raises ConfigError
naming it, where it came from and what is allowed (or the closest name).
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
import sys
from functools import cached_property
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping

import yaml

from llmsim import datafiles
from llmsim.errors import ConfigError

ENV_PREFIX = "LLMSIM_"
SCHEMA = datafiles.schema("config")
PROPERTIES: dict[str, dict] = SCHEMA["properties"]
GROUPS: dict[str, str] = SCHEMA["groups"]       # group -> its title, in --help's order
REFERENCE = "docs/configuration.md"             # where every setting is listed


def types_of(name: str) -> set[str]:
    """The JSON types a setting accepts ("string", "integer", ...), from its type or enum."""
    spec = PROPERTIES[name]
    if "enum" in spec:
        return {_json_type(value) for value in spec["enum"]}
    kind = spec.get("type", [])
    return {kind} if isinstance(kind, str) else set(kind)


def _json_type(value: Any) -> str:
    for kind, name in ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
                       (dict, "object"), (list, "array"), (type(None), "null")):
        if isinstance(value, kind):
            return name
    return "object"


def repeatable(name: str) -> bool:
    """A list of strings: its flag is given once per item, its variable is comma-separated."""
    return "array" in types_of(name) and PROPERTIES[name].get("items", {}).get("type") == "string"


def default(name: str) -> Any:
    """The schema's default, typed as `Settings` holds it (a number as float, a list as tuple)."""
    value = PROPERTIES[name].get("default")
    if isinstance(value, int) and not isinstance(value, bool) and "integer" not in types_of(name):
        return float(value)
    return tuple(value) if isinstance(value, list) else value


@dataclass(frozen=True)
class Settings:
    """Every setting, typed; what each means, its default and allowed values: schemas/config.yaml."""
    # server
    host: str = default("host")
    port: int = default("port")
    config: str | None = default("config")
    workers: int = default("workers")
    server: str = default("server")                 # tuned | plain (llmsim.server.versions)
    reuse_port: bool = default("reuse_port")
    pin_workers: bool = default("pin_workers")
    base_paths: tuple = default("base_paths")       # "": the API's routes without a prefix
    templates: str | None = default("templates")
    spec: str | None = default("spec")
    data: str | None = default("data")
    compat: str = default("compat")
    usage_semantics: str | None = default("usage_semantics")   # when set, it wins over compat's
    responses_done: bool = default("responses_done")
    allow_any_model: bool = default("allow_any_model")
    api_keys: list | None = default("api_keys")
    admin_key: str | None = default("admin_key")
    protect_stats: bool = default("protect_stats")
    graceful_timeout_s: float | None = default("graceful_timeout_s")
    # store
    store: str | None = default("store")            # None: memory (serve --workers N: a temp LMDB store)
    store_max_entries: int = default("store_max_entries")
    store_ttl_s: float | None = default("store_ttl_s")
    store_max_bytes: int | None = default("store_max_bytes")
    store_evict_when_full: bool = default("store_evict_when_full")
    background_lease_s: float = default("background_lease_s")
    # latency and serving
    profile: str | None = default("profile")
    ttft_ms: float | None = default("ttft_ms")
    tbt_ms: float | None = default("tbt_ms")
    target_tokens: int = default("target_tokens")
    seed: int | None = default("seed")
    generator: str = default("generator")
    fixed_text: str = default("fixed_text")
    keepalive_ms: float | None = default("keepalive_ms")
    tool_call_probability: float = default("tool_call_probability")
    max_concurrency: int | None = default("max_concurrency")   # None: as the model's profile says
    max_queue: int | None = default("max_queue")
    prefill_ms_per_token: float | None = default("prefill_ms_per_token")
    load_slowdown: float | None = default("load_slowdown")
    prefix_cache: bool | None = default("prefix_cache")
    prefix_block_tokens: int = default("prefix_block_tokens")
    prefix_cache_blocks: int = default("prefix_cache_blocks")
    scenarios: str | None = default("scenarios")
    default_scenario: str | None = default("default_scenario")
    replay: str | None = default("replay")
    replay_speed: float = default("replay_speed")
    replay_strict: bool = default("replay_strict")
    # faults
    errors: dict | None = default("errors")
    fault_schedule: list | None = default("fault_schedule")
    # limits
    rate_limit_rpm: int | None = default("rate_limit_rpm")
    rate_limit_tpm: int | None = default("rate_limit_tpm")
    rate_limits: dict | None = default("rate_limits")
    max_body_bytes: int = default("max_body_bytes")
    max_connections: int | None = default("max_connections")
    header_timeout_s: float | None = default("header_timeout_s")
    body_timeout_s: float | None = default("body_timeout_s")
    ws_max_age_s: float = default("ws_max_age_s")
    ws_max_connections: int = default("ws_max_connections")
    # webhooks
    webhook_urls: list | None = default("webhook_urls")
    webhook_secret: str | None = default("webhook_secret")
    webhook_attempts: int = default("webhook_attempts")
    webhook_backoff_s: float = default("webhook_backoff_s")
    webhook_faults: dict | None = default("webhook_faults")
    # observability
    log_level: str = default("log_level")
    log_format: str = default("log_format")
    metrics: bool = default("metrics")
    trace: str | None = default("trace")
    stats_dir: str | None = default("stats_dir")
    otlp_endpoint: str | None = default("otlp_endpoint")
    # a fleet's backends (llmsim.fleet)
    served_models: list | None = default("served_models")
    instance_id: str | None = default("instance_id")
    latency_factor: float = default("latency_factor")

    # a fleet's backends (llmsim.fleet); each is also a setting of its own for `llmsim serve`
    served_models: list | None = None   # the model ids answered (others: 404 model_not_found); None: all
    instance_id: str | None = None      # this server's name in a fleet (its backend's, e.g. fast-0)
    latency_factor: float = 1.0         # every latency (TTFT, gaps) multiplied by this (a `slow` outage)

    @cached_property
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
ALIASES = {alias: name for name in NAMES for alias in PROPERTIES[name].get("aliases", ())}
# LLMSIM_* variables that are not settings: how `serve` hands settings to its workers, and the
# path of OpenAI's published document for llmsim's own tests (tests/oai_schemas.py)
NOT_SETTINGS = frozenset({"WORKER_SETTINGS", "OPENAI_SPEC"})


def closest(word: str, known) -> str | None:
    """The known name nearest to a mistyped `word`, if one is near enough."""
    found = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return found[0] if found else None


def canonical(values: Mapping[str, Any], source: str) -> dict[str, Any]:
    """`values` under their settings' own names (aliases resolved); an unknown key raises
    ConfigError naming the closest setting."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = key if key in PROPERTIES else ALIASES.get(key)
        if name is None:
            near = closest(key, [*NAMES, *ALIASES])
            hint = f"did you mean {near!r}?" if near else f"{REFERENCE} lists every setting"
            raise ConfigError(f"{source}: unknown setting {key!r}; {hint}")
        if name in out:
            raise ConfigError(f"{source}: {name!r} is set twice (also as {key!r}); keep one")
        out[name] = value
    return out


def build(base: Settings, values: Mapping[str, Any], source: str) -> Settings:
    values = canonical(values, source)
    datafiles.check(values, "config", source)
    return dataclasses.replace(base, **values)


def env_name(name: str) -> str:
    return ENV_PREFIX + name.upper()


def _from_environ(environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings among `LLMSIM_*` variables, read as YAML; an unknown one raises ConfigError
    (`LLMSIM_API_KEY=...` must not start a server without authentication)."""
    values = {}
    for var, raw in environ.items():
        if not var.startswith(ENV_PREFIX) or var[len(ENV_PREFIX):] in NOT_SETTINGS:
            continue
        key = var[len(ENV_PREFIX):].lower()
        name = key if key in PROPERTIES else ALIASES.get(key)
        if name is None or var != ENV_PREFIX + key.upper():
            near = closest(key, [*NAMES, *ALIASES])
            hint = f"did you mean {env_name(near)}?" if near else f"{REFERENCE} lists every setting"
            raise ConfigError(f"environment: unknown variable {var}; {hint}")
        if name in values:
            raise ConfigError(f"environment: {env_name(name)} is set twice (also as {var}); keep one")
        values[name] = _env_value(name, raw)
    return values


def _env_value(name: str, raw: str) -> Any:
    if not raw.strip():
        return None
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        value = raw
    if "string" in types_of(name) and isinstance(value, (bool, int, float)):
        value = raw                 # LLMSIM_FIXED_TEXT=42, LLMSIM_LOG_FORMAT=off: the text
    if repeatable(name) and isinstance(value, str):     # LLMSIM_API_KEYS=k1,k2
        value = [item.strip() for item in value.split(",") if item.strip()]
    return value


def _read_config(path: Path) -> dict[str, Any]:
    return config_values(datafiles.read_yaml(path) or {}, f"config file {path}")


def config_values(doc: Any, source: str) -> dict[str, Any]:
    """A config file's mapping (or a fleet backend's `settings:`) as setting names and values."""
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: expected a mapping of setting names to values")
    doc = dict(doc)
    auth = doc.pop("auth", None)    # `auth: {api_keys: [...]}` is another spelling of `api_keys`
    if auth is not None:
        if not isinstance(auth, dict) or set(auth) - {"api_keys"}:
            raise ConfigError(f"{source}: at auth: expected a mapping with the key api_keys")
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


# ---- the reference: flags and docs/configuration.md's tables, built from the schema ----------
def flags(name: str) -> list[str]:
    """The setting's flags: `--<name with dashes>` (or the schema's `flag`), then its aliases'."""
    spec = PROPERTIES[name]
    return [spec.get("flag") or _dashed(name), *(_dashed(alias) for alias in spec.get("aliases", ()))]


def _dashed(name: str) -> str:
    return "--" + name.replace("_", "-")


def shown_default(name: str) -> str:
    """The default as the docs and --help show it."""
    spec = PROPERTIES[name]
    if "default_text" in spec:
        return spec["default_text"]
    value = spec.get("default")
    if value is None:
        return "none"
    if isinstance(value, str):
        return f"`{value}`"
    return f"`{yaml.safe_dump(value, default_flow_style=True, width=1000).removesuffix(chr(10)).removesuffix('...').strip()}`"


def _reference_row(name: str) -> str:
    spec = PROPERTIES[name]
    boolean = "boolean" in types_of(name)
    first, *others = flags(name)
    flag = f"`{first}` / `--no-{first[2:]}`" if boolean else f"`{first} {spec.get('metavar', 'X')}`"
    flag += " (repeatable)" if repeatable(name) else ""
    flag += "".join(f" or `{other}`" for other in others)
    env = f"`{env_name(name)}`" + (" (comma-separated)" if repeatable(name) else "")
    env += "".join(f" or `{env_name(alias)}`" for alias in spec.get("aliases", ()))
    key = "—" if name == "config" else f"`{name}`" + "".join(f" or `{a}`" for a in spec.get("aliases", ()))
    return f"| {flag} | {env} | {key} | {shown_default(name)} | {' '.join(spec['help'].split())} |"


def reference() -> str:
    """docs/configuration.md's tables: one per group, a row per setting."""
    lines = []
    for group, title in GROUPS.items():
        lines += [f"### {title}", "", "| flag | environment | config key | default | meaning |",
                  "|---|---|---|---|---|"]
        lines += [_reference_row(name) for name, spec in PROPERTIES.items() if spec["group"] == group]
        lines.append("")
    return "\n".join(lines)


BEGIN, END = "<!-- settings: built from llmsim/schemas/config.yaml by `python -m llmsim.settings` -->", \
    "<!-- end of settings -->"


def rewrite_reference(path: Path) -> bool:
    """Put `reference()` between the markers of the page at `path`; whether it changed."""
    text = path.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    new = pattern.sub(lambda _: f"{BEGIN}\n\n{reference()}\n{END}", text)
    path.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":      # python -m llmsim.settings [docs/configuration.md]
    target = Path(sys.argv[1] if len(sys.argv) > 1 else REFERENCE)
    print(f"{target}: {'rewritten' if rewrite_reference(target) else 'already up to date'}")
