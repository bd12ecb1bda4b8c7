"""Load YAML data files and check them against their JSON Schema, once, at start-up.

Errors name the file, the path inside it and what would fix it, so that a typo in a
template or a config file fails `create_app` with a readable message instead of the
first request.
"""
from __future__ import annotations

from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from llmsim.errors import ConfigError

# Installed files, found through the package (a wheel, an editable install or a checkout alike).
# `_templates` and `_openapi` are symlinks to the repository's top-level templates/ and openapi/,
# the source; wheels and sdists carry their files as package data.
PACKAGE_DIR = Path(str(files("llmsim")))
DATA_DIR = PACKAGE_DIR / "data"
SCHEMA_DIR = PACKAGE_DIR / "schemas"
TEMPLATES_DIR = PACKAGE_DIR / "_templates"
OPENAPI_DIR = PACKAGE_DIR / "_openapi"


def read_yaml(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None


@cache
def _validator(schema_name: str) -> jsonschema.protocols.Validator:
    schema = read_yaml(SCHEMA_DIR / f"{schema_name}.yaml")
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def describe_path(path) -> str:
    parts = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
    return parts.lstrip(".") or "(top level)"


def check(data: Any, schema_name: str, source: str) -> Any:
    """Validate `data` against `llmsim/schemas/<schema_name>.yaml`; raise ConfigError naming `source`."""
    error = jsonschema.exceptions.best_match(_validator(schema_name).iter_errors(data))
    if error is not None:
        hint = error.schema.get("description") if isinstance(error.schema, dict) else None
        fix = f" (expected: {hint})" if hint else ""
        where = describe_path(error.absolute_path)
        exc = ConfigError(f"{source}: at {where}: {error.message}{fix}")
        exc.where = where           # the key path, for an API error's `param`
        raise exc
    return data


def schema(schema_name: str) -> dict:
    """The schema `llmsim/schemas/<schema_name>.yaml`, as read."""
    return _validator(schema_name).schema


def load(path: Path, schema_name: str) -> Any:
    """Read a YAML file and validate it against the named schema."""
    return check(read_yaml(path), schema_name, str(path))
