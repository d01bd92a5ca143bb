"""The reply cut into speakable clauses as it streams, Markdown removed (the
thinker's output for the talker; moved here from ``plugins.cascade.thinker``)."""

from __future__ import annotations

import re

from plugins.turn_end import DANGLING

_ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "st", "vs", "etc", "e.g", "i.e", "jr", "sr",
                            "prof", "no", "approx"})
_CLOSERS = "\"')]»”’"
_LINE_MARKER = re.compile(r"^[ \t]*(?:#{1,6}[ \t]*|[-*+•][ \t]+|\d{1,3}[.)][ \t]+)")
_INNER_LINE_MARKER = re.compile(r"\n[ \t]*(?:#{1,6}[ \t]*|[-*+•][ \t]+|\d{1,3}[.)][ \t]+)?")
_EMPHASIS = re.compile(r"(?<!\w)[*_](?=\S)|(?<=\S)[*_](?!\w)")
# a number leaves its noun to come ("eight | legs"), like a DANGLING word
_NUMBERS = frozenset("""
    one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen
    sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety
    hundred thousand million billion several many few
""".split())
_LIST_NUMBER = re.compile(r"(?:^|\n)[ \t]*\d{1,3}$")


def clean_markdown(text: str) -> str:
    """Drop what TTS should not read: headings, bullets, list numbers, bold and
    italic markers, backticks; newlines become spaces."""
    text = _LINE_MARKER.sub("", text)
    text = _INNER_LINE_MARKER.sub(" ", text)
    text = text.replace("**", "").replace("__", "").replace("`", "")
    text = _EMPHASIS.sub("", text)
    return re.sub(r"\s+", " ", text)


class ClauseSplitter:
    """Cuts streamed text into speakable clauses as soon as each is complete.

    A clause ends after ``. ? ! ; :`` followed by white space (so ``3.5``,
    ``3:30`` and ``e.g.`` do not cut), after ``,`` once the clause has
    ``min_comma_words`` words, at a line break, or at white space once it has
    ``max_words``. The white space between clauses starts the next clause, so
    the clauses concatenate to the (cleaned) text.

    The first clause of a reply is cut sooner (``first_max_words``, and commas
    after two words): the user waits for it, and each word less is a token
    less to generate before any sound (≈35–40 ms for Qwen 1.5B on 2 cores)
    and a shorter synthesis; later clauses are spoken while the next is made.
    Its cut waits for a word that can end a phrase: after "of", "the", "is"
    or a number the voice would close a phrase still open ("The capital of
    | France"), so such a word (``plugins.turn_end.DANGLING``, ``_NUMBERS``)
    takes the next one with it.
    """

    def __init__(self, *, min_comma_words: int = 4, max_words: int = 24,
                 first_max_words: int = 4, first_min_comma_words: int = 2) -> None:
        self._min_comma_words = min_comma_words
        self._max_words = max_words
        self._first_max_words = first_max_words
        self._first_min_comma_words = first_min_comma_words
        self._buf = ""
        self._spoken = False  # a clause went out: later ones keep their leading space

    def push(self, delta: str) -> list[str]:
        self._buf += delta
        clauses: list[str] = []
        while (cut := self._find_cut()) is not None:
            raw, self._buf = self._buf[:cut], self._buf[cut:]
            text = self._render(raw)
            if text.strip():
                clauses.append(text)
        return clauses

    def finish(self) -> str:
        """The rest of the text (possibly ""), right-stripped; resets the splitter."""
        text = self._render(self._buf).rstrip()
        self._buf = ""
        return text

    def _render(self, raw: str) -> str:
        text = clean_markdown(raw).strip()
        if not text:
            return ""
        lead = " " if self._spoken and raw[:1].isspace() else ""
        self._spoken = True
        return lead + text

    def _find_cut(self) -> int | None:
        buf = self._buf
        max_words = self._max_words if self._spoken else self._first_max_words
        min_comma = self._min_comma_words if self._spoken else self._first_min_comma_words
        words = 0
        in_word = False
        for i, ch in enumerate(buf):
            if ch.isspace():
                if in_word:
                    words += 1
                in_word = False
                if ch == "\n" and buf[:i].strip():
                    return i
                if words >= self._max_words or (
                        words >= max_words and (self._spoken or not _dangles(buf[:i]))):
                    return i
                continue
            in_word = True
            if ch in ".?!;:":
                end = i + 1
                while end < len(buf) and buf[end] in _CLOSERS:
                    end += 1
                if end >= len(buf):
                    return None  # need what follows to decide
                if not buf[end].isspace():
                    continue
                if ch == "." and self._not_a_stop(buf[:i]):
                    continue
                if ch in ";:" or (ch in ".?!" and buf[:i].strip()):
                    return end
            elif ch == ",":
                if i + 1 >= len(buf):
                    return None
                if buf[i + 1].isspace() and words + 1 >= min_comma:
                    return i + 1
        return None

    @staticmethod
    def _not_a_stop(before: str) -> bool:
        """A '.' after an abbreviation or a list number does not end a clause."""
        if _LIST_NUMBER.search(before):
            return True
        last = before.rsplit(None, 1)[-1].lower() if before.strip() else ""
        return last.strip("(\"'") in _ABBREVIATIONS




def _dangles(before: str) -> bool:
    """The last word of ``before`` leaves a phrase open (an article, a
    preposition, a conjunction, an auxiliary, a number)."""
    words = before.split()
    if not words:
        return False
    last = words[-1].lower().strip("\"'()*_`")
    return last in DANGLING or last in _NUMBERS or last.isdigit()
