"""A spoken quiz for the cascade voice agent: does it answer right, and how fast,
next to a sequential baseline on the same models in the same run.

Usage: .venv/bin/python bench/voice_quiz.py [--quick] [--model NAME_OR_GGUF]
       [--threads N] [--barge-ins 3] [--concurrency 1,2] [--no-baseline]
       [--draft-pause-ms MS] [--compare-drafts]

It starts its own cascade gateway (``--model``/``--threads`` set
``DUPLEX_GATEWAY_LLM_MODEL``/``_THREADS``), then speaks the quiz of
``bench/quiz_questions.py`` (32 scored questions in 32 conversations: facts,
memory over several turns, instructions from ``session.update``), one voice per
conversation, alternating piper's joe voice and espeak-ng (``-v en-us``),
streamed at real time in 20 ms frames. Each reply's audio is transcribed by
the listener's default Whisper (base) and scored by its words. It prints:

- the score (right / scored), per kind and voice, and the misses;
- mouth to ear (the question's last voiced sample, found by its energy, sent →
  the first reply audio received) and ``speech_stopped`` → first reply audio,
  p50/p95, with the server's split (``response.done.timings_ms``: the turn
  detector's wait, then transcribe, think, speak, first audio sent);
- barge-in: the first frame of an interruption → ``response.done{cancelled}``
  (p50/max), from ``bench/voice_latency.py``;
- concurrent sessions each asking at once: whether real time held;
- the **sequential baseline** (``bench/sequential.py``, as Pipecat's default
  pipeline does): the same VAD ends the turn, then the whole turn is
  transcribed, then the LLM runs until its first whole sentence, then that
  sentence is synthesised whole; same Whisper, same GGUF on llama.cpp (same
  threads, same prompt cache), same piper voice, on the same audio, run in this
  process after the gateway has stopped. Its mouth to ear is the sum of the four.

``--draft-pause-ms`` sets ``DUPLEX_GATEWAY_DRAFT_PAUSE_MS`` (0: no drafts, so
no reply is started before ``speech_stopped``); ``--compare-drafts`` runs the
quiz twice, drafts off then on, and prints both (the A/B of starting early).
The guesses the thinker started, and how many turned out right (adopted), come
from the gateway's ``duplex_stage_guesses_total``.

``--quick``: the first 8 conversations, 2 barge-ins, 1 and 2 sessions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
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

from gateway_process import GatewayProcess  # noqa: E402
from quiz_questions import QUIZ, VOICES, Turn  # noqa: E402
from voice_latency import (  # noqa: E402
    LONG_REPLY_QUESTION,
    MOUTH_TO_EAR,
    Session,
    barge_in,
    concurrent,
    connect,
    pct,
)

from gateway.audio import resample  # noqa: E402
from gateway.call_audio import last_voiced  # noqa: E402

RATE = 24000


# -- voices ------------------------------------------------------------------------


class Voices:
    def __init__(self) -> None:
        from plugins.cascade.talker import PiperTts

        self.piper = PiperTts(deterministic=True)
        self.piper.load()

    def say(self, voice: str, text: str) -> np.ndarray:
        """``text`` spoken at 24 kHz."""
        if voice == "piper":
            pcm = np.concatenate(list(self.piper.synthesize(text)))
            return resample(pcm, self.piper.sample_rate, RATE)
        wav = subprocess.run(["espeak-ng", "-v", "en-us", "--stdout", text], check=True,
                             capture_output=True).stdout
        import io

        import soundfile

        data, rate = soundfile.read(io.BytesIO(wav), dtype="int16")
        return resample(np.asarray(data, np.int16), int(rate), RATE)


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9']+", text.lower().replace("-", " ")))


def right(turn: Turn, heard: str) -> bool:
    got = words(heard)
    return all(group & got for group in turn.expect)


def kind(conversation: list[Turn]) -> str:
    if any(t.instructions for t in conversation):
        return "instructions"
    return "memory" if len(conversation) > 1 else "facts"


# -- the gateway run --------------------------------------------------------------


@dataclass
class Row:
    conversation: int
    voice: str
    kind: str
    turn: Turn
    asked: str  # what the server heard the question as
    reply: str  # the server's transcript of its reply
    heard: str  # Whisper's transcript of the reply audio
    mouth_to_ear_ms: float
    stopped_ms: float
    server: dict[str, float] = field(default_factory=dict)


async def ask(s: Session, pcm: np.ndarray) -> tuple[float, float, dict[str, Any], np.ndarray,
                                                   str]:
    """Speak one turn; (mouth to ear, speech_stopped → first audio, response.done,
    the reply audio, what the server heard)."""
    mark = len(s.events)
    t0 = await s.stream(np.concatenate([pcm, np.zeros(RATE, np.int16)]), last_voiced(pcm))
    end_of_speech = s.voiced_sent if s.voiced_sent is not None else t0 + len(pcm) / RATE
    t_stop, _ = await s.until("input_audio_buffer.speech_stopped", mark)
    t_audio, _ = await s.until("response.output_audio.delta", mark)
    _, done = await s.until("response.done", mark)
    _, asked = await s.until("conversation.item.input_audio_transcription.completed", mark)
    rid = done["response"]["id"]
    import base64

    audio = [np.frombuffer(base64.b64decode(e["delta"]), "<i2") for _, e in s.events[mark:]
             if e["type"] == "response.output_audio.delta" and e["response_id"] == rid]
    pcm_out = np.concatenate(audio) if audio else np.zeros(0, np.int16)
    return (1000 * (t_audio - end_of_speech), 1000 * (t_audio - t_stop), done, pcm_out,
            str(asked.get("transcript", "")))


async def instruct(s: Session, text: str) -> None:
    mark = len(s.events)
    await s.ws.send(json.dumps({"type": "session.update", "session": {"instructions": text}}))
    await s.until("session.updated", mark)


def transcript(done: dict[str, Any]) -> str:
    try:
        return str(done["response"]["output"][0]["content"][0]["transcript"])
    except (KeyError, IndexError):
        return ""


async def quiz(url: str, conversations: list[list[Turn]], voices: Voices,
               ears: Any) -> list[Row]:
    rows: list[Row] = []
    for i, conversation in enumerate(conversations):
        voice = VOICES[i % len(VOICES)]
        s, task = await connect(url)
        await s.until("session.created")
        for turn in conversation:
            if turn.instructions:
                await instruct(s, turn.instructions)
            eos, stopped, done, audio, asked = await ask(s, voices.say(voice, turn.say))
            heard = ears.transcribe(resample(audio, RATE, 16000)) if len(audio) else ""
            server = {k: float(v) for k, v in (done.get("timings_ms") or {}).items()}
            rows.append(Row(i, voice, kind(conversation), turn, asked, transcript(done), heard,
                            eos, stopped, server))
        await s.ws.close()
        task.cancel()
    return rows


async def guess_counts(gw: GatewayProcess) -> dict[str, float]:
    """The thinker's ``duplex_stage_guesses_total`` by outcome."""
    import httpx

    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(f"{gw.http}/metrics")).text
    found = (re.fullmatch(r'duplex_stage_guesses_total\{(.*)\} (\S+)', line)
             for line in text.splitlines())
    counts: dict[str, float] = {"started": 0.0, "adopted": 0.0}
    for match in filter(None, found):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match[1]))
        if labels.get("stage") == "think" and labels.get("outcome") in counts:
            counts[labels["outcome"]] = float(match[2])
    return counts


