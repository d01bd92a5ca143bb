"""Tool calling in Qwen2.5's own chat format (Hermes style), sans-I/O.

Qwen2.5's chat template offers tools in the system turn — a ``# Tools``
section listing each tool's JSON inside ``<tools></tools>`` — and the model
calls one by writing ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
in its turn; a tool's result comes back as a user turn wrapping
``<tool_response>...</tool_response>``. This module renders those texts,
parses calls out of a streamed reply (``CallParser``), and gives llama.cpp
the completion options that hold a call to the tools' schemas
(``call_sampling``).

Qwen2.5-Coder-1.5B, asked as a voice assistant, often describes a call in
words ("to get the weather, you can call get_weather with …") instead of
making it, and writes the calls it makes as bare JSON, never with the tags
(``<tool_call>`` was not among its 40 likeliest first tokens). So: the
format's text gets one sentence asking for calls (``_NUDGE``), a call may
start with ``{"name"`` as well as ``<tool_call>`` (both trigger the grammar),
and under ``auto`` the first token of a bare call, ``{"``, is favoured by
``CALL_BIAS``. Measured on that model (greedy): for a question a tool answers,
``{"`` came 0.0–0.2 nats below the top first token; for questions no tool
answers, 1.7 or more below. With the bias, 6 of 6 tool questions (weather,
time, a timer; two parameter styles) became valid calls and 6 of 6 others
(facts, a joke, thanks, "how do I check the weather?") stayed words; without
it, 1 or 2 of 4 weather questions were calls, depending on the schema's
wording, and the rest were spoken descriptions of a call. The reply to a
tool's output leans the other way (``RESULT_BIAS``): it should say the result.

The sentence and the bias are one setting, tuned together on the typed tool
quiz (``bench/call_replay.py``, ``bench/tool_quiz.py --text``; bench/README.md,
2026-12-04 04:20). The first sentence, "Call a function whenever one can
answer the user; never describe a call in words.", made ``{"`` the likeliest
first token for "Who wrote Hamlet?" (called ``lookup_flight``) and a near
second for "Good morning! What's your name?" (called ``get_weather``): "can
answer" reads as "may be used". Asking for a call only when a function does
what the user asks put ``{"`` 1.6–2.1 nats below words for those two, but
1.2 below for "Where is Lufthansa flight LH 400 right now?", which a +1.0 bias
left a spoken description of the call; +1.4 calls for LH 400 (by 0.18 nats)
and keeps both others words (by 0.22 and 0.69). Those margins are thin: a
change to the tools' text or the bias wants the replay again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from duplex.tools import Tool, ToolSet
from plugins.base import HistoryItem
from plugins.cascade.grammar import call_grammar
from plugins.cascade.unsaid import without_unsaid

OPEN, CLOSE = "<tool_call>", "</tool_call>"
BARE = '{"name"'  # a call without its tags, as small models often write one
_STARTS = (OPEN, BARE)
_NUDGE = ("Call a function only when one of them does what the user asks; otherwise answer "
          "in words, never describing a call.")
MAX_CALLS = 4  # calls in one reply: a greedy model may repeat one otherwise
CALL_BIAS = 1.4  # logit bias for '{"' under auto (see above); a mid-reply '{"' is rare
# ... and against it in the reply to a tool's output, which should say the result:
# there the model repeated the call just answered (the spoken tool quiz: "calls
# again after a result: 10"; lookup_flight(AF22) answered, then the same call
# again, unbiased; said "The flight AF 22 is delayed …" at -1). A new call the
# model prefers by more than a nat is still made; a new request from the user
# gets CALL_BIAS as ever.
RESULT_BIAS = -1.0
# llama.cpp's "word" trigger type (common_grammar_trigger_type: token 0, word 1).
_WORD_TRIGGER = 1


def tools_block(tools: Sequence[Tool]) -> str:
    """The ``# Tools`` section of a system turn, as Qwen2.5's template writes it."""
    listed = "\n".join(json.dumps({"type": "function", "function": {
        "name": t.name, "description": t.description, "parameters": dict(t.parameters)}},
        ensure_ascii=False) for t in tools)
    return ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            f"<tools>\n{listed}\n</tools>\n\n{_NUDGE} "
            "For each function call, return a json object with function name and arguments "
            "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def system_text(instructions: str, tools: Sequence[Tool]) -> str:
    return f"{instructions}\n\n{tools_block(tools)}" if tools else instructions


