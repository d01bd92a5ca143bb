"""``TonePlugin``: a deterministic stand-in for a voice model, with the same
three-stage shape as the real ones and no ML.

It hears how long the user spoke, answers ``answer to turn N: one two three …``
(longer speech, longer answer), and speaks each word as a 200 ms tone whose
pitch encodes N (see ``decode.decode_turn``). It calls tools by a fixed rule
(``plugins.tone.calls``), so the function-calling protocol can be tested.
"""

from __future__ import annotations

from collections.abc import Sequence

from duplex.config import TurnDetection
from engines.stages import InProcessStage, Stage, StageModel
from plugins.base import (
    Capabilities,
    Delta,
    EndOfResponse,
    FunctionCall,
    PluginStatus,
    Progress,
    ReplyStep,
    Speech,
    StagePlan,
    Transcript,
    VoiceActivityDetector,
)
from plugins.listen_think_speak import ListenThinkSpeakPlan
from plugins.tone.payloads import Call, Heard, SpokenWord
from plugins.tone.stages import ListenModel, SpeakModel, ThinkModel
from plugins.tone.vad import EnergyVad

RATE = 24000


class TonePlugin:
    def __init__(self) -> None:
        self.capabilities = Capabilities(
            plugin_id="tone", input_rate=RATE, output_rate=RATE, unit_ms=100, tools=True,
            response_input=True)
        self.status = PluginStatus()
        self._models: tuple[StageModel, ...] = (
            ListenModel(RATE), ThinkModel(), SpeakModel(RATE),
        )

    def load(self, progress: Progress) -> None:
        """Nothing to load: the plugin is ready at once."""
        progress("tone: ready")
        self.status = PluginStatus(ready=True, detail="ready")

    def stages(self) -> Sequence[Stage]:
        names = self.capabilities.stage_names
        # every step is microseconds of numpy: a thread hand-off would cost more
        return [InProcessStage(name, model, threads=0)
                for name, model in zip(names, self._models, strict=True)]

    def create_vad(self, turn_detection: TurnDetection) -> VoiceActivityDetector:
        return EnergyVad(turn_detection, rate=self.capabilities.input_rate)

    def project(self, stage: int, payload: object) -> Sequence[Delta]:
        match stage, payload:
            case 0, Heard(item_id=item_id, transcript=text):
                return [Transcript(item_id, text)]
            case 1, ReplyStep():
                return [payload]
            case 2, SpokenWord(turn_id=turn_id, word=word, pcm=pcm):
                return [Speech(turn_id, pcm, word + " ")]
            case 2, EndOfResponse():
                return [payload]
            case 2, Call(turn_id=turn_id, name=name, arguments=arguments):
                return [FunctionCall(turn_id, name, arguments)]
        raise TypeError(f"tone stage {stage} has no visible output {type(payload).__name__}")

    def plan(self) -> StagePlan:
        return ListenThinkSpeakPlan(self.capabilities)
