"""JSON Schema → GBNF (llama.cpp's grammar format), for constrained tool calls.

Sans-I/O: text in, text out. ``schema_grammar(schema)`` gives the rules of a
grammar whose sentences are JSON texts that validate against ``schema``, for
the part of JSON Schema that tool parameters use in practice: objects with
``properties`` and ``required``, strings, numbers, integers, booleans,
``null``, ``enum``/``const``, arrays of ``items``, nested objects, ``anyOf``/
``oneOf`` and lists of types. Anything else (``$ref``, ``pattern``, formats,
bounds) is not enforced: such a schema, or such a part of one, becomes any
JSON value of its type (or any value at all), which the client's own
validation still sees. Erring towards permissive keeps a call possible; a
grammar that excludes a valid call would force an invalid one.

Objects emit their properties in the schema's order (required and optional
alike; an optional one may be left out) and take no others: the model has to
write them in one order anyway, and the schema's is the one it reads.

``call_grammar`` wraps the argument grammars into the text of whole calls in
the Qwen2.5/Hermes format (``<tool_call>{"name": ..., "arguments": ...}</tool_call>``).

**Examples are not values.** Given what the user said (``said``), a string
whose schema shows examples (its ``examples``, or "e.g. Paris" in its
description: ``shown_examples``) may not start with one the user never said
(compared squeezed: case, spaces and punctuation aside, so "BA 117" said
allows "BA117"). A small model asked for a city it was not told filled in the
description's example: "Good morning! What's your name?" → ``get_weather(Paris)``,
a misheard "I need a jacket in volume" → ``lookup_flight(BA117)``
(bench/README.md, ``tool_quiz``). The grammar makes that impossible rather
than less likely; a prefix is barred, not only the exact text, so "Paris,
France" is out too, and so is leading white space (" Paris").
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

# Bounded white space: an unbounded ``[ \t\n]*`` lets a greedy model pad forever.
_PRIMITIVES: dict[str, str] = {
    "ws": "[ \\t\\n]{0,3}",
    "string": '"\\"" char* "\\""',
    "char": '[^"\\\\\\x00-\\x1f] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4})',
    "integer": '"-"? ("0" | [1-9] [0-9]{0,17})',
    # a double's shortest form has up to 17 significant digits, after up to three
    # zeros (0.0001…: below 1e-4 it takes an exponent): 20 after the point
    "number": 'integer ("." [0-9]{1,20})? ([eE] [-+]? [0-9]{1,3})?',
    "boolean": '"true" | "false"',
    "null": '"null"',
    "value": "object | array | string | number | boolean | null",
    "object": '"{" ws (string ws ":" ws value (ws "," ws string ws ":" ws value)*)? ws "}"',
    "array": '"[" ws (value (ws "," ws value)*)? ws "]"',
}
# What each primitive needs defined with it.
_NEEDS: dict[str, tuple[str, ...]] = {
    "string": ("char",), "number": ("integer",),
    "value": ("object", "array", "string", "number", "boolean", "null"),
    "object": ("ws", "string", "value"), "array": ("ws", "value"),
}
_TYPES = ("string", "number", "integer", "boolean", "null", "object", "array")


def _json(value: Any) -> str:
    """JSON as a model writes it: non-ASCII as itself, not ``\\u`` escapes."""
    return json.dumps(value, ensure_ascii=False)


def literal(text: str) -> str:
    """``text`` as a GBNF string literal."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = escaped.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return f'"{escaped}"'


_EXAMPLE = re.compile(r"(?:\be\.\s?g\.|\bfor (?:example|instance)\b|\bsuch as\b)[,:]?\s*"
                      r"(.+?)\s*(?:[.;)]+(?:\s|$)|$)", re.IGNORECASE)
_PARTS = re.compile(r",|\bor\b|/")


def squeezed(text: str) -> str:
    """``text`` for comparing values the way a user says them: lower case,
    letters and digits only."""
    return re.sub(r"[^0-9a-z]", "", text.lower())


def shown_examples(schema: Mapping[str, Any]) -> list[str]:
    """The strings ``schema`` shows as examples: its ``examples`` and what its
    description gives after "e.g.", "for example" or "such as" (whole, and each
    part between commas and "or"s), quotes taken off."""
    found = [e for e in schema.get("examples") or () if isinstance(e, str)]
    description = schema.get("description")
    for match in _EXAMPLE.finditer(description if isinstance(description, str) else ""):
        whole = match.group(1)
        found += [whole, *_PARTS.split(whole)]
    return [e.strip().strip("'\"`").strip() for e in found]


