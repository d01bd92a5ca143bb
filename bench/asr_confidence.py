"""Does the listener's own score tell a misheard turn from a heard one? The
figures behind ``plugins.cascade.heard``'s threshold.

Usage: .venv/bin/python bench/asr_confidence.py [--seeds 0] [--tool-quiz]
       [--below -0.5] [--json OUT]

Each clip goes through ``ListenerModel.hear`` (what the gateway does to a
committed turn: the listener's trimming, Whisper base, beam 5, one thread),
which gives its words and the best hypothesis's mean token log-probability:

- ``--seeds``: the held-out questions of ``bench/asr_heldout.py`` (50
  questions, each said by 2 of its 9 voices, the pairing rotated by the seed);
- ``--tool-quiz``: the spoken requests of ``bench/tool_quiz.py`` (every turn
  of every conversation, in the voice the quiz gives that conversation, at
  24 kHz and back to 16 kHz as the gateway resamples it).

A clip is heard when every content word of what was said is in the
transcript (``asr_heldout.heard_well``). It prints each clip (heard, score,
voice, said → heard), then per source and threshold: the misheard clips
scored below it (caught: the agent asks for a repeat instead of acting on the
wrong words) and the heard ones scored below it (false alarms: a repeat asked
for words heard right). Choose a threshold on one source, check it on the
others.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]

import asr_heldout  # noqa: E402

from plugins.cascade.heard import UNSURE_BELOW  # noqa: E402
from plugins.cascade.listener import ListenerModel  # noqa: E402

THRESHOLDS = (-0.3, -0.35, -0.4, -0.45, -0.5, -0.55, -0.6, -0.7)


@dataclass(frozen=True)
class Scored:
    source: str  # "seed N" or "tool quiz"
    voice: str
    said: str
    heard: str
    ok: bool
    score: float | None


def held_out(seed: int) -> list[tuple[str, str, np.ndarray]]:
    """(voice, said, 16 kHz pcm) of one seed's question clips."""
    return [(c.voice, c.text, c.pcm) for c in asr_heldout.question_clips(seed, 2, 50)]


def tool_quiz_turns() -> list[tuple[str, str, np.ndarray]]:
    """(voice, said, 16 kHz pcm) of every spoken turn of the tool quiz."""
    import tool_quiz
    from tool_requests import CONVERSATIONS, VOICES

    from gateway.audio import resample

    voices = tool_quiz.Voices()
    clips = []
    for n, conversation in enumerate(CONVERSATIONS):
        voice = VOICES[n % len(VOICES)]
        label = voice[0] if voice[0] == "piper" else f"{voice[0]}@{voice[1]}"
        for ask in conversation:
            pcm24 = voices.say(voice, ask.say)
            clips.append((label, ask.say, resample(pcm24, tool_quiz.RATE, asr_heldout.RATE)))
    return clips


def hear_all(source: str, clips: list[tuple[str, str, np.ndarray]],
             listener: ListenerModel) -> list[Scored]:
    out = []
    for voice, said, pcm in clips:
        heard = listener.hear(pcm)
        row = Scored(source, voice, said, heard.text, asr_heldout.heard_well(said, heard.text),
                     heard.score)
        out.append(row)
        score = f"{row.score:6.3f}" if row.score is not None else "  none"
        print(f"  {source:<9} {row.ok!s:5} {score} {voice:<24} {said[:44]!r} → "
              f"{heard.text[:56]!r}", flush=True)
    return out


def table(rows: list[Scored], below: float) -> None:
    misheard = [r for r in rows if not r.ok]
    print(f"\n  {rows[0].source}: {len(rows)} clips, {len(misheard)} misheard")
    for t in sorted({*THRESHOLDS, below}, reverse=True):
        caught = sum(r.score is not None and r.score < t for r in misheard)
        alarms = [r for r in rows if r.ok and r.score is not None and r.score < t]
        mark = "  <- the threshold" if t == below else ""
        print(f"    below {t:5.2f}: caught {caught:2d}/{len(misheard)} misheard, "
              f"{len(alarms):2d} false alarms of {len(rows) - len(misheard)} heard{mark}")
    for r in rows:
        if r.ok and r.score is not None and r.score < below:
            print(f"      false alarm {r.score:6.3f} [{r.voice}] {r.said!r} → {r.heard!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0", help="held-out seeds, e.g. 1,2 ('' for none)")
    parser.add_argument("--tool-quiz", action="store_true",
                        help="the tool quiz's spoken requests too")
    parser.add_argument("--below", type=float, default=UNSURE_BELOW,
                        help="the threshold to mark (default: the listener's, %(default)s)")
    parser.add_argument("--json", help="write every clip's row here")
    args = parser.parse_args()
    from plugins.cascade.asr import WhisperAsr

    print(f"bench/asr_confidence.py  {time.strftime('%Y-%m-%d %H:%M:%S')}  seeds "
          f"{args.seeds or 'none'}, tool quiz {args.tool_quiz}; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    asr = WhisperAsr()
    asr.load()
    listener = ListenerModel(asr)
    sources: list[list[Scored]] = []
    for seed in [int(s) for s in args.seeds.split(",") if s.strip()]:
        sources.append(hear_all(f"seed {seed}", held_out(seed), listener))
    if args.tool_quiz:
        sources.append(hear_all("tool quiz", tool_quiz_turns(), listener))
    for rows in sources:
        if rows:
            table(rows, args.below)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for rows in sources for r in rows]))
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
