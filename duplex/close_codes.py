"""The WebSocket close codes this gateway sends, and what each tells a client.

These are the only closes there are (docs/errors.md, "Close codes"). A client reads the
code, not the reason: 1000 means the session is over, 1012/4000/4001 mean
"resume it (elsewhere)", 1008 means "do not retry as is", 1013 "retry later".
The reason is for people; ``close_reason`` makes any text a valid one.
"""

from __future__ import annotations

import enum

# A close frame's payload is at most 125 bytes (RFC 6455 §5.5): 2 for the code,
# the rest UTF-8 text. A longer or unencodable reason makes the WebSocket library
# raise instead of closing, and the peer sees no close frame at all (1006).
MAX_REASON_BYTES = 123
_ELLIPSIS = "…"


class CloseCode(enum.IntEnum):
    NORMAL = 1000  # the session ended (session.close, a stopped call) or was detached
    GOING_AWAY = 1001  # a relay ended; an abnormal end passed on through a relay
    POLICY = 1008  # refused: API key, resume, Twilio signature/token/start
    INTERNAL_ERROR = 1011  # our fault: the session failed on this process; resume it
    SERVICE_RESTART = 1012  # this process is stopping, or a relay's owner went away
    TRY_AGAIN_LATER = 1013  # not ready yet, or at capacity
    SESSION_REPLACED = 4000  # another socket resumed the session
    LEASE_LOST = 4001  # another process owns the session now

    # Never sent: what a reader reports when the peer vanished without a close frame.
    ABNORMAL = 1006


# What each close means to whoever reads it (``duplex-gateway call`` prints this next
# to the code; docs/operators.md points here): the one table of them.
MEANINGS: dict[int, str] = {
    CloseCode.NORMAL: "the session ended, or the gateway let this socket go",
    CloseCode.GOING_AWAY: "the relay to the session's owner ended; resume it",
    CloseCode.ABNORMAL: "the connection dropped without a close frame (the network, or "
                        "a gateway that died)",
    CloseCode.POLICY: "refused (API key, resume token, a carrier's signature): do not "
                      "retry as is",
    CloseCode.INTERNAL_ERROR: "the session failed on the gateway (its bug); resume it",
    CloseCode.SERVICE_RESTART: "the gateway is restarting; resume the session, here or "
                               "on another gateway",
    CloseCode.TRY_AGAIN_LATER: "the gateway is not ready yet or full; try again later",
    CloseCode.SESSION_REPLACED: "another socket resumed this session",
    CloseCode.LEASE_LOST: "another gateway process owns the session now; resume it there",
}


def meaning(code: int) -> str:
    """What close ``code`` tells a client, in a few words."""
    return MEANINGS.get(code, "not a code this gateway sends")


def sendable(code: int) -> bool:
    """Whether a close frame may carry ``code`` (1005, 1006 and 1015 are observed
    only, 1004 is reserved; RFC 6455 §7.4)."""
    return code in (1000, 1001, 1002, 1003) or 1007 <= code <= 1014 or 3000 <= code <= 4999


def close_reason(text: str) -> str:
    """``text`` as a valid close reason: lone surrogates replaced, at most
    ``MAX_REASON_BYTES`` of UTF-8, cut on a character boundary (marked with …)."""
    data = text.encode("utf-8", "replace")
    if len(data) <= MAX_REASON_BYTES:
        return data.decode("utf-8")
    room = MAX_REASON_BYTES - len(_ELLIPSIS.encode())
    # "ignore" drops the partial character the byte cut may leave at the end
    return data[:room].decode("utf-8", "ignore") + _ELLIPSIS
