"""No import-time cycles: a module's top-level imports never lead back to it, so every module
imports the same way whatever was imported first. Imports inside functions (Tensor's operator
methods reach ``compiler.functional`` when called) and ``if TYPE_CHECKING`` blocks don't run at
import time and are not counted. ``from package import submodule`` counts as an edge to the
package, whose ``__init__`` must then have finished: write ``import package.submodule as name``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("compiler", "dialects", "passes", "backends")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def top_level_imports(path: Path, known: set[str]) -> set[str]:
    """Modules of this tree imported by the file's top-level statements."""
    found: set[str] = set()
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {m for m in found if m in known}


def import_graph(packages: tuple[str, ...]) -> dict[str, set[str]]:
    files = {module_name(p): p for pkg in packages for p in ROOT.joinpath(*pkg.split(".")).rglob("*.py")}
    known = set(files)
    return {name: top_level_imports(path, known) - {name} for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


# the reference backend is checked with the semantics it runs (each alone is too small to count)
@pytest.mark.parametrize(
    "packages",
    [
        "compiler",
        "dialects",
        "passes",
        "semantics backends.reference",
        "backends.mge",
        "backends.c backends.cuda",
    ],
)
def test_no_import_time_cycles(packages: str) -> None:
    graph = import_graph(tuple(packages.split()))
    assert len(graph) > 5, "the package was not found"
    assert cycles(graph) == []


def test_the_check_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_isa_facts_is_a_leaf() -> None:
    """The ISA records import nothing of this tree, so every emitter and template may read them at
    import time without a circle (the function-level ``backends.c.isas`` imports they replaced)."""
    path = ROOT / "backends" / "c" / "isa_facts.py"
    known = {module_name(p) for pkg in PACKAGES for p in ROOT.joinpath(pkg).rglob("*.py")}
    assert top_level_imports(path, known) == set()
