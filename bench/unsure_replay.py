"""How the agent answers a turn the listener is unsure of: the shipped fixed
line against the model told, in a system note, that the words may be misheard.
Each case is a mishearing of the spoken quizzes (the words Whisper heard) and
then the words that were said, as the next turn: does the reply ask for a
repeat, and is the next turn still answered right (called, where a tool fits)?

Usage: .venv/bin/python bench/unsure_replay.py [--variants fixed,note0,note1,note2]
       [--threads N]

No gateway: ``ThinkerAdapter`` plans, llama.cpp completes (in process, the
default model, greedy; ``bench/call_replay.Replayer``), with the tool quiz's
four tools under ``auto``. ``fixed``: the conversation holds the heard words
and ``thinker.SAY_AGAIN`` as the agent's turn, which is what the thinker plans
for an unsure turn. A note: the heard words, then a reply whose system turn
(a ``response.create``'s instructions, just before it) is the note, under
``tool_choice: none``, as a first version of this feature did.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from call_replay import Replayer  # noqa: E402
from tool_requests import TOOLS  # noqa: E402

from duplex import effects as fx  # noqa: E402
from duplex.fence import Fence  # noqa: E402
from duplex.tools import ToolChoice, ToolSet, parse_tools, toolset  # noqa: E402
from plugins.base import Context, HistoryItem  # noqa: E402
from plugins.cascade.payloads import UserTurn  # noqa: E402
from plugins.cascade.thinker import SAY_AGAIN  # noqa: E402

# (what Whisper heard, what was said): spoken tool quiz and held-out test, 2026-12-04
CASES = (
    ("is right away I'm hungry than two at a time.", "Is flight UA 902 on time?"),
    ("Whilst the winner in Madrid.", "What's the weather in Madrid?"),
    ("Blood Hamlet.", "Who wrote Hamlet?"),
    ("What is the capital immediately?", "What is the capital of Egypt?"),
    ("What do you cut up a long time into?", "What do caterpillars turn into?"),
    ("All this comment, any ceiling.", "Who discovered penicillin?"),
    ("Search a timer for 8 minutes.", "Set a timer for eight minutes."),
)
NOTES = {
    # the first version's (a system turn after the heard words, tool_choice none)
    "note0": ("The user's last words were hard to hear and may be misheard. Do not answer "
              "them or act on them: in one short sentence, ask the user to say it again."),
    "note1": ("Those words came through unclearly and may be misheard. Reply only by asking "
              "the user to say it again, in one short sentence; answer their next words as "
              "usual."),
    "note2": ("Speech recognition was unsure of that turn, so it may be misheard. Do not "
              "answer it: say in one short sentence that you did not catch it, and ask them "
              "to repeat it."),
}


def case(replayer: Replayer, variant: str, heard: str, said: str,
         tools: ToolSet) -> tuple[str, str, list[str]]:
    """The reply to the heard words, and the next turn's reply and calls."""
    replayer.state = replayer.adapter.open(Fence(f"unsure-{time.monotonic_ns()}", 0, 0, 0))
    replayer.context, replayer.turn, replayer.probes = "", 0, []
    if variant == "fixed":
        replayer.send(Context(None, (HistoryItem("user", heard),
                                     HistoryItem("assistant", SAY_AGAIN)), tools))
        first = SAY_AGAIN
    else:
        replayer.send(Context(None, (HistoryItem("user", heard),), tools))
        fence = replayer.state.fence.with_turn(1)
        first, _ = replayer.send(fx.StartResponse(
            fence, "resp_1", NOTES[variant], tools=ToolSet(tools.tools, ToolChoice("none"))))
    words, calls = replayer.send(UserTurn(2, "i2", said, True))
    return first, words, [f"{c.name}({c.arguments})" for c in calls]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default=",".join(["fixed", *NOTES]))
    parser.add_argument("--threads", type=int, help="llama.cpp threads (default: the plugin's)")
    args = parser.parse_args()
    from engines.llamacpp_server import ServerConfig, start_server
    from plugins.cascade.llm import LlmChoice

    choice = LlmChoice.from_env({})
    threads = args.threads or choice.threads
    server = start_server(ServerConfig(choice.prepare(lambda _: None), n_ctx=4096, parallel=1,
                                       threads=threads, batch_threads=threads))
    print(f"bench/unsure_replay.py  {time.strftime('%Y-%m-%d %H:%M:%S')}  threads {threads}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    tools = toolset(parse_tools(TOOLS, "tools"), ToolChoice("auto"), "tools")
    replayer = Replayer(server)
    for variant in args.variants.split(","):
        print(f"\n{variant}: {NOTES.get(variant, repr(SAY_AGAIN))}", flush=True)
        for heard, said in CASES:
            first, words, calls = case(replayer, variant, heard, said, tools)
            print(f"  heard {heard!r} → {first!r}\n      then {said!r} → "
                  f"{'; '.join(calls) or repr(words)}", flush=True)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
