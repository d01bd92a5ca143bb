"""Where a question's pause draft and end of speech fall, as its audio's phase moves.

Usage: .venv/bin/python bench/draft_phase.py [--questions 4] [--seed 1] [--wav F.wav ...]
       [--units 100,20]

Under ``semantic_vad`` a finished question ends its turn when the words of the
listener's draft, made at a 100 ms pause, reach the turn detector; the draft can
only start when the listener has the audio of that pause. This feeds each
question (``bench/demo_vs_call.py``'s held-out WAVs, or ``--wav`` files) through
the cascade's own VAD (Silero), plan and listener, with a recogniser that takes
no time, after a lead-in of 0, 10, ... 90 ms of silence (the phase a client's
audio happens to have against the session's units: the browser demo's starts
1-11 ms later than ``call``'s on the same file), for each listener unit size.
It prints, per question and unit, where the pause draft started and where the
VAD put the end of speech (``audio_end_ms``), both in ms of the question's own
audio, over the ten phases. No clock is read: the figures do not depend on the
load.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from duplex.config import TurnDetection  # noqa: E402
from duplex.tools import ToolSet  # noqa: E402
from gateway.audio import resample  # noqa: E402
from plugins.base import AudioUnit, Capabilities, Pcm  # noqa: E402
from plugins.cascade.listener import ListenerModel  # noqa: E402
from plugins.cascade.payloads import Draft  # noqa: E402
from plugins.cascade.plugin import LISTEN_RATE, SPEAK_RATE  # noqa: E402
from plugins.cascade.vad import SileroVad  # noqa: E402
from plugins.listen_think_speak import ListenThinkSpeakPlan  # noqa: E402

FRAME = LISTEN_RATE * 20 // 1000  # a client's 20 ms append, at the listener's rate
LEADS_MS = range(0, 100, 10)


class View:
    """A session that answers its turns, as the plan reads it."""

    instructions, prefix_padding_ms, auto_respond, tools = "", 300, True, ToolSet()

    def history(self) -> tuple[()]:
        return ()


class InstantAsr:
    def transcribe(self, pcm16k: Pcm) -> str:
        return "What is it?"


def one_phase(pcm: Pcm, unit_ms: int, lead: int) -> tuple[float, float]:
    """(the pause draft's start, the VAD's end of speech), in ms of ``pcm``, after
    ``lead`` samples of silence, appended in 20 ms frames."""
    audio = np.concatenate([np.zeros(lead, np.int16), pcm])
    vad = SileroVad(TurnDetection(type="semantic_vad"), LISTEN_RATE)
    plan = ListenThinkSpeakPlan(Capabilities("cascade", LISTEN_RATE, SPEAK_RATE,
                                             unit_ms=unit_ms))
    listener = ListenerModel(InstantAsr(), warm_every_ms=0)  # type: ignore[arg-type]
    state = listener.open(None)  # type: ignore[arg-type]
    end = draft = None
    heard = 0
    for start in range(0, audio.size, FRAME):
        frame = audio[start:start + FRAME]
        for event in vad.process(frame):
            if not event.started and end is None:
                end = event.audio_ms - 1000 * lead / LISTEN_RATE
        for sub in plan.audio(frame, View()):
            if not isinstance(sub.payload, AudioUnit):
                continue
            heard += sub.payload.pcm.size
            results = listener.step(state, replace(sub.payload, drafts=True))
            if draft is None and any(isinstance(r.payload, Draft) for r in results):
                draft = 1000 * (heard - lead) / LISTEN_RATE
        if end is not None and draft is not None:
            return draft, end
    raise ValueError("no draft or no end of speech: is there a pause after the speech?")


def report(name: str, pcm: Pcm, units: list[int]) -> None:
    for unit_ms in units:
        drafts, ends = zip(*(one_phase(pcm, unit_ms, LISTEN_RATE * ms // 1000)
                             for ms in LEADS_MS), strict=True)
        print(f"{name:<12} {unit_ms:3d} ms units: draft at {min(drafts):5.0f}-{max(drafts):5.0f}"
              f" ms (spread {max(drafts) - min(drafts):3.0f}, mean {np.mean(drafts):5.0f}); "
              f"end of speech "
              f"{min(ends):6.0f}-{max(ends):6.0f} ms (spread {max(ends) - min(ends):3.0f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--wav", type=Path, nargs="*", default=[])
    parser.add_argument("--units", default="100,20", help="listener unit sizes, ms")
    args = parser.parse_args()
    units = [int(u) for u in args.units.split(",")]
    import soundfile  # type: ignore[import-untyped]

    with tempfile.TemporaryDirectory() as tmp:
        wavs = list(args.wav)
        if not wavs:
            from demo_vs_call import write_questions

            wavs = [q.wav for q in write_questions(Path(tmp), args.questions, args.seed)]
        print(f"phases: lead-ins of {LEADS_MS.start}-{LEADS_MS.stop - LEADS_MS.step} ms; "
              "times in ms of each file's audio")
        for wav in wavs:
            data, rate = soundfile.read(str(wav), dtype="int16", always_2d=True)
            pcm = resample(np.asarray(data.mean(axis=1), np.int16), int(rate), LISTEN_RATE)
            report(wav.name, pcm, units)


if __name__ == "__main__":
    main()
