"""``kernel-fuse-moves``: compose chains of data movement calls, so each moved value is written once.

A channel shuffle between two branches (ShuffleNet: ``concat`` -> reshape/transpose/reshape ->
``subtensor`` x 2) lowers to five copies of the same elements, none of which runs on a second thread.
Every element a ``copy``, ``concat`` or ``split`` call writes (``gather`` too: this pass's own kernel)
is one element of one of its inputs, and ``kernel.view`` keeps positions, so a chain of them is an
index map from the last result to the tensors the chain started from, computed exactly at compile
time (numpy index arrays, composed through each call's parameters: the positions its C reads).

The values that must exist in memory are the moved values something else reads (a compute kernel, a
return, a movement call this pass cannot compose); each of them becomes one ``gather`` call that reads
the chain's sources directly, and the intermediate movement calls disappear. A gather is a list of
pieces, each a strided copy ``out[o + idx . os] = in_s[i + idx . is]`` over a box of the result;
the pieces are recovered from the index map (rows over the innermost dimensions that are affine,
merged along the outer ones) and checked against it. Nothing changes where that fails to be compact
(more than :data:`MAX_PIECES` pieces or :data:`MAX_SOURCES` sources: those values stay materialised),
where the elements differ in kind, or for tensors of more than :data:`MAX_ELEMENTS` elements.

Only values whose chain passes through another movement call are rewritten: a lone copy keeps its
kernel. Results are the same bits (copies only) at any thread count.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from dialects import kernel as K
from passes.lowering.fuse import remove_unused
from passes.lowering.kernels import KernelUnit, collapse
from passes.lowering.select import ensure_def
from passes.lowering.target_pass import KernelTargetPass, functions
from passes.target import Target

# the portable families whose parameters this pass reads (their C is in
# backends/c/templates/portable/generic.py and .../moves.py)
GATHER_FAMILY = "gather"  # the kernel this pass makes (no op selects it)
MOVE_FAMILIES = ("copy", "concat", "split", GATHER_FAMILY)
MAX_PIECES = 32
MAX_SOURCES = 16
MAX_ELEMENTS = 1 << 21  # index maps are int64 arrays: bounds the pass's memory (~100 MB)
MAX_ROWS = 1 << 14  # affine rows examined when recovering pieces


@dataclass(frozen=True)
class Piece:
    """``out[out_off + idx . ostr] = in[src][in_off + idx . istr]`` for ``idx`` over ``shape``."""

    src: int
    out_off: int
    in_off: int
    shape: tuple[int, ...]
    ostr: tuple[int, ...]
    istr: tuple[int, ...]

    def as_param(self) -> tuple[Any, ...]:
        return (self.src, self.out_off, self.in_off, self.shape, self.ostr, self.istr)

    @staticmethod
    def from_param(p: Sequence[Any]) -> Piece:
        src, oo, io, sh, os_, is_ = p
        return Piece(int(src), int(oo), int(io), tuple(sh), tuple(os_), tuple(is_))


def gather_params(pieces: Sequence[Piece], sources: int, size: int, elem: str) -> dict[str, Any]:
    """The ``gather`` kernel's parameters (its template renders exactly these pieces)."""
    return {"elem": elem, "sources": sources, "size": size, "pieces": tuple(p.as_param() for p in pieces)}


def gather_digest(params: dict[str, Any]) -> str:
    """A short, stable name for a gather's pieces (its symbol would otherwise list them all)."""
    return hashlib.sha1(repr(params["pieces"]).encode()).hexdigest()[:10]


# ----------------------------------------------------------------------------------------------
# Index maps: (source index, flat position) of every element of a result


def _grid(shape: Sequence[int], strides: Sequence[int], offset: int) -> np.ndarray:
    pos = np.full((1,) * len(shape), offset, np.int64)
    for k, (d, s) in enumerate(zip(shape, strides, strict=True)):
        ax = [1] * len(shape)
        ax[k] = d
        pos = pos + np.arange(d, dtype=np.int64).reshape(ax) * s
    return np.broadcast_to(pos, tuple(shape)).reshape(-1)


