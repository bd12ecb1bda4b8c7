"""Settings: defaults, LLMSIM_* environment, YAML config file and CLI flags, with precedence
config < environment < command line; bad values fail start-up naming the key and what is allowed."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import fields

import pytest

from conftest import REPO
from llmsim import datafiles
from llmsim.cli import parser
from llmsim.errors import ConfigError
from llmsim.settings import Settings
from settingsload import load, write_config


def test_embedded_defaults():
    s = load()
    assert (s.host, s.port, s.target_tokens, s.generator, s.profile, s.seed) == \
        ("127.0.0.1", 8080, 100, "lorem", None, None)
    assert (s.ttft_ms, s.tbt_ms, s.usage, s.allow_any_model) == (None, None, "llmsim", False)
    assert (s.compat, s.responses_done, list(s.base_paths)) == ("llmsim", False, ["/openai/v1", "/v1"])


def test_cli_flags_set_settings():
    s = load(["--port", "9001", "--ttft-ms", "200", "--tbt-ms", "20", "--target-tokens", "50",
              "--seed", "7", "--profile", "instant", "--generator", "echo", "--allow-any-model",
              "--usage-semantics", "openai"])
    assert (s.port, s.ttft_ms, s.tbt_ms, s.target_tokens, s.seed, s.profile, s.generator,
            s.allow_any_model, s.usage_semantics) == (9001, 200, 20, 50, 7, "instant", "echo", True, "openai")


def test_environment_variables_set_settings_with_their_types():
    s = load(environ={"LLMSIM_PORT": "9002", "LLMSIM_TTFT_MS": "12.5", "LLMSIM_ALLOW_ANY_MODEL": "true",
                      "LLMSIM_FIXED_TEXT": "42", "LLMSIM_HOST": "0.0.0.0"})
    assert (s.port, s.ttft_ms, s.allow_any_model, s.fixed_text, s.host) == (9002, 12.5, True, "42", "0.0.0.0")


def test_config_file_sets_settings(tmp_path):
    path = write_config(tmp_path, {"target_tokens": 12, "generator": "sequence", "tbt-ms": 3})
    s = load(["--config", path])
    assert (s.target_tokens, s.generator, s.tbt_ms) == (12, "sequence", 3)


def test_config_file_can_be_named_by_the_environment(tmp_path):
    path = write_config(tmp_path, {"target_tokens": 13})
    assert load(environ={"LLMSIM_CONFIG": path}).target_tokens == 13


def test_environment_beats_config_file(tmp_path):
    path = write_config(tmp_path, {"target_tokens": 12, "seed": 1})
    s = load(["--config", path], {"LLMSIM_TARGET_TOKENS": "34"})
    assert (s.target_tokens, s.seed) == (34, 1)


def test_command_line_beats_environment_and_config_file(tmp_path):
    path = write_config(tmp_path, {"target_tokens": 12, "generator": "echo", "seed": 1})
    s = load(["--config", path, "--target-tokens", "56"], {"LLMSIM_TARGET_TOKENS": "34",
                                                             "LLMSIM_GENERATOR": "random"})
    assert (s.target_tokens, s.generator, s.seed) == (56, "random", 1)


def test_every_setting_has_a_flag_and_a_config_schema_entry():
    """The three spellings stay in step: Settings field == CLI dest == config key."""
    dests = set(vars(parser().parse_args(["serve"]))) - {"command"}
    schema = set(datafiles.read_yaml(datafiles.SCHEMA_DIR / "config.yaml")["properties"])
    names = {f.name for f in fields(Settings)}
    assert names - dests == set(), "settings without a CLI flag"
    assert dests - names == set(), "CLI flags without a setting"
    assert names - schema == set(), "settings missing from schemas/config.yaml"


def test_the_schema_gives_every_setting_its_group_help_and_default():
    """Settings' fields are the schema's properties; their defaults are the schema's."""
    from llmsim import settings as schema
    names = [f.name for f in fields(Settings)]
    assert sorted(names) == sorted(schema.PROPERTIES)
    for field in fields(Settings):
        spec = schema.PROPERTIES[field.name]
        assert spec["group"] in schema.GROUPS and spec["help"], field.name
        assert field.default == schema.default(field.name), field.name
    assert list(schema.GROUPS) == ["server", "store", "latency and serving", "faults", "limits", "webhooks",
                                   "observability"]


def test_help_is_grouped_as_the_schema_groups_settings():
    from llmsim import settings as schema
    text = " ".join(parser().commands["serve"].format_help().split())
    positions = [text.index(title + ":") for title in schema.GROUPS.values()]
    assert positions == sorted(positions)
    assert "--store URL" in text and "(default: 10000)" in text


