"""Scoring the spoken tool quiz (``bench/tool_quiz.py``) from what a turn's
response held, sans-I/O so ``tests/unit`` can check it on fixed events.

A tool request is right when its response makes exactly one call, to the right
tool, whose arguments parse as JSON, validate against the tool's schema and
carry the right values (compared normalised: case, spacing and punctuation,
unit words). An extra argument the request did not name is allowed when it is
one of the schema's own enum choices (a default unit or genre plays what was
asked), not when it is free text (an invented artist plays something else). A
request no tool fits is right when nothing is called. Either way, the words
spoken before the tool has answered must not state a result: a temperature,
a flight's status, a timer running, a song playing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import jsonschema
from tool_requests import TOOLS, Ask

SCHEMAS = {t["name"]: t["parameters"] for t in TOOLS}

_UNITS = {"c": "celsius", "celsius": "celsius", "centigrade": "celsius",
          "degrees celsius": "celsius", "f": "fahrenheit", "fahrenheit": "fahrenheit",
          "degrees fahrenheit": "fahrenheit"}

# words only a result states, by tool: said before the tool answered, invented
_INVENTED = {
    "get_weather": r"\d+\s*(degrees|°)|\bdegrees\b|\b(sunny|cloudy|overcast|clear sky|"
                   r"clear skies|it is raining|it's raining|currently raining|showers|drizzle)\b",
    "set_timer": r"\b(timer (is|has been) (set|started)|i've set|i have set|i set a timer|"
                 r"timer set|will ring|i'll remind)\b",
    "lookup_flight": r"\b(on time|delayed|has landed|landed at|departs at|departed|"
                     r"gate [a-z]?\d+|scheduled to (arrive|depart))\b",
    "play_music": r"\b(now playing|playing now|here's|here is|enjoy)\b",
}


@dataclass(frozen=True)
class Call:
    name: str
    arguments: str  # as the server sent it


def norm(key: str, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    text = re.sub(r"[^a-z0-9 ]", " ", value.lower())
    text = " ".join(text.split())
    if key == "unit":
        return _UNITS.get(text.removeprefix("the "), text)
    if key == "flight_number":
        return text.replace(" ", "")  # "BA 117", "ba-117", "BA117"
    return text.removeprefix("the ")


def check_call(ask: Ask, calls: list[Call]) -> str | None:
    """Why the calls are wrong for ``ask``, or None when right."""
    if ask.tool is None:
        return None if not calls else f"called {', '.join(c.name for c in calls)}"
    if not calls:
        return "no call"
    if len(calls) > 1:
        return f"{len(calls)} calls"
    call = calls[0]
    if call.name != ask.tool:
        return f"called {call.name}"
    try:
        args = json.loads(call.arguments)
        jsonschema.validate(args, SCHEMAS[call.name])
    except (ValueError, jsonschema.ValidationError) as e:
        return f"arguments invalid: {str(e).splitlines()[0]}"
    for key, want in ask.args.items():
        if norm(key, args.get(key)) != norm(key, want):
            return f"{key}={args.get(key)!r}, wanted {want!r}"
    props = SCHEMAS[call.name].get("properties", {})
    for key in args.keys() - ask.args.keys():
        if "enum" not in props.get(key, {}):
            return f"invented {key}={args[key]!r}"
    return None


def invented(ask: Ask, spoken: str) -> bool:
    """Whether words spoken before the tool answered state its result."""
    return bool(ask.tool and re.search(_INVENTED[ask.tool], spoken.lower()))


def used(ask: Ask, reply: str) -> bool:
    """Whether the reply after the tool's answer uses it (a word of each group)."""
    got = set(re.findall(r"[a-z0-9:']+", reply.lower().replace("-", " ")))
    got |= {w.replace(":", "") for w in got}
    return all(group & got for group in ask.uses)
