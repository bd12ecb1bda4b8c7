"""The Python clients' main flows against a live llmsim under latency (conftest.MATRIX_FLAGS):
each client's flows (flows/*.py) run in its own pinned environment, one process per client;
each flow is a test here, failing with what the client raised."""
from __future__ import annotations

import pytest

from clientenvs import FLOWS, python_env, run_flows

# client: (environment, flows module, its flows)
CLIENTS = {
    "openai": ("main", "openai_sdk", ["chat", "chat_stream", "chat_tools", "chat_structured", "responses",
                                      "responses_stream", "responses_tools", "responses_structured",
                                      "embeddings", "dated_model"]),
    "openai-agents": ("main", "openai_agents", ["plain", "streaming", "tools", "structured"]),
    "langchain-openai": ("main", "langchain_openai_flows", ["chat", "chat_stream", "chat_tools", "chat_structured",
                                                            "responses", "responses_stream", "responses_tools",
                                                            "responses_structured", "embeddings"]),
    "langchain-anthropic": ("main", "langchain_anthropic_flows", ["chat", "chat_stream", "tools", "structured",
                                                                  "structured_json_schema", "dated_model"]),
    "langchain-google-genai": ("main", "langchain_google_flows", ["chat", "chat_stream", "tools", "structured"]),
    "litellm": ("main", "litellm_flows", [f"{p}_{f}" for p in ("openai", "anthropic", "gemini")
                                          for f in ("plain", "stream", "structured")]
                + ["openai_tools", "openai_embedding"]),
    "pydantic-ai": ("main", "pydantic_ai_flows", [f"{m}_{f}" for m in ("openai", "responses", "anthropic", "google")
                                                  for f in ("plain", "stream", "tools", "structured", "native_output")]),
    "anthropic": ("main", "anthropic_sdk", ["messages", "messages_stream", "tools", "structured", "count_tokens",
                                            "dated_model"]),
    "google-genai": ("main", "google_genai_sdk", ["generate", "generate_stream", "tools", "structured",
                                                  "embeddings", "versioned_model"]),
    "instructor": ("instructor", "instructor_flows", ["create", "create_json_schema", "iterable", "partial_stream"]),
    "llama-index": ("llamaindex", "llama_index_flows", ["complete", "chat", "stream_chat", "tools", "structured",
                                                        "responses", "embeddings"]),
}
_results: dict[str, dict] = {}


def results(client: str, url: str) -> dict:
    if client not in _results:
        env_name, module, _ = CLIENTS[client]
        env = python_env(env_name)
        _results[client] = run_flows([env.python, f"{module}.py"], url, FLOWS)
    return _results[client]


@pytest.mark.parametrize("client,flow", [(c, f) for c, (_, _, flows) in CLIENTS.items() for f in flows])
def test_client_flow(client, flow, matrix_server):
    error = results(client, matrix_server.url).get(flow, "the flow did not run")
    assert error is None, f"{client} {flow}:\n{error}"
