"""The kernel template registry of the C backends: one template per kernel family and ISA.

A template turns a ``kernel.def``'s parameters into one specialised C function (XNNPACK's templated
micro-kernels, MegCC's specialised symbols). It also says how much workspace the specialisation needs
and how its constant operands are packed ahead of time. Lowering asks :func:`lookup` whether a family
exists for a target's ISAs (the availability half of kernel selection); the emitter asks it for the
code. Adding a kernel touches its op's dialect class, its reference kernel and its template: the
template module registers itself here.

ISAs are searched in the target's order (``("avx512", "avx2", "generic")`` for ``x86-avx512``), so a
family written once in portable C (``generic``) serves every C target until an ISA-specific template
overrides it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter


class Template:
    """One kernel family for one ISA. Subclasses set ``family`` and implement :meth:`render`."""

    family: ClassVar[str]
    isa: str = "generic"
    # operand index -> True when the kernel may write its result over that operand (same bytes)
    in_place_operand: ClassVar[int | None] = None

    def symbol(self, params: dict[str, Any]) -> str:
        """The specialisation's C symbol, named after what it is specialised on."""
        raise NotImplementedError

    def workspace(self, params: dict[str, Any]) -> int:
        """Scratch bytes the kernel needs while it runs (shared by all calls)."""
        return 0

    def pack(self, operand: int, array: np.ndarray, params: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        """Repack the constant ``operand`` ahead of time: (packed array, packing name), or None."""
        return None

    def render(self, em: CEmitter, sym: str, params: dict[str, Any]) -> str:
        """The C definition of ``static void sym(inputs..., outputs..., unsigned char* ws, int nt)``."""
        raise NotImplementedError

    def support(self, em: CEmitter) -> str:
        """Shared C code this template needs once per translation unit (e.g. a micro-kernel)."""
        return ""


TEMPLATES: dict[tuple[str, str], Template] = {}


class TemplateError(LookupError):
    pass


def register(template: Template) -> Template:
    key = (template.family, template.isa)
    if key in TEMPLATES:
        raise TemplateError(f"two templates for family {key[0]!r} on ISA {key[1]!r}")
    TEMPLATES[key] = template
    return template


def lookup(family: str, isas: Sequence[str]) -> Template | None:
    """The first template of ``family`` among ``isas`` (in the target's order of preference)."""
    _load()
    for isa in isas:
        t = TEMPLATES.get((family, isa))
        if t is not None:
            return t
    return None


def families() -> list[tuple[str, str]]:
    _load()
    return sorted(TEMPLATES)


def _load() -> None:
    # template modules register themselves on import
    from backends.c.templates import depthwise_x86, gemm, generic, nchw88, neon, typed, winograd  # noqa: F401


def sym_join(*parts: Any) -> str:
    """A C identifier from parts: ints and tuples become ``3x3``-style words."""
    words = []
    for p in parts:
        if isinstance(p, tuple | list):
            words.append("x".join(str(v) for v in p))
        else:
            words.append(str(p))
    return "_".join(w for w in words if w).replace("-", "m").replace(".", "p")
