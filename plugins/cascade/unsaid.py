"""Optional free text nobody said is left out of a call's arguments, sans-I/O.

A small model fills an optional free-text argument it was not given: typed,
"I'd like to hear some classical music." was called ``play_music(artist
"Beethoven", genre classical)``, "While I wait, play some pop music." with
``artist "The Beatles"`` (bench/README.md, ``tool_quiz``, 2026-12-04): a call
that plays what nobody asked for. No call sentence or bias moved it: the call
is right to make, its extra argument is not.

The rule (``without_unsaid``): in a call's arguments, an *optional free-text*
property (a string with no ``enum``, ``const``, ``format`` or ``pattern``, not
in ``required``) is kept only when its value is something said: a run of
consecutive words of ``said`` (the instructions, the user's turns, the tools'
outputs: ``tool_calls.said``), compared squeezed as the examples rule compares
(``grammar.squeezed``: case, spaces and punctuation aside, so "taylor swift"
said keeps ``Taylor Swift`` and "AC DC" keeps ``AC/DC``; a leading "the" is
no word of the value). And a said word fills one property: a value the same
as another argument's of the same object (squeezed) is left out, the other
keeping it when it is constrained (an enum, a const, a required property) or
came first: "Play some jazz." was ``play_music(artist "Jazz", genre jazz)``,
"jazz" said once and written twice.

Leaving an optional property out keeps the call valid (the grammar held it to
its schema) unless the object's schema ties its properties together
(``minProperties``, dependencies, ``anyOf`` …): such an object is left as the
model wrote it. Required properties keep today's rule: they may be
normalised ("BA 117" → ``BA117``), which the grammar and the client's schema
govern. Not a grammar: a grammar constrains a value only after the model has
written the property's name, so it could make "Beethoven" a said word but
never make the model leave ``artist`` out (bench/README.md measures what the
model then writes).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from plugins.cascade.grammar import squeezed

# object keywords that tie properties together: leaving one out could break them
_TIED = ("minProperties", "dependentRequired", "dependentSchemas", "dependencies",
         "anyOf", "oneOf", "allOf", "if", "not")
# what makes a string no free text: a fixed set, or a form the value is normalised to
_FIXED = ("enum", "const", "format", "pattern")
_WORD = re.compile(r"[0-9a-z]+")


def said_words(text: str) -> list[str]:
    """``text``'s words as the rule compares them: lower case, letters and digits."""
    return _WORD.findall(text.lower())


def is_said(value: str, words: Sequence[str]) -> bool:
    """Whether ``value`` (squeezed, a leading "the" aside) is a run of
    consecutive ``words`` (``said_words``) joined."""
    target = squeezed(value)
    bare = squeezed(re.sub(r"^\s*the\b", "", value, flags=re.IGNORECASE))
    return any(_a_run(t, words) for t in {target, bare} if t)


def _a_run(target: str, words: Sequence[str]) -> bool:
    for i, first in enumerate(words):
        if not target.startswith(first):
            continue
        joined = ""
        for word in words[i:]:
            joined += word
            if joined == target:
                return True
            if not target.startswith(joined):
                break
    return False


def without_unsaid(arguments: str, schema: Any, said: str) -> str:
    """``arguments`` (a call's JSON object text) without the optional free-text
    values that were not said or repeat another argument's; the text as it was
    when nothing is left out."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    if not isinstance(value, dict):
        return arguments
    kept = _kept(value, schema, said_words(said))
    return arguments if kept == value else json.dumps(kept, ensure_ascii=False)


def _kept(value: dict[str, Any], schema: Any, words: Sequence[str]) -> dict[str, Any]:
    if not isinstance(schema, Mapping) or any(k in schema for k in _TIED):
        return value
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return value
    required = schema.get("required")
    needed = set(required) if isinstance(required, list) else set()
    free = {k for k, v in value.items() if isinstance(v, str) and k not in needed
            and _free_text(properties.get(k))}
    # the constrained values claim their words first, then the free text in order
    claimed = {squeezed(v) for k, v in value.items() if isinstance(v, str) and k not in free}
    kept: dict[str, Any] = {}
    for key, item in value.items():
        if key in free:
            text = squeezed(item)
            if text in claimed or not is_said(item, words):
                continue
            claimed.add(text)
        elif isinstance(item, dict):
            item = _kept(item, properties.get(key), words)
        kept[key] = item
    return kept


def _free_text(schema: Any) -> bool:
    return (isinstance(schema, Mapping) and schema.get("type") == "string"
            and not any(k in schema for k in _FIXED))
