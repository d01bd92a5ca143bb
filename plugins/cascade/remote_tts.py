"""The talker's speech on a server apart from the gateway (``serve --tts-url``):
OpenAI's ``POST /v1/audio/speech`` with ``response_format: "pcm"``, which
OpenAI defines as raw 24 kHz 16-bit mono little-endian samples. vLLM-Omni,
Kokoro-FastAPI, openedai-speech and OpenAI itself serve it.

``RemoteTts`` stands where ``PiperTts`` does: ``synthesize`` is called on a
talker worker thread and blocks it, so the HTTP is the standard library's
(``engines.model_http.blocking_post``), one connection a clause. The body is
read as it arrives and yielded in pieces of ``PIECE_MS``, so a clause's first
audio goes out while the server is still making the rest. The plugin's output
rate follows the server's (24 kHz): nothing is resampled here, and the
gateway's one resampler makes the client's rate from it, as for piper's.

A barge-in closes the stream: the talker stops taking this generator's pieces,
and closing it closes the connection (``blocking_post`` leaves it closed), so
the server sees its client go. Every wait is bounded by ``timeout_s``; a server
that is down, silent or refusing raises ``engines.model_http``'s error for the
cause, naming it, which fails the reply with the session's ``error``; the next
clause connects again. At most ``max_streams`` clauses are spoken at once per
process and ``max_waiting`` more wait; past that a clause fails its reply at
once (``ServerBusy``: ``speech_server.ServerUse``, which also counts the
outcomes and the dropped streams for the metrics).

Variables (``gateway.model_flags`` sets them from ``--tts-*``):
``DUPLEX_GATEWAY_TTS_URL``, ``_TTS_API_KEY``, ``_TTS_MODEL`` (default
``tts-1``), ``_TTS_VOICE`` (the server's voice, default ``alloy``; without a
URL it is the local piper voice's path), ``_TTS_TIMEOUT_S``,
``_TTS_MAX_STREAMS`` and ``_TTS_MAX_WAITING``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping

import numpy as np

from engines.model_http import Endpoint, ServerRefused, blocking_post
from plugins.base import Pcm
from plugins.cascade.speech_server import (
    DEFAULT_MAX_STREAMS,
    DEFAULT_MAX_WAITING,
    DEFAULT_TIMEOUT_S,
    SERVER,
    ServerUse,
    SpeechServer,
)

URL_ENV = "DUPLEX_GATEWAY_TTS_URL"
API_KEY_ENV = "DUPLEX_GATEWAY_TTS_API_KEY"
MODEL_ENV = "DUPLEX_GATEWAY_TTS_MODEL"
VOICE_ENV = "DUPLEX_GATEWAY_TTS_VOICE"
DEFAULT_MODEL = "tts-1"
DEFAULT_VOICE = "alloy"
RATE = 24000  # OpenAI's "pcm": 24 kHz, 16-bit, mono, little-endian
PIECE_MS = 100  # audio gathered before a piece is yielded (the last may be shorter)
ROUTE = "/audio/speech"


class RemoteTts:
    """Text to speech on an OpenAI-compatible server (the module docstring)."""

    sample_rate = RATE

    def __init__(self, url: str, *, api_key: str | None = None, model: str = DEFAULT_MODEL,
                 voice: str = DEFAULT_VOICE, timeout_s: float = DEFAULT_TIMEOUT_S,
                 max_streams: int = DEFAULT_MAX_STREAMS,
                 max_waiting: int = DEFAULT_MAX_WAITING) -> None:
        self._endpoint = Endpoint.parse(url, SERVER)
        self.url = url.rstrip("/")
        self._api_key = api_key
        self._model = model
        self._voice = voice
        self._timeout_s = timeout_s
        self.max_streams = max_streams
        self.use = ServerUse("tts", self._endpoint,
                             SpeechServer(url, api_key, timeout_s, max_streams, max_waiting))

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RemoteTts | None:
        server = SpeechServer.from_env(env, "TTS")
        if server is None:
            return None
        return cls(server.url, api_key=server.api_key,
                   model=env.get(MODEL_ENV) or DEFAULT_MODEL,
                   voice=env.get(VOICE_ENV) or DEFAULT_VOICE, timeout_s=server.timeout_s,
                   max_streams=server.max_streams, max_waiting=server.max_waiting)

    @property
    def title(self) -> str:
        return f"{self._voice} of {self._model} at {self.url}"

    def load(self) -> None:
        """Nothing to load: the server holds the voice."""

    def synthesize(self, text: str) -> Iterator[Pcm]:
        """Mono int16 at 24 kHz, in pieces as the server streams them. Nothing
        for blank text."""
        if not text.strip():
            return
        body = json.dumps({"model": self._model, "input": text, "voice": self._voice,
                           "response_format": "pcm"}).encode()
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        with self.use.request(), blocking_post(self._endpoint, ROUTE, body, headers=headers,
                                               timeout_s=self._timeout_s,
                                               server=SERVER) as answer:
            if answer.status != 200:
                raise ServerRefused(f"the {SERVER} at {self._endpoint}{ROUTE} refused the "
                                    f"clause (HTTP {answer.status}): {answer.text()[:300]}",
                                    answer.status)
            yield from _pieces(iter(answer.read, b""))


def _pieces(reads: Iterator[bytes]) -> Iterator[Pcm]:
    """``reads`` (bytes cut anywhere, even mid-sample) as int16 arrays of at
    least ``PIECE_MS`` each, the last with whatever is left."""
    piece = RATE * PIECE_MS // 1000 * 2
    pending = bytearray()
    for data in reads:
        pending += data
        if len(pending) >= piece:
            whole = len(pending) // 2 * 2
            yield np.frombuffer(bytes(pending[:whole]), "<i2").astype(np.int16)
            del pending[:whole]
    if len(pending) >= 2:
        yield np.frombuffer(bytes(pending[:len(pending) // 2 * 2]), "<i2").astype(np.int16)
