"""google-genai: generate_content plain and streamed, a function call (mode ANY), structured
output (response_schema), embed_content, a versioned model id."""
from google import genai
from google.genai import types
from pydantic import BaseModel

from _harness import KEY, URL, WEATHER_SCHEMA, run

client = genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=URL))
MODEL = "gemini-2.5-flash"


class City(BaseModel):
    name: str
    population: int


def generate():
    answer = client.models.generate_content(model=MODEL, contents="Hi")
    assert answer.text and answer.usage_metadata.candidates_token_count > 0


def generate_stream():
    assert "".join(c.text or "" for c in client.models.generate_content_stream(model=MODEL, contents="Hi"))


def tools():
    tool = types.Tool(function_declarations=[types.FunctionDeclaration(
        name="get_weather", description="weather", parameters_json_schema=WEATHER_SCHEMA)])
    config = types.GenerateContentConfig(tools=[tool], tool_config=types.ToolConfig(
        function_calling_config=types.FunctionCallingConfig(mode="ANY")))
    answer = client.models.generate_content(model=MODEL, contents="Weather in Paris?", config=config)
    assert answer.function_calls[0].name == "get_weather" and "city" in answer.function_calls[0].args


def structured():
    config = types.GenerateContentConfig(response_mime_type="application/json", response_schema=City)
    answer = client.models.generate_content(model=MODEL, contents="A city", config=config)
    assert isinstance(answer.parsed, City)


def embeddings():
    answer = client.models.embed_content(model="gemini-embedding-001", contents=["one", "two"])
    assert len(answer.embeddings) == 2 and answer.embeddings[0].values


def versioned_model():
    assert client.models.generate_content(model="gemini-2.0-flash-001", contents="Hi").text


if __name__ == "__main__":
    run({f.__name__: f for f in (generate, generate_stream, tools, structured, embeddings, versioned_model)})