def _barrable(example: str) -> bool:
    """Whether the grammar can bar ``example``: printable ASCII with no quote or
    backslash (a JSON string writes those escaped), 3 letters or digits at least
    (barring "CA" would bar half the cities)."""
    return (len(squeezed(example)) >= 3 and example.isascii() and example.isprintable()
            and not any(c in example for c in '"\\'))


def _in_class(ch: str) -> str:
    """``ch`` (either case, for a letter) inside a GBNF character class."""
    return f"{ch}{ch.upper()}" if ch.isalpha() else f"\\x{ord(ch):02x}"


class GrammarBuilder:
    """Collects rules; ``schema(s, name)`` returns an expression for ``s``.
    ``said``: what the user said, squeezed (``squeezed``); None: no example is
    barred."""

    def __init__(self, said: str | None = None) -> None:
        self.rules: dict[str, str] = {}
        self.said = said

    def primitive(self, name: str) -> str:
        if name not in self.rules:
            self.rules[name] = _PRIMITIVES[name]
            for need in _NEEDS.get(name, ()):
                self.primitive(need)
        return name

    def rule(self, hint: str, body: str) -> str:
        """A new rule named after ``hint`` (made unique) for ``body``."""
        base = re.sub(r"[^a-zA-Z0-9-]+", "-", hint).strip("-").lower() or "r"
        name, n = base, 1
        while name in self.rules or name in _PRIMITIVES:
            n += 1
            name = f"{base}-{n}"
        self.rules[name] = body
        return name

    def render(self) -> str:
        return "".join(f"{name} ::= {body}\n" for name, body in self.rules.items())

    # -- schemas -----------------------------------------------------------------

    def schema(self, schema: Any, name: str) -> str:
        if not isinstance(schema, Mapping):  # true, {} and the like: anything
            return self.primitive("value")
        if "const" in schema:
            return literal(_json(schema["const"]))
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return "(" + " | ".join(literal(_json(v)) for v in schema["enum"]) + ")"
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                parts = [self.schema(o, f"{name}-{i}") for i, o in enumerate(options)]
                return "(" + " | ".join(parts) + ")"
        kind = schema.get("type")
        if isinstance(kind, list):
            kinds = [k for k in kind if k in _TYPES]
            if not kinds:
                return self.primitive("value")
            parts = [self._typed({**schema, "type": k}, k, f"{name}-{k}") for k in kinds]
            return "(" + " | ".join(parts) + ")"
        if kind is None:
            kind = ("object" if "properties" in schema
                    else "array" if "items" in schema else None)
        if kind not in _TYPES:
            return self.primitive("value")
        return self._typed(schema, kind, name)

    def _typed(self, schema: Mapping[str, Any], kind: str, name: str) -> str:
        if kind == "object":
            return self._object(schema, name)
        if kind == "array":
            return self._array(schema, name)
        if kind == "string" and self.said is not None:
            unsaid = [e.lower() for e in shown_examples(schema)
                      if _barrable(e) and squeezed(e) not in self.said]
            if unsaid:
                return self._string_not_starting(unsaid, name)
        return self.primitive(kind)

    def _string_not_starting(self, barred: Sequence[str], name: str) -> str:
        """A JSON string that starts with none of ``barred`` (lower case; either
        case is barred) nor with white space: a trie of them, where each node
        may end the string, go on with a character that leaves the trie, or
        follow one of its branches; a node that completes a barred word is no
        node at all (its branch is cut)."""
        trie: dict[str, Any] = {}
        for word in barred:
            node = trie
            for ch in word:
                node = node.setdefault(ch, {})
            node.clear()
            node[""] = True  # a barred word ends here: nothing may follow
        self.primitive("char")
        return self.rule(name, f'"\\"" {self._trie(trie, f"{name}-not", first=True)}')

    def _trie(self, node: Mapping[str, Any], name: str, *, first: bool = False) -> str:
        branches = sorted(ch for ch in node if ch)
        banned = "".join(map(_in_class, branches)) + (" " if first else "")
        leave = (f'([^"\\\\\\x00-\\x1f{banned}] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{{4}})) '
                 'char* "\\""')
        options = ['"\\""', leave]
        for i, ch in enumerate(branches):
            if "" in node[ch]:
                continue  # the barred word itself: its character is left out above
            either = f"[{_in_class(ch)}]" if ch.isalpha() else literal(ch)
            options.append(f"{either} {self._trie(node[ch], f'{name}-{i}')}")
        return self.rule(name, " | ".join(options))

    def _array(self, schema: Mapping[str, Any], name: str) -> str:
        items = schema.get("items")
        if not isinstance(items, Mapping):
            return self.primitive("array")
        ws = self.primitive("ws")
        item = self.schema(items, f"{name}-item")
        return self.rule(name, f'"[" {ws} ({item} ({ws} "," {ws} {item})*)? {ws} "]"')

    def _object(self, schema: Mapping[str, Any], name: str) -> str:
        properties = schema.get("properties")
        if not isinstance(properties, Mapping) or not properties:
            return self.primitive("object")
        required = schema.get("required")
        needed = set(required) if isinstance(required, list) else set()
        ws = self.primitive("ws")
        pairs = [(self._pair(key, sub, f"{name}-{key}"), key in needed)
                 for key, sub in properties.items()]
        return self.rule(name, f'"{{" {ws} {self._members(pairs, name)} {ws} "}}"')

    def _pair(self, key: str, schema: Any, name: str) -> str:
        ws = self.primitive("ws")
        value = self.schema(schema, name)
        return self.rule(f"{name}-kv", f'{literal(_json(key))} {ws} ":" {ws} {value}')

    def _members(self, pairs: Sequence[tuple[str, bool]], name: str) -> str:
        """The properties in order, an optional one skippable, commas only
        between the ones written. Built from the end: ``after`` is what may
        follow property ``i - 1`` once something was written (each one with its
        comma), ``some`` the non-empty lists that start at ``i`` or later."""
        ws = self.primitive("ws")
        after = ""
        some = ""
        for i in range(len(pairs) - 1, -1, -1):
            pair, needed = pairs[i]
            starts_here = f"{pair} {after}".strip()
            if needed:  # every list from here on starts with it
                some = self.rule(f"{name}-some{i}", starts_here)
                if i:  # the first property is never after another
                    after = self.rule(f"{name}-after{i}", f'{ws} "," {ws} {starts_here}')
            else:
                some = self.rule(f"{name}-some{i}",
                                 f"{starts_here} | {some}" if some else starts_here)
                if i:
                    after = self.rule(f"{name}-after{i}",
                                      f'({ws} "," {ws} {pair})? {after}'.strip())
        if any(needed for _, needed in pairs):
            return some
        return f"({some})?"


