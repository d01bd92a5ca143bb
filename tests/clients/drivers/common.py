"""What the Python drivers share (each runs in its client's own virtual environment,
so this is standard library only): speech the tone plugin hears, an ordered inbox of
what the client delivered, and one way to end: a JSON report on stdout."""

from __future__ import annotations

import array
import asyncio
import base64
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

RATE = 24000
HEAD_BYTES = 9600  # the reply's first 200 ms word: enough to decode its turn


def tone(seconds: float, hz: float = 440.0) -> bytes:
    """PCM16 mono at 24 kHz: a sine, which the tone plugin hears as speech."""
    n = round(RATE * seconds)
    amp = 0.3 * 32767 if hz else 0.0
    return array.array("h", (round(amp * math.sin(2 * math.pi * hz * i / RATE))
                             for i in range(n))).tobytes()


def silence(seconds: float) -> bytes:
    return tone(seconds, 0.0)


def frames(pcm: bytes, ms: int = 20) -> list[bytes]:
    step = RATE * 2 * ms // 1000
    return [pcm[i:i + step] for i in range(0, len(pcm), step)]


def audio_ms(nbytes: int) -> int:
    return nbytes * 1000 // (2 * RATE)


def gateway() -> tuple[str, str]:
    """The gateway's https:// base (``…/v1``) and API key, as the test passes them."""
    return os.environ["GATEWAY_HTTPS_BASE"], os.environ["GATEWAY_API_KEY"]


class Inbox:
    """Everything a client delivered, in order; ``until`` waits for the next match after
    the last one it returned, so nothing arriving between two waits is missed."""

    def __init__(self, timeout_s: float = 20.0) -> None:
        self.events: list[Any] = []
        self.cursor = 0
        self.timeout_s = timeout_s
        self._changed = asyncio.Event()

    def push(self, event: Any) -> None:
        self.events.append(event)
        self._changed.set()

    async def until(self, match: str | Callable[[Any], bool], what: str = "") -> Any:
        test = (lambda e: kind(e) == match) if isinstance(match, str) else match
        async with asyncio.timeout(self.timeout_s):
            while True:
                while self.cursor < len(self.events):
                    event = self.events[self.cursor]
                    self.cursor += 1
                    if test(event):
                        return event
                self._changed.clear()
                await self._changed.wait()

    def mark(self) -> int:
        return self.cursor

    def rewind(self, mark: int) -> None:
        self.cursor = mark


def kind(event: Any) -> str:
    """An event's ``type``, whether a dict or an SDK model."""
    return str(event["type"] if isinstance(event, dict) else getattr(event, "type", ""))


class Responses:
    """What each response brought: its audio (size, first word, when it began) and text."""

    def __init__(self) -> None:
        self.by_id: dict[str, dict[str, Any]] = {}

    def of(self, rid: str) -> dict[str, Any]:
        return self.by_id.setdefault(rid, {"audio": bytearray(), "bytes": 0, "text": "",
                                           "first_at": None})

    def audio(self, rid: str, pcm: bytes) -> None:
        r = self.of(rid)
        r["first_at"] = r["first_at"] or time.monotonic()
        r["audio"] += pcm[:max(0, HEAD_BYTES - len(r["audio"]))]
        r["bytes"] += len(pcm)

    def text(self, rid: str, delta: str) -> None:
        self.of(rid)["text"] += delta

    async def played(self, rid: str, ms: int | None = None) -> None:
        """Once ``ms`` of the audio has played, were it played as it came (real time from
        the first delta): how the clients reckon what was heard. A user who answers waits
        for the end; a user who interrupts, for some of it."""
        r = self.of(rid)
        ms = audio_ms(r["bytes"]) if ms is None else ms
        left = r["first_at"] + ms / 1000 - time.monotonic()
        if left > 0:
            await asyncio.sleep(left)

    def report(self, rid: str) -> dict[str, Any]:
        r = self.of(rid)
        return {"id": rid, "audio_bytes": r["bytes"], "audio_ms": audio_ms(r["bytes"]),
                "head_b64": base64.b64encode(bytes(r["audio"])).decode(),
                "transcript": r["text"]}


def as_sent(event: dict[str, Any]) -> dict[str, Any]:
    """A server event for the test's check against the openai package's types, as it
    came but for an audio delta's payload, cut to 8 characters (the types say only "a
    string") to keep reports small."""
    if str(event.get("type", "")).endswith("audio.delta"):
        return {**event, "delta": str(event.get("delta"))[:8]}
    return event


def recording(owner: Any, name: str = "parse_event") -> list[dict[str, Any]]:
    """The server events that ``owner.<name>`` (a client's function that turns a message
    into its event object) parses, as they came (``as_sent``): the function is
    wrapped, the client's path is otherwise untouched."""
    raw: list[dict[str, Any]] = []
    parse = getattr(owner, name)

    def parse_event(data: str | bytes) -> Any:
        raw.append(as_sent(json.loads(data)))
        return parse(data)

    setattr(owner, name, parse_event)
    return raw


def run(body: Callable[[dict[str, Any]], Awaitable[None]], limit_s: float = 60.0) -> None:
    """Run ``body(report)``, print ``report`` as JSON (``failure`` when it raised), exit."""
    report: dict[str, Any] = {}

    async def main() -> None:
        async with asyncio.timeout(limit_s):
            await body(report)

    try:
        asyncio.run(main())
    except BaseException:  # the report says what went wrong; the test shows it
        report["failure"] = traceback.format_exc()
    print(json.dumps(report, default=str), flush=True)
    sys.exit(1 if "failure" in report else 0)
