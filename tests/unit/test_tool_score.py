"""The spoken tool quiz's scorer (bench/tool_score.py) on fixed calls and words,
so a figure it prints means what its docstring says."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from tool_requests import Ask, chat, flight, music, weather
from tool_score import Call, check_call, invented, used

PHOENIX = weather("How hot is it in Phoenix, in Fahrenheit?", "phoenix", "fahrenheit")
PARIS = weather("What's the weather in Paris?", "paris")


def test_right_call_compares_values_normalised() -> None:
    right = Call("get_weather", '{"city": "Phoenix", "unit": "fahrenheit"}')
    assert check_call(PHOENIX, [right]) is None
    assert check_call(flight("Check BA 117", "BA117"),
                      [Call("lookup_flight", '{"flight_number": "ba 117"}')]) is None
    assert check_call(music("Play Queen", artist="queen"),
                      [Call("play_music", '{"artist": "Queen"}')]) is None


def test_wrong_calls_say_why() -> None:
    assert check_call(PHOENIX, []) == "no call"
    assert check_call(PHOENIX, [Call("set_timer", '{"minutes": 5}')]) == "called set_timer"
    assert check_call(PHOENIX, [Call("get_weather", '{"city": "Phoenix", "unit": "celsius"}')]) \
        == "unit='celsius', wanted 'fahrenheit'"
    assert check_call(PHOENIX, [Call("get_weather", '{"city": "Phoenix", "unit": "kelvin"}')]
                      ).startswith("arguments invalid")
    assert check_call(PHOENIX, [Call("get_weather", '{"city": ')]).startswith("arguments invalid")
    two = [Call("get_weather", '{"city": "Phoenix", "unit": "fahrenheit"}')] * 2
    assert check_call(PHOENIX, two) == "2 calls"


def test_extra_arguments_an_enum_may_add_free_text_may_not() -> None:
    assert check_call(PARIS, [Call("get_weather", '{"city": "Paris", "unit": "celsius"}')]) is None
    jazz = music("Play some jazz.", genre="jazz")
    assert check_call(jazz, [Call("play_music", '{"genre": "jazz", "artist": "Miles Davis"}')]) \
        == "invented artist='Miles Davis'"


def test_no_tool_fits_means_no_call() -> None:
    ask = chat("Who wrote Hamlet?")
    assert check_call(ask, []) is None
    assert check_call(ask, [Call("play_music", "{}")]) == "called play_music"
    assert not invented(ask, "It is 20 degrees and sunny.")  # not a tool request


def test_invented_results_and_used_results() -> None:
    assert invented(PARIS, "It's 18 degrees and sunny in Paris.")
    assert not invented(PARIS, "Let me check the weather in Paris.")
    assert used(PARIS, "It's 31 degrees with thunderstorms in Paris.")
    assert not used(PARIS, "It's a lovely day in Paris.")
    assert isinstance(PARIS, Ask) and PARIS.result and PARIS.result["temperature"] == 31