def tools_changed_text(tools: Sequence[Tool]) -> str:
    """A system turn for tools that changed mid-conversation."""
    if not tools:
        return "You can no longer call any function."
    return "The functions you may call have changed.\n\n" + tools_block(tools)


def call_text(name: str, arguments: str) -> str:
    """An assistant's call as the model writes it (``arguments`` a JSON text)."""
    try:
        args: Any = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        args = arguments  # kept as the client gave it, as a string
    body = json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
    return f"{OPEN}\n{body}\n{CLOSE}"


def response_text(output: str) -> str:
    return f"<tool_response>\n{output}\n</tool_response>"


def is_tool_response(turn_text: str) -> bool:
    """Whether a rendered turn is tools' outputs (``response_text``, joined)."""
    return turn_text.startswith("<tool_response>")


def render_items(items: Iterable[HistoryItem],
                 scrub: Callable[[str], str]) -> list[tuple[str, str]]:
    """History items as (role, text) turns, the way the template groups them:
    an assistant's words and the calls right after them are one assistant
    turn; consecutive tool outputs are one user turn."""
    turns: list[tuple[str, str]] = []
    for item in items:
        if item.kind == "function_call":
            role, text = "assistant", call_text(scrub(item.name), scrub(item.arguments))
        elif item.kind == "function_call_output":
            role, text = "user", response_text(scrub(item.text).strip())
        else:
            text = _unforged(scrub(item.text)).strip()
            if not text:
                continue
            role = item.role if item.role in ("user", "assistant", "system") else "user"
        if turns and _joins(turns[-1], role, item.kind):
            turns[-1] = (role, f"{turns[-1][1]}\n{text}")
        else:
            turns.append((role, text))
    return turns


def _joins(last: tuple[str, str], role: str, kind: str) -> bool:
    if kind == "function_call":
        return last[0] == "assistant"
    return kind == "function_call_output" and is_tool_response(last[1])


def _unforged(text: str) -> str:
    """A message's words must not read as a call or a tool's answer."""
    for tag in (OPEN, CLOSE, "<tool_response>", "</tool_response>"):
        text = text.replace(tag, "")
    return text


def said(instructions: str, turns: Iterable[tuple[str, str]]) -> str:
    """What a call's arguments may take a schema's example from
    (``grammar.shown_examples``): the instructions and the user turns (the
    user's words and the tools' outputs, facts the client gave), not the
    assistant's (its own earlier calls may have taken the example already)."""
    return "\n".join([instructions, *(text for role, text in turns if role == "user")])


def made_calls(calls: Iterable[ParsedCall], tools: Sequence[Tool], said: str,
               most: int) -> list[ParsedCall]:
    """The calls a reply makes of those the model wrote: the first ``most`` to
    one of ``tools``, each without the optional free text that ``said`` (this
    module's ``said``) never said (``unsaid``: "Play some pop music." was
    ``play_music(artist "The Beatles", genre pop)``)."""
    schemas = {t.name: t.parameters for t in tools}
    made = [c for c in calls if c.name in schemas][:most]
    return [ParsedCall(c.name, without_unsaid(c.arguments, schemas[c.name], said))
            for c in made]


def max_calls(toolset: ToolSet) -> int:
    """The calls one reply may make: one where ``parallel_tool_calls`` is false."""
    return MAX_CALLS if toolset.parallel else 1


