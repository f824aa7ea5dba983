"""The C backends' kernel units: one template per kernel family and ISA.

A template is a :class:`passes.lowering.kernels.KernelUnit` (the ops it matches, its priority, its
availability rule, workspace and packing) that also renders a ``kernel.def``'s parameters into one
specialised C function (XNNPACK's templated micro-kernels, MegCC's specialised symbols). Each template
module lists its units in ``KERNEL_UNITS``; :mod:`backends.c.kernels` gathers them into the one registry both
C backends hand to the lowering passes. Adding a kernel touches its op's dialect class, its reference
kernel and its template.

ISAs are searched in the target's order (``("avx512", "avx2", "generic")`` for ``x86-avx512``), so a
family written once in portable C (``generic``) serves every C target until an ISA-specific template
overrides it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from passes.lowering.kernels import KernelUnit

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter


class Template(KernelUnit):
    """One kernel family for one ISA, rendered as C. Subclasses implement :meth:`render`."""

    def render(self, em: CEmitter, sym: str, params: dict[str, Any]) -> str:
        """The C definition of ``static void sym(inputs..., outputs..., unsigned char* ws, int nt)``."""
        raise NotImplementedError

    def support(self, em: CEmitter) -> str:
        """Shared C code this template needs once per translation unit (e.g. a micro-kernel)."""
        return ""


def sym_join(*parts: Any) -> str:
    """A C identifier from parts: ints and tuples become ``3x3``-style words."""
    words = []
    for p in parts:
        if isinstance(p, tuple | list):
            words.append("x".join(str(v) for v in p))
        else:
            words.append(str(p))
    return "_".join(w for w in words if w).replace("-", "m").replace(".", "p")
