"""``idle_timeout_ms`` (server VAD): when the user stays silent after a reply.

OpenAI's rule: the timeout runs from the end of the last reply's *playback*
(``response.done`` plus the audio still to play); if no speech starts before
it runs out, ``input_audio_buffer.timeout_triggered`` is sent, the input
buffer is committed and a reply made, so a phone bot can prompt a silent
caller. The core cannot read a clock: it asks its runner for a timer
(``duplex.effects.IdleTimer``) naming a token, and anything that makes the
wait moot (speech, a new reply) takes a new token, so a late timer is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

from duplex import effects as fx
from duplex.turn_detection import TurnDetection


@dataclass(slots=True)
class IdleWatch:
    token: int = 0  # the timer that may still fire; any other is stale
    armed: bool = False

    def disarm(self) -> None:
        self.token += 1
        self.armed = False

    def arm(self, td: TurnDetection | None, playback_ms: float) -> fx.IdleTimer | None:
        """The timer to start when a reply ended, if the session has an idle timeout."""
        self.disarm()
        if td is None or td.semantic or td.idle_timeout_ms is None:
            return None
        self.armed = True
        return fx.IdleTimer(self.token, td.idle_timeout_ms, playback_ms)

    def fired(self, token: int) -> bool:
        """Whether the timer ``token`` is the live one (it then is spent)."""
        if not self.armed or token != self.token:
            return False
        self.disarm()
        return True
