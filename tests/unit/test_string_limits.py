"""Every string a client may store has a limit (``duplex.limits``): OpenAI's,
with OpenAI's error, where OpenAI has one; the gateway's own in bytes where it
has none. A refused command changes nothing and the session goes on."""

from __future__ import annotations

from typing import Any

import pytest

from duplex import commands as c
from duplex import limits
from duplex.config import SessionConfig, apply_update
from duplex.errors import InvalidRequest
from duplex.events import ServerEvent as E
from duplex.fence import Fence
from duplex.session import SessionCore


def over(limit: limits.Limit, char: str = "x") -> str:
    """A string one unit past ``limit``."""
    per = len(char.encode()) if limit.bytes else 1
    return char * (limit.size // per + 1)


def refused(call: Any, param: str, code: str = "string_above_max_length") -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        call()
    assert (caught.value.code, caught.value.param) == (code, param)
    return caught.value


def test_openai_limits_are_counted_in_characters_with_openai_words() -> None:
    long = "é" * 1025  # 2050 bytes: a character limit counts 1025
    exc = refused(lambda: limits.bounded(long, limits.TOOL_DESCRIPTION, "tools[0].description"),
                  "tools[0].description")
    assert exc.message == ("Invalid 'tools[0].description': string too long. Expected a "
                           "string with maximum length 1024, but got a string with length "
                           "1025 instead.")
    assert limits.bounded("é" * 1024, limits.TOOL_DESCRIPTION, "p") == "é" * 1024


def test_the_gateways_own_limits_are_counted_in_utf8_bytes() -> None:
    size = limits.INSTRUCTIONS.size
    fits = "é" * (size // 2)  # exactly the limit in bytes, half of it in characters
    assert limits.bounded(fits, limits.INSTRUCTIONS, "p") is fits
    exc = refused(lambda: limits.bounded(fits + "x", limits.INSTRUCTIONS, "p"), "p")
    assert f"maximum length {size} bytes" in exc.message
    assert f"length {size + 1} bytes instead" in exc.message


def test_a_short_string_is_not_encoded_to_be_measured() -> None:
    # four bytes a character at most: under a quarter of the limit always fits
    assert limits.bounded("\U0001f600" * 10, limits.WORD, "p") == "\U0001f600" * 10
    refused(lambda: limits.bounded("\U0001f600" * 65, limits.WORD, "p"), "p")


@pytest.mark.parametrize(("session", "param"), [
    ({"instructions": over(limits.INSTRUCTIONS)}, "session.instructions"),
    ({"model": over(limits.WORD)}, "session.model"),
    ({"voice": over(limits.WORD)}, "session.voice"),
    ({"audio": {"output": {"voice": over(limits.WORD)}}}, "session.audio.output.voice"),
    ({"audio": {"input": {"transcription": {"model": over(limits.WORD)}}}},
     "session.audio.input.transcription.model"),
    ({"audio": {"input": {"transcription": {"language": over(limits.WORD)}}}},
     "session.audio.input.transcription.language"),
    ({"audio": {"input": {"transcription": {"prompt": over(limits.TRANSCRIPTION_PROMPT)}}}},
     "session.audio.input.transcription.prompt"),
    ({"tools": [{"type": "function", "name": "f",
                 "description": over(limits.TOOL_DESCRIPTION)}]}, "session.tools[0].description"),
    ({"tools": [{"type": "function", "name": "f", "parameters": {
        "type": "object", "description": over(limits.TOOL_PARAMETERS)}}]},
     "session.tools[0].parameters"),
])
def test_session_update_fields_are_bounded(session: dict[str, Any], param: str) -> None:
    refused(lambda: apply_update(SessionConfig(), session), param)


def test_fields_at_their_limits_are_taken() -> None:
    config = apply_update(SessionConfig(), {
        "instructions": "i" * limits.INSTRUCTIONS.size, "voice": "v" * limits.WORD.size,
        "tools": [{"type": "function", "name": "f", "description": "d" * 1024}]})
    assert len(config.instructions) == limits.INSTRUCTIONS.size
    assert config.tools.tools[0].description == "d" * 1024


def test_response_instructions_and_metadata_are_bounded() -> None:
    def create(response: dict[str, Any]) -> Any:
        return lambda: c.parse_command({"type": "response.create", "response": response})

    refused(create({"instructions": over(limits.INSTRUCTIONS)}), "response.instructions")
    many = {f"k{i}": "v" for i in range(limits.METADATA_PAIRS + 1)}
    exc = refused(create({"metadata": many}), "response.metadata", "object_above_max_properties")
    assert "at most 16 properties, but got an object with 17" in exc.message
    refused(create({"metadata": {"k" * 65: "v"}}), "response.metadata")
    refused(create({"metadata": {"k": "v" * 513}}), "response.metadata.k")
    refused(create({"metadata": {"k": 1}}), "response.metadata.k", "invalid_type")
    fine = {f"k{i}": "v" * 512 for i in range(limits.METADATA_PAIRS)}
    cmd = c.parse_command({"type": "response.create", "response": {"metadata": fine}})
    assert isinstance(cmd, c.CreateResponse) and cmd.metadata == fine


def core() -> SessionCore:
    return SessionCore(Fence("s1", 1, 0, 0), SessionConfig(turn_detection=None))


@pytest.mark.parametrize(("item", "param"), [
    ({"type": "message", "role": "user",
      "content": [{"type": "input_text", "text": "ok"},
                  {"type": "input_text", "text": over(limits.TEXT, "é")}]},
     "item.content[1].text"),
    ({"type": "message", "role": "assistant",
      "content": [{"type": "output_audio", "transcript": over(limits.TEXT)}]},
     "item.content[0].transcript"),
    ({"type": "message", "role": "user", "id": over(limits.ITEM_ID),
      "content": [{"type": "input_text", "text": "hi"}]}, "item.id"),
    ({"type": "function_call", "call_id": over(limits.CALL_ID), "name": "f"}, "item.call_id"),
    ({"type": "function_call", "call_id": "c", "name": over(limits.NAME)}, "item.name"),
    ({"type": "function_call", "call_id": "c", "name": "f",
      "arguments": over(limits.ARGUMENTS)}, "item.arguments"),
    ({"type": "function_call_output", "call_id": "c", "output": over(limits.OUTPUT)},
     "item.output"),
])
def test_conversation_items_are_bounded_and_the_session_goes_on(item: dict[str, Any],
                                                                 param: str) -> None:
    s = core()
    refused(lambda: s.create_item(c.CreateItem(None, item, None)), param)
    assert not s.items and not s.effects()
    s.create_item(c.CreateItem(None, {"type": "message", "role": "user",
                                      "content": [{"type": "input_text", "text": "hi"}]}, None))
    assert len(s.items) == 1 and s.effects()


def test_a_reply_input_item_is_bounded_as_a_conversation_item() -> None:
    s = core()
    given = ({"type": "function_call_output", "call_id": "c", "output": over(limits.OUTPUT)},)
    refused(lambda: s.conversation.input_items(given), "response.input[0].output")


def test_a_too_long_update_leaves_the_config_and_emits_nothing() -> None:
    s = core()
    before = s.config
    refused(lambda: s.update_session(c.UpdateSession(None, {
        "instructions": over(limits.INSTRUCTIONS)})), "session.instructions")
    assert s.config is before and not s.effects()
    s.update_session(c.UpdateSession(None, {"instructions": "short"}))
    assert [e.event["type"] for e in s.effects() if hasattr(e, "event")] == [
        E.SESSION_UPDATED.value]
