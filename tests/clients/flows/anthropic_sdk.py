"""anthropic (Python): Messages plain and streamed, a forced tool, structured outputs
(messages.parse: output_config.format), count_tokens, a dated model id."""
import anthropic
from pydantic import BaseModel

from _harness import KEY, URL, WEATHER_SCHEMA, run

client = anthropic.Anthropic(base_url=URL, api_key=KEY, max_retries=0)
MODEL = "claude-sonnet-4-5"
HI = [{"role": "user", "content": "Hi"}]


class City(BaseModel):
    name: str
    population: int


def messages():
    message = client.messages.create(model=MODEL, max_tokens=256, messages=HI)
    assert message.content[0].text and message.usage.output_tokens > 0


def messages_stream():
    with client.messages.stream(model=MODEL, max_tokens=256, messages=HI) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.content[0].text == text


def tools():
    message = client.messages.create(model=MODEL, max_tokens=256, messages=HI,
                                     tools=[{"name": "get_weather", "description": "weather", "input_schema": WEATHER_SCHEMA}],
                                     tool_choice={"type": "tool", "name": "get_weather"})
    use = next(b for b in message.content if b.type == "tool_use")
    assert use.name == "get_weather" and "city" in use.input and message.stop_reason == "tool_use"


def structured():
    parsed = client.messages.parse(model=MODEL, max_tokens=512, messages=HI, output_format=City).parsed_output
    assert isinstance(parsed, City)


def count_tokens():
    assert client.messages.count_tokens(model=MODEL, messages=HI).input_tokens > 0


def dated_model():
    assert client.messages.create(model="claude-sonnet-4-5-20250929", max_tokens=64, messages=HI).content


if __name__ == "__main__":
    run({f.__name__: f for f in (messages, messages_stream, tools, structured, count_tokens, dated_model)})
