"""The ``otel`` extra's half of ``gateway.tracing``: spans built with the
OpenTelemetry SDK and exported by OTLP/HTTP, in batches from the SDK's own thread
(a session never waits on the collector).

Only ``gateway.tracing`` imports this, and only when traces are asked for.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.session.turn_split import FIRST_AUDIO, PLAYBACK_MARK, TURN_DETECTION, TurnSplit

if TYPE_CHECKING:  # gateway.tracing imports this module (lazily), not the other way
    from gateway.tracing import SocketTrace, TurnIds

TRACEPARENT = "traceparent"  # W3C trace context's header
SERVICE = "duplex-gateway"  # unless OTEL_SERVICE_NAME says otherwise
TRACES_PATH = "/v1/traces"
_PROPAGATOR = TraceContextTextMapPropagator()


def traces_url(endpoint: str) -> str:
    """``--otel``'s endpoint as the exporter takes it: OTLP/HTTP's traces path on a
    base URL (as ``OTEL_EXPORTER_OTLP_ENDPOINT`` is read), a full URL as it is."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith(TRACES_PATH) else endpoint + TRACES_PATH


def _ns(ms: float) -> int:
    return round(ms * 1_000_000)


@dataclass(frozen=True, slots=True)
class _Turn:
    """A turn's span as its later phases need it: its context, and its decision
    (ns since the epoch)."""

    inside: Context
    decided: int


class OtlpExporter:
    """This process's tracer, its spans sent to ``endpoint`` (None: where the
    standard ``OTEL_EXPORTER_OTLP_*`` variables say)."""

    def __init__(self, endpoint: str | None, *, plugin: str,
                 processor: SpanProcessor | None = None) -> None:
        service = os.environ.get("OTEL_SERVICE_NAME") or SERVICE
        self._provider = TracerProvider(resource=Resource.create({"service.name": service}))
        if processor is None:  # the OTLP/HTTP exporter, batched (a test may give its own)
            exporter = OTLPSpanExporter(endpoint=traces_url(endpoint) if endpoint else None)
            processor = BatchSpanProcessor(exporter)
        self._provider.add_span_processor(processor)
        self._tracer = self._provider.get_tracer("duplex_gateway")
        self._plugin = plugin

    def turn(self, split: TurnSplit, ids: TurnIds, socket: SocketTrace) -> _Turn:
        """A ``duplex.turn`` span ending now (the first audio), its phases as child
        spans: ``turn_detection`` up to the turn's end decided, every other phase
        from that decision to its own moment. Returned: what ``played`` needs."""
        sent = time.time_ns()
        decided = sent - _ns(split.first_audio_ms)
        began = decided - _ns(split.turn_detection_ms or 0.0)
        parent = (_PROPAGATOR.extract({TRACEPARENT: socket.traceparent})
                  if socket.traceparent else None)
        attributes: dict[str, str | int | float] = {
            "duplex.session.id": ids.session_id, "duplex.response.id": ids.response_id,
            "duplex.turn.id": ids.turn_id, "duplex.plugin": self._plugin,
            "duplex.transport": socket.transport}
        if split.heard_to_sent_ms is not None:
            attributes["duplex.end_of_speech_to_first_audio_ms"] = split.heard_to_sent_ms
        span = self._tracer.start_span("duplex.turn", context=parent, start_time=began,
                                       attributes=attributes)
        inside = trace.set_span_in_context(span)
        if split.turn_detection_ms is not None:
            self._phase(inside, TURN_DETECTION, began, decided)
        for name, ms in split.steps.items():
            self._phase(inside, name, decided, decided + _ns(ms))
        self._phase(inside, FIRST_AUDIO, decided, sent)
        span.end(end_time=sent)
        return _Turn(inside, decided)

    def played(self, turn: object, seconds: float) -> None:
        """The client's first playback mark of ``turn``'s reply: a child span of the
        turn (which ended at the first audio), from its decision to the mark."""
        assert isinstance(turn, _Turn)  # this exporter's own, from ``turn``
        self._phase(turn.inside, PLAYBACK_MARK, turn.decided, turn.decided + _ns(1000 * seconds))

    def _phase(self, parent: Context, name: str, start: int, end: int) -> None:
        span = self._tracer.start_span(f"duplex.{name}", context=parent, start_time=start,
                                       attributes={"duplex.phase": name})
        span.end(end_time=end)

    @contextlib.contextmanager
    def relayed(self, session_id: str, headers: Mapping[str, str]) -> Iterator[dict[str, str]]:
        incoming = headers.get(TRACEPARENT)
        parent = _PROPAGATOR.extract({TRACEPARENT: incoming}) if incoming else None
        span = self._tracer.start_span("duplex.relay", context=parent,
                                       kind=trace.SpanKind.CLIENT,
                                       attributes={"duplex.session.id": session_id})
        carried: dict[str, str] = {}
        _PROPAGATOR.inject(carried, context=trace.set_span_in_context(span))
        try:
            yield carried
        finally:
            span.end()

    def shutdown(self) -> None:
        self._provider.shutdown()
