"""The stream token and the signature helper, without a gateway."""

from __future__ import annotations

from gateway.telephony.tokens import mint_stream_token, stream_token_ok
from gateway.telephony.twilio import signature_ok, twilio_signature

SECRET = b"k" * 32


def test_token_is_bound_to_call_instructions_and_expiry() -> None:
    token = mint_stream_token(SECRET, "CA1", "words=3", expires=1000)
    assert stream_token_ok(SECRET, token, "CA1", "words=3", now=999)
    assert not stream_token_ok(SECRET, token, "CA2", "words=3", now=999)  # another call
    assert not stream_token_ok(SECRET, token, "CA1", "words=9", now=999)  # forged parameter
    assert not stream_token_ok(SECRET, token, "CA1", "words=3", now=1001)  # expired
    assert not stream_token_ok(b"other" * 8, token, "CA1", "words=3", now=999)
    for junk in (None, 5, "", "nodot", "x.y", "1000.", ".abc"):
        assert not stream_token_ok(SECRET, junk, "CA1", "words=3", now=999)


def test_signature_covers_url_and_sorted_params() -> None:
    sig = twilio_signature("tok", "https://h/p", [("b", "2"), ("a", "1")])
    assert sig == twilio_signature("tok", "https://h/p", [("a", "1"), ("b", "2")])
    assert signature_ok("tok", "https://h/p", [("a", "1"), ("b", "2")], sig)
    assert not signature_ok("tok", "https://h/p", [("a", "1"), ("b", "3")], sig)
    assert not signature_ok("tok", "https://h/q", [("a", "1"), ("b", "2")], sig)
    assert not signature_ok("tok", "https://h/p", [], None)
