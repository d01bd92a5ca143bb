"""The core's optional speed-ups: C parsers taken where installed, never needed.

The core runs on the standard library alone. Where ``orjson`` and ``pybase64``
are installed (the gateway depends on both), the wire tries them first, since
every client frame and every audio append goes through them; anything one
refuses goes to the stdlib, which gives the answer the core holds to, so a
frame gets the same value or the same refusal either way
(``tests/unit/test_speedups.py`` runs the core with both blocked).

Each is None where its library is missing; what it refuses, it refuses with a
``ValueError`` (``orjson.JSONDecodeError`` and ``binascii.Error`` are ones).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

JsonLoads = Callable[[str], object]
Base64Decode = Callable[[str], bytes]


def find_json_loads() -> JsonLoads | None:
    """orjson's parser (C), or None."""
    try:
        import orjson
    except ImportError:
        return None
    return orjson.loads


def find_base64_decode() -> Base64Decode | None:
    """pybase64's strict decoder (C, SIMD: ~6x the stdlib's speed), or None."""
    try:
        import pybase64
    except ImportError:
        return None
    return partial(pybase64.b64decode, validate=True)


json_loads = find_json_loads()
base64_decode = find_base64_decode()
