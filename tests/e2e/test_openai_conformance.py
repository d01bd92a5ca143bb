"""The gateway's server events parse with the official ``openai`` package's types.

Every e2e test's events are checked when it ends (``conftest.py``); this module
drives every flow a client meets, in both dialects (GA, and beta as a client that
sends ``OpenAI-Beta: realtime=v1`` gets it), so that one run of it alone checks
them all: a spoken turn, a barge-in and its truncate, push-to-talk, the buffers
cleared, text-only replies, items created, retrieved and deleted, errors, and a
function call answered. It asserts the flows produced each event kind, then that
the official types accept each event; and that the check itself rejects what it
should (an unknown type, a missing or mistyped field).
"""

from __future__ import annotations

from typing import Any

import pytest
from client import RealtimeClient, silence, speak, tone
from gateway_process import GatewayProcess
from openai_conformance import GATEWAY_EVENTS, KNOWN, Conformance, problems, rejection

BETA = {"additional_headers": {"OpenAI-Beta": "realtime=v1"}}
WEATHER = {
    "type": "function", "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]},
}
# (GA name, beta name) where they differ; None: beta has no such event
RENAMED = {
    "conversation.item.added": "conversation.item.created",
    "conversation.item.done": None,
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio.done": "response.audio.done",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "response.output_audio_transcript.done": "response.audio_transcript.done",
    "response.output_text.delta": "response.text.delta",
    "response.output_text.done": "response.text.done",
}
GA_KINDS = {
    "session.created", "session.updated", "error",
    "input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
    "input_audio_buffer.committed", "input_audio_buffer.cleared",
    "conversation.item.added", "conversation.item.done",
    "conversation.item.input_audio_transcription.completed", "conversation.item.retrieved",
    "conversation.item.truncated", "conversation.item.deleted",
    "response.created", "response.output_item.added", "response.output_item.done",
    "response.content_part.added", "response.content_part.done",
    "response.output_audio.delta", "response.output_audio.done",
    "response.output_audio_transcript.delta", "response.output_audio_transcript.done",
    "response.output_text.delta", "response.output_text.done",
    "response.function_call_arguments.delta", "response.function_call_arguments.done",
    "response.done", "rate_limits.updated", "output_audio_buffer.cleared",
}


def kinds(dialect: str) -> set[str]:
    if dialect == "ga":
        return set(GA_KINDS)
    beta = {RENAMED.get(k, k) for k in GA_KINDS}
    return {k for k in beta if k is not None}


def name(dialect: str, ga: str) -> str:
    beta = RENAMED.get(ga, ga)
    assert beta is not None, ga
    return ga if dialect == "ga" else beta


