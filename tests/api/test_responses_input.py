"""Every accepted form of `input`, through the SDK against a live server. Each test checks the
exact input token count, so it fails if the server ignored or misread part of the input."""
from __future__ import annotations

import openai
import pytest

from counting import conversation, message

QUESTION = "What is the capital of France?"


def input_tokens(client, **params) -> int:
    response = client.responses.create(model=params.pop("model", "gpt-4o"), **params)
    assert response.status == "completed"
    return response.usage.input_tokens


def test_string_input_is_one_user_message(client):
    assert input_tokens(client, input=QUESTION) == conversation(message("user", QUESTION, model="gpt-4o"))


def test_message_item_without_type(client):
    items = [{"role": "user", "content": QUESTION}]
    assert input_tokens(client, input=items) == conversation(message("user", QUESTION, model="gpt-4o"))


def test_message_item_with_type_and_input_text_parts(client):
    items = [{"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "First part."},
                          {"type": "input_text", "text": QUESTION}]}]
    expected = conversation(message("user", "First part.", QUESTION, model="gpt-4o"))
    assert input_tokens(client, input=items) == expected


@pytest.mark.parametrize("role", ["system", "developer", "assistant"])
def test_every_role_is_counted(client, role):
    items = [{"role": role, "content": "You are terse."}, {"role": "user", "content": QUESTION}]
    expected = conversation(message(role, "You are terse.", model="gpt-4o"),
                            message("user", QUESTION, model="gpt-4o"))
    assert input_tokens(client, input=items) == expected


def test_assistant_output_text_parts_are_counted(client):
    items = [{"role": "user", "content": "Hi"},
             {"type": "message", "role": "assistant", "status": "completed",
              "content": [{"type": "output_text", "text": "Hello there.", "annotations": []}]},
             {"role": "user", "content": QUESTION}]
    expected = conversation(message("user", "Hi", model="gpt-4o"),
                            message("assistant", "Hello there.", model="gpt-4o"),
                            message("user", QUESTION, model="gpt-4o"))
    assert input_tokens(client, input=items) == expected


@pytest.mark.parametrize("image", [{"type": "input_image", "image_url": "https://example.com/cat.png"},
                                   {"type": "input_image", "file_id": "file-abc123", "detail": "low"}],
                         ids=["image_url", "file_id"])
def test_input_image_by_url_or_file_id_costs_image_tokens(client, image):
    items = [{"role": "user", "content": [{"type": "input_text", "text": "Describe it."}, image]}]
    expected = conversation(message("user", "Describe it.", model="gpt-4o", images=1))
    assert input_tokens(client, input=items) == expected


def test_image_for_a_model_without_vision_is_rejected_naming_the_part(client):
    items = [{"role": "user", "content": [{"type": "input_text", "text": "Describe it."},
                                          {"type": "input_image", "image_url": "https://e.com/a.png"}]}]
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="o3-mini", input=items)
    assert caught.value.param == "input[0].content[1]"


def test_function_call_and_its_output_are_accepted(client):
    """An agent loop echoes the model's call and sends the tool's result back."""
    arguments = '{"city": "Paris"}'
    items = [{"role": "user", "content": "Weather in Paris?"},
             {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": arguments},
             {"type": "function_call_output", "call_id": "call_1", "output": "18C and sunny"}]
    expected = conversation(message("user", "Weather in Paris?", model="gpt-4o"),
                            message("assistant", "get_weather", arguments, model="gpt-4o"),
                            message("tool", "18C and sunny", model="gpt-4o"))
    assert input_tokens(client, input=items) == expected


def test_output_items_of_a_previous_response_can_be_sent_back(client):
    """The SDK's own output item objects (with ids and status) are valid input."""
    first = client.responses.create(model="gpt-4o", input="Say something")
    items = [{"role": "user", "content": "Say something"}, *[item.model_dump(exclude_none=True)
                                                            for item in first.output],
             {"role": "user", "content": "Again"}]
    second = client.responses.create(model="gpt-4o", input=items)
    assert second.status == "completed"
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens


def test_instructions_are_counted_as_a_system_message(client):
    expected = conversation(message("system", "Answer in French.", model="gpt-4o"),
                            message("user", QUESTION, model="gpt-4o"))
    assert input_tokens(client, input=QUESTION, instructions="Answer in French.") == expected


def test_no_input_at_all_is_accepted(client):
    assert input_tokens(client) == conversation()
