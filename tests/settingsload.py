"""Settings as `llmsim serve` builds them from a command line, an environment and a config
file, for tests that check how a setting is read (tests/config/test_settings.py and others)."""
from __future__ import annotations

import yaml

from llmsim.cli import parser
from llmsim.settings import Settings


def load(argv=(), environ=None) -> Settings:
    """Settings as `llmsim serve ARGV` would build them, with exactly `environ` as environment."""
    args = vars(parser().parse_args(["serve", *argv]))
    args.pop("command")
    return Settings.load(args, environ or {})


def write_config(tmp_path, values: dict):
    path = tmp_path / "llmsim.yaml"
    path.write_text(yaml.safe_dump(values))
    return str(path)
