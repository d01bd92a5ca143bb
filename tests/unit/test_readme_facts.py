"""What the README and docs/ say holds for the code: every flag they name exists,
every default they state is the code's, every relative link reaches a file and a
heading that exist, every figure in the README names where it was measured, and the
counts and formats they give are the code's.

Defaults are read from the code (``GatewayConfig``'s fields for ``serve``, the
argparse parser for ``call``), never copied here."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

import pytest

from gateway import cli
from gateway.config import GatewayConfig

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))
PAGES = [README, *DOCS]  # what a reader of this repository is told
LINKED = [*PAGES, ROOT / "bench" / "README.md"]  # pages whose links must resolve

FENCE = re.compile(r"^\s*(```|~~~)")


def prose(text: str) -> str:
    """The text outside fenced code blocks (a fence's lines become empty)."""
    out, inside = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            inside = not inside
            out.append("")
        else:
            out.append("" if inside else line)
    return "\n".join(out)


def code_lines(text: str) -> Iterator[str]:
    inside = False
    for line in text.splitlines():
        if FENCE.match(line):
            inside = not inside
        elif inside:
            yield line


# -- links and anchors ---------------------------------------------------------

LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"", re.I)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation but
    ``-`` and ``_`` removed, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").replace("*", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = path.read_text()
    seen: dict[str, int] = {}
    out = set(HTML_ANCHOR.findall(text))
    for heading in HEADING.findall(prose(text)):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def relative_links(path: Path) -> Iterator[str]:
    for target in LINK.findall(prose(path.read_text())):
        if not re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, ...
            yield target


def test_slug_is_githubs() -> None:
    assert slug("3. Invariants I1–I9") == "3-invariants-i1i9"
    assert slug("Every core: `--workers N`") == "every-core---workers-n"
    assert slug("`bench/voice_latency.py`") == "benchvoice_latencypy"


