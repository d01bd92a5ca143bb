"""The adapter the resumable-LLM engine tests (tests/llamacpp, tests/vllm) drive a
real engine with: payloads that say exactly which chunk to send (``Ctx``, ``Gen``,
``Guess``, ``WITHDRAW``, ``Canned``, ``Boom``), outputs that say which chunk they
belong to (``Piece``), and reading them back per request (``fresh``, ``pieces``).
A module of its own: ``conftest`` is a name every test folder shares."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from engine_router import Router

from duplex.fence import Fence
from engines.base import StageEngine
from engines.stages import PromptChunk, StageResult


@dataclass(frozen=True)
class Ctx:
    """Context only: prefilled, says nothing."""

    text: str


@dataclass(frozen=True)
class Gen:
    """A generation of ``n`` tokens after ``text``, its pieces labelled ``label``."""

    label: str
    text: str
    n: int
    sampling: dict[str, Any] | None = None


@dataclass(frozen=True)
class Guess:
    """A speculative generation (labelled ``guess``): a guess at the next ``Gen``."""

    text: str
    n: int
    sampling: dict[str, Any] | None = None


WITHDRAW = object()  # a speculative chunk without text: the guess is withdrawn


@dataclass(frozen=True)
class Canned:
    """An output of its own, after every earlier chunk's."""

    label: str


@dataclass(frozen=True)
class Boom:
    where: str  # "plan" or "text": where the adapter raises


@dataclass
class EchoState:
    fence: Fence
    closed: bool = False
    boom_in_text: bool = False


@dataclass(frozen=True)
class Piece:
    """An output: which generating chunk it belongs to and its text delta."""

    label: str
    delta: str
    finished: bool


@dataclass
class EchoAdapter:
    """Plans each payload as the chunk it names and echoes each text delta as a
    ``Piece``; a full context restarts the chunk behind ``restart_prefix`` (unless
    ``allow_restart`` is off). Records the threads it ran on."""

    restart_prefix: str = ""
    restarts: list[tuple[str, int]] = field(default_factory=list)
    allow_restart: bool = True
    threads: set[str] = field(default_factory=set)
    states: list[EchoState] = field(default_factory=list)

    def open(self, fence: Fence) -> EchoState:
        state = EchoState(fence)
        self.states.append(state)
        return state

    def plan(self, state: EchoState, payload: Any) -> PromptChunk | None:
        self.threads.add(threading.current_thread().name)
        match payload:
            case Ctx(text=text):
                return PromptChunk(text)
            case Gen(label=label, text=text, n=n, sampling=sampling):
                return PromptChunk(text, generate=True, max_tokens=n, tag=label,
                                   sampling=sampling)
            case _ if payload is WITHDRAW:
                return PromptChunk(speculative=True)
            case Guess(text=text, n=n, sampling=sampling):
                return PromptChunk(text, generate=True, max_tokens=n, tag="guess",
                                   speculative=True, sampling=sampling)
            case Canned(label=label):
                return PromptChunk(f"canned {label}", emit=(StageResult(Piece(label, "", True)),))
            case Boom(where="plan"):
                raise RuntimeError("plan exploded")
            case Boom(where="text"):
                state.boom_in_text = True
                return PromptChunk("boom", generate=True, max_tokens=4, tag="boom")
        return None

    def on_text(self, state: EchoState, chunk: PromptChunk, delta: str,
                finished: bool) -> Sequence[StageResult]:
        self.threads.add(threading.current_thread().name)
        if state.boom_in_text:
            raise RuntimeError("on_text exploded")
        return [StageResult(Piece(chunk.tag, delta, finished))]

    def restart(self, state: EchoState, chunk: PromptChunk, budget: int,
                count_tokens: Callable[[str], int]) -> PromptChunk | None:
        self.restarts.append((str(chunk.tag), budget))
        if not self.allow_restart:
            return None
        return replace(chunk, text=self.restart_prefix + chunk.text)

    def close(self, state: EchoState) -> None:
        state.closed = True


E = TypeVar("E", bound=StageEngine)


@dataclass
class Tiny(Generic[E]):
    """The module's one engine on a tiny model, its adapter and its outputs routed."""

    engine: E
    adapter: EchoAdapter
    router: Router


_ids = itertools.count()


def fresh(prefix: str = "t") -> tuple[str, Fence]:
    """A request id never used before, and its session's fence."""
    n = next(_ids)
    return f"{prefix}{n}.s1", Fence(f"{prefix}{n}", 0, 0, 0)


async def pieces(t: Tiny[Any], rid: str, count: int, timeout: float = 120) -> list[Piece]:
    """The next ``count`` finished generations of ``rid`` (all their pieces)."""
    out: list[Piece] = []
    done = 0
    while done < count:
        o = await t.router.next(rid, timeout)
        assert o.error is None, o.error
        assert o.result is not None
        piece = o.result.payload
        assert isinstance(piece, Piece)
        out.append(piece)
        done += piece.finished
    return out
