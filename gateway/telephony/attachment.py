"""The session's attachment for a Twilio socket: server events → Twilio messages.

Each ``response.output_audio.delta`` (already ``audio/pcmu``) becomes a
``media`` message and a ``mark`` named ``<response id>:<cumulative ms>``. A
barge-in (``input_audio_buffer.speech_started``) while the caller still has
our audio buffered becomes a ``clear`` and a ``conversation.item.truncate`` at
the ms of the last mark Twilio echoed *before* the clear: marks echoed after
it were flushed, not played (research/peers.md §3.2), and wall-clock time is
never used (I6).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from duplex import commands as c
from duplex.close_codes import close_reason
from duplex.errors import CapacityError
from gateway.log_limits import LogLimiter
from gateway.outbound import Outbound
from gateway.ws_reads import direct_reads, send_text

if TYPE_CHECKING:
    from gateway.session.runner import SessionRunner

log = logging.getLogger(__name__)

MULAW_BYTES_PER_MS = 8  # 8 kHz, one byte a sample


@dataclass(slots=True)
class _Reply:
    """What of one response's audio went to Twilio, and what it says was played."""

    response_id: str
    item_id: str
    sent_ms: float = 0.0
    heard_ms: float = 0.0  # cumulative ms of the last mark echoed before any clear
    cleared: bool = False


class TwilioAttachment:
    """The session's attachment for one Twilio socket: translates as it sends."""

    def __init__(self, ws: WebSocket, stream_sid: str, call_sid: str, generation: int,
                 runner: SessionRunner) -> None:
        self.ws = ws
        self.direct = direct_reads(ws)  # sends straight to uvicorn's protocol when it can
        self.stream_sid = stream_sid
        self.call_sid = call_sid
        self.generation = generation
        self.extensions = True  # the bridge reads every event itself
        self.runner = runner
        self.ended = asyncio.Event()
        self.reply: _Reply | None = None
        self.marks_sent = 0
        self.warnings = LogLimiter(log)  # Twilio floods; this socket's log does not

    async def send(self, out: Outbound) -> None:
        ev = out.event()  # as built: never parsed back, but for a replay
        kind = ev.get("type")
        if kind == "response.output_audio.delta":
            await self._audio(ev)
        elif kind == "input_audio_buffer.speech_started":
            await self._barge_in()
        elif kind == "error":
            log.info("call %s: session error %s", self.call_sid, ev.get("error"))

    async def _send(self, message: dict[str, Any]) -> None:
        await send_text(self.ws, self.direct, json.dumps({**message, "streamSid": self.stream_sid}))

    async def _audio(self, ev: dict[str, Any]) -> None:
        payload = ev.get("delta") or ""
        rid, item_id = str(ev.get("response_id")), str(ev.get("item_id"))
        if self.reply is None or self.reply.response_id != rid:
            self.reply = _Reply(rid, item_id)
        reply = self.reply
        decoded_bytes = len(payload) * 3 // 4 - payload[-2:].count("=")
        reply.sent_ms += decoded_bytes / MULAW_BYTES_PER_MS
        await self._send({"event": "media", "media": {"payload": payload}})
        await self._send({"event": "mark", "mark": {"name": f"{rid}:{reply.sent_ms:.3f}"}})
        self.marks_sent += 1

    def on_mark(self, name: str) -> None:
        """Twilio played the audio up to this mark (unless a clear flushed it)."""
        rid, _, ms = name.rpartition(":")
        reply = self.reply
        if reply is None or reply.cleared or rid != reply.response_id:
            return
        try:
            reply.heard_ms = max(reply.heard_ms, float(ms))
        except ValueError:
            self.warnings.warning("foreign_mark", "call %s: mark %r is not one of ours",
                                  self.call_sid, name[:80])

    async def _barge_in(self) -> None:
        reply = self.reply
        if reply is None or reply.cleared or reply.heard_ms >= reply.sent_ms:
            return  # nothing of ours is still buffered at Twilio
        reply.cleared = True  # from here on, echoed marks were flushed, not heard
        await self._send({"event": "clear"})
        heard = int(reply.heard_ms)
        log.info("call %s: barge-in; %s heard %d of %.0f ms", self.call_sid,
                 reply.response_id, heard, reply.sent_ms)
        self.submit(c.TruncateItem(None, reply.item_id, 0, heard))

    async def end(self, code: int, reason: str, *, linger_s: float = 0.0) -> None:
        # No lingering: Twilio sends no commands that a refusal would answer.
        if self.ended.is_set():
            return
        self.ended.set()
        try:
            await self.ws.close(code, close_reason(reason))
        except (RuntimeError, WebSocketDisconnect):
            pass

    def submit(self, cmd: c.Command) -> None:
        """Queue ``cmd`` for the session; a flooded session drops it (logged, rate-limited)."""
        try:
            self.runner.submit(cmd)
        except CapacityError:
            self.warnings.warning("flooded", "call %s: session flooded; dropped %s",
                                  self.call_sid, type(cmd).__name__)
