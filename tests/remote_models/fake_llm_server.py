"""A small OpenAI-compatible chat server for the tests, run as its own process:
``python fake_llm_server.py [--port N]`` prints ``listening on PORT`` once ready.

Deterministic replies to the last message:

- a user message with "weather in CITY" while tools are offered: a
  ``get_weather`` call with ``{"city": CITY}``, streamed in ``tool_calls``
  deltas (its arguments split over two chunks, as servers do);
- "bad call": a ``get_weather`` call whose arguments break its schema;
- "text call": the call written as text, the way small models do;
- a ``tool`` message: "The tool says OUTPUT.";
- anything else: "You said: TEXT. That is all." (instructions that ask for
  "at length" make it repeat its words 40 times, for barge-ins).

It reports ``usage`` with ``prompt_tokens`` (a token per 4 bytes of the
request's messages, as JSON) and ``prompt_tokens_details.cached_tokens``:
how much of that prefix matched the previous request's, byte for byte — a
prefix cache that holds one conversation.

``POST /v1/audio/transcriptions`` answers ``transcript`` (``/control`` sets it)
for any WAV file, and logs its length (``transcribed``).

``POST /v1/audio/speech`` speaks its ``input`` with the piper voice the
cascade ships (deterministic), as OpenAI's ``pcm``: 24 kHz 16-bit mono, streamed
in pieces cut mid-sample; it logs each request (``spoken``) and the streams
the client dropped (``speech_disconnects``). Its own ``speech_mode`` (set by
``/control``, apart from the chat's ``mode``): ``normal``, ``slow``
(``speech_delay_s`` before each piece), ``hang`` or ``refuse`` (503); and
``hold``, in which both speech routes (transcriptions too) log each request
and then stall it until ``speech_mode`` is set to another.

``POST /control`` sets ``mode``: ``normal``, ``slow`` (``delay_s`` between
chunks), ``hang`` (never answers), ``refuse`` (503), ``hold`` (streams wait
for ``POST /release``), and broken: ``garbage`` (an event that is no JSON),
``error_event`` (an error mid-stream), ``cut`` (the stream ends before the
reply does), ``nameless`` (``/v1/models`` lists none). ``GET /log`` returns the requests seen (their
messages, tools, tool_choice, model, authorization), the streams the client
dropped before their end (``disconnects``) and the most open at once.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import re
import socket
import time
import wave
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

MODEL = "fake-model"
WEATHER = re.compile(r"weather in ([A-Za-z]+)", re.I)


class State:
    def __init__(self) -> None:
        self.mode = "normal"
        self.delay_s = 0.0
        self.requests: list[dict[str, Any]] = []
        self.previous = b""
        self.disconnects = 0
        self.completed = 0
        self.open = 0
        self.most_open = 0
        self.released = asyncio.Event()
        self.transcript = "What is the weather in Oslo?"
        self.transcribed: list[dict[str, Any]] = []
        self.spoken: list[dict[str, Any]] = []
        self.speech_disconnects = 0
        self.speech_mode = "normal"
        self.speech_delay_s = 0.0
        self.speech_released = asyncio.Event()


STATE = State()


def _reply(body: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """The reply's word chunks and its tool calls."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    text = str(last.get("content") or "")
    offered = bool(body.get("tools")) and body.get("tool_choice") != "none"
    if last.get("role") == "tool":
        return _words(f"The tool says {text}."), []
    if offered and "bad call" in text.lower():
        return [], [{"name": "get_weather", "arguments": '{"town": 7}'}]
    if offered and "text call" in text.lower():
        return ['{"name": "get_weather", ', '"arguments": {"city": "Oslo"}}'], []
    match = WEATHER.search(text)
    if offered and match:
        return [], [{"name": "get_weather", "arguments": json.dumps({"city": match[1]})}]
    system = " ".join(str(m.get("content") or "") for m in messages if m.get("role") == "system")
    words = _words(f"You said: {text.strip().rstrip('.?!')}. That is all.")
    return (words * 40 if "at length" in system else words), []


