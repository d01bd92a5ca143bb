"""Playback ledger: what of a response was generated, sent and heard (I6).

Each audio delta is booked with the transcript text it carries, so a time in the
audio maps back to the words spoken up to then. History keeps only what the user
heard: an interrupted reply is cut to ``heard_ms`` and to the words before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from duplex.errors import InvalidRequest


@dataclass(frozen=True, slots=True)
class Mark:
    start_ms: float
    end_ms: float
    text: str


@dataclass(slots=True)
class PlaybackLedger:
    response_id: str
    item_id: str
    marks: list[Mark] = field(default_factory=list)
    sent_ms: float = 0.0
    heard_ms: float | None = None  # set by truncate / playback.ack

    @property
    def generated_ms(self) -> float:
        return self.marks[-1].end_ms if self.marks else 0.0

    @property
    def text(self) -> str:
        return "".join(m.text for m in self.marks)

    def book(self, duration_ms: float, text: str) -> Mark:
        mark = Mark(self.generated_ms, self.generated_ms + duration_ms, text)
        self.marks.append(mark)
        return mark

    def mark_sent(self, end_ms: float) -> None:
        self.sent_ms = max(self.sent_ms, end_ms)

    def truncate(self, audio_end_ms: float) -> float:
        """Record that playback stopped at ``audio_end_ms``; returns the clamp used.

        Like OpenAI, a point past the generated audio is an error; monotonic
        min-wins, so a later, larger ack cannot undo a truncate.
        """
        if audio_end_ms < 0:
            raise InvalidRequest("audio_end_ms must be >= 0", code="invalid_value",
                                 param="audio_end_ms")
        if audio_end_ms > self.generated_ms + 0.5:
            raise InvalidRequest(
                f"audio_end_ms {audio_end_ms:.0f} is past the {self.generated_ms:.0f} ms "
                "of audio generated",
                code="invalid_value", param="audio_end_ms",
            )
        clamped = min(audio_end_ms, self.generated_ms)
        self.heard_ms = clamped if self.heard_ms is None else min(self.heard_ms, clamped)
        return self.heard_ms

    def text_heard(self, heard_ms: float | None = None) -> str:
        """The transcript prefix spoken within the first ``heard_ms`` of audio.

        A partly heard mark contributes its words up to the proportional cut,
        ending on a word boundary.
        """
        limit = self.heard_ms if heard_ms is None else heard_ms
        if limit is None:
            return self.text
        parts: list[str] = []
        for mark in self.marks:
            if mark.end_ms <= limit:
                parts.append(mark.text)
                continue
            if mark.start_ms < limit and mark.end_ms > mark.start_ms:
                share = (limit - mark.start_ms) / (mark.end_ms - mark.start_ms)
                cut = mark.text[: int(len(mark.text) * share)]
                space = cut.rfind(" ")
                parts.append(cut[: space + 1] if space >= 0 else "")
            break
        return "".join(parts)
