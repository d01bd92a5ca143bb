"""``duplex-gateway call``: speak audio files to a running gateway, turn by turn.

Every ``--wav`` file (any format ``call_audio`` reads) becomes one user turn of
one session. For each turn it prints what the gateway heard, what the
assistant said, and where the time went; ``--out`` saves the spoken answers.

Exit status: 0 when every turn's response completed; 1 otherwise, and 1 with
one line on stderr (``duplex-gateway call: …``) for any failure, checked in
this order: unreadable input files and unwritable ``--out`` paths before the
call is made, then the gateway (unreachable, refusing, an ``error`` event, no
answer within ``--timeout-s``).
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
    stop = report.marks.get("speech_stopped")
    first = report.marks.get("first_audio")
    if stop is not None and first is not None:
        print(f"  end of speech → first audio: {1000 * (first - stop):.0f} ms (client view)")
    for name, ms in report.timings.items():
        shown = f"{ms:8.0f}" if isinstance(ms, int | float) else f"{ms!s:>8}"
        print(f"    {name:<28} {shown} ms")
    if saved is not None:
        print(f"  answer:      {saved} ({len(report.pcm()) / RATE:.1f} s)")
    sys.stdout.flush()  # one turn at a time, also through a pipe


def run_call(url: str, wavs: Sequence[Path], out: Path | None, *, realtime: bool,
             api_key: str | None, instructions: str | None, timeout_s: float) -> int:
    """The ``call`` command; returns its exit status."""
    try:
        return _call(url, wavs, out, realtime=realtime, api_key=api_key,
                     instructions=instructions, timeout_s=timeout_s)
    except CallError as exc:
        print(f"duplex-gateway call: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _call(url: str, wavs: Sequence[Path], out: Path | None, *, realtime: bool,
          api_key: str | None, instructions: str | None, timeout_s: float) -> int:
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
                                    on_turn=on_turn))
    return 0 if all(r.status == "completed" for r in reports) else 1
