"""The listener's speech recognition on a server apart from the gateway
(``serve --asr-url``): OpenAI's ``POST /v1/audio/transcriptions``, a WAV
file in a multipart form, the words back as JSON. vLLM serves Whisper this
way, as do faster-whisper servers and OpenAI itself.

``RemoteAsr`` stands where ``WhisperAsr`` does: ``transcribe`` is called on a
listener worker thread and blocks it, so the HTTP is the standard library's
(``engines.model_http.blocking_post``), one connection a turn, every wait
bounded by ``timeout_s``. A server that is down, silent or refusing raises
``engines.model_http``'s error for that cause, with a line that names it;
the listener's request fails and the session hears an ``error``, and its next
turn asks again. At most ``max_streams`` turns are transcribed at once per
process and ``max_waiting`` more wait; past that a turn fails at once
(``ServerBusy``: ``speech_server.ServerUse``, which also counts the outcomes
for the metrics).

Variables (``gateway.model_flags`` sets them from ``--asr-*``):
``DUPLEX_GATEWAY_ASR_URL``, ``_ASR_API_KEY``, ``_ASR_MODEL`` (the server's
model, default ``whisper-1``), ``_ASR_TIMEOUT_S`` (default
``DUPLEX_GATEWAY_LLM_TIMEOUT_S``'s value, else 10 s), ``_ASR_MAX_STREAMS`` and
``_ASR_MAX_WAITING``.
"""

from __future__ import annotations

import io
import json
import uuid
import wave
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from engines.model_http import (
    Endpoint,
    ModelServerError,
    ServerBroken,
    ServerRefused,
    blocking_post,
)
from plugins.base import Progress
from plugins.cascade.speech_server import (
    DEFAULT_MAX_STREAMS,
    DEFAULT_MAX_WAITING,
    DEFAULT_TIMEOUT_S,
    SERVER,
    ServerUse,
    SpeechServer,
)

URL_ENV = "DUPLEX_GATEWAY_ASR_URL"
API_KEY_ENV = "DUPLEX_GATEWAY_ASR_API_KEY"
MODEL_ENV = "DUPLEX_GATEWAY_ASR_MODEL"
DEFAULT_MODEL = "whisper-1"
RATE = 16000


# what a failed turn raises: ``engines.model_http``'s errors, split by cause
AsrServerError = ModelServerError
ROUTE = "/audio/transcriptions"


class RemoteAsr:
    """Speech to text on an OpenAI-compatible server (the module docstring)."""

    def __init__(self, url: str, *, api_key: str | None = None, model: str = DEFAULT_MODEL,
                 timeout_s: float = DEFAULT_TIMEOUT_S, max_streams: int = DEFAULT_MAX_STREAMS,
                 max_waiting: int = DEFAULT_MAX_WAITING) -> None:
        self._endpoint = Endpoint.parse(url, SERVER)
        self.url = url.rstrip("/")
        self._api_key = api_key
        self._model = model
        self._timeout_s = timeout_s
        self.use = ServerUse("asr", self._endpoint,
                             SpeechServer(url, api_key, timeout_s, max_streams, max_waiting))

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RemoteAsr | None:
        server = SpeechServer.from_env(env, "ASR")
        if server is None:
            return None
        return cls(server.url, api_key=server.api_key, model=env.get(MODEL_ENV) or DEFAULT_MODEL,
                   timeout_s=server.timeout_s, max_streams=server.max_streams,
                   max_waiting=server.max_waiting)

    @property
    def title(self) -> str:
        return f"{self._model} at {self.url}"

    def load(self, progress: Progress | None = None) -> None:
        """Nothing to load: the server holds the model."""

    def transcribe(self, pcm16k: npt.NDArray[Any]) -> str:
        """The words in ``pcm16k`` (mono, 16 kHz, int16 or float in [-1, 1])."""
        body, boundary = _form(self._model, _wav(pcm16k))
        headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        with self.use.request():
            return self._post(body, headers)

    def _post(self, body: bytes, headers: Mapping[str, str]) -> str:
        where = f"{self._endpoint}{ROUTE}"
        with blocking_post(self._endpoint, ROUTE, body, headers=headers,
                           timeout_s=self._timeout_s, server=SERVER) as answer:
            text = answer.text(limit=1 << 20)
        if answer.status != 200:
            raise ServerRefused(f"the {SERVER} at {where} refused the turn "
                                f"(HTTP {answer.status}): {text[:300]}", answer.status)
        try:
            return str(json.loads(text)["text"]).strip()
        except (ValueError, LookupError, TypeError):
            raise ServerBroken(f"the {SERVER} at {where} answered {text[:120]!r}, "
                               "not a transcription") from None


def _wav(pcm16k: npt.NDArray[Any]) -> bytes:
    pcm = np.asarray(pcm16k)
    if pcm.dtype != np.int16:
        pcm = (np.clip(pcm, -1.0, 1.0) * 32767).astype(np.int16)
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE)
        wav.writeframes(pcm.astype("<i2").tobytes())
    return out.getvalue()


def _form(model: str, wav: bytes) -> tuple[bytes, str]:
    """A multipart form: the model, a JSON answer, and the audio as a WAV file."""
    boundary = uuid.uuid4().hex
    head = "".join(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
                   f"{value}\r\n" for name, value in (("model", model),
                                                      ("response_format", "json")))
    file = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            f'filename="turn.wav"\r\nContent-Type: audio/wav\r\n\r\n')
    return head.encode() + file.encode() + wav + f"\r\n--{boundary}--\r\n".encode(), boundary
