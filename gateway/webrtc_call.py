"""One WebRTC call from its offer to its end, and the process's calls by id.

A call is negotiated before any session exists (a bad offer leaves nothing), then
its session is opened on this process, which owns it: the media and the data
channel terminate where the session runs. The session is attached only once the
peer's ``oai-events`` channel opens; a peer that never gets there within
``--webrtc-ice-timeout-s`` (ICE never completes, or no channel) has its session
ended and its peer connection closed. From the attach on, the call is served by
the shared loop like a WebSocket: a hang-up (``DELETE``) ends the session; the
peer connection failing or closing detaches it, resumable over
``/v1/realtime?resume=`` for ``--disconnect-grace-s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCDataChannel,
    RTCPeerConnection,
    RTCSessionDescription,
)

from duplex import commands as c
from duplex.close_codes import CloseCode
from duplex.errors import InvalidRequest
from gateway.session.runner import SessionRunner
from gateway.transports.loop import serve
from gateway.transports.peer import PeerFrames, ReplyTrack
from gateway.transports.peer_audio import PeerAudio
from gateway.transports.realtime_codec import RealtimeCodec
from gateway.transports.speaker import Speaker
from gateway.transports.webrtc_attachment import WebRTCAttachment

if TYPE_CHECKING:
    from gateway.gateway import Gateway

log = logging.getLogger(__name__)

EVENTS_CHANNEL = "oai-events"
HANGUP_WAIT_S = 10.0  # a DELETE answers once the session has ended, or after this


class PeerCall:
    def __init__(self) -> None:
        self.call_id = ""  # named once its session is open (``Calls.start``)
        # no STUN or TURN server: the gateway answers with its host candidates (a
        # public deployment puts it where the peers can reach them)
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.audio = PeerAudio()
        self.speaker = Speaker()
        self.frames = PeerFrames(self.pc, self.audio)
        self.mic: MediaStreamTrack | None = None
        self.connected = asyncio.Event()  # the oai-events channel opened, or the peer failed
        self.task: asyncio.Task[None] | None = None
        self.runner: SessionRunner | None = None
        self.pc.on("datachannel", self._channel)
        self.pc.on("track", self._track)
        self.pc.on("connectionstatechange", self._state)

    async def answer(self, offer: str) -> str:
        """The SDP answer to ``offer`` (raises ``InvalidRequest`` when the stack
        cannot take it)."""
        try:
            await self.pc.setRemoteDescription(RTCSessionDescription(offer, "offer"))
            self.pc.addTrack(ReplyTrack(self.speaker))
            await self.pc.setLocalDescription(await self.pc.createAnswer())
        except Exception as exc:  # aiortc's parser raises whatever a malformed line trips
            raise InvalidRequest(f"the SDP offer could not be negotiated: {exc}"[:300],
                                 code="invalid_sdp", param="sdp") from None
        local = self.pc.localDescription
        assert local is not None
        return str(local.sdp)

    def _channel(self, channel: RTCDataChannel) -> None:
        if channel.label == EVENTS_CHANNEL and self.frames.channel is None:
            self.frames.use(channel)
            self.connected.set()

    def _track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio" and self.mic is None:
            self.mic = track

    def _state(self) -> None:
        state = self.pc.connectionState
        if state in ("failed", "closed"):
            self.frames.gone(CloseCode.ABNORMAL, f"peer connection {state}")
            self.connected.set()

    async def run(self, runner: SessionRunner, token: str, codec: RealtimeCodec,
                  update: c.UpdateSession | None, ice_timeout_s: float) -> None:
        """Attach the session once the peer connects, then serve it; end it if the
        peer never does."""
        listening: asyncio.Task[None] | None = None
        self.runner = runner
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.connected.wait(), ice_timeout_s)
            if self.frames.channel is None or self.pc.connectionState in ("failed", "closed"):
                log.info("call %s: the peer did not connect within %.0f s; session %s ends",
                         self.call_id, ice_timeout_s, runner.session_id)
                runner.request_close("webrtc_not_connected")
                return
            attachment = WebRTCAttachment(
                self.frames, codec, runner, 1, extensions=False,
                name=f"call {self.call_id} (session {runner.session_id})",
                audio=self.audio, speaker=self.speaker)
            await runner.attach(attachment, resume_token=token, cursor=None)
            if update is not None:
                attachment.submit(update)
            if self.mic is not None:
                listening = asyncio.create_task(self.frames.listen(self.mic))
            await serve(attachment)
        except Exception:  # a bug of ours, or the store failing the attach: no orphan
            runner.request_close("webrtc_failed")
            raise
        finally:
            if listening is not None:
                listening.cancel()
            await self.pc.close()

    async def ended(self) -> None:
        """Once the call's session has ended (at once for a call without one yet)."""
        if self.runner is not None:
            await self.runner.closed.wait()

    def hang_up(self) -> None:
        """The client's ``DELETE``: the session ends (``client_close``), as a WebSocket
        closed with 1000 ends it."""
        self.frames.gone(CloseCode.NORMAL, "hang-up")
        self.connected.set()


class Calls:
    """The calls this process serves, by id (``rtc_…``)."""

    def __init__(self) -> None:
        self.calls: dict[str, PeerCall] = {}

    def new(self) -> PeerCall:
        return PeerCall()

    def start(self, call: PeerCall, call_id: str, gateway: Gateway, runner: SessionRunner,
              token: str, codec: RealtimeCodec, update: c.UpdateSession | None) -> None:
        call.call_id = call_id
        self.calls[call_id] = call
        gauge = gateway.metrics.webrtc_calls
        gauge.inc()
        ice_timeout_s = gateway.config.webrtc_ice_timeout_s
        call.task = asyncio.create_task(call.run(runner, token, codec, update, ice_timeout_s),
                                        name=call.call_id)

        def ended(task: asyncio.Task[None]) -> None:
            self.calls.pop(call.call_id, None)
            gauge.dec()
            if not task.cancelled() and task.exception() is not None:
                log.error("call %s failed", call.call_id, exc_info=task.exception())

        call.task.add_done_callback(ended)

    async def hang_up(self, call_id: str) -> bool:
        """End the call ``call_id``; False when this process has no such call."""
        call = self.calls.get(call_id)
        if call is None:
            return False
        call.hang_up()
        # answered once the session has ended (its terminal journaled), not only told to
        waits = [asyncio.ensure_future(w) for w in (call.task, call.ended()) if w is not None]
        _, pending = await asyncio.wait(waits, timeout=HANGUP_WAIT_S,
                                        return_when=asyncio.ALL_COMPLETED)
        for waiting in pending:
            if waiting is not call.task:
                waiting.cancel()
        return True

    async def stop(self) -> None:
        """Close every peer connection left (the gateway stopping: the sessions were
        detached already, and stay resumable)."""
        for call in list(self.calls.values()):
            call.frames.gone(CloseCode.SERVICE_RESTART, "gateway restarting")
            call.connected.set()
        tasks = [call.task for call in self.calls.values() if call.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=HANGUP_WAIT_S)
