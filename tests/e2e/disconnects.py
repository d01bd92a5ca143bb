"""Churn: a long reply kept streaming while its socket is dropped without a close
frame and resumed, again and again; then proof that nothing was lost or duplicated.

Shared by the single-process test (``test_resume.py``) and the multi-process one
(``tests/faults/test_owner_relay.py``), where each resume lands on a random
gateway.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from client import RealtimeClient, expect_error, last_seq, resume
from websockets.exceptions import ConnectionClosed

from plugins.tone.reply import number_word


def seqs_of(events: list[dict[str, Any]]) -> list[int]:
    return [e["server_event_seq"] for e in events if "server_event_seq" in e]


def spoken_words(events: list[dict[str, Any]], response_id: str) -> list[str]:
    text = "".join(e["delta"] for e in events
                   if e["type"] == "response.output_audio_transcript.delta"
                   and e["response_id"] == response_id)
    return text.split()


def assert_counts_up(words: list[str]) -> None:
    """The tone plugin says ``answer to turn N: one two three …``: any lost,
    repeated or reordered delta breaks the count."""
    assert words[:3] == ["answer", "to", "turn"], words[:8]
    assert words[4:] == [number_word(i) for i in range(1, len(words) - 3)], words


async def read_some(c: RealtimeClient, want: int, abort_after: float | None,
                    on_done: Callable[[RealtimeClient, dict[str, Any]], Awaitable[None]],
                    ) -> None:
    """Read up to ``want`` events; with ``abort_after``, the socket is aborted that
    many seconds in, possibly while a read is pending. ``on_done`` sees each
    ``response.done`` and may read on (it keeps a reply streaming)."""
    loop = asyncio.get_running_loop()
    timer = (loop.call_later(abort_after, c.ws.transport.abort)
             if abort_after is not None else None)
    try:
        for _ in range(want):
            try:
                event = await c.recv(20)
            except ConnectionClosed:
                return
            if event["type"] == "response.done":
                if timer is not None:
                    timer.cancel()
                    timer = None
                await on_done(c, event)
    finally:
        if timer is not None:
            timer.cancel()


@dataclass
class Churn:
    sid: str
    token: str
    client: RealtimeClient
    generation: int = 1
    sockets: list[tuple[int, RealtimeClient]] = field(default_factory=list)  # (cursor, c)
    long_replies: list[str] = field(default_factory=list)

    @classmethod
    async def start(cls, url: str, words: int = 400) -> Churn:
        """A new session on ``url`` with a ``words``-long reply streaming."""
        c = await RealtimeClient.connect(url)
        created = await c.recv()
        churn = cls(created["session"]["id"], created["resume_token"], c, sockets=[(0, c)])
        await c.send("session.update", session={"instructions": f"words={words}"})
        await c.send("response.create")
        await c.until("response.created")
        return churn

    async def _keep_streaming(self, c: RealtimeClient, done: dict[str, Any]) -> None:
        # Should the reply end before the cycles do, start the next one before any
        # abort can lose the request.
        self.long_replies.append(done["response"]["id"])
        await c.send("response.create")
        await c.until("response.created")

    async def cycles(self, n: int, rng: random.Random, url: Callable[[], str]) -> None:
        """``n`` times: read a random number of events (an abort may land mid-read),
        drop the socket, resume on ``url()`` from the highest seq any socket got."""
        for cycle in range(n):
            want = rng.randint(0, 30)
            # live events come every ~0.1 s: an abort within the read's span often
            # lands while a recv is pending (and in the backlog, after the reads)
            abort_after = rng.uniform(0.0, 0.1 * want + 0.02) if rng.random() < 0.4 else None
            await read_some(self.client, want, abort_after, self._keep_streaming)
            self.client.ws.transport.abort()  # no close frame: the session detaches
            cursor = max(last_seq(s.events) for _, s in self.sockets)
            c = await resume(url(), self.sid, self.token, cursor)
            resumed = await c.recv()
            assert resumed["type"] == "session.resumed", (cycle, resumed)
            self.client = c
            self.sockets.append((cursor, c))
            self.generation += 1
            assert resumed["attachment_generation"] == self.generation, (cycle, resumed)
            assert resumed["resume_token"] != self.token
            assert resumed["last_server_event_seq"] >= cursor
            assert resumed["replay_count"] == resumed["last_server_event_seq"] - cursor
            self.token = resumed["resume_token"]

    async def finish_and_check(self) -> None:
        """End the long reply, see a new turn complete, then check every socket."""
        c = self.client
        everything = [e for _, s in self.sockets for e in s.events]
        current = [e for e in everything
                   if e["type"] == "response.created"][-1]["response"]["id"]
        late_cancel: list[dict[str, Any]] = []
        if not [e for e in everything if e["type"] == "response.done"
                and e["response"]["id"] == current]:
            await c.send("response.cancel", event_id="evt_cancel")
            done = await c.until("response.done", timeout=20)
            assert done["response"]["id"] == current
            assert done["response"]["status"] in ("cancelled", "completed")
            if done["response"]["status"] == "completed":  # it ended just before the cancel
                late_cancel = [await expect_error(c, "response_cancel_not_active")]
        await c.send("session.update", session={"instructions": "words=5"})
        await c.send("response.create")
        done = await c.until("response.done", timeout=20)
        assert done["response"]["id"] != current
        assert done["response"]["status"] == "completed"
        assert spoken_words(c.events, done["response"]["id"])[4:] == [
            "one", "two", "three", "four", "five"]

        # Per socket: increasing, gapless, and starting right after its cursor.
        every: list[int] = []
        for n, (cursor, s) in enumerate(self.sockets):
            seqs = seqs_of(s.events)
            every += seqs
            assert seqs == list(range(cursor + 1, cursor + 1 + len(seqs))), (n, cursor, seqs)
            bare = {e["type"] for e in s.events if "server_event_seq" not in e}
            assert bare <= ({"session.resumed"} if n else set()), (n, bare)
            errors = [e for e in s.events if e["type"] == "error" and e not in late_cancel]
            assert not errors, (n, errors)
        # Across sockets: every seq 1..N exactly once.
        assert len(every) == len(set(every))
        assert sorted(every) == list(range(1, len(every) + 1))
        # The long replies' words arrived each exactly once, in order, across sockets.
        everything = [e for _, s in self.sockets for e in s.events]
        for response_id in [*self.long_replies, current]:
            assert_counts_up(spoken_words(everything, response_id))
