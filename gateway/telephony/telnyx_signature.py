"""Telnyx's webhook signature: Ed25519 over ``<telnyx-timestamp>|<raw body>``.

``telnyx-signature-ed25519`` is the base64 signature under the account's public
key (base64, as Mission Control shows it); the timestamp must be within
``TOLERANCE_S`` of now, so a captured request cannot be replayed later.
"""

from __future__ import annotations

import base64
import binascii

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

TOLERANCE_S = 300  # how old a signed webhook may be (Telnyx's libraries' default)


def public_key(encoded: str) -> Ed25519PublicKey:
    """The key of ``--telnyx-public-key`` (base64, as Mission Control shows it);
    raises ValueError for anything that is not a 32-byte Ed25519 key."""
    try:
        raw = base64.b64decode(encoded, validate=True)
    except binascii.Error as exc:
        raise ValueError("not base64") from exc
    return Ed25519PublicKey.from_public_bytes(raw)


def signature_ok(key: Ed25519PublicKey, body: bytes, timestamp: str | None,
                 signature: str | None, now: float) -> bool:
    if not timestamp or not signature or not timestamp.isdigit():
        return False
    if abs(now - int(timestamp)) > TOLERANCE_S:
        return False
    try:
        key.verify(base64.b64decode(signature, validate=True),
                   timestamp.encode() + b"|" + body)
    except (binascii.Error, InvalidSignature):
        return False
    return True
