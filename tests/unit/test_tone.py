"""The tone plugin: energy VAD, the three stages chained by hand, decode_turn."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from effect_helpers import commit, start

from duplex.config import AudioFormat, TurnDetection
from duplex.fence import Fence
from engines.stages import StageResult
from gateway import audio
from plugins.base import (
    FIRST_CLAUSE,
    FIRST_TOKEN,
    AudioUnit,
    Context,
    Delta,
    DuplexModelPlugin,
    EndOfResponse,
    ReplyStep,
    Speech,
    Transcript,
    VadEvent,
)
from plugins.tone import Clause, EnergyVad, Heard, SpokenWord, TonePlugin, decode_turn
from plugins.tone.levels import threshold_dbfs
from plugins.tone.reply import number_word, word_count
from plugins.tone.synth import word_tone

RATE = 24000
Pcm = npt.NDArray[np.int16]
FENCE = Fence("sess_test", incarnation=1, epoch=0, turn_id=0)


# -- signal helpers ----------------------------------------------------------------


def tone(ms: int, amp: float = 0.3, freq: float = 440.0) -> Pcm:
    t = np.arange(ms * RATE // 1000) / RATE
    return np.round(amp * 32767 * np.sin(2 * np.pi * freq * t)).astype(np.int16)


def silence(ms: int) -> Pcm:
    return np.zeros(ms * RATE // 1000, dtype=np.int16)


def at_dbfs(ms: int, dbfs: float) -> Pcm:
    """A tone whose RMS is ``dbfs`` (a sine's RMS is its amplitude / √2)."""
    return tone(ms, amp=10 ** (dbfs / 20) * np.sqrt(2))


def noise(ms: int, dbfs: float) -> Pcm:
    rng = np.random.default_rng(1)
    sigma = 10 ** (dbfs / 20) * 32768
    return np.round(rng.normal(0, sigma, ms * RATE // 1000)).astype(np.int16)


def signal(*parts: Pcm) -> Pcm:
    return np.concatenate(parts)


def chunked(pcm: Pcm, sizes: Sequence[int]) -> list[Pcm]:
    out, start, i = [], 0, 0
    while start < pcm.size:
        size = sizes[i % len(sizes)]
        out.append(pcm[start : start + size])
        start, i = start + size, i + 1
    return out


def vad_events(pcm: Pcm, chunk_sizes: Sequence[int] = (480,), **td: Any) -> list[VadEvent]:
    vad = TonePlugin().create_vad(TurnDetection(**td))
    return [event for chunk in chunked(pcm, chunk_sizes) for event in vad.process(chunk)]


def pairs(events: Iterable[VadEvent]) -> list[tuple[bool, int]]:
    return [(e.started, e.audio_ms) for e in events]


# -- VAD ---------------------------------------------------------------------------


def test_threshold_scale() -> None:
    assert threshold_dbfs(0.5) == -40
    assert threshold_dbfs(0.0) == -70
    assert threshold_dbfs(1.0) == -10


@pytest.mark.parametrize(
    ("name", "pcm", "expected"),
    [
        ("digital silence", silence(3000), []),
        ("-60 dBFS noise", noise(3000, -60), []),
        ("tone in silence", signal(silence(1000), tone(1000), silence(1000)),
         [(True, 1000), (False, 2000)]),
        ("tone from the first sample", signal(tone(500), silence(600)),
         [(True, 0), (False, 500)]),
        ("short gap is one turn", signal(silence(200), tone(400), silence(300), tone(400),
                                         silence(600)),
         [(True, 200), (False, 1300)]),
        ("long gap is two turns", signal(tone(400), silence(700), tone(400), silence(600)),
         [(True, 0), (False, 400), (True, 1100), (False, 1500)]),
        ("40 ms click is not speech", signal(silence(500), tone(40), silence(1000)), []),
        ("60 ms is speech", signal(silence(500), tone(60), silence(1000)),
         [(True, 500), (False, 560)]),
        ("-30 dBFS speaks at the default", signal(at_dbfs(500, -30), silence(600)),
         [(True, 0), (False, 500)]),
        ("-43 dBFS alone does not start", signal(at_dbfs(1000, -43), silence(600)), []),
        # Hysteresis: once speaking, -43 dBFS (above the -46 stop level) still counts.
        ("quiet tail keeps speaking", signal(tone(300), at_dbfs(700, -43), silence(600)),
         [(True, 0), (False, 1000)]),
        ("-50 dBFS tail does not", signal(tone(300), at_dbfs(700, -50), silence(600)),
         [(True, 0), (False, 300)]),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_vad_patterns(name: str, pcm: Pcm, expected: list[tuple[bool, int]]) -> None:
    assert pairs(vad_events(pcm)) == expected


@pytest.mark.parametrize(
    ("threshold", "pcm", "speaks"),
    [
        (0.0, noise(1000, -60), True),  # the most sensitive setting hears faint noise
        (0.5, noise(1000, -60), False),
        (0.9, tone(1000), True),  # a 0.3 tone is -13.5 dBFS: speech even at 0.9
        (1.0, tone(1000), False),
    ],
)
def test_vad_threshold(threshold: float, pcm: Pcm, speaks: bool) -> None:
    events = vad_events(signal(pcm, silence(600)), threshold=threshold)
    assert bool(events) is speaks


@pytest.mark.parametrize(("start_ms", "stop_ms"), [(1010, 1510), (1003, 1777), (999, 1234)])
def test_vad_times_within_one_frame(start_ms: int, stop_ms: int) -> None:
    pcm = signal(silence(start_ms), tone(stop_ms - start_ms), silence(700))
    [started, stopped] = vad_events(pcm, chunk_sizes=(333,))
    assert started.started and abs(started.audio_ms - start_ms) <= 20
    assert not stopped.started and abs(stopped.audio_ms - stop_ms) <= 20


@pytest.mark.parametrize("silence_ms", [0, 200, 500, 1000])
def test_vad_silence_duration(silence_ms: int) -> None:
    vad = EnergyVad(TurnDetection(silence_duration_ms=silence_ms))
    clock_ms, seen = 0, []
    for chunk in chunked(signal(tone(1000), silence(2000)), [480]):
        clock_ms += 20
        seen += [(event, clock_ms) for event in vad.process(chunk)]
    [(started, _), (stopped, emitted_at)] = seen
    assert (started.audio_ms, stopped.audio_ms) == (0, 1000)
    # Reported when the silence has lasted silence_duration_ms, to the frame.
    assert silence_ms <= emitted_at - stopped.audio_ms <= silence_ms + 20


@pytest.mark.parametrize("silence_ms", [200, 500, 1000])
def test_vad_gap_shorter_than_silence_duration_is_one_turn(silence_ms: int) -> None:
    pcm = signal(tone(500), silence(silence_ms - 20), tone(500), silence(silence_ms + 100))
    events = vad_events(pcm, silence_duration_ms=silence_ms)
    assert pairs(events) == [(True, 0), (False, 1000 + silence_ms - 20)]


@pytest.mark.parametrize("sizes", [[480], [7, 1000, 333], [24000], [1, 479, 481]], ids=str)
def test_vad_chunking_does_not_matter(sizes: list[int]) -> None:
    pcm = signal(silence(510), tone(730), silence(590), tone(410), silence(900),
                 at_dbfs(333, -20), silence(800))
    whole = vad_events(pcm, chunk_sizes=[pcm.size])
    assert len(whole) == 6
    assert vad_events(pcm, chunk_sizes=sizes) == whole


def test_vad_clock_survives_reset() -> None:
    vad = EnergyVad(TurnDetection())
    assert pairs(vad.process(tone(1000))) == [(True, 0)]
    vad.reset()  # speech in progress is forgotten: no stop event for it
    assert vad.process(silence(990)) == []
    assert not vad.speaking
    # Frames still start at 20 ms multiples (the reset fell on a frame edge), so
    # the tone at 1990 ms is first seen in the frame from 1980 ms.
    later = vad.process(signal(tone(500), silence(600)))
    assert pairs(later) == [(True, 1980), (False, 2500)]


# -- driving the stages by hand ------------------------------------------------


class Chain:
    """The orchestrator's routing, by hand: segment-finished outputs go to the next
    stage; visible ones are projected."""

    def __init__(self, plugin: TonePlugin, instructions: str = "") -> None:
        self.plugin = plugin
        self.models = [stage.model for stage in plugin.stages()]
        self.states = [model.open(FENCE) for model in self.models]
        self.deltas: list[Delta] = []
        self.forwarded: list[list[object]] = [[], [], []]
        self.feed(1, Context(instructions))

    def feed(self, stage: int, payload: object) -> None:
        self.forwarded[stage].append(payload)
        for result in self.models[stage].step(self.states[stage], payload):
            assert isinstance(result, StageResult)
            if result.visible:
                self.deltas += self.plugin.project(stage, result.payload)
            if result.segment_finished and stage + 1 < len(self.models):
                self.feed(stage + 1, result.payload)

    def speak(self, pcm: Pcm, unit_ms: int = 100) -> None:
        for chunk in chunked(pcm, [unit_ms * RATE // 1000]):
            self.feed(0, AudioUnit(chunk))

    def commit(self, turn_id: int, respond: bool = True) -> None:
        self.feed(0, commit(turn_id, respond=respond))

    def close(self) -> None:
        for model, state in zip(self.models, self.states, strict=True):
            model.close(state)

    def clauses(self) -> list[Clause]:
        """What the thinker streamed to the talker."""
        out = [c for c in self.forwarded[2] if isinstance(c, Clause)]
        assert len(out) == len(self.forwarded[2])
        return out

    def take(self) -> list[Delta]:
        out, self.deltas = self.deltas, []
        return out


def spoken(deltas: Sequence[Delta]) -> str:
    return "".join(d.text for d in deltas if isinstance(d, Speech))


def test_one_turn_end_to_end() -> None:
    chain = Chain(TonePlugin())
    chain.speak(signal(silence(300), tone(1200), silence(500)))
    chain.commit(3)
    deltas = chain.take()
    assert deltas[0] == Transcript("item_3", "tone turn 3, 1200 ms of speech")
    # the thinker's steps, whole at once, ahead of the voice
    assert deltas[1:3] == [ReplyStep(3, FIRST_TOKEN), ReplyStep(3, FIRST_CLAUSE)]
    assert spoken(deltas) == "answer to turn 3: one two three four five six "
    assert deltas[-1] == EndOfResponse(3)
    speech = [d for d in deltas if isinstance(d, Speech)]
    assert len(deltas) == 3 + len(speech) + 1
    for piece in speech:
        assert piece.turn_id == 3
        assert piece.pcm.dtype == np.int16 and piece.pcm.size == 200 * RATE // 1000
        assert decode_turn(piece.pcm, RATE) == 3
    assert decode_turn(np.concatenate([s.pcm for s in speech]), RATE) == 3
    # The thinker streamed clauses of at most 4 words; only the final one is last.
    clauses = chain.clauses()
    assert [c.text for c in clauses] == ["answer to turn 3:", "one two three four", "five six"]
    assert [c.last for c in clauses] == [False, False, True]
    chain.close()


def test_clauses_have_four_words() -> None:
    chain = Chain(TonePlugin(), instructions="reply words=10")
    chain.commit(1)
    texts = [c.text for c in chain.clauses()]
    assert texts == ["answer to turn 1:", "one two three four", "five six seven eight",
                     "nine ten"]
    assert [c.last for c in chain.clauses()] == [False, False, False, True]


@pytest.mark.parametrize(
    ("speech_ms", "instructions", "count"),
    [
        (0, "", 3),  # no audio: three words
        (599, "", 3),
        (1200, "", 6),
        (5000, "be brief", 25),
        (60_000, "", 60),  # capped
        (1200, "reply words=40", 40),
        (0, "words=0", 1),
        (0, "words=1000", 400),
        (0, "passwords=9", 3),  # words= must start a word
    ],
)
def test_word_count(speech_ms: int, instructions: str, count: int) -> None:
    assert word_count(speech_ms, instructions) == count


@pytest.mark.parametrize(
    ("n", "word"),
    [(1, "one"), (13, "thirteen"), (20, "twenty"), (42, "forty-two"), (100, "one-hundred"),
     (315, "three-hundred-fifteen"), (400, "four-hundred")],
)
def test_number_words_are_single_tokens(n: int, word: str) -> None:
    assert number_word(n) == word


def test_words_instruction_gives_long_reply() -> None:
    chain = Chain(TonePlugin(), instructions="reply words=40")
    chain.speak(tone(300))
    chain.commit(2)
    words = spoken(chain.take()).split()
    assert words[:4] == ["answer", "to", "turn", "2:"]
    assert words[4:] == [number_word(i) for i in range(1, 41)]


def test_end_of_response_is_last_and_once() -> None:
    chain = Chain(TonePlugin(), instructions="words=13")
    chain.commit(5)
    deltas = chain.take()
    ends = [i for i, d in enumerate(deltas) if isinstance(d, EndOfResponse)]
    assert ends == [len(deltas) - 1]


def test_commit_without_respond_waits_for_respond() -> None:
    chain = Chain(TonePlugin())
    chain.speak(tone(1000))
    chain.commit(4, respond=False)
    assert chain.take() == [Transcript("item_4", "tone turn 4, 1000 ms of speech")]
    chain.feed(1, start(4, "resp_1"))
    deltas = chain.take()
    assert spoken(deltas) == "answer to turn 4: one two three four five "
    assert deltas[-1] == EndOfResponse(4)


def test_respond_without_audio() -> None:
    chain = Chain(TonePlugin(), instructions="words=2")
    chain.feed(1, start(0, "resp_1"))
    assert spoken(chain.take()) == "answer to turn 0: one two "
    # Response instructions override the session's.
    chain.feed(1, start(0, "resp_2", instructions="words=5"))
    assert spoken(chain.take()).split()[-1] == "five"
    chain.feed(1, start(0, "resp_3", instructions=""))
    assert spoken(chain.take()) == "answer to turn 0: one two three "


def test_listener_resets_after_each_turn() -> None:
    chain = Chain(TonePlugin())
    chain.speak(tone(800))
    chain.commit(1, respond=False)
    chain.commit(2, respond=False)
    assert chain.take() == [Transcript("item_1", "tone turn 1, 800 ms of speech"),
                            Transcript("item_2", "tone turn 2, 0 ms of speech")]


@pytest.mark.parametrize("sizes", [[2400], [7, 1000, 333], [1]], ids=str)
def test_listener_counts_speech_in_any_chunking(sizes: list[int]) -> None:
    plugin = TonePlugin()
    listen = plugin.stages()[0].model
    state = listen.open(FENCE)
    pcm = signal(silence(200), tone(500), noise(300, -60), tone(130))
    for chunk in chunked(pcm, sizes):
        assert list(listen.step(state, AudioUnit(chunk))) == []
    [result] = list(listen.step(state, commit(1)))
    assert isinstance(result.payload, Heard)
    assert result.segment_finished and result.visible
    assert result.payload.speech_ms == 630  # the 10 ms tail counts as a partial frame
    assert result.payload.respond


def test_requests_do_not_share_state() -> None:
    plugin = TonePlugin()
    a, b = Chain(plugin), Chain(plugin)
    a.speak(tone(1000))
    b.speak(silence(1000))
    a.commit(1, respond=False)
    b.commit(1, respond=False)
    assert a.take() == [Transcript("item_1", "tone turn 1, 1000 ms of speech")]
    assert b.take() == [Transcript("item_1", "tone turn 1, 0 ms of speech")]


@pytest.mark.parametrize(("stage", "payload"),
                         [(0, start(1, "r")), (1, AudioUnit(silence(20))), (2, "text")])
def test_stages_reject_foreign_payloads(stage: int, payload: object) -> None:
    model = TonePlugin().stages()[stage].model
    with pytest.raises(TypeError, match="tone"):
        list(model.step(model.open(FENCE), payload))


def test_project() -> None:
    plugin = TonePlugin()
    heard = Heard(7, "item_7", 400, True, "tone turn 7, 400 ms of speech")
    assert plugin.project(0, heard) == [Transcript("item_7", "tone turn 7, 400 ms of speech")]
    pcm = word_tone(7, RATE)
    [speech] = plugin.project(2, SpokenWord(7, "one", pcm))
    assert isinstance(speech, Speech) and speech.text == "one " and speech.pcm is pcm
    assert plugin.project(2, EndOfResponse(7)) == [EndOfResponse(7)]
    with pytest.raises(TypeError):
        plugin.project(1, Clause(7, "one", last=True))


# -- the plugin as a whole -------------------------------------------------------


def test_plugin_contract() -> None:
    plugin = TonePlugin()
    assert isinstance(plugin, DuplexModelPlugin)
    caps = plugin.capabilities
    assert (caps.plugin_id, caps.input_rate, caps.output_rate, caps.unit_ms) == (
        "tone", 24000, 24000, 100)
    assert len(plugin.stages()) == len(caps.stage_names) == 3
    assert not plugin.status.ready
    plugin.load(lambda step: None)
    assert plugin.status.ready
    assert plugin.plan().reply_timings == {2: "speak_first_output"}


# -- the voice and decode_turn -------------------------------------------------


def test_word_tone_shape() -> None:
    pcm = word_tone(0, RATE)
    assert pcm.size == 4800 and not pcm.flags.writeable
    assert 0.29 * 32767 <= np.abs(pcm).max() <= 0.31 * 32767
    # 5 ms fades: the ends start and finish near zero.
    assert abs(int(pcm[0])) < 50 and abs(int(pcm[-1])) < 50
    assert np.abs(pcm[:60]).max() < np.abs(pcm[600:660]).max()


@pytest.mark.parametrize("turn_id", range(20))
def test_decode_turn_every_pitch(turn_id: int) -> None:
    pcm = word_tone(turn_id, RATE)
    assert decode_turn(pcm, RATE) == turn_id % 16
    assert decode_turn(pcm[1200:1680], RATE) == turn_id % 16  # one 20 ms frame


@pytest.mark.parametrize("fmt", [AudioFormat.PCMU, AudioFormat.PCMA])
@pytest.mark.parametrize("turn_id", [0, 9, 15])
def test_decode_turn_after_telephone_path(fmt: AudioFormat, turn_id: int) -> None:
    wire = audio.encode_output(np.tile(word_tone(turn_id, RATE), 3), RATE, fmt)
    heard = audio.from_wire(wire, fmt)  # what the phone plays, at 8 kHz
    assert decode_turn(heard[800:1120], fmt.rate) == turn_id  # 40 ms slice


@pytest.mark.parametrize(
    "pcm", [silence(200), np.zeros(0, np.int16), noise(200, -60)], ids=["silence", "empty",
                                                                       "noise"])
def test_decode_turn_silence(pcm: Pcm) -> None:
    assert decode_turn(pcm, RATE) is None


def test_decode_turn_rejects_off_grid_pitch() -> None:
    assert decode_turn(tone(200, freq=3000), RATE) is None
    assert decode_turn(tone(200, freq=100), RATE) is None
