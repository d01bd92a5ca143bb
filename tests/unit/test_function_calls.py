"""Function calling in the sans-I/O core: tools and tool_choice parsed and
checked (``duplex.tools``), a response's output items (``duplex.response``),
calls and their outputs kept in the conversation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from duplex import commands as c
from duplex import effects as fx
from duplex.abilities import ModelAbilities
from duplex.attach import MAX_DURATION, expired_error
from duplex.errors import InvalidRequest
from duplex.events import ServerEvent as E
from duplex.events import item_text, to_beta
from duplex.fence import Fence
from duplex.session import SessionCore
from duplex.tools import (
    NO_TOOLS,
    Tool,
    ToolChoice,
    ToolSet,
    parse_tool_choice,
    parse_tools,
    update_toolset,
)

WEATHER = {"type": "function", "name": "get_weather", "description": "weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
TIME = {"type": "function", "name": "get_time"}


def new_core(**session: Any) -> SessionCore:
    core = SessionCore(Fence("s1", 1, 0, 0))
    if session:
        core.update_session(c.UpdateSession(None, session))
        core.effects()
    return core


def names(effects: list[fx.Effect]) -> list[str]:
    return [e.event["type"] for e in effects if isinstance(e, fx.Emit)]


def emitted(effects: list[fx.Effect], name: str) -> list[dict[str, Any]]:
    return [e.event for e in effects if isinstance(e, fx.Emit) and e.event["type"] == name]


def respond(core: SessionCore, **response: Any) -> list[fx.Effect]:
    cmd = c.parse_command({"type": "response.create", "response": response})
    assert isinstance(cmd, c.CreateResponse)
    core.create_response(cmd)
    return core.effects()


def refused(fn: Any, *args: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        fn(*args)
    return info.value


# -- duplex.tools --------------------------------------------------------------------


def test_tools_parse_with_defaults_and_wire_back() -> None:
    tools = parse_tools([WEATHER, TIME], "session.tools")
    assert tools[1] == Tool("get_time")
    assert tools[1].wire()["parameters"] == {"type": "object", "properties": {}}
    assert tools[0].wire() == WEATHER
    assert parse_tools(None, "t") == ()
    assert parse_tool_choice("required", "c") == ToolChoice("required")
    assert parse_tool_choice({"type": "function", "name": "f"}, "c").wire() == {
        "type": "function", "name": "f"}


@pytest.mark.parametrize(("value", "code", "param"), [
    ("get_weather", "invalid_type", "t"),
    ([WEATHER] * 129, "array_above_max_length", "t"),
    ([WEATHER, WEATHER], "invalid_value", "t[1].name"),
    ([{"type": "mcp"}], "invalid_value", "t[0].type"),
    ([{"type": "function"}], "missing_required_parameter", "t[0].name"),
    ([{"name": 3}], "invalid_type", "t[0].name"),
    ([{"name": "has space"}], "invalid_value", "t[0].name"),
    ([{"name": "f", "description": 1}], "invalid_type", "t[0].description"),
    ([{"name": "f", "parameters": []}], "invalid_type", "t[0].parameters"),
    ([{"name": "f", "parameters": {"type": "string"}}], "invalid_function_parameters",
     "t[0].parameters"),
])
def test_bad_tools_are_refused_naming_the_field(value: object, code: str, param: str) -> None:
    error = refused(parse_tools, value, "t")
    assert (error.code, error.param) == (code, param)


@pytest.mark.parametrize(("value", "code", "param"), [
    ("sometimes", "invalid_value", "c"),
    (7, "invalid_type", "c"),
    ({"type": "mcp"}, "invalid_value", "c.type"),
    ({"type": "function", "name": 1}, "invalid_type", "c.name"),
])
def test_bad_tool_choices_are_refused(value: object, code: str, param: str) -> None:
    error = refused(parse_tool_choice, value, "c")
    assert (error.code, error.param) == (code, param)


def test_a_toolset_says_what_may_be_called() -> None:
    a, b = Tool("a"), Tool("b")
    assert ToolSet((a, b)).callable == (a, b) and not ToolSet((a, b)).must_call
    assert ToolSet((a, b), ToolChoice("none")).callable == ()
    named = ToolSet((a, b), ToolChoice("function", "b"))
    assert named.callable == (b,) and named.must_call
    assert ToolSet((a,), ToolChoice("required")).must_call
    assert update_toolset(named, {}, "session") == named
    error = refused(update_toolset, named, {"tools": [TIME]}, "session")
    assert error.param == "session.tool_choice.name"  # the choice names a tool now gone


# -- session tools -------------------------------------------------------------------


def test_session_update_sets_tools_and_tells_the_model() -> None:
    core = new_core()
    core.update_session(c.UpdateSession(None, {"tools": [WEATHER], "tool_choice": "required"}))
    effects = core.effects()
    changed = [e for e in effects if isinstance(e, fx.ContextChanged)]
    assert changed == [fx.ContextChanged(tools=core.config.tools)]
    session = emitted(effects, E.SESSION_UPDATED)[0]["session"]
    assert session["tools"] == [WEATHER] and session["tool_choice"] == "required"
    core.update_session(c.UpdateSession(None, {"voice": "x"}))  # tools as they were
    assert not [e for e in core.effects() if isinstance(e, fx.ContextChanged)]
    beta = SessionCore(Fence("s2", 1, 0, 0), beta=True, config=core.config)
    assert beta.session_object()["tools"] == [WEATHER]


def test_a_plugin_that_cannot_call_has_tools_refused() -> None:
    core = new_core()
    core.abilities = ModelAbilities(tools=False)
    error = refused(core.update_session, c.UpdateSession(None, {"tools": [WEATHER],
                                                                "instructions": "x"}))
    assert error.param == "session.tools"
    assert core.config.instructions == "" and core.effects() == []
    core.update_session(c.UpdateSession(None, {"tools": []}))  # none is fine
    error = refused(lambda: respond(core, tools=[TIME]))
    assert error.param == "response.tools" and core.response is None


# -- a response's calls --------------------------------------------------------------


def test_a_call_streams_as_an_output_item_and_joins_the_conversation() -> None:
    core = new_core(tools=[WEATHER])
    effects = respond(core)
    assert names(effects) == [E.RESPONSE_CREATED]  # it may call: no message announced yet
    start = next(e for e in effects if isinstance(e, fx.StartResponse))
    assert start.tools is None  # the session's
    fence = core.response.fence if core.response else None
    assert fence is not None
    assert core.function_call(fence, "get_weather", '{"city":"Oslo"}')
    effects = core.effects()
    assert names(effects) == [E.OUTPUT_ITEM_ADDED, E.ITEM_ADDED, E.CALL_ARGUMENTS_DELTA,
                              E.CALL_ARGUMENTS_DONE, E.OUTPUT_ITEM_DONE, E.ITEM_DONE]
    done = emitted(effects, E.CALL_ARGUMENTS_DONE)[0]
    item = core.items[done["item_id"]]
    assert (item["type"], item["call_id"], item["name"], json.loads(item["arguments"])) == (
        "function_call", done["call_id"], "get_weather", {"city": "Oslo"})
    assert emitted(effects, E.OUTPUT_ITEM_ADDED)[0]["item"]["arguments"] == ""
    assert any(isinstance(e, fx.SaveItem) and e.item_id == item["id"] for e in effects)
    # no words after a call; a second call is the next output item
    assert not core.assistant_audio(fence, "", 100.0, "late words")
    assert core.function_call(fence, "get_weather", "")
    effects = core.effects()
    assert E.CALL_ARGUMENTS_DELTA not in names(effects)  # nothing to stream
    assert emitted(effects, E.OUTPUT_ITEM_ADDED)[0]["output_index"] == 1
    core.response_end(fence)
    done_response = emitted(core.effects(), E.RESPONSE_DONE)[0]["response"]
    assert [o["type"] for o in done_response["output"]] == ["function_call"] * 2
    assert core.history()[-1]["type"] == "function_call"
    assert not core.function_call(fence, "get_weather", "{}")  # stale: the response ended


def test_words_then_a_call_close_the_message_first() -> None:
    core = new_core(tools=[WEATHER])
    respond(core)
    assert core.response is not None
    fence = core.response.fence
    assert core.assistant_audio(fence, "QUJD", 200.0, "Let me check.")
    effects = core.effects()
    assert names(effects)[:3] == [E.OUTPUT_ITEM_ADDED, E.ITEM_ADDED, E.CONTENT_PART_ADDED]
    assert core.function_call(fence, "get_weather", "{}")
    kinds = names(core.effects())
    assert kinds[:5] == [E.AUDIO_DONE, E.AUDIO_TRANSCRIPT_DONE, E.CONTENT_PART_DONE,
                         E.OUTPUT_ITEM_DONE, E.ITEM_DONE]
    core.response_end(fence)
    effects = core.effects()
    assert names(effects) == [E.RESPONSE_DONE, E.RATE_LIMITS_UPDATED]
    output = emitted(effects, E.RESPONSE_DONE)[0]["response"]["output"]
    assert [(o["type"], o["status"]) for o in output] == [("message", "completed"),
                                                          ("function_call", "completed")]
    assert [i["type"] for i in core.history()] == ["message", "function_call"]


def test_an_out_of_band_call_stays_out_of_the_conversation() -> None:
    core = new_core()
    respond(core, conversation="none", tools=[TIME], tool_choice="required")
    assert core.response is not None
    start_tools = core.response.tools
    assert start_tools.must_call
    assert core.function_call(core.response.fence, "get_time", "{}")
    effects = core.effects()
    assert E.ITEM_ADDED not in names(effects) and E.ITEM_DONE not in names(effects)
    assert core.items == {}


def test_per_response_tools_and_choice() -> None:
    core = new_core(tools=[WEATHER, TIME])
    effects = respond(core, tool_choice={"type": "function", "name": "get_time"})
    start = next(e for e in effects if isinstance(e, fx.StartResponse))
    assert start.tools is not None and [t.name for t in start.tools.callable] == ["get_time"]
    assert core.response is not None
    core.cancel_response(c.CancelResponse(None, None))
    core.effects()
    effects = respond(core, tool_choice="none")
    assert names(effects)[:2] == [E.RESPONSE_CREATED, E.OUTPUT_ITEM_ADDED]  # words only
    assert core.response is not None
    core.cancel_response(c.CancelResponse(None, None))
    core.effects()
    error = refused(lambda: respond(core, tools=[WEATHER],
                                    tool_choice={"type": "function", "name": "get_time"}))
    assert error.param == "response.tool_choice.name"
    assert new_core().config.tools == NO_TOOLS


def test_parallel_tool_calls_false_keeps_one_call_a_response() -> None:
    core = new_core(tools=[WEATHER, TIME], parallel_tool_calls=False)
    assert core.session_object()["parallel_tool_calls"] is False
    beta = SessionCore(Fence("s2", 1, 0, 0), beta=True, config=core.config)
    assert "parallel_tool_calls" not in beta.session_object()  # not a beta field
    effects = respond(core)
    start = next(e for e in effects if isinstance(e, fx.StartResponse))
    assert start.tools is None and core.response is not None  # the plugin sees the session's
    fence = core.response.fence
    assert core.function_call(fence, "get_weather", '{"city":"Oslo"}')
    assert not core.function_call(fence, "get_time", "{}")  # a second call is dropped
    core.effects()
    core.response_end(fence)
    output = emitted(core.effects(), E.RESPONSE_DONE)[0]["response"]["output"]
    assert [o["name"] for o in output] == ["get_weather"]
    # a response may allow several calls where the session does not
    effects = respond(core, parallel_tool_calls=True)
    start = next(e for e in effects if isinstance(e, fx.StartResponse))
    assert start.tools is not None and start.tools.parallel
    assert core.response is not None
    fence = core.response.fence
    assert core.function_call(fence, "get_weather", "{}")
    assert core.function_call(fence, "get_time", "{}")
    core.response_end(fence)
    output = emitted(core.effects(), E.RESPONSE_DONE)[0]["response"]["output"]
    assert [(o["name"], i) for i, o in enumerate(output)] == [("get_weather", 0),
                                                              ("get_time", 1)]
    error = refused(lambda: respond(core, parallel_tool_calls="no"))
    assert (error.code, error.param) == ("invalid_type", "response.parallel_tool_calls")
    error = refused(core.update_session, c.UpdateSession(None, {"parallel_tool_calls": 1}))
    assert error.param == "session.parallel_tool_calls"


def test_a_cancelled_call_only_response_has_no_message() -> None:
    core = new_core(tools=[WEATHER])
    respond(core)
    core.cancel_response(c.CancelResponse(None, None))
    done = emitted(core.effects(), E.RESPONSE_DONE)[0]["response"]
    assert (done["status"], done["output"]) == ("cancelled", [])


# -- call items from the client -----------------------------------------------------


def test_calls_and_outputs_are_created_kept_and_heard() -> None:
    core = new_core()
    core.create_item(c.CreateItem(None, {"type": "function_call", "call_id": "c1",
                                         "name": "get_weather"}, None))
    effects = core.effects()
    call = core.items[next(iter(core.items))]
    assert call["arguments"] == "" and call["status"] == "completed"
    assert [e for e in effects if isinstance(e, fx.ContextChanged)] == [
        fx.ContextChanged(items=(call,))]
    core.create_item(c.CreateItem(None, {"type": "function_call_output", "call_id": "c1",
                                         "output": ""}, None))
    effects = core.effects()
    assert [type(e).__name__ for e in effects].count("ContextChanged") == 1  # heard, if empty
    assert item_text({"type": "function_call_output", "output": "17"}) == "17"
    assert to_beta({"type": E.ITEM_ADDED, "item": call})["type"] == "conversation.item.created"


# -- transcription-only sessions and a session's end --------------------------------


def test_a_transcription_session_transcribes_and_never_replies() -> None:
    core = new_core(type="transcription")
    assert core.config.transcribing_only and core.config.transcription == "default"
    wire = core.session_object()
    assert (wire["type"], wire["object"]) == ("transcription", "realtime.transcription_session")
    assert "output_modalities" not in wire
    core.audio_appended(600.0)
    core.speech_started(0)
    core.speech_stopped(600)
    commits = [e for e in core.effects() if isinstance(e, fx.CommitAudio)]
    assert [c_.respond for c_ in commits] == [False]  # VAD's create_response does not apply
    error = refused(lambda: respond(core))
    assert error.param == "type" and core.response is None
    beta = SessionCore(Fence("s2", 1, 0, 0), beta=True)
    beta.update_session(c.UpdateSession(None, {"type": "transcription",
                                               "input_audio_transcription": None}))
    updated = next(e.event for e in beta.effects() if isinstance(e, fx.Emit))
    assert updated["type"] == "transcription_session.updated"
    assert updated["session"]["input_audio_transcription"] == {"model": "default"}
    assert updated["session"]["modalities"] == ["text"]


def test_an_expired_session_is_told_in_openai_form() -> None:
    lifetime = expired_error(MAX_DURATION, 3600.0)["error"]
    assert (lifetime["code"], lifetime["type"]) == ("session_expired", "invalid_request_error")
    assert lifetime["message"] == "Your session hit the maximum duration of 60 minutes."
    assert "idle_ttl_expired" in expired_error("idle_ttl_expired", 3600.0)["error"]["message"]


# -- idle_timeout_ms ------------------------------------------------------------------


def idle_core(idle_ms: int | None = 800, **td: Any) -> SessionCore:
    return new_core(turn_detection={"type": "server_vad", "idle_timeout_ms": idle_ms, **td})


def finish_reply(core: SessionCore, audio_ms: float = 1200.0) -> list[fx.Effect]:
    respond(core)
    assert core.response is not None
    fence = core.response.fence
    core.assistant_audio(fence, "QUJD", audio_ms, "Hello there.")
    core.response_end(fence)
    return core.effects()


def test_an_idle_timer_starts_when_a_reply_ends_and_its_timeout_answers() -> None:
    core = idle_core()
    timers = [e for e in finish_reply(core) if isinstance(e, fx.IdleTimer)]
    assert timers == [fx.IdleTimer(core.idle.token, 800, 1200.0)]
    core.audio_appended(2000.0)  # the caller stays silent
    core.idle_elapsed(timers[0].token - 1)  # a stale timer does nothing
    assert core.effects() == []
    core.idle_elapsed(timers[0].token)
    effects = core.effects()
    assert names(effects)[:2] == [E.INPUT_TIMEOUT, E.INPUT_COMMITTED]
    triggered = emitted(effects, E.INPUT_TIMEOUT)[0]
    assert (triggered["audio_start_ms"], triggered["audio_end_ms"]) == (1200, 2000)
    assert triggered["item_id"] == emitted(effects, E.INPUT_COMMITTED)[0]["item_id"]
    commit = next(e for e in effects if isinstance(e, fx.CommitAudio))
    assert commit.respond and core.response is not None  # the reply prompts the caller
    core.idle_elapsed(timers[0].token)  # spent
    assert core.effects() == []


def test_speech_or_a_new_reply_makes_the_idle_timer_moot() -> None:
    core = idle_core()
    token = next(e for e in finish_reply(core) if isinstance(e, fx.IdleTimer)).token
    core.speech_started(100)
    core.effects()
    core.idle_elapsed(token)
    assert E.INPUT_TIMEOUT not in names(core.effects())
    token = next(e for e in finish_reply(core) if isinstance(e, fx.IdleTimer)).token
    respond(core)
    core.idle_elapsed(token)
    assert E.INPUT_TIMEOUT not in names(core.effects())
    assert not [e for e in finish_reply(new_core()) if isinstance(e, fx.IdleTimer)]
    semantic = new_core(turn_detection={"type": "semantic_vad"})
    assert not [e for e in finish_reply(semantic) if isinstance(e, fx.IdleTimer)]
    core.close("bye")
    core.effects()
    core.idle_elapsed(core.idle.token)
    assert core.effects() == []


# -- response.input ---------------------------------------------------------------------


def test_a_response_from_its_own_input() -> None:
    core = new_core()
    core.create_item(c.CreateItem(None, {"type": "message", "role": "user", "id": "kept",
                                         "content": [{"type": "input_text", "text": "hi"}]},
                                  None))
    core.effects()
    effects = respond(core, conversation="none", input=[
        {"type": "item_reference", "id": "kept"},
        {"type": "function_call_output", "call_id": "c9", "output": "17"}])
    start = next(e for e in effects if isinstance(e, fx.StartResponse))
    assert start.input is not None
    assert [i["type"] for i in start.input] == ["message", "function_call_output"]
    assert start.input[0] == core.items["kept"] and start.input[0] is not core.items["kept"]
    core.cancel_response(c.CancelResponse(None, None))
    core.effects()
    error = refused(lambda: respond(core, input=[{"type": "item_reference"}]))
    assert error.param == "response.input[0].id"
    error = refused(lambda: respond(core, input=[{"type": "function_call", "name": "f"}]))
    assert error.param == "response.input[0].call_id"
    core.abilities = ModelAbilities(response_input=False)
    error = refused(lambda: respond(core, input=[]))
    assert error.param == "response.input" and core.response is None
    assert next(e for e in respond(core) if isinstance(e, fx.StartResponse)).input is None


def test_a_reply_modality_the_plugin_lacks_is_refused() -> None:
    core = new_core()
    core.abilities = ModelAbilities(output_modes=("audio",))
    error = refused(core.update_session, c.UpdateSession(None, {"output_modalities": ["text"]}))
    assert error.param == "session.output_modalities"
    assert core.config.output_modalities == ("audio",)
    error = refused(lambda: respond(core, output_modalities=["text"]))
    assert error.param == "response.output_modalities" and core.response is None
    assert names(respond(core, output_modalities=["audio"]))[0] == E.RESPONSE_CREATED
