"""A GBNF grammar as a Python regex, for checking generated grammars without a
model: the subset ``plugins.cascade.grammar`` writes (literals, character
classes, rule references, groups, alternation, ``? * +`` and ``{m,n}``).
Recursive rules are unrolled ``depth`` times (deeper nesting then fails to
match), which is plenty for test instances."""

from __future__ import annotations

import re

_TOKEN = re.compile(r'\s*(?:(?P<lit>"(?:[^"\\]|\\.)*")|(?P<cls>\[(?:[^\]\\]|\\.)*\])'
                    r"|(?P<name>[a-zA-Z0-9-]+)|(?P<rep>\{\d+(?:,\d*)?\})|(?P<op>[()|?*+]))")


def _unescape(body: str) -> str:
    out, i = [], 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt == "x":
            out.append(chr(int(body[i + 2:i + 4], 16)))
            i += 4
        elif nxt == "u":
            out.append(chr(int(body[i + 2:i + 6], 16)))
            i += 6
        else:
            out.append({"n": "\n", "t": "\t", "r": "\r"}.get(nxt, nxt))
            i += 2
    return "".join(out)


def _char_class(text: str) -> str:
    body = text[1:-1]
    negate = body.startswith("^")
    chars = _unescape(body[1:] if negate else body)
    parts, i = [], 0
    while i < len(chars):
        if i + 2 < len(chars) and chars[i + 1] == "-":
            parts.append(f"{re.escape(chars[i])}-{re.escape(chars[i + 2])}")
            i += 3
        else:
            parts.append(re.escape(chars[i]))
            i += 1
    return "[" + ("^" if negate else "") + "".join(parts) + "]"


class GbnfRegex:
    def __init__(self, grammar: str, depth: int = 4) -> None:
        self.rules: dict[str, list[tuple[str, str]]] = {}
        for line in grammar.strip().splitlines():
            name, _, body = line.partition("::=")
            tokens = [(m.lastgroup or "", m.group(m.lastgroup or 0))
                      for m in _TOKEN.finditer(body) if m.lastgroup]
            self.rules[name.strip()] = tokens
        self.depth = depth
        self.regex = re.compile(self._rule("root", {}), re.DOTALL)

    def matches(self, text: str) -> bool:
        return self.regex.fullmatch(text) is not None

    def _rule(self, name: str, seen: dict[str, int]) -> str:
        if seen.get(name, 0) >= self.depth:
            return "(?!)"
        inner = {**seen, name: seen.get(name, 0) + 1}
        expr, rest = self._alternation(self.rules[name], 0, inner)
        assert rest == len(self.rules[name]), (name, self.rules[name][rest:])
        return f"(?:{expr})"

    def _alternation(self, tokens: list[tuple[str, str]], i: int,
                     seen: dict[str, int]) -> tuple[str, int]:
        options, seq = [], []
        while i < len(tokens):
            kind, text = tokens[i]
            if kind == "op" and text == ")":
                break
            if kind == "op" and text == "|":
                options.append("".join(seq))
                seq, i = [], i + 1
                continue
            atom, i = self._atom(tokens, i, seen)
            if i < len(tokens) and (tokens[i][0] == "rep" or tokens[i][1] in ("?", "*", "+")):
                atom, i = f"(?:{atom}){tokens[i][1]}", i + 1
            seq.append(atom)
        options.append("".join(seq))
        return "|".join(options), i

    def _atom(self, tokens: list[tuple[str, str]], i: int,
              seen: dict[str, int]) -> tuple[str, int]:
        kind, text = tokens[i]
        if kind == "lit":
            return re.escape(_unescape(text[1:-1])), i + 1
        if kind == "cls":
            return _char_class(text), i + 1
        if kind == "name":
            return self._rule(text, seen), i + 1
        assert text == "(", tokens[i:]
        expr, i = self._alternation(tokens, i + 1, seen)
        return f"(?:{expr})", i + 1
