"""Conversation items: what ``conversation.item.*`` and ``playback.ack`` do to a
session's conversation, and the bounds it stays within (``duplex.conversation``).

A part of ``SessionCore`` (its ``conversation``): it holds the items (the same
ordered dict the core appends turns and replies to), their budget and the
playback ledgers of finished replies, and reports through the core's effects.
The core checks that the session is open before it hands a command on.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from duplex import commands as c
from duplex import effects as fx
from duplex import events as ev
from duplex import fields as f
from duplex import limits
from duplex.conversation import ItemBudget
from duplex.errors import InvalidRequest
from duplex.events import ServerEvent as E
from duplex.ledger import PlaybackLedger
from duplex.response import Response

ROOT = "root"  # OpenAI's previous_item_id for "first in the conversation" (LiveKit sends it)
KEEP_LEDGERS = 8  # finished responses whose playback can still be acked


Check = Callable[[dict[str, Any], str], None]  # an item, and where it is ("item")


def _message(item: dict[str, Any], where: str) -> None:
    if item.get("role") not in ("user", "assistant", "system"):
        raise InvalidRequest(f"{where}.role must be user, assistant or system",
                             code="invalid_value", param=f"{where}.role")
    content = item.get("content")
    if not isinstance(content, list) or not all(isinstance(p, Mapping) for p in content):
        raise InvalidRequest(f"{where}.content must be a list of content parts",
                             code="invalid_value", param=f"{where}.content")
    for i, part in enumerate(content):
        for key in ("text", "transcript"):
            if isinstance(part.get(key), str):
                limits.bounded(part[key], limits.TEXT, f"{where}.content[{i}].{key}")


# how long each string field of a tool call item may be (duplex.limits)
_FIELD_LIMITS: Mapping[str, limits.Limit] = {
    "call_id": limits.CALL_ID, "name": limits.NAME, "arguments": limits.ARGUMENTS,
    "output": limits.OUTPUT}


def _strings(*required: str, optional: tuple[str, ...] = ()) -> Check:
    """A check that ``required`` are strings, ``optional`` strings when present
    (absent: ""), as OpenAI's item fields for tool calls are, each within its
    limit."""

    def check(item: dict[str, Any], where: str) -> None:
        for key in (*required, *optional):
            value = item.get(key)
            if value is None and key in optional:
                item[key] = ""
            elif value is None:
                raise InvalidRequest(f"Missing required parameter: '{where}.{key}'.",
                                     code="missing_required_parameter",
                                     param=f"{where}.{key}")
            elif not isinstance(value, str):
                raise f.wrong_type(f"{where}.{key}", "a string", value)
            else:
                limits.bounded(value, _FIELD_LIMITS[key], f"{where}.{key}")
    return check


# what each item type must hold (a call's arguments are a JSON text, as OpenAI's)
ITEM_FIELDS: Mapping[str, Check] = {
    "message": _message,
    "function_call": _strings("call_id", "name", optional=("arguments",)),
    "function_call_output": _strings("call_id", "output"),
}


def checked_item(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A copy of an item a client sent, its type and fields checked (``where``
    names it in errors: ``item``, ``response.input[2]``)."""
    item = dict(raw)
    kind = item.get("type", "message")
    if kind not in ITEM_FIELDS:
        raise InvalidRequest(f"Invalid value: {kind!r}. Supported values are: 'message', "
                             "'function_call' and 'function_call_output'.",
                             code="invalid_value", param=f"{where}.type")
    ITEM_FIELDS[kind](item, where)
    item["type"] = kind
    return item


