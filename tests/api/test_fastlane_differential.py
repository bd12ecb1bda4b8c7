"""The fast lane (llmsim.api.fastpath, the tuned server's) and connexion (`--server plain`)
answer alike: every schemathesis-generated request, valid or not and under any content
type, to the four JSON operations the fast lane serves, gets the same status, content type
and body from both. Both apps have the same `--seed` (ids and timestamps alike) and see the
same requests in the same order."""
from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmsim.api.fastpath import json_operations
from llmsim.app import create_app
from llmsim.clock import FakeClock
from llmsim.settings import Settings

pytestmark = pytest.mark.usefixtures("warm_caches")     # builds apps of its own

BASE = "/openai/v1"
# the operations the fast lane serves, as schemathesis names them
OPERATIONS = sorted(path.removeprefix(BASE) for path in
                    json_operations(Settings().spec_path, [BASE], lambda operation_id: None))
CONTENT_TYPES = [None, "application/json; charset=utf-8", "Application/JSON", "text/plain",
                 "application/x-www-form-urlencoded", ""]   # None: what schemathesis chose
EXAMPLES = 40


@pytest.fixture(scope="module")
def apps():
    """(fast lane, connexion): the tuned and the plain app, alike in every other setting."""
    def app(server: str):
        return create_app(Settings(profile="instant", seed=7, server=server), clock=FakeClock())
    return app("tuned"), app("plain")


@pytest.fixture(scope="module")
def schema(apps):
    return schemathesis.openapi.from_asgi(f"{BASE}/openapi.json", apps[0])


def answer(response) -> tuple[int, str | None, bytes]:
    return response.status_code, response.headers.get("content-type"), response.content


def test_the_fast_lane_serves_four_operations():
    assert OPERATIONS == ["/chat/completions", "/conversations", "/responses",
                          "/responses/input_tokens"]
    assert all(path.removeprefix(base) in OPERATIONS for base in Settings().base_paths
               for path in json_operations(Settings().spec_path, [base], lambda operation_id: None))


@pytest.mark.parametrize("path", OPERATIONS)
def test_the_fast_lane_and_connexion_answer_every_generated_request_alike(apps, schema, path):
    fast, plain = apps
    operation = schema[path]["POST"]
    cases = st.one_of(operation.as_strategy(schemathesis.GenerationMode.POSITIVE),
                      operation.as_strategy(schemathesis.GenerationMode.NEGATIVE))

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=cases, content_type=st.sampled_from(CONTENT_TYPES))
    def alike(case, content_type):
        headers = None if content_type is None else {"content-type": content_type}
        expected = answer(case.call(app=plain, headers=headers))
        assert answer(case.call(app=fast, headers=headers)) == expected, case.as_curl_command()

    alike()
