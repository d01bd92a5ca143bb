"""A response's output items as the client sees them: the events that announce,
stream and close its message, and the function calls the model made
(``duplex.response`` says what the output may hold).

A part of ``SessionCore`` (its ``output``): the core decides whether a stage
output is accepted (fence, open session) and hands the accepted ones on; this
part builds their events and, unless the response is out of band, adds each
finished item to the conversation (``duplex.items``), through the core's
effects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from duplex import effects as fx
from duplex import events as ev
from duplex.events import ServerEvent as E
from duplex.items import ConversationItems
from duplex.response import Response


class ResponseOutput:
    __slots__ = ("_conversation", "_effect", "_new_id")

    def __init__(self, conversation: ConversationItems, *,
                 effect: Callable[[fx.Effect], None], new_id: Callable[[str], str]) -> None:
        self._conversation = conversation
        self._effect = effect  # the core's: effects in order with its own
        self._new_id = new_id

    def _emit(self, kind: E, **fields: Any) -> None:
        self._effect(fx.Emit(ev.event(kind, **fields)))

    def _last_item(self) -> str | None:
        return next(reversed(self._conversation.items), None)

    def open_message(self, r: Response) -> None:
        """Announce the response's message item (at once, or at its first words
        when it may call tools instead: then its output may hold no message)."""
        r.message_index = len(r.output)
        item = assistant_item(r, "in_progress")
        self._emit(E.OUTPUT_ITEM_ADDED, response_id=r.id, output_index=r.message_index,
                   item=item)
        if not r.out_of_band:
            self._emit(E.ITEM_ADDED, previous_item_id=self._last_item(), item=item)
        # content parts use the short type names (the items use output_audio)
        part = ({"type": "audio", "transcript": ""} if r.audio
                else {"type": "text", "text": ""})
        self._emit(E.CONTENT_PART_ADDED, **r.common(), part=part)
        r.output.append(item)

    def audio(self, r: Response, audio_b64: str, duration_ms: float, text: str) -> None:
        """A chunk of the message's audio and its words (or its words alone)."""
        if r.message_index is None:
            self.open_message(r)
        r.ledger.book(duration_ms, text)
        r.ledger.mark_sent(r.ledger.generated_ms)
        common = r.common()
        if r.audio:
            self._emit(E.AUDIO_DELTA, **common, delta=audio_b64)
            if text:
                self._emit(E.AUDIO_TRANSCRIPT_DELTA, **common, delta=text)
        elif text:
            self._emit(E.TEXT_DELTA, **common, delta=text)

    def function_call(self, r: Response, name: str, arguments: str) -> bool:
        """A call the model made, whole; False when dropped as a second call
        where ``parallel_tool_calls`` is false. The message before it is closed
        (a reply's words come before its calls)."""
        if not r.tools.parallel and any(o["type"] == "function_call" for o in r.output):
            return False
        if r.message_open:
            self.close_message(r, "completed")
        r.message_closed = True
        index = len(r.output)
        item_id, call_id = self._new_id("item"), self._new_id("call")
        common = {"response_id": r.id, "item_id": item_id, "output_index": index,
                  "call_id": call_id}
        opened = ev.function_call_item(item_id, "in_progress", call_id=call_id, name=name,
                                       arguments="")
        previous = self._last_item()
        self._emit(E.OUTPUT_ITEM_ADDED, response_id=r.id, output_index=index, item=opened)
        if not r.out_of_band:
            self._emit(E.ITEM_ADDED, previous_item_id=previous, item=opened)
        if arguments:
            self._emit(E.CALL_ARGUMENTS_DELTA, **common, delta=arguments)
        self._emit(E.CALL_ARGUMENTS_DONE, **common, name=name, arguments=arguments)
        item = ev.function_call_item(item_id, "completed", call_id=call_id, name=name,
                                     arguments=arguments)
        r.output.append(item)
        self._emit(E.OUTPUT_ITEM_DONE, response_id=r.id, output_index=index, item=item)
        if not r.out_of_band:  # in the conversation now: its output may come before the end
            self._add_to_conversation(item, previous)
        return True

    def close_message(self, r: Response, status: str) -> None:
        """The message's closing events; its item holds what was heard (I6)."""
        common = r.common()
        heard = r.ledger.text_heard()
        if r.audio:
            self._emit(E.AUDIO_DONE, **common)
            self._emit(E.AUDIO_TRANSCRIPT_DONE, **common, transcript=heard)
            part: ev.Event = {"type": "audio", "transcript": heard}
        else:
            self._emit(E.TEXT_DONE, **common, text=heard)
            part = {"type": "text", "text": heard}
        self._emit(E.CONTENT_PART_DONE, **common, part=part)
        item = assistant_item(r, status)
        assert r.message_index is not None
        r.output[r.message_index] = item
        r.message_closed = True
        self._emit(E.OUTPUT_ITEM_DONE, response_id=r.id, output_index=r.message_index,
                   item=item)
        if not r.out_of_band:
            self._add_to_conversation(item, self._last_item())

    def _add_to_conversation(self, item: ev.Event, previous: str | None) -> None:
        item_id = item["id"]
        self._conversation.items[item_id] = item
        self._effect(fx.SaveItem(item_id, item, previous))
        self._emit(E.ITEM_DONE, previous_item_id=previous, item=item)
        self._conversation.counted(item_id)


def assistant_item(response: Response, status: str) -> ev.Event:
    """The response's message item: the words heard so far (I6)."""
    heard = response.ledger.text_heard()
    return ev.assistant_item(response.item_id, status, heard, audio=response.audio)