@pytest.mark.parametrize("argv, environ, config", [
    (["--graceful-timeout", "5"], {}, {}),
    (["--graceful-timeout-s", "5"], {}, {}),
    ([], {"LLMSIM_GRACEFUL_TIMEOUT": "5"}, {}),
    ([], {"LLMSIM_GRACEFUL_TIMEOUT_S": "5"}, {}),
    ([], {}, {"graceful_timeout": 5}),
    ([], {}, {"graceful_timeout_s": 5}),
])
def test_the_timeouts_take_both_spellings_everywhere(tmp_path, argv, environ, config):
    if config:
        argv = [*argv, "--config", write_config(tmp_path, config)]
    assert load(argv, environ).graceful_timeout_s == 5


@pytest.mark.parametrize("environ, message", [
    ({"LLMSIM_API_KEY": "sk-x"}, "environment: unknown variable LLMSIM_API_KEY; did you mean LLMSIM_API_KEYS?"),
    ({"LLMSIM_PROFLE": "instant"}, "did you mean LLMSIM_PROFILE?"),
    ({"LLMSIM_COLOUR": "blue"}, "docs/configuration.md lists every setting"),
])
def test_an_unknown_llmsim_variable_stops_start_up_naming_the_closest(environ, message):
    with pytest.raises(ConfigError, match=message.replace("?", r"\?")):
        load(environ=environ)


def test_variables_that_are_not_settings_are_left_alone():
    assert load(environ={"LLMSIM_OPENAI_SPEC": "/x.yaml", "LLMSIM_WORKER_SETTINGS": "{}"}).port == 8080


@pytest.mark.parametrize("values, key, allowed", [
    ({"generator": "shakespeare"}, "generator", "lorem, echo, fixed, random, sequence"),
    ({"port": 70000}, "port", "0-65535"),
    ({"target_tokens": -5}, "target_tokens", "0-1000000"),
    ({"usage_semantics": "mine"}, "usage_semantics", "openai"),
    ({"log_level": "loud"}, "log_level", "critical, error, warning, info, debug, trace"),
    ({"colour": "blue"}, "colour", "docs/configuration.md lists every setting"),
    ({"sed": 4}, "sed", "did you mean 'seed'?"),
])
def test_bad_config_value_names_key_and_what_is_allowed(tmp_path, values, key, allowed):
    with pytest.raises(ConfigError) as caught:
        load(["--config", write_config(tmp_path, values)])
    assert key in str(caught.value) and allowed in str(caught.value)
    assert "llmsim.yaml" in str(caught.value)


def test_bad_environment_value_names_the_environment():
    with pytest.raises(ConfigError) as caught:
        load(environ={"LLMSIM_TTFT_MS": "-3"})
    assert "environment" in str(caught.value) and "ttft_ms" in str(caught.value)


def serve(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmsim", "serve", "--port", "0", *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.live
def test_serve_with_a_bad_config_file_exits_naming_the_key(tmp_path):
    result = serve("--config", write_config(tmp_path, {"generator": "shakespeare"}))
    assert result.returncode != 0
    assert "generator" in result.stderr and "lorem, echo, fixed, random, sequence" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.live
def test_serve_with_a_bad_environment_value_exits_naming_the_key():
    import os
    result = serve(env={**os.environ, "LLMSIM_USAGE_SEMANTICS": "mine"})
    assert result.returncode != 0
    assert "usage_semantics" in result.stderr and "openai" in result.stderr


@pytest.mark.live
def test_serve_with_an_unknown_profile_exits_listing_the_profiles():
    result = serve("--profile", "warp-speed")
    assert result.returncode != 0
    assert "warp-speed" in result.stderr and "instant" in result.stderr and "gpt-4o" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.live
def test_serve_with_a_missing_config_file_exits_naming_it(tmp_path):
    result = serve("--config", str(tmp_path / "absent.yaml"))
    assert result.returncode != 0 and "absent.yaml" in result.stderr


@pytest.mark.skipif(not __import__("os").path.isdir("/dev/shm"), reason="no /dev/shm")
def test_workers_share_their_stats_through_memory_and_their_store_on_disk(tmp_path):
    """Stats snapshots are replaced four times a second: they live in tmpfs, never on a disk
    whose freed blocks are discarded; the store keeps to the scratch directory on disk."""
    from pathlib import Path

    from llmsim.cli import _memory_dir, _shared_paths
    settings = _shared_paths(Settings(workers=2), tmp_path, Path(_memory_dir()) / "x")
    assert settings.stats_dir.startswith("/dev/shm/")
    assert settings.store == f"lmdb:{tmp_path / 'store.lmdb'}"
