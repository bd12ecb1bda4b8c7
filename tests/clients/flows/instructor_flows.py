"""instructor (its own environment: it pins openai): create with a response model (tools
mode and JSON-schema mode), create_iterable, a streamed Partial."""
import instructor
from openai import OpenAI
from pydantic import BaseModel

from _harness import KEY, OPENAI_BASE, run

HI = [{"role": "user", "content": "Cities"}]


class City(BaseModel):
    name: str
    population: int


def client(mode=instructor.Mode.TOOLS):
    return instructor.from_openai(OpenAI(base_url=OPENAI_BASE, api_key=KEY, max_retries=0), mode=mode)


def create():
    assert isinstance(client().create(model="gpt-4o", messages=HI, response_model=City, max_retries=0), City)


def create_json_schema():
    city = client(instructor.Mode.JSON_SCHEMA).create(model="gpt-4o", messages=HI, response_model=City, max_retries=0)
    assert isinstance(city, City)


def iterable():
    cities = list(client().create_iterable(model="gpt-4o", messages=HI, response_model=City, max_retries=0))
    assert cities and all(isinstance(c, City) for c in cities)


def partial_stream():
    partials = list(client().create_partial(model="gpt-4o", messages=HI, response_model=City, max_retries=0))
    assert partials and partials[-1].name is not None


if __name__ == "__main__":
    run({f.__name__: f for f in (create, create_json_schema, iterable, partial_stream)})
