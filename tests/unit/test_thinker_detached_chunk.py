"""The cascade thinker's out-of-band replies (``response.create`` with
``input``), without a model: a detached chunk built from the given items alone,
which leaves the conversation as planned untouched."""

from __future__ import annotations

from duplex import effects as fx
from duplex.fence import Fence
from duplex.tools import Tool, ToolSet
from engines.stages import PromptChunk
from plugins.base import Context, HistoryItem
from plugins.cascade.payloads import Clause, UserTurn
from plugins.cascade.thinker import ThinkerAdapter, ThinkerState

FENCE = Fence("s", 0, 0, 0)
CLOCK = Tool("get_time", "The time in a time zone.", {
    "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]})
BANANA = {"type": "message", "role": "user",
          "content": [{"type": "input_text", "text": "Say the word banana."}]}


def plan(a: ThinkerAdapter, s: ThinkerState, payload: object) -> PromptChunk:
    chunk = a.plan(s, payload)
    assert chunk is not None
    return chunk


def talking() -> tuple[ThinkerAdapter, ThinkerState]:
    """A conversation with one answered turn (its assistant turn still open)."""
    a = ThinkerAdapter()
    s = a.open(FENCE)
    plan(a, s, Context("Be brief.", (HistoryItem("user", "My name is Ada."),)))
    reply = plan(a, s, UserTurn(1, "", "What is my name?", True))
    a.on_text(s, reply, "Your name is Ada.", True)
    return a, s


def out_of_band(*, instructions: str | None = None, tools: ToolSet | None = None,
                given: tuple[dict[str, object], ...] = (BANANA,)) -> fx.StartResponse:
    return fx.StartResponse(FENCE.with_turn(2), "resp_1", instructions, tools, given)


def said(a: ThinkerAdapter, s: ThinkerState, chunk: PromptChunk, text: str) -> str:
    return "".join(r.payload.text for r in a.on_text(s, chunk, text, True)
                   if isinstance(r.payload, Clause))


def test_an_out_of_band_reply_is_a_detached_chunk_of_its_own_items() -> None:
    a, s = talking()
    chunk = plan(a, s, out_of_band())
    assert chunk.detached and chunk.generate
    assert chunk.text.startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
    assert "Say the word banana." in chunk.text
    assert "Ada" not in chunk.text  # the conversation is not its context
    assert chunk.text.endswith("<|im_start|>assistant\n")
    assert said(a, s, chunk, "Banana.") == "Banana."


def test_the_conversation_goes_on_as_if_it_had_not_run() -> None:
    a, s = talking()
    before = (list(s.messages), s.assistant_open)
    chunk = plan(a, s, out_of_band())
    said(a, s, chunk, "Banana.")
    assert (s.messages, s.assistant_open) == before
    following = plan(a, s, UserTurn(3, "", "And again?", True))
    assert following.text.startswith("<|im_end|>\n")  # the open reply closed, in the context
    assert "banana" not in following.text.lower()
    assert not following.detached


def test_its_own_instructions_and_tools_replace_the_sessions() -> None:
    a, s = talking()
    chunk = plan(a, s, out_of_band(instructions="Answer in French.", tools=ToolSet((CLOCK,))))
    assert "Answer in French." in chunk.text and "Be brief." not in chunk.text
    assert '"get_time"' in chunk.text
    assert chunk.sampling  # it may call the tool: the call's grammar goes with it


def test_references_and_tool_outputs_render_as_history() -> None:
    a, s = talking()
    given = ({"type": "function_call", "call_id": "c1", "name": "get_time",
              "arguments": '{"zone": "UTC"}'},
             {"type": "function_call_output", "call_id": "c1", "output": "12:00"})
    chunk = plan(a, s, out_of_band(given=given))
    assert "<tool_response>" in chunk.text and "12:00" in chunk.text
