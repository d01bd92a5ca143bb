"""Who may do what: every door's check, in one place (docs/deployment.md "Security").

- **The API key** (``--api-key``) is the credential of every route that starts or
  observes sessions: ``/v1/realtime``, ``/metrics`` and the full ``/readyz``. It
  arrives as ``Authorization: Bearer <key>`` (servers, the official ``openai``
  client) or, from a browser, which cannot set headers on a WebSocket, as the
  subprotocol ``openai-insecure-api-key.<key>``. A key in the URL is never
  accepted: URLs end up in access logs and proxies. Compared in constant time.
- **Twilio** cannot send our key; its credential is its signature, so with a key
  and no ``--twilio-auth-token`` the Twilio routes are off (``twilio_off``).
- **Origins** (``--allowed-origins``): a browser attaches its page's ``Origin``
  to every WebSocket upgrade and lets any page open one, so a page on another
  site could drive a gateway on ``localhost`` from a developer's browser. An
  upgrade that carries an Origin must come from an allowed page: this gateway's
  own origin always, and the listed ones (default: localhost, 127.0.0.1 and ::1 on
  any port). Clients that send no Origin (servers, Twilio, owner relays) are not
  browsers and pass.
- **A refused resume** gets one answer (``resume_refused``) whether the session
  is unknown, ended or the token is wrong: the answer must not tell a guesser
  which session ids exist.

Without ``--api-key`` the gateway is open, as for local development; the Origin
check still applies.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from duplex.errors import DuplexError, InvalidRequest, SessionStateError

if TYPE_CHECKING:
    from gateway.config import GatewayConfig

KEY_SUBPROTOCOL = "openai-insecure-api-key."
# query parameters some clients put a key in; refused by name (their value is redacted
# from the logs by gateway.log_redaction)
URL_KEY_PARAMS = ("api_key", "apikey", "key")
LOCAL_ORIGINS = ",".join(f"{scheme}://{host}:*" for host in ("localhost", "127.0.0.1", "[::1]")
                         for scheme in ("http", "https"))
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


# -- the API key ---------------------------------------------------------------------------


def offered_key(headers: Mapping[str, str], subprotocols: Sequence[str] = ()) -> str | None:
    """The key a request offers: its Bearer header, else its key subprotocol."""
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    for proto in subprotocols:
        if proto.startswith(KEY_SUBPROTOCOL):
            return proto[len(KEY_SUBPROTOCOL):]
    return None


def key_matches(expected: str, offered: str | None) -> bool:
    """Constant time, in the length too: both sides are hashed first."""
    return hmac.compare_digest(hashlib.sha256((offered or "").encode()).digest(),
                               hashlib.sha256(expected.encode()).digest())


def key_in_url(query: Mapping[str, str]) -> bool:
    return any(name in query for name in URL_KEY_PARAMS)


def invalid_key(in_url: bool) -> InvalidRequest:
    message = ("an API key in the URL is never accepted (URLs are logged): send "
               "Authorization: Bearer <key> or the openai-insecure-api-key.<key> subprotocol"
               if in_url else "invalid or missing API key")
    return InvalidRequest(message, code="invalid_api_key")


# -- origins -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Pattern:
    scheme: str
    host: str
    port: int | None  # None: any port


def _pattern(entry: str) -> _Pattern:
    """``scheme://host[:port]`` or ``scheme://host:*``; ValueError otherwise."""
    text = entry.strip().lower()
    any_port = text.endswith(":*")
    parts = urlsplit(text.removesuffix(":*") if any_port else text)
    port = None if any_port else (parts.port or _DEFAULT_PORTS.get(parts.scheme))
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in (
            "", "/") or parts.query or parts.username:
        raise ValueError(entry)
    return _Pattern(parts.scheme, parts.hostname, port)


def parse_origins(spec: str) -> tuple[_Pattern, ...] | None:
    """The patterns of ``--allowed-origins`` (comma-separated); None for ``*``.
    Raises ValueError naming the first entry that is not an origin."""
    entries = [e for e in spec.split(",") if e.strip()]
    if any(e.strip() == "*" for e in entries):
        return None
    return tuple(_pattern(e) for e in entries)


