"""SessionCore (duplex/session.py) driven input by input; the pulled effects are asserted."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from duplex import commands as c
from duplex import effects as fx
from duplex.config import TurnDetection
from duplex.dispatch import apply_command
from duplex.errors import DuplexError, InvalidRequest, SessionStateError
from duplex.events import ServerEvent as E
from duplex.fence import Fence
from duplex.session import MIN_COMMIT_MS, SessionCore
from duplex.turns import TurnState
from tests.effect_helpers import said

F0 = Fence("s1", 1, 0, 0)

OPENING = [E.RESPONSE_CREATED, E.OUTPUT_ITEM_ADDED, E.ITEM_ADDED, E.CONTENT_PART_ADDED]
# research/peers.md §3.1, output ordering after the deltas
CLOSING = [E.AUDIO_DONE, E.AUDIO_TRANSCRIPT_DONE, E.CONTENT_PART_DONE, E.OUTPUT_ITEM_DONE,
           E.ITEM_DONE, E.RESPONSE_DONE, E.RATE_LIMITS_UPDATED]
CHUNKS = [("Hello ", 200.0), ("there my ", 200.0), ("friend.", 200.0)]


# -- helpers -------------------------------------------------------------------------


VAD = TurnDetection()  # defaults: create_response and interrupt_response on


def new_core(turn_detection: TurnDetection | None = VAD, **td: Any) -> SessionCore:
    core = SessionCore(Fence("s1", 1, 0, 0))
    if turn_detection is not None and td:
        turn_detection = replace(turn_detection, **td)
    core.config = replace(core.config, turn_detection=turn_detection)
    return core


def state(core: SessionCore) -> TurnState:
    return core.turn_state  # a call, so mypy does not narrow the attribute across inputs


def events(effects: list[fx.Effect]) -> list[dict[str, Any]]:
    return [e.event for e in effects if isinstance(e, fx.Emit)]


def names(effects: list[fx.Effect]) -> list[str]:
    return [e["type"] for e in events(effects)]


def kinds(effects: list[fx.Effect]) -> list[str]:
    return [e.event["type"] if isinstance(e, fx.Emit) else type(e).__name__ for e in effects]


def only(effects: list[fx.Effect], kind: type[Any]) -> list[Any]:
    return [e for e in effects if isinstance(e, kind)]


def one_event(effects: list[fx.Effect], name: str) -> dict[str, Any]:
    found = [e for e in events(effects) if e["type"] == name]
    assert len(found) == 1, names(effects)
    return found[0]


def vad_turn(core: SessionCore, ms: float = 600.0) -> list[fx.Effect]:
    core.audio_appended(ms)
    core.speech_started(0)
    core.speech_stopped(int(ms))
    return core.effects()


def speak(core: SessionCore, chunks: list[tuple[str, float]] = CHUNKS) -> None:
    assert core.response is not None
    for text, ms in chunks:
        assert core.assistant_audio(core.response.fence, "AAAA", ms, text)
    core.effects()


def raises(code: str, fn: Any, *args: Any) -> DuplexError:
    with pytest.raises(DuplexError) as info:
        fn(*args)
    assert info.value.code == code, info.value
    return info.value


# -- input audio --------------------------------------------------------------------


@pytest.mark.parametrize("ms", [0.0, 40.0, 99.9])
def test_commit_below_100ms_is_commit_empty(ms: float) -> None:
    core = new_core()
    core.audio_appended(ms)
    err = raises("input_audio_buffer_commit_empty", core.commit, c.CommitInput("e1"))
    assert isinstance(err, InvalidRequest)
    assert core.effects() == []
    assert core.input.ms == ms  # the buffer is kept
    assert core.items == {} and core.fence == F0


def test_a_client_commit_in_server_vad_mode_does_not_respond() -> None:
    """OpenAI: ``create_response`` governs VAD commits only; a client's commit
    waits for its ``response.create``."""
    core = new_core()
    assert core.config.turn_detection is not None
    assert core.config.turn_detection.create_response
    core.audio_appended(MIN_COMMIT_MS)
    core.commit(c.CommitInput(None))
    effects = core.effects()
    assert names(effects)[:3] == [E.INPUT_COMMITTED, E.ITEM_ADDED, E.ITEM_DONE]
    (commit,) = only(effects, fx.CommitAudio)
    assert commit.respond is False and commit.fence == F0
    assert E.RESPONSE_CREATED not in names(effects)
    assert core.response is None and core.input.ms == 0.0


def test_a_vad_commit_responds() -> None:
    core = new_core()
    core.audio_appended(500.0)
    core.speech_started(0)
    core.speech_stopped(400)
    (commit,) = only(core.effects(), fx.CommitAudio)
    assert commit.respond is True and commit.fence == Fence("s1", 1, 0, 1)


def test_manual_commit_without_turn_detection_does_not_respond() -> None:
    core = new_core(turn_detection=None)
    core.audio_appended(300.0)
    core.commit(c.CommitInput(None))
    effects = core.effects()
    assert kinds(effects) == [E.INPUT_COMMITTED, E.ITEM_ADDED, E.ITEM_DONE, "SaveItem",
                              "CommitAudio"]
    (commit,) = only(effects, fx.CommitAudio)
    assert commit.respond is False and commit.fence == F0
    assert core.response is None and state(core) is TurnState.IDLE


def test_vad_turn_commits_and_starts_a_response() -> None:
    core = new_core()
    core.audio_appended(600.0)
    core.speech_started(20)
    started = core.effects()
    assert names(started) == [E.SPEECH_STARTED]
    user_item = started[0].event["item_id"]  # type: ignore[union-attr]
    assert started[0].event["audio_start_ms"] == 20  # type: ignore[union-attr]
    assert state(core) is TurnState.USER_SPEAKING

    core.speech_stopped(580)
    effects = core.effects()
    assert kinds(effects) == [
        E.SPEECH_STOPPED, E.INPUT_COMMITTED, E.ITEM_ADDED, E.ITEM_DONE, "SaveItem",
        *OPENING, "CommitAudio",
    ]
    stopped, committed = events(effects)[:2]
    assert stopped["audio_end_ms"] == 580 and stopped["item_id"] == user_item
    assert committed == {"type": E.INPUT_COMMITTED, "previous_item_id": None,
                         "item_id": user_item}
    (commit,) = only(effects, fx.CommitAudio)
    assert commit == fx.CommitAudio(Fence("s1", 1, 0, 1), user_item, respond=True)
    assert commit.fence.turn_id == 1
    created = one_event(effects, E.RESPONSE_CREATED)["response"]
    assert created["status"] == "in_progress" and created["output"] == []
    assert core.response is not None and core.response.id == created["id"]
    assert core.response.fence == commit.fence == core.fence
    assert state(core) is TurnState.RESPONDING
    assert list(core.items) == [user_item]


def test_vad_without_create_response_commits_only() -> None:
    core = new_core(create_response=False)
    effects = vad_turn(core)
    assert E.RESPONSE_CREATED not in names(effects)
    (commit,) = only(effects, fx.CommitAudio)
    assert commit.respond is False and commit.fence == F0


def test_clear_input() -> None:
    core = new_core()
    core.audio_appended(500.0)
    core.clear_input()
    effects = core.effects()
    assert kinds(effects) == ["DiscardAudio", E.INPUT_CLEARED]
    assert core.input.ms == 0.0
    raises("input_audio_buffer_commit_empty", core.commit, c.CommitInput(None))


def test_transcript_fills_the_user_item() -> None:
    core = new_core()
    user_item = only(vad_turn(core), fx.CommitAudio)[0].item_id
    core.transcript(user_item, "hi there")
    effects = core.effects()
    done = one_event(effects, E.TRANSCRIPTION_COMPLETED)
    assert done["transcript"] == "hi there" and done["item_id"] == user_item
    delta = one_event(effects, E.TRANSCRIPTION_DELTA)  # before completed, as OpenAI's
    assert (delta["delta"], delta["item_id"]) == ("hi there", user_item)
    assert names(effects).index(E.TRANSCRIPTION_DELTA) < names(effects).index(
        E.TRANSCRIPTION_COMPLETED)
    assert said(core)[0] == ("user", "hi there")
    core.transcript("nope", "x")
    assert core.effects() == []
    silent = only(vad_turn(core), fx.CommitAudio)[0].item_id
    core.transcript(silent, "")  # nothing heard: completed, with no delta
    assert E.TRANSCRIPTION_DELTA not in names(core.effects())


# -- assistant audio and fences (I1) ----------------------------------------------


def test_assistant_audio_for_the_active_fence_emits_deltas() -> None:
    core = new_core()
    vad_turn(core)
    r = core.response
    assert r is not None
    assert core.assistant_audio(r.fence, "QUJD", 120.0, "Hi ") is True
    effects = core.effects()
    assert names(effects) == [E.AUDIO_DELTA, E.AUDIO_TRANSCRIPT_DELTA]
    audio, text = events(effects)
    common = {"response_id": r.id, "item_id": r.item_id, "output_index": 0, "content_index": 0}
    assert audio == {"type": E.AUDIO_DELTA, **common, "delta": "QUJD"}
    assert text == {"type": E.AUDIO_TRANSCRIPT_DELTA, **common, "delta": "Hi "}
    assert core.assistant_audio(r.fence, "QUJD", 80.0, "") is True
    assert names(core.effects()) == [E.AUDIO_DELTA]  # no empty transcript delta
    assert r.ledger.generated_ms == 200.0 and r.ledger.sent_ms == 200.0


def test_text_only_response_emits_text_deltas() -> None:
    core = new_core()
    core.create_response(c.CreateResponse(None, None, ("text",), None, False))
    effects = core.effects()
    (start,) = only(effects, fx.StartResponse)
    assert start.fence == Fence("s1", 1, 0, 1)
    assert one_event(effects, E.CONTENT_PART_ADDED)["part"] == {"type": "text",
                                                               "text": ""}
    assert core.assistant_audio(start.fence, "", 0.0, "Hi")
    assert names(core.effects()) == [E.TEXT_DELTA]
    core.response_end(start.fence)
    assert names(core.effects()) == [E.TEXT_DONE, E.CONTENT_PART_DONE, E.OUTPUT_ITEM_DONE,
                                     E.ITEM_DONE, E.RESPONSE_DONE, E.RATE_LIMITS_UPDATED]


@pytest.mark.parametrize(
    "fence",
    [
        Fence("s1", 1, 0, 0),  # the turn before the response
        Fence("s1", 1, 0, 2),  # a turn that does not exist yet
        Fence("s1", 0, 0, 1),  # an older incarnation
        Fence("s1", 2, 0, 1),  # another incarnation
        Fence("s2", 1, 0, 1),  # another session
        Fence("s1", 1, 1, 1),  # a future epoch
    ],
)
def test_assistant_audio_with_a_wrong_fence_is_dropped(fence: Fence) -> None:
    core = new_core()
    vad_turn(core)
    assert core.assistant_audio(fence, "AAAA", 100.0, "x") is False
    core.response_end(fence)
    assert core.effects() == []
    assert core.response is not None and core.response.ledger.generated_ms == 0.0


def test_stale_epoch_audio_after_cancel_is_dropped() -> None:
    core = new_core()
    vad_turn(core)
    old = core.fence
    core.cancel_response(c.CancelResponse(None, None))
    core.effects()
    assert core.assistant_audio(old, "AAAA", 100.0, "late") is False
    assert core.assistant_audio(core.fence, "AAAA", 100.0, "late") is False  # no response
    core.response_end(old)
    assert core.effects() == []
    # the next response has a new turn in the new epoch; the old fence stays dead
    core.create_response(c.CreateResponse(None, None, None, None, False))
    core.effects()
    assert core.fence == Fence("s1", 1, 1, 2)
    assert core.assistant_audio(old, "AAAA", 100.0, "late") is False
    assert core.assistant_audio(old.with_turn(2), "AAAA", 100.0, "late") is False
    assert core.effects() == []
    assert core.assistant_audio(core.fence, "AAAA", 100.0, "new") is True


def test_response_end_emits_the_closing_sequence_in_order() -> None:
    core = new_core()
    vad_turn(core)
    r = core.response
    assert r is not None
    speak(core)
    core.response_end(r.fence)
    effects = core.effects()
    assert names(effects) == CLOSING
    assert kinds(effects).index("SaveItem") == CLOSING.index(E.ITEM_DONE)
    done = one_event(effects, E.RESPONSE_DONE)["response"]
    assert done["status"] == "completed" and done["status_details"] is None
    assert done["output"][0]["content"][0]["transcript"] == "Hello there my friend."
    assert one_event(effects, E.AUDIO_TRANSCRIPT_DONE)["transcript"] == "Hello there my friend."
    assert core.response is None and state(core) is TurnState.IDLE
    assert said(core)[-1] == ("assistant", "Hello there my friend.")
    assert core.fence == Fence("s1", 1, 0, 1)  # a completed response bumps nothing
    core.response_end(r.fence)  # a repeated end is stale
    assert core.effects() == []


# -- barge-in, cancel (I2, I6) ----------------------------------------------------------


def test_barge_in_cancels_with_turn_detected() -> None:
    core = new_core()
    vad_turn(core)
    r = core.response
    assert r is not None
    speak(core)
    core.speech_started(1500)
    effects = core.effects()
    assert kinds(effects) == [E.SPEECH_STARTED, "AbortEpoch", *CLOSING[:4], "SaveItem",
                              *CLOSING[4:]]
    (abort,) = only(effects, fx.AbortEpoch)
    assert abort == fx.AbortEpoch(Fence("s1", 1, 0, 1), Fence("s1", 1, 1, 1))
    assert abort.cancelled.epoch == 0 and abort.current.epoch == 1
    done = one_event(effects, E.RESPONSE_DONE)["response"]
    assert done["status"] == "cancelled"
    assert done["status_details"] == {"type": "cancelled", "reason": "turn_detected"}
    assert core.fence == Fence("s1", 1, 1, 1)
    assert core.response is None and state(core) is TurnState.USER_SPEAKING

    # history keeps what was sent; late audio of the cancelled epoch is not added
    assert said(core)[-1] == ("assistant", "Hello there my friend.")
    assert core.assistant_audio(r.fence, "AAAA", 200.0, "More words.") is False
    assert core.effects() == []
    assert said(core)[-1] == ("assistant", "Hello there my friend.")

    # the client played 300 ms: the history keeps only the words heard (I6)
    core.truncate_item(c.TruncateItem(None, r.item_id, 0, 300))
    effects = core.effects()
    assert kinds(effects) == ["SaveItem", E.ITEM_TRUNCATED]
    assert one_event(effects, E.ITEM_TRUNCATED) == {
        "type": E.ITEM_TRUNCATED, "item_id": r.item_id, "content_index": 0, "audio_end_ms": 300}
    assert said(core)[-1] == ("assistant", "Hello ")
    assert core.items[r.item_id]["status"] == "incomplete"


def test_barge_in_truncated_before_cancel_keeps_only_heard_words() -> None:
    core = new_core()
    vad_turn(core)
    r = core.response
    assert r is not None
    speak(core)
    core.playback_ack(c.PlaybackAck(None, 200.0, None, None, True))
    core.effects()
    core.speech_started(900)
    done = one_event(core.effects(), E.RESPONSE_DONE)["response"]
    assert done["output"][0]["content"][0]["transcript"] == "Hello "
    assert said(core)[-1] == ("assistant", "Hello ")


def test_speech_without_interrupt_overlaps_and_defers_the_next_response() -> None:
    core = new_core(interrupt_response=False)
    vad_turn(core)
    first = core.response
    assert first is not None
    core.audio_appended(400.0)
    core.speech_started(700)
    assert names(core.effects()) == [E.SPEECH_STARTED]
    assert state(core) is TurnState.OVERLAP and core.response is first
    core.speech_stopped(1100)
    effects = core.effects()
    assert E.RESPONSE_CREATED not in names(effects)
    (commit,) = only(effects, fx.CommitAudio)
    assert commit.respond is False
    assert core.deferred_response and state(core) is TurnState.RESPONDING
    core.response_end(first.fence)
    effects = core.effects()
    assert names(effects) == [*CLOSING, *OPENING]
    (start,) = only(effects, fx.StartResponse)
    assert start.fence == Fence("s1", 1, 0, 2)
    assert core.response is not None and core.response.id == start.response_id
    assert not core.deferred_response


def test_cancel_twice_bumps_the_epoch_once() -> None:
    core = new_core()
    vad_turn(core)
    rid = core.response.id if core.response else ""
    core.cancel_response(c.CancelResponse("e1", None))
    effects = core.effects()
    assert len(only(effects, fx.AbortEpoch)) == 1
    done = one_event(effects, E.RESPONSE_DONE)["response"]
    assert done["id"] == rid and done["status"] == "cancelled"
    assert done["status_details"]["reason"] == "client_cancelled"
    assert core.fence.epoch == 1
    err = raises("response_cancel_not_active", core.cancel_response, c.CancelResponse("e2", None))
    assert isinstance(err, SessionStateError)
    raises("response_cancel_not_active", core.cancel_response, c.CancelResponse("e3", rid))
    assert core.effects() == []
    assert core.fence == Fence("s1", 1, 1, 1)


def test_cancel_naming_another_response_is_refused() -> None:
    core = new_core()
    vad_turn(core)
    # OpenAI's one code for a cancel with nothing to cancel: clients take it as a race
    err = raises("response_cancel_not_active", core.cancel_response,
                 c.CancelResponse(None, "resp_x"))
    assert err.message.startswith("Cancellation failed")
    assert err.param == "response_id"
    assert core.effects() == [] and core.response is not None and core.fence.epoch == 0


def test_clear_output_audio() -> None:
    core = new_core()
    core.clear_output_audio()
    assert events(core.effects()) == [{"type": E.OUTPUT_AUDIO_CLEARED, "response_id": None}]
    vad_turn(core)
    rid = core.response.id if core.response else None
    core.clear_output_audio()
    effects = core.effects()
    assert kinds(effects)[0] == "AbortEpoch"
    assert names(effects)[-1] == E.OUTPUT_AUDIO_CLEARED
    assert one_event(effects, E.OUTPUT_AUDIO_CLEARED)["response_id"] == rid
    assert core.fence.epoch == 1


def test_create_while_active_is_refused() -> None:
    core = new_core()
    vad_turn(core)
    active = core.response
    raises("conversation_already_has_active_response", core.create_response,
           c.CreateResponse(None, None, None, None, False))
    assert core.effects() == [] and core.response is active
    assert core.fence == Fence("s1", 1, 0, 1)


def test_create_response_options() -> None:
    core = new_core()
    core.create_response(c.CreateResponse("e", "Be short", None, {"k": "v"}, True))
    effects = core.effects()
    assert names(effects) == [E.RESPONSE_CREATED, E.OUTPUT_ITEM_ADDED, E.CONTENT_PART_ADDED]
    (start,) = only(effects, fx.StartResponse)
    assert start.instructions == "Be short"
    created = one_event(effects, E.RESPONSE_CREATED)["response"]
    assert created["metadata"] == {"k": "v"} and created["conversation_id"] is None
    assert core.response is not None
    core.response_end(core.response.fence)
    effects = core.effects()
    assert E.ITEM_DONE not in names(effects) and not only(effects, fx.SaveItem)
    assert core.items == {}  # out-of-band answers stay out of the conversation


def test_stage_failure_ends_the_response_failed() -> None:
    core = new_core()
    vad_turn(core)
    r = core.response
    assert r is not None
    core.stage_failed(r.fence.with_turn(0), "stale")
    assert core.effects() == []
    core.stage_failed(r.fence, "boom")
    effects = core.effects()
    assert names(effects)[0] == E.ERROR
    done = one_event(effects, E.RESPONSE_DONE)["response"]
    assert done["status"] == "failed"
    assert done["status_details"]["reason"] == "stage_failed"
    assert core.response is None and core.fence.epoch == 0


def test_stage_failure_still_answers_the_deferred_turn_once() -> None:
    core = new_core(interrupt_response=False)
    vad_turn(core)
    a = core.response
    assert a is not None
    vad_turn(core)  # the user speaks over A: their turn is deferred
    assert core.deferred_response
    core.stage_failed(a.fence, "boom")
    started = only(core.effects(), fx.StartResponse)
    b = core.response
    assert len(started) == 1 and b is not None and b is not a  # the user's turn is answered
    assert not core.deferred_response
    core.response_end(b.fence)
    assert not only(core.effects(), fx.StartResponse)  # and nothing extra follows
    assert core.response is None


# -- conversation items ----------------------------------------------------------------


def user_msg(text: str, item_id: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "message", "role": "user",
                            "content": [{"type": "input_text", "text": text}]}
    if item_id:
        item["id"] = item_id
    return item


def test_create_items_and_insertion_order() -> None:
    core = new_core()
    core.create_item(c.CreateItem(None, user_msg("one", "a"), None))
    effects = core.effects()
    assert kinds(effects) == ["SaveItem", "ContextChanged", E.ITEM_ADDED, E.ITEM_DONE]
    assert only(effects, fx.ContextChanged) == [fx.ContextChanged(items=(core.items["a"],))]
    assert one_event(effects, E.ITEM_ADDED)["previous_item_id"] is None
    assert one_event(effects, E.ITEM_ADDED)["item"]["status"] == "completed"
    core.create_item(c.CreateItem(None, user_msg("two", "b"), None))
    assert one_event(core.effects(), E.ITEM_ADDED)["previous_item_id"] == "a"
    core.create_item(c.CreateItem(None, user_msg("between", "c"), "a"))
    effects = core.effects()
    assert one_event(effects, E.ITEM_ADDED)["previous_item_id"] == "a"
    assert only(effects, fx.SaveItem) == [fx.SaveItem("c", core.items["c"], "a")]
    assert list(core.items) == ["a", "c", "b"]
    assert [t for _, t in said(core)] == ["one", "between", "two"]
    core.create_item(c.CreateItem(None, user_msg("no id"), None))
    new_id = list(core.items)[-1]
    assert new_id.startswith("item_") and core.items[new_id]["object"] == "realtime.item"
    assert one_event(core.effects(), E.ITEM_ADDED)["previous_item_id"] == "b"
    # OpenAI's "root": first in the conversation (LiveKit restores a history so)
    core.create_item(c.CreateItem(None, user_msg("zero", "z"), "root"))
    assert [t for _, t in said(core)][:2] == ["zero", "one"]
    effects = core.effects()
    assert one_event(effects, E.ITEM_ADDED)["previous_item_id"] is None
    assert only(effects, fx.SaveItem)[0].previous_item_id == "root"


@pytest.mark.parametrize(
    ("item", "previous", "code", "param"),
    [
        ({"type": "mcp_call", "role": "user", "content": []}, None, "invalid_value",
         "item.type"),
        ({"type": "function_call", "name": "f"}, None, "missing_required_parameter",
         "item.call_id"),
        ({"type": "function_call", "call_id": "c", "name": 3}, None, "invalid_type",
         "item.name"),
        ({"type": "function_call_output", "call_id": "c"}, None,
         "missing_required_parameter", "item.output"),
        ({"role": "robot", "content": []}, None, "invalid_value", "item.role"),
        ({"role": "user"}, None, "invalid_value", "item.content"),
        ({"role": "user", "content": ["text"]}, None, "invalid_value", "item.content"),
        ({"role": "user", "content": [], "id": "a"}, None, "item_create_duplicate_item_id",
         "item.id"),
        ({"role": "user", "content": [], "id": 7}, None, "invalid_type", "item.id"),
        ({"role": "user", "content": []}, "missing", "item_create_invalid_previous_item_id",
         "previous_item_id"),
    ],
)
def test_create_item_errors(item: dict[str, Any], previous: str | None, code: str,
                            param: str) -> None:
    core = new_core()
    core.create_item(c.CreateItem(None, user_msg("one", "a"), None))
    core.effects()
    err = raises(code, core.create_item, c.CreateItem(None, item, previous))
    assert err.param == param
    assert core.effects() == [] and list(core.items) == ["a"]


def test_retrieve_and_delete() -> None:
    core = new_core()
    core.create_item(c.CreateItem(None, user_msg("one", "a"), None))
    core.effects()
    core.retrieve_item(c.RetrieveItem(None, "a"))
    assert events(core.effects()) == [{"type": E.ITEM_RETRIEVED, "item": core.items["a"]}]
    err = raises("item_retrieve_invalid_item_id", core.retrieve_item,
                 c.RetrieveItem(None, "zz"))
    assert err.message == "Error retrieving item: the item with id 'zz' does not exist."
    core.delete_item(c.DeleteItem(None, "a"))
    effects = core.effects()
    assert effects == [fx.ForgetItem("a"), fx.Emit({"type": E.ITEM_DELETED, "item_id": "a"})]
    assert core.items == {}
    err = raises("item_delete_invalid_item_id", core.delete_item, c.DeleteItem(None, "a"))
    assert err.param == "item_id"
    raises("item_retrieve_invalid_item_id", core.retrieve_item, c.RetrieveItem(None, "a"))


def finished_core() -> tuple[SessionCore, str, str]:
    core = new_core()
    user_item = only(vad_turn(core), fx.CommitAudio)[0].item_id
    r = core.response
    assert r is not None
    speak(core)
    core.response_end(r.fence)
    core.effects()
    return core, user_item, r.item_id


@pytest.mark.parametrize(
    ("target", "content_index", "end_ms", "code", "param"),
    [
        ("user", 0, 100, "unsupported_content_type", "item_id"),
        ("unknown", 0, 100, "item_truncate_invalid_item_id", "item_id"),
        ("assistant", 1, 100, "invalid_value", "content_index"),
        ("assistant", 0, 601, "invalid_value", "audio_end_ms"),
    ],
)
def test_truncate_errors(target: str, content_index: int, end_ms: int, code: str,
                         param: str) -> None:
    core, user_item, assistant_item = finished_core()
    item_id = {"user": user_item, "assistant": assistant_item, "unknown": "nope"}[target]
    err = raises(code, core.truncate_item, c.TruncateItem(None, item_id, content_index, end_ms))
    assert err.param == param
    assert core.effects() == []
    assert said(core)[-1] == ("assistant", "Hello there my friend.")


@pytest.mark.parametrize(("end_ms", "text"), [(600, "Hello there my friend."),
                                             (400, "Hello there my "), (250, "Hello "),
                                             (0, "")])
def test_truncate_finished_item(end_ms: int, text: str) -> None:
    core, _, item_id = finished_core()
    core.truncate_item(c.TruncateItem(None, item_id, 0, end_ms))
    effects = core.effects()
    (save,) = only(effects, fx.SaveItem)
    assert save.item_id == item_id and save.previous_item_id is None
    assert said(core)[-1] == ("assistant", text)
    core.truncate_item(c.TruncateItem(None, item_id, 0, 600))  # min wins: no undo
    core.effects()
    assert said(core)[-1] == ("assistant", text)


def test_truncate_deleted_item_is_not_found() -> None:
    core, _, item_id = finished_core()
    core.delete_item(c.DeleteItem(None, item_id))
    core.effects()
    raises("item_truncate_invalid_item_id", core.truncate_item,
           c.TruncateItem(None, item_id, 0, 100))
    assert core.effects() == []


# -- playback.ack ----------------------------------------------------------------------


def test_playback_ack_for_the_active_response() -> None:
    core = new_core()
    vad_turn(core)
    r = core.response
    assert r is not None
    speak(core)
    core.playback_ack(c.PlaybackAck("e", 900.0, None, None, False))
    ack = one_event(core.effects(), E.PLAYBACK_ACKNOWLEDGED)
    assert ack == {"type": E.PLAYBACK_ACKNOWLEDGED, "item_id": r.item_id,
                   "response_id": r.id, "played_ms": 600.0, "truncated": False,
                   "generated_ms": 600.0}
    assert r.ledger.heard_ms is None


def test_playback_ack_with_truncate_by_response_id() -> None:
    core, _, item_id = finished_core()
    rid = next(lg.response_id for lg in core.conversation.ledgers(core.response)
               if lg.item_id == item_id)
    core.playback_ack(c.PlaybackAck(None, 250.0, rid, None, True))
    effects = core.effects()
    assert kinds(effects) == ["SaveItem", E.PLAYBACK_ACKNOWLEDGED]
    ack = one_event(effects, E.PLAYBACK_ACKNOWLEDGED)
    assert ack["item_id"] == item_id and ack["truncated"] is True and ack["played_ms"] == 250.0
    assert said(core)[-1] == ("assistant", "Hello ")


@pytest.mark.parametrize(("response_id", "item_id"), [(None, None), ("resp_x", None),
                                                      (None, "item_x")])
def test_playback_ack_without_audio(response_id: str | None, item_id: str | None) -> None:
    core = new_core()
    err = raises("playback_item_not_found", core.playback_ack,
                 c.PlaybackAck(None, 10.0, response_id, item_id, False))
    assert err.param == "item_id"
    assert core.effects() == []


# -- session ---------------------------------------------------------------------------


def test_update_session_and_heartbeat() -> None:
    core = new_core()
    core.update_session(c.UpdateSession(None, {"instructions": "x", "turn_detection": None}))
    effects = core.effects()
    assert kinds(effects) == ["SaveConfig", "ContextChanged", E.SESSION_UPDATED]
    assert only(effects, fx.ContextChanged) == [fx.ContextChanged(instructions="x")]
    core.update_session(c.UpdateSession(None, {"instructions": "x"}))  # unchanged
    assert kinds(core.effects()) == ["SaveConfig", E.SESSION_UPDATED]
    assert one_event(effects, E.SESSION_UPDATED)["session"]["instructions"] == "x"
    assert core.config.turn_detection is None
    err = raises("invalid_value", core.update_session,
                 c.UpdateSession(None, {"input_audio_format": "mp3"}))
    assert err.param == "session.input_audio_format"
    assert core.effects() == [] and core.config.instructions == "x"
    core.heartbeat()
    assert names(core.effects()) == [E.HEARTBEAT_ACK]
    created = core.created_event("tok")
    assert created["type"] == E.SESSION_CREATED and created["resume_token"] == "tok"
    assert created["session"]["id"] == "s1"


def test_close_aborts_a_running_response_once() -> None:
    core = new_core()
    vad_turn(core)
    core.close("client_close")
    effects = core.effects()
    assert effects == [fx.AbortEpoch(Fence("s1", 1, 0, 1), Fence("s1", 1, 1, 1))]
    assert core.closed and core.response is None
    core.close("again")
    assert core.effects() == [] and core.fence.epoch == 1
    # VAD and stage inputs after close are ignored
    core.speech_started(10)
    core.speech_stopped(20)
    assert core.assistant_audio(Fence("s1", 1, 1, 1), "AAAA", 10.0, "x") is False
    assert core.effects() == []


CLOSED_COMMANDS: list[Any] = [
    c.UpdateSession("e", {"instructions": "x"}),
    c.CommitInput("e"),
    c.ClearInput("e"),
    c.CreateResponse("e", None, None, None, False),
    c.CancelResponse("e", None),
    c.ClearOutputAudio("e"),
    c.CreateItem("e", user_msg("x"), None),
    c.RetrieveItem("e", "a"),
    c.DeleteItem("e", "a"),
    c.TruncateItem("e", "a", 0, 0),
    c.PlaybackAck("e", 0.0, None, None, False),
    c.Heartbeat("e"),
]


@pytest.mark.parametrize("cmd", CLOSED_COMMANDS, ids=lambda x: type(x).__name__)
def test_every_command_after_close_is_session_closed(cmd: c.Command) -> None:
    core = new_core()
    core.create_item(c.CreateItem(None, user_msg("one", "a"), None))
    core.close("bye")
    core.effects()
    err = raises("session_closed", apply_command, core, cmd)
    assert isinstance(err, SessionStateError)
    assert core.effects() == []
    assert list(core.items) == ["a"]


def test_audio_after_close_is_session_closed() -> None:
    core = new_core()
    core.close("bye")
    raises("session_closed", core.audio_appended, 20.0)


@pytest.mark.parametrize("cmd", [c.AckEvents(None, 1), c.CloseSession(None, "x"),
                                 c.ResumeSession(None, None, "t", 0), c.AppendAudio(None, b"")])
def test_apply_command_leaves_transport_commands_to_the_runner(cmd: c.Command) -> None:
    core = new_core()
    assert apply_command(core, cmd) is False
    assert core.effects() == [] and not core.closed


def test_apply_command_routes_conversation_commands() -> None:
    core = new_core()
    assert apply_command(core, c.CreateResponse(None, None, None, None, False)) is True
    assert only(core.effects(), fx.StartResponse)
    assert apply_command(core, c.CancelResponse(None, None)) is True
    assert core.fence.epoch == 1


def test_ids_are_unique_and_name_the_session() -> None:
    core = new_core()
    seen: set[str] = set()
    for _ in range(3):
        vad_turn(core)
        assert core.response is not None
        seen |= {core.response.id, core.response.item_id}
        core.response_end(core.response.fence)
        core.effects()
    seen |= set(core.items)
    assert len(core.items) == 6  # three user items and three assistant items
    assert len(seen) == 9  # ... plus three response ids, all distinct
    assert all("_s1_1x" in i for i in seen)
