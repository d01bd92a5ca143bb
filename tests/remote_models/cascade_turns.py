"""The gateway's side of the remote-model tests: a cascade gateway process on the
module's model server, and the turns they drive through it (tests/e2e's realtime
client, which ``conftest`` puts on the path)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from client import RealtimeClient, eventually
from gateway_process import GatewayProcess, running_cascade
from model_servers import FakeServer


def cascade_gateway(*flags: str, url_flags: tuple[str, ...] = ("--llm-url",)) -> Any:
    """A module's ``gateway`` fixture (``gateway = cascade_gateway(...)``): the cascade
    in a gateway process that reaches the module's ``server`` through each of
    ``url_flags``, with ``flags`` besides; one for the whole module (models warm up
    once)."""

    @pytest.fixture(scope="module")
    def gateway(server: FakeServer, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[GatewayProcess]:
        urls = [arg for flag in url_flags for arg in (flag, server.url)]
        with running_cascade(Path(tmp_path_factory.mktemp("cascade")), *urls, *flags) as proc:
            yield proc

    return gateway


async def typed(c: RealtimeClient, text: str) -> dict[str, Any]:
    """A typed user turn and the reply it asks for: the ``response.done``'s response."""
    await c.send("conversation.item.create", item={
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
    await c.send("response.create")
    done: dict[str, Any] = (await c.until("response.done", timeout=60))["response"]
    return done


async def cancel_mid_reply(ws_url: str, text: str, instructions: str | None = None) -> None:
    """Ask for a reply by text, cancel it at its first audio, and see it cancelled."""
    c = await RealtimeClient.connect(ws_url)
    try:
        await c.recv()
        if instructions is not None:
            await c.send("session.update", session={"instructions": instructions})
            await c.until("session.updated")
        await c.send("conversation.item.create", item={
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": text}]})
        await c.send("response.create")
        await c.until("response.output_audio.delta", timeout=60)
        await c.send("response.cancel")
        done = await c.until("response.done", timeout=30)
        assert done["response"]["status"] == "cancelled"
    finally:
        await c.close()


async def one_more_drop(server: FakeServer, counter: str, before: int) -> None:
    """Wait until the server has seen one more dropped stream than ``before`` (it
    learns of a drop on its own loop), and no more than one."""
    async def grown() -> int:
        return int(server.log()[counter] > before)

    await eventually(grown, 20, f"the server's {counter} past {before}")
    assert server.log()[counter] == before + 1
