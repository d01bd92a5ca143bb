"""The end-of-turn decision: how much silence ends the user's turn.

``server_vad`` ends a turn after a fixed ``silence_duration_ms``. ``semantic_vad``
(OpenAI's name) adapts the window to two things:

* **eagerness**, the client's say in how soon to answer. Base windows:
  ``high`` 350 ms, ``medium``/``auto`` 700 ms, ``low`` 1200 ms. Why these: 350
  ms is a little over the 200–300 ms gap people leave between turns, so a
  fast client answers about as soon as a person would; 700 ms outlasts most
  pauses inside a turn (breaths, word searches run 200–600 ms), which is why
  OpenAI's fixed default of 500 ms cuts some speakers off; 1200 ms waits out
  a thinking pause. Each window is bounded by OpenAI's longest semantic
  wait for that eagerness (``high`` 2 s, ``medium``/``auto`` 4 s, ``low`` 8 s).
* **the words so far**, when the plugin's VAD knows them (``plugins.base.
  WordsSoFar``): words that look *finished* (terminal punctuation, a closer
  such as "thanks") shrink the window to 0.3× (``high`` and ``medium``/``auto``
  then end at about ``MIN_WINDOW_MS``, the floor: a person answers a finished
  question after about 200 ms); words that look *unfinished* (a trailing
  conjunction, preposition, article or filler: "and", "to", "the", "um"; a
  comma; a trailing "...") stretch it 2.5×. Anything else, or no words, keeps
  the base window. A recogniser punctuates what it hears, cut off or not
  (Whisper hears "what is the capital of" as "What is the capital of?"), so a
  terminal mark after a word that never ends a sentence (an article, a
  conjunction, a filler) still dangles, and after a preposition says nothing
  either way ("Who are you talking to?" is finished, "the capital of?" is not).

The decision is a pure function of (type, eagerness, words), table-tested in
``tests/unit/test_turn_end.py``.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from duplex.config import TurnDetection

BASE_WINDOW_MS = {"high": 350, "medium": 700, "auto": 700, "low": 1200}
MAX_WINDOW_MS = {"high": 2000, "medium": 4000, "auto": 4000, "low": 8000}
MIN_WINDOW_MS = 200  # shorter than this cuts words at their stop consonants
FINISHED_FACTOR = 0.3
UNFINISHED_FACTOR = 2.5


class Completeness(enum.Enum):
    FINISHED = "finished"
    UNFINISHED = "unfinished"
    UNKNOWN = "unknown"


# Words after which an English utterance is almost never over.
DANGLING = frozenset("""
    and but or nor so because cause if then than that which who whom whose when where while
    although though unless until since as whether
    to of in on at for with from about into onto over under by through between after before
    without like
    the a an my your his her its our their this these those some any every
    is are was were am be been i'm i we you he she they it's there's can could will would
    should must might may do does did have has had
    um uh er erm hmm mm uhm ah eh well
""".split())
# Of those, the words that end no sentence, punctuated or not (prepositions may:
# "Where are you from?").
_NEVER_LAST = frozenset("""
    and but or nor because although though unless whether
    the a an my your our their its every
    um uh er erm hmm uhm
""".split())
_PREPOSITIONS = frozenset("""
    to of in on at for with from about into onto over under by through between after before
    without like
""".split())
# Short turns that are complete on their own, punctuated or not.
_CLOSERS = frozenset("""
    thanks thank-you please bye goodbye yes yeah yep no nope okay ok sure right done
""".split())
_TRAILING_OFF = re.compile(r"(\.\.\.|…|[,;:\-–—])$")
_TERMINAL = re.compile(r"[.?!。？！]$")
_WORD = re.compile(r"[a-z']+(?:-[a-z']+)*")


def completeness(words: str) -> Completeness:
    """Whether the words so far of a turn look finished (deterministic, English)."""
    text = words.strip().strip("\"')]}»”’").rstrip()
    if not text:
        return Completeness.UNKNOWN
    if _TRAILING_OFF.search(text):
        return Completeness.UNFINISHED
    tokens = _WORD.findall(text.lower().replace("thank you", "thank-you"))
    last = tokens[-1] if tokens else ""
    if _TERMINAL.search(text):
        if last in _NEVER_LAST:
            return Completeness.UNFINISHED
        return Completeness.UNKNOWN if last in _PREPOSITIONS else Completeness.FINISHED
    if last in DANGLING:
        return Completeness.UNFINISHED
    if last in _CLOSERS:
        return Completeness.FINISHED
    return Completeness.UNKNOWN


def semantic_window_ms(eagerness: str, words: str) -> int:
    """The silence that ends a ``semantic_vad`` turn after ``words``."""
    base = BASE_WINDOW_MS[eagerness]
    match completeness(words):
        case Completeness.FINISHED:
            return max(MIN_WINDOW_MS, round(base * FINISHED_FACTOR))
        case Completeness.UNFINISHED:
            return min(MAX_WINDOW_MS[eagerness], round(base * UNFINISHED_FACTOR))
    return base


@dataclass(frozen=True, slots=True)
class TurnEnd:
    """One session's rule for the silence that ends a turn."""

    semantic: bool
    eagerness: str
    silence_ms: int  # server_vad's fixed window

    @classmethod
    def of(cls, turn_detection: TurnDetection) -> TurnEnd:
        return cls(turn_detection.semantic, turn_detection.eagerness,
                   turn_detection.silence_duration_ms)

    def window_ms(self, words: str) -> int:
        """The window after ``words`` (a partial transcript; "" when unknown).

        ``server_vad`` ignores the words: a client that asked for a fixed
        window gets exactly that."""
        return semantic_window_ms(self.eagerness, words) if self.semantic else self.silence_ms
