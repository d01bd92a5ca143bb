"""A spoken tool quiz for the cascade voice agent: does it call the right tool
with the right arguments, keep quiet where no tool fits, never state a result
before the tool answered, and use the result once it has; and how fast.

Usage: .venv/bin/python bench/tool_quiz.py [--quick] [--model NAME_OR_GGUF]
       [--threads N] [--voices en-us:175,en-gb:150,...] [--followup-tool-choice none]
       [--dump EVENTS.jsonl] [--only 0,3,17] [--wait-s 300] [--text]

It starts its own cascade gateway (as ``bench/voice_quiz.py`` does), gives each
conversation the four tools of ``bench/tool_requests.py`` with
``session.update`` (``tool_choice: auto``), and speaks its requests at real
time in 20 ms frames, one voice per conversation in turn: espeak-ng voices and
variants at several speeds that nothing was tuned on, and piper's joe (the
reply voice, which the old quiz used) only as a comparison. A call is answered
with a ``function_call_output`` (the request's made-up result) and a
``response.create``; that reply, the follow-up, must use the result. Scoring is
``bench/tool_score.py``. It prints, per request, what Whisper heard next to
what was said (a mishearing and a wrong choice by the model look alike
otherwise), the figures per kind and voice, and the latency from the last
voiced sample sent to the call's ``response.function_call_arguments.done``
and to the follow-up's first audio, next to end of speech → first audio of
the requests no tool fits (a plain spoken answer, the same run).

``--quick``: every fourth conversation. ``--text``: each request is typed
instead (a ``message`` item of ``input_text``, then ``response.create``), so the
listener is out of it and the figures are the model's alone; latency is then
from the ``response.create`` sent.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "bench")]

import voice_latency  # noqa: E402
from gateway_process import GatewayProcess  # noqa: E402
from tool_requests import CONVERSATIONS, TOOLS, VOICES, Ask  # noqa: E402
from tool_score import Call, check_call, invented, used  # noqa: E402
from voice_latency import FRAME, Session, connect, pct  # noqa: E402

from gateway.audio import resample  # noqa: E402

RATE = 24000
ROUNDS = 3  # answers to one request's calls, the follow-up's own calls included


class Voices:
    def __init__(self) -> None:
        from plugins.cascade.talker import PiperTts

        self.piper = PiperTts(deterministic=True)
        self.piper.load()

    def say(self, voice: tuple[str, int], text: str) -> np.ndarray:
        """``text`` spoken at 24 kHz by ``voice`` (espeak-ng name, words a minute)."""
        name, speed = voice
        if name == "piper":
            pcm = np.concatenate(list(self.piper.synthesize(text)))
            return resample(pcm, self.piper.sample_rate, RATE)
        import soundfile

        wav = subprocess.run(["espeak-ng", "-v", name, "-s", str(speed), "--stdout", text],
                             check=True, capture_output=True).stdout
        data, rate = soundfile.read(io.BytesIO(wav), dtype="int16")
        return resample(np.asarray(data, np.int16), int(rate), RATE)


def last_voiced(pcm: np.ndarray) -> int:
    """The index of the last sample above 2 % of the peak (synthesisers pad with
    near-silence, which the timing must not count as speech)."""
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > 0.02 * max(1, np.abs(pcm).max()))
    return int(loud[-1]) if len(loud) else len(pcm) - 1


@dataclass
class Row:
    conversation: int
    voice: str
    ask: Ask
    after_result: bool = False  # a turn after a tool's result in the same conversation
    heard: str = ""  # the gateway's transcript of the request
    spoken: str = ""  # the words of the turn's reply (said before any tool answered)
    calls: list[Call] = field(default_factory=list)
    followup: str = ""  # the reply after the tool's answer
    followup_calls: list[Call] = field(default_factory=list)
    to_call_ms: float | None = None  # last voiced sample → arguments.done
    to_audio_ms: float | None = None  # last voiced sample → first audio (of the follow-up)
    output_to_audio_ms: float | None = None  # function_call_output sent → first audio

    @property
    def miss(self) -> str | None:
        return check_call(self.ask, self.calls)


def response_parts(done: dict[str, Any]) -> tuple[str, list[Call]]:
    """The spoken words and the calls of a ``response.done``."""
    words, calls = [], []
    for item in done["response"].get("output", []):
        if item.get("type") == "function_call":
            calls.append(Call(item.get("name", ""), item.get("arguments", "")))
        for part in item.get("content") or []:
            words.append(str(part.get("transcript") or part.get("text") or ""))
    return " ".join(w for w in words if w), calls


async def next_done(s: Session, mark: int) -> tuple[int, dict[str, Any]]:
    """The next response.done after ``mark`` that was not cancelled (a turn the
    VAD split in two cancels the first part's reply), with its index."""
    while True:
        _, done = await s.until("response.done", mark)
        mark = next(i for i, (_, e) in enumerate(s.events) if e is done) + 1
        if done["response"]["status"] != "cancelled":
            return mark, done


def first(s: Session, kind: str, start: int, end: int) -> float | None:
    return next((t for t, e in s.events[start:end] if e["type"] == kind), None)


async def spoken_turn(s: Session, row: Row, pcm: np.ndarray, choice: str | None) -> None:
    mark = len(s.events)
    t0 = await s.stream(np.concatenate([pcm, np.zeros(RATE, np.int16)]))
    eos = t0 + (last_voiced(pcm) // FRAME) * 0.02  # when the last voiced frame went out
    end, done = await next_done(s, mark)
    _, asked = await s.until("conversation.item.input_audio_transcription.completed", mark)
    row.heard = str(asked.get("transcript", ""))
    row.spoken, row.calls = response_parts(done)
    t_call = first(s, "response.function_call_arguments.done", mark, end)
    t_audio = first(s, "response.output_audio.delta", mark, end)
    if t_call is not None:
        row.to_call_ms = 1000 * (t_call - eos)
    if not row.calls:
        row.to_audio_ms = None if t_audio is None else 1000 * (t_audio - eos)
        return
    await answer_calls(s, row, done, eos, choice)


async def typed_turn(s: Session, row: Row, text: str, choice: str | None) -> None:
    """``text`` as a typed user message and a ``response.create``: the model's
    choice without the listener's mishearings."""
    mark = len(s.events)
    await s.ws.send(json.dumps({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user",
        "content": [{"type": "input_text", "text": text}]}}))
    await s.ws.send(json.dumps({"type": "response.create"}))
    sent = time.monotonic()
    end, done = await next_done(s, mark)
    row.heard = text
    row.spoken, row.calls = response_parts(done)
    t_call = first(s, "response.function_call_arguments.done", mark, end)
    t_audio = first(s, "response.output_audio.delta", mark, end)
    if t_call is not None:
        row.to_call_ms = 1000 * (t_call - sent)
    if not row.calls:
        row.to_audio_ms = None if t_audio is None else 1000 * (t_audio - sent)
        return
    await answer_calls(s, row, done, sent, choice)


async def answer_calls(s: Session, row: Row, done: dict[str, Any], eos: float,
                       choice: str | None) -> None:
    """Each call answered with the request's result, and the follow-up timed. A
    follow-up that calls again is answered again, as a client would, up to
    ``ROUNDS`` times; its first audio is the wait a user hears. ``choice``: the
    follow-up's own ``tool_choice`` (``none``: a client that wants words now)."""
    # a wrong tool gets what a real one would say to a request it cannot serve
    unknown = {"error": "nothing found for that request"}
    sent: float | None = None
    for _ in range(ROUNDS):
        mark = len(s.events)
        for item in done["response"]["output"]:
            if item.get("type") == "function_call":
                await s.ws.send(json.dumps({"type": "conversation.item.create", "item": {
                    "type": "function_call_output", "call_id": item["call_id"],
                    "output": json.dumps(row.ask.result if item.get("name") == row.ask.tool
                                         else unknown)}}))
        sent = sent or time.monotonic()
        create: dict[str, Any] = {"type": "response.create"}
        if choice:
            create["response"] = {"tool_choice": choice}
        await s.ws.send(json.dumps(create))
        end, done = await next_done(s, mark)
        words, calls = response_parts(done)
        row.followup = " ".join(filter(None, [row.followup, words]))
        row.followup_calls += calls
        t_audio = first(s, "response.output_audio.delta", mark, end)
        if t_audio is not None and row.to_audio_ms is None:
            row.to_audio_ms = 1000 * (t_audio - eos)
            row.output_to_audio_ms = 1000 * (t_audio - sent)
        if not calls:
            return


async def quiz(url: str, conversations: list[tuple[int, list[Ask]]],
               voices: list[tuple[str, int]], speech: Voices | None,
               args: argparse.Namespace) -> list[Row]:
    rows: list[Row] = []
    for n, (i, conversation) in enumerate(conversations):
        voice = voices[n % len(voices)]
        label = ("typed" if speech is None else voice[0] if voice[0] == "piper"
                 else f"{voice[0]}@{voice[1]}")
        s, task = await connect(url)
        await s.until("session.created")
        mark = len(s.events)
        await s.ws.send(json.dumps({"type": "session.update", "session": {
            "tools": TOOLS, "tool_choice": "auto"}}))
        await s.until("session.updated", mark)
        for k, ask in enumerate(conversation):
            row = Row(i, label, ask, after_result=any(a.tool for a in conversation[:k]))
            if speech is None:
                await typed_turn(s, row, ask.say, args.followup_tool_choice)
            else:
                await spoken_turn(s, row, speech.say(voice, ask.say),
                                  args.followup_tool_choice)
            rows.append(row)
            ms = " ".join(f"{k} {v:.0f} ms" for k, v in (("call", row.to_call_ms),
                                                          ("audio", row.to_audio_ms)) if v)
            print(f"  [{label}] {ask.say!r} heard {row.heard!r}: {describe(row)} ({ms})",
                  flush=True)
        await s.ws.close()
        task.cancel()
        if args.dump:
            write_events(args.dump, i, s.events)
    return rows


def write_events(path: str, conversation: int, events: list[tuple[float, Any]]) -> None:
    """Every event but audio, for reading a miss after the run (a blocking write
    between conversations, when nothing is timed)."""
    with Path(path).open("a") as f:
        f.writelines(json.dumps({"conversation": conversation, "t": t, "event": e}) + "\n"
                     for t, e in events if not e["type"].endswith("audio.delta"))


def describe(row: Row) -> str:
    calls = "; ".join(f"{c.name}({c.arguments})" for c in row.calls) or "no call"
    text = f"{calls}, said {row.spoken!r}"
    if row.calls:
        again = "".join(f" + {c.name}({c.arguments})" for c in row.followup_calls)
        text += f" → then {row.followup!r}{again}"
    return text


async def gateway_run(args: argparse.Namespace, conversations: list[tuple[int, list[Ask]]],
                      voices: list[tuple[str, int]], speech: Voices | None) -> list[Row]:
    env = {"HF_HUB_OFFLINE": "1"}
    if args.model:
        env["DUPLEX_GATEWAY_LLM_MODEL"] = args.model
    if args.threads:
        env["DUPLEX_GATEWAY_LLM_THREADS"] = str(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        gw = GatewayProcess(Path(tmp), args=["--plugin", "cascade"], env={**os.environ, **env})
        gw.start(timeout_s=600)
        try:
            return await quiz(gw.ws, conversations, voices, speech, args)
        finally:
            gw.stop()


# -- the report -----------------------------------------------------------------------


def rate(ok: int, of: int) -> str:
    return f"{ok}/{of} ({100 * ok / of:.0f} %)" if of else "-"


def p50_p95(values: list[float | None]) -> str:
    got = [v for v in values if v is not None]
    if not got:
        return "n/a"
    return f"p50 {pct(got, 0.5):6.0f} ms   p95 {pct(got, 0.95):6.0f} ms   (n={len(got)})"


def figures(rows: list[Row]) -> str:
    tool = [r for r in rows if r.ask.tool]
    none = [r for r in rows if not r.ask.tool]
    follow = [r for r in tool if r.miss is None]  # a wrong call's follow-up is not scored
    again = sum(bool(r.followup_calls) for r in rows)
    return (f"right tool+args {rate(sum(r.miss is None for r in tool), len(tool))}; "
            f"no call where none fits {rate(sum(r.miss is None for r in none), len(none))}; "
            f"invented results {sum(invented(r.ask, r.spoken) for r in tool)}; "
            f"follow-ups using the result "
            f"{rate(sum(used(r.ask, r.followup) for r in follow), len(follow))}, "
            f"called again after the result {again}")


def report(rows: list[Row], quiz_s: float, typed: bool) -> None:
    print(f"\noverall: {figures(rows)}; the run took {quiz_s:.0f} s (gateway start included)")
    by_voice: dict[str, list[Row]] = {}
    for r in rows:
        by_voice.setdefault(r.voice, []).append(r)
    for voice, group in by_voice.items() if not typed else ():
        print(f"  {voice:<24} {figures(group)}")
    if not typed:
        espeak = [r for r in rows if r.voice != "piper"]
        print(f"  {'espeak-ng voices only':<24} {figures(espeak)}")
    later = [r for r in rows if r.after_result]
    if later:  # a new request once a result was said: a call again, or none
        print(f"  {'after a result':<24} {figures(later)}")
    print("\nmisses")
    for r in rows:
        miss = r.miss
        bad = invented(r.ask, r.spoken)
        unused = bool(r.ask.tool and r.miss is None and not used(r.ask, r.followup))
        if miss or bad or unused:
            why = "; ".join(filter(None, [miss, "INVENTED" if bad else None,
                                          "called again" if r.followup_calls else None,
                                          "follow-up did not use the result" if unused
                                          else None]))
            print(f"  [{r.voice}] {r.ask.say!r} heard {r.heard!r}: {why}: {describe(r)}")
    print("\nlatency, from " + ("the response.create sent" if typed
                                 else "the last voiced sample sent"))
    tool = [r for r in rows if r.ask.tool]
    print(f"  {'→ function_call_arguments.done':<38} {p50_p95([r.to_call_ms for r in tool])}")
    called = [r for r in tool if r.calls]
    print(f"  {'→ follow-up first audio':<38} {p50_p95([r.to_audio_ms for r in called])}")
    print(f"  {'  (function_call_output → its audio)':<38} "
          f"{p50_p95([r.output_to_audio_ms for r in called])}")
    print(f"  {'no tool fits: → first audio':<38} "
          f"{p50_p95([r.to_audio_ms for r in rows if not r.ask.tool and not r.calls])}  (baseline)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--text", action="store_true",
                        help="type the requests instead of speaking them (no listener)")
    parser.add_argument("--model", help="DUPLEX_GATEWAY_LLM_MODEL for the gateway")
    parser.add_argument("--threads", type=int, help="DUPLEX_GATEWAY_LLM_THREADS")
    parser.add_argument("--voices", help="name:words-a-minute,... (default: "
                        + ",".join(f"{n}:{s}" for n, s in VOICES) + ")")
    parser.add_argument("--dump", help="append every event but audio to this JSON-lines file")
    parser.add_argument("--followup-tool-choice", choices=["none", "auto"],
                        help="tool_choice of the response.create after a tool's output "
                             "(default: the session's, auto)")
    parser.add_argument("--only", help="conversation numbers to run, e.g. 0,3,17")
    parser.add_argument("--wait-s", type=float, default=voice_latency.WAIT_S,
                        help="how long one event may take (default %(default)s s; a busy "
                             "box may need more)")
    args = parser.parse_args()
    voice_latency.WAIT_S = args.wait_s
    voices = list(VOICES) if not args.voices else [
        (v.split(":")[0], int(v.split(":")[1]) if ":" in v else 0) for v in args.voices.split(",")]
    conversations = list(enumerate(CONVERSATIONS))
    if args.quick:
        conversations = conversations[::4]
    if args.only:
        conversations = [conversations[int(n)] for n in args.only.split(",")]
    print(f"bench/tool_quiz.py  {time.strftime('%Y-%m-%d %H:%M:%S')}  model "
          f"{args.model or 'default'}, threads {args.threads or 'default'}, follow-up "
          f"tool_choice {args.followup_tool_choice or 'session'}, "
          f"{'typed' if args.text else 'spoken'}; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    speech = None if args.text else Voices()
    t0 = time.monotonic()
    rows = asyncio.run(gateway_run(args, conversations, voices, speech))
    report(rows, time.monotonic() - t0, args.text)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
