"""The door checks (``gateway.auth``), without a gateway."""

from __future__ import annotations

import pytest

from gateway.auth import (
    LOCAL_ORIGINS,
    AccessPolicy,
    Origins,
    key_matches,
    offered_key,
    parse_origins,
)
from gateway.config import GatewayConfig


def origins(spec: str = LOCAL_ORIGINS, own: tuple[str, ...] = ()) -> Origins:
    return Origins(parse_origins(spec), own)


@pytest.mark.parametrize(("origin", "host", "allowed"), [
    (None, "gw:8000", True),  # no Origin: not a browser
    ("http://gw:8000", "gw:8000", True),  # the gateway's own page
    ("https://gw", "gw", True),  # behind a TLS proxy the socket itself is plain ws
    ("https://gw:443", "gw", True),
    ("http://gw:8001", "gw:8000", False),  # another port is another origin
    ("http://localhost:1", "gw", True),
    ("https://127.0.0.1", "gw", True),
    ("http://[::1]:9", "gw", True),
    ("http://localhost.evil", "gw", False),
    ("ws://localhost:1", "gw", False),  # pages are http or https
    ("null", "gw", False),
    ("http://bad:port", "gw", False),
    ("https://evil.example", None, False),
])
def test_default_origins(origin: str | None, host: str | None, allowed: bool) -> None:
    assert origins().allows(origin, host) is allowed


def test_listed_origins_and_the_public_url() -> None:
    listed = origins("https://app.example,http://dev.example:*,http://x.example:8080",
                     own=("gw.example",))
    assert listed.allows("https://app.example", "h")
    assert not listed.allows("https://app.example:8443", "h")
    assert listed.allows("http://dev.example:1234", "h")
    assert listed.allows("http://x.example:8080", "h")
    assert not listed.allows("http://x.example", "h")
    assert not listed.allows("http://localhost:1", "h")  # the list replaces the default
    assert listed.allows("https://gw.example", "internal:8000")  # --public-url
    assert origins("*").allows("https://evil.example", "h")


@pytest.mark.parametrize("entry", ["app.example", "ftp://x", "https://x/path", "https://",
                                   "https://u@x", "https://x?q"])
def test_an_entry_that_is_not_an_origin_is_refused(entry: str) -> None:
    with pytest.raises(ValueError):
        parse_origins(entry)


def test_the_key_is_offered_by_bearer_or_subprotocol() -> None:
    assert offered_key({"authorization": "Bearer k1"}) == "k1"
    assert offered_key({"authorization": "bearer  k1 "}) == "k1"
    assert offered_key({}, ["realtime", "openai-insecure-api-key.k2"]) == "k2"
    assert offered_key({"authorization": "Basic k1"}, ["realtime"]) is None
    assert key_matches("k1", "k1")
    assert not key_matches("k1", "k1x")
    assert not key_matches("k1", None)


def test_twilio_is_off_only_with_a_key_and_no_twilio_token() -> None:
    assert AccessPolicy.of(GatewayConfig()).twilio_off is None
    assert AccessPolicy.of(GatewayConfig(api_key="k", twilio_auth_token="t")).twilio_off is None
    why = AccessPolicy.of(GatewayConfig(api_key="k")).twilio_off
    assert why is not None and "--twilio-auth-token" in why


def test_observing_needs_the_bearer_key_once_one_is_set() -> None:
    assert AccessPolicy.of(GatewayConfig()).may_observe({})
    keyed = AccessPolicy.of(GatewayConfig(api_key="k"))
    assert keyed.may_observe({"authorization": "Bearer k"})
    assert not keyed.may_observe({"authorization": "Bearer j"})
    assert not keyed.may_observe({})
