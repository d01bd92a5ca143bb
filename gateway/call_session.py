"""The conversation behind ``duplex-gateway call``: one session, a turn per question.

Each question is streamed as the next user turn (at real time by default, like
a person speaking) followed by a second of silence so server VAD ends the
turn; the turn is over when its ``response.done`` arrives.

Each turn is timed as a person waits it, "mouth to ear": from the moment the
frame holding the question's last voiced sample went out (found in the audio
by its energy: ``call_audio.last_voiced``) to the moment the reply's first
audio came in. The server's ``audio_end_ms`` (its VAD's end of speech) is kept
next to the client's own, to show they agree. Anything that stops
the conversation (no gateway at the URL, a refused handshake, a closed socket,
an ``error`` event, no answer in time) is a ``CallError`` that says so in one
line.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import json
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from duplex.close_codes import CloseCode, meaning
from gateway.call_audio import RATE, CallError, last_voiced
from plugins.base import Pcm

FRAME_MS = 20
OPEN_TIMEOUT_S = 10.0
TRAILING_SILENCE_S = 1.0  # longer than any sensible silence_duration_ms: ends the turn


@dataclass
class TurnReport:
    """What one turn produced. Events are matched to the turn by the ids the turn's
    own ``input_audio_buffer.committed`` and ``response.created`` carry, so a late
    event of an earlier turn is never taken for this one."""

    item_id: str | None = None
    response_id: str | None = None
    user_transcript: str = ""
    assistant_transcript: str = ""
    status: str = ""
    audio: list[bytes] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)  # event → seconds since start
    timings: dict[str, Any] = field(default_factory=dict)  # the server's breakdown
    voiced_end_ms: float | None = None  # the last voiced sample, on the session's input clock
    server_audio_end_ms: float | None = None  # speech_stopped's audio_end_ms

    def mark(self, name: str, t0: float) -> None:
        self.marks.setdefault(name, time.monotonic() - t0)

    @property
    def mouth_to_ear_ms(self) -> float | None:
        """The last voiced sample sent → the first reply audio received: the wait a
        person has (None when either is missing)."""
        voiced, first = self.marks.get("last_voiced"), self.marks.get("first_audio")
        return None if voiced is None or first is None else 1000 * (first - voiced)

    def pcm(self) -> Pcm:
        return np.frombuffer(b"".join(self.audio), dtype="<i2")


async def _connect(url: str, api_key: str | None) -> ClientConnection:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        return await connect(url, additional_headers=headers, max_size=None,
                             open_timeout=OPEN_TIMEOUT_S)
    except InvalidURI:
        raise CallError(f"{url} is not a ws:// or wss:// URL") from None
    except InvalidStatus as exc:
        # Starlette answers 403 to a WebSocket upgrade on a path it does not route
        status = exc.response.status_code
        raise CallError(f"{url} refused the WebSocket: HTTP {status}"
                        + (" (is the path /v1/realtime?)" if status in (403, 404) else "")
                        ) from None
    except TimeoutError:
        raise CallError(f"no gateway answered at {url} within {OPEN_TIMEOUT_S:g} s") from None
    except OSError as exc:
        raise CallError(f"cannot reach a gateway at {url}: {_os_reason(exc)}") from None
    except InvalidHandshake as exc:
        raise CallError(f"{url} is not a realtime gateway: {exc}") from None


def _os_reason(exc: OSError) -> str:
    if isinstance(exc, socket.gaierror):
        return str(exc.strerror)  # e.g. "Name or service not known"
    if isinstance(exc, ConnectionRefusedError) or exc.errno == errno.ECONNREFUSED:
        return "connection refused (is `duplex-gateway serve` running there?)"
    # asyncio folds one failure per resolved address into "Multiple exceptions: …"
    return os.strerror(exc.errno) if exc.errno else str(exc)


def _closed(exc: ConnectionClosed) -> CallError:
    """The gateway's close, with its code explained (``duplex.close_codes``)."""
    if exc.rcvd is None:
        code = int(CloseCode.ABNORMAL)
        return CallError(f"the connection to the gateway was lost ({code}: {meaning(code)})")
    said = f" {exc.rcvd.reason!r}" if exc.rcvd.reason else ""
    return CallError(f"the gateway closed the connection ({exc.rcvd.code}{said}: "
                     f"{meaning(exc.rcvd.code)})")


