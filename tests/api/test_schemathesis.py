"""Property-based checks of our OpenAPI document against the app, in-process (schemathesis).

Generated requests, valid and invalid, must get a documented status and content type, a body
that matches the document (our ResponseObject, ErrorEnvelope...), never a 500, and schema-valid
requests must not be rejected. Two apps: the catalogue as shipped (random model names mostly
get 404 model_not_found, so this exercises validation), and one that answers for any model
name, on the POST operations (so generated bodies go through planning and rendering too).
"""
from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

import schemathesis_hooks  # noqa: F401  registers the before_call hook: the cross-field rules
from llmsim.app import create_app
from llmsim.settings import Settings

pytestmark = pytest.mark.slow

EXAMPLES = 20


def load(*, coverage: bool, **overrides):
    """The app's document, as schemathesis sees it. The coverage phase (boundary values and
    every kind of invalid value, field by field; a few thousand requests) runs once, on the
    catalogue app; both apps get `EXAMPLES` random bodies per operation."""
    app = create_app(Settings(profile="instant", target_tokens=20, **overrides))
    config = schemathesis.Config.from_dict({"phases": {"coverage": {"enabled": coverage},
                                                       "stateful": {"enabled": False}}})
    return schemathesis.openapi.from_asgi("/openai/v1/openapi.json", app, config=config)


# Operations whose document says some required fields are checked by the handler (per message
# role, per content part type): valid-looking bodies may get a documented 400 there, so the
# "valid requests are accepted" check does not apply. Every other check still does.
HANDLER_CHECKED = {("POST", "/chat/completions")}


def call_and_validate(case) -> None:
    """Valid bodies are first adjusted to the rules between fields that a schema cannot state
    (tests/schemathesis_hooks.py, shared with the live run of tests/schemathesis_live.sh)."""
    excluded = [positive_data_acceptance] if (case.method.upper(), case.path) in HANDLER_CHECKED else []
    case.call_and_validate(excluded_checks=excluded)


# Built at collection: schemathesis' fixture-based (lazy) integration reaches into pytest
# internals that pytest 9.2 removed, the direct one does not.
catalogue = load(coverage=True)
any_model = load(coverage=False, allow_any_model=True).include(method="POST")
hypothesis_settings = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                               suppress_health_check=list(HealthCheck))


@catalogue.parametrize()
@hypothesis_settings
def test_catalogue_app_conforms_to_our_document(case):
    call_and_validate(case)


@any_model.parametrize()
@hypothesis_settings
def test_any_model_app_conforms_to_our_document(case):
    call_and_validate(case)


# The Gemini document (openapi/gemini.yaml, served at /v1beta/openapi.json) on an app that answers
# for any model name (the catalogue's are rarely generated). Its coverage phase runs against the
# live server (tests/schemathesis_live.sh), not here: it would double this module's time.
gemini = schemathesis.openapi.from_asgi(
    "/v1beta/openapi.json", create_app(Settings(profile="instant", target_tokens=20, allow_any_model=True)),
    config=schemathesis.Config.from_dict({"phases": {"coverage": {"enabled": False},
                                                     "stateful": {"enabled": False}}}))


@gemini.parametrize()
@hypothesis_settings
def test_gemini_app_conforms_to_its_document(case):
    call_and_validate(case)
