"""The socket a session speaks through, and server events as they go out.

A session has at most one attachment at a time (``Outbox.attachment``); the
transports implement ``Attachment`` (``/v1/realtime``, Twilio's media stream).
Every server event is serialised once, here, into an ``Outbound`` that the
journal stores and the attachment sends.
"""

from __future__ import annotations

import json
import secrets
from typing import Protocol

import orjson

from duplex.errors import DuplexError
from duplex.events import Event
from gateway.outbound import Outbound


class Attachment(Protocol):
    """The socket a session is currently attached to."""

    generation: int
    extensions: bool  # it takes the duplex events it did not ask for (``OPT_IN``)

    async def send(self, out: Outbound) -> None:
        """Send one server event, in this socket's protocol."""
        ...

    async def end(self, code: int, reason: str, *, linger_s: float = 0.0) -> None:
        """Close the socket (idempotent); its reader stops. ``linger_s`` keeps it open
        that long for late commands to be refused."""
        ...


# Extension events a client gets without having asked (by sending an extension
# command): journaled always, sent only to an attachment that opted in.
OPT_IN = frozenset({"session.expired"})


def unjournaled_error(error: DuplexError) -> Event:
    """An ``error`` sent outside the session's journal (a refused socket, a command
    after the end, the store down): it still has an ``event_id``, as every server
    event of OpenAI's has, so a strict client takes it."""
    return {"type": "error", "event_id": f"event_u{secrets.token_hex(8)}",
            "error": error.to_wire()}


def dumps(event: Event) -> str:
    """One server event as compact JSON text: orjson's (several times faster on the
    audio deltas' long base64 strings; UTF-8 text, not ``\\u`` escapes), the
    stdlib's for what orjson refuses (a lone surrogate, an integer beyond 64 bits)."""
    try:
        return orjson.dumps(event).decode()
    except TypeError:  # orjson.JSONEncodeError is one
        return json.dumps(event, separators=(",", ":"))


def outbound(event: Event) -> Outbound:
    """An event sent outside the journal, serialised here."""
    return Outbound(dumps(event), event["type"], event)
