"""Errors of the duplex session domain, split by cause.

::

    DuplexError
    ├── ClientError                 the client broke the protocol   → error event, session lives
    │   ├── InvalidRequest          malformed or meaningless input   (invalid_request_error)
    │   └── SessionStateError       valid input at the wrong moment  (invalid_request_error)
    ├── CapacityError               busy: retry later               (rate_limit_error)
    ├── FenceError                  stale work from an older fence   (dropped, never sent)
    └── ServerError                 our fault or our dependency's   (server_error)
        ├── StoreUnavailable        Redis down, paused or timing out
        ├── LeaseLost               another process owns the session now
        └── StageFailure            a model stage failed

Only the gateway's protocol boundary turns these into wire ``error`` events
(``to_wire``); nothing else catches broadly. Codes follow upstream's vocabulary
(research/upstream_duplex.md §5.2) or OpenAI's where those exist.
"""

from __future__ import annotations

from typing import ClassVar


class DuplexError(Exception):
    """Base of every error this project raises on purpose."""

    error_type: ClassVar[str] = "server_error"
    default_code: ClassVar[str] = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        event_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.param = param
        self.event_id = event_id

    def to_wire(self) -> dict[str, object]:
        """The ``error`` object of an OpenAI Realtime ``error`` event."""
        return {
            "type": self.error_type,
            "code": self.code,
            "message": self.message,
            "param": self.param,
            "event_id": self.event_id,
        }


class ClientError(DuplexError):
    error_type = "invalid_request_error"
    default_code = "invalid_request"


class InvalidRequest(ClientError):
    """Malformed input: bad JSON, unknown type, missing field, bad audio."""

    default_code = "invalid_request"


class SessionStateError(ClientError):
    """A well-formed command that the session cannot take now."""

    default_code = "invalid_state"


class CapacityError(DuplexError):
    """A limit was reached; the client may retry later."""

    error_type = "rate_limit_error"
    default_code = "resource_exhausted"


class FenceError(DuplexError):
    """Work tagged with a fence older than the session's accepted one."""

    default_code = "stale_fence"


class ServerError(DuplexError):
    error_type = "server_error"
    default_code = "internal_error"


class StoreUnavailable(ServerError):
    default_code = "store_unavailable"


class LeaseLost(ServerError):
    default_code = "lease_lost"


class StageFailure(ServerError):
    default_code = "runtime_data_plane_stream_failed"


class InvalidTransition(DuplexError):
    """A state machine was asked for a transition its table does not have.

    Raised by the sans-I/O core; the state is left unchanged.
    """

    default_code = "invalid_transition"
