"""Each reply's split as spans (``gateway.tracing``), seen by an in-memory
collector: the OpenTelemetry SDK's own exporter, behind the gateway's
``OtlpExporter``, so the spans are those OTLP would send.

A tone turn ended by the VAD is a ``duplex.turn`` span with a child a phase:
the turn detector's wait, then from its decision the transcript, the thinker's
first token and first clause, the voice's first output, the first audio sent
and, once the client says it played some (``playback.ack``; a carrier's
``mark`` echo), the playback mark. The session's clock is the test's, so the
playback mark's distance from the first audio is exactly what the test let
pass; the same phases are in ``duplex_turn_phase_seconds``.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from client import b64, silence, tone
from harness import MemorySocket, connect, running_app
from manual_clock import ManualClock
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.applications import Starlette
from twilio_emulator import parse_twiml, ulaw_silence, ulaw_tone

from gateway import tracing
from gateway.gateway import Gateway
from gateway.tracing_otlp import OtlpExporter

FRAME = 480  # 20 ms at 24 kHz
AUDIO = "response.output_audio.delta"
# every phase of a tone turn ended by the VAD, in the order a reply reaches them
PHASES = ["turn_detection", "transcribe", "first_token", "first_clause", "speak_first_output",
          "first_audio", "playback_mark"]


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    exporter = OtlpExporter(None, plugin="tone", processor=SimpleSpanProcessor(spans))
    monkeypatch.setattr(tracing, "_exporter", exporter)  # as --otel would, before the app
    yield spans


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def traced_app(collector: InMemorySpanExporter, redis_url: str, tmp_path: Path,
                     clock: ManualClock) -> AsyncIterator[tuple[Starlette, Gateway]]:
    async with running_app(redis_url, tmp_path, clock=clock) as pair:
        yield pair


def speak(s: MemorySocket) -> None:
    """A second of tone between silences: the VAD ends the turn on the audio's time."""
    pcm = np.concatenate([silence(0.3), tone(1.0), silence(1.0)])
    for start in range(0, len(pcm), FRAME):
        s.send({"type": "input_audio_buffer.append", "audio": b64(pcm[start:start + FRAME])})


async def sync(s: MemorySocket) -> None:
    s.send({"type": "session.heartbeat"})
    await s.until("session.heartbeat_ack")


def turn_of(spans: InMemorySpanExporter, response_id: str) -> ReadableSpan:
    [turn] = [s for s in spans.get_finished_spans() if s.name == "duplex.turn"
              and s.attributes is not None
              and s.attributes["duplex.response.id"] == response_id]
    return turn


def phases_of(spans: InMemorySpanExporter, turn: ReadableSpan) -> dict[str, ReadableSpan]:
    assert turn.context is not None
    children = [s for s in spans.get_finished_spans()
                if s.parent is not None and s.parent.span_id == turn.context.span_id]
    assert {s.context.trace_id for s in children if s.context} == {turn.context.trace_id}
    return {s.name.removeprefix("duplex."): s for s in children}


async def test_a_vad_turn_is_a_span_a_phase_in_order_and_its_playback_mark_comes_last(
        traced_app: tuple[Starlette, Gateway], collector: InMemorySpanExporter,
        clock: ManualClock) -> None:
    application, gateway = traced_app
    s = await connect(application)
    await s.until("session.created")
    speak(s)
    first = await s.until(AUDIO)
    response_id = first["response_id"]
    turn = turn_of(collector, response_id)  # built at the first audio sent
    assert "playback_mark" not in phases_of(collector, turn)  # not played yet

    clock.advance(0.25)  # the client plays the reply a quarter second after it went
    s.send({"type": "playback.ack", "response_id": response_id, "played_ms": 120})
    await s.until("playback.acknowledged")
    clock.advance(0.5)
    s.send({"type": "playback.ack", "response_id": response_id, "played_ms": 400})
    await s.until("playback.acknowledged")
    for _ in range(100):  # the rest of the reply, a word at a time
        if s.of("response.done"):
            break
        clock.advance(0.2)
        await sync(s)
    [done] = s.of("response.done")

    phases = phases_of(collector, turn)
    assert list(phases) == sorted(phases, key=PHASES.index)  # none but these
    assert set(phases) == set(PHASES)  # the first mark only: one span
    assert set(done["timings_ms"]) == set(PHASES) - {"playback_mark"}
    assert turn.start_time == phases["turn_detection"].start_time
    decided = phases["turn_detection"].end_time
    assert all(phases[p].start_time == decided for p in PHASES[1:])
    ends = [phases[p].end_time for p in PHASES]
    assert ends == sorted(ends)  # each phase ends no earlier than the one before
    assert phases["first_audio"].end_time == turn.end_time
    mark, sent = phases["playback_mark"].end_time, phases["first_audio"].end_time
    assert mark is not None and sent is not None
    assert mark - sent == pytest.approx(250_000_000, abs=1_000)  # the clock's 0.25 s

    metrics = gateway.metrics.render().decode()
    for phase in PHASES:
        assert f'duplex_turn_phase_seconds_count{{phase="{phase}"}} 1.0' in metrics


async def test_a_carriers_first_mark_echoed_is_the_replys_playback_mark(
        collector: InMemorySpanExporter, redis_url: str, tmp_path: Path) -> None:
    async with running_app(redis_url, tmp_path) as (application, gateway):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport,
                                     base_url="http://127.0.0.1:8000") as http:
            answer = await http.post("/v1/twilio/voice", data={"CallSid": "CA" + "1" * 32})
        twiml = parse_twiml(answer.text)
        s = await connect(application, "/v1/twilio/media-stream")
        s.send({"event": "start", "sequenceNumber": "1", "streamSid": "MZ1", "start": {
            "streamSid": "MZ1", "callSid": "CA" + "1" * 32, "tracks": ["inbound"],
            "customParameters": twiml.parameters,
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}})
        audio = ulaw_silence(0.3) + ulaw_tone(1.0) + ulaw_silence(1.0)
        for start in range(0, len(audio), 160):
            payload = base64.b64encode(audio[start:start + 160]).decode()
            s.send({"event": "media", "streamSid": "MZ1",
                    "media": {"track": "inbound", "payload": payload}})
        marks = [(await s.until("mark", timeout=20))["mark"]["name"] for _ in range(2)]
        response_id = marks[0].rpartition(":")[0]
        turn = turn_of(collector, response_id)
        for name in marks:  # Twilio echoes each mark once the audio before it played
            s.send({"event": "mark", "streamSid": "MZ1", "mark": {"name": name}})
        phases = await _until_marked(collector, turn)
        mark, sent = phases["playback_mark"].end_time, phases["first_audio"].end_time
        assert mark is not None and sent is not None and mark >= sent
        assert turn.attributes is not None and turn.attributes["duplex.transport"] == "twilio"
        metrics = gateway.metrics.render().decode()
        assert 'duplex_turn_phase_seconds_count{phase="playback_mark"} 1.0' in metrics
        s.send({"event": "stop", "streamSid": "MZ1", "stop": {"callSid": "CA" + "1" * 32}})
        assert await s.close_code() == 1000


async def _until_marked(collector: InMemorySpanExporter,
                        turn: ReadableSpan) -> dict[str, ReadableSpan]:
    """The turn's phases once its playback mark is among them: the echo has no
    answer of its own to wait for (a bounded poll, 10 s)."""
    for _ in range(1000):
        phases = phases_of(collector, turn)
        if "playback_mark" in phases:
            return phases
        await asyncio.sleep(0.01)
    raise AssertionError("no playback mark")
