"""The engine contract as the orchestrator sees it: one small protocol.

A ``StageEngine`` serves one stage of a plugin: it takes resumable requests
(``submit_initial`` once, then ``submit_update`` per input), can abort them,
and yields ``StageOutput``s as an async stream. A request carries an opaque
``tag`` from whoever submitted it (the gateway's: the session's fence); the
engine hands it to the plugin's model when the request opens and back with
every output, and never looks inside. Nothing here knows about sessions.

The LLM engines (llama.cpp, a chat server) also keep what each completion cost,
one ``Prefill`` each, for the benches and the tests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from engines.stages import StageResult


@dataclass(frozen=True, slots=True)
class StageOutput:
    stage: int
    request_id: str
    tag: Any  # the request's tag, as submitted
    result: StageResult | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    """What one completion cost (OpenAI's ``usage``, llama.cpp's ``timings``)."""

    prompt_tokens: int  # the whole prompt
    cached_tokens: int  # of those, reused from the server's cache (not prefilled)
    completion_tokens: int
    prompt_ms: float  # prefilling the rest
    predicted_ms: float


@dataclass(frozen=True, slots=True)
class Prefill:
    """One completion's prompt, and how much of it came from the cache."""

    request_id: str
    usage: Usage
    generate: bool = True  # False: a context-only chunk (its one sampled token dropped)
    detached: bool = False  # an out-of-band prompt, beside the conversation


class UnknownRequest(KeyError):
    """An update for a request the engine does not hold (finished or aborted)."""


class Backpressure(Exception):
    """A request already holds as many unhandled inputs as it may (I8). Submitting
    never waits: a router that waited on one slow request would stall every other."""


class StageEngine(Protocol):
    stage: int
    name: str

    async def run(self) -> None:
        """Serve until cancelled; the orchestrator runs this in its TaskGroup."""
        ...

    async def submit_initial(self, request_id: str, tag: Any, payload: Any) -> None: ...

    async def submit_update(self, request_id: str, payload: Any) -> None:
        """Raises ``UnknownRequest`` for an id that is not live (never re-adds it)
        and ``Backpressure`` when the request's inputs are full."""
        ...

    async def abort(self, request_ids: Sequence[str]) -> None: ...

    def has_request(self, request_id: str) -> bool: ...

    def readiness(self) -> str:
        """Empty once the engine can serve, else what it is still doing (or why not)."""
        ...

    def outputs(self) -> AsyncIterator[StageOutput]: ...
