"""The C helpers kernel units share through ``support()``: every helper function is defined under one
include guard only. The emitter writes each distinct support string once, so a helper two units each
define (under different guards, or unguarded in two different strings) is a C redefinition as soon as
one model uses both units; e.g. the int8 stem and the pointwise GEMM once both defined
``xm_q8_narrow64``, and every int8 model on the host target failed to build."""

from __future__ import annotations

import re
from collections import defaultdict

from backends.c.emitter import CEmitter
from backends.c.isas import ISA_EMITTERS
from backends.c.kernels import KERNELS
from backends.c.templates import Template

DEFINITION = re.compile(r"static (?:inline )?(?:__attribute__\(\([^)]*\)\) )?[\w\s*]+?\b(\w+)\(")


def _definitions(support: str) -> list[tuple[str, str | None]]:
    """(function name, innermost ``#ifndef`` guard or None) of each helper defined in ``support``."""
    found, guards = [], []
    for line in support.splitlines():
        if m := re.match(r"\s*#ifndef (\w+)", line):
            guards.append(m.group(1))
        elif re.match(r"\s*#if", line):
            guards.append(None)
        elif re.match(r"\s*#endif", line):
            if guards:
                guards.pop()
        elif m := DEFINITION.match(line):
            found.append((m.group(1), next((g for g in reversed(guards) if g), None)))
    return found


def test_each_support_helper_is_defined_under_one_guard() -> None:
    guards: dict[str, set[str]] = defaultdict(set)
    unguarded_in: dict[str, set[str]] = defaultdict(set)
    units = [u for u in KERNELS.units() if isinstance(u, Template)]
    assert len(units) > 100
    for unit in units:
        support = unit.support(ISA_EMITTERS.get(unit.isa, CEmitter)())
        for name, guard in _definitions(support):
            if guard is None:
                unguarded_in[name].add(support)
            else:
                guards[name].add(guard)
    assert sum(len(g) for g in guards.values()) > 50, "the parser should find the guarded helpers"
    clashes = {n: sorted(g) for n, g in guards.items() if len(g) > 1 or n in unguarded_in}
    clashes |= {n: ["unguarded", f"{len(s)} strings"] for n, s in unguarded_in.items() if len(s) > 1}
    assert not clashes, f"C helpers defined more than once across kernel units' support(): {clashes}"
