"""What the caller heard, from the carrier's own playback acknowledgements.

A carrier plays what it buffers in order and says so when it reaches a named
point we put after a chunk (Twilio, Telnyx and Exotel: ``mark``; Plivo:
``checkpoint``). Each point is named ``<response id>:<cumulative ms>``, so its
echo says how much of the reply was played. A barge-in while our audio is still
buffered clears the carrier's buffer and truncates the reply at the last point
echoed *before* the clear: points echoed after it were flushed, not played
(a carrier echoes pending marks on ``clear``), and wall-clock time is never used
(I6).
"""

from __future__ import annotations

from dataclasses import dataclass

from duplex import commands as c
from gateway.transports.codec import QUIET, Ignore, Played


@dataclass(slots=True)
class PlayedReply:
    """What of one response's audio went out, and what the carrier says was played."""

    response_id: str
    item_id: str
    sent_ms: float = 0.0
    heard_ms: float = 0.0  # cumulative ms of the last point echoed before any clear
    cleared: bool = False
    told: bool = False  # the session heard that its playback began (``news``)


class Playback:
    """The current reply's playback at the carrier; pure."""

    def __init__(self, bytes_per_ms: float) -> None:
        self.bytes_per_ms = bytes_per_ms  # of the audio as the carrier plays it
        self.reply: PlayedReply | None = None

    def sent(self, response_id: str, item_id: str, nbytes: int) -> str:
        """``nbytes`` more of the reply went out: the name of the point after them."""
        if self.reply is None or self.reply.response_id != response_id:
            self.reply = PlayedReply(response_id, item_id)
        self.reply.sent_ms += nbytes / self.bytes_per_ms
        return f"{response_id}:{self.reply.sent_ms:.3f}"

    def played(self, name: str) -> bool:
        """The carrier played up to the point ``name`` (unless a clear flushed it);
        False when ``name`` is not a point of ours."""
        response_id, _, ms = name.rpartition(":")
        reply = self.reply
        if reply is None or reply.cleared or response_id != reply.response_id:
            return True  # an earlier reply's, or flushed by the clear: proves nothing
        try:
            reply.heard_ms = max(reply.heard_ms, float(ms))
        except ValueError:
            return False
        return True

    def news(self) -> Played | Ignore:
        """What the point just echoed (``played``) tells the session: the reply's
        playback mark (``Played``) the first time some of it was heard, else nothing."""
        reply = self.reply
        if reply is None or reply.told or reply.cleared or not reply.heard_ms:
            return QUIET
        reply.told = True
        return Played(reply.response_id)

    def barge_in(self) -> c.TruncateItem | None:
        """The caller spoke over the reply: the truncate to what they heard, when some
        of it is still buffered at the carrier (which the caller then clears); None
        when nothing of ours is."""
        reply = self.reply
        if reply is None or reply.cleared or reply.heard_ms >= reply.sent_ms:
            return None
        reply.cleared = True  # from here on, echoed points were flushed, not heard
        return c.TruncateItem(None, reply.item_id, 0, int(reply.heard_ms))
