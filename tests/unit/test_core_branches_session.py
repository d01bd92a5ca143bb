"""duplex/session.py: DTMF, transcripts, silent chunks, old ledgers and the command router.

The router table drives every conversation command through ``apply_command``
and checks the event that proves it reached the right method, so a swapped
``case`` fails here. It asserts the one event each command is named for, not
the whole effect list: commit and session.update gain effects as the core
grows, and their own tests (test_session_core.py) pin those lists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from duplex import commands as c
from duplex import effects as fx
from duplex.dispatch import apply_command
from duplex.errors import InvalidRequest, SessionStateError
from duplex.events import ServerEvent as E
from duplex.fence import Fence
from duplex.items import KEEP_LEDGERS
from duplex.session import SessionCore
from duplex.turns import TurnState
from tests.effect_helpers import said


def manual_core() -> SessionCore:
    """A core without server VAD, so no input starts a response by itself."""
    core = SessionCore(Fence("s1", 1, 0, 0))
    core.config = replace(core.config, turn_detection=None)
    return core


def emitted(core: SessionCore) -> list[dict[str, Any]]:
    return [e.event for e in core.effects() if isinstance(e, fx.Emit)]


def finished_reply(core: SessionCore, modalities: tuple[str, ...] | None = None) -> str:
    """Play one whole assistant reply (audio unless ``modalities`` say); its item id."""
    core.create_response(c.CreateResponse(None, None, modalities, None, False))
    r = core.response
    assert r is not None
    assert core.assistant_audio(r.fence, "AAAA", 400.0, "Hello there.")
    core.response_end(r.fence)
    core.effects()
    return r.item_id


# -- DTMF ------------------------------------------------------------------------------


def test_dtmf_is_surfaced_and_changes_nothing_else() -> None:
    core = manual_core()
    before = (core.fence, core.turn_state, dict(core.items))
    assert apply_command(core, c.DtmfReceived(None, "5", 1700000000.25)) is True
    effects = core.effects()
    assert effects == [fx.Emit({"type": E.DTMF_RECEIVED.value, "event": "5",
                                "received_at": 1700000000.25})]
    assert (core.fence, core.turn_state, dict(core.items)) == before


def test_dtmf_during_a_response_does_not_interrupt_it() -> None:
    core = manual_core()
    core.create_response(c.CreateResponse(None, None, None, None, False))
    core.effects()
    r = core.response
    core.dtmf_received(c.DtmfReceived(None, "#", 1.0))
    assert [e["type"] for e in emitted(core)] == [E.DTMF_RECEIVED]
    assert core.response is r and core.fence.epoch == 0


def test_dtmf_after_close_is_session_closed() -> None:
    core = manual_core()
    core.close("bye")
    with pytest.raises(SessionStateError) as info:
        core.dtmf_received(c.DtmfReceived(None, "1", 1.0))
    assert info.value.code == "session_closed"
    assert core.effects() == []


# -- transcripts -----------------------------------------------------------------------


def committed_user_item(core: SessionCore) -> str:
    core.audio_appended(500.0)
    core.commit(c.CommitInput(None))
    commits = [e for e in core.effects() if isinstance(e, fx.CommitAudio)]
    assert len(commits) == 1
    return commits[0].item_id


def test_transcript_without_transcription_is_saved_but_not_announced() -> None:
    core = manual_core()
    core.config = replace(core.config, transcription=None)
    item_id = committed_user_item(core)
    core.transcript(item_id, "turn the lights on")
    effects = core.effects()
    assert effects == [fx.SaveItem(item_id, core.items[item_id], None)]
    assert said(core) == [("user", "turn the lights on")]


def test_transcript_with_transcription_reports_the_committed_seconds() -> None:
    core = manual_core()
    item_id = committed_user_item(core)
    core.transcript(item_id, "hello")
    (done,) = [e for e in emitted(core) if e["type"] == E.TRANSCRIPTION_COMPLETED]
    assert done["usage"] == {"type": "duration", "seconds": 0.5}
    assert done["item_id"] == item_id and done["transcript"] == "hello"


def test_transcript_after_close_is_dropped() -> None:
    core = manual_core()
    item_id = committed_user_item(core)
    core.close("bye")
    core.effects()
    core.transcript(item_id, "too late")
    assert core.effects() == []
    assert said(core) == [("user", "")]


# -- reply chunks and the ledgers of finished replies ------------------------------


@pytest.mark.parametrize(("modalities", "text", "expected"), [
    (("audio",), "", [E.AUDIO_DELTA]),
    (("audio",), "Hi.", [E.AUDIO_DELTA, E.AUDIO_TRANSCRIPT_DELTA]),
    (("text",), "", []),  # nothing to show, but the chunk still counts as played time
    (("text",), "Hi.", [E.TEXT_DELTA]),
])
def test_a_reply_chunk_emits_only_the_deltas_it_has(
    modalities: tuple[str, ...], text: str, expected: list[E]
) -> None:
    core = manual_core()
    core.create_response(c.CreateResponse(None, None, modalities, None, False))
    core.effects()
    r = core.response
    assert r is not None
    assert core.assistant_audio(r.fence, "AAAA", 240.0, text) is True
    assert [e["type"] for e in emitted(core)] == expected
    assert r.ledger.generated_ms == 240.0


def test_only_the_last_finished_replies_keep_a_ledger() -> None:
    core = manual_core()
    replies = [finished_reply(core) for _ in range(KEEP_LEDGERS + 1)]
    oldest, kept = replies[0], replies[1:]
    # the oldest reply is history now: still an item, no longer truncatable or ackable
    assert oldest in core.items
    with pytest.raises(InvalidRequest) as info:
        core.truncate_item(c.TruncateItem(None, oldest, 0, 100))
    assert (info.value.code, info.value.param) == ("unsupported_content_type", "item_id")
    with pytest.raises(InvalidRequest) as info:
        core.playback_ack(c.PlaybackAck(None, 100.0, None, oldest, False))
    assert info.value.code == "playback_item_not_found"
    assert core.effects() == []
    for item_id in kept:
        core.playback_ack(c.PlaybackAck(None, 100.0, None, item_id, False))
        (ack,) = emitted(core)
        assert ack["item_id"] == item_id and ack["played_ms"] == 100.0


# -- the router ------------------------------------------------------------------------

Row = tuple[Callable[[str, str], c.Command], E, bool]
# (command from (user item, assistant item), the event it must emit, needs a live response)
ROUTES: dict[str, Row] = {
    "UpdateSession": (lambda u, a: c.UpdateSession(None, {"voice": "v2"}),
                      E.SESSION_UPDATED, False),
    "CommitInput": (lambda u, a: c.CommitInput(None), E.INPUT_COMMITTED, False),
    "ClearInput": (lambda u, a: c.ClearInput(None), E.INPUT_CLEARED, False),
    "CreateResponse": (lambda u, a: c.CreateResponse(None, None, None, None, False),
                       E.RESPONSE_CREATED, False),
    "CancelResponse": (lambda u, a: c.CancelResponse(None, None), E.RESPONSE_DONE, True),
    "ClearOutputAudio": (lambda u, a: c.ClearOutputAudio(None), E.OUTPUT_AUDIO_CLEARED,
                         False),
    "CreateItem": (lambda u, a: c.CreateItem(None, {"type": "message", "role": "user",
                                                    "content": []}, None),
                   E.ITEM_ADDED, False),
    "RetrieveItem": (lambda u, a: c.RetrieveItem(None, u), E.ITEM_RETRIEVED, False),
    "DeleteItem": (lambda u, a: c.DeleteItem(None, u), E.ITEM_DELETED, False),
    "TruncateItem": (lambda u, a: c.TruncateItem(None, a, 0, 100), E.ITEM_TRUNCATED, False),
    "PlaybackAck": (lambda u, a: c.PlaybackAck(None, 100.0, None, a, False),
                    E.PLAYBACK_ACKNOWLEDGED, False),
    "Heartbeat": (lambda u, a: c.Heartbeat(None), E.HEARTBEAT_ACK, False),
    "DtmfReceived": (lambda u, a: c.DtmfReceived(None, "9", 2.0), E.DTMF_RECEIVED, False),
}


def test_the_router_table_names_every_conversation_command() -> None:
    transport = {"AppendAudio", "AckEvents", "CloseSession", "ResumeSession"}
    conversation = {cls.__name__ for cls in c.Command.__subclasses__()} - transport
    assert set(ROUTES) == conversation


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_apply_command_routes_each_command_to_its_handler(name: str) -> None:
    build, expected, live = ROUTES[name]
    core = manual_core()
    user = committed_user_item(core)
    assistant = finished_reply(core)
    core.audio_appended(300.0)  # something to commit or clear
    if live:
        core.create_response(c.CreateResponse(None, None, None, None, False))
        core.effects()
    assert apply_command(core, build(user, assistant)) is True
    assert expected in [e["type"] for e in emitted(core)]
    assert core.turn_state is not TurnState.CLOSED
