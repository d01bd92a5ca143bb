"""The per-call stream token and the relay proof: what any carrier's bridge checks.

The stream token binds a media stream to the call whose webhook minted it: a
socket that presents it in its start (Twilio: ``start.customParameters``) proves
it came from our answer to that webhook, even where the carrier's signatures are
off. The carrier's own request signatures are its module's (``telephony.twilio``).
"""

from __future__ import annotations

import hashlib
import hmac


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
    place of the carrier's signature, which covers the URL the carrier dialed, not the
    owner's. Only processes that share the carrier's secret can make it."""
    return hmac.new(secret, f"relay\n{relayed_by}".encode(), hashlib.sha256).hexdigest()


def relay_proof_ok(secret: bytes, relayed_by: str | None, offered: str | None) -> bool:
    if not relayed_by or not offered:
        return False
    return hmac.compare_digest(relay_proof(secret, relayed_by).encode(), offered.encode())
