"""Server events against the official ``openai`` package's Realtime types, strictly.

Each event the tests receive is validated by the model that its ``type`` names in
``openai.types.realtime.RealtimeServerEvent`` (GA) or
``openai.types.beta.realtime.RealtimeServerEvent`` (beta, the dialect of a client
that sent ``OpenAI-Beta: realtime=v1``): ``model_validate(event, strict=True)``.

Why not the package's own parsing: the SDK builds events with ``construct_type``,
which validates nothing (an unknown ``type`` comes back as the union's first model);
and ``TypeAdapter(RealtimeServerEvent)`` does not know the union's discriminator (it
is the SDK's ``PropertyInfo``, not pydantic's), so a bad event fails against every
member at once, a hundred-odd errors that bury the one that matters. Picking the
model by ``type`` is what the discriminator means, and its errors name the field.

The models allow extra fields (``extra="allow"``), so what the gateway adds
(``server_event_seq``, ``timings_ms``…) passes, as it does for a client built on them.
The gateway's own events are not OpenAI's: ``GATEWAY_EVENTS`` lists them, and only
them, as exempt; ``KNOWN`` lists the fields the types reject that the gateway still
sends as it does (each one reported in the summary).
"""

from __future__ import annotations

import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from openai import BaseModel
from openai.types.beta.realtime import RealtimeServerEvent as BetaServerEvent
from openai.types.realtime import RealtimeServerEvent as GAServerEvent
from pydantic import ValidationError

Dialect = Literal["ga", "beta"]

# the gateway's extensions to the protocol (docs/sessions.md, docs/protocol.md: resume,
# heartbeats, playback)
GATEWAY_EVENTS = frozenset({
    "session.resumed", "session.closed", "session.expired", "session.replaced",
    "session.resync_required", "session.heartbeat_ack", "playback.acknowledged",
})


def _models_by_type(union: Any) -> dict[str, type[BaseModel]]:
    members = typing.get_args(typing.get_args(union)[0])  # Annotated[Union[...], info]
    return {name: model for model in members
            for name in typing.get_args(model.model_fields["type"].annotation)}


MODELS: dict[Dialect, dict[str, type[BaseModel]]] = {
    "ga": _models_by_type(GAServerEvent), "beta": _models_by_type(BetaServerEvent)}

# Fields the official types reject that the gateway sends as they are, for now: (dialect,
# event type, the field's path) → why. Each one met is listed in the summary; any other
# rejection fails the test that received it. (Errors outside the journal carry an
# event_id, and beta's session.model is left out unless a client named one.)
KNOWN: dict[tuple[Dialect, str, str], str] = {
    ("beta", "transcription_session.updated", "session.client_secret"): (
        "beta's TranscriptionSession requires client_secret, which its own docstring says "
        "is not present when a session is updated over the WebSocket API (OpenAI's server "
        "leaves it out too)"),
}


def problems(event: dict[str, Any], dialect: Dialect) -> list[tuple[str, str]]:
    """(field path, why) for each thing the official types reject in ``event``
    (path ``type`` for an unknown type); [] when they accept it or it is one of the
    gateway's own."""
    kind = event.get("type")
    if kind in GATEWAY_EVENTS:
        return []
    model = MODELS[dialect].get(kind) if isinstance(kind, str) else None
    if model is None:
        return [("type", f"type {kind!r} is no {dialect} server event")]
    try:
        model.model_validate(event, strict=True)
    except ValidationError as exc:
        return [(".".join(map(str, e["loc"])), f"{e['msg']} (got {_short(e.get('input'))})")
                for e in exc.errors()]
    return []


def rejection(event: dict[str, Any], dialect: Dialect,
              found: list[tuple[str, str]] | None = None) -> str | None:
    """Why the official types reject ``event`` (``KNOWN`` fields aside); None when
    they accept it. ``found``: its ``problems``, when already known."""
    kind = str(event.get("type"))
    found = [(path, why) for path, why in (problems(event, dialect) if found is None
                                           else found)
             if (dialect, kind, path) not in KNOWN]
    if not found:
        return None
    return "; ".join(why if path == "type" else f"{path}: {why}" for path, why in found)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass
class Conformance:
    """Validates events as they are recorded; keeps each rejection once per shape
    (dialect, type, reason) and which (dialect, type) pairs passed."""

    accepted: set[tuple[Dialect, str]] = field(default_factory=set)
    rejected: dict[tuple[Dialect, str, str], dict[str, Any]] = field(default_factory=dict)
    exempt: set[str] = field(default_factory=set)
    known: set[tuple[Dialect, str, str]] = field(default_factory=set)

    def check(self, events: Iterable[dict[str, Any]], dialect: Dialect) -> list[str]:
        """Validate ``events``; the rejections among them, one line each."""
        lines: list[str] = []
        for event in events:
            kind = str(event.get("type"))
            found = problems(event, dialect)
            self.known.update((dialect, kind, path) for path, _ in found
                              if (dialect, kind, path) in KNOWN)
            why = rejection(event, dialect, found)
            if why is None:
                (self.exempt.add(kind) if kind in GATEWAY_EVENTS
                 else self.accepted.add((dialect, kind)))
                continue
            line = f"{dialect} {kind}: {why}"
            if line not in lines:
                lines.append(line)
            self.rejected.setdefault((dialect, kind, why), event)
        return lines

    def summary(self) -> list[str]:
        lines = []
        for dialect in ("ga", "beta"):
            kinds = sorted(k for d, k in self.accepted if d == dialect)
            lines.append(f"{dialect} ({len(kinds)} types valid): {', '.join(kinds)}")
        lines.append(f"gateway extensions seen: {', '.join(sorted(self.exempt)) or 'none'}")
        for dialect, kind, path in sorted(self.known):
            lines.append(f"KNOWN {dialect} {kind}: {path} rejected ({KNOWN[dialect, kind, path]})")
        for dialect, kind, why in sorted(self.rejected):
            lines.append(f"REJECTED {dialect} {kind}: {why}")
        return lines
