"""Replays chosen typed conversations of the tool quiz (``bench/tool_requests.py``)
through the real thinker, once per candidate call sentence and call bias: a
fast way to try a wording before the full quiz (``bench/tool_quiz.py --text``).

Usage: .venv/bin/python bench/call_replay.py [--only 23,28,12] [--candidates shipped,before]
       [--threads N] [--as-written] [--xfail]

No gateway, no session: ``ThinkerAdapter`` plans each payload the way the
typed quiz makes the session send it (the first request with the tools, as a
``Context``; each later item as a ``Context`` of its own; a ``StartResponse``
for each ``response.create``) and llama.cpp (``xllamacpp``, in process, one
slot, the default model, greedy) completes each reply with the thinker's own
options (the grammar, the bias). A call is answered with the request's made-up
result (a wrong tool: "nothing found"), as the quiz does, up to three rounds.
Scored by ``bench/tool_score.py``, as the quiz is.

Each reply also gets a probe: the same prompt, one token, no grammar and no
bias, the 40 likeliest first tokens; printed is the log-probability of a bare
call's first token ``{"`` and of the likeliest other token (words), so a
candidate's margin shows, not only its outcome. ``{"`` below the 40th is
printed as ``<`` the 40th's.

A candidate is a name in ``CANDIDATES``: the sentence that replaces
``tool_calls._NUDGE`` in the tools' prompt and the ``CALL_BIAS`` a request's
reply gets (the reply to a tool's output keeps ``RESULT_BIAS``).
``--as-written`` passes the calls on as the model wrote them, an optional
free-text argument nobody said included (the thinker before
``plugins.cascade.unsaid``): the same replay before and after that rule.

``--xfail`` replays, instead of the quiz, the conversation of
``tests/llamacpp/test_thinker_tools.py``'s strict xfail on that test's tools
(AF22 looked up, its result said, then "And flight UA 902?").

Each candidate ends with the quiz's rows: right tool and arguments, no call
where none fits, invented results, follow-ups using the result, requests
whose reply to a result called again.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]

import tool_score  # noqa: E402
from tool_requests import CONVERSATIONS, TOOLS, Ask, flight  # noqa: E402
from tool_score import Call, check_call, invented, used  # noqa: E402

from duplex import effects as fx  # noqa: E402
from duplex.fence import Fence  # noqa: E402
from duplex.tools import ToolChoice, parse_tools, toolset  # noqa: E402
from plugins.base import Context, HistoryItem  # noqa: E402
from plugins.cascade import tool_calls as tc  # noqa: E402
from plugins.cascade.payloads import Clause, ToolCall  # noqa: E402
from plugins.cascade.thinker import LLAMACPP_SAMPLING, ThinkerAdapter, ThinkerState  # noqa: E402

# name → (the call sentence, the call bias); tried 2026-12-04 (bench/README.md)
CANDIDATES: dict[str, tuple[str, float]] = {
    "shipped": (tc._NUDGE, tc.CALL_BIAS),
    # until 2026-12-04: Hamlet and Good morning called tools
    "before": ("Call a function whenever one can answer the user; never describe a call "
               "in words.", 1.0),
    # fixed Hamlet and Good morning, lost LH 400 to a described call; its margins: LH
    # 400's '{"' 1.22 below words, Hamlet's 2.09, Good morning's 1.62, so "shipped"
    # is this sentence with a bias between the two
    "only-when": ("Call a function only when one of them does what the user asks; "
                  "otherwise answer in words, never describing a call.", 1.0),
    # the restriction of "only-when" with the ban on describing of "before"
    "only-never": ("Call a function only when one of them does what the user asks; "
                   "never describe a call in words.", 1.0),
    # the request first: a fitting function is called, anything else is answered
    "does-what": ("When a function does what the user asks, call it; never describe a "
                  "call in words. Otherwise answer in words.", 1.0),
}
# Hamlet, Good morning, LH 400, KL 1001 then UA 902, jazz, and plain tool requests
HARD = (23, 28, 12, 30, 15, 0, 5, 10, 18)
# --xfail: tests/llamacpp/test_thinker_tools.py's strict xfail, on that test's
# tools (terse descriptions, no examples): AF22 looked up and its result said,
# then "And flight UA 902?" (answered from AF22's result, no call)
TEST_TOOLS: list[dict[str, Any]] = [
    {"type": "function", "name": "get_weather", "description": "Get the current weather in a city.",
     "parameters": {"type": "object", "properties": {
         "location": {"type": "string", "description": "The city"},
         "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
         "required": ["location", "unit"]}},
    {"type": "function", "name": "lookup_flight",
     "description": "Look up a flight's status by its number.",
     "parameters": {"type": "object", "properties": {"number": {"type": "string"}},
                    "required": ["number"]}},
    {"type": "function", "name": "set_timer", "description": "Start a countdown timer.",
     "parameters": {"type": "object", "properties": {"minutes": {"type": "integer"}},
                    "required": ["minutes"]}},
]
XFAIL = [flight("Look up flight AF 22, please.", "AF22"), flight("And flight UA 902?", "UA902")]
XFAIL = [Ask(a.say, a.tool, {"number": a.args["flight_number"]}, a.result, a.uses)
         for a in XFAIL]  # its key is "number" (compared as written: "UA 902" is a miss)
ROUNDS = 3
PROBE_TOKENS = 40
UNKNOWN = {"error": "nothing found for that request"}


@dataclass(frozen=True)
class Scored:
    """One request replayed: the quiz's verdicts on it, and its printed line."""

    ask: Ask
    right: bool  # the right call (or none) and no result stated before one came
    invented: bool
    used: bool | None  # the follow-up said the result (None: no right call)
    again: bool  # the reply to a result called again
    line: str


