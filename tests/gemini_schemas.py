"""Google's Gemini API shapes, as openapi/gemini.yaml writes them from Google's published REST
reference (GenerateContentResponse, Candidate, UsageMetadata, CountTokensResponse and the error
envelope; closed objects, so a field Google does not document fails). `validate(name, value)`
raises jsonschema.ValidationError. Departures from the reference: openapi/departures.yaml
(entries with `api: gemini`)."""
from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml
from jsonschema import Draft4Validator

SPEC_PATH = Path(__file__).resolve().parents[1] / "openapi" / "gemini.yaml"


@cache
def _validator(name: str) -> Draft4Validator:
    doc = yaml.safe_load(SPEC_PATH.read_text())
    return Draft4Validator({"$ref": f"#/components/schemas/{name}", "components": doc["components"]})


def validate(name: str, value) -> None:
    _validator(name).validate(value)