@pytest.mark.parametrize("page", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


# a section named in prose, a page then the section in double quotes, as the code's
# docstrings cite docs/deployment.md's Security section (part of a heading is enough)
SECTION_REF = re.compile(r"((?:[\w-]+/)*(?:README|[\w-]+\.md))(?:'s)?,? \"([^\"]+)\"")
NOT_OURS = {"node_modules", "__pycache__", "build", "dist"}  # installed or built here
SOURCES = [p for d in ("duplex", "engines", "gateway", "orchestrator", "plugins", "bench",
                       "tests", "docs", "web_demo", "deploy")
           for p in sorted((ROOT / d).rglob("*"))
           if p.suffix in (".py", ".md", ".js", ".html", ".cfg", ".txt", ".yaml")
           and not NOT_OURS & set(p.relative_to(ROOT).parts)
           and not any(part.startswith(".") for part in p.relative_to(ROOT).parts)
           and p != Path(__file__).resolve()]


def headings(path: Path) -> list[str]:
    return [h.replace("`", "") for h in HEADING.findall(prose(path.read_text()))]


def named_page(source: Path, name: str) -> Path | None:
    name = "README.md" if name == "README" else name
    for base in (source.parent, ROOT):
        if (base / name).is_file():
            return base / name
    return None


def test_every_section_named_in_prose_is_there() -> None:
    stale = []
    for source in [*SOURCES, README, ROOT / "compose.yaml"]:
        for page_name, section in SECTION_REF.findall(source.read_text(errors="replace")):
            page = named_page(source, page_name)
            section = " ".join(section.split())
            if page is None or not any(section in h for h in headings(page)):
                stale.append(f"{source.relative_to(ROOT)}: {page_name} \"{section}\"")
    assert not stale, "no such section: " + "; ".join(stale)


def test_nothing_points_at_a_design_file_a_clone_lacks() -> None:
    for page in PAGES:
        assert "shared/DESIGN" not in page.read_text(), page


# -- flags ---------------------------------------------------------------------

def subcommands() -> dict[str, argparse.ArgumentParser]:
    """The CLI's own parsers (argparse keeps its actions private; a test may look)."""
    parser = cli._build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {opt: a for a in parser._actions for opt in a.option_strings}


SERVE = options(subcommands()["serve"])
CALL = options(subcommands()["call"])
SPAN = re.compile(r"`([^`\n]+)`")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
COMMAND = re.compile(r"(duplex-gateway|\./run) (serve|call)\b")


def named_flags(page: Path) -> Iterator[tuple[str, set[str]]]:
    """(flag, the options it may be) for every gateway flag the page names: a code
    span that is a flag, or a flag after `duplex-gateway serve|call` in code."""
    text = page.read_text()
    for span in SPAN.findall(prose(text)):
        flag = FLAG.match(span)
        if flag:
            yield flag.group(1), {*SERVE, *CALL}
    for code in [*code_lines(text), *SPAN.findall(prose(text))]:
        for command in COMMAND.finditer(code):
            known = set(SERVE if command.group(2) == "serve" else CALL)
            rest = COMMAND.split(code[command.end():])[0]
            for flag in FLAG.findall(rest):
                yield flag, known


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_flag_named_exists(page: Path) -> None:
    unknown = sorted({flag for flag, known in named_flags(page) if flag not in known})
    assert not unknown, f"{page.relative_to(ROOT)} names flags the CLI lacks: {unknown}"


def test_the_readme_names_flags_at_all() -> None:
    assert len({flag for flag, _ in named_flags(README)}) >= 3


# A stated default: "`--flag` (default X", "`--flag` (per turn, default X",
# "`--flag`, default X", "`--flag` (X" with X a number, or "`--flag` (`x`, the default".
NUMBER = r"-?\d[\d,]*(?:\.\d+)?(?:\s*(?:ms|s|MiB|KiB)\b)?"
STATED = re.compile(
    r"`(--[a-z][a-z0-9-]*)`(?:,\s*default\s+(?P<a>`[^`]+`|" + NUMBER + r")"
    r"|\s*\((?:[^()`]*?\bdefault:?\s+)(?P<b>`[^`]+`|" + NUMBER + r")"
    r"|\s*\((?P<c>" + NUMBER + r")"
    r"|\s*\((?P<d>`[^`]+`),\s*the default)")
UNITS = {"ms": 1, "s": 1, "MiB": 1 << 20, "KiB": 1 << 10}


def stated_defaults(page: Path) -> Iterator[tuple[str, str]]:
    for m in STATED.finditer(prose(page.read_text())):
        value = next(v for v in m.group("a", "b", "c", "d") if v is not None)
        yield m.group(1), value


def code_default(flag: str) -> object:
    if flag in CALL and flag not in SERVE:
        return CALL[flag].default
    name = SERVE[flag].dest
    return {f.name: f.default for f in fields(GatewayConfig)}[name]


def same(stated: str, actual: object) -> bool:
    if stated.startswith("`"):
        return stated.strip("`") == str(actual)
    parts = re.fullmatch(r"(-?[\d.]+)\s*(\D*)", stated.replace(",", ""))
    assert parts, stated
    number, unit = parts.groups()
    return isinstance(actual, int | float) and float(number) * UNITS.get(unit, 1) == actual


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_default_stated_is_the_codes(page: Path) -> None:
    wrong = [f"{flag} ({stated}; the code says {code_default(flag)!r})"
             for flag, stated in stated_defaults(page)
             if flag in SERVE or flag in CALL
             if not same(stated, code_default(flag))]
    assert not wrong, f"{page.relative_to(ROOT)}: " + "; ".join(wrong)


def test_defaults_are_found_where_the_docs_state_them() -> None:
    found = {flag for page in PAGES for flag, _ in stated_defaults(page)}
    # the reader's first questions: where it listens, which event loop, how long a
    # dropped session waits, how long `call` waits
    assert {"--host", "--port", "--loop", "--disconnect-grace-s", "--timeout-s"} <= found


def test_same_reads_units() -> None:
    assert same("4 MiB", 4 * 1024 * 1024) and same("30 s", 30.0) and same("`auto`", "auto")
    assert not same("`uvloop`", "auto") and not same("500 ms", 600.0)


# -- figures and what the README says of the code ---------------------------------

FIGURE = re.compile(r"\d[\d,.]*\s?(?:ms|s|min|minutes|GB|MB|%)(?![\w-])")


def blocks(text: str) -> Iterator[str]:
    """Paragraphs, list items and table rows outside code."""
    for para in re.split(r"\n\s*\n", prose(text)):
        lines = para.splitlines()
        if lines and lines[0].lstrip().startswith("|"):
            yield from lines
        else:
            yield from re.split(r"\n(?=\s*[-*] )", para)


def test_every_figure_in_the_readme_names_its_source() -> None:
    unsourced = [block.strip()[:80] for block in blocks(README.read_text())
                 if FIGURE.search(block) and not list(LINK.finditer(block))]
    assert not unsourced, "figures without a link to where they were measured: " + \
        " | ".join(unsourced)


def test_the_answer_formats_named_are_written() -> None:
    sf = pytest.importorskip("soundfile")
    from gateway.call_audio import check_writable

    sentence = next(s for s in re.split(r"(?<=\.)\s", prose(README.read_text()))
                    if "`--out`" in s)
    named = re.findall(r"`(\.[a-z0-9]+)`", sentence)
    assert len(named) >= 3, sentence
    for ext in named:
        assert ext[1:].upper() in sf.available_formats(), ext
        check_writable([ROOT / f"answer{ext}"])  # refused: CallError


def test_the_quiz_counts_stated_are_the_quizs() -> None:
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from quiz_questions import QUIZ  # type: ignore[import-not-found]  # bench/, no package
    finally:
        sys.path.remove(str(ROOT / "bench"))
    stated = re.compile(r"(\d+)\s+(?:spoken\s+)?conversations(?:\s+with|,)\s+"
                        r"(\d+)\s+scored\s+questions")
    found = [m.groups() for page in [*PAGES, ROOT / "bench" / "README.md"]
             for m in stated.finditer(page.read_text())]
    assert found
    scored = sum(turn.scored for conversation in QUIZ for turn in conversation)
    for conversations, questions in found:
        assert (int(conversations), int(questions)) == (len(QUIZ), scored)
