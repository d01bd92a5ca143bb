"""The tone plugin's deterministic "language": what it says and how long.

Tests steer the reply length by how long they speak (one word per 200 ms of
speech, 3 to 60) or exactly with ``words=K`` in the instructions.
"""

from __future__ import annotations

import re

MS_PER_WORD = 200
MIN_WORDS, MAX_WORDS = 3, 60
MAX_INSTRUCTED_WORDS = 400
CLAUSE_WORDS = 4

_WORDS_RE = re.compile(r"\bwords=(\d+)")
_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen "
    "fourteen fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def number_word(n: int) -> str:
    """English for 0 ≤ n ≤ 999 as ONE token (hyphenated), so word counts stay exact."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + (f"-{_ONES[ones]}" if ones else "")
    hundreds, rest = divmod(n, 100)
    return f"{_ONES[hundreds]}-hundred" + (f"-{number_word(rest)}" if rest else "")


def word_count(speech_ms: int, instructions: str) -> int:
    """How many number words the reply has."""
    match = _WORDS_RE.search(instructions)
    if match:
        return min(max(int(match.group(1)), 1), MAX_INSTRUCTED_WORDS)
    return min(max(speech_ms // MS_PER_WORD, MIN_WORDS), MAX_WORDS)


def reply_words(turn_id: int, count: int) -> list[str]:
    """``answer to turn N:`` followed by ``one two three …`` (``count`` of them)."""
    return ["answer", "to", "turn", f"{turn_id}:"] + [number_word(i) for i in range(1, count + 1)]


def clauses(words: list[str]) -> list[str]:
    """The reply cut into clauses of ``CLAUSE_WORDS`` words (the last may be shorter)."""
    return [" ".join(words[i : i + CLAUSE_WORDS]) for i in range(0, len(words), CLAUSE_WORDS)]


def transcript(turn_id: int, speech_ms: int) -> str:
    """What the listener "recognised" in a user turn."""
    return f"tone turn {turn_id}, {speech_ms} ms of speech"
