"""JSON Schema → GBNF on its own: each grammar, read back as a regex
(``gbnf_regex``), accepts JSON that validates against its schema and refuses
JSON that does not."""

from __future__ import annotations

import json
from typing import Any

import pytest
from gbnf_regex import GbnfRegex
from hypothesis import given
from hypothesis import strategies as st

from plugins.cascade.grammar import call_grammar, literal, schema_grammar, shown_examples

WEATHER: dict[str, Any] = {
    "type": "object",
    "properties": {"location": {"type": "string"},
                   "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["location", "unit"],
}


def accepts(schema: Any, *values: Any) -> list[bool]:
    """Which of ``values`` (Python values, or a ``Raw`` JSON text) the grammar takes."""
    g = GbnfRegex(schema_grammar(schema))
    return [g.matches(v.text if isinstance(v, Raw) else json.dumps(v)) for v in values]


class Raw:
    def __init__(self, text: str) -> None:
        self.text = text


def test_an_object_takes_its_properties_in_order_with_the_required_ones() -> None:
    assert accepts(WEATHER,
                   {"location": "Paris", "unit": "celsius"},
                   Raw('{ "location" : "Paris, \\"FR\\"" ,\n"unit":"fahrenheit"}'),
                   ) == [True, True]
    assert accepts(WEATHER,
                   {"location": "Paris"},  # unit is required
                   {"location": "Paris", "unit": "kelvin"},  # not in the enum
                   {"location": 7, "unit": "celsius"},  # not a string
                   {"location": "Paris", "unit": "celsius", "extra": 1},  # not a property
                   Raw('{"location": "Paris", "unit": "celsius",}'),  # a trailing comma
                   ) == [False] * 5


def test_optional_properties_may_each_be_left_out() -> None:
    schema = {"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "boolean"}, "c": {"type": "null"}},
        "required": ["b"]}
    assert accepts(schema, {"b": True}, {"a": 1, "b": False}, {"b": True, "c": None},
                   {"a": -3, "b": True, "c": None}) == [True] * 4
    assert accepts(schema, {}, {"a": 1}, {"a": 1.5, "b": True}, Raw('{, "b": true}'),
                   Raw('{"a": 1 "b": true}')) == [False] * 5
    nothing_required = {"type": "object", "properties": {"a": {"type": "integer"},
                                                         "b": {"type": "integer"}}}
    assert accepts(nothing_required, {}, {"a": 1}, {"b": 2}, {"a": 1, "b": 2}) == [True] * 4
    assert accepts(nothing_required, Raw("{,}"), Raw('{"a": 1,}'),
                   {"b": 2, "a": 1}) == [False] * 3


def test_numbers_integers_and_strings() -> None:
    assert accepts({"type": "number"}, 0, -2.5, 3e10, 17, Raw("1.5E-3")) == [True] * 5
    assert accepts({"type": "number"}, *map(Raw, ["01", "1.", ".5", '"1"', "+1"])) == [False] * 5
    assert accepts({"type": "integer"}, 0, -12, 1234567) == [True] * 3
    assert accepts({"type": "integer"}, 1.5, Raw("1e3"), "3") == [False] * 3
    assert accepts({"type": "string"}, "", "ünïcödé ☂", "a\nb", Raw('"\\u00e9"')) == [True] * 4
    assert accepts({"type": "string"}, *map(Raw, ['"a\nb"', '"\\q"', "'x'", '"open'])) == \
        [False] * 4


def test_arrays_nested_objects_anyof_and_type_lists() -> None:
    schema = {"type": "object", "properties": {
        "days": {"type": "array", "items": {"type": "object", "properties": {
            "day": {"type": "string", "enum": ["mon", "tue"]},
            "hours": {"type": "array", "items": {"type": "integer"}}},
            "required": ["day"]}},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "count": {"type": ["integer", "null"]}},
        "required": ["days"]}
    ok = [{"days": []}, {"days": [{"day": "mon", "hours": [9, 17]}, {"day": "tue"}]},
          {"days": [], "note": None, "count": 3}, {"days": [], "note": "x", "count": None}]
    bad = [{"days": [{"hours": [1]}]}, {"days": [{"day": "wed"}]},
           {"days": [{"day": "mon", "hours": ["9"]}]}, {"days": [], "note": 5},
           {"days": [], "count": "3"}, {"days": {}}]
    assert accepts(schema, *ok) == [True] * len(ok)
    assert accepts(schema, *bad) == [False] * len(bad)


@pytest.mark.parametrize("schema", [
    {"type": "string", "format": "date-time", "pattern": "^x"},  # not enforced: any string
    {"$ref": "#/definitions/thing"},  # unknown: any JSON value
    {},
    True,
])
def test_what_is_not_understood_is_permissive(schema: Any) -> None:
    values = ["2024-01-01", "anything"] if isinstance(schema, dict) and "type" in schema \
        else [{"a": [1, {"b": None}]}, "s", 1.5, True, None, []]
    assert accepts(schema, *values) == [True] * len(values)


def test_const_and_enums_of_any_json() -> None:
    assert accepts({"const": "on"}, "on", "off") == [True, False]
    assert accepts({"enum": [1, "two", None, True]}, 1, "two", None, True, 2, "1") == \
        [True, True, True, True, False, False]


def test_enums_take_non_ascii_as_written() -> None:
    assert accepts({"enum": ["café", "naïve"]}, Raw('"café"'), Raw('"naïve"'),
                   Raw('"cafe"')) == [True, True, False]


def test_literals_escape_quotes_and_newlines() -> None:
    text = 'say "hi"\\\n'
    assert GbnfRegex(f"root ::= {literal(text)}").matches(text)


def test_a_call_names_one_of_the_tools_with_valid_arguments() -> None:
    g = GbnfRegex(call_grammar([("get_weather", WEATHER), ("get_time", {})], max_calls=2))
    call = {"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}}
    other = {"name": "get_time", "arguments": {"zone": "UTC"}}
    tagged = f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
    assert g.matches(tagged)
    assert g.matches(tagged + f"\n<tool_call>{json.dumps(other)}</tool_call>")
    assert not g.matches(tagged * 3)  # at most max_calls
    assert not g.matches(json.dumps(call))  # tags needed unless bare
    assert not g.matches(tagged.replace("get_weather", "get_wether"))
    assert not g.matches(tagged.replace("celsius", "kelvin"))
    assert not g.matches("Sure! " + tagged)
    bare = GbnfRegex(call_grammar([("get_weather", WEATHER)], bare=True))
    assert bare.matches(json.dumps(call)) and bare.matches(tagged)
    assert bare.matches(json.dumps(call) + "\n" + json.dumps(call))  # several, untagged
    one = GbnfRegex(call_grammar([("get_weather", WEATHER)], max_calls=1, bare=True))
    assert one.matches(tagged) and one.matches(json.dumps(call))
    assert not one.matches(tagged + tagged) and not one.matches(json.dumps(call) * 2)


_NESTED = {"type": "object", "properties": {
    "name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
    "size": {"type": "number"}, "meta": {"type": "object", "properties": {
        "on": {"type": "boolean"}, "n": {"type": "integer"}}, "required": ["on"]}},
    "required": ["name"]}
_GRAMMAR = GbnfRegex(schema_grammar(_NESTED))


@given(st.fixed_dictionaries(
    {"name": st.text(max_size=12)},
    optional={"tags": st.lists(st.text(max_size=5), max_size=3),
              "size": st.floats(allow_nan=False, allow_infinity=False),
              "meta": st.tuples(st.booleans(), st.none() | st.integers(-10**6, 10**6)).map(
                  lambda m: {"on": m[0]} | ({} if m[1] is None else {"n": m[1]}))}),
       st.sampled_from([(", ", ": "), (",", ":")]))
def test_any_valid_instance_is_a_sentence(value: dict[str, Any],
                                          separators: tuple[str, str]) -> None:
    order = [k for k in _NESTED["properties"] if k in value]  # the schema's order
    text = json.dumps({k: value[k] for k in order}, separators=separators,
                      ensure_ascii=False)
    assert _GRAMMAR.matches(text), text


# -- a schema's examples are not values ---------------------------------------------

CITY = {"type": "object", "properties": {
    "city": {"type": "string", "description": "The city name, e.g. Paris"}},
    "required": ["city"]}
FLIGHT = {"type": "object", "properties": {
    "flight_number": {"type": "string", "description": "Airline code and number, e.g. BA117"}},
    "required": ["flight_number"]}


def takes(schema: Any, said: str | None, *cities: str) -> list[bool]:
    g = GbnfRegex(schema_grammar(schema, said=said))
    key = next(iter(schema["properties"]))
    return [g.matches(json.dumps({key: c})) for c in cities]


def test_examples_are_read_from_descriptions_and_the_examples_keyword() -> None:
    assert shown_examples(CITY["properties"]["city"]) == ["Paris", "Paris"]
    assert shown_examples({"description": "The city and state, e.g. San Francisco, CA"}) == \
        ["San Francisco, CA", "San Francisco", "CA"]
    assert shown_examples({"description": "A genre (for example 'jazz' or 'rock'). Optional.",
                           "examples": ["pop", 3]}) == ["pop", "jazz' or 'rock", "jazz", "rock"]
    assert shown_examples({"description": "The artist or band"}) == []
    assert shown_examples({}) == []


def test_an_example_the_user_did_not_say_is_no_value() -> None:
    # "Good morning! What's your name?" was answered get_weather(Paris): the
    # description's example, not the user's word
    assert takes(CITY, "Good morning! What's your name?",
                 "Paris", "paris", "PARIS", "Paris, France", " Paris") == [False] * 5
    assert takes(CITY, "Good morning! What's your name?",
                 "London", "Pa", "Par", "Pari", "", "Lyon, near Paris") == [True] * 6
    assert takes(FLIGHT, "I need a jacket in volume", "BA117", "ba117x", "BA 117") == \
        [False, False, True]  # the example barred as a prefix; "BA 117" leaves it


def test_an_example_the_user_said_is_a_value_as_they_said_it() -> None:
    assert takes(CITY, "What's the weather in paris?", "Paris", "Paris, France") == [True] * 2
    assert takes(FLIGHT, "Can you check flight B A 117 for me?", "BA117") == [True]
    # without the user's words (a grammar for its own sake) nothing is barred
    assert takes(CITY, None, "Paris") == [True]


def test_two_examples_with_a_shared_start_are_both_barred() -> None:
    schema = {"type": "object", "properties": {"city": {
        "type": "string", "examples": ["Paris", "Parma", "Pa"]}}, "required": ["city"]}
    assert takes(schema, "hello", "Paris", "Parma", "Parmas") == [False] * 3
    assert takes(schema, "hello", "Pa", "Par", "Parts", "Pamplona") == [True] * 4
    assert takes(schema, "I'm in Parma", "Parma", "Paris") == [True, False]


def test_a_call_grammar_bars_unsaid_examples() -> None:
    grammar = call_grammar([("lookup_flight", FLIGHT)], bare=True, said="Good morning")
    g = GbnfRegex(grammar)
    call = {"name": "lookup_flight", "arguments": {"flight_number": "BA117"}}
    assert not g.matches(json.dumps(call))
    assert g.matches(json.dumps(call).replace("BA117", "LH400"))
