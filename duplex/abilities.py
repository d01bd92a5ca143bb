"""What the model behind a session can do, as its plugin declares it
(``plugins.base.Capabilities``): a request for anything else is refused with an
error naming the field, never silently dropped."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from duplex.errors import InvalidRequest


@dataclass(frozen=True, slots=True)
class ModelAbilities:
    tools: bool = True  # it calls function tools
    response_input: bool = True  # it answers a response.create from its own input
    output_modes: tuple[str, ...] = ("audio", "text")  # the modalities it replies in

    def check_tools(self, tools: Sequence[object], param: str) -> None:
        if tools and not self.tools:
            raise InvalidRequest("This model cannot call tools: the gateway's model plugin "
                                 "does not support function calling.", code="invalid_value",
                                 param=param)

    def check_modes(self, modes: Sequence[str], param: str) -> None:
        for mode in modes:
            if mode not in self.output_modes:
                raise InvalidRequest(f"This model cannot reply in {mode}: the gateway's model "
                                     f"plugin replies in {' and '.join(self.output_modes)}.",
                                     code="invalid_value", param=param)

    def check_input(self, given: Sequence[Mapping[str, Any]] | None) -> None:
        if given is not None and not self.response_input:
            raise InvalidRequest("This model cannot answer from a response's own input: the "
                                 "gateway's model plugin replies from the conversation only.",
                                 code="invalid_value", param="response.input")
