"""Every API's plan is one `Plan` (llmsim.sim.plans): faults cut it and stats read it through the
protocol alone, so an answer without streamed tokens (embeddings, moderations, compactions) is
timed and counted under a latency profile like any other. Every generating planner plays a
script (scenarios.Answer) in its own API's shape, and each provider's turns count its assistant
turns and tool results."""
from __future__ import annotations

import openai
import pytest

from conftest import model_metrics
from llmsim.clock import FakeClock
from llmsim.settings import Settings
from llmsim.sim import (
    anthropic_plan,
    chat_plan,
    compaction,
    completions_plan,
    contentfaults,
    embeddings,
    gemini_plan,
    moderation,
    plans,
    scenarios,
)
from llmsim.sim import responses_plan as planning
from llmsim.sim.scenarios import Answer
from llmsim.simulator import Simulator

TOOL = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CALLS = (("get_weather", '{"city": "Paris"}'), ("get_time", '{"zone": "CET"}'))


@pytest.fixture(scope="module")
def simulator():
    return Simulator.load(Settings(profile="fast", seed=7, target_tokens=12), FakeClock())


def anthropic_body(**extra):
    return {"model": "claude-sonnet-4-5", "max_tokens": 200,
            "messages": [{"role": "user", "content": "Hello there."}], **extra}


def gemini_body(**extra):
    return {"model": "gemini-2.5-flash", "contents": [{"role": "user", "parts": [{"text": "Hello there."}]}],
            **extra}


def every_plan(simulator):
    """One plan of each API, all planned with a latency profile."""
    chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi."}]}
    yield planning.plan_response({"model": "gpt-4o", "input": "Hi."}, simulator.context("gpt-4o"))
    yield chat_plan.plan_chat(chat, simulator.context("gpt-4o"))
    yield completions_plan.plan_completion({"model": "gpt-3.5-turbo-instruct", "prompt": "Once",
                                          "max_tokens": 10}, simulator.context("gpt-3.5-turbo-instruct"))
    yield anthropic_plan.plan_message(anthropic_body(), simulator.context("claude-sonnet-4-5"))
    yield gemini_plan.plan_generate(gemini_body(), simulator.context("gemini-2.5-flash"))
    yield embeddings.plan_embeddings({"model": "text-embedding-3-small", "input": "Hi."},
                                     simulator.context("text-embedding-3-small"), True)
    yield compaction.plan_compaction({"model": "gpt-4o"}, simulator.context("gpt-4o"),
                                     [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}])
    rules = moderation.Rules.load(simulator.settings.data_file("moderation.yaml"), simulator.profiles)
    ctx = simulator.context("omni-moderation-latest", model=moderation.Model("omni-moderation-latest"),
                      profile=simulator.profile_for(rules))
    yield moderation.plan_moderation({"input": "a kind word"}, rules, ctx)


def test_every_api_plans_a_plan_with_token_times_only_where_tokens_are(simulator):
    found = {type(plan).__name__: plan for plan in every_plan(simulator)}
    assert len(found) == 8
    for name, plan in found.items():
        assert isinstance(plan, plans.Plan), name
        assert plan.end_at >= plan.first_token_at > 0, name
        times = plan.token_times()
        if name in ("EmbeddingPlan", "ModerationPlan", "CompactionPlan"):
            assert times == [], name
        else:
            assert times and all(list(t) == sorted(t) and t[-1] <= plan.end_at for t in times), name


def test_a_content_filter_stops_each_api_in_its_own_words(simulator):
    said = {}
    for plan in every_plan(simulator):
        usage = plan.usage
        plan.cut(2)
        said[type(plan).__name__] = plan
        if plan.token_times():
            assert sum(len(t) for t in plan.token_times()) <= 2 * len(plan.token_times())
            assert plan.usage.input_tokens == usage.input_tokens
            assert plan.usage.total_tokens < usage.total_tokens
    assert (said["Plan"].status, said["Plan"].incomplete_reason) == ("incomplete", "content_filter")
    assert said["ChatPlan"].choices[0].finish_reason == "content_filter"
    assert said["CompletionPlan"].choices[0].finish_reason == "content_filter"
    assert said["MessagePlan"].stop_reason == "refusal"
    assert said["GeminiPlan"].choices[0].finish_reason == "content_filter"    # finishReason SAFETY


def test_truncated_output_is_what_each_apis_cap_says(simulator):
    said = {type(plan).__name__: plan for plan in every_plan(simulator)}
    for plan in said.values():
        plan.truncate()
    assert said["Plan"].incomplete_reason == "max_output_tokens"
    assert said["ChatPlan"].choices[0].finish_reason == "length"
    assert said["MessagePlan"].stop_reason == "max_tokens"
    assert said["GeminiPlan"].choices[0].finish_reason == "length"            # finishReason MAX_TOKENS


def test_anthropic_plays_a_script_as_text_tool_uses_or_a_refusal(simulator):
    ctx = lambda: simulator.context("claude-sonnet-4-5")    # noqa: E731
    text = anthropic_plan.plan_message(anthropic_body(), ctx(), script=Answer(text="Scripted words."))
    assert [(b.kind, b.text) for b in text.blocks] == [("text", "Scripted words.")]
    assert text.stop_reason == "end_turn"
    calls = anthropic_plan.plan_message(anthropic_body(), ctx(), script=Answer(calls=CALLS))
    assert [(b.kind, b.name, b.input) for b in calls.blocks] == [
        ("tool_use", "get_weather", {"city": "Paris"}), ("tool_use", "get_time", {"zone": "CET"})]
    assert calls.stop_reason == "tool_use"
    refusal = anthropic_plan.plan_message(anthropic_body(), ctx(), script=Answer(text="I can't.", refusal=True))
    assert (refusal.blocks[0].text, refusal.stop_reason) == ("I can't.", "refusal")