async def _recv(ws: ClientConnection) -> dict[str, Any]:
    """The next server event; an ``error`` event is a ``CallError``."""
    event: dict[str, Any] = json.loads(await ws.recv())
    if event.get("type") == "error":
        error = event.get("error") or {}
        raise CallError(f"gateway error {error.get('code')}: {error.get('message')}")
    return event


async def _open_session(ws: ClientConnection, instructions: str | None,
                        turn_detection: str | None) -> None:
    created = await _recv(ws)
    if created.get("type") != "session.created":
        raise CallError(f"expected session.created first, got {created.get('type')!r}")
    listen: dict[str, Any] = {"transcription": {"model": "default"}}
    if turn_detection is not None:  # None: the gateway's default (server_vad)
        listen["turn_detection"] = {"type": turn_detection}
    session: dict[str, Any] = {"audio": {"input": listen}}
    if instructions is not None:
        session["instructions"] = instructions
    await ws.send(json.dumps({"type": "session.update", "session": session}))


@dataclass
class _Sent:
    """What a turn's stream has sent so far."""

    samples: int = 0
    voiced_end: int | None = None  # the sample after the last voiced one

    def count(self, report: TurnReport, n: int, t0: float) -> None:
        before, self.samples = self.samples, self.samples + n
        if self.voiced_end is not None and before < self.voiced_end <= self.samples:
            report.mark("last_voiced", t0)  # the frame holding it just went out


async def _stream(ws: ClientConnection, pcm: Pcm, realtime: bool, t0: float,
                  report: TurnReport, sent: _Sent) -> None:
    step = RATE * FRAME_MS // 1000
    for i, start in enumerate(range(0, len(pcm), step)):
        if realtime:
            delay = t0 + i * FRAME_MS / 1000 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)  # pacing a real-time stream, not synchronisation
        chunk = pcm[start:start + step].astype("<i2")
        await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                  "audio": base64.b64encode(chunk.tobytes()).decode()}))
        sent.count(report, len(chunk), t0)


def _take(report: TurnReport, event: dict[str, Any], t0: float) -> bool:
    """Record ``event`` in ``report``; True once it is the turn's ``response.done``."""
    kind = event.get("type")
    if kind == "input_audio_buffer.speech_started":
        report.mark("speech_started", t0)
    elif kind == "input_audio_buffer.speech_stopped":
        report.mark("speech_stopped", t0)
        if report.server_audio_end_ms is None and "audio_end_ms" in event:
            report.server_audio_end_ms = float(event["audio_end_ms"])
    elif kind == "input_audio_buffer.committed" and report.item_id is None:
        report.item_id = event.get("item_id")
    elif (kind == "conversation.item.input_audio_transcription.completed"
          and event.get("item_id") == report.item_id):
        report.user_transcript = event.get("transcript") or ""
        report.mark("user_transcript", t0)
    elif kind == "response.created" and report.response_id is None:
        report.response_id = (event.get("response") or {}).get("id")
    elif kind == "response.output_audio.delta" and event.get("response_id") == report.response_id:
        report.mark("first_audio", t0)
        report.audio.append(base64.b64decode(event["delta"]))
    elif kind == "response.done" and (event.get("response") or {}).get("id") == report.response_id:
        _take_done(report, event, t0)
        return True
    return False


def _take_done(report: TurnReport, event: dict[str, Any], t0: float) -> None:
    response = event["response"]
    report.status = response.get("status") or ""
    output = response.get("output") or [{}]
    content = (output[0].get("content") or [{}])[0]
    report.assistant_transcript = content.get("transcript") or ""
    report.timings = event.get("timings_ms") or {}
    report.mark("response_done", t0)


class NoSpeech(CallError):
    """The input is silent, and the gateway heard no speech in it."""


