"""Output pacing: release reply audio at most ``lead_ms`` ahead of real time.

A bounded lead keeps a cancel cheap (little audio to take back) and keeps the
client's buffer from drifting (research/peers.md §5.2). The clock restarts at
each response, and re-anchors when generation fell behind real time (the
client's buffer ran dry, so it plays new audio at once).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Pacer:
    lead_ms: float
    anchor: float | None = None  # when the response's audio started playing
    released_ms: float = 0.0
    key: object = None  # what the current clock belongs to (a response turn)

    def due(self, key: object, now: float) -> float:
        """When the next chunk of ``key``'s audio may be released."""
        if key != self.key or self.anchor is None:
            return now
        if now > self.anchor + self.released_ms / 1000.0:
            return now  # the client ran dry: nothing to wait for
        return self.anchor + max(0.0, self.released_ms - self.lead_ms) / 1000.0

    def released(self, key: object, now: float, duration_ms: float) -> None:
        if key != self.key or self.anchor is None:
            self.key, self.anchor, self.released_ms = key, now, 0.0
        elif now > self.anchor + self.released_ms / 1000.0:
            self.anchor = now - self.released_ms / 1000.0
        self.released_ms += duration_ms

    def reset(self) -> None:
        self.key, self.anchor, self.released_ms = None, None, 0.0
