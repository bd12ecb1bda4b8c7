"""`--data DIR`: models.yaml, profiles.yaml, faults.yaml, reasoning.yaml and ids.yaml found
there override the packaged ones (each optional), checked at start-up like ours."""
from __future__ import annotations

import openai
import pytest
import yaml

from conftest import REPO
from llmsim.testing import Server

pytestmark = pytest.mark.live

MODELS = {"models": {"acme-1": {"owned_by": "acme", "context_window": 8000,
                                "max_output_tokens": 1000, "latency": "instant"}}}


def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.openai_url, api_key="sk-test", max_retries=0)


def test_a_data_dir_models_file_adds_a_model_the_sdk_can_use(tmp_path):
    (tmp_path / "models.yaml").write_text(yaml.safe_dump(MODELS))
    with Server(["--data", str(tmp_path), "--profile", "instant"]) as server:
        sdk = client(server)
        answer = sdk.responses.create(model="acme-1", input="hello")
        assert answer.model == "acme-1" and answer.output_text
        assert [m.id for m in sdk.models.list()] == ["acme-1"]


def test_a_data_dir_replaces_only_the_files_it_has(tmp_path):
    (tmp_path / "models.yaml").write_text(yaml.safe_dump(MODELS))
    with Server(["--data", str(tmp_path), "--profile", "instant"]) as server:
        with pytest.raises(openai.NotFoundError):       # the packaged models are replaced
            client(server).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        # ... while the packaged fault kinds (no faults.yaml here) still apply
        with pytest.raises(openai.RateLimitError):
            client(server).with_options(default_headers={"x-llmsim-fault": "rate_limit"}).responses.create(
                model="acme-1", input="hello")


def test_a_bad_data_file_fails_start_up_naming_the_file_and_the_path(tmp_path):
    bad = {"models": {"acme-1": {**MODELS["models"]["acme-1"], "context_window": "big"}}}
    (tmp_path / "models.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(RuntimeError) as failed:
        Server(["--data", str(tmp_path)], timeout=30)
    message = str(failed.value)
    assert str(tmp_path / "models.yaml") in message and "models.acme-1.context_window" in message


def test_a_missing_data_dir_fails_start_up(tmp_path):
    with pytest.raises(RuntimeError, match="not a directory"):
        Server(["--data", str(tmp_path / "nowhere")], timeout=30)


def test_a_data_dir_ids_file_sets_the_id_formats(tmp_path):
    ids = yaml.safe_load(open(REPO / "llmsim" / "data" / "ids.yaml"))
    ids["ids"]["response"] = {"prefix": "acme-resp-", "hex": 8}
    ids["ids"]["chat_completion"] = {"prefix": "acme-chat-", "hex": 4}
    (tmp_path / "ids.yaml").write_text(yaml.safe_dump(ids))
    with Server(["--data", str(tmp_path), "--profile", "instant"]) as server:
        sdk = client(server)
        response = sdk.responses.create(model="gpt-4o-mini", input="hello")
        assert response.id.startswith("acme-resp-") and len(response.id) == len("acme-resp-") + 8
        assert sdk.responses.retrieve(response.id).id == response.id
        completion = sdk.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
        assert completion.id.startswith("acme-chat-") and len(completion.id) == len("acme-chat-") + 4
        assert response.output[0].id.startswith("msg_")        # the formats it did not change
