"""llama-index (its own environment): llama-index-llms-openai's OpenAI (complete, chat,
stream_chat, a tool call, structured_predict) and OpenAIResponses, OpenAIEmbedding."""
from llama_index.core.llms import ChatMessage
from llama_index.core.tools import FunctionTool
from llama_index.embeddings.openai import OpenAIEmbedding
from llama_index.llms.openai import OpenAI, OpenAIResponses
from pydantic import BaseModel

from _harness import KEY, OPENAI_BASE, get_weather, run

HI = [ChatMessage(role="user", content="Hi")]


class City(BaseModel):
    name: str
    population: int


def llm():
    return OpenAI(model="gpt-4o", api_base=OPENAI_BASE, api_key=KEY, max_retries=0)


def complete():
    assert llm().complete("Hi").text


def chat():
    assert llm().chat(HI).message.content


def stream_chat():
    assert "".join(r.delta or "" for r in llm().stream_chat(HI))


def tools():
    response = llm().chat_with_tools([FunctionTool.from_defaults(get_weather)], user_msg="Weather in Paris?",
                                     tool_required=True)
    calls = llm().get_tool_calls_from_response(response, error_on_no_tool_call=True)
    assert calls[0].tool_name == "get_weather"


def structured():
    from llama_index.core.prompts import PromptTemplate
    assert isinstance(llm().structured_predict(City, PromptTemplate("A city")), City)


def responses():
    assert OpenAIResponses(model="gpt-4o", api_base=OPENAI_BASE, api_key=KEY, max_retries=0).chat(HI).message.content


def embeddings():
    emb = OpenAIEmbedding(model="text-embedding-3-small", api_base=OPENAI_BASE, api_key=KEY, max_retries=0)
    assert len(emb.get_text_embedding_batch(["one", "two"])) == 2


if __name__ == "__main__":
    run({f.__name__: f for f in (complete, chat, stream_chat, tools, structured, responses, embeddings)})
