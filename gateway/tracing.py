"""Each reply's split (``TurnSplit``) as an OpenTelemetry trace, when asked for.

Off by default. ``--otel URL`` (an OTLP/HTTP endpoint), or the standard
``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, turn it
on; the ``otel`` extra then does the exporting (``gateway.tracing_otlp``). When
nothing asks for traces, nothing of OpenTelemetry is imported and every hook
here is one ``None`` check.

A reply becomes a ``duplex.turn`` span from the end of the user's speech (or
from the reply's start, when no VAD ended the turn) to its first audio sent,
with a child span per phase of its split. The spans are built once the split
is known, from its numbers: the split's clock is the only clock, anchored to
the wall clock at the first audio. The client's first playback mark comes
later, if its transport tells one (``played``): one more child span of the
turn, from the turn's end to the mark. They carry ids (session, response,
turn), the plugin and the transport, never audio or words.

A socket upgrade that carries a W3C ``traceparent`` (a client's, or a relaying
gateway's: ``gateway.owner_relay``) makes its turns children of that span, so a
relayed session is one trace across both processes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from gateway.config import GatewayConfig
    from gateway.session.turn_split import TurnSplit

TRACEPARENT = "traceparent"
ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
EXTRA_MISSING = ("traces are asked for ({why}) but OpenTelemetry is not installed "
                 "({error}): pip install 'duplex-gateway[otel]'")


@dataclass(frozen=True, slots=True)
class SocketTrace:
    """What a session's turns take from the socket it is attached to: its
    transport (``realtime``, ``twilio``, ``telnyx``, ...) and the ``traceparent``
    its upgrade carried, if any."""

    transport: str = ""
    traceparent: str | None = None


UNTRACED = SocketTrace()


@dataclass(frozen=True, slots=True)
class TurnIds:
    session_id: str
    response_id: str
    turn_id: int


class Exporter(Protocol):
    """What ``gateway.tracing_otlp`` provides: spans out, by OTLP."""

    def turn(self, split: TurnSplit, ids: TurnIds, socket: SocketTrace) -> object: ...

    def played(self, turn: object, seconds: float) -> None: ...

    def relayed(self, session_id: str,
                headers: Mapping[str, str]) -> contextlib.AbstractContextManager[
                    dict[str, str]]: ...

    def shutdown(self) -> None: ...


_exporter: Exporter | None = None  # this process's, like OpenTelemetry's own provider


def asked(config: GatewayConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """Why traces are to be exported (the flag or the variable that asks), or None."""
    env = os.environ if environ is None else environ
    if config.otel:
        return "--otel"
    return next((name for name in ENDPOINT_VARS if env.get(name)), None)


def require(config: GatewayConfig, environ: Mapping[str, str] | None = None) -> None:
    """Refuse to start when traces are asked for and the ``otel`` extra is missing
    (SystemExit: one line); import nothing when they are not."""
    why = asked(config, environ)
    if why is None:
        return
    try:
        import gateway.tracing_otlp  # noqa: F401
    except ImportError as exc:
        raise SystemExit(EXTRA_MISSING.format(why=why, error=exc)) from None


def start(config: GatewayConfig) -> None:
    """Export this process's traces from now on, if asked (``asked``)."""
    global _exporter
    if asked(config) is None or _exporter is not None:
        return
    from gateway.tracing_otlp import OtlpExporter

    _exporter = OtlpExporter(config.otel, plugin=config.plugin)


def stop() -> None:
    """Send what is buffered and stop exporting."""
    global _exporter
    exporter, _exporter = _exporter, None
    if exporter is not None:
        exporter.shutdown()


def socket_trace(attachment: object) -> SocketTrace:
    """The transport and ``traceparent`` of the socket behind ``attachment`` (a
    ``gateway.transports.attachment.SocketAttachment``); read only when tracing."""
    if _exporter is None:
        return UNTRACED
    codec = getattr(attachment, "codec", None)
    transport = type(codec).__name__.removesuffix("Codec").lower() if codec else ""
    headers = getattr(getattr(getattr(attachment, "frames", None), "ws", None), "headers", {})
    return SocketTrace(transport, headers.get(TRACEPARENT))


def turn(split: TurnSplit, ids: TurnIds, socket: SocketTrace) -> object | None:
    """One reply reached its first audio: its spans; returned, its turn as
    ``played`` takes it (None when not tracing)."""
    if _exporter is None:
        return None
    return _exporter.turn(split, ids, socket)


def played(turn: object | None, seconds: float) -> None:
    """The client first said it played the reply of ``turn`` (``turn``'s return),
    ``seconds`` after the turn's end was decided: its playback mark."""
    if turn is not None and _exporter is not None:
        _exporter.played(turn, seconds)


@contextlib.contextmanager
def relayed(session_id: str, headers: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """A relay of ``session_id`` to its owner, as a span (child of the client's
    ``traceparent`` in ``headers``, if any) for as long as it lasts: the headers
    that carry it to the owner (none when not tracing)."""
    if _exporter is None:
        yield {}
        return
    with _exporter.relayed(session_id, headers) as carried:
        yield carried