def schema_grammar(schema: Any, root: str = "root", said: str | None = None) -> str:
    """A whole grammar (rules text) whose ``root`` is JSON valid under ``schema``
    (and, given ``said``, whose strings take no example the user did not say)."""
    builder = GrammarBuilder(None if said is None else squeezed(said))
    expr = builder.schema(schema, f"{root}-value")
    builder.rules = {root: expr, **builder.rules}
    return builder.render()


def call_grammar(tools: Sequence[tuple[str, Any]], *, max_calls: int = 4,
                 bare: bool = False, said: str | None = None) -> str:
    """A grammar of 1 to ``max_calls`` calls, each ``<tool_call>{"name": N,
    "arguments": A}</tool_call>`` with N one of ``tools``' names (each given as
    ``(name, parameters schema)``) and A valid under its schema. ``bare``: calls
    without the tags (as many) are a sentence too (a lazy grammar triggered by
    ``{"name"``, which is how a small model often starts a call). ``said``: the
    user's words, whose absent examples the arguments may not take."""
    builder = GrammarBuilder(None if said is None else squeezed(said))
    ws = builder.primitive("ws")
    calls = []
    for i, (name, schema) in enumerate(tools):
        args = builder.schema(schema, f"args{i}")
        head = f'"{{" {ws} {literal(_json("name"))} {ws} ":" {ws} {literal(_json(name))}'
        calls.append(builder.rule(
            f"call{i}", f'{head} {ws} "," {ws} {literal(_json("arguments"))} {ws} ":" '
                        f'{ws} {args} {ws} "}}"'))
    call = builder.rule("call", " | ".join(calls))
    tagged = builder.rule("tagged", f'"<tool_call>" {ws} {call} {ws} "</tool_call>"')
    root = _repeated(tagged, ws, max_calls)
    if bare:
        root += f" | {_repeated(call, ws, max_calls)}"
    builder.rules = {"root": root, **builder.rules}
    return builder.render()


def _repeated(rule: str, ws: str, most: int) -> str:
    """1 to ``most`` of ``rule``, white space between."""
    return f"{rule} ({ws} {rule}){{0,{most - 1}}}" if most > 1 else rule
