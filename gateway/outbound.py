"""What a session hands its socket: one server event, serialised once.

The outbox's journal serialises each event once, for the journal; the same text is what
the Realtime socket sends. A transport that speaks another protocol (Twilio's
media stream) renders from the event as built, so it never parses that text
back; only an event read back from the journal (a replay) has no built form.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from duplex.events import Event


@dataclass(frozen=True, slots=True)
class Outbound:
    text: str  # the event as journaled, and as the Realtime wire carries it
    type: str = ""  # its "type"; "" for one read back from the journal
    built: Event | None = None  # the event as built here (None: read back)

    def event(self) -> Event:
        """The event as a dict: as built, or parsed from its text (a replay)."""
        if self.built is not None:
            return self.built
        parsed: Event = json.loads(self.text)
        return parsed