def _authority(host: str, scheme: str) -> str:
    """``host[:port]`` without the scheme's default port, lowercased."""
    host = host.strip().lower()
    default = _DEFAULT_PORTS.get(scheme)
    return host.removesuffix(f":{default}") if default else host


@dataclass(frozen=True, slots=True)
class Origins:
    """Which browser pages may open WebSockets here."""

    patterns: tuple[_Pattern, ...] | None  # None: any
    own: tuple[str, ...] = ()  # authorities that are this gateway (--public-url)

    def allows(self, origin: str | None, host: str | None) -> bool:
        """``origin``: the upgrade's Origin header (None: not a browser); ``host``: its
        Host header. A page served by this gateway (the same host and port, http or
        https: a TLS proxy may sit in front) is always allowed."""
        if origin is None or self.patterns is None:
            return True
        try:
            parts = urlsplit(origin.strip().lower())
            port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False  # "null" (a file or a sandboxed frame) and the like
        authority = _authority(parts.netloc, parts.scheme)
        if authority in self.own or (host and authority in (
                _authority(host, "http"), _authority(host, "https"))):
            return True
        return any(p.scheme == parts.scheme and p.host == parts.hostname
                   and p.port in (None, port) for p in self.patterns)


# -- the policy of one gateway ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    api_key: str | None
    origins: Origins
    twilio_signed: bool  # a Twilio auth token is configured

    @classmethod
    def of(cls, config: GatewayConfig) -> AccessPolicy:
        patterns = parse_origins(config.allowed_origins or LOCAL_ORIGINS)
        own: tuple[str, ...] = ()
        if config.public_url:
            public = urlsplit(config.public_url)
            own = (_authority(public.netloc, public.scheme),)
        return cls(config.api_key, Origins(patterns, own), config.twilio_auth_token is not None)

    @property
    def twilio_off(self) -> str | None:
        """Why the Twilio routes are off, or None when they are on."""
        if self.api_key is not None and not self.twilio_signed:
            return ("--api-key is set and --twilio-auth-token is not, so nothing would "
                    "authenticate Twilio's requests; set --twilio-auth-token "
                    "(DUPLEX_GATEWAY_TWILIO_AUTH_TOKEN) to turn them on")
        return None

    def origin_refusal(self, headers: Mapping[str, str]) -> DuplexError | None:
        origin = headers.get("origin")
        if self.origins.allows(origin, headers.get("host")):
            return None
        return InvalidRequest(f"WebSockets from origin {origin!r:.80} are not allowed here "
                              "(--allowed-origins)", code="origin_not_allowed")

    def socket_refusal(self, headers: Mapping[str, str], subprotocols: Sequence[str],
                       query: Mapping[str, str]) -> DuplexError | None:
        """Why a ``/v1/realtime`` socket may not go on (origin, then key), or None."""
        refusal = self.origin_refusal(headers)
        if refusal is not None or self.api_key is None:
            return refusal
        if key_matches(self.api_key, offered_key(headers, subprotocols)):
            return None
        return invalid_key(key_in_url(query))

    def may_observe(self, headers: Mapping[str, str]) -> bool:
        """May this HTTP request see metrics and the owner id (``/metrics``, ``/readyz``)?"""
        return self.api_key is None or key_matches(self.api_key, offered_key(headers))


# -- resume --------------------------------------------------------------------------------

# What the store and the runner say when a resume cannot go on for want of a live
# session or of its token; any of them is answered with ``resume_refused``.
RESUME_REFUSAL_CODES = frozenset({"session_resume_expired", "invalid_resume_token",
                                  "session_not_found", "session_closed"})


def resume_refused() -> SessionStateError:
    """The one answer to a resume of an unknown or ended session and to a wrong token."""
    return SessionStateError("no resumable session has this id and resume_token",
                             code="session_resume_expired")