def tally(scored: Sequence[Scored]) -> str:
    """The quiz's rows over ``scored``."""
    n: Counter[str] = Counter()
    for s in scored:
        n[s.ask.kind] += 1
        n[f"{s.ask.kind} right"] += s.right
        n["invented"] += s.invented
        n["followed"] += s.used is not None
        n["used"] += bool(s.used)
        n["again"] += s.again
    return (f"right tool+args {n['tool right']}/{n['tool']}, no call where none fits "
            f"{n['no tool right']}/{n['no tool']}, invented results {n['invented']}, "
            f"follow-ups using the result {n['used']}/{n['followed']}, "
            f"called again after a result {n['again']}")


class Replayer:
    """One llama.cpp server; each conversation a fresh thinker state whose
    planned chunks are completed in order, the context kept as the engine
    keeps it (the prompt and the generated text)."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.adapter = ThinkerAdapter()
        self.state: ThinkerState | None = None
        self.context = ""
        self.turn = 0
        # per reply: '{"' (None: not listed), the likeliest other token, its and the
        # last listed token's log-probabilities
        self.probes: list[tuple[float | None, str, float, float]] = []

    def complete(self, prompt: str, max_tokens: int, sampling: dict[str, Any]) -> dict[str, Any]:
        out: list[Any] = []
        self.server.handle_completions({**sampling, "prompt": prompt, "max_tokens": max_tokens,
                                        "stream": False, "cache_prompt": True}, out.append)
        if not out or not isinstance(out[0], dict) or "choices" not in out[0]:
            raise RuntimeError(f"llama.cpp: {out!r:.300}")
        return out[0]

    def probe(self, prompt: str) -> tuple[float | None, str, float, float]:
        """``{"``'s log-probability (None: below the listed), the likeliest other
        first token and its log-probability, and the last listed token's, all
        without grammar or bias."""
        got = self.complete(prompt, 1, {**LLAMACPP_SAMPLING, "n_probs": PROBE_TOKENS})
        top = got["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        call = next((t["logprob"] for t in top if t["token"] == '{"'), None)
        word = next(t for t in top if t["token"] != '{"')
        self.probes.append((call, word["token"], word["logprob"], top[-1]["logprob"]))
        return self.probes[-1]

    def send(self, payload: Any) -> tuple[str, list[Call]]:
        """Plans ``payload``; a reply is completed: its spoken words and calls."""
        assert self.state is not None
        chunk = self.adapter.plan(self.state, payload)
        if chunk is None:
            return "", []
        prompt = self.context + chunk.text
        if not chunk.generate:
            self.context = prompt
            return "", []
        self.probe(prompt)
        done = self.complete(prompt, chunk.max_tokens,
                             {**LLAMACPP_SAMPLING, **(chunk.sampling or {})})
        text = done["choices"][0]["text"]
        self.context = prompt + text
        words, calls = [], []
        for result in self.adapter.on_text(self.state, chunk, text, True):
            got = result.payload
            if isinstance(got, ToolCall):
                calls.append(Call(got.name, got.arguments))
            elif isinstance(got, Clause):
                words.append(got.text)
        return "".join(words).strip(), calls

    def respond(self) -> tuple[str, list[Call]]:
        assert self.state is not None
        self.turn += 1
        fence = self.state.fence.with_turn(self.turn)
        return self.send(fx.StartResponse(fence, f"resp_{self.turn}", None))

    def conversation(self, asks: Sequence[Ask], tools: Any) -> list[Scored]:
        """Each request typed and answered, and scored."""
        self.state = self.adapter.open(Fence(f"replay-{time.monotonic_ns()}", 0, 0, 0))
        self.context, self.turn, self.probes = "", 0, []
        lines = []
        for k, ask in enumerate(asks):
            self.send(Context(None, (HistoryItem("user", ask.say),), tools if k == 0 else None))
            first = len(self.probes)
            spoken, calls = self.respond()
            followup, again = "", []
            rounds_calls = calls
            for _ in range(ROUNDS if calls else 0):
                outputs = tuple(HistoryItem("tool", json.dumps(
                    ask.result if c.name == ask.tool else UNKNOWN), "function_call_output",
                    call_id=f"call_{i}") for i, c in enumerate(rounds_calls))
                self.send(Context(None, outputs))
                words, rounds_calls = self.respond()
                followup = " ".join(filter(None, [followup, words]))
                again += rounds_calls
                if not rounds_calls:
                    break
            called_right = ask.tool is not None and check_call(ask, calls) is None
            lines.append(Scored(ask, check_call(ask, calls) is None and not invented(ask, spoken),
                                invented(ask, spoken),
                                used(ask, followup) if called_right else None, bool(again),
                                self.line(ask, spoken, calls, followup, again, first)))
        return lines

    def line(self, ask: Ask, spoken: str, calls: list[Call], followup: str,
             again: list[Call], probe: int) -> str:
        miss = check_call(ask, calls)
        flags = [miss or "ok"]
        if invented(ask, spoken):
            flags.append("INVENTED")
        if again:
            flags.append(f"called again ×{len(again)}")
        if ask.tool and miss is None and not used(ask, followup):
            flags.append("follow-up did not use the result")
        call_lp, word, word_lp, last = self.probes[probe]
        margin = f'{{" {call_lp:+.2f}' if call_lp is not None else f'{{" <{last:+.2f}'
        what = "; ".join(f"{c.name}({c.arguments})" for c in calls) or f"said {spoken!r}"
        if calls:
            what += f" → {followup!r}"
        return (f"  {ask.say!r}: {', '.join(flags)}  [{margin} vs {word!r} {word_lp:+.2f}]"
                f"\n      {what}")


def run(server: Any, names: list[str], numbers: list[int], *, xfail: bool = False) -> None:
    spec = TEST_TOOLS if xfail else TOOLS
    tools = toolset(parse_tools(spec, "tools"), ToolChoice("auto"), "tools")
    tool_score.SCHEMAS.update({t["name"]: t["parameters"] for t in spec})
    shipped = (tc._NUDGE, tc.CALL_BIAS)
    replayer = Replayer(server)
    for name in names:
        tc._NUDGE, tc.CALL_BIAS = CANDIDATES[name]
        t0 = time.monotonic()
        print(f"\n{name}: bias {tc.CALL_BIAS:+.1f}, {tc._NUDGE!r}", flush=True)
        scored: list[Scored] = []
        for n in numbers:
            for one in replayer.conversation(XFAIL if xfail else CONVERSATIONS[n], tools):
                scored.append(one)
                print(f"  #{n}{one.line}", flush=True)
        print(f"  {name}: {sum(s.right for s in scored)}/{len(scored)} requests right "
              f"({time.monotonic() - t0:.0f} s; load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())})\n  {name}: {tally(scored)}",
              flush=True)
    tc._NUDGE, tc.CALL_BIAS = shipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="conversation numbers (default: the hard set "
                        + ",".join(map(str, HARD)) + ")")
    parser.add_argument("--candidates", default=",".join(CANDIDATES),
                        help="names from CANDIDATES (default: all: %(default)s)")
    parser.add_argument("--threads", type=int, help="llama.cpp threads (default: the plugin's)")
    parser.add_argument("--as-written", action="store_true",
                        help="keep optional free text nobody said in the calls (the thinker "
                             "before plugins.cascade.unsaid)")
    parser.add_argument("--xfail", action="store_true",
                        help="tests/llamacpp's strict xfail (AF22, then UA 902) on its tools")
    args = parser.parse_args()
    if args.as_written:
        tc.without_unsaid = lambda arguments, schema, said: arguments  # type: ignore[assignment]
    from engines.llamacpp_server import ServerConfig, start_server
    from plugins.cascade.llm import LlmChoice

    names = args.candidates.split(",")
    unknown = [n for n in names if n not in CANDIDATES]
    if unknown:
        parser.error(f"unknown candidates {unknown}; known: {', '.join(CANDIDATES)}")
    numbers = [int(n) for n in args.only.split(",")] if args.only else list(HARD)
    numbers = [-1] if args.xfail else numbers
    choice = LlmChoice.from_env({})
    threads = args.threads or choice.threads
    server = start_server(ServerConfig(choice.prepare(lambda _: None), n_ctx=4096, parallel=1,
                                       threads=threads, batch_threads=threads))
    print(f"bench/call_replay.py  {time.strftime('%Y-%m-%d %H:%M:%S')}  conversations "
          f"{numbers}, threads {threads}, calls {'as written' if args.as_written else 'said'}; "
          f"load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    run(server, names, numbers, xfail=args.xfail)


if __name__ == "__main__":
    main()
