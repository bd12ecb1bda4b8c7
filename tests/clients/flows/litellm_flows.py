"""litellm: completion to OpenAI, Anthropic and Gemini (plain, streamed), tools and
response_format to OpenAI, structured output to Anthropic and Gemini, embedding."""
import json

import litellm
from pydantic import BaseModel

from _harness import KEY, OPENAI_BASE, URL, WEATHER_SCHEMA, run

HI = [{"role": "user", "content": "Hi"}]
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "weather", "parameters": WEATHER_SCHEMA}}
PROVIDERS = {"openai": ("openai/gpt-4o", OPENAI_BASE), "anthropic": ("anthropic/claude-sonnet-4-5", URL),
             "gemini": ("gemini/gemini-2.5-flash", URL + "/v1beta")}


class City(BaseModel):
    name: str
    population: int


def call(provider, **kw):
    model, base = PROVIDERS[provider]
    return litellm.completion(model=model, api_base=base, api_key=KEY, messages=kw.pop("messages", HI), **kw)


def plain(provider):
    return lambda: call(provider).choices[0].message.content or (_ for _ in ()).throw(AssertionError("no text"))


def stream(provider):
    def flow():
        text = "".join(c.choices[0].delta.content or "" for c in call(provider, stream=True) if c.choices)
        assert text
    return flow


def tools():
    message = call("openai", tools=[TOOL], tool_choice="required").choices[0].message
    assert message.tool_calls[0].function.name == "get_weather"
    assert "city" in json.loads(message.tool_calls[0].function.arguments)


def structured(provider):
    def flow():
        content = call(provider, response_format=City).choices[0].message.content
        City.model_validate_json(content)
    return flow


def embedding():
    answer = litellm.embedding(model="openai/text-embedding-3-small", api_base=OPENAI_BASE, api_key=KEY,
                               input=["one", "two"])
    assert len(answer.data) == 2


if __name__ == "__main__":
    flows = {}
    for p in PROVIDERS:
        flows[f"{p}_plain"] = plain(p)
        flows[f"{p}_stream"] = stream(p)
        flows[f"{p}_structured"] = structured(p)
    flows["openai_tools"] = tools
    flows["openai_embedding"] = embedding
    run(flows)