def call_map(family: str, p: dict[str, Any], result: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The element map of result ``result`` of a movement call: (operand index, flat position) per
    flat position of the result, as the family's C computes it."""
    if family == "copy":
        pos = _grid(p["shape"], p["strides"], p["offset"])
        return np.zeros(pos.size, np.int64), pos
    if family in ("concat", "split"):
        chunks = [int(c) for c in p["chunks"]]
        total, outer = sum(chunks), int(p["outer"])
        offs = np.cumsum([0, *chunks[:-1]]).astype(np.int64)
        if family == "split":
            c = chunks[result]
            f = np.arange(outer * c, dtype=np.int64)
            return np.zeros(f.size, np.int64), (f // c) * total + offs[result] + f % c
        f = np.arange(outer * total, dtype=np.int64)
        r, col = f // total, f % total
        src = np.searchsorted(offs, col, side="right") - 1
        return src, r * np.asarray(chunks, np.int64)[src] + col - offs[src]
    assert family == "gather", family
    src = np.full(size, -1, np.int64)
    pos = np.zeros(size, np.int64)
    for q in map(Piece.from_param, p["pieces"]):
        o = _grid(q.shape, q.ostr, q.out_off)
        src[o] = q.src
        pos[o] = _grid(q.shape, q.istr, q.in_off)
    assert (src >= 0).all(), "a gather's pieces cover its result"
    return src, pos


# ----------------------------------------------------------------------------------------------
# Pieces from an index map


class _TooMany(Exception):
    pass


def pieces_of(src: np.ndarray, pos: np.ndarray, shape: Sequence[int]) -> list[Piece] | None:
    """Strided pieces covering a result of ``shape`` whose element ``f`` is ``pos[f]`` of source
    ``src[f]``, or None when more than :data:`MAX_PIECES` are needed. Rows over the innermost
    dimensions from the first level at which every row is affine; consecutive rows (then blocks of
    rows) that are the same pieces shifted by one step merge into one piece with one more dimension."""
    dims = [int(d) for d in shape if d != 1] or [1]
    n = len(dims)
    ostr_full = [math.prod(dims[i + 1 :]) for i in range(n)]
    for k in range(-1, n):
        rows = math.prod(dims[: k + 1])
        if rows > MAX_ROWS:
            return None
        inner = dims[k + 1 :]
        pr = pos.reshape(rows, *inner)
        sr = src.reshape(rows, -1)
        if not (sr == sr[:, :1]).all():
            continue
        flat = pr.reshape(rows, -1)
        base = flat[:, 0]
        ones = [1] * len(inner)
        expect = base.reshape(rows, *ones)
        strides = []
        for m, d in enumerate(inner):
            if d == 1:
                s = np.zeros(rows, np.int64)
            else:
                idx: list[Any] = [slice(None)] + [0] * len(inner)
                idx[1 + m] = 1
                s = pr[tuple(idx)] - base
            strides.append(s)
            ax = [1] + ones
            ax[1 + m] = d
            expect = expect + s.reshape(rows, *ones) * np.arange(d, dtype=np.int64).reshape(ax)
        if (expect == pr).all():
            break
    row_src = sr[:, 0]
    row_str = np.stack(strides, axis=1) if strides else np.zeros((rows, 0), np.int64)

    def build(level: int, row: int, out_off: int) -> list[Piece]:
        if level == k + 1:
            return [
                Piece(
                    int(row_src[row]),
                    out_off,
                    int(base[row]),
                    tuple(inner),
                    tuple(ostr_full[k + 1 :]),
                    tuple(int(s) for s in row_str[row]),
                )
            ]
        lists = [
            build(level + 1, row * dims[level] + j, out_off + j * ostr_full[level])
            for j in range(dims[level])
        ]
        out: list[Piece] = []
        j = 0
        while j < len(lists):
            run, delta = 1, None
            while j + run < len(lists):
                d = _shift(lists[j + run - 1], lists[j + run])
                if d is None or (delta is not None and d != delta):
                    break
                delta, run = d, run + 1
            if run == 1:
                out.extend(lists[j])
            else:
                out.extend(
                    Piece(
                        q.src,
                        q.out_off,
                        q.in_off,
                        (run, *q.shape),
                        (ostr_full[level], *q.ostr),
                        (delta, *q.istr),
                    )
                    for q in lists[j]
                )
            j += run
            if len(out) > MAX_PIECES * 64:
                raise _TooMany
        return out

    try:
        got = build(0, 0, 0)
    except _TooMany:
        return None
    if len(got) > MAX_PIECES:
        return None
    pieces = []
    for q in got:
        cshape, (co, ci) = collapse(q.shape, [q.ostr, q.istr])
        pieces.append(Piece(q.src, q.out_off, q.in_off, cshape, co, ci))
    return pieces


def _shift(a: list[Piece], b: list[Piece]) -> int | None:
    """The common input step from pieces ``a`` to the same pieces ``b`` one row on, else None."""
    if len(a) != len(b):
        return None
    delta = None
    for p, q in zip(a, b, strict=True):
        if (p.src, p.shape, p.ostr, p.istr) != (q.src, q.shape, q.ostr, q.istr):
            return None
        d = q.in_off - p.in_off
        if delta is not None and d != delta:
            return None
        delta = d
    return delta


def check_pieces(pieces: Sequence[Piece], src: np.ndarray, pos: np.ndarray) -> bool:
    """Whether ``pieces`` write every element exactly as the index map says."""
    got = call_map("gather", {"pieces": tuple(p.as_param() for p in pieces)}, 0, src.size)
    return bool((got[0] == src).all() and (got[1] == pos).all())


# ----------------------------------------------------------------------------------------------
# The pass


def _root(v: SSAValue) -> SSAValue:
    while isinstance(v.owner, K.ViewOp):
        v = v.owner.src
    return v


def _size(v: SSAValue) -> int:
    t = v.type
    assert isinstance(t, TensorType)
    return math.prod(t.get_shape())


class _Chains:
    """The movement calls of one function and the composed index maps of their results."""

    def __init__(
        self,
        ops: list[Operation],
        pinned: set[SSAValue],
        defs: dict[str, K.KernelDefOp],
        own: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]],
    ) -> None:
        self.node: dict[SSAValue, tuple[K.CallOp, int, str, dict[str, Any]]] = {}
        # a call's own element map, by (symbol, result): the same for every call of one kernel
        self.own: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = own
        params_of: dict[str, dict[str, Any]] = {}
        for op in ops:
            if not isinstance(op, K.CallOp):
                continue
            sym = op.callee.string_value()
            d = defs[sym]
            if d.isa.data != "generic" or d.family.data not in MOVE_FAMILIES:
                continue
            if sym not in params_of:
                params_of[sym] = d.param_values()
            params = params_of[sym]
            sizes = [_size(v) for v in (*op.outputs, *op.args)]
            if max(sizes) > MAX_ELEMENTS or min(sizes) == 0:
                continue
            for i, r in enumerate(op.outputs):
                self.node[r] = (op, i, d.family.data, params)
        self.materialised = {r for r in self.node if r in pinned or self._read_elsewhere(r)}
        self.maps: dict[SSAValue, tuple[list[SSAValue], np.ndarray, np.ndarray, bool] | None] = {}

    def _read_elsewhere(self, v: SSAValue) -> bool:
        """Whether something other than a composable movement call reads ``v`` (through views)."""
        for use in v.uses:
            user = use.operation
            if isinstance(user, K.ViewOp):
                if self._read_elsewhere(user.output):
                    return True
            elif not (isinstance(user, K.CallOp) and user.outputs and user.outputs[0] in self.node):
                return True
        return False

    def composed(self, r: SSAValue) -> tuple[list[SSAValue], np.ndarray, np.ndarray, bool] | None:
        """(sources, source index, position, through another movement call) of ``r``'s elements,
        composed through every movement result that is not materialised; None if the elements
        differ in kind along the chain."""
        if r in self.maps:
            return self.maps[r]
        call, i, family, params = self.node[r]
        key = (call.callee.string_value(), i)
        if key not in self.own:
            self.own[key] = call_map(family, params, i, _size(r))
        src, pos = self.own[key]
        sources: list[SSAValue] = []
        new_src = np.empty_like(src)
        new_pos = np.empty_like(pos)
        through = False
        for a, arg in enumerate(call.args):
            sel = src == a
            if not sel.any():
                continue
            u = _root(arg)
            inner = None
            if u in self.node and u not in self.materialised:
                if self.node[u][3]["elem"] != params["elem"]:
                    self.maps[r] = None
                    return None
                inner = self.composed(u)
                if inner is None:
                    self.maps[r] = None
                    return None
            if inner is None:
                idx = _index(sources, u)
                new_src[sel] = idx
                new_pos[sel] = pos[sel]
                continue
            through = True
            isrcs, isrc, ipos, _ = inner
            remap = np.array([_index(sources, s) for s in isrcs], np.int64)
            new_src[sel] = remap[isrc[pos[sel]]]
            new_pos[sel] = ipos[pos[sel]]
        self.maps[r] = (sources, new_src, new_pos, through)
        return self.maps[r]


