"""Optional free text nobody said is left out of a call (``plugins.cascade.unsaid``):
what is kept, what is left out, and values said in another form passing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from plugins.cascade.unsaid import is_said, said_words, without_unsaid

# the tool quiz's play_music (bench/tool_requests.py)
MUSIC: dict[str, Any] = {"type": "object", "properties": {
    "artist": {"type": "string", "description": "The artist or band"},
    "genre": {"type": "string", "enum": ["jazz", "rock", "pop", "classical", "hip hop"]}},
    "additionalProperties": False}
FLIGHT: dict[str, Any] = {"type": "object", "properties": {
    "flight_number": {"type": "string", "description": "Airline code and number, e.g. BA117"},
    "note": {"type": "string"}}, "required": ["flight_number"]}


def kept(schema: Any, said: str, **args: Any) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(without_unsaid(json.dumps(args), schema, said))
    return out


@pytest.mark.parametrize(("said", "args", "left"), [
    # the tool quiz's three misses (bench/README.md, tool_quiz, 2026-12-04)
    ("I'd like to hear some classical music.", {"artist": "Beethoven", "genre": "classical"},
     {"genre": "classical"}),
    ("While I wait, play some pop music.", {"artist": "The Beatles", "genre": "pop"},
     {"genre": "pop"}),
    # "jazz" said once, written twice: the enum keeps it
    ("Play some jazz.", {"artist": "Jazz", "genre": "jazz"}, {"genre": "jazz"}),
    ("Play something.", {"artist": "Adele"}, {}),
    ("Play something.", {"artist": ""}, {}),
])
def test_optional_free_text_nobody_said_is_left_out(said: str, args: dict[str, Any],
                                                    left: dict[str, Any]) -> None:
    assert kept(MUSIC, said, **args) == left


@pytest.mark.parametrize(("said", "artist"), [
    ("Put on something by taylor swift.", "Taylor Swift"),
    ("Play rock music by Queen.", "Queen"),
    ("Can you play Miles Davis?", "Miles Davis"),
    ("play some ac dc", "AC/DC"),
    ("play some beatles songs", "The Beatles"),  # a leading "the" is no word of it
    ("Play Jay-Z", "Jay Z"),
])
def test_a_value_said_in_another_form_is_kept(said: str, artist: str) -> None:
    assert kept(MUSIC, said, artist=artist, genre="rock") == {"artist": artist, "genre": "rock"}


def test_a_value_must_be_whole_words_in_a_row() -> None:
    words = said_words("Put on something by Taylor Swift, please.")
    assert is_said("taylor swift", words) and is_said("Swift", words)
    assert not is_said("Tay", words)  # part of a word
    assert not is_said("Swift Taylor", words)  # not in a row
    assert not is_said("by Taylor Swift please now", words)  # runs past what was said
    assert not is_said("", words) and not is_said("!", words)


def test_required_and_constrained_values_keep_todays_rule() -> None:
    # a required value may be normalised ("BA 117" -> BA117): not this rule's
    assert kept(FLIGHT, "Is BA 117 late?", flight_number="BA117") == {"flight_number": "BA117"}
    assert kept(FLIGHT, "Good morning", flight_number="XY1") == {"flight_number": "XY1"}
    assert kept(FLIGHT, "Is BA 117 late?", flight_number="BA117", note="urgent") == \
        {"flight_number": "BA117"}
    fixed = {"type": "object", "properties": {
        "when": {"type": "string", "format": "date"},  # a normalised form, not free text
        "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "mode": {"const": "fast"}}}
    assert kept(fixed, "tomorrow to Paris", when="2026-12-05", code="CDG", mode="fast") == \
        {"when": "2026-12-05", "code": "CDG", "mode": "fast"}


def test_two_free_texts_take_one_said_word_once() -> None:
    song = {"type": "object", "properties": {"title": {"type": "string"},
                                             "artist": {"type": "string"}}}
    assert kept(song, "play Hello by Adele", title="Hello", artist="Adele") == \
        {"title": "Hello", "artist": "Adele"}
    assert kept(song, "play Hello", title="Hello", artist="hello") == {"title": "Hello"}


def test_nested_objects_follow_the_rule_and_tied_objects_are_left_alone() -> None:
    nested = {"type": "object", "properties": {"song": MUSIC}, "required": ["song"]}
    assert kept(nested, "play some pop", song={"artist": "Madonna", "genre": "pop"}) == \
        {"song": {"genre": "pop"}}
    tied = {**MUSIC, "anyOf": [{"required": ["artist"]}, {"required": ["genre"]}]}
    assert kept(tied, "play something", artist="Madonna") == {"artist": "Madonna"}
    assert kept({**MUSIC, "minProperties": 1}, "play", artist="Madonna") == \
        {"artist": "Madonna"}


def test_the_text_is_unchanged_when_nothing_is_left_out() -> None:
    text = '{"artist":"Queen",  "genre": "rock"}'
    assert without_unsaid(text, MUSIC, "Play rock music by Queen.") == text
    assert without_unsaid("not json", MUSIC, "") == "not json"
    assert without_unsaid("[1]", MUSIC, "") == "[1]"
