"""Secrets never reach a log line, at any level (docs/deployment.md "Security").

A secret can reach a log three ways, so there are three layers, applied to every
handler of the process (``protect``):

- **wire dumps**: at DEBUG the ``websockets`` library logs every handshake
  header and every frame it sends or receives, on both ends (uvicorn's server
  sockets and the owner relays' client sockets): keys, relay proofs, resume
  tokens. Those records are dropped;
- **by shape**: credentials the gateway does not know in advance (resume
  tokens, the keys other clients try, ``?api_key=`` in an access log line, a
  password in a Redis URL) are masked wherever their shape shows them;
- **by value**: the configured API key and Twilio auth token are masked wherever
  they appear, tracebacks included (the formatter's whole output is masked).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable

import websockets

MASK = "[redacted]"
MIN_MASKED_LEN = 6  # masking a shorter value would garble every line (and such a key is weak)
_WEBSOCKETS_DIR = os.path.dirname(websockets.__file__) + os.sep
_QUERY_NAMES = r"(?:api_?key|key|token|access_token|resume_token|secret|password|signature)"
_FIELD_NAMES = (r"(?:resume_token|api_key|apikey|auth_token|authorization|x-twilio-signature"
                r"|x-duplex-relay-proof)")
_SHAPES = [
    # Authorization: Bearer <key>, whatever quotes or bytes repr surround it
    (re.compile(r"(?i)(bearer\s+)[^\s'\",;]+"), r"\1" + MASK),
    # the browser's key subprotocol
    (re.compile(r"(openai-insecure-api-key\.)[^\s'\",;]+"), r"\1" + MASK),
    # ?api_key=… &token=… in a URL (uvicorn's access lines show the query string)
    (re.compile(rf"(?i)([?&]{_QUERY_NAMES}=)[^&\s'\"]*"), r"\1" + MASK),
    # "resume_token": "…", authorization=…, x-twilio-signature: …
    (re.compile(rf"(?i)({_FIELD_NAMES}['\"]?\s*[:=]\s*b?['\"]?)[^\s'\",&}}]+"), r"\1" + MASK),
    # scheme://user:password@host (a Redis URL)
    (re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^/\s:@]*:)[^@\s/]+@"), r"\1" + MASK + "@"),
]


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every credential it shows masked."""
    for secret in secrets:
        text = text.replace(secret, MASK)
    for pattern, replacement in _SHAPES:
        text = pattern.sub(replacement, text)
    return text


class RedactingFormatter(logging.Formatter):
    """``inner``'s output, masked (the message, its arguments and any traceback)."""

    def __init__(self, inner: logging.Formatter | None, secrets: Iterable[str]) -> None:
        super().__init__()
        self.inner = inner or logging.Formatter()
        self.secrets = tuple(sorted({s for s in secrets if len(s) >= MIN_MASKED_LEN},
                                    key=len, reverse=True))

    def format(self, record: logging.LogRecord) -> str:
        return redact(self.inner.format(record), self.secrets)


def not_a_wire_dump(record: logging.LogRecord) -> bool:
    """False for the websockets library's DEBUG records (headers and frames)."""
    return record.levelno >= logging.INFO or not record.pathname.startswith(_WEBSOCKETS_DIR)


def protect(secrets: Iterable[str], loggers: Iterable[str] = (
        "", "uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")) -> None:
    """Mask ``secrets`` and every credential's shape in all the handlers of ``loggers``,
    and drop wire dumps. Call once logging is configured (uvicorn configures its own
    loggers when its ``Config`` is made)."""
    kept = tuple(s for s in secrets if s)
    for name in loggers:
        for handler in logging.getLogger(name).handlers:
            if not isinstance(handler.formatter, RedactingFormatter):
                handler.setFormatter(RedactingFormatter(handler.formatter, kept))
            if not_a_wire_dump not in handler.filters:
                handler.addFilter(not_a_wire_dump)
