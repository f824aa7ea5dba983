"""Portable ``gather``: the one kernel ``kernel-fuse-moves`` makes of a chain of copies, concats and
splits (:mod:`passes.lowering.moves`). Each piece is a strided copy over a box of the result,
``out[o + idx . os] = in_s[i + idx . is]``; a contiguous innermost run is one ``memcpy``.

Threads: a gather of at least two shares of :data:`MOVE_PER_THREAD` elements opens one region, and
every piece's loops (its outer dimensions, its innermost run cut into blocks of :data:`BLOCK`) are a
``nowait`` worksharing loop of it: pieces write disjoint elements, so no barrier is needed. Copies
only: the same bits on any number of threads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backends.c.templates import Template, sym_join
from backends.c.templates.portable.generic import BYTES_CTYPE, ESIZE
from passes.lowering.moves import GATHER_FAMILY, Piece, gather_digest

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

# elements one thread moves for a region to pay: ~5 us of L2-resident copying on one core, the
# order of a region's fork and join with the other thread spinning (the relayouts' 65536 floats)
MOVE_PER_THREAD = 1 << 16
# elements per worksharing iteration of a long contiguous run (whole cache lines, a few of them)
BLOCK = 2048


def gather_threads(size: int) -> int:
    """The most threads a gather of ``size`` elements runs on (1: no parallel region)."""
    return max(1, size // MOVE_PER_THREAD)


def _index(off: int, names: list[str], strides: tuple[int, ...]) -> str:
    terms = [f"{n} * {s}L" for n, s in zip(names, strides, strict=True) if s != 0]
    return " + ".join([f"{off}L", *terms])


def _piece(q: Piece, ctype: str, esize: int, par: bool) -> list[str]:
    """The loops of one piece; with ``par`` a ``nowait`` worksharing loop over its outer
    dimensions and blocks of its innermost run."""
    shape, ostr, istr = list(q.shape), list(q.ostr), list(q.istr)
    run = shape[-1] if ostr[-1] == 1 and istr[-1] == 1 else 0
    nd = len(shape) - (1 if run else 0)
    lines: list[str] = []
    names = [f"i{k}" for k in range(nd)]
    # in a region, every statement is a worksharing loop (a lone run too: one iteration, thread 0's)
    blocked = par and run > 0 and (run > 2 * BLOCK or nd == 0)
    loops = [(names[k], shape[k]) for k in range(nd)]
    if blocked:
        loops.append(("b", -(-run // BLOCK)))
    if par and loops:
        lines.append(
            "#pragma omp for schedule(static) nowait" + (f" collapse({len(loops)})" if len(loops) > 1 else "")
        )
    for k, (name, d) in enumerate(loops):
        lines.append(f"{'  ' * k}for (long {name} = 0; {name} < {d}; ++{name})")
    ind = "  " * len(loops)
    o = _index(q.out_off, names, tuple(ostr[:nd]))
    i = _index(q.in_off, names, tuple(istr[:nd]))
    if run:
        if blocked:
            body = (
                f"{{ const long n = {run} - b * {BLOCK}L < {BLOCK} ? {run} - b * {BLOCK}L : {BLOCK}; "
                f"memcpy(out0 + {o} + b * {BLOCK}L, in{q.src} + {i} + b * {BLOCK}L, n * {esize}); }}"
            )
        else:
            body = f"memcpy(out0 + {o}, in{q.src} + {i}, {run * esize});"
        lines.append(ind + body)
    else:
        lines.append(f"{ind}out0[{o}] = in{q.src}[{i}];")
    if not loops:  # one run: a statement of its own
        lines = [lines[-1].strip()]
    return lines


class Gather(Template):
    """Strided pieces of several sources into one contiguous result (``kernel-fuse-moves``)."""

    family = GATHER_FAMILY
    ops = ()
    priority = 100
    examples_reason = (
        "made by kernel-fuse-moves from copy/concat/split chains, never chosen for an op; "
        "tests/test_fuse_moves.py compiles and runs its chains against the reference interpreter"
    )

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("gather", p["size"], f"{len(p['pieces'])}p", gather_digest(p), p["elem"])

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        ctype = "float" if p["elem"] == "f32" else BYTES_CTYPE[ESIZE[p["elem"]]]
        esize = 4 if p["elem"] == "f32" else ESIZE[p["elem"]]
        n = int(p["sources"])
        pieces = [Piece.from_param(q) for q in p["pieces"]]
        cap = gather_threads(int(p["size"]))
        par = cap >= 2
        args = ", ".join(
            [*(f"const void* in{i}_" for i in range(n)), "void* out0_", "unsigned char* ws", "int nt"]
        )
        head = [f"const {ctype}* in{i} = (const {ctype}*)in{i}_;" for i in range(n)]
        head += [f"{ctype}* out0 = ({ctype}*)out0_;", "(void)ws;", "(void)nt;"]
        body: list[str] = []
        for q in pieces:
            body.extend(_piece(q, ctype, esize, par))
        if par:
            inner = "\n".join("    " + line for line in body)
            loops = (
                f"  #pragma omp parallel num_threads(nt < {cap} ? nt : {cap}) if(nt > 1)\n  {{\n{inner}\n  }}"
            )
        else:
            loops = "\n".join("  " + line for line in body)
        heads = "\n".join("  " + line for line in head)
        return f"\nstatic void {sym}({args}) {{\n{heads}\n{loops}\n}}\n"


KERNEL_UNITS = (Gather(),)
