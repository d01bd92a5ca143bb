"""What the listener heard of a turn, and whether it is sure enough to act on.

Whisper's beam search scores its best hypothesis by the mean log-probability
of its tokens (CTranslate2's ``scores[0]``, length-normalised). A low score
is the recognizer saying it was guessing ("What is the capital of Egypt?" →
"What is the capital immediately?", -0.57). A turn scored below the threshold
is *unsure*: the thinker does not act on it (no answer built on the wrong
words, no tool called with them) but asks the user to say it again
(``plugins.cascade.thinker.SAY_AGAIN``). On held-out spoken questions and the
tool quiz's requests (``bench/asr_confidence.py``; bench/README.md "Listener:
unsure turns") -0.5 caught about half to four fifths of the mishearings, and
asked again for 3-13 % of the turns heard right.

``DUPLEX_GATEWAY_ASR_UNSURE_BELOW`` sets the threshold: a log-probability
(at most 0; ``UNSURE_BELOW`` by default), or ``off``. A recognizer that gives
no score (a speech server apart, ``--asr-url``) is always taken at its word.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

UNSURE_BELOW_ENV = "DUPLEX_GATEWAY_ASR_UNSURE_BELOW"
# Chosen on the held-out test's seed 0 alone: 17 of its 31 mishearings below it,
# 2 of its 69 clips heard right (bench/README.md "Listener: unsure turns").
UNSURE_BELOW = -0.5
OFF = "off"


@dataclass(frozen=True, slots=True)
class Heard:
    """A turn's words and the recognizer's score for them: the mean token
    log-probability of its best hypothesis (None: not known)."""

    text: str
    score: float | None = None


def unsure_below(value: str | None) -> float | None:
    """The threshold ``DUPLEX_GATEWAY_ASR_UNSURE_BELOW`` gives: unset or empty,
    the default; ``off``, None (every turn is taken at its word)."""
    if value is None or not value.strip():
        return UNSURE_BELOW
    if value.strip().lower() == OFF:
        return None
    try:
        below = float(value)
    except ValueError:
        below = math.nan
    if not math.isfinite(below) or below > 0:
        raise ValueError(f"{UNSURE_BELOW_ENV}={value!r}: a log-probability (a number at most "
                         f"0, e.g. {UNSURE_BELOW}), or {OFF!r}")
    return below


def is_unsure(heard: Heard, below: float | None) -> bool:
    """Whether words were heard but scored below ``below`` (None: never).
    Nothing heard is not unsure: the thinker has its own line for that."""
    return (below is not None and heard.score is not None and bool(heard.text.strip())
            and heard.score < below)