def test_gemini_plays_a_script_as_a_text_part_function_calls_or_safety(simulator):
    ctx = lambda: simulator.context("gemini-2.5-flash")     # noqa: E731
    text = gemini_plan.plan_generate(gemini_body(), ctx(), script=Answer(text="Scripted words."))
    assert [(p.kind, p.text) for p in text.choices[0].parts if p.kind != "thought"] == [("text", "Scripted words.")]
    calls = gemini_plan.plan_generate(gemini_body(), ctx(), script=Answer(calls=CALLS))
    assert [(c.name, c.args) for c in calls.choices[0].calls] == [
        ("get_weather", {"city": "Paris"}), ("get_time", {"zone": "CET"})]
    refusal = gemini_plan.plan_generate(gemini_body(), ctx(), script=Answer(text="I can't.", refusal=True))
    assert (refusal.choices[0].text, refusal.choices[0].finish_reason) == ("I can't.", "content_filter")


def test_content_faults_read_each_apis_tools_and_its_planner_says_them(simulator):
    tools = {"tools": [{"name": "get_weather", "input_schema": TOOL}]}
    body = anthropic_body(**tools)
    spoiled = contentfaults.spoiled("schema_violating_tool_arguments", None, body, "anthropic", simulator.draw()[0], "")
    plan = anthropic_plan.plan_message(body, simulator.context("claude-sonnet-4-5"), script=spoiled)
    assert [(b.kind, b.name) for b in plan.blocks] == [("tool_use", "get_weather")]
    assert "city" not in plan.blocks[0].input                  # its required property left out
    req = gemini_body(tools=[{"functionDeclarations": [{"name": "get_weather", "parameters": TOOL}]}])
    unknown = contentfaults.spoiled("unknown_tool_call", None, req, "gemini", simulator.draw()[0], "")
    plan = gemini_plan.plan_generate(req, simulator.context("gemini-2.5-flash"), script=unknown)
    assert [c.name for c in plan.choices[0].calls] == [contentfaults.UNKNOWN_TOOL]


def test_completions_say_a_scripts_text_and_write_its_calls_out(simulator):
    body = {"model": "gpt-3.5-turbo-instruct", "prompt": "Once", "max_tokens": 50, "n": 2}
    ctx = lambda: simulator.context("gpt-3.5-turbo-instruct")     # noqa: E731
    text = completions_plan.plan_completion(body, ctx(), script=Answer(text="upon a time"))
    assert [c.text for c in text.choices] == ["upon a time"] * 2
    calls = completions_plan.plan_completion(body, ctx(), script=Answer(calls=CALLS[:1]))
    assert calls.choices[0].text == 'get_weather({"city": "Paris"})'
    refusal = completions_plan.plan_completion(body, ctx(), script=Answer(text="No.", refusal=True))
    assert (refusal.choices[0].text, refusal.choices[0].refusal) == ("No.", None)


def test_each_providers_turns_count_its_assistant_turns_and_tool_results():
    anthropic = {"tools": [{"name": "get_weather", "input_schema": TOOL}], "messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                           "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]}]}
    turns = anthropic_plan.turns(anthropic)
    assert scenarios.assistant_turns(turns) == 1
    assert scenarios.tool_result_for(turns) == "get_weather"
    gemini = {"contents": [
        {"role": "user", "parts": [{"text": "Weather?"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"sky": "sunny"}}}]},
        {"role": "model", "parts": [{"text": "Sunny."}]},
        {"role": "user", "parts": [{"text": "Thanks."}]}]}
    turns = gemini_plan.turns(gemini)
    assert scenarios.assistant_turns(turns) == 2
    assert scenarios.tool_result_for(turns[:3]) == "get_weather"
    chat = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                         {"role": "user", "content": "c"}]}
    assert scenarios.assistant_turns(chat_plan.turns(chat)) == 1
    assert scenarios.assistant_turns(completions_plan.turns({"prompt": ["a", "b"]})) == 0


@pytest.fixture(scope="module")
def timed(live_server_factory):
    return live_server_factory("--profile", "fast")


def test_embeddings_moderations_and_compactions_are_timed_and_counted_under_a_latency_profile(timed):
    client = timed.client()
    before = model_metrics(timed.url, "text-embedding-3-small", "vllm:time_to_first_token_seconds_count")[0]
    vectors = client.embeddings.create(model="text-embedding-3-small", input=["one", "two"]).data
    assert len(vectors) == 2
    after = model_metrics(timed.url, "text-embedding-3-small", "vllm:time_to_first_token_seconds_count")[0]
    assert after == before + 1
    verdict = client.moderations.create(input="I will attack them")
    assert verdict.results[0].flagged and verdict.results[0].categories.violence
    compacted = client.responses.compact(model="gpt-4o", input=[{"role": "user", "content": "Hi."},
                                                                {"role": "assistant", "content": "Hello."}])
    assert compacted.output[-1].type == "compaction"
    with pytest.raises(openai.BadRequestError):       # bad input is still the API's 400
        client.embeddings.create(model="text-embedding-3-small", input="")
