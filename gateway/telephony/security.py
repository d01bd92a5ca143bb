"""Twilio request signatures and the per-call stream token.

``X-Twilio-Signature`` is base64(HMAC-SHA1(auth token, URL + each POST param's
name and value, sorted by name)). The WebSocket upgrade is signed over the
``wss://`` URL exactly as written in the TwiML, with no params
(research/peers.md §3.2).

The stream token binds a ``<Stream>`` to the call whose signed webhook minted
it: a socket that presents it in ``start.customParameters`` proves it came
from our TwiML, even where signatures are off.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable


def twilio_signature(auth_token: str, url: str, params: Iterable[tuple[str, str]] = ()) -> str:
    payload = url + "".join(k + v for k, v in sorted(params))
    digest = hmac.new(auth_token.encode(), payload.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def signature_ok(auth_token: str, url: str, params: Iterable[tuple[str, str]],
                 offered: str | None) -> bool:
    if not offered:
        return False
    return hmac.compare_digest(twilio_signature(auth_token, url, params).encode(),
                               offered.encode())


def _token_mac(secret: bytes, call_sid: str, expires: int, instructions: str) -> str:
    # instructions are covered too: they ride in a <Parameter> the socket could forge
    material = f"{call_sid}\n{expires}\n{instructions}".encode()
    return hmac.new(secret, material, hashlib.sha256).hexdigest()


def mint_stream_token(secret: bytes, call_sid: str, instructions: str, expires: int) -> str:
    return f"{expires}.{_token_mac(secret, call_sid, expires, instructions)}"


def stream_token_ok(secret: bytes, token: object, call_sid: str, instructions: str,
                    now: float) -> bool:
    if not isinstance(token, str) or "." not in token:
        return False
    expires_s, mac = token.split(".", 1)
    if not expires_s.isdigit() or int(expires_s) < now:
        return False
    expected = _token_mac(secret, call_sid, int(expires_s), instructions)
    return hmac.compare_digest(expected.encode(), mac.encode())


def relay_proof(secret: bytes, relayed_by: str) -> str:
    """What a gateway relaying a call's media stream to the session's owner shows in
    place of Twilio's signature, which covers the URL Twilio dialed, not the owner's.
    Only processes that share the Twilio auth token (hence ``secret``) can make it."""
    return hmac.new(secret, f"relay\n{relayed_by}".encode(), hashlib.sha256).hexdigest()


def relay_proof_ok(secret: bytes, relayed_by: str | None, offered: str | None) -> bool:
    if not relayed_by or not offered:
        return False
    return hmac.compare_digest(relay_proof(secret, relayed_by).encode(), offered.encode())