async def gateway_run(args: argparse.Namespace, conversations: list[list[Turn]],
                      voices: Voices, ears: Any) -> dict[str, Any]:
    env = {"HF_HUB_OFFLINE": "1"}
    if args.model:
        env["DUPLEX_GATEWAY_LLM_MODEL"] = args.model
    if args.threads:
        env["DUPLEX_GATEWAY_LLM_THREADS"] = str(args.threads)
    if args.draft_pause_ms is not None:
        env["DUPLEX_GATEWAY_DRAFT_PAUSE_MS"] = str(args.draft_pause_ms)
    with tempfile.TemporaryDirectory() as tmp:
        gw = GatewayProcess(Path(tmp), args=["--plugin", "cascade"], env={**os.environ, **env})
        gw.start(timeout_s=600)
        try:
            t0 = time.monotonic()
            rows = await quiz(gw.ws, conversations, voices, ears)
            quiz_s = time.monotonic() - t0
            guesses = await guess_counts(gw)
            s, task = await connect(gw.ws)
            barge: list[float] = []
            long_ask = voices.say("piper", LONG_REPLY_QUESTION)
            stop = voices.say("piper", "Stop, thank you.")
            for _ in range(3 * args.barge_ins):
                if len(barge) == args.barge_ins:
                    break
                ms = await barge_in(s, long_ask, stop)
                if ms is not None:
                    barge.append(ms)
            await s.ws.close()
            task.cancel()
            ask_pcm = voices.say("piper", "How many legs does a spider have?")
            conc = {n: await concurrent(gw.ws, "server_vad", n, ask_pcm) for n in args.levels}
        finally:
            gw.stop()
    return {"rows": rows, "barge": barge, "concurrency": conc, "quiz_s": quiz_s,
            "guesses": guesses}


# -- the sequential baseline --------------------------------------------------------


def baseline(args: argparse.Namespace, conversations: list[list[Turn]], voices: Voices,
             ears: Any) -> list[dict[str, float]]:
    """The same conversations through ``bench/sequential.py``: the VAD's wait,
    then transcribe, then the LLM to its first whole sentence, then synthesise that
    sentence whole: the four waits add up."""
    from sequential import Sequential

    env = {k: v for k, v in (("DUPLEX_GATEWAY_LLM_MODEL", args.model),
                             ("DUPLEX_GATEWAY_LLM_THREADS", str(args.threads or ""))) if v}
    pipeline = Sequential(ears, voices.piper, env)
    rows = []
    for i, conversation in enumerate(conversations):
        voice = VOICES[i % len(VOICES)]
        pipeline.new_conversation()
        for turn in conversation:
            if turn.instructions:
                pipeline.instruct(turn.instructions)
            said = voices.say(voice, turn.say)
            row = pipeline.turn(np.concatenate([said, np.zeros(RATE, np.int16)]))
            rows.append({k: v for k, v in row.items() if isinstance(v, float)})
    return rows


