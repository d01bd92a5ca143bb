"""plugins.turn_end: the end-of-turn decision, and the tone VAD that feeds it words."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from duplex.config import TurnDetection
from plugins.tone import EnergyVad
from plugins.tone.words import FINISHED, NEUTRAL, UNFINISHED, PitchWords, pitch, word_for
from plugins.turn_end import (
    BASE_WINDOW_MS,
    MAX_WINDOW_MS,
    Completeness,
    TurnEnd,
    completeness,
    semantic_window_ms,
)

F, U, K = Completeness.FINISHED, Completeness.UNFINISHED, Completeness.UNKNOWN
RATE = 24000
Pcm = npt.NDArray[np.int16]


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ("", K), ("   ", K), ("...", U), ("?!", F), ("12 34", K),
        # terminal punctuation
        ("What is the capital of France?", F), ("Book it.", F), ("Stop!", F),
        ("I said \"yes.\"", F), ("(that's it.)", F), ("好的。", F),
        # trailing off
        ("I was thinking...", U), ("so we went to the…", U), ("first, second,", U),
        ("the list:", U), ("well -", U), ("and then —", U),
        # the last word dangles
        ("I want to go to", U), ("and", U), ("bread and", U), ("but", U),
        ("the", U), ("give me a", U), ("um", U), ("it is, uh", U),
        ("so", U), ("because", U), ("I'm", U), ("it's", U),
        ("What Is The", U),  # case does not matter
        # complete on their own
        ("thanks", F), ("thank you", F), ("Thank you", F), ("okay", F), ("no", F),
        ("yes", F), ("bye", F),
        # no cue either way
        ("I want a pizza", K), ("the capital of France", K), ("and then the dog", K),
        # a recogniser's punctuation after a word that ends no sentence (Whisper
        # tiny.en's transcripts of the speech cut short)
        ("What is the capital of?", K), ("Who are you talking to?", K),
        ("Tell me about the.", U), ("Can you tell me, um...", U), ("Bread and?", U),
        ("What is the opposite of hot?", F), ("I saw her.", F),
    ],
)
def test_completeness(words: str, expected: Completeness) -> None:
    assert completeness(words) is expected


@pytest.mark.parametrize(
    ("eagerness", "words", "window"),
    [
        ("high", "", 350), ("medium", "", 700), ("auto", "", 700), ("low", "", 1200),
        ("high", "Book it.", 200),  # 0.3×, but never below 200 ms
        ("medium", "Book it.", 210), ("auto", "thanks", 210), ("low", "Book it.", 360),
        ("high", "and", 875), ("medium", "to the", 1750), ("low", "um", 3000),
        ("high", "a pizza", 350),
    ],
)
def test_semantic_window(eagerness: str, words: str, window: int) -> None:
    assert semantic_window_ms(eagerness, words) == window
    assert window <= MAX_WINDOW_MS[eagerness]


def test_eagerness_orders_every_case() -> None:
    for words in ("", "Book it.", "and"):
        high, medium, low = (semantic_window_ms(e, words) for e in ("high", "medium", "low"))
        assert high < medium < low


@pytest.mark.parametrize("words", ["", "and", "Book it."])
def test_server_vad_keeps_its_fixed_window(words: str) -> None:
    assert TurnEnd.of(TurnDetection(silence_duration_ms=640)).window_ms(words) == 640


def test_semantic_turn_end_from_the_config() -> None:
    end = TurnEnd.of(TurnDetection(type="semantic_vad", eagerness="low"))
    assert end.window_ms("") == BASE_WINDOW_MS["low"]
    assert end.window_ms("and") > end.window_ms("") > end.window_ms("done.")


# -- the tone plugin's words: pitch bands ------------------------------------------


def tone(ms: int, freq: float) -> Pcm:
    t = np.arange(ms * RATE // 1000) / RATE
    return np.round(0.3 * 32767 * np.sin(2 * np.pi * freq * t)).astype(np.int16)


def silence(ms: int) -> Pcm:
    return np.zeros(ms * RATE // 1000, dtype=np.int16)


@pytest.mark.parametrize("freq", [200.0, 440.0, 1000.0, 2000.0])
def test_zero_crossing_pitch(freq: float) -> None:
    frames = tone(100, freq).reshape(-1, 480)
    assert all(abs(pitch(frame, RATE) - freq) <= 50 for frame in frames)


@pytest.mark.parametrize(("freq", "word"), [(150, UNFINISHED), (249, UNFINISHED),
                                            (440, NEUTRAL), (1500, NEUTRAL),
                                            (1800, FINISHED)])
def test_pitch_bands(freq: float, word: str) -> None:
    assert word_for(freq) == word


def test_pitch_words_forget() -> None:
    words = PitchWords(RATE)
    words.heard(tone(20, 2000.0))
    assert words.words_so_far() == FINISHED
    words.heard(tone(20, 440.0))  # the last voiced frame names the word
    assert words.words_so_far() == NEUTRAL
    assert words.words_so_far() == NEUTRAL  # asked again: the same word
    words.forget()
    assert words.words_so_far() == ""


def stop_delay_ms(vad: EnergyVad, pcm: Pcm, clock: int = 0) -> tuple[int, int]:
    """(speech_stopped's audio_end_ms, how much later in the audio it was decided),
    feeding ``pcm`` in 20 ms chunks from ``clock`` ms of the session's audio on."""
    for start in range(0, pcm.size, 480):
        clock += 20
        for event in vad.process(pcm[start:start + 480]):
            if not event.started:
                return event.audio_ms, clock - event.audio_ms
    raise AssertionError("no speech_stopped")


SEMANTIC = {e: TurnDetection(type="semantic_vad", eagerness=e)  # type: ignore[arg-type]
            for e in ("low", "medium", "high", "auto")}


@pytest.mark.parametrize(
    ("eagerness", "freq", "delay"),
    [
        ("high", 440, 350), ("medium", 440, 700), ("auto", 440, 700), ("low", 440, 1200),
        ("high", 2000, 200), ("medium", 2000, 210), ("low", 2000, 360),  # finished
        ("high", 200, 880), ("medium", 200, 1760), ("low", 200, 3000),  # unfinished
    ],
)
def test_tone_vad_ends_turns_as_turn_end_says(eagerness: str, freq: float,
                                              delay: int) -> None:
    vad = EnergyVad(SEMANTIC[eagerness])
    end, decided = stop_delay_ms(vad, np.concatenate((tone(1000, freq), silence(4000))))
    assert end == 1000
    assert delay <= decided < delay + 20  # decided on the first 20 ms frame past it


def test_only_the_last_word_counts_and_each_turn_starts_afresh() -> None:
    vad = EnergyVad(SEMANTIC["medium"])
    # "and … that is all.": the high tone last, so the turn looks finished
    pcm = np.concatenate((tone(500, 200), tone(500, 2000), silence(1000)))
    assert stop_delay_ms(vad, pcm) == (1000, 220)
    vad.process(silence(780))  # the rest of the first 2 s, as sent
    # the next turn, neutral: back to the base window, not the last turn's word
    second = np.concatenate((tone(500, 440), silence(1000)))
    assert stop_delay_ms(vad, second, clock=2000) == (2500, 700)


def test_server_vad_ignores_the_pitch() -> None:
    for freq in (200, 440, 2000):
        vad = EnergyVad(TurnDetection(silence_duration_ms=500))
        assert stop_delay_ms(vad, np.concatenate((tone(1000, freq), silence(1000))))[1] == 500
