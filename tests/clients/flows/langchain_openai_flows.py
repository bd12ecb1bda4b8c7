"""langchain-openai: ChatOpenAI on Chat Completions and on Responses (invoke, stream, tools,
with_structured_output), OpenAIEmbeddings."""
from langchain_openai import ChatOpenAI, OpenAIEmbeddings
from pydantic import BaseModel

from _harness import KEY, OPENAI_BASE, get_weather, run


class City(BaseModel):
    name: str
    population: int


def llm(**kw):
    return ChatOpenAI(model="gpt-4o", base_url=OPENAI_BASE, api_key=KEY, max_retries=0, **kw)


def chat():
    assert llm().invoke("Hi").content


def chat_stream():
    chunks = list(llm().stream("Hi"))
    assert "".join(c.content for c in chunks if isinstance(c.content, str))


def chat_tools():
    message = llm().bind_tools([get_weather], tool_choice="get_weather").invoke("Weather in Paris?")
    assert message.tool_calls[0]["name"] == "get_weather" and "city" in message.tool_calls[0]["args"]


def chat_structured():
    assert isinstance(llm().with_structured_output(City).invoke("A city"), City)


def responses():
    assert llm(use_responses_api=True).invoke("Hi").text


def responses_stream():
    assert [c for c in llm(use_responses_api=True).stream("Hi") if c.text]


def responses_tools():
    message = llm(use_responses_api=True).bind_tools([get_weather], tool_choice="get_weather").invoke("Weather?")
    assert message.tool_calls[0]["name"] == "get_weather"


def responses_structured():
    assert isinstance(llm(use_responses_api=True).with_structured_output(City).invoke("A city"), City)


def embeddings():
    emb = OpenAIEmbeddings(model="text-embedding-3-small", base_url=OPENAI_BASE, api_key=KEY,
                           check_embedding_ctx_length=False)   # (True: tiktoken downloads its files)
    vectors = emb.embed_documents(["one", "two"])
    assert len(vectors) == 2 and len(vectors[0]) == 1536


if __name__ == "__main__":
    run({f.__name__: f for f in (chat, chat_stream, chat_tools, chat_structured, responses, responses_stream,
                                 responses_tools, responses_structured, embeddings)})
