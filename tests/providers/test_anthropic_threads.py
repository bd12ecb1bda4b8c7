"""Anthropic's message threads (the `message-threads` beta, `thread` on POST /v1/messages): this
server keeps none, and answers as Anthropic documents for a request it cannot thread: 400
`invalid_request_error` whose `details.error_code` is `thread_unsupported_request`. The SDKs'
default tool runners (Python `beta.messages.tool_runner`, JavaScript `toolRunner`) then resend
the full conversation without `thread`, and run to the end."""
from __future__ import annotations

import json
import shutil
import subprocess

import anthropic
import httpx
import pytest
from anthropic import beta_tool

from anthropic_schemas import check_body

MODEL = "claude-sonnet-4-5"


@pytest.fixture(scope="module")
def server(live_server_factory):
    return live_server_factory("--profile", "fast", "--target-tokens", "8", "--tool-call-probability", "1")


def test_a_threaded_request_gets_the_documented_unsupported_error(server):
    response = httpx.post(f"{server.url}/v1/messages", timeout=30, json={
        "model": MODEL, "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}], "thread": {"type": "create"}},
        headers={"anthropic-version": "2023-06-01", "anthropic-beta": "message-threads-2026-08-12"})
    assert response.status_code == 400
    check_body("error", response.json())
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["details"]["error_code"] == "thread_unsupported_request"


def test_the_python_sdks_default_tool_runner_runs_to_the_end(server):
    calls = []

    @beta_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return f"Sunny in {city}."

    client = anthropic.Anthropic(base_url=server.url, api_key="sk-ant-test", max_retries=0)
    runner = client.beta.messages.tool_runner(model=MODEL, max_tokens=1024, tools=[get_weather],
                                              messages=[{"role": "user", "content": "Weather in Paris?"}])
    final = runner.until_done()
    assert calls and final.stop_reason == "end_turn" and final.content[0].type == "text"


NODE_SCRIPT = """
const Anthropic = require('@anthropic-ai/sdk');
const { betaTool } = require('@anthropic-ai/sdk/helpers/beta/json-schema');
const client = new Anthropic({ baseURL: process.argv[2], apiKey: 'sk-ant-test', maxRetries: 0 });
let calls = 0;
const weather = betaTool({ name: 'get_weather', description: 'The weather in a city',
  inputSchema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  run: ({ city }) => { calls += 1; return `Sunny in ${city}.`; } });
client.beta.messages.toolRunner({ model: 'claude-sonnet-4-5', max_tokens: 1024, tools: [weather],
  messages: [{ role: 'user', content: 'Weather in Paris?' }] })
  .then((m) => console.log(JSON.stringify({ calls, stop: m.stop_reason, type: m.content[0].type })))
  .catch((e) => { console.error(e); process.exit(1); });
"""


@pytest.fixture(scope="module")
def node_sdk(tmp_path_factory):
    """A directory with @anthropic-ai/sdk installed (npm); skipped without node and npm."""
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip("node and npm are not installed")
    where = tmp_path_factory.mktemp("node-anthropic")
    done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent", "@anthropic-ai/sdk"],
                          cwd=where, capture_output=True, text=True, timeout=300)
    if done.returncode:
        pytest.skip(f"npm could not install @anthropic-ai/sdk: {done.stderr[-300:]}")
    return where


def test_the_javascript_sdks_default_tool_runner_runs_to_the_end(server, node_sdk):
    script = node_sdk / "runner.js"
    script.write_text(NODE_SCRIPT)
    done = subprocess.run(["node", str(script), server.url], cwd=node_sdk, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["calls"] >= 1 and result["stop"] == "end_turn" and result["type"] == "text"