# -- the report -----------------------------------------------------------------------


def p50_p95(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"p50 {pct(values, 0.5):6.0f} ms   p95 {pct(values, 0.95):6.0f} ms"


def report(result: dict[str, Any], base: list[dict[str, float]] | None) -> None:
    rows: list[Row] = result["rows"]
    scored = [r for r in rows if r.turn.scored]
    ok = [r for r in scored if right(r.turn, r.heard)]
    print(f"\nscore: {len(ok)}/{len(scored)} right ({100 * len(ok) / max(1, len(scored)):.0f} %)"
          f", heard by Whisper from the reply audio; quiz took {result['quiz_s']:.0f} s")
    for label, pick in (("kind", lambda r: r.kind), ("voice", lambda r: r.voice)):
        groups: dict[str, list[Row]] = {}
        for r in scored:
            groups.setdefault(pick(r), []).append(r)
        print(f"  by {label}: " + ", ".join(
            f"{k} {sum(right(r.turn, r.heard) for r in v)}/{len(v)}" for k, v in groups.items()))
    for r in scored:
        if not right(r.turn, r.heard):
            print(f"  MISS [{r.voice}] {r.turn.say!r} (heard as {r.asked!r}): said "
                  f"{r.reply!r}, heard back {r.heard!r}")
    g = result["guesses"]
    print(f"thinker guesses (replies started at a pause): {g['started']:.0f} started, "
          f"{g['adopted']:.0f} adopted as the turn's reply ({len(rows)} turns)")
    print("\nlatency (every turn)")
    print(f"  {MOUTH_TO_EAR:<34} {p50_p95([r.mouth_to_ear_ms for r in rows])}")
    print(f"  {'speech_stopped → first audio':<34} {p50_p95([r.stopped_ms for r in rows])}")
    for key in sorted({k for r in rows for k in r.server}):
        values = [r.server[key] for r in rows if key in r.server]
        print(f"    server {key:<27} {p50_p95(values)}")
    if result["barge"]:
        b = result["barge"]
        print(f"  {'barge-in → cancelled':<34} p50 {pct(b, 0.5):6.0f} ms   max {max(b):6.0f} ms"
              f"  ({len(b)} barge-ins)")
    for n, (held, wait, worst) in result["concurrency"].items():
        print(f"  {n} concurrent: {MOUTH_TO_EAR} p50 {wait:6.0f} ms, max {worst:6.0f} ms, "
              f"real time {'held' if held else 'NOT held'}")
    if base:
        print("\nsequential baseline (the same VAD, then transcribe, then LLM to a whole "
              "sentence, then TTS of it)")
        print(f"  {MOUTH_TO_EAR:<34} {p50_p95([b['mouth_to_ear'] for b in base])}")
        for key in ("turn_detection", "transcribe", "think", "speak"):
            print(f"    {key:<32} {p50_p95([b[key] for b in base])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--model", help="DUPLEX_GATEWAY_LLM_MODEL for the gateway and baseline")
    parser.add_argument("--threads", type=int, help="DUPLEX_GATEWAY_LLM_THREADS")
    parser.add_argument("--barge-ins", type=int, default=3)
    parser.add_argument("--concurrency", default="1,2,3")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--draft-pause-ms", type=int,
                        help="DUPLEX_GATEWAY_DRAFT_PAUSE_MS (0: no drafts)")
    parser.add_argument("--compare-drafts", action="store_true",
                        help="run the quiz with drafts off, then on")
    args = parser.parse_args()
    args.levels = [int(n) for n in args.concurrency.split(",")]
    conversations = QUIZ
    if args.quick:
        conversations, args.barge_ins, args.levels = QUIZ[:8], 2, [1, 2]
    print(f"bench/voice_quiz.py  {time.strftime('%Y-%m-%d %H:%M:%S')}  model "
          f"{args.model or 'default'}, threads {args.threads or 'default'}; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    from plugins.cascade.listener import WhisperAsr

    voices, ears = Voices(), WhisperAsr()
    ears.load()
    if args.compare_drafts:
        pause = args.draft_pause_ms
        args.draft_pause_ms = 0
        print("\n== drafts off (every reply starts at speech_stopped) ==")
        report(asyncio.run(gateway_run(args, conversations, voices, ears)), None)
        args.draft_pause_ms = pause
        print("\n== drafts on ==")
    result = asyncio.run(gateway_run(args, conversations, voices, ears))
    base = None if args.no_baseline else baseline(args, conversations, voices, ears)
    report(result, base)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
