"""The README's client compatibility table says what the tier pins (no client needed)."""

from __future__ import annotations

import json
import re

from pins import CLIENTS, HERE, npm_version, pip_version, version

README = HERE.parent.parent / "README.md"
BEGIN, END = "<!-- client-table: begin -->", "<!-- client-table: end -->"


def table_rows() -> dict[str, list[str]]:
    text = README.read_text()
    body = text[text.index(BEGIN) + len(BEGIN):text.index(END)]
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in body.strip().splitlines()]
    assert rows[0] == ["client", "version", "what the tier tests", "known limits"], rows[0]
    return {row[0]: row[1:] for row in rows[2:]}


def test_the_table_names_every_client_at_its_pinned_version() -> None:
    rows = table_rows()
    assert sorted(rows) == sorted(CLIENTS)
    for label, (version_cell, tested, _limits) in rows.items():
        assert version_cell == version(label), label
        assert tested, f"{label}: say what the tier tests"


def test_every_client_has_its_test_module() -> None:
    for label, (_where, _package, module) in CLIENTS.items():
        assert (HERE / module).is_file(), f"{label}: {module}"


def test_npm_pins_are_exact_and_locked() -> None:
    manifest = json.loads((HERE / "node" / "package.json").read_text())
    for package, wanted in manifest["dependencies"].items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", wanted), f"{package}: pin an exact version"
        assert npm_version(package) == wanted, package


def test_livekit_agents_and_its_openai_plugin_move_together() -> None:
    assert pip_version("livekit", "livekit-agents") == pip_version(
        "livekit", "livekit-plugins-openai")
