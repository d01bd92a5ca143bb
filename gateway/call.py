"""``duplex-gateway call``: hold one spoken turn against a running gateway.

Streams a WAV file as the user's turn (at real time by default, like a person
speaking, then silence so server VAD ends the turn), writes the spoken answer
to a WAV file, and prints both transcripts and where the time went.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import time
import wave
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from duplex.config import AudioFormat
from gateway.audio import resample
from plugins.base import Pcm

RATE = AudioFormat.PCM16.rate
FRAME_MS = 20


def read_wav(path: Path) -> Pcm:
    """Mono int16 at 24 kHz from any PCM16 WAV (channels are averaged)."""
    with wave.open(str(path), "rb") as wav:
        if wav.getsampwidth() != 2:
            raise SystemExit(f"{path}: only 16-bit PCM WAV files are supported")
        frames = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
        channels, rate = wav.getnchannels(), wav.getframerate()
    if channels > 1:
        frames = frames.reshape(-1, channels).mean(axis=1).astype(np.int16)
    return resample(frames.astype(np.int16), rate, RATE)


def write_wav(path: Path, pcm: Pcm, rate: int = RATE) -> None:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(pcm.astype("<i2").tobytes())


@dataclass
class TurnReport:
    user_transcript: str = ""
    assistant_transcript: str = ""
    status: str = ""
    audio: list[bytes] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)  # event → seconds since start
    timings: dict[str, Any] = field(default_factory=dict)  # the server's breakdown

    def mark(self, name: str, t0: float) -> None:
        self.marks.setdefault(name, time.monotonic() - t0)


async def _stream(ws: Any, pcm: Pcm, realtime: bool, t0: float) -> None:
    step = RATE * FRAME_MS // 1000
    for i, start in enumerate(range(0, len(pcm), step)):
        if realtime:
            delay = t0 + i * FRAME_MS / 1000 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)  # pacing a real-time stream, not synchronisation
        chunk = pcm[start:start + step].astype("<i2").tobytes()
        await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                  "audio": base64.b64encode(chunk).decode()}))


async def _listen(ws: Any, report: TurnReport, t0: float, timeout_s: float) -> None:
    async with asyncio.timeout(timeout_s):
        async for raw in ws:
            ev = json.loads(raw)
            kind = ev["type"]
            if kind == "input_audio_buffer.speech_stopped":
                report.mark("speech_stopped", t0)
            elif kind == "conversation.item.input_audio_transcription.completed":
                report.user_transcript = ev["transcript"]
                report.mark("user_transcript", t0)
            elif kind == "response.output_audio.delta":
                report.mark("first_audio", t0)
                report.audio.append(base64.b64decode(ev["delta"]))
            elif kind == "error":
                print(f"server error: {ev['error'].get('code')}: {ev['error'].get('message')}",
                      file=sys.stderr)
            elif kind == "response.done":
                response = ev["response"]
                report.status = response["status"]
                output = response.get("output") or [{}]
                content = (output[0].get("content") or [{}])[0]
                report.assistant_transcript = content.get("transcript") or ""
                report.timings = ev.get("timings_ms") or {}
                report.mark("response_done", t0)
                return


async def hold_turn(url: str, pcm: Pcm, *, realtime: bool = True, api_key: str | None = None,
                    instructions: str | None = None, timeout_s: float = 60.0) -> TurnReport:
    import websockets

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    report = TurnReport()
    async with websockets.connect(url, additional_headers=headers, max_size=None) as ws:
        created = json.loads(await ws.recv())
        if created.get("type") != "session.created":
            raise SystemExit(f"unexpected first event: {created}")
        session: dict[str, Any] = {"audio": {"input": {"transcription": {"model": "default"}}}}
        if instructions is not None:
            session["instructions"] = instructions
        await ws.send(json.dumps({"type": "session.update", "session": session}))
        t0 = time.monotonic()
        trailing = np.zeros(RATE, dtype=np.int16)  # a second of silence ends the turn
        async with asyncio.TaskGroup() as tg:
            sender = tg.create_task(_stream(ws, np.concatenate([pcm, trailing]), realtime, t0))
            await _listen(ws, report, t0, timeout_s)
            sender.cancel()
        await ws.send(json.dumps({"type": "session.close"}))
    return report


def print_report(report: TurnReport, out: Path | None) -> None:
    print(f"you said:      {report.user_transcript!r}")
    print(f"assistant:     {report.assistant_transcript!r}  ({report.status})")
    stop = report.marks.get("speech_stopped")
    first = report.marks.get("first_audio")
    if stop is not None and first is not None:
        print(f"end of speech → first audio: {1000 * (first - stop):.0f} ms (client view)")
    for name, ms in report.timings.items():
        print(f"  {name:<28} {ms:8.0f} ms")
    if out is not None:
        audio = np.frombuffer(b"".join(report.audio), dtype="<i2")
        write_wav(out, audio)
        print(f"answer audio:  {out} ({len(audio) / RATE:.1f} s)")


def run_call(url: str, wav: Path, out: Path | None, *, realtime: bool,
             api_key: str | None, instructions: str | None, timeout_s: float) -> int:
    pcm = read_wav(wav)
    report = asyncio.run(hold_turn(url, pcm, realtime=realtime, api_key=api_key,
                                   instructions=instructions, timeout_s=timeout_s))
    print_report(report, out)
    return 0 if report.status == "completed" else 1
