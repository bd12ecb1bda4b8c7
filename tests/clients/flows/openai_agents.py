"""openai-agents: Runner (Responses), streaming, a function tool, structured output."""
from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled
from openai import AsyncOpenAI
from pydantic import BaseModel

from _harness import KEY, OPENAI_BASE, run

set_tracing_disabled(True)


def fresh() -> None:
    """A client of its own for each flow: an AsyncOpenAI's connections belong to the event loop
    that opened them, and each flow runs in a loop of its own."""
    set_default_openai_client(AsyncOpenAI(base_url=OPENAI_BASE, api_key=KEY, max_retries=0), use_for_tracing=False)


class City(BaseModel):
    name: str
    population: int


@function_tool
def get_weather(city: str) -> str:
    """Get the current weather in a given city."""
    return f"It is sunny in {city}."


def plain():
    fresh()
    result = Runner.run_sync(Agent(name="a", instructions="Be brief.", model="gpt-4o"), "Hi")
    assert isinstance(result.final_output, str) and result.final_output


def streaming():
    fresh()
    import asyncio

    async def go():
        result = Runner.run_streamed(Agent(name="a", model="gpt-4o"), "Hi")
        deltas = [e async for e in result.stream_events() if e.type == "raw_response_event"
                  and e.data.type == "response.output_text.delta"]
        return deltas, result.final_output
    deltas, final = asyncio.run(go())
    assert deltas and final


def tools():
    fresh()
    result = Runner.run_sync(Agent(name="a", model="gpt-4o", tools=[get_weather]), "Weather in Paris?")
    kinds = [item.type for item in result.new_items]
    assert "tool_call_item" in kinds and "tool_call_output_item" in kinds and result.final_output


def structured():
    fresh()
    result = Runner.run_sync(Agent(name="a", model="gpt-4o", output_type=City), "A city")
    assert isinstance(result.final_output, City)


if __name__ == "__main__":
    run({f.__name__: f for f in (plain, streaming, tools, structured)})
