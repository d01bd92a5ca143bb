"""What the listener's and the talker's clients of a speech server apart
(``remote_asr``, ``remote_tts``) share: their settings, read from the
variables ``gateway.model_flags`` sets, and ``ServerUse``, one process's use
of the server.

``ServerUse`` holds the server's ``ServerGate`` (``engines.model_http``), the
same gate the thinker's engine takes on ``--llm-url``: at most ``max_streams``
requests open on the server, ``max_waiting`` more waiting for one (each at
most ``timeout_s``, which the wait counts against), and past that a request
fails at once with ``ServerBusy``, which the session hears as its ``error``.
The requests run on the stage's worker threads, so the stage runs one thread
per stream and per waiter, and one more (``threads``): a request past those
reaches the gate, and is refused at once, instead of queueing unseen for a
thread. It also counts each request's outcome and the streams dropped before
their end (barge-ins), which ``gateway.metrics`` reads as
``duplex_model_server_*{stage="asr"|"tts"}``.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

from engines.model_http import Endpoint, ModelServerError, ServerGate

SERVER = "speech server"
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_STREAMS = 4
DEFAULT_MAX_WAITING = 8
LLM_TIMEOUT_ENV = "DUPLEX_GATEWAY_LLM_TIMEOUT_S"  # the listener's, before it had its own


@dataclass(frozen=True, slots=True)
class SpeechServer:
    """A speech server's URL, key and bounds, as ``--asr-*`` or ``--tts-*`` set them."""

    url: str
    api_key: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_streams: int = DEFAULT_MAX_STREAMS
    max_waiting: int = DEFAULT_MAX_WAITING

    @classmethod
    def from_env(cls, env: Mapping[str, str], role: str) -> SpeechServer | None:
        """``role``'s server (``ASR``, ``TTS``) from ``DUPLEX_GATEWAY_<ROLE>_*``;
        None without a URL. The listener's timeout falls back on the thinker's,
        which bounded it before it had its own."""
        prefix = f"DUPLEX_GATEWAY_{role}_"
        url = env.get(prefix + "URL")
        if not url:
            return None
        timeout = DEFAULT_TIMEOUT_S
        if role == "ASR" and not env.get(prefix + "TIMEOUT_S"):
            timeout = number(env, LLM_TIMEOUT_ENV, timeout, float)
        return cls(url, env.get(prefix + "API_KEY") or None,
                   number(env, prefix + "TIMEOUT_S", timeout, float),
                   number(env, prefix + "MAX_STREAMS", DEFAULT_MAX_STREAMS, int),
                   number(env, prefix + "MAX_WAITING", DEFAULT_MAX_WAITING, int, least=0))


N = TypeVar("N", int, float)


def number(env: Mapping[str, str], name: str, default: N, kind: type[N], *,
           least: N | None = None) -> N:
    """The variable ``name`` as a ``kind``: above 0, or at least ``least``."""
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or (value < least if least is not None else value <= 0):
        wanted = f"a positive {kind.__name__}" if least is None else f"{kind.__name__} >= {least}"
        raise ValueError(f"{name}={raw!r}: {wanted}")
    return value


class ServerUse:
    """One process's use of a speech server (the module docstring): ``name``
    is the metrics' ``stage`` label."""

    def __init__(self, name: str, endpoint: Endpoint, server: SpeechServer) -> None:
        self.name = name
        self.gate = ServerGate(str(endpoint), server.max_streams, server.max_waiting,
                               server.timeout_s, flags=name, server=SERVER)
        self.threads = server.max_streams + server.max_waiting + 1
        # requests by outcome (ok, or the failure's class) and the streams dropped
        # before their end: gateway.metrics reads both, from another thread
        self.counts: Counter[str] = Counter()
        self.counts_tokens = False
        self.disconnects = 0
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        """One request to the server: a slot held while it runs, and its outcome
        counted. Closing a generator inside it (a barge-in) is a disconnect."""
        outcome = "ok"
        try:
            with self.gate.held():
                yield
        except ModelServerError as exc:
            outcome = type(exc).__name__
            raise
        except GeneratorExit:
            outcome = "disconnect"
            raise
        except BaseException:
            outcome = "failed"
            raise
        finally:
            with self._lock:
                if outcome == "disconnect":
                    self.disconnects += 1
                else:
                    self.counts[outcome] += 1
