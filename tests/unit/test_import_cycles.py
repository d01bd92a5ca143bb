"""No import cycles among the project's own modules, at import time or later.

The graph is read from the source: every ``import`` a module can run, at its
top or inside a function (a lazy import runs as soon as the function is
called, so a cycle through one still binds two modules to each other's
internals), but not those under ``if TYPE_CHECKING:``, which never run. An
edge goes to the module named, or to the submodule a ``from`` names
(``from gateway import log_setup``); the implicit import of a package's
``__init__`` is not an edge: it needs nothing back from its submodules.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import duplex

REPO = Path(duplex.__file__).parent.parent
PACKAGES = ("duplex", "engines", "gateway", "orchestrator", "plugins")

Graph = dict[str, set[str]]


def modules_under(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Each module of ``packages`` (subpackages included) by its dotted name."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runnable(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under ``node`` but those of ``if TYPE_CHECKING:`` bodies."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child):
            for other in child.orelse:
                yield other
                yield from _runnable(other)
            continue
        yield child
        yield from _runnable(child)


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules that module ``name`` (at ``path``) imports when it runs."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in _runnable(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                targets.add(submodule if submodule in known else base)
    return targets & known - {name}


def import_graph(root: Path, packages: tuple[str, ...]) -> Graph:
    modules = modules_under(root, packages)
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's), each
    sorted: every module in one can reach every other through imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_project_has_no_import_cycles() -> None:
    assert cycles(import_graph(REPO, PACKAGES)) == []


def test_the_graph_holds_the_projects_imports() -> None:
    graph = import_graph(REPO, PACKAGES)
    assert "gateway.serving" in graph["gateway.worker"]  # a top-level import
    assert "gateway.workers" in graph["gateway.cli"]  # one inside a function
    assert "gateway.log_setup" in graph["gateway.cli"]  # from a package, a submodule
    assert "engines.llamacpp" in graph["engines"]  # a package's __init__
    assert "duplex.store.supervisor" in graph["gateway.cli"]  # under a function too
    assert len(graph) > 100


# -- the check, shown able to fail, on a package written for it ----------------------


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.mark.parametrize(("b_imports_a", "cycle"), [
    ("from pkg.a import thing\n", True),  # at import time
    ("def later():\n    from pkg import a\n", True),  # when a function runs
    ("from . import a\n", True),  # relatively
    ("import pkg.a\n", True),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import thing\n", False),
    ("import typing\nif typing.TYPE_CHECKING:\n    import pkg.a\nelse:\n    import pkg.c\n",
     False),
    ("from pkg import c\n", False),
])
def test_a_cycle_is_found_however_it_is_written(tmp_path: Path, b_imports_a: str,
                                                 cycle: bool) -> None:
    write(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "from pkg.b import other\nthing = 1\n",
                     "pkg/b.py": b_imports_a + "other = 2\n", "pkg/c.py": ""})
    found = cycles(import_graph(tmp_path, ("pkg",)))
    assert found == ([["pkg.a", "pkg.b"]] if cycle else [])


def test_a_longer_cycle_is_found_whole(tmp_path: Path) -> None:
    write(tmp_path, {"pkg/__init__.py": "from pkg import a\n", "pkg/a.py": "import pkg.b\n",
                     "pkg/b.py": "from pkg.sub import c\n", "pkg/sub/__init__.py": "",
                     "pkg/sub/c.py": "from .. import a\n"})
    assert cycles(import_graph(tmp_path, ("pkg",))) == [["pkg.a", "pkg.b", "pkg.sub.c"]]