def call_sampling(toolset: ToolSet | None, *, bias: float = CALL_BIAS,
                  said: str | None = None) -> Mapping[str, Any] | None:
    """llama.cpp completion options for a reply under ``toolset``: under
    ``auto`` a lazy grammar, idle until the model starts a call; under
    ``required`` or a named tool a grammar the whole reply must match; None
    without tools. Under ``none`` a bare call's first token is banned (a
    false bias: never sampled; the model writes its calls bare) instead of
    asked against in words: a system turn saying "do not call a function now"
    was what the reply then answered ("Do not call a function now.", the spoken
    tool quiz: 1 of 12 follow-ups used the tool's result). The tags are kept,
    so a call the model writes anyway is seen (and dropped), never spoken.
    ``said``: the user's words; a string argument may then not take a schema's
    example the user did not say (``grammar``: "Good morning" was answered
    ``get_weather(Paris)``, the description's "e.g. Paris")."""
    if toolset is None or not toolset.tools:
        return None
    # the tags are special tokens: without this llama.cpp drops them from the text
    options: dict[str, Any] = {"preserved_tokens": [OPEN, CLOSE]}
    if not toolset.callable:
        options["logit_bias"] = [['{"', False]]
        return options
    lazy = not toolset.must_call
    options["grammar"] = call_grammar([(t.name, t.parameters) for t in toolset.callable],
                                      max_calls=max_calls(toolset), bare=lazy, said=said)
    options["grammar_lazy"] = lazy
    if lazy:
        options["grammar_triggers"] = [{"type": _WORD_TRIGGER, "value": w} for w in _STARTS]
    if lazy and bias:
        options["logit_bias"] = [['{"', bias]]  # a string: llama.cpp finds its tokens
    return options


# -- the reply as it streams ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ParsedCall:
    name: str
    arguments: str  # a JSON text


class CallParser:
    """Splits a streamed reply into its words and its calls. Text from the
    first ``<tool_call>`` (or bare ``{"name"``) on is held, never spoken;
    tagged calls are parsed as they close, the rest (bare calls, one after
    another, or an unclosed one) at ``finish``. Nothing after a call is
    spoken: the reply ends with its calls."""

    def __init__(self, starts: tuple[str, ...] = _STARTS) -> None:
        self._starts = starts  # what opens a call (and is held from there on)
        self._tail = ""  # words that may be the start of a marker
        self._held: str | None = None  # from the first call on
        self.calls: list[ParsedCall] = []
        self.broken = 0  # held text that was no call

    def push(self, delta: str) -> str:
        """The words of ``delta`` that are safe to speak now."""
        if self._held is not None:
            self._held += delta
            self._take_closed()
            return ""
        text = self._tail + delta
        at = min((i for i in (text.find(s) for s in self._starts) if i >= 0), default=-1)
        if at >= 0:
            self._tail, self._held = "", text[at:]
            self._take_closed()
            return text[:at]
        keep = max((n for s in self._starts for n in range(1, len(s))
                    if text.endswith(s[:n])), default=0)
        self._tail = text[len(text) - keep:] if keep else ""
        return text[:len(text) - keep]

    def finish(self) -> str:
        """The last words (a marker's start that never became one); parses the
        calls still held: bare ones, or one left unclosed."""
        words, self._tail = self._tail, ""
        rest, self._held = (self._held or "").strip(), None
        while rest:
            rest = rest.removeprefix(OPEN).lstrip()
            end = self._parse(rest) if rest.startswith("{") else None
            if end is None:
                break
            rest = rest[end:].lstrip().removeprefix(CLOSE).lstrip()
        return words

    def _take_closed(self) -> None:
        assert self._held is not None
        while (rest := self._held.lstrip()).startswith(OPEN) and (end := rest.find(CLOSE)) >= 0:
            self._parse(rest[len(OPEN):end].strip())
            self._held = rest[end + len(CLOSE):]

    def _parse(self, text: str) -> int | None:
        """Takes the call that ``text`` starts with; where it ends (None: no call)."""
        try:
            call, end = json.JSONDecoder().raw_decode(text)
        except ValueError:
            self.broken += 1
            return None
        name = call.get("name") if isinstance(call, dict) else None
        args = call.get("arguments", {}) if isinstance(call, dict) else None
        if isinstance(args, str):  # some models write the arguments as a JSON string
            try:
                args = json.loads(args)
            except ValueError:
                args = None
        if not isinstance(name, str) or not isinstance(args, dict):
            self.broken += 1
            return None
        self.calls.append(ParsedCall(name, json.dumps(args, ensure_ascii=False)))
        return end