class Flows:
    """One connection of either dialect, and the session shapes that dialect uses."""

    def __init__(self, c: RealtimeClient, dialect: str) -> None:
        self.c = c
        self.dialect = dialect

    async def update(self, *, modalities: list[str] | None = None,
                     vad: bool | None = None, **fields: Any) -> dict[str, Any]:
        session = dict(fields)
        if self.dialect == "ga":
            session["type"] = "realtime"
            if modalities is not None:
                session["output_modalities"] = modalities
            if vad is not None:
                session["audio"] = {"input": {"turn_detection": {"type": "server_vad"}
                                              if vad else None}}
        else:
            if modalities is not None:
                session["modalities"] = modalities
            if vad is not None:
                session["turn_detection"] = {"type": "server_vad"} if vad else None
        await self.c.send("session.update", session=session)
        return await self.c.until("session.updated")

    async def errors(self) -> None:
        await self.c.send("response.cancel")
        assert (await self.c.until("error"))["error"]["code"] == "response_cancel_not_active"
        await self.c.send("conversation.item.retrieve", item_id="item_none")
        error = await self.c.until("error")
        assert error["error"]["code"] == "item_retrieve_invalid_item_id"

    async def spoken_turn(self) -> None:
        await self.update(instructions="words=2", vad=True, modalities=["audio"])
        await speak(self.c, 0.6)
        await self.c.until("conversation.item.input_audio_transcription.completed")
        done = await self.c.until("response.done", 20)
        assert done["response"]["status"] == "completed"
        await self.c.until("rate_limits.updated")

    async def barge_in_and_truncate(self) -> None:
        await self.update(instructions="words=60")
        await speak(self.c, 1.0)
        first = await self.c.until(name(self.dialect, "response.output_audio.delta"), 20)
        await self.c.append(tone(0.6, freq=660))  # the user talks over the reply
        cut = await self.c.until("response.done", 20)
        assert (cut["response"]["id"], cut["response"]["status"]) == (
            first["response_id"], "cancelled")
        await self.c.append(silence(0.8))
        await self.c.until("response.done", 20)
        await self.c.send("conversation.item.truncate", item_id=first["item_id"],
                          content_index=0, audio_end_ms=100)
        await self.c.until("conversation.item.truncated")

    async def buffers_cleared(self) -> None:
        await self.c.send("response.create")
        first = await self.c.until(name(self.dialect, "response.output_audio.delta"), 20)
        await self.c.send("output_audio_buffer.clear")
        await self.c.until("output_audio_buffer.cleared")  # the reply cancelled before it
        assert [e["response"]["status"] for e in self.c.of("response.done")
                if e["response"]["id"] == first["response_id"]] == ["cancelled"]
        await self.update(instructions="words=2", vad=False)
        await self.c.append(tone(0.4))
        await self.c.send("input_audio_buffer.clear")
        await self.c.until("input_audio_buffer.cleared")

    async def push_to_talk(self) -> None:
        await self.c.append(tone(0.6))
        await self.c.send("input_audio_buffer.commit")
        await self.c.until("input_audio_buffer.committed")
        await self.c.send("response.create")
        done = await self.c.until("response.done", 20)
        assert done["response"]["status"] == "completed"

    async def text_items(self) -> None:
        await self.update(modalities=["text"])
        await self.c.send("conversation.item.create", item={
            "id": "item_hello", "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "hello"}]})
        await self.c.until(name(self.dialect, "conversation.item.added"))
        await self.c.send("response.create")
        done = await self.c.until("response.done", 20)
        assert done["response"]["output"][0]["content"][0]["type"] in ("output_text", "text")
        await self.c.send("conversation.item.retrieve", item_id="item_hello")
        await self.c.until("conversation.item.retrieved")
        await self.c.send("conversation.item.delete", item_id="item_hello")
        await self.c.until("conversation.item.deleted")

    async def function_call(self) -> None:
        await self.update(modalities=["audio"], tools=[WEATHER],
                          instructions="call=get_weather")
        await self.c.send("response.create")
        done = await self.c.until("response.done", 20)
        [call] = done["response"]["output"]
        assert call["type"] == "function_call"
        await self.c.send("conversation.item.create", item={
            "type": "function_call_output", "call_id": call["call_id"], "output": "sunny"})
        await self.c.until(name(self.dialect, "conversation.item.added"))
        await self.c.send("response.create")
        reply = await self.c.until("response.done", 20)
        assert "sunny" in reply["response"]["output"][0]["content"][0]["transcript"]


@pytest.mark.parametrize("dialect", ["ga", "beta"])
async def test_every_flow_gives_events_the_openai_types_accept(
        gateway: GatewayProcess, dialect: str) -> None:
    c = await RealtimeClient.connect(gateway.ws, **(BETA if dialect == "beta" else {}))
    assert c.dialect == dialect
    try:
        await c.until("session.created")
        flows = Flows(c, dialect)
        await flows.errors()
        await flows.spoken_turn()
        await flows.barge_in_and_truncate()
        await flows.buffers_cleared()
        await flows.push_to_talk()
        await flows.text_items()
        await flows.function_call()
    finally:
        await c.close()
    seen = set(c.types())
    assert kinds(dialect) <= seen, sorted(kinds(dialect) - seen)
    if dialect == "beta":  # the beta client got beta names only
        assert not seen & {k for k, b in RENAMED.items() if b != k}
    # the conftest's check covers these too; here the module stands alone
    assert Conformance().check(c.events, "beta" if dialect == "beta" else "ga") == []


# -- the check itself ------------------------------------------------------------------

DELTA = {"type": "response.output_audio.delta", "event_id": "event_1", "response_id": "resp_1",
         "item_id": "item_1", "output_index": 0, "content_index": 0, "delta": "AAAA"}


def test_the_check_accepts_a_good_event_and_the_gateways_extra_fields() -> None:
    assert rejection(DELTA, "ga") is None
    assert rejection({**DELTA, "server_event_seq": 7, "timings_ms": {"x": 1}}, "ga") is None


def test_the_check_rejects_an_unknown_type_a_missing_field_and_a_wrong_type() -> None:
    assert rejection({**DELTA, "type": "response.output_audio.shout"}, "ga") == (
        "type 'response.output_audio.shout' is no ga server event")
    assert rejection(DELTA, "beta") == "type 'response.output_audio.delta' is no beta server event"
    missing = {k: v for k, v in DELTA.items() if k != "delta"}
    assert str(rejection(missing, "ga")).startswith("delta: Field required (got {'type': ")
    why = rejection({**DELTA, "output_index": "0"}, "ga")
    assert why is not None and why.startswith("output_index: Input should be a valid integer")


def test_only_the_gateways_own_events_are_exempt() -> None:
    for kind in GATEWAY_EVENTS:
        assert rejection({"type": kind}, "ga") is None
    assert rejection({"type": "session.heartbeat"}, "ga") is not None
    assert all(kind.split(".")[0] in ("session", "playback") for kind in GATEWAY_EVENTS)


def test_a_known_deviation_is_kept_apart_and_nothing_else_with_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    created: dict[str, Any] = {"type": "session.created", "event_id": "event_1",
                               "session": {"id": "sess_1", "object": "realtime.session",
                                           "model": "duplex-gateway"}}
    # beta's model is one of OpenAI's names: the gateway leaves its own out now
    assert [path for path, _ in problems(created, "beta")] == ["session.model"]
    assert rejection(created, "beta") is not None
    monkeypatch.setitem(KNOWN, ("beta", "session.created", "session.model"), "for the test")
    assert rejection(created, "beta") is None
    created["session"]["voice"] = 7
    assert str(rejection(created, "beta")).startswith("session.voice.")
    checker = Conformance()
    assert checker.check([created], "beta") != []
    assert checker.known == {("beta", "session.created", "session.model")}


def test_an_error_without_event_id_is_refused() -> None:
    refused = {"type": "error", "error": {"type": "invalid_request_error",
                                          "code": "invalid_api_key", "message": "no"}}
    assert [path for path, _ in problems(refused, "ga")] == ["event_id"]
    assert rejection(refused, "ga") is not None and rejection(refused, "beta") is not None
    assert rejection({**refused, "event_id": "event_u1"}, "ga") is None
