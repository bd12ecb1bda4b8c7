"""The JavaScript clients' main flows (js/flows/*.mjs) with node, against a live llmsim under
latency (conftest.MATRIX_FLAGS), in one environment of js/package.json's exact versions."""
from __future__ import annotations

import shutil

import pytest

from clientenvs import JS, node_env, run_flows

CLIENTS = {
    "openai": ("openai", ["chat", "chat_stream", "chat_tools", "chat_structured", "responses", "responses_stream",
                          "embeddings"]),
    "ai-sdk": ("ai_sdk", [f"{p}_{f}" for p in ("openai", "openai_chat", "anthropic", "google")
                          for f in ("generate", "stream", "tools", "object")] + ["openai_embed"]),
    "@anthropic-ai/sdk": ("anthropic", ["messages", "messages_stream", "tools", "tool_runner"]),
    "@google/genai": ("google_genai", ["generate", "generate_stream", "tools", "structured"]),
}
_results: dict[str, dict] = {}


def results(client: str, url: str) -> dict:
    if client not in _results:
        env = node_env()
        flows = env / "flows"
        shutil.rmtree(flows, ignore_errors=True)        # this checkout's flows beside the installed modules
        shutil.copytree(JS / "flows", flows)
        script = CLIENTS[client][0]
        _results[client] = run_flows([shutil.which("node"), str(flows / f"{script}.mjs")], url, env)
    return _results[client]


@pytest.mark.parametrize("client,flow", [(c, f) for c, (_, flows) in CLIENTS.items() for f in flows])
def test_client_flow(client, flow, matrix_server):
    error = results(client, matrix_server.url).get(flow, "the flow did not run")
    assert error is None, f"{client} {flow}:\n{error}"
