"""pydantic-ai: an Agent on OpenAI (Chat and Responses), Anthropic and Google models: a
run, a streamed run, a tool, structured output (ToolOutput, the default; NativeOutput)."""
import asyncio

from pydantic import BaseModel
from pydantic_ai import Agent, NativeOutput
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.google import GoogleModel
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.google import GoogleProvider
from pydantic_ai.providers.openai import OpenAIProvider

from _harness import KEY, OPENAI_BASE, URL, get_weather, run


class City(BaseModel):
    name: str
    population: int


MODELS = {
    "openai": lambda: OpenAIChatModel("gpt-4o", provider=OpenAIProvider(base_url=OPENAI_BASE, api_key=KEY)),
    "responses": lambda: OpenAIResponsesModel("gpt-4o", provider=OpenAIProvider(base_url=OPENAI_BASE, api_key=KEY)),
    "anthropic": lambda: AnthropicModel("claude-sonnet-4-5", provider=AnthropicProvider(base_url=URL, api_key=KEY)),
    "google": lambda: GoogleModel("gemini-2.5-flash", provider=GoogleProvider(base_url=URL, api_key=KEY)),
}


def plain(kind):
    def flow():
        assert Agent(MODELS[kind]()).run_sync("Hi").output
    return flow


def stream(kind):
    def flow():
        async def go():
            async with Agent(MODELS[kind]()).run_stream("Hi") as result:
                return [text async for text in result.stream_text(delta=True)]
        assert "".join(asyncio.run(go()))
    return flow


def tools(kind):
    def flow():
        result = Agent(MODELS[kind](), tools=[get_weather]).run_sync("Weather in Paris?")
        parts = [p.part_kind for m in result.all_messages() for p in m.parts]
        assert "tool-call" in parts and "tool-return" in parts and result.output
    return flow


def structured(kind, native=False):
    def flow():
        output = NativeOutput(City) if native else City
        assert isinstance(Agent(MODELS[kind](), output_type=output).run_sync("A city").output, City)
    return flow


if __name__ == "__main__":
    flows = {}
    for kind in MODELS:
        flows[f"{kind}_plain"] = plain(kind)
        flows[f"{kind}_stream"] = stream(kind)
        flows[f"{kind}_tools"] = tools(kind)
        flows[f"{kind}_structured"] = structured(kind)
        flows[f"{kind}_native_output"] = structured(kind, native=True)
    run(flows)
