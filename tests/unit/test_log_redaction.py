"""Masking credentials in log lines (``gateway.log_redaction``), without a gateway;
``tests/telephony/test_secrets_in_logs.py`` checks a real one at debug."""

from __future__ import annotations

import logging
import sys

import pytest
import websockets.protocol

from gateway.log_redaction import MASK, RedactingFormatter, not_a_wire_dump, redact


@pytest.mark.parametrize(("line", "secret"), [
    ('127.0.0.1:5 - "WebSocket /v1/realtime?api_key=s3cr3t&x=1" [accepted]', "s3cr3t"),
    ('"GET /readyz?token=s3cr3t HTTP/1.1" 200', "s3cr3t"),
    ("(b'authorization', b'Bearer s3cr3t')", "s3cr3t"),
    ("Authorization: Bearer s3cr3t", "s3cr3t"),
    ("< Sec-WebSocket-Protocol: realtime, openai-insecure-api-key.s3cr3t", "s3cr3t"),
    ('< TEXT \'{"type":"session.resume","resume_token":"s3cr3t"}\'', "s3cr3t"),
    ("{'resume_token': 's3cr3t'}", "s3cr3t"),
    ("Redis at redis://:s3cr3t@h:6379 is unreachable", "s3cr3t"),
    ("x-twilio-signature: s3cr3t=", "s3cr3t"),
])
def test_credentials_are_masked_by_their_shape(line: str, secret: str) -> None:
    masked = redact(line)
    assert secret not in masked
    assert MASK in masked


def test_configured_secrets_are_masked_by_value_tracebacks_included() -> None:
    formatter = RedactingFormatter(logging.Formatter("%(message)s"), ["the-api-key", "k"])
    try:
        raise RuntimeError("failed with the-api-key inside")
    except RuntimeError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "saw %s", ("the-api-key",),
                                   sys.exc_info())
    text = formatter.format(record)
    assert "the-api-key" not in text
    assert text.startswith(f"saw {MASK}\n")
    assert f"RuntimeError: failed with {MASK} inside" in text
    assert "Traceback" in text  # a value too short to mask is left alone (it would garble lines)


def test_wire_dumps_of_the_websockets_library_are_dropped() -> None:
    dump = logging.LogRecord("uvicorn.error", logging.DEBUG, websockets.protocol.__file__, 1,
                             "< TEXT %s", ("frame",), None)
    ours = logging.LogRecord("gateway", logging.DEBUG, __file__, 1, "ours", (), None)
    problem = logging.LogRecord("uvicorn.error", logging.WARNING,
                                websockets.protocol.__file__, 1, "x", (), None)
    assert not not_a_wire_dump(dump)
    assert not_a_wire_dump(ours) and not_a_wire_dump(problem)