def _words(text: str) -> list[str]:
    return [w + " " for w in text.split(" ")[:-1]] + [text.split(" ")[-1]]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    data = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def _usage(messages: bytes, completion: int) -> bytes:
    shared = 0
    for a, b in zip(messages, STATE.previous, strict=False):
        if a != b:
            break
        shared += 1
    STATE.previous = messages
    data = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "choices": [],
            "usage": {"prompt_tokens": len(messages) // 4, "completion_tokens": completion,
                      "total_tokens": len(messages) // 4 + completion,
                      "prompt_tokens_details": {"cached_tokens": shared // 4}}}
    return b"data: " + json.dumps(data).encode() + b"\n\n"


async def _stream(body: dict[str, Any], messages: bytes) -> AsyncIterator[bytes]:
    STATE.open += 1
    STATE.most_open = max(STATE.most_open, STATE.open)
    finished = False
    try:
        if STATE.mode == "hold":
            await STATE.released.wait()
        words, calls = _reply(body)
        yield _chunk({"role": "assistant", "content": None})
        if STATE.mode == "garbage":
            yield b"data: <html>oops</html>\n\n"
        if STATE.mode == "error_event":
            yield b'data: {"error": {"message": "the GPU fell over"}}\n\n'
        if STATE.mode == "cut":
            finished = True  # it ends the stream itself: no disconnect
            return
        for word in words:
            if STATE.delay_s:
                await asyncio.sleep(STATE.delay_s)
            yield _chunk({"content": word})
        for i, call in enumerate(calls):
            args = call["arguments"]
            yield _chunk({"tool_calls": [{"index": i, "id": f"call_fake_{len(STATE.requests)}"
                                          f"_{i}", "type": "function", "function": {
                                              "name": call["name"], "arguments": args[:5]}}]})
            yield _chunk({"tool_calls": [{"index": i, "function": {"arguments": args[5:]}}]})
        yield _chunk({}, "tool_calls" if calls else "stop")
        yield _usage(messages, len(words) + len(calls))
        yield b"data: [DONE]\n\n"
        finished = True
        STATE.completed += 1
    finally:
        STATE.open -= 1
        if not finished:
            STATE.disconnects += 1


async def completions(request: Request) -> Response:
    raw = await request.body()
    body = json.loads(raw)
    messages = json.dumps(body.get("messages"), separators=(",", ":")).encode()
    STATE.requests.append({k: body.get(k) for k in ("messages", "tools", "tool_choice",
                                                     "model", "max_tokens", "stream_options")}
                          | {"authorization": request.headers.get("authorization"),
                             "raw_messages": _raw_messages(raw)})
    if STATE.mode == "hang":
        await asyncio.Event().wait()
    if STATE.mode == "refuse":
        return JSONResponse({"error": {"message": "overloaded, try later",
                                       "type": "server_error"}}, status_code=503)
    return StreamingResponse(_stream(body, messages), media_type="text/event-stream")


def _raw_messages(raw: bytes) -> str:
    """The request's messages as the client wrote them (its bytes, not re-serialised)."""
    text = raw.decode()
    start = text.index('"messages"')
    end = text.index(', "stream"', start) if ', "stream"' in text else len(text)
    return text[start:end]


async def transcriptions(request: Request) -> Response:
    """The words are ``STATE.transcript`` (set by ``/control``); the audio is read
    as the WAV file it must be, and its length logged."""
    form = await request.form()
    upload = form["file"]
    assert not isinstance(upload, str)
    with wave.open(io.BytesIO(await upload.read())) as wav:
        heard = {"rate": wav.getframerate(), "channels": wav.getnchannels(),
                 "seconds": wav.getnframes() / wav.getframerate()}
    STATE.transcribed.append(heard | {"model": form.get("model"),
                                      "authorization": request.headers.get("authorization")})
    if STATE.speech_mode == "hold":
        await STATE.speech_released.wait()
    if STATE.mode == "refuse":
        return JSONResponse({"error": {"message": "no GPU for you"}}, status_code=503)
    return JSONResponse({"text": STATE.transcript})


SPEECH_PIECE = 4801  # bytes: odd, so pieces end mid-sample as a network may cut them
_voice: Any = None


def _speak(text: str) -> bytes:
    """``text`` in piper's joe voice, resampled to OpenAI's 24 kHz ``pcm``."""
    global _voice
    import numpy as np
    import soxr

    from plugins.cascade.talker import PiperTts

    if _voice is None:
        _voice = PiperTts(deterministic=True)
    pcm = np.concatenate([np.zeros(1, np.int16), *_voice.synthesize(text)])
    out = soxr.resample(pcm, _voice.sample_rate, 24000)
    return np.asarray(np.clip(out, -32768, 32767), "<i2").tobytes()


async def speech(request: Request) -> Response:
    body = await request.json()
    STATE.spoken.append({k: body.get(k) for k in ("input", "model", "voice", "response_format")}
                        | {"authorization": request.headers.get("authorization")})
    if STATE.speech_mode == "hang":
        await asyncio.Event().wait()
    if STATE.speech_mode == "hold":
        await STATE.speech_released.wait()
    if STATE.speech_mode == "refuse":
        return JSONResponse({"error": {"message": "no voice for you"}}, status_code=503)
    audio = await asyncio.to_thread(_speak, str(body.get("input") or ""))
    return StreamingResponse(_speech_stream(audio), media_type="audio/pcm")


async def _speech_stream(audio: bytes) -> AsyncIterator[bytes]:
    finished = False
    try:
        for start in range(0, len(audio), SPEECH_PIECE):
            if STATE.speech_mode == "slow":
                await asyncio.sleep(STATE.speech_delay_s)
            yield audio[start:start + SPEECH_PIECE]
        finished = True
    finally:
        if not finished:
            STATE.speech_disconnects += 1


async def models(request: Request) -> Response:
    if STATE.mode == "nameless":
        return JSONResponse({"object": "list", "data": []})
    return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model"}]})


async def control(request: Request) -> Response:
    body = await request.json()
    STATE.mode = body.get("mode", STATE.mode)
    STATE.delay_s = float(body.get("delay_s", STATE.delay_s))
    STATE.transcript = body.get("transcript", STATE.transcript)
    STATE.speech_mode = body.get("speech_mode", STATE.speech_mode)
    STATE.speech_delay_s = float(body.get("speech_delay_s", STATE.speech_delay_s))
    if STATE.mode != "hold":
        STATE.released.set()
    else:
        STATE.released = asyncio.Event()
    if STATE.speech_mode != "hold":
        STATE.speech_released.set()
    else:
        STATE.speech_released = asyncio.Event()
    return JSONResponse({"mode": STATE.mode})


async def release(request: Request) -> Response:
    STATE.released.set()
    return JSONResponse({})


async def log(request: Request) -> Response:
    return JSONResponse({"requests": STATE.requests, "transcribed": STATE.transcribed,
                         "spoken": STATE.spoken, "speech_disconnects": STATE.speech_disconnects,
                         "disconnects": STATE.disconnects,
                         "completed": STATE.completed, "open": STATE.open,
                         "most_open": STATE.most_open, "at": time.time()})


app = Starlette(routes=[
    Route("/v1/chat/completions", completions, methods=["POST"]),
    Route("/v1/models", models),
    Route("/v1/audio/transcriptions", transcriptions, methods=["POST"]),
    Route("/v1/audio/speech", speech, methods=["POST"]),
    Route("/control", control, methods=["POST"]),
    Route("/release", release, methods=["POST"]),
    Route("/log", log),
])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)  # connections queue from here on, before uvicorn takes the socket
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    print(f"listening on {sock.getsockname()[1]}", flush=True)
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    main()
