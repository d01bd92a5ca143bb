"""The turn markers of a chat template, and keeping text from outside from
forging them: the one thing the thinker knows of the model's prompt format."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ChatMarkup:
    """The turn markers of the model's chat template (ChatML for SmolLM2)."""

    start: str = "<|im_start|>"
    end: str = "<|im_end|>"
    specials: tuple[str, ...] = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")

    def turn(self, role: str, text: str) -> str:
        return f"{self.start}{role}\n{text}{self.end}\n"

    def opening(self, role: str) -> str:
        return f"{self.start}{role}\n"

    @property
    def closing(self) -> str:
        return f"{self.end}\n"

    def scrub(self, text: str) -> str:
        """Text from outside (a transcript, a client) must not forge markers."""
        for marker in self.specials:
            text = text.replace(marker, "")
        return text


CHATML = ChatMarkup()
