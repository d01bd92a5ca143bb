"""What a transport needs from a session: the runner's public surface, typed here.

A transport owns this protocol so that the session runtime can change behind it:
whatever serves a session (today ``gateway.session.runner.SessionRunner``) fits
by shape. ``Attachment`` (a socket as the session sees it) is the session's side
of the same seam.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from duplex import commands as c
from duplex.errors import DuplexError
from gateway.session.attachment import Attachment


class Session(Protocol):
    closed: asyncio.Event  # set once the session has ended (its terminal was sent)

    @property
    def session_id(self) -> str: ...

    def submit(self, cmd: c.Command) -> None:
        """Queue a client command; raises ``CapacityError`` when the session is flooded."""
        ...

    def report(self, error: DuplexError) -> None:
        """Queue an ``error`` for the client, in order with the events before it."""
        ...

    def request_close(self, reason: str) -> None:
        """End the session now (ahead of what is queued)."""
        ...

    def client_closed(self, reason: str) -> None:
        """The client ended the session: handled after everything it sent before."""
        ...

    def request_detach(self, attachment: Attachment) -> None:
        """``attachment``'s socket went away: the session goes on, resumable."""
        ...

    def confirm_token(self, generation: int) -> None:
        """The socket of ``generation`` proved it holds the rotated resume token."""
        ...

    def played(self, response_id: str) -> None:
        """The peer has played some of ``response_id``'s audio (its playback mark)."""
        ...

    async def attach(self, attachment: Attachment, *, resume_token: str,
                     cursor: int | None) -> bool:
        """Make ``attachment`` the session's socket (replaying after ``cursor`` for a
        resume); False when the resume was refused after all."""
        ...

    def serves(self, attachment: Attachment) -> bool:
        """``attachment`` is the session's socket (not replaced, ended or detached)."""
        ...

    def dropped(self, attachment: Attachment) -> bool:
        """``attachment`` stopped serving the session without another socket taking
        its place (a send to it failed): how its peer closes it still counts."""
        ...

    def forget(self, attachment: Attachment) -> None:
        """``attachment``'s socket is done (ended, its reader gone): the session
        holds it no longer."""
        ...

    def let_go(self) -> Attachment | None:
        """Stop serving the socket (this process stops); the session stays resumable."""
        ...

    async def refuse_late(self, error: DuplexError) -> None:
        """Answer a command read after the end, outside the journal."""
        ...
