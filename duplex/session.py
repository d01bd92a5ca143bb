"""The session core: one conversation's protocol logic, sans I/O.

Theory of operation. The runner feeds the core *inputs* one at a time — client
commands, VAD events, projected stage outputs — and after each one pulls the
*effects* (``duplex.effects``) and executes them in order. The core never
awaits, never reads a clock and never touches audio samples: it counts
milliseconds and builds events.

The fence ``(session, incarnation, epoch, turn_id)``: ``epoch`` grows once per
accepted cancel or barge-in (I2); ``turn_id`` counts model turns, one per
response. Stage output is accepted only for the live epoch *and* the active
response's turn (I1); everything else is dropped silently.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from duplex import commands as c
from duplex import effects as fx
from duplex import events as ev
from duplex.abilities import ModelAbilities
from duplex.config import SessionConfig, apply_update, stored_size
from duplex.conversation import ItemBudget
from duplex.errors import InvalidRequest, SessionStateError
from duplex.events import ServerEvent as E
from duplex.fence import Fence, apply_cancel, is_current_epoch
from duplex.idle import IdleWatch
from duplex.items import ConversationItems
from duplex.ledger import PlaybackLedger
from duplex.output import ResponseOutput
from duplex.response import Response
from duplex.tools import ToolSet, response_toolset
from duplex.turns import (
    ResponseEvent,
    ResponseStatus,
    TurnEvent,
    TurnState,
    next_response_status,
    next_turn_state,
)

MIN_COMMIT_MS = 100.0  # OpenAI refuses commits of less than 100 ms of audio


@dataclass(slots=True)
class InputBuffer:
    ms: float = 0.0  # audio appended since the last commit/clear
    item_id: str | None = None  # id the next committed user item will get
    speech_start_ms: int | None = None


class NewIds:
    """The ids a session gives its items, responses and calls: unique across
    sessions too (a client may hold several at once). An object of its own, not a
    method of the core: the conversation and the output hold it, and a bound
    method of the core there would make the core's state a reference cycle, which
    only a full collection frees (an ended session's conversation would wait for
    one: gateway/heap.py)."""

    __slots__ = ("_stem", "count")

    def __init__(self, fence: Fence) -> None:
        self._stem = f"{fence.session_id[-12:]}_{fence.incarnation}x"
        self.count = 0

    def __call__(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self._stem}{self.count}"


@dataclass(slots=True)
class SessionCore:
    fence: Fence
    config: SessionConfig = field(default_factory=SessionConfig)
    beta: bool = False  # the client speaks the beta dialect (session object shape)
    turn_state: TurnState = TurnState.IDLE
    items: OrderedDict[str, ev.Event] = field(default_factory=OrderedDict)
    response: Response | None = None
    input: InputBuffer = field(default_factory=InputBuffer)
    deferred_response: bool = False
    budget: ItemBudget = field(default_factory=ItemBudget)  # I8: items and bytes
    abilities: ModelAbilities = field(default_factory=ModelAbilities)  # what the plugin can do
    idle: IdleWatch = field(default_factory=IdleWatch)  # idle_timeout_ms (duplex.idle)
    heard_ms: float = 0.0  # user audio appended in all (the input's timeline)
    # its items (the same ``items``), their bounds and the finished replies' ledgers
    conversation: ConversationItems = field(init=False)
    output: ResponseOutput = field(init=False)  # the active response's events (duplex.output)
    _input_ms: dict[str, float] = field(default_factory=dict)  # committed audio per item
    _effects: list[fx.Effect] = field(default_factory=list)
    _new_id: NewIds = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._new_id = NewIds(self.fence)  # the fence's session and incarnation never change
        self.budget.config_bytes = stored_size(self.config, self.fence.session_id)
        self.conversation = ConversationItems(self.items, self.budget,
                                              effect=self._effects.append, new_id=self._new_id)
        self.output = ResponseOutput(self.conversation, effect=self._effects.append,
                                     new_id=self._new_id)

    # -- plumbing ---------------------------------------------------------------

    def effects(self) -> list[fx.Effect]:
        """Pull the effects of the inputs handled so far (call after every input)."""
        out = self._effects.copy()
        self._effects.clear()  # the same list: the conversation appends to it
        return out

    def _emit(self, kind: E, **fields: Any) -> None:
        self._effects.append(fx.Emit(ev.event(kind, **fields)))

    def _turn(self, event: TurnEvent) -> None:
        self.turn_state = next_turn_state(self.turn_state, event)

    @property
    def closed(self) -> bool:
        return self.turn_state is TurnState.CLOSED

    def _require_open(self) -> None:
        if self.closed:
            raise SessionStateError("the session is closed", code="session_closed")

    # -- session ----------------------------------------------------------------

    def created_event(self, resume_token: str | None) -> ev.Event:
        return ev.event(E.SESSION_CREATED, session=self.session_object(),
                        resume_token=resume_token)

    def session_object(self) -> ev.Event:
        return self.config.wire(self.fence.session_id, beta=self.beta)

    def update_session(self, cmd: c.UpdateSession) -> None:
        self._require_open()
        before = self.config
        config = apply_update(self.config, cmd.session)
        self.abilities.check_tools(config.tools.tools, "session.tools")
        self.abilities.check_modes(config.output_modalities, "session.output_modalities")
        self.budget.set_config(stored_size(config, self.fence.session_id))  # or refused
        self.config = config
        self._effects.append(fx.SaveConfig())
        instructions = config.instructions if config.instructions != before.instructions else None
        tools = config.tools if config.tools != before.tools else None
        if instructions is not None or tools is not None:  # they apply from the next reply
            self._effects.append(fx.ContextChanged(instructions=instructions, tools=tools))
        beta_transcription = self.beta and config.transcribing_only
        self._emit(E.TRANSCRIPTION_SESSION_UPDATED if beta_transcription else E.SESSION_UPDATED,
                   session=self.session_object())

    def dtmf_received(self, cmd: c.DtmfReceived) -> None:
        """A keypad digit: journaled and surfaced as an event, nothing else."""
        self._require_open()
        self._emit(E.DTMF_RECEIVED, event=cmd.digit, received_at=cmd.received_at)

    def heartbeat(self) -> None:
        self._require_open()
        self._emit(E.HEARTBEAT_ACK)

    def close(self, reason: str) -> None:
        """Stop accepting input; cancels a running response without events.

        The terminal ``session.closed``/``session.expired`` is the runner's to
        emit, after stage cleanup (I5).
        """
        if self.closed:
            return
        if self.response is not None:
            old = self.fence
            self.fence = apply_cancel(self.fence, self.fence.epoch).fence
            self.response = None
            self._effects.append(fx.AbortEpoch(old, self.fence))
        self._turn(TurnEvent.CLOSE)

    # -- user audio -------------------------------------------------------------

    def audio_appended(self, duration_ms: float) -> None:
        self._require_open()
        self.input.ms += duration_ms
        self.heard_ms += duration_ms

    def _input_item_id(self) -> str:
        if self.input.item_id is None:
            self.input.item_id = self._new_id("item")
        return self.input.item_id

    def speech_started(self, audio_ms: int) -> None:
        """Server VAD heard speech start; may barge in on the active response."""
        if self.closed:
            return
        self.input.speech_start_ms = audio_ms
        self.idle.disarm()
        self._emit(E.SPEECH_STARTED, audio_start_ms=audio_ms, item_id=self._input_item_id())
        td = self.config.turn_detection
        if self.response is not None and td is not None and td.interrupt_response:
            self._cancel(reason="turn_detected")
        self._turn(TurnEvent.SPEECH_STARTED)

    def speech_stopped(self, audio_ms: int) -> None:
        if self.closed:
            return
        self._emit(E.SPEECH_STOPPED, audio_end_ms=audio_ms, item_id=self._input_item_id())
        self._turn(TurnEvent.SPEECH_STOPPED)
        td = self.config.turn_detection
        self._commit(respond=td is not None and td.create_response
                     and not self.config.transcribing_only, by_vad=True)

    def commit(self, cmd: c.CommitInput) -> None:
        """A client commit never starts a response, in server_vad mode too (as
        OpenAI does): ``create_response`` governs VAD commits only."""
        self._require_open()
        if self.input.ms < MIN_COMMIT_MS:
            raise InvalidRequest(
                "Error committing input audio buffer: buffer too small. Expected at least "
                f"{MIN_COMMIT_MS:.0f}ms of audio, but buffer only has {self.input.ms:.2f}ms of "
                "audio.", code="input_audio_buffer_commit_empty")
        self._commit(respond=False, by_vad=False)

    def _commit(self, *, respond: bool, by_vad: bool) -> None:
        item_id = self._input_item_id()
        previous = next(reversed(self.items), None)
        item = ev.user_audio_item(item_id, None)
        self.items[item_id] = item
        self._input_ms[item_id] = self.input.ms
        self.input = InputBuffer()
        self._emit(E.INPUT_COMMITTED, previous_item_id=previous, item_id=item_id)
        self._emit(E.ITEM_ADDED, previous_item_id=previous, item=item)
        self._emit(E.ITEM_DONE, previous_item_id=previous, item=item)
        self._effects.append(fx.SaveItem(item_id, item, previous))
        self.conversation.counted(item_id)
        self._turn(TurnEvent.INPUT_COMMITTED)
        if respond and self.response is not None:
            self.deferred_response = True  # answer once the active response ends
            respond = False
        if respond:
            response = self._open_response(None)
            self._effects.append(fx.CommitAudio(response.fence, item_id, respond=True))
        else:
            self._effects.append(fx.CommitAudio(self.fence, item_id, respond=False))

    def clear_input(self) -> None:
        self._require_open()
        self.input = InputBuffer()
        self._effects.append(fx.DiscardAudio(self.fence))
        self._emit(E.INPUT_CLEARED)
        self._turn(TurnEvent.INPUT_CLEARED)

    def transcript(self, item_id: str, text: str) -> None:
        """The listener's words for a committed user item."""
        item = self.items.get(item_id)
        if item is None or self.closed:
            return
        item["content"] = [{"type": "input_audio", "transcript": text}]
        self._effects.append(fx.SaveItem(item_id, item, None))
        self.conversation.counted(item_id)
        if self.config.transcription is not None:
            seconds = round(self._input_ms.pop(item_id, 0.0) / 1000.0, 3)
            # OpenAI's whisper-1 sends its transcript as one delta, then completed;
            # clients that show words as they come (pipecat, LiveKit) read the delta
            if text:
                self._emit(E.TRANSCRIPTION_DELTA, item_id=item_id, content_index=0,
                           delta=text)
            self._emit(E.TRANSCRIPTION_COMPLETED, item_id=item_id, content_index=0,
                       transcript=text, usage={"type": "duration", "seconds": seconds})

    # -- responses --------------------------------------------------------------

    def create_response(self, cmd: c.CreateResponse) -> None:
        self._require_open()
        if self.config.transcribing_only:
            raise InvalidRequest("A transcription session makes no responses: "
                                 "'response.create' is not supported.", code="invalid_value",
                                 param="type")
        if self.response is not None:
            raise SessionStateError(
                f"Conversation already has an active response in progress: {self.response.id}."
                " Wait until the response is finished before creating a new one.",
                code="conversation_already_has_active_response")
        self.abilities.check_tools(cmd.tools or (), "response.tools")
        self.abilities.check_modes(cmd.output_modalities or (), "response.output_modalities")
        self.abilities.check_input(cmd.input)
        tools = response_toolset(self.config.tools, cmd.tools, cmd.tool_choice,
                                 cmd.parallel_tool_calls)
        given = None if cmd.input is None else self.conversation.input_items(cmd.input)
        response = self._open_response(cmd, tools)
        asked = (cmd.tools, cmd.tool_choice, cmd.parallel_tool_calls)
        own = None if asked == (None, None, None) else tools
        self._effects.append(fx.StartResponse(response.fence, response.id, cmd.instructions,
                                              own, given))

    def _open_response(self, cmd: c.CreateResponse | None,
                       tools: ToolSet | None = None) -> Response:
        self.fence = self.fence.with_turn(self.fence.turn_id + 1)
        rid = self._new_id("resp")
        item_id = self._new_id("item")
        modalities = (cmd.output_modalities if cmd and cmd.output_modalities
                      else self.config.output_modalities)
        response = Response(rid, item_id, self.fence, modalities,
                            cmd.metadata if cmd else None, bool(cmd and cmd.out_of_band),
                            PlaybackLedger(rid, item_id),
                            self.config.tools if tools is None else tools)
        self.response = response
        self.idle.disarm()
        self._turn(TurnEvent.RESPONSE_STARTED)
        self._emit(E.RESPONSE_CREATED, response=self._response_object(response))
        if not response.tools.callable:  # a reply that cannot call is one message
            self.output.open_message(response)
        return response

    def _response_object(self, r: Response, reason: str | None = None) -> ev.Event:
        output = [] if r.status is ResponseStatus.IN_PROGRESS else list(r.output)
        return ev.response_object(r.id, r.status.value, modalities=r.modalities,
                                  output=output, reason=reason, metadata=r.metadata,
                                  conversation_id=None if r.out_of_band else "conv_"
                                  + self.fence.session_id)

    def _accepts(self, fence: Fence) -> Response | None:
        r = self.response
        if r is None or not is_current_epoch(self.fence, fence) or fence.turn_id != r.fence.turn_id:
            return None
        return r

    def assistant_audio(self, fence: Fence, audio_b64: str, duration_ms: float,
                        text: str) -> bool:
        """A chunk of reply audio and its words; False when dropped as stale."""
        r = self._accepts(fence)
        if r is None or self.closed or r.message_closed:
            return False
        self.output.audio(r, audio_b64, duration_ms, text)
        return True

    def function_call(self, fence: Fence, name: str, arguments: str) -> bool:
        """A call the model made, whole; False when dropped as stale, or as a
        second call where ``parallel_tool_calls`` is false. The message before
        it is closed (a reply's words come before its calls)."""
        r = self._accepts(fence)
        if r is None or self.closed:
            return False
        return self.output.function_call(r, name, arguments)

    def response_end(self, fence: Fence) -> None:
        r = self._accepts(fence)
        if r is not None and not self.closed:
            self._finish(r, ResponseEvent.FINISH, None)

    def stage_failed(self, fence: Fence, message: str) -> None:
        r = self._accepts(fence)
        if r is None or self.closed:
            return
        self._emit(E.ERROR, error={"type": "server_error", "code": "runtime_stage_failed",
                                   "message": message, "param": None, "event_id": None})
        self._finish(r, ResponseEvent.FAIL, "stage_failed")

    def _finish(self, r: Response, event: ResponseEvent, reason: str | None) -> None:
        """Emit the closing sequence of ``r`` (research/peers.md §3.1 order)."""
        r.status = next_response_status(r.status, event)
        if r.message_open:
            self.output.close_message(r, "completed" if r.status is ResponseStatus.COMPLETED
                                      else "incomplete")
        self._emit(E.RESPONSE_DONE, response=self._response_object(r, reason))
        self._emit(E.RATE_LIMITS_UPDATED, rate_limits=[])
        self.conversation.keep_ledger(r.ledger)
        self.response = None
        self._turn(TurnEvent.RESPONSE_ENDED)
        if self.deferred_response and event is not ResponseEvent.CANCEL:
            self.deferred_response = False
            nxt = self._open_response(None)
            self._effects.append(fx.StartResponse(nxt.fence, nxt.id, None))
        elif (timer := self.idle.arm(self.config.turn_detection,
                                     r.ledger.generated_ms if r.audio else 0.0)):
            self._effects.append(timer)

    def idle_elapsed(self, token: int) -> None:
        """The idle timer ``token`` ran out: unless speech or a reply came since,
        commit what the user (did not) say and answer it (OpenAI's idle timeout)."""
        if self.closed or self.response is not None or not self.idle.fired(token):
            return
        td = self.config.turn_detection
        assert td is not None and td.idle_timeout_ms is not None  # it armed the timer
        end = int(self.heard_ms)
        self._emit(E.INPUT_TIMEOUT, audio_start_ms=max(0, end - td.idle_timeout_ms),
                   audio_end_ms=end, item_id=self._input_item_id())
        self._commit(respond=not self.config.transcribing_only, by_vad=True)

    def cancel_response(self, cmd: c.CancelResponse) -> None:
        self._require_open()
        r = self.response
        # One code for both, OpenAI's: clients (pipecat, LiveKit) take it, and the
        # message's "Cancellation failed" prefix, as a harmless race, any other as fatal.
        if r is None:
            raise SessionStateError("Cancellation failed: no active response found",
                                    code="response_cancel_not_active")
        if cmd.response_id is not None and cmd.response_id != r.id:
            raise SessionStateError(f"Cancellation failed: response '{cmd.response_id}' is not "
                                    "active", code="response_cancel_not_active",
                                    param="response_id")
        self._cancel(reason="client_cancelled")

    def clear_output_audio(self) -> None:
        """``output_audio_buffer.clear``: stop the audio; cancels a running response."""
        self._require_open()
        response_id = self.response.id if self.response else None
        if self.response is not None:
            self._cancel(reason="client_cancelled")
        self._emit(E.OUTPUT_AUDIO_CLEARED, response_id=response_id)

    def _cancel(self, *, reason: str) -> None:
        """Bump the epoch once (I2), abort the old epoch's work, then emit the terminals."""
        r = self.response
        assert r is not None
        old = self.fence
        self.fence = apply_cancel(self.fence, r.fence.epoch).fence
        self.deferred_response = False
        self._effects.append(fx.AbortEpoch(old, self.fence))
        # History keeps what was sent at most; a truncate/ack lowers it further (I6).
        if r.ledger.heard_ms is None:
            r.ledger.heard_ms = r.ledger.sent_ms
        self._finish(r, ResponseEvent.CANCEL, reason)

    # -- conversation items (``duplex.items``) ------------------------------------------

    def create_item(self, cmd: c.CreateItem) -> None:
        self._require_open()
        self.conversation.create_item(cmd)

    def retrieve_item(self, cmd: c.RetrieveItem) -> None:
        self._require_open()
        self.conversation.retrieve_item(cmd)

    def delete_item(self, cmd: c.DeleteItem) -> None:
        self._require_open()
        self.conversation.delete_item(cmd)

    def truncate_item(self, cmd: c.TruncateItem) -> None:
        self._require_open()
        self.conversation.truncate_item(cmd, self.response)

    def playback_ack(self, cmd: c.PlaybackAck) -> None:
        self._require_open()
        self.conversation.playback_ack(cmd, self.response)

    def history(self) -> list[ev.Event]:
        """The honest history's items (I6), oldest first, for model context."""
        return list(self.items.values())
