"""A listen-only plugin whose listener is the cascade's (drafts and all) with a
scripted recogniser, so the words the turn detector hears are known.

The cascade's ``ListenerModel`` drafts the turn at a pause and the plugin
projects the draft as ``WordsHeard`` (``plugins.cascade.projection``); the VAD
is the cascade's ``SileroVad`` with an energy scorer in place of the model.
The recogniser hears pitch (as ``plugins.tone.words``): a 2 kHz turn is a
finished question, a 200 Hz one dangles, anything else says nothing either
way. There is no thinker: a reply starts and never ends, which these tests
do not wait for.

``heard`` is every ``hear_words`` call of every session's VAD, in order, and
``words_arrived`` is set on each (both on the event loop; a test gives it an
event of its own loop), so a test can wait for the words before it sends more
audio. ``transcribed`` is the length of each audio the recogniser was given
(samples at 16 kHz, on the listener's thread). The listener hears the audio in
the cascade's units (``plugins.cascade.plugin.UNIT_MS``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from duplex.config import TurnDetection
from engines.stages import InProcessStage, Stage
from plugins.base import Capabilities, Delta, PluginStatus, Progress, StagePlan, VadEvent
from plugins.cascade import projection
from plugins.cascade.listener import ListenerModel
from plugins.cascade.plugin import UNIT_MS
from plugins.cascade.vad import SileroVad
from plugins.listen_think_speak import ListenThinkSpeakPlan
from plugins.tone.words import pitch

RATE = 16000
FINISHED = "What is the capital of France?"
DANGLING = "What is the capital of"
NEUTRAL = "the capital of France"

heard: list[str] = []
words_arrived = asyncio.Event()
transcribed: list[int] = []


class PitchAsr:
    """Words by the pitch of the loudest 20 ms of the audio."""

    def transcribe(self, pcm16k: npt.NDArray[Any]) -> str:
        transcribed.append(pcm16k.size)
        frames = pcm16k[: pcm16k.size // 320 * 320].reshape(-1, 320)
        loudest = frames[int(np.argmax(np.abs(frames.astype(np.int32)).sum(axis=1)))]
        hz = pitch(loudest, RATE)
        return FINISHED if hz > 1500 else DANGLING if hz < 250 else NEUTRAL


class EnergyScorer:
    def score(self, frame: npt.NDArray[np.float32]) -> float:
        return 1.0 if float(np.sqrt(np.mean(frame * frame))) > 0.01 else 0.0

    def reset(self) -> None:
        pass


class RecordingVad(SileroVad):
    def hear_words(self, words: str) -> Sequence[VadEvent]:
        heard.append(words)
        words_arrived.set()
        return super().hear_words(words)


class DraftingPlugin:
    def __init__(self) -> None:
        self.capabilities = Capabilities("drafting", RATE, RATE, unit_ms=UNIT_MS,
                                         stage_names=("listen",))
        self.status = PluginStatus()

    def load(self, progress: Progress) -> None:
        self.status = PluginStatus(ready=True, detail="ready")

    def stages(self) -> Sequence[Stage]:
        return [InProcessStage("listen", ListenerModel(PitchAsr(),  # type: ignore[arg-type]
                                                       warm_every_ms=0))]

    def create_vad(self, turn_detection: TurnDetection) -> RecordingVad:
        return RecordingVad(turn_detection, RATE, scorer=EnergyScorer())

    def project(self, stage: int, payload: Any) -> Sequence[Delta]:
        return projection.project(stage, payload)

    def plan(self) -> StagePlan:
        return ListenThinkSpeakPlan(self.capabilities)
