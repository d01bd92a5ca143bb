"""One response in flight: its fence, what it may call, and its output items.

A response's output is a list of items at increasing ``output_index``: at most
one assistant message (its words and audio, booked in the playback ledger),
announced at once when the response cannot call tools and at its first words
when it can, then the function calls the model made. A reply's words come
before its calls: once a call is made, the message is closed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from duplex import events as ev
from duplex.fence import Fence
from duplex.ledger import PlaybackLedger
from duplex.tools import NO_TOOLS, ToolSet
from duplex.turns import ResponseStatus


@dataclass(slots=True)
class Response:
    id: str
    item_id: str
    fence: Fence
    modalities: tuple[str, ...]
    metadata: Any
    out_of_band: bool
    ledger: PlaybackLedger
    tools: ToolSet = NO_TOOLS
    status: ResponseStatus = ResponseStatus.IN_PROGRESS
    # The output items in output_index order: the message (``item_id``, with the
    # ledger) once it is announced, function calls as they come.
    output: list[ev.Event] = field(default_factory=list)
    message_index: int | None = None  # output_index of the message, once announced
    message_closed: bool = False  # a call came after it: no more speech

    @property
    def audio(self) -> bool:
        return "audio" in self.modalities

    @property
    def message_open(self) -> bool:
        return self.message_index is not None and not self.message_closed

    def common(self) -> dict[str, Any]:
        """The fields every event of the message's content carries."""
        return {"response_id": self.id, "item_id": self.item_id,
                "output_index": self.message_index, "content_index": 0}
