"""How long each string a client may store is (docs/store.md, "Limits").

Everything a client sends that the session keeps (its config, its conversation
items, a reply's metadata) ends up in Redis, and every server event that echoes
it is journaled too: without a bound per field, one client fills the store
(issue 27). A limit is OpenAI's where OpenAI has one, counted as OpenAI counts
it (characters), with OpenAI's error::

    Invalid 'tools[0].description': string too long. Expected a string with
    maximum length 1024, but got a string with length 1533 instead.
    (code string_above_max_length, param tools[0].description)

Where OpenAI states none, the limit is the gateway's own, in UTF-8 bytes, and
its error says bytes. A refused field changes nothing: the command is refused
whole and the session goes on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from duplex.errors import InvalidRequest
from duplex.fields import wrong_type

__all__ = ["ARGUMENTS", "CALL_ID", "INSTRUCTIONS", "ITEM_ID", "METADATA_KEY", "METADATA_PAIRS",
           "METADATA_VALUE", "NAME", "OUTPUT", "TEXT", "TOOL_DESCRIPTION", "TOOL_PARAMETERS",
           "TRANSCRIPTION_PROMPT", "WORD", "Limit", "bounded", "bounded_json", "metadata"]


@dataclass(frozen=True, slots=True)
class Limit:
    size: int
    bytes: bool = False  # True: UTF-8 bytes (the gateway's own); False: characters (OpenAI's)


KiB = 1024

# OpenAI's own limits (characters)
TOOL_DESCRIPTION = Limit(1024)  # a function tool's description
NAME = Limit(64)  # a function call's name, as a tool's (tools.py's pattern)
CALL_ID = Limit(64)  # a function call's call_id
ITEM_ID = Limit(64)  # an item id a client gives
ARGUMENTS = Limit(1024 * KiB)  # a function call's arguments
TRANSCRIPTION_PROMPT = Limit(1024)  # audio.input.transcription.prompt
METADATA_PAIRS = 16  # response.metadata: at most this many keys ...
METADATA_KEY = Limit(64)  # ... each this long ...
METADATA_VALUE = Limit(512)  # ... holding a string this long

# The gateway's own (UTF-8 bytes): OpenAI documents none
INSTRUCTIONS = Limit(128 * KiB, bytes=True)  # session and response instructions
TEXT = Limit(128 * KiB, bytes=True)  # one content part's text or transcript
OUTPUT = Limit(1024 * KiB, bytes=True)  # a function call output's output
TOOL_PARAMETERS = Limit(16 * KiB, bytes=True)  # one tool's JSON Schema, as JSON
WORD = Limit(256, bytes=True)  # model, voice, transcription model and language


def _size(value: str, limit: Limit) -> int:
    if not limit.bytes or len(value) * 4 <= limit.size:  # UTF-8: at most 4 bytes a character
        return len(value)
    return len(value.encode("utf-8", "surrogatepass"))


def too_long(param: str, size: int, limit: Limit, what: str = "string") -> InvalidRequest:
    unit = " bytes" if limit.bytes else ""
    return InvalidRequest(
        f"Invalid '{param}': {what} too long. Expected a {what} with maximum length "
        f"{limit.size}{unit}, but got a {what} with length {size}{unit} instead.",
        code="string_above_max_length", param=param)


def bounded(value: str, limit: Limit, param: str) -> str:
    """``value``, or ``string_above_max_length`` naming ``param`` when it is longer
    than ``limit``."""
    size = _size(value, limit)
    if size > limit.size:
        raise too_long(param, size, limit)
    return value


def bounded_json(value: object, limit: Limit, param: str) -> None:
    """Refuse a JSON value (a tool's schema) whose text is longer than ``limit``."""
    size = len(json.dumps(value, separators=(",", ":")).encode("utf-8", "surrogatepass"))
    if size > limit.size:
        raise too_long(param, size, limit, "object")


def metadata(value: Mapping[str, Any], param: str) -> Mapping[str, Any]:
    """OpenAI's metadata: at most 16 string values, keys of 64 and values of 512."""
    if len(value) > METADATA_PAIRS:
        raise InvalidRequest(
            f"Invalid '{param}': too many properties. Expected an object with at most "
            f"{METADATA_PAIRS} properties, but got an object with {len(value)} properties "
            "instead.", code="object_above_max_properties", param=param)
    for key, item in value.items():
        bounded(key, METADATA_KEY, param)
        where = f"{param}.{key}"
        if not isinstance(item, str):
            raise wrong_type(where, "a string", item)
        bounded(item, METADATA_VALUE, where)
    return value
