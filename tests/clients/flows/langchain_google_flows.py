"""langchain-google-genai: ChatGoogleGenerativeAI invoke, stream, tools, structured output
(its default: responseJsonSchema)."""
from langchain_google_genai import ChatGoogleGenerativeAI
from pydantic import BaseModel

from _harness import KEY, URL, get_weather, run


class City(BaseModel):
    name: str
    population: int


def llm():
    return ChatGoogleGenerativeAI(model="gemini-2.5-flash", google_api_key=KEY, base_url=URL, max_retries=0)


def chat():
    assert llm().invoke("Hi").text


def chat_stream():
    assert [c for c in llm().stream("Hi") if c.text]


def tools():
    message = llm().bind_tools([get_weather], tool_choice="get_weather").invoke("Weather in Paris?")
    assert message.tool_calls[0]["name"] == "get_weather" and "city" in message.tool_calls[0]["args"]


def structured():
    assert isinstance(llm().with_structured_output(City).invoke("A city"), City)


if __name__ == "__main__":
    run({f.__name__: f for f in (chat, chat_stream, tools, structured)})
