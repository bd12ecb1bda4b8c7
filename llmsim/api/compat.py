"""The OpenAI document as `--compat` says: with `vllm`, openapi/vllm.yaml's `x-llmsim-extends`
merged into its schemas (vLLM's extra request parameters), so the same validators (connexion's
and the fast lane's) accept them; otherwise the document as it is, OpenAI-strict. Read once at
start-up. `routes()` is the vLLM document itself (its own routes, mounted without a prefix),
or None without the setting.
"""
from __future__ import annotations

import copy
from pathlib import Path

from llmsim import datafiles
from llmsim.errors import ConfigError
from llmsim.settings import Settings

VLLM_DOCUMENT = datafiles.OPENAPI_DIR / "vllm.yaml"


def main_document(settings: Settings) -> dict:
    """The OpenAI document (settings.spec_path), extended for `--compat vllm`."""
    doc = datafiles.read_yaml(settings.spec_path)
    if settings.compat != "vllm":
        return doc
    doc = copy.deepcopy(doc)
    schemas = doc.get("components", {}).get("schemas", {})
    for name, extension in datafiles.read_yaml(VLLM_DOCUMENT)["x-llmsim-extends"].items():
        if name not in schemas:
            raise ConfigError(f"{VLLM_DOCUMENT}: x-llmsim-extends.{name}: no such schema in {settings.spec_path}")
        _merge(schemas[name], extension)
    return doc


def routes(settings: Settings) -> tuple[Path, dict] | None:
    """vLLM's own routes' document (and its path), with `--compat vllm`; else None."""
    if settings.compat != "vllm":
        return None
    doc = datafiles.read_yaml(VLLM_DOCUMENT)
    doc.pop("x-llmsim-extends", None)
    return VLLM_DOCUMENT, doc


def _merge(into: dict, extension: dict) -> None:
    """Mappings merged key by key (recursively); any other value replaces."""
    for key, value in extension.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)
