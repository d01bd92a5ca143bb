"""The client compatibility tables say what the tier pins (no client needed): the
whole table in docs/clients.md, and its summary in the README."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pins import CLIENTS, HERE, npm_version, pip_version, version

ROOT = HERE.parent.parent
TABLE = ROOT / "docs" / "clients.md"
SUMMARY = ROOT / "README.md"


def table_rows(page: Path = TABLE, marker: str = "client-table",
               header: tuple[str, ...] = ("client", "version", "what the tier tests",
                                          "known limits")) -> dict[str, list[str]]:
    text = page.read_text()
    begin, end = f"<!-- {marker}: begin -->", f"<!-- {marker}: end -->"
    body = text[text.index(begin) + len(begin):text.index(end)]
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in body.strip().splitlines()]
    assert rows[0] == list(header), rows[0]
    return {row[0]: row[1:] for row in rows[2:]}


def test_the_table_names_every_client_at_its_pinned_version() -> None:
    rows = table_rows()
    assert sorted(rows) == sorted(CLIENTS)
    for label, (version_cell, tested, _limits) in rows.items():
        assert version_cell == version(label), label
        assert tested, f"{label}: say what the tier tests"


def test_the_readme_summary_names_the_same_clients_and_versions() -> None:
    summary = table_rows(SUMMARY, "client-summary", ("client", "version"))
    assert summary == {label: [version(label)] for label in CLIENTS}


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
