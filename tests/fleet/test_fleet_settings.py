"""The settings a fleet gives each backend, on any server: served_models (the backend's
`models:`), latency_factor (a `slow` outage) and instance_id (its name); in-process."""
from __future__ import annotations

from llmsim.settings import Settings

CHAT = {"messages": [{"role": "user", "content": "Hi"}]}


async def test_served_models_are_the_only_ones_listed_and_answered(app_client):
    async with app_client(served_models=["gpt-4o-mini", "my-finetune"]) as http:
        listed = (await http.get("/v1/models")).json()["data"]
        assert [m["id"] for m in listed] == ["gpt-4o-mini", "my-finetune"]
        ok = await http.post("/v1/chat/completions", json={"model": "my-finetune", **CHAT})
        assert ok.status_code == 200 and ok.json()["model"] == "my-finetune"   # unknown to models.yaml: defaults
        missing = await http.post("/v1/chat/completions", json={"model": "gpt-4o", **CHAT})
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "model_not_found" and missing.json()["error"]["param"] == "model"


async def test_a_model_not_served_is_not_found_in_anthropics_and_geminis_envelopes(app_client):
    async with app_client(served_models=["gpt-4o-mini"]) as http:
        claude = await http.post("/v1/messages", headers={"anthropic-version": "2023-06-01"},
                                 json={"model": "claude-sonnet-4-5", "max_tokens": 10, **CHAT})
        assert claude.status_code == 404
        assert claude.json()["type"] == "error" and claude.json()["error"]["type"] == "not_found_error"
        gemini = await http.post("/v1beta/models/gemini-2.5-flash:generateContent",
                                 json={"contents": [{"parts": [{"text": "Hi"}]}]})
        assert gemini.status_code == 404 and gemini.json()["error"]["status"] == "NOT_FOUND"


async def test_latency_factor_multiplies_the_time_to_first_token(app_client):
    for factor, expected in ((1, 30.0), (4, 120.0)):
        async with app_client(profile=None, ttft_ms=30, tbt_ms=0, latency_factor=factor) as http:
            body = (await http.post("/v1/chat/completions", json={"model": "gpt-4o", "max_tokens": 2, **CHAT})).json()
            assert body["usage"]["time_to_first_token"] == expected


def test_the_fleet_settings_come_from_the_environment_too():
    settings = Settings.load({}, {"LLMSIM_SERVED_MODELS": "gpt-4o, o3", "LLMSIM_INSTANCE_ID": "7",
                                  "LLMSIM_LATENCY_FACTOR": "2.5"})
    assert settings.served_models == ["gpt-4o", "o3"]
    assert settings.instance_id == "7" and settings.latency_factor == 2.5
