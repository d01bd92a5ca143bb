"""``turn_detection``: how the server ends user turns, as OpenAI Realtime names it.

Two types, as OpenAI has them:

- ``server_vad``: a turn ends after ``silence_duration_ms`` of silence;
- ``semantic_vad``: the silence that ends a turn depends on ``eagerness``
  (``low``/``medium``/``high``/``auto``) and on whether the words so far look
  finished; the plugin's VAD makes that decision (``plugins.turn_end``). Its
  only fields are ``eagerness``, ``create_response`` and
  ``interrupt_response``; ``server_vad``'s tuning fields, when a client sends
  them along, are ignored, as they do not belong to this type.

An update of the same type changes only the fields present; an update that
names another type starts from that type's defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from duplex import fields as f

TurnType = Literal["server_vad", "semantic_vad"]
Eagerness = Literal["low", "medium", "high", "auto"]
TURN_TYPES: tuple[TurnType, ...] = ("server_vad", "semantic_vad")
EAGERNESS: tuple[Eagerness, ...] = ("low", "medium", "high", "auto")


@dataclass(frozen=True, slots=True)
class TurnDetection:
    """The server ends user turns and may interrupt responses.

    Under ``semantic_vad`` the VAD still uses ``threshold`` and
    ``prefix_padding_ms`` (their defaults: a client cannot set them there);
    ``silence_duration_ms`` is replaced by the end-of-turn decision.
    """

    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    create_response: bool = True
    interrupt_response: bool = True
    idle_timeout_ms: int | None = None
    type: TurnType = "server_vad"
    eagerness: Eagerness = "auto"

    @property
    def semantic(self) -> bool:
        return self.type == "semantic_vad"

    def wire(self) -> dict[str, object]:
        if self.semantic:
            return {"type": self.type, "eagerness": self.eagerness,
                    "create_response": self.create_response,
                    "interrupt_response": self.interrupt_response}
        return {
            "type": "server_vad",
            "threshold": self.threshold,
            "prefix_padding_ms": self.prefix_padding_ms,
            "silence_duration_ms": self.silence_duration_ms,
            "create_response": self.create_response,
            "interrupt_response": self.interrupt_response,
            "idle_timeout_ms": self.idle_timeout_ms,
        }


def _idle_timeout(obj: Mapping[str, Any], current: int | None, param: str) -> int | None:
    value = obj.get("idle_timeout_ms", current)  # an explicit null turns it off
    if value is None:
        return None
    return int(f.number({"idle_timeout_ms": value}, "idle_timeout_ms", 0, 0, 2**31 - 1,
                        param, integer=True))


def parse_turn_detection(
    value: object, current: TurnDetection | None, param: str
) -> TurnDetection | None:
    """The turn detection after an update of ``param`` to ``value`` (null: none)."""
    if value is None:
        return None
    obj = f.obj(value, param)
    kind = cast(TurnType, f.choice(obj, "type", current.type if current else "server_vad",
                                   TURN_TYPES, param))
    base = current if current is not None and current.type == kind else TurnDetection(
        type=kind)
    create = f.flag(obj, "create_response", base.create_response, param)
    interrupt = f.flag(obj, "interrupt_response", base.interrupt_response, param)
    if base.semantic:
        eagerness = cast(Eagerness, f.choice(obj, "eagerness", base.eagerness, EAGERNESS,
                                             param))
        return TurnDetection(type="semantic_vad", eagerness=eagerness,
                             create_response=create, interrupt_response=interrupt)
    return TurnDetection(
        threshold=f.number(obj, "threshold", base.threshold, 0.0, 1.0, param),
        prefix_padding_ms=int(f.number(obj, "prefix_padding_ms", base.prefix_padding_ms,
                                       0, 5000, param, integer=True)),
        silence_duration_ms=int(f.number(obj, "silence_duration_ms",
                                         base.silence_duration_ms, 0, 10000, param,
                                         integer=True)),
        idle_timeout_ms=_idle_timeout(obj, base.idle_timeout_ms, param),
        create_response=create, interrupt_response=interrupt,
    )
