"""Property-based checks of openapi/anthropic.yaml against the app, in-process (schemathesis), as
tests/api/test_schemathesis.py does for the OpenAI document: generated requests, valid and invalid,
get a documented status and content type, a body that matches the document (Anthropic's error
envelope for every error), never a 500, and schema-valid requests are accepted. Two apps: the
catalogue as shipped, and one that answers for any model name (POST operations)."""
from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

import schemathesis_hooks  # noqa: F401  registers the before_call hook: the cross-field rules
from llmsim.app import create_app
from llmsim.settings import Settings

pytestmark = pytest.mark.slow

EXAMPLES = 20


def load(*, coverage: bool, **overrides):
    app = create_app(Settings(profile="instant", target_tokens=20, **overrides))
    config = schemathesis.Config.from_dict({"phases": {"coverage": {"enabled": coverage},
                                                       "stateful": {"enabled": False}}})
    return schemathesis.openapi.from_asgi("/anthropic/v1/openapi.json", app, config=config)


catalogue = load(coverage=True)
any_model = load(coverage=False, allow_any_model=True).include(method="POST")
hypothesis_settings = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                               suppress_health_check=list(HealthCheck))


@catalogue.parametrize()
@hypothesis_settings
def test_catalogue_app_conforms_to_the_anthropic_document(case):
    case.call_and_validate()


@any_model.parametrize()
@hypothesis_settings
def test_any_model_app_conforms_to_the_anthropic_document(case):
    case.call_and_validate()
