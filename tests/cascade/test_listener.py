"""Stage 0: ``ListenerModel`` gathers a turn's audio and transcribes it on commit."""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from effect_helpers import commit, discard
from pcm_sizes import in_sizes

from duplex.fence import Fence
from duplex.tools import ToolSet
from engines.model_http import ServerBusy
from engines.stages import StageResult
from plugins.base import AudioUnit, Capabilities, Pcm, Transcript, WordsHeard
from plugins.cascade.asr import MAX_TURN_S, WhisperAsr
from plugins.cascade.heard import UNSURE_BELOW, UNSURE_BELOW_ENV, Heard
from plugins.cascade.listener import DRAFT_PAUSE_MS, ListenerModel, ListenState, speech_span
from plugins.cascade.payloads import Draft, UserTurn
from plugins.cascade.plugin import LISTEN_RATE, SPEAK_RATE
from plugins.cascade.plugin import UNIT_MS as CASCADE_UNIT_MS
from plugins.cascade.projection import project
from plugins.listen_think_speak import ListenThinkSpeakPlan

RATE = 16000
UNIT_MS = 100
FENCE = Fence(session_id="s", incarnation=1, epoch=1, turn_id=1)
CAPS = Capabilities("cascade", LISTEN_RATE, SPEAK_RATE, unit_ms=CASCADE_UNIT_MS)


class FakeAsr(WhisperAsr):
    """Records what it is asked to transcribe; scores every turn ``score``."""

    def __init__(self, score: float | None = None) -> None:
        super().__init__()
        self.heard: list[npt.NDArray[Any]] = []
        self.score = score

    def load(self) -> None:
        return None

    def hear(self, pcm16k: npt.NDArray[Any]) -> Heard:
        return Heard(self.transcribe(pcm16k), self.score)

    def transcribe(self, pcm16k: npt.NDArray[Any]) -> str:
        self.heard.append(pcm16k)
        return "hello there"


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()