def _index(sources: list[SSAValue], v: SSAValue) -> int:
    if v not in sources:
        sources.append(v)
    return sources.index(v)


def fuse_moves(module: ModuleOp, ops: list[Operation], gather: KernelUnit) -> int:
    """Rewrite the function body ``ops``; returns the number of gathers made."""
    pinned: set[SSAValue] = set()
    defs = K.defs_of(module)
    own: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
    while True:
        chains = _Chains(ops, pinned, defs, own)
        plans: dict[SSAValue, tuple[list[SSAValue], list[Piece]]] = {}
        grow: set[SSAValue] = set()
        for r in [r for r in chains.node if r in chains.materialised]:
            got = chains.composed(r)
            if got is None or not got[3]:
                grow |= _unmaterialised_inputs(chains, r)
                continue
            sources, src, pos, _ = got
            t = r.type
            assert isinstance(t, TensorType)
            pieces = pieces_of(src, pos, t.get_shape()) if len(sources) <= MAX_SOURCES else None
            if pieces is None:
                grow |= _unmaterialised_inputs(chains, r)
                continue
            assert check_pieces(pieces, src, pos), "gather pieces disagree with the index map"
            plans[r] = (sources, pieces)
        if not grow:
            break
        # a value kept as it is reads its inputs: those must exist; start again with them
        extra = grow - chains.materialised
        if not extra:
            break
        pinned |= extra
    renamed: dict[SSAValue, SSAValue] = {}
    for r, (sources, pieces) in plans.items():
        call, _, _, params = chains.node[r]
        gp = gather_params(pieces, len(sources), _size(r), params["elem"])
        d = ensure_def(module, gather, gp)
        new = K.CallOp(d.sym, [renamed.get(s, s) for s in sources], [r.type])
        for key in ("name", "scope"):
            if key in call.attributes:
                new.attributes[key] = call.attributes[key]
        Rewriter.insert_op(new, InsertPoint.before(call))
        r.replace_all_uses_with(new.outputs[0])
        renamed[r] = new.outputs[0]
    for o in reversed(list(ops)):
        if isinstance(o, K.CallOp | K.ViewOp) and o.parent is not None and not any(x.uses for x in o.results):
            if isinstance(o, K.ViewOp) or o.outputs[0] in chains.node:
                Rewriter.erase_op(o)
    return len(plans)


def _unmaterialised_inputs(chains: _Chains, r: SSAValue) -> set[SSAValue]:
    call = chains.node[r][0]
    return {u for a in call.args if (u := _root(a)) in chains.node and u not in chains.materialised}


@dataclass(frozen=True)
class FuseMovesPass(KernelTargetPass):
    """Compose copy / concat / split chains into one gather per value that must exist."""

    name = "kernel-fuse-moves"

    def apply_for(self, module: ModuleOp, target: Target) -> None:
        gather = target.kernels.first(GATHER_FAMILY, target.isas)
        if gather is None:
            return
        for fn in functions(module):
            fuse_moves(module, list(fn.body.block.ops), gather)
        remove_unused(module)


__all__ = [
    "GATHER_FAMILY",
    "MAX_PIECES",
    "FuseMovesPass",
    "Piece",
    "call_map",
    "fuse_moves",
    "gather_params",
    "pieces_of",
]
