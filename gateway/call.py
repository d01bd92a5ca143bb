"""``duplex-gateway call``: speak audio files to a running gateway, turn by turn.

Every ``--wav`` file (any format ``call_audio`` reads) becomes one user turn of
one session. For each turn it prints what the gateway heard, what the
assistant said, and where the time went: the wait a person has (mouth to ear,
from the last voiced sample sent to the first reply audio received) and the
server's split of it (``response.done.timings_ms``: the turn detector's wait,
then transcribe, think, speak, first audio sent); ``--out`` saves the spoken
answers.

Exit status: 0 when every turn's response completed; 1 otherwise, and 1 with
one line on stderr (``duplex-gateway call: …``) for any failure, checked in
this order: unreadable input files and unwritable ``--out`` paths before the
call is made, then the gateway (unreachable, refusing, an ``error`` event, a
close, whose code is explained, a silent input given up once it and the silence
after it are sent, no answer within ``--timeout-s``). However it ends, the call
closes with 1000, which ends its session on the gateway.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from gateway.call_audio import (
    RATE,
    CallError,
    answer_paths,
    check_writable,
    read_question,
    write_answer,
)
from gateway.call_session import TurnReport, hold_call

__all__ = ["print_turn", "run_call"]


def print_turn(n: int, total: int, source: Path, seconds: float, report: TurnReport,
               saved: Path | None) -> None:
    """Turn ``n`` of ``total``, spoken from ``source`` (``seconds`` long), its answer
    saved at ``saved``."""
    print(f"turn {n}/{total}: {source} ({seconds:.1f} s)")
    print(f"  you said:    {report.user_transcript!r}")
    print(f"  assistant:   {report.assistant_transcript!r}  ({report.status})")
    wait = report.mouth_to_ear_ms
    if wait is not None:
        print(f"  end of speech → first audio: {wait:.0f} ms (mouth to ear: the last voiced "
              "sample sent → the first reply audio received)")
    for name, ms in report.timings.items():
        shown = f"{ms:8.0f}" if isinstance(ms, int | float) else f"{ms!s:>8}"
        print(f"    {name:<28} {shown} ms  {_PHASES.get(name, _STEP)}")
    rest = _network_ms(report)
    if rest is not None:
        print(f"    {'network and client':<28} {rest:8.0f} ms  the rest of the wait")
    if report.voiced_end_ms is not None and report.server_audio_end_ms is not None:
        print(f"  end of speech: {report.voiced_end_ms:.0f} ms into the session's audio by "
              f"its energy; the server's audio_end_ms {report.server_audio_end_ms:.0f}")
    if saved is not None:
        print(f"  answer:      {saved} ({len(report.pcm()) / RATE:.1f} s)")
    sys.stdout.flush()  # one turn at a time, also through a pipe


_STEP = "turn's end → this step (server)"
_PHASES = {"turn_detection": "end of speech → turn's end decided (server: the silence window)",
           "first_audio": "turn's end → first reply audio sent (server)"}


def _network_ms(report: TurnReport) -> float | None:
    """Mouth to ear less the server's part: the network both ways and this client."""
    wait, timings = report.mouth_to_ear_ms, report.timings
    detect, first = timings.get("turn_detection"), timings.get("first_audio")
    if wait is None or not isinstance(detect, int | float) or not isinstance(first, int | float):
        return None
    return wait - detect - first


def run_call(url: str, wavs: Sequence[Path], out: Path | None, *, realtime: bool,
             api_key: str | None, instructions: str | None, timeout_s: float,
             turn_detection: str | None = None) -> int:
    """The ``call`` command; returns its exit status."""
    try:
        return _call(url, wavs, out, realtime=realtime, api_key=api_key,
                     instructions=instructions, timeout_s=timeout_s,
                     turn_detection=turn_detection)
    except CallError as exc:
        print(f"duplex-gateway call: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _call(url: str, wavs: Sequence[Path], out: Path | None, *, realtime: bool,
          api_key: str | None, instructions: str | None, timeout_s: float,
          turn_detection: str | None) -> int:
    questions = [read_question(path) for path in wavs]
    outs: list[Path | None] = list(answer_paths(out, len(wavs))) if out else [None] * len(wavs)
    check_writable([path for path in outs if path is not None])

    def on_turn(n: int, report: TurnReport) -> None:
        saved = outs[n - 1]
        if saved is not None:
            write_answer(saved, report.pcm())
        print_turn(n, len(wavs), wavs[n - 1], len(questions[n - 1]) / RATE, report, saved)

    reports = asyncio.run(hold_call(url, questions, realtime=realtime, api_key=api_key,
                                    instructions=instructions, timeout_s=timeout_s,
                                    turn_detection=turn_detection, on_turn=on_turn))
    return 0 if all(r.status == "completed" for r in reports) else 1
