"""openai (Python): Chat Completions and Responses, plain and streamed, tools, structured
outputs (parse), embeddings, a dated model id."""
import json

from openai import OpenAI
from pydantic import BaseModel

from _harness import KEY, OPENAI_BASE, WEATHER_SCHEMA, run

client = OpenAI(base_url=OPENAI_BASE, api_key=KEY, max_retries=0)
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "weather", "parameters": WEATHER_SCHEMA}}


class City(BaseModel):
    name: str
    population: int


def chat():
    answer = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Hi"}])
    assert answer.choices[0].message.content and answer.usage.completion_tokens > 0


def chat_stream():
    stream = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Hi"}],
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and chunks[-1].usage.completion_tokens > 0


def chat_tools():
    answer = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Weather?"}],
                                            tools=[TOOL], tool_choice="required")
    call = answer.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather" and "city" in json.loads(call.function.arguments)


def chat_structured():
    parsed = client.chat.completions.parse(model="gpt-4o", messages=[{"role": "user", "content": "A city"}],
                                           response_format=City).choices[0].message.parsed
    assert isinstance(parsed, City)


def responses():
    answer = client.responses.create(model="gpt-4o", input="Hi")
    assert answer.output_text and answer.status == "completed"


def responses_stream():
    with client.responses.stream(model="gpt-4o", input="Hi") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert deltas and "".join(deltas) == final.output_text


def responses_tools():
    answer = client.responses.create(model="gpt-4o", input="Weather?", tool_choice="required",
                                     tools=[{"type": "function", "name": "get_weather", "parameters": WEATHER_SCHEMA}])
    calls = [item for item in answer.output if item.type == "function_call"]
    assert calls and calls[0].name == "get_weather"


def responses_structured():
    parsed = client.responses.parse(model="gpt-4o", input="A city", text_format=City).output_parsed
    assert isinstance(parsed, City)


def embeddings():
    answer = client.embeddings.create(model="text-embedding-3-small", input=["one", "two"])
    assert len(answer.data) == 2 and len(answer.data[0].embedding) == 1536


def dated_model():
    answer = client.chat.completions.create(model="gpt-4o-2024-08-06", messages=[{"role": "user", "content": "Hi"}])
    assert answer.choices[0].message.content


if __name__ == "__main__":
    run({f.__name__: f for f in (chat, chat_stream, chat_tools, chat_structured, responses, responses_stream,
                                 responses_tools, responses_structured, embeddings, dated_model)})
