"""Tool-call arguments come from `llmsim.sim.jsonvalues`: every value it draws must validate
against the schema it was drawn from, and a seed must fix it."""
from __future__ import annotations

import random

import jsonschema
import pytest

from llmsim.sim import jsonvalues

SCHEMAS = {
    "enum and required": {
        "type": "object", "additionalProperties": False, "required": ["location", "unit"],
        "properties": {"location": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}}},
    "numbers": {
        "type": "object", "required": ["a", "b", "c", "d", "e"],
        "properties": {"a": {"type": "integer", "minimum": 5, "exclusiveMaximum": 9},
                       "b": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                       "c": {"type": "number", "minimum": -1.5, "maximum": 2.5, "multipleOf": 0.25},
                       "d": {"type": "integer", "multipleOf": 7, "minimum": 1},
                       "e": {"type": "number", "maximum": -1000}}},
    "string formats": {
        "type": "object",
        "required": ["when", "day", "id", "mail", "url", "ip", "short", "long"],
        "properties": {"when": {"type": "string", "format": "date-time"},
                       "day": {"type": "string", "format": "date"},
                       "id": {"type": "string", "format": "uuid"},
                       "mail": {"type": "string", "format": "email"},
                       "url": {"type": "string", "format": "uri"},
                       "ip": {"type": "string", "format": "ipv4"},
                       "short": {"type": "string", "maxLength": 3},
                       "long": {"type": "string", "minLength": 30}}},
    "patterns": {
        "type": "object", "required": ["code", "time", "mail"],
        "properties": {"code": {"type": "string", "pattern": r"^[A-Z]{3}-\d{2,4}$"},
                       "time": {"type": "string", "pattern": r"^(?:[01]\d|2[0-3]):[0-5]\d$"},
                       "mail": {"type": "string", "pattern": r"[a-z]+@[a-z]+\.(com|org)"}}},
    "arrays": {
        "type": "object", "required": ["tags", "pair", "matrix"],
        "properties": {"tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 2,
                                "maxItems": 3, "uniqueItems": True},
                       "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "boolean"}],
                                "minItems": 2},
                       "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}}},
    "refs, allOf, anyOf, recursion": {
        "type": "object", "required": ["tree", "both", "either", "maybe"],
        "$defs": {"node": {"type": "object", "required": ["v"],
                           "properties": {"v": {"type": "integer"}, "kids": {"type": "array",
                                                                               "items": {"$ref": "#/$defs/node"}}}}},
        "properties": {"tree": {"$ref": "#/$defs/node"},
                       "both": {"allOf": [{"type": "object", "required": ["a"], "properties": {"a": {"type": "boolean"}}},
                                          {"required": ["b"], "properties": {"b": {"const": 3}}}]},
                       "either": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                       "maybe": {"type": ["string", "null"], "minLength": 2}}},
    "min properties": {"type": "object", "minProperties": 3, "properties": {"x": {"type": "string"}}},
    "empty object": {"type": "object", "properties": {}},
}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_drawn_value_validates_against_its_schema(name):
    schema = SCHEMAS[name]
    for seed in range(200):
        value = jsonvalues.value(schema, random.Random(seed))
        jsonschema.validate(value, schema, format_checker=jsonschema.FormatChecker())


def test_the_same_seed_draws_the_same_value():
    schema = SCHEMAS["string formats"]
    assert jsonvalues.value(schema, random.Random(5)) == jsonvalues.value(schema, random.Random(5))
    assert jsonvalues.value(schema, random.Random(5)) != jsonvalues.value(schema, random.Random(6))


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]},   # endless recursion
    {"type": "object", "properties": {"s": {"type": "string", "minLength": 10**9},
                                      "l": {"type": "array", "minItems": 10**9},
                                      "r": {"type": "string", "pattern": "a{100000000}"}},
     "required": ["s", "l", "r"]},
    {"type": "object", "properties": [1, 2], "required": "abc"},                   # malformed
    {"type": "integer", "minimum": 10**30, "multipleOf": 0},
])
def test_hostile_schemas_give_a_bounded_value_quickly(schema):
    value = jsonvalues.value(schema, random.Random(0))
    assert len(repr(value)) < 200_000


def test_values_look_like_a_models_optional_properties_written_and_arrays_filled():
    """What instructor's `create_iterable` asks (`tasks` optional): a model fills it in."""
    item = {"type": "object", "required": ["name"],
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                           "email": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}
    schema = {"type": "object", "properties": {"tasks": {"type": "array", "items": item}}}
    values = [jsonvalues.value(schema, random.Random(seed)) for seed in range(200)]
    for value in values:
        jsonschema.validate(value, schema)
    assert all(value.get("tasks") for value in values)          # top level: always, never empty
    nested = [task for value in values for task in value["tasks"]]
    assert sum("age" in task for task in nested) > 0.8 * len(nested)
    assert sum(isinstance(task.get("email"), str) for task in nested) > 0.8 * len(nested)
