"""A session's user audio on its way in: decoded, through the VAD, then planned.

Synchronous on purpose: an append's handling needs no wait until the VAD's events
reach the session core (their effects are journaled) or the plan's payloads reach
the stages. ``hear`` does everything before that and hands back the rest as one
``Heard``, so the runner can take an append at once while its worker waits
(``SessionRunner._append_now``), or in its worker, with the same steps.
"""

from __future__ import annotations

from duplex.config import TurnDetection
from duplex.session import SessionCore
from gateway.session import runner_items as ri
from gateway.session.audio_io import AudioIO
from plugins import base as pb


class UserAudio:
    def __init__(self, core: SessionCore, plugin: pb.DuplexModelPlugin,
                 plan: pb.StagePlan, view: ri.CoreView) -> None:
        caps = plugin.capabilities
        self.io = AudioIO(caps.input_rate, caps.output_rate)  # the reply's way out too
        self._core, self._plugin, self._plan, self._view = core, plugin, plan, view
        self._rate = caps.input_rate
        self.vad: pb.VoiceActivityDetector | None = None
        self._vad_config: TurnDetection | None = None
        self.reconfigure()

    def reconfigure(self) -> None:
        """Follow the session's formats and turn detection (a new VAD if it changed)."""
        cfg = self._core.config
        self.io.configure(cfg.input_format, cfg.output_format)
        if self.vad is None or cfg.turn_detection != self._vad_config:
            self._vad_config = cfg.turn_detection
            self.vad = (self._plugin.create_vad(cfg.turn_detection)
                        if cfg.turn_detection is not None else None)

    def hear(self, pcm: pb.Pcm) -> ri.Heard | None:
        """The core counts the audio and the VAD hears it; then, unless the VAD has
        events (whose effects may change what the plan does), the plan takes it.
        None when nothing is left for the worker."""
        if not len(pcm):
            return None
        self._core.audio_appended(1000.0 * len(pcm) / self._rate)
        events = tuple(self.vad.process(pcm)) if self.vad is not None else ()
        if events:
            return ri.Heard(pcm, events)
        submissions = self._plan.audio(pcm, self._view)
        return ri.Heard(pcm, (), submissions) if submissions else None