def silence(ms: int) -> Pcm:
    return np.zeros(RATE * ms // 1000, dtype=np.int16)


def tone(ms: int, amplitude: float = 0.3) -> Pcm:
    t = np.arange(RATE * ms // 1000) / RATE
    return (amplitude * 32767 * np.sin(2 * np.pi * 300 * t)).astype(np.int16)


def units(pcm: Pcm, *, drafts: bool = False) -> list[AudioUnit]:
    step = RATE * UNIT_MS // 1000
    return [AudioUnit(pcm[i : i + step], drafts) for i in range(0, pcm.size, step)]


def run(listener: ListenerModel, state: ListenState, payloads: list[Any]) -> list[StageResult]:
    return [r for p in payloads for r in listener.step(state, p)]


def turn(listener: ListenerModel, pcm: Pcm, turn_id: int = 3) -> UserTurn:
    state = listener.open(FENCE)
    results = run(listener, state, [*units(pcm), commit(turn_id, respond=True)])
    assert len(results) == 1
    payload = results[0].payload
    assert isinstance(payload, UserTurn)
    return payload


# -- the stage, with a stand-in ASR ------------------------------------------------


def test_commit_yields_one_visible_finished_user_turn() -> None:
    asr = FakeAsr()
    listener = ListenerModel(asr)
    state = listener.open(FENCE)
    results = run(listener, state, [*units(np.concatenate((silence(500), tone(800)))),
                                    commit(7, respond=False)])
    assert results == [StageResult(UserTurn(7, "item_7", "hello there", False),
                                   segment_finished=True, visible=True)]
    assert len(asr.heard) == 1
    assert state.samples == 0  # the turn's audio is spent


def test_leading_silence_is_cut_with_a_margin_and_the_tail_is_kept() -> None:
    asr = FakeAsr()
    turn(ListenerModel(asr), np.concatenate((silence(5000), tone(1000), silence(3000))))
    (heard,) = asr.heard
    # 800 ms kept before the speech (± one 20 ms frame), the 3 s after it all kept
    # (plus the second of silence the listener adds after every turn)
    expected_ms = 800 + 1000 + 3000 + 1000
    assert expected_ms - 20 <= heard.size * 1000 / RATE <= expected_ms + 20


def test_a_blip_or_silence_is_not_transcribed() -> None:
    asr = FakeAsr()
    listener = ListenerModel(asr)
    assert turn(listener, np.concatenate((silence(1000), tone(200), silence(1000)))).text == ""
    assert turn(listener, silence(2000)).text == ""
    assert turn(listener, tone(240)).text == ""
    assert turn(listener, np.zeros(0, dtype=np.int16)).text == ""
    assert asr.heard == []
    assert turn(listener, np.concatenate((silence(1000), tone(300)))).text == "hello there"


def test_discard_forgets_the_uncommitted_audio() -> None:
    asr = FakeAsr()
    listener = ListenerModel(asr)
    state = listener.open(FENCE)
    results = run(listener, state, [*units(tone(1000)), discard(), *units(silence(500)),
                                    commit(1, respond=True)])
    assert [r.payload.text for r in results] == [""]
    assert asr.heard == []


def test_a_turn_keeps_only_its_last_30_seconds() -> None:
    state = ListenState()
    for i in range(400):  # 40 s in 100 ms units, each unit numbered
        state.append(np.full(RATE // 10, i, dtype=np.int16))
        assert state.samples <= MAX_TURN_S * RATE + RATE // 10
    pcm = state.take()
    assert pcm.size == MAX_TURN_S * RATE
    assert pcm[-1] == 399 and pcm[0] == 100
    assert state.samples == 0 and state.take().size == 0


def test_speech_span_finds_speech_above_quiet_noise() -> None:
    rng = np.random.default_rng(1)
    noise = (rng.standard_normal(3 * RATE) * 0.0005 * 32768).astype(np.int16)  # -66 dBFS
    noise[RATE : 2 * RATE] += tone(1000)
    span = speech_span(noise)
    assert span is not None
    assert abs(span[0] - RATE) <= 320 and abs(span[1] - 2 * RATE) <= 320
    assert speech_span(silence(1000)) is None


def test_close_clears_and_strangers_are_refused() -> None:
    listener = ListenerModel(FakeAsr())
    state = listener.open(FENCE)
    run(listener, state, units(tone(500)))
    listener.close(state)
    assert state.samples == 0
    with pytest.raises(TypeError):
        run(listener, state, ["hello"])


def test_a_turn_scored_below_the_threshold_is_unsure() -> None:
    speech = np.concatenate((silence(300), tone(800)))
    low, high = UNSURE_BELOW - 0.3, UNSURE_BELOW + 0.3
    assert turn(ListenerModel(FakeAsr(score=low)), speech).unsure
    assert not turn(ListenerModel(FakeAsr(score=high)), speech).unsure
    assert not turn(ListenerModel(FakeAsr(score=low), unsure_below=None), speech).unsure  # off
    assert turn(ListenerModel(FakeAsr(score=high), unsure_below=high + 0.1), speech).unsure
    assert not turn(ListenerModel(FakeAsr(score=low)), silence(1000)).unsure  # nothing heard


class WordsOnlyAsr:
    """A recognizer that gives no score (as a speech server apart)."""

    def transcribe(self, pcm16k: npt.NDArray[Any]) -> str:
        return "hello there"


def test_a_recognizer_without_a_score_is_taken_at_its_word() -> None:
    heard = turn(ListenerModel(WordsOnlyAsr()), tone(800))
    assert (heard.text, heard.unsure) == ("hello there", False)


def test_the_plugin_takes_its_threshold_from_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from plugins.cascade.plugin import CascadePlugin

    monkeypatch.setenv(UNSURE_BELOW_ENV, "off")
    assert CascadePlugin()._unsure_below is None
    monkeypatch.setenv(UNSURE_BELOW_ENV, "-0.3")
    assert CascadePlugin()._unsure_below == -0.3
    monkeypatch.setenv(UNSURE_BELOW_ENV, "loud")
    with pytest.raises(ValueError, match=UNSURE_BELOW_ENV):  # refused at start, named
        CascadePlugin()


def test_projection_of_a_user_turn() -> None:
    assert project(0, UserTurn(1, "item_1", "hi", True)) == [Transcript("item_1", "hi")]
    with pytest.raises(TypeError):
        project(1, UserTurn(1, "item_1", "hi", True))


# -- drafts at a pause ---------------------------------------------------------------


class CountingAsr(FakeAsr):
    """Says how many transcriptions it has made so far ("words 1", "words 2", ...)."""

    def transcribe(self, pcm16k: npt.NDArray[Any]) -> str:
        super().transcribe(pcm16k)
        return f"words {len(self.heard)}"


def payloads(results: list[StageResult]) -> list[Any]:
    return [r.payload for r in results]


def test_a_pause_drafts_the_turn_and_the_commit_reuses_the_draft() -> None:
    asr = CountingAsr()
    listener = ListenerModel(asr)
    state = listener.open(FENCE)
    speech = np.concatenate((silence(300), tone(800)))
    before = run(listener, state, units(speech, drafts=True))
    assert before == []  # no pause yet
    paused = run(listener, state, units(silence(200), drafts=True))
    # visible too: the session's turn detector hears the words so far
    assert paused == [StageResult(Draft("words 1"), segment_finished=True, visible=True)]
    later = run(listener, state, [*units(silence(400), drafts=True), commit(4, respond=True)])
    # one draft per pause, and the commit's words are the draft's: no second decode
    assert payloads(later) == [UserTurn(4, "item_4", "words 1", True)]
    assert len(asr.heard) == 1
    assert later[0].visible


def test_speech_after_the_draft_makes_it_stale() -> None:
    asr = CountingAsr()
    listener = ListenerModel(asr, warm_every_ms=0)
    state = listener.open(FENCE)
    results = run(listener, state, [*units(tone(600), drafts=True),
                                    *units(silence(300), drafts=True),
                                    *units(tone(500), drafts=True),
                                    *units(silence(300), drafts=True),
                                    *units(tone(400), drafts=True),
                                    commit(5, respond=True)])
    # a draft at each pause, withdrawn when the speech goes on; speech after the
    # last one: the commit decodes afresh
    assert payloads(results) == [Draft("words 1"), Draft(""), Draft("words 2"), Draft(""),
                                 UserTurn(5, "item_5", "words 3", True)]
    # each draft heard all the speech so far
    assert asr.heard[0].size < asr.heard[1].size < asr.heard[2].size
    # the turn detector hears each draft and its withdrawal
    assert [r.visible for r in results] == [True] * 5
    assert [project(0, p) for p in payloads(results)[:4]] == [
        [WordsHeard("words 1")], [WordsHeard("")], [WordsHeard("words 2")], [WordsHeard("")]]


def test_long_speech_is_heard_while_it_goes_on_to_warm_the_thinker() -> None:
    asr = CountingAsr()
    listener = ListenerModel(asr)
    state = listener.open(FENCE)
    results = run(listener, state, [*units(np.concatenate((silence(200), tone(2700))),
                                           drafts=True),
                                    *units(silence(300), drafts=True)])
    # one warm draft a second of speech (the first after 1 s), then the pause's draft
    assert payloads(results) == [Draft("words 1", warm=True), Draft("words 2", warm=True),
                                 Draft("words 3")]
    # the warm drafts are heard while the user speaks: not the turn detector's
    assert [r.visible for r in results] == [False, False, True]
    with pytest.raises(TypeError):
        project(0, Draft("words 1", warm=True))


class BusyAsr(CountingAsr):
    """A speech server that refuses while ``busy``, counting what it refused."""

    def __init__(self) -> None:
        super().__init__()
        self.busy, self.refused = True, 0

    def transcribe(self, pcm16k: npt.NDArray[Any]) -> str:
        if self.busy:
            self.refused += 1
            raise ServerBusy("the speech server is busy")
        return super().transcribe(pcm16k)


def test_a_draft_the_server_refuses_leaves_the_turn_to_the_commit() -> None:
    asr = BusyAsr()
    listener = ListenerModel(asr)
    state = listener.open(FENCE)
    results = run(listener, state, [*units(np.concatenate((silence(200), tone(1500))),
                                           drafts=True),
                                    *units(silence(300), drafts=True),
                                    *units(tone(300), drafts=True),
                                    *units(silence(300), drafts=True)])
    # nothing drafted, nothing withdrawn, and one try a pause and a warm draft a
    # second of speech (not one a unit: 26 of them)
    assert results == [] and 2 <= asr.refused <= 4
    # the commit transcribes all the turn's audio afresh
    asr.busy = False
    turn = run(listener, state, [commit(6, respond=True)])
    assert payloads(turn) == [UserTurn(6, "item_6", "words 1", True)]
    assert asr.heard[0].size > RATE * 1800 // 1000
    # a commit that fails too is the request's error: it is raised, not swallowed
    state = listener.open(FENCE)
    run(listener, state, units(tone(600)))
    asr.busy = True
    with pytest.raises(ServerBusy):
        run(listener, state, [commit(7, respond=True)])


def test_an_unsure_draft_is_marked_and_the_commit_reusing_it_is_unsure_too() -> None:
    asr = CountingAsr(score=UNSURE_BELOW - 0.4)
    listener = ListenerModel(asr, warm_every_ms=0)
    state = listener.open(FENCE)
    results = run(listener, state, [*units(tone(800), drafts=True),
                                    *units(silence(300), drafts=True), commit(4, respond=True)])
    # the guess is planned for the turn the commit then sends, so it can be adopted
    assert payloads(results) == [Draft("words 1", unsure=True),
                                 UserTurn(4, "item_4", "words 1", True, unsure=True)]
    assert len(asr.heard) == 1
    assert project(0, payloads(results)[0]) == [WordsHeard("words 1")]  # the words as ever


def test_no_drafts_without_the_flag_nor_for_a_blip_and_none_after_a_discard() -> None:
    asr = CountingAsr()
    listener = ListenerModel(asr)
    state = listener.open(FENCE)
    assert run(listener, state, units(np.concatenate((tone(800), silence(600))))) == []
    assert run(listener, state, [discard(), *units(tone(200), drafts=True),
                                 *units(silence(600), drafts=True)]) == []  # under 250 ms
    assert asr.heard == []
    run(listener, state, units(np.concatenate((tone(800), silence(300))), drafts=True))
    assert state.drafted is not None
    run(listener, state, [discard()])
    assert state.drafted is None and state.loudness.first_loud < 0


def test_loudness_counts_frames_across_units_of_any_size() -> None:
    state = ListenState()
    pcm = np.concatenate((silence(100), tone(500), silence(260)))
    for i in range(0, pcm.size, 333):  # units that do not divide a 20 ms frame
        state.append(pcm[i : i + 333])
    loud = state.loudness
    assert loud.frames == pcm.size // (RATE * 20 // 1000)
    assert (loud.first_loud, loud.last_loud) == (5, 29)
    assert loud.paused_after_speech(260) and not loud.paused_after_speech(280)  # 260 ms quiet
    span = speech_span(pcm)
    assert span is not None and span == (loud.first_loud * 320, (loud.last_loud + 1) * 320)


class View:
    """What the plan reads of a session that answers its turns (``SessionView``)."""

    instructions, prefix_padding_ms, auto_respond, tools = "", 300, True, ToolSet()

    def history(self) -> tuple[()]:
        return ()


def drafted_at(appends: list[Pcm]) -> tuple[int, int]:
    """Through the cascade's plan and listener: (samples appended when the pause
    drafted, samples the draft transcribed)."""
    asr = CountingAsr()
    listener, plan = ListenerModel(asr, warm_every_ms=0), ListenThinkSpeakPlan(CAPS)
    state, sent = listener.open(FENCE), 0
    for pcm in appends:
        sent += pcm.size
        for sub in plan.audio(pcm, View()):
            if isinstance(sub.payload, AudioUnit) and list(listener.step(state, sub.payload)):
                return sent, asr.heard[0].size
    raise AssertionError("no draft")


# 20 ms frames as `call` sends them; the browser's 128-sample quanta (85 1/3 at
# 16 kHz) posted in uneven bursts; 100 ms appends; sizes that divide nothing
PATTERNS = {"20 ms": [320], "bursts": [85, 171, 85, 341, 85, 85, 256, 640],
            "100 ms": [1600], "odd": [333, 77, 1001]}


@pytest.mark.parametrize("lead_ms", range(0, 100, 10))
def test_a_pause_drafts_on_its_frame_whatever_the_phase_or_the_appends(lead_ms: int) -> None:
    speech_end = RATE * (300 + lead_ms + 800) // 1000
    pcm = np.concatenate((silence(300 + lead_ms), tone(800), silence(400)))
    drafts = {name: drafted_at(in_sizes(pcm, sizes)) for name, sizes in PATTERNS.items()}
    # every way of appending it, the draft heard the same speech, to the same frame
    assert len({heard for _, heard in drafts.values()}) == 1
    pause = RATE * DRAFT_PAUSE_MS // 1000
    for name, (sent, _) in drafts.items():
        # out as soon as the append that completes the pause's frame is in: within
        # one 20 ms unit of the pause (not the up-to-90 ms of 100 ms units), plus
        # that append's own length
        longest = max(PATTERNS[name])
        assert speech_end + pause <= sent < speech_end + pause + 320 + longest, (name, sent)


# -- the real model ------------------------------------------------------------------


@pytest.mark.slow
def test_the_question_is_heard(asr: WhisperAsr, question: Pcm) -> None:
    text = turn(ListenerModel(asr), np.concatenate((silence(1000), question, silence(1000)))).text
    print(f"\n[cascade] heard: {text!r}")
    assert {"capital", "france"} <= set(words(text))


@pytest.mark.slow
def test_garbled_speech_is_heard_unsure_and_a_clear_question_sure(
        asr: WhisperAsr, say: Callable[[str], Pcm]) -> None:
    """Whisper's own score (plugins.cascade.heard): a question played backwards
    is made into words it scores far below the threshold; the question itself
    scores far above it."""
    listener = ListenerModel(asr)
    question = say("What's the weather in Paris?")
    garbled = turn(listener, np.concatenate((silence(500), question[::-1], silence(500))))
    clear = turn(listener, np.concatenate((silence(500), question, silence(500))))
    print(f"\n[cascade] backwards: {garbled.text!r}; forwards: {clear.text!r}")
    assert garbled.text and garbled.unsure
    assert {"weather", "paris"} <= set(words(clear.text)) and not clear.unsure


@pytest.mark.slow
def test_long_silence_before_the_question_does_not_matter(asr: WhisperAsr, question: Pcm) -> None:
    pcm = np.concatenate((silence(20_000), question, silence(600)))
    listener = ListenerModel(asr)
    t0 = time.perf_counter()
    text = turn(listener, pcm).text
    print(f"\n[cascade] after 20 s of silence: {text!r} in {time.perf_counter() - t0:.3f} s")
    assert {"capital", "france"} <= set(words(text))


@pytest.mark.slow
def test_a_blip_of_speech_gives_nothing(asr: WhisperAsr, question: Pcm) -> None:
    start = int(np.flatnonzero(np.abs(question) > 1000)[0])
    blip = question[start : start + RATE // 5]  # 200 ms
    listener = ListenerModel(asr)
    assert turn(listener, np.concatenate((silence(1000), blip, silence(1000)))).text == ""
    assert turn(listener, blip).text == ""


@pytest.mark.slow
def test_discarded_speech_is_not_heard(asr: WhisperAsr, question: Pcm,
                                       say: Callable[[str], Pcm]) -> None:
    listener = ListenerModel(asr)
    state = listener.open(FENCE)
    results = run(listener, state, [*units(question), discard(),
                                    *units(say("Good morning.")), commit(2, respond=True)])
    (result,) = results
    heard = words(result.payload.text)
    print(f"\n[cascade] after a discard: {result.payload.text!r}")
    assert "morning" in heard and "france" not in heard


@pytest.mark.slow
@pytest.mark.parametrize("text", [
    "Please book a table for two tonight.",
    "I would like to change my flight to Boston next Tuesday, and if possible I want "
    "a window seat near the front, because I have a tight connection.",
])
def test_asr_latency(asr: WhisperAsr, say: Callable[[str], Pcm], text: str) -> None:
    pcm = say(text)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        heard = asr.transcribe(pcm)
        times.append(time.perf_counter() - t0)
    print(f"\n[cascade] ASR of {pcm.size / RATE:.1f} s: median {statistics.median(times):.3f} s "
          f"(min {min(times):.3f}): {heard!r}")
    expected = set(words(text))
    assert len(expected & set(words(heard))) >= 0.8 * len(expected)


@pytest.mark.slow
def test_transcribe_from_several_threads(asr: WhisperAsr, question: Pcm,
                                         say: Callable[[str], Pcm]) -> None:
    clips = [question, say("Good morning."), question, say("Good morning.")]
    alone = [asr.transcribe(c) for c in clips]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(asr.transcribe, clips))
    assert together == alone
