"""Layers: compiler -> backends -> passes -> semantics -> dialects; imports only point down. No module
under passes/, semantics/, dialects/ or backends/ imports the user API (``compiler``), at top level or
lazily inside a function; nothing under passes/, semantics/ or dialects/ imports a backend (the op
semantics the passes fold with live in ``semantics``, not in the reference backend)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOWER_LAYERS = ("passes", "semantics", "dialects", "backends")
# the layers below the backends: they know ops and their meaning, never a target
BELOW_BACKENDS = ("passes", "semantics", "dialects")


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import statement in the file, wherever it is."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def _modules(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def _violations(files: list[Path], forbidden: str) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in files
        for line, module in imported_modules(path)
        if module == forbidden or module.startswith(forbidden + ".")
    ]


def test_lower_layers_never_import_the_user_api() -> None:
    files = _modules(*LOWER_LAYERS)
    assert len(files) > 30, "the layer folders were not found"
    assert _violations(files, "compiler") == []


@pytest.mark.parametrize("layer", BELOW_BACKENDS)
@pytest.mark.parametrize("upper", ["backends", "compiler"])
def test_no_layer_below_the_backends_imports_upward(layer: str, upper: str) -> None:
    files = _modules(layer)
    assert files, f"{layer}/ was not found"
    assert _violations(files, upper) == []


def test_the_semantics_never_import_the_passes() -> None:
    # the passes fold constants with the reference kernels; the reverse arrow would be a cycle
    assert _violations(_modules("semantics"), "passes") == []
    assert _violations(_modules("dialects"), "semantics") == []


@pytest.mark.parametrize(
    ("source", "module"),
    [
        ("import compiler\n", "compiler"),
        ("def f():\n    from compiler.driver.targets import parse_target\n", "compiler.driver.targets"),
        ("class A:\n    def g(self):\n        import compiler.driver.cli as c\n", "compiler.driver.cli"),
    ],
)
def test_the_check_sees_every_import(tmp_path: Path, source: str, module: str) -> None:
    path = tmp_path / "m.py"
    path.write_text(source)
    assert module in [m for _, m in imported_modules(path)]


# the MegEngine API inside ``compiler`` never reaches for the driver; ``compiler.lite`` (MegEngine
# Lite: load a model and run it, compiled for a target on request), ``compiler.serving`` (a model
# compiled or loaded from its package, served on Ray Serve) and the package's own ``xm.compile``
# re-export are the places that do, on purpose
DRIVER_USERS = {"compiler/__init__.py", "compiler/lite.py", "compiler/serving.py"}


def test_the_megengine_api_never_imports_the_driver() -> None:
    files = [
        p
        for p in _modules("compiler")
        if "driver" not in p.relative_to(ROOT).parts and str(p.relative_to(ROOT)) not in DRIVER_USERS
    ]
    assert len(files) > 20, "the compiler package was not found"
    assert _violations(files, "compiler.driver") == []
