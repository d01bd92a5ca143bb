"""duplex/fields.py: OpenAI's wording and codes for a wrong field."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from duplex import fields as f


@pytest.mark.parametrize(
    ("value", "name"),
    [(True, "a boolean"), (3, "an integer"), (1.5, "a decimal"), ("x", "a string"),
     ([], "an array"), ({}, "an object"), (None, "null"),
     (MappingProxyType({}), "an object"), (object(), "a value")],
)
def test_json_kind(value: object, name: str) -> None:
    assert f.json_kind(value) == name


def test_messages_read_like_openais() -> None:
    assert f.wrong_type("session.instructions", "a string", 3).message == (
        "Invalid type for 'session.instructions': expected a string, but got an integer "
        "instead.")
    assert f.wrong_value("t", "x", ["a", "b", "c"]).message == (
        "Invalid value: 'x'. Supported values are: 'a', 'b' and 'c'.")
    one = f.wrong_value("t", "x", ["a"])
    assert one.message == "Invalid value: 'x'. Supported values are: 'a'."
    low = f.out_of_range("n", -1, 0, 10, integer=True)
    assert (low.code, low.param) == ("integer_below_min_value", "n")
    assert low.message == ("Invalid 'n': integer below minimum value. Expected a value >= 0, "
                           "but got -1 instead.")
    assert f.out_of_range("d", 1.5, 0, 1, integer=False).code == "decimal_above_max_value"
