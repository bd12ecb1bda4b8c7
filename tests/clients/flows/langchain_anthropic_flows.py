"""langchain-anthropic: ChatAnthropic invoke, stream, tools, structured output (tool calling,
the default; json_schema: Anthropic's output_config), a dated model id."""
from langchain_anthropic import ChatAnthropic
from pydantic import BaseModel

from _harness import KEY, URL, get_weather, run


class City(BaseModel):
    name: str
    population: int


def llm(model="claude-sonnet-4-5"):
    return ChatAnthropic(model=model, base_url=URL, api_key=KEY, max_retries=0, max_tokens=256)


def chat():
    assert llm().invoke("Hi").content


def chat_stream():
    assert [c for c in llm().stream("Hi") if c.content]


def tools():
    message = llm().bind_tools([get_weather], tool_choice="get_weather").invoke("Weather in Paris?")
    assert message.tool_calls[0]["name"] == "get_weather" and "city" in message.tool_calls[0]["args"]


def structured():
    assert isinstance(llm().with_structured_output(City).invoke("A city"), City)


def structured_json_schema():
    assert isinstance(llm().with_structured_output(City, method="json_schema").invoke("A city"), City)


def dated_model():
    assert llm("claude-sonnet-4-5-20250929").invoke("Hi").content


if __name__ == "__main__":
    run({f.__name__: f for f in (chat, chat_stream, tools, structured, structured_json_schema, dated_model)})