async def _until_done(ws: ClientConnection, report: TurnReport, t0: float,
                      sender: asyncio.Task[None], *, silent: bool) -> None:
    """Take the turn's events until its ``response.done``. A ``silent`` input (no
    voiced frame by its energy) is given up as soon as it and the silence after it
    are sent, unless the gateway heard speech in it by then: nothing would answer."""
    while True:
        receiving = asyncio.ensure_future(_recv(ws))  # a cancelled recv loses nothing
        waits: set[asyncio.Future[Any]] = {receiving}
        if silent:  # done already, with --fast, before the first event: give up now
            waits.add(sender)
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if not receiving.done():
            receiving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await receiving
            sender.result()  # the stream's own failure (a closed connection) first
            if "speech_started" not in report.marks:
                raise NoSpeech("the input is silent and the gateway heard no speech in it "
                               f"(given up after the {TRAILING_SILENCE_S:g} s of silence "
                               "sent after it)")
            silent = False
        elif _take(report, receiving.result(), t0):
            return


async def hold_turn(ws: ClientConnection, pcm: Pcm, *, realtime: bool,
                    timeout_s: float, sent_before: int = 0) -> tuple[TurnReport, int]:
    """Speak ``pcm`` as the next user turn, after ``sent_before`` samples of the
    session's audio; return once its response is done, with the samples this turn
    sent (the trailing silence stops at the ``response.done``)."""
    report = TurnReport()
    sent = _Sent(voiced_end=last_voiced(pcm))
    if sent.voiced_end is not None:
        report.voiced_end_ms = 1000 * (sent_before + sent.voiced_end) / RATE
    t0 = time.monotonic()
    padded = np.concatenate([pcm, np.zeros(int(RATE * TRAILING_SILENCE_S), dtype=np.int16)])
    sender = asyncio.create_task(_stream(ws, padded, realtime, t0, report, sent))
    try:
        async with asyncio.timeout(timeout_s):
            await _until_done(ws, report, t0, sender, silent=sent.voiced_end is None)
    except TimeoutError:
        heard = "" if "speech_started" in report.marks else "; the gateway heard no speech"
        raise CallError(f"no answer within {timeout_s:g} s (--timeout-s){heard}") from None
    finally:
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
            await sender
    return report, sent.samples


async def hold_call(url: str, questions: Sequence[Pcm], *, realtime: bool = True,
                    api_key: str | None = None, instructions: str | None = None,
                    turn_detection: str | None = None, timeout_s: float = 60.0,
                    on_turn: Callable[[int, TurnReport], None] | None = None,
                    ) -> list[TurnReport]:
    """One session, one turn per question, in order; ``on_turn(n, report)`` is called
    as each turn ends. ``turn_detection`` names the type the session asks for
    (``server_vad``, ``semantic_vad``); None keeps the gateway's default."""
    ws = await _connect(url, api_key)
    reports: list[TurnReport] = []
    sent = 0  # samples of the session's input so far: its clock, as audio_end_ms is
    try:
        try:
            await _open_session(ws, instructions, turn_detection)
        except ConnectionClosed as exc:
            raise _closed(exc) from None
        for n, pcm in enumerate(questions, 1):
            try:
                report, samples = await hold_turn(ws, pcm, realtime=realtime,
                                                  timeout_s=timeout_s, sent_before=sent)
            except CallError as exc:
                raise CallError(f"turn {n}: {exc}") from None
            except ConnectionClosed as exc:
                raise CallError(f"turn {n}: {_closed(exc)}") from None
            sent += samples
            reports.append(report)
            if on_turn is not None:
                on_turn(n, report)
        with contextlib.suppress(ConnectionClosed):  # every answer is in already
            await ws.send(json.dumps({"type": "session.close"}))
    finally:
        # 1000 however the call ends: the session ends with it. (Leaving ``async with
        # ws`` on an exception closes with 1011, which keeps the session waiting for
        # a resume for --disconnect-grace-s.)
        await ws.close(CloseCode.NORMAL)
    return reports
