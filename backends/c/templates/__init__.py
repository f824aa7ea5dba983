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

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from passes.lowering.kernels import KernelUnit

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter


class Template(KernelUnit):
    """One kernel family for one ISA, rendered as C. Subclasses implement :meth:`render`."""

    # a kernel that can fail the run (an index out of range) takes the call's context last,
    # ``xm_ctx* ctx``, and reports through ``xm_index_error(ctx, ...)``: the failure belongs to that
    # call, whichever (OpenMP) thread meets it
    fails: ClassVar[bool] = False

    def render(self, em: CEmitter, sym: str, params: dict[str, Any]) -> str:
        """The C definition of ``static void sym(inputs..., outputs..., unsigned char* ws, int nt)``
        (then ``xm_ctx* ctx`` when :attr:`fails`)."""
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


def window_sym(p: dict[str, Any], *, dilation: bool | None = None) -> tuple[str, ...]:
    """Symbol words naming a sliding window (``fh fw sh sw ph pw``, ``dh dw``): ``k3x3_s1x1_p1x1``, then
    the dilation always (``dilation=True``), never (``False``) or unless it is 1x1 (``None``)."""
    words = [f"k{p['fh']}x{p['fw']}", f"s{p['sh']}x{p['sw']}", f"p{p['ph']}x{p['pw']}"]
    if dilation or (dilation is None and (p["dh"], p["dw"]) != (1, 1)):
        words.append(f"d{p['dh']}x{p['dw']}")
    return tuple(words)


def conv_sym(p: dict[str, Any], *, explicit: bool = False) -> tuple[str, ...]:
    """Symbol words naming a convolution's geometry: batch, input channels and size, output channels,
    the window, and the dilation and groups always (``explicit``) or unless they are 1."""
    groups = f"g{p['groups']}" if explicit or p.get("groups", 1) != 1 else ""
    return (
        f"n{p['n']}", f"ic{p['ic']}", f"{p['ih']}x{p['iw']}", f"oc{p['oc']}",
        *window_sym(p, dilation=True if explicit else None), groups,
    )  # fmt: skip


def plane_sym(p: dict[str, Any], *, dilation: bool | None = False) -> tuple[str, ...]:
    """Symbol words naming a per-channel window op (pooling, depthwise convolution): batch, channels,
    input size and the window (``dilation`` as :func:`window_sym`'s, none by default)."""
    return (f"n{p['n']}", f"c{p['c']}", f"{p['ih']}x{p['iw']}", *window_sym(p, dilation=dilation))


def epilogue_sym(p: dict[str, Any]) -> str:
    """The symbol words of a fused epilogue: ``bias``, ``res`` and the activation unless identity."""
    act = p.get("act", "identity")
    words = (
        "bias" if p.get("bias") else "",
        "res" if p.get("residual") else "",
        act.upper() if act != "identity" else "",
    )
    return "_".join(w for w in words if w)


def strided_index(strides: Sequence[int]) -> str:
    """The C offset ``i0 * s0 + i1 * s1 + ...`` of loop indices ``i0..`` (``0`` when every stride is 0)."""
    return " + ".join(f"i{k} * {s}L" for k, s in enumerate(strides) if s) or "0"


def window_taps(p: dict[str, Any], body: list[str], indent: str) -> str:
    """The C loops over the taps of output ``(oy, ox)``'s window (``fh fw sh sw ph pw``) that lie in the
    ``ih x iw`` input, at row ``yy`` and column ``xx``, running ``body`` (lines) on each; every line
    indented by ``indent``, no newline after the last."""
    lines = [
        f"for (int r = 0; r < {p['fh']}; ++r) {{",
        f"  const int yy = oy * {p['sh']} - {p['ph']} + r;",
        f"  if ((unsigned)yy >= {p['ih']}u) continue;",
        f"  for (int s = 0; s < {p['fw']}; ++s) {{",
        f"    const int xx = ox * {p['sw']} - {p['pw']} + s;",
        f"    if ((unsigned)xx >= {p['iw']}u) continue;",
        *(f"    {line}" for line in body),
        "  }",
        "}",
    ]
    return "\n".join(indent + line for line in lines)