class ConversationItems:
    __slots__ = ("_effect", "_ledgers", "_new_id", "budget", "items")

    def __init__(self, items: OrderedDict[str, ev.Event], budget: ItemBudget, *,
                 effect: Callable[[fx.Effect], None], new_id: Callable[[str], str]) -> None:
        self.items = items
        self.budget = budget
        self._ledgers: OrderedDict[str, PlaybackLedger] = OrderedDict()
        self._effect = effect  # the core's: effects in order with its own
        self._new_id = new_id
        for item_id, item in items.items():  # a restored conversation
            budget.set(item_id, item)

    def _emit(self, kind: E, **fields: Any) -> None:
        self._effect(fx.Emit(ev.event(kind, **fields)))

    def create_item(self, cmd: c.CreateItem) -> None:
        item = checked_item(cmd.item, "item")
        kind = item["type"]
        item_id = item.get("id") or self._new_id("item")
        if not isinstance(item_id, str):
            raise InvalidRequest(f"Invalid type for 'item.id': expected a string, not "
                                 f"{type(item_id).__name__}", code="invalid_type",
                                 param="item.id")
        limits.bounded(item_id, limits.ITEM_ID, "item.id")
        if item_id in self.items:  # OpenAI's code: clients treat it as "already there"
            raise InvalidRequest(f"Error adding item: the item with id '{item_id}' already "
                                 "exists.", code="item_create_duplicate_item_id",
                                 param="item.id")
        previous = cmd.previous_item_id
        if previous is not None and previous != ROOT and previous not in self.items:
            raise InvalidRequest(f"Error adding item: the previous item with id '{previous}' "
                                 "does not exist.", code="item_create_invalid_previous_item_id",
                                 param="previous_item_id")
        item.update(id=item_id, object="realtime.item", type=kind, status="completed")
        self._check_room(item)
        self._insert(item_id, item, previous)
        self.budget.set(item_id, item)
        self._effect(fx.SaveItem(item_id, item, previous))
        if kind != "message" or ev.item_text(item):  # the model hears it before the next reply
            self._effect(fx.ContextChanged(items=(item,)))
        after = previous if previous not in (None, ROOT) else self._before(item_id)
        self._emit(E.ITEM_ADDED, previous_item_id=after, item=item)
        self._emit(E.ITEM_DONE, previous_item_id=after, item=item)

    def _check_room(self, item: ev.Event) -> None:
        budget, bounds = self.budget, self.budget.limits
        refusal = budget.refusal(item)
        if refusal == "conversation_full":
            raise InvalidRequest(
                f"the conversation is full ({len(self.items)} items, {budget.total} "
                f"bytes; at most {bounds.max_items} items and {bounds.max_bytes} bytes): "
                "delete items first", code="conversation_full", param="item")
        if refusal is not None:
            raise InvalidRequest(
                f"the session's store is full: its conversation ({budget.total} bytes) and "
                f"config ({budget.config_bytes} bytes) may hold {bounds.session_bytes} bytes "
                "together: delete items first", code=refusal, param="item")

    def input_items(self, given: tuple[Mapping[str, Any], ...]) -> tuple[ev.Event, ...]:
        """``response.input``: inline items checked, ``item_reference``s looked up
        (copies: the reply's context, not the conversation's)."""
        out: list[ev.Event] = []
        for i, raw in enumerate(given):
            where = f"response.input[{i}]"
            if raw.get("type") != "item_reference":
                out.append(checked_item(raw, where))
                continue
            ref = raw.get("id")
            if not isinstance(ref, str) or ref not in self.items:
                raise InvalidRequest(f"Error in item reference: the item with id {ref!r} does "
                                     "not exist.", code="invalid_value", param=f"{where}.id")
            out.append(dict(self.items[ref]))
        return tuple(out)

    def _insert(self, item_id: str, item: ev.Event, previous: str | None) -> None:
        if previous is None:
            self.items[item_id] = item
            return
        rebuilt: OrderedDict[str, ev.Event] = OrderedDict()
        if previous == ROOT:
            rebuilt[item_id] = item
        for key, value in self.items.items():
            rebuilt[key] = value
            if key == previous:
                rebuilt[item_id] = item
        self.items.clear()
        self.items.update(rebuilt)

    def _before(self, item_id: str) -> str | None:
        keys = list(self.items)
        index = keys.index(item_id)
        return keys[index - 1] if index else None

    def _item(self, item_id: str, op: str) -> ev.Event:
        """The item, or OpenAI's error for ``op`` (pipecat, for one, reads
        ``item_retrieve_invalid_item_id`` as "not there" and anything else as fatal)."""
        item = self.items.get(item_id)
        if item is None:
            verb = {"retrieve": "retrieving", "delete": "deleting", "truncate": "truncating"}
            raise InvalidRequest(f"Error {verb[op]} item: the item with id '{item_id}' does "
                                 "not exist.", code=f"item_{op}_invalid_item_id",
                                 param="item_id")
        return item

    def retrieve_item(self, cmd: c.RetrieveItem) -> None:
        self._emit(E.ITEM_RETRIEVED, item=self._item(cmd.item_id, "retrieve"))

    def delete_item(self, cmd: c.DeleteItem) -> None:
        self._item(cmd.item_id, "delete")
        self._forget(cmd.item_id)

    def _forget(self, item_id: str) -> None:
        del self.items[item_id]
        self._ledgers.pop(item_id, None)
        self.budget.drop(item_id)
        self._effect(fx.ForgetItem(item_id))
        self._emit(E.ITEM_DELETED, item_id=item_id)

    def counted(self, item_id: str) -> None:
        """``item_id`` was added or changed size: the oldest items make room (I8)."""
        self.budget.set(item_id, self.items[item_id])
        for old in self.budget.evictions(list(self.items), keep=item_id):
            self._forget(old)

    def keep_ledger(self, ledger: PlaybackLedger) -> None:
        """A reply finished: its playback can still be acked (the last few)."""
        self._ledgers[ledger.item_id] = ledger
        while len(self._ledgers) > KEEP_LEDGERS:
            self._ledgers.popitem(last=False)

    def _ledger_for(self, item_id: str, response: Response | None) -> PlaybackLedger | None:
        if response is not None and response.item_id == item_id:
            return response.ledger
        return self._ledgers.get(item_id)

    def truncate_item(self, cmd: c.TruncateItem, response: Response | None) -> None:
        """Cut an assistant item to the audio the user heard (I6); ``response``: the
        one running, if any."""
        ledger = self._ledger_for(cmd.item_id, response)
        if ledger is None:
            self._item(cmd.item_id, "truncate")  # unknown ids first
            raise InvalidRequest("Only model output audio messages can be truncated",
                                 code="unsupported_content_type", param="item_id")
        if cmd.content_index != 0:
            raise InvalidRequest("content_index must be 0", code="invalid_value",
                                 param="content_index")
        ledger.truncate(cmd.audio_end_ms)
        self._apply_heard(ledger)
        self._emit(E.ITEM_TRUNCATED, item_id=cmd.item_id, content_index=0,
                   audio_end_ms=cmd.audio_end_ms)

    def _apply_heard(self, ledger: PlaybackLedger) -> None:
        item = self.items.get(ledger.item_id)
        if item is None:
            return  # still streaming: _finish stores the truncated text
        heard = ledger.text_heard()
        audio = any(p.get("type") == "output_audio" for p in item.get("content", []))
        item["content"] = ev.assistant_item(ledger.item_id, "incomplete", heard,
                                            audio=audio)["content"]
        item["status"] = "incomplete"
        self.budget.set(ledger.item_id, item)
        self._effect(fx.SaveItem(ledger.item_id, item, None))

    def playback_ack(self, cmd: c.PlaybackAck, response: Response | None) -> None:
        """What the client played of a reply (``response``: the one running, if any)."""
        item_id = cmd.item_id
        if item_id is None and cmd.response_id is not None:
            item_id = next((lg.item_id for lg in self.ledgers(response)
                            if lg.response_id == cmd.response_id), None)
        if item_id is None and response is not None:
            item_id = response.item_id
        ledger = self._ledger_for(item_id, response) if item_id else None
        if ledger is None:
            raise InvalidRequest("no assistant audio to acknowledge",
                                 code="playback_item_not_found", param="item_id")
        played = min(cmd.played_ms, ledger.generated_ms)
        if cmd.truncate:
            ledger.truncate(played)
            self._apply_heard(ledger)
        self._emit(E.PLAYBACK_ACKNOWLEDGED, item_id=ledger.item_id,
                   response_id=ledger.response_id, played_ms=played,
                   truncated=cmd.truncate, generated_ms=ledger.generated_ms)

    def ledgers(self, response: Response | None) -> Sequence[PlaybackLedger]:
        """The replies whose playback can be acked: ``response`` (running), then the
        last few finished."""
        current = [response.ledger] if response else []
        return [*current, *self._ledgers.values()]
