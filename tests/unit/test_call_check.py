"""A model server's tool call, checked against its tool's JSON Schema before it
becomes a function_call item (``plugins.cascade.call_check``)."""

from __future__ import annotations

import pytest

from plugins.cascade.call_check import InvalidCall, checked_arguments

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer"},
        "hours": {"type": "array", "items": {"type": "number"}},
        "exact": {"const": True},
        "where": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "at": {"type": ["string", "integer"]},
        "when": {"type": "date"},  # not a JSON type: not ours to judge
    },
    "required": ["city"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("arguments", [
    '{"city": "Paris"}',
    '{"city": "Paris", "unit": "celsius", "days": 3, "hours": [1, 2.5]}',
    '{"city": "Oslo", "days": 2.0, "exact": true, "where": null, "at": 4, "when": 1}',
])
def test_arguments_that_fit_pass_as_written(arguments: str) -> None:
    assert checked_arguments("get_weather", arguments, SCHEMA) == arguments


def test_no_arguments_are_an_empty_object() -> None:
    assert checked_arguments("get_time", "  ", {"type": "object"}) == "{}"


@pytest.mark.parametrize(("arguments", "why"), [
    ("{not json", "not JSON"),
    ('["Paris"]', "not an object"),
    ("{}", "lack the required 'city'"),
    ('{"city": 7}', "arguments.city is 7, not of type \"string\""),
    ('{"city": "Paris", "unit": "kelvin"}', 'not one of ["celsius", "fahrenheit"]'),
    ('{"city": "Paris", "days": true}', 'not of type "integer"'),
    ('{"city": "Paris", "days": 1.5}', 'not of type "integer"'),
    ('{"city": "Paris", "hours": [1, "x"]}', "arguments.hours[1]"),
    ('{"city": "Paris", "exact": false}', "arguments.exact is not true"),
    ('{"city": "Paris", "where": 3}', "matches none of its anyOf schemas"),
    ('{"city": "Paris", "country": "FR"}', "'country', which the schema does not allow"),
])
def test_arguments_that_break_the_schema_say_why(arguments: str, why: str) -> None:
    with pytest.raises(InvalidCall, match="get_weather") as caught:
        checked_arguments("get_weather", arguments, SCHEMA)
    assert why in str(caught.value)


def test_extra_properties_follow_an_additional_properties_schema() -> None:
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    assert checked_arguments("f", '{"a": 1}', schema) == '{"a": 1}'
    with pytest.raises(InvalidCall, match=r"arguments\.a is \"x\""):
        checked_arguments("f", '{"a": "x"}', schema)
    assert checked_arguments("f", '{"a": 1}', {"properties": "odd"}) == '{"a": 1}'
