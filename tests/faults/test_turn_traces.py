"""Each reply as an OpenTelemetry trace, exported by OTLP/HTTP (``gateway.tracing``).

Real gateway processes with ``--otel`` export to a real HTTP receiver here, which
decodes what arrives as the collector would (``ExportTraceServiceRequest``). A
reply is a ``duplex.turn`` span with its phases as children, named by ids and
never by words; a session relayed from one gateway to its owner on another is one
trace across both.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from client import eventually
from fault_helpers import (
    GatewayFactory,
    Stream,
    resume,
    seqs,
    start,
    transcript_of,
    turn_completes,
)
from gateway_process import GatewayProcess
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from redis_server import RedisServer

# the SDK's batch delay (5 s by default): spans reach the receiver soon after the turn
QUICK_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "50"}
PHASES = {"duplex.turn_detection", "duplex.transcribe", "duplex.first_audio"}


@dataclass(frozen=True, slots=True)
class Span:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    start_ns: int
    end_ns: int


def _value(kv: KeyValue) -> Any:
    return getattr(kv.value, kv.value.WhichOneof("value"))


@dataclass
class Receiver:
    """An OTLP/HTTP traces endpoint: every span posted to it, decoded."""

    spans: list[Span] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, path: str, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        with self.lock:
            self.paths.append(path)
            for resource_spans in request.resource_spans:
                resource = {kv.key: _value(kv) for kv in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    self.spans.extend(
                        Span(resource["service.name"], s.name, s.trace_id.hex(), s.span_id.hex(),
                             s.parent_span_id.hex(), {kv.key: _value(kv) for kv in s.attributes},
                             s.start_time_unix_nano, s.end_time_unix_nano)
                        for s in scope_spans.spans)

    def named(self, name: str, **attributes: Any) -> list[Span]:
        with self.lock:
            return [s for s in self.spans if s.name == name
                    and all(s.attributes.get(k) == v for k, v in attributes.items())]

    def children(self, parent: Span) -> list[Span]:
        with self.lock:
            return [s for s in self.spans if s.parent_span_id == parent.span_id]


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    got = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            got.take(self.path, body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield got, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def traced(gateways: GatewayFactory, endpoint: str, service: str, *flags: str) -> GatewayProcess:
    proc = gateways("--otel", endpoint, *flags)
    proc.env.update(QUICK_EXPORT, OTEL_SERVICE_NAME=service)
    return proc


async def turn_span(got: Receiver, response_id: str) -> Span:
    async def arrived() -> Span | None:
        turns = got.named("duplex.turn", **{"duplex.response.id": response_id})
        # the phases go out in the same batch as the turn, or one before
        return turns[0] if turns and len(got.children(turns[0])) >= len(PHASES) else None

    return await eventually(arrived, 20, f"the turn span of {response_id} and its phases")


def words_said(s: Stream) -> list[str]:
    """Every transcript and reply text the client saw."""
    said = [m.event.get("transcript", "") for m in s.messages
            if m.type == "conversation.item.input_audio_transcription.completed"]
    said += [transcript_of(m.event) for m in s.messages if m.type == "response.done"]
    return [text for text in said if text]


async def test_a_reply_is_a_turn_span_with_its_phases_and_no_words(
        receiver: tuple[Receiver, str], redis_server: RedisServer,
        gateways: GatewayFactory) -> None:
    got, endpoint = receiver
    gw = await start(traced(gateways, endpoint, "gw-one", "--redis-url", redis_server.url))
    s = await Stream.open(gw.ws)
    await s.until_type("session.created")
    sid = s.messages[0].event["session"]["id"]
    done = await turn_completes(s, turn=1)
    response_id = done["response"]["id"]

    turn = await turn_span(got, response_id)
    assert turn.service == "gw-one"
    assert turn.parent_span_id == ""  # no traceparent on the socket: a trace of its own
    assert turn.attributes == {
        "duplex.session.id": sid, "duplex.response.id": response_id, "duplex.turn.id": 1,
        "duplex.plugin": "tone", "duplex.transport": "realtime",
        "duplex.end_of_speech_to_first_audio_ms": turn.attributes[
            "duplex.end_of_speech_to_first_audio_ms"]}
    phases = {p.name: p for p in got.children(turn)}
    # the same split as response.done's timings_ms: one span a phase
    assert set(phases) == {f"duplex.{name}" for name in done["timings_ms"]}
    assert PHASES <= set(phases)
    assert {p.trace_id for p in phases.values()} == {turn.trace_id}
    detection = phases["duplex.turn_detection"]
    first_audio = phases["duplex.first_audio"]
    # turn detection opens the turn; every other phase starts at its decision
    assert detection.start_ns == turn.start_ns
    assert detection.end_ns == first_audio.start_ns == phases["duplex.transcribe"].start_ns
    assert first_audio.end_ns == turn.end_ns

    said = words_said(s)
    assert said  # the turn had words, in both directions
    words = {w for text in said for w in text.split() if len(w) > 3}
    values = [str(v) for span in got.spans for k, v in span.attributes.items()
              if k != "duplex.plugin"]  # "tone" is also a word the tone plugin hears
    assert [v for v in values if v in words or any(text in v for text in said)] == []
    assert set(got.paths) == {"/v1/traces"}
    await s.close()


async def test_a_relayed_session_is_one_trace_across_both_processes(
        receiver: tuple[Receiver, str], redis_server: RedisServer,
        gateways: GatewayFactory) -> None:
    got, endpoint = receiver
    flags = ("--redis-url", redis_server.url, "--reaper-interval-s", "0.5")
    a = traced(gateways, endpoint, "gw-owner", *flags).start()
    b = await start(traced(gateways, endpoint, "gw-relay", *flags))
    s = await Stream.open(a.ws)
    await s.until_type("session.created")
    created = s.messages[0].event
    first = await turn_completes(s, turn=1)
    s.ws.transport.abort()
    await s.wait_closed()
    r, _, _ = await resume(b.ws, created["session"]["id"], created["resume_token"],
                           max(seqs(s.messages)))
    second = await turn_completes(r, turn=2)  # through B, answered by its owner A
    await r.close()

    before = await turn_span(got, first["response"]["id"])
    relayed = await turn_span(got, second["response"]["id"])
    relay = await eventually(
        lambda: _now(got.named("duplex.relay", **{"duplex.session.id": created["session"]["id"]})),
        20, "the relay's span")
    assert (before.service, relayed.service, relay.service) == ("gw-owner", "gw-owner",
                                                                "gw-relay")
    assert relayed.trace_id == relay.trace_id
    assert relayed.parent_span_id == relay.span_id
    assert before.trace_id != relay.trace_id  # served directly: not part of the relay
    assert {p.trace_id for p in got.children(relayed)} == {relay.trace_id}


async def _now(spans: list[Span]) -> Span | None:
    return spans[0] if spans else None
