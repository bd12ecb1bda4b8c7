"""Run one client's flows against a live llmsim and print what each gave, as JSON (the last
line of stdout): {flow: null (it passed) or the error}. Run inside the client's own virtual
environment by tests/clients/test_python_clients.py: `python -m FLOWS_MODULE [FLOW...]`, the
server's root URL in LLMSIM_URL. A flow is a function that raises (an assertion, the client's
own error) when the client does not get what a user of it would expect."""
from __future__ import annotations

import json
import os
import sys
import traceback

URL = os.environ.get("LLMSIM_URL", "http://127.0.0.1:8080")
OPENAI_BASE = URL + "/v1"
KEY = "sk-llmsim-test"
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def run(flows: dict) -> None:
    wanted = sys.argv[1:] or list(flows)
    results = {}
    for name in wanted:
        try:
            flows[name]()
            results[name] = None
        except BaseException as exc:        # noqa: B036 - a flow's failure is its result
            tail = traceback.format_exception(exc)[-3:]
            results[name] = f"{type(exc).__name__}: {exc}"[:1500] + "\n" + "".join(tail)[-1500:]
    print(json.dumps(results))


def get_weather(city: str) -> str:
    """Get the current weather in a given city."""
    return f"It is sunny in {city}."
