"""README for a new user: the sections in the order they are needed, exactly two set-up commands, the
first steps run as written, the links resolve, and every environment variable the code reads is in
the README's table (and every variable the table lists is read somewhere)."""

from __future__ import annotations

import ast
import functools
import os
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
SOURCE_DIRS = ("backends", "bench", "compiler", "dialects", "passes", "semantics", "tests")
# a name that is an environment variable by its prefix wherever it is spelt, even when the read goes
# through a constant or a parameter (dialects/limits.py: _number(env, default))
ENV_PREFIXES = ("XMGE_", "MGE_", "MEGENGINE_")
ENV_LITERAL = re.compile("[\"']((?:" + "|".join(ENV_PREFIXES) + ")[A-Z0-9_]+)[\"']")


def _python_files() -> list[Path]:
    return [p for d in SOURCE_DIRS for p in (ROOT / d).rglob("*.py") if "__pycache__" not in p.parts]


def _is_environ(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "environ"
        or (isinstance(node, ast.Name) and node.id == "environ")
    )


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "TEXT"`` assignments (``ENV_HUB_DIR = "XMGE_HUB_DIR"``)."""
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for t in node.targets:
                if isinstance(t, ast.Name) and isinstance(node.value.value, str):
                    out[t.id] = node.value.value
    return out


def python_env_reads(tree: ast.Module, constants: dict[str, str]) -> set[str]:
    """Names read by ``os.environ.get(X)``, ``os.getenv(X)``, ``os.environ[X]`` (loaded),
    ``os.environ.setdefault(X, ...)`` (the user's value wins) and ``X in os.environ``, with ``X`` a
    string literal or a module-level string constant of any source file."""

    def name_of(arg: ast.AST) -> str | None:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value
        if isinstance(arg, ast.Name):
            return constants.get(arg.id)
        if isinstance(arg, ast.Attribute):
            return constants.get(arg.attr)
        return None

    found: set[str | None] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in ("get", "setdefault") and _is_environ(f.value):
                found.add(name_of(node.args[0]))
            elif (isinstance(f, ast.Attribute) and f.attr == "getenv") or (
                isinstance(f, ast.Name) and f.id == "getenv"
            ):
                found.add(name_of(node.args[0]))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environ(node.value):
            found.add(name_of(node.slice))
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            if any(isinstance(op, ast.In | ast.NotIn) for op in node.ops):
                found.add(name_of(node.left))
    return {n for n in found if n}


@functools.cache
def env_reads() -> dict[str, str]:
    """Every environment variable the repository's code reads, with one file that reads it."""
    texts = {p: p.read_text() for p in _python_files()}
    constants: dict[str, str] = {}
    for text in texts.values():  # module-level string constants, without parsing every file
        constants.update(
            re.findall(r"^([A-Za-z_][A-Za-z0-9_]*)\s*(?::[^=\n]*)?=\s*[\"']([^\"'\n]*)[\"']\s*$", text, re.M)
        )
    where: dict[str, str] = {}
    for path, text in texts.items():
        rel = str(path.relative_to(ROOT))
        if "environ" in text or "getenv" in text:
            for name in python_env_reads(ast.parse(text, rel), constants):
                where.setdefault(name, rel)
        for name in re.findall(ENV_LITERAL, text):
            where.setdefault(name, rel)
    for path in [*(ROOT / "backends").rglob("*.[ch]"), *(ROOT / "backends").rglob("*.cu")]:
        for name in re.findall(r"getenv\(\s*\"([A-Za-z_0-9]+)\"", path.read_text()):
            where.setdefault(name, str(path.relative_to(ROOT)))
    makefile = (ROOT / "Makefile").read_text()
    for name in re.findall(r"\$\$\{?([A-Z][A-Z0-9_]*)", makefile):  # a shell variable a recipe reads
        where.setdefault(name, "Makefile")
    for name in re.findall(
        r"^([A-Z][A-Z0-9_]*)\s*\?=", makefile, re.M
    ):  # make takes these from the environment
        where.setdefault(name, "Makefile")
    return where


def documented() -> set[str]:
    """The variables of the README's "Environment variables" table (first column)."""
    section = README.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            names.update(re.findall(r"`([A-Z][A-Z0-9_]*)`", line.split("|")[1]))
    return names


# read by the code but not the user's to set: the shell's own, or what a subprocess is handed
NOT_SETTINGS = {"PATH", "HOME", "SUDO", "PYTHONPATH"}  # SUDO: a Makefile recipe's own shell variable


def test_every_environment_variable_the_code_reads_is_documented() -> None:
    reads = env_reads()
    assert {"XMGE_CACHE_DIR", "XMGE_HUB_DIR", "XDG_CACHE_HOME", "XMGE_ADAPT_THREADS", "CI"} <= set(reads)
    missing = {n: f for n, f in reads.items() if n not in documented() and n not in NOT_SETTINGS}
    assert not missing, f"read by the code, not in README's Environment variables table: {missing}"


def test_every_documented_variable_is_read() -> None:
    stale = documented() - set(env_reads())
    assert not stale, f"README documents variables nothing reads: {sorted(stale)}"


def test_the_scanner_sees_each_kind_of_read() -> None:
    source = (
        "import os\nfrom os import environ, getenv\nNAME = 'VIA_CONSTANT'\n"
        "a = os.environ.get('A1')\nb = os.getenv('A2', 'x')\nc = os.environ['A3']\n"
        "d = 'A4' in os.environ\nos.environ.setdefault('A5', '1')\ne = environ.get(NAME)\nf = getenv('A6')\n"
        "os.environ['WRITTEN'] = '1'\n"
    )
    tree = ast.parse(source)
    got = python_env_reads(tree, _string_constants(tree))
    assert got == {"A1", "A2", "A3", "A4", "A5", "A6", "VIA_CONSTANT"}


def test_sections_come_in_the_order_a_new_user_needs() -> None:
    titles = re.findall(r"^## (.+)$", README, re.M)
    order = [
        "Set up",
        "First steps",
        "Targets",
        "Using it from Python",
        "Packages and the build cache",
        "Environment variables",
        "Command line",
        "Further reading",
    ]
    assert [t for t in titles if t in order] == order
    intro = README.split("\n## ", 1)[0]
    assert "compiles MegEngine models" in intro


def test_set_up_is_exactly_two_commands() -> None:
    block = README.split("## Set up", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]
    assert commands == ["make demo", "make test"]
    targets = re.findall(r"^([a-z]+):", (ROOT / "Makefile").read_text(), re.M)
    assert {"demo", "test"} <= set(targets)


def test_the_cache_and_list_targets_are_explained() -> None:
    assert "~/.cache/xmge/c" in README and "`$XMGE_CACHE_DIR`" in README and "~/.cache/xmge/hub" in README
    assert "xmge --list-targets" in README.split("## Targets", 1)[1].split("\n## ", 1)[0]


def test_links_resolve() -> None:
    for target in re.findall(r"\]\(((?!https?:)[^)#]+)\)", README):
        assert (ROOT / target).exists(), target


def test_first_steps_flags_exist(capsys: pytest.CaptureFixture[str]) -> None:
    """Every ``xmge SUB --flag`` of the first steps is a flag of that subcommand (a typo in the README
    would send a new user an argparse error)."""
    from compiler.driver import cli

    block = README.split("## First steps", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    seen = 0
    for line in block.splitlines():
        words = shlex.split(line.split("#")[0])
        if words[:1] != ["xmge"]:
            continue
        seen += 1
        with pytest.raises(SystemExit):
            cli.main([words[1], "--help"])
        flags = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", capsys.readouterr().out))
        for flag in (w for w in words[2:] if w.startswith("-")):
            assert flag in flags, f"xmge {words[1]} has no {flag}"
    assert seen >= 5


@pytest.mark.slow
def test_first_steps_run_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    from compiler.driver.cli import main

    block = README.split("## First steps", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    variables: dict[str, str] = {}
    monkeypatch.chdir(tmp_path)
    for line in block.splitlines():
        code = line.split("#")[0].strip()
        if not code:
            continue
        if re.fullmatch(r"[A-Z]+=\S+", code):
            name, value = code.split("=", 1)
            variables[name] = str(ROOT / value)
            continue
        for name, value in variables.items():
            code = code.replace(f"${name}", value)
        words = [str(ROOT / w) if w.startswith("tests/") else w for w in shlex.split(code)]
        assert words[0] == "xmge"
        assert main(words[1:]) == 0, (code, capsys.readouterr().err)
    assert {"convnet.svg", "trace.json", "layers.png", "convnet"} <= set(os.listdir(tmp_path))
