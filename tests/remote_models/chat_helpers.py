"""A conversation with a ``ChatServerEngine`` running the cascade's ``ChatThinker``,
as the gateway drives it: one request per session epoch, payloads in, clauses
and calls out."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import engine_router
from engine_router import Router

from duplex.fence import Fence
from duplex.tools import Tool, ToolSet
from engines.base import StageOutput
from engines.chat_server import ChatServerEngine
from engines.stages import ModelServer
from plugins.base import Context
from plugins.cascade.chat_thinker import ChatThinker
from plugins.cascade.payloads import Clause, ToolCall

WEATHER = Tool("get_weather", "Get the current weather in a city.", {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
TOOLS = ToolSet((WEATHER,))


@dataclass
class Reply:
    words: str
    calls: list[ToolCall] = field(default_factory=list)
    error: str | None = None


class Chat:
    """One session epoch's thinker request."""

    def __init__(self, engine: ChatServerEngine, router: Router) -> None:
        self.engine, self.router = engine, router
        sid = f"chat-{uuid.uuid4().hex[:8]}"
        self.rid, self.fence = f"{sid}.i0.e0.s1", Fence(sid, 0, 0, 0)

    async def open(self, context: Context) -> None:
        await self.engine.submit_initial(self.rid, self.fence, context)

    async def send(self, payload: object) -> None:
        await self.engine.submit_update(self.rid, payload)

    async def reply(self, payload: object | None = None, timeout: float = 120) -> Reply:
        """Send ``payload`` (if any), then read up to the reply's last clause or an error."""
        if payload is not None:
            await self.send(payload)
        words: list[str] = []
        calls: list[ToolCall] = []
        while True:
            out: StageOutput = await self.router.next(self.rid, timeout)
            if out.error is not None:
                return Reply("".join(words), calls, out.error)
            assert out.result is not None
            got = out.result.payload
            if isinstance(got, ToolCall):
                calls.append(got)
                continue
            assert isinstance(got, Clause), got
            assert not calls or not got.text, "words after a call"
            words.append(got.text)
            if got.last:
                return Reply("".join(words), calls)


@contextlib.asynccontextmanager
async def running_engine(url: str, **server: object) -> AsyncIterator[tuple[ChatServerEngine,
                                                                            Router]]:
    engine = ChatServerEngine(1, "think", ChatThinker(), ModelServer(url, **server),  # type: ignore[arg-type]
                              sampling={"temperature": 0.0})
    async with engine_router.running(engine) as router:
        yield engine, router
