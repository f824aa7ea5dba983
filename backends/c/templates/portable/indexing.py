"""Portable C templates (ISA ``generic``: every x86 and ARM target) for modifying slices, advanced
indexing and ``linspace``: ``mgb.set_subtensor`` / ``mgb.incr_subtensor`` (family
``modify_subtensor``), ``mgb.indexing_multi_axis_vec`` and its set / incr forms (family
``indexing``), ``mgb.linspace`` (family ``linspace``).

Semantics are the reference's (``backends/reference/kernels.py``):

* Gathering and assigning move elements as raw words of the element's size, so every element type
  in plain layout is served (float32, float16, int8, quantized, int32, bool). The incr forms add in
  the element type as numpy does: float32, float16 (each sum rounded to float16: numpy adds halves
  in float32, and float32 holds the exact sum of two halves' rounding to float16), wrapping
  integers, bool as logical or. Quantized incr is refused, as MegEngine's IndexingIncrMultiAxisVec
  and IncrSubtensor do (their sum of stored values has no meaning).
* Index tensors are int32 operands read at run time; a negative index counts from the end. The
  reference (and MegEngine) raise on an index outside ``[-size, size)``; so does the compiled model:
  the kernel reports it through the runtime's error channel (``xm_index_error``: ``xm_run`` returns
  nonzero, Python raises :class:`backends.c.build.RunError` naming the kernel, the index and the axis
  size) and meanwhile reads element 0 in its place, never outside its tensors.
* Repeated indices: the set form keeps the last value and the incr form accumulates, in the row-major
  order of the selection (numpy's ``x[idx] = v`` and ``np.add.at``). The loops run over the
  non-indexed leading axes (in parallel: they address distinct elements), then the index positions
  in order, then the trailing axes, so the order per element is the reference's.
* The modifying forms write their result over ``src`` when the memory planner places them in place
  (``inplace``); otherwise they copy ``src`` first.
* ``linspace`` repeats ``np.linspace`` in double precision, operation for operation and without
  floating-point contraction, then rounds to float32: bit-exact with the reference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from xdsl.ir import Operation, SSAValue

import backends.c.examples as E
from backends.c.match import code, esize, row_major, slice_view
from backends.c.templates import Template, sym_join
from backends.c.templates.portable.generic import BYTES_CTYPE, _par, _strided_loops
from backends.c.templates.portable.requant import REQUANT_C, exact
from backends.c.templates.portable.typed import CTYPES
from dialects import layout as L
from dialects import tensor as T
from passes.lowering.kernels import Lowered, broadcast_strides, collapse, shape

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

HEADER = "#include <stdint.h>\n"

# element code -> (bytes, C expression of ``{a} + {b}`` in that type as numpy adds: wrapping integers
# without signed overflow, float16 rounded once per sum, bools or-ed)
INCR_C: dict[str, tuple[int, str]] = {
    "f32": (4, "{a} + {b}"),
    "f16": (2, "(float16_t)((float){a} + (float){b})"),
    "i32": (4, "(int32_t)((uint32_t){a} + (uint32_t){b})"),
    "i16": (2, "(int16_t)((uint16_t){a} + (uint16_t){b})"),
    "i8": (1, "(int8_t)((uint8_t){a} + (uint8_t){b})"),
    "ui8": (1, "(uint8_t)({a} + {b})"),
    "b1": (1, "(uint8_t)({a} | {b})"),
}


def _plain(*values: SSAValue) -> bool:
    return all(L.layout_of(v.type) is None for v in values)  # type: ignore[arg-type]


def _element(op: Operation, mode: str) -> str | None:
    """The kernel's element parameter for ``op`` (operand 0 and, if any, the value): ``e<bytes>`` for
    data movement (get, set), the element code for incr; None where the kernel cannot run it."""
    src = op.operands[0]
    if mode == "incr":
        c = code(src)
        return c if c in INCR_C else None
    size = esize(src)
    return f"e{size}" if size in BYTES_CTYPE else None


def _ctype(elem: str) -> str:
    return BYTES_CTYPE[int(elem[1:])] if elem.startswith("e") else CTYPES[elem]


def _bytes(elem: str) -> int:
    return int(elem[1:]) if elem.startswith("e") else INCR_C[elem][0]


def _add_into(elem: str, at: str, value: str) -> str:
    """C statement adding ``value`` into the element ``at`` (read once, written once)."""
    t = _ctype(elem)
    return f"{{ const {t} a_ = {at}, b_ = {value}; {at} = {INCR_C[elem][1].format(a='a_', b='b_')}; }}"


def _dense_update(sym: str, args: str, elem: str, total: int, body: str) -> str:
    """The head of a modifying kernel: typed views of ``src``, ``value`` and ``out``, and the copy of
    ``src`` into ``out`` unless the planner put ``out`` over ``src``."""
    t = _ctype(elem)
    nbytes = total * _bytes(elem)
    return f"""
static void {sym}({args}) {{
  const {t}* src = (const {t}*)src_;
  const {t}* val = (const {t}*)val_;
  {t}* out = ({t}*)out_;
  if ((const void*)out != (const void*)src && {nbytes}UL) memcpy(out, src, {nbytes}UL);
  (void)ws;
{body}
}}
"""


# ----------------------------------------------------------------------------------------------
# Static slices: set_subtensor / incr_subtensor


class ModifySubtensor(Template):
    """``out = src`` with a static slice replaced by (set) or incremented by (incr) ``value``: one
    strided walk of the slice, in parallel (a slice never addresses an element twice)."""
    examples = (
        E.modify_subtensor((5, 6), [(0, 1, 4, 1), (1, 0, 6, 2)], incr=False),
        E.modify_subtensor((4, 3, 5), [(2, 1, 5, 3)], incr=True),
    )

    family = "modify_subtensor"
    ops = (T.SetSubtensorOp, T.IncrSubtensorOp)
    priority = 100

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.SetSubtensorOp | T.IncrSubtensorOp)
        mode = "set" if isinstance(op, T.SetSubtensorOp) else "incr"
        src, value = op.operands
        elem = _element(op, mode)
        if elem is None or not _plain(src, value, op.results[0]):
            return None
        s = shape(src)
        sel, strides, offset = slice_view(s, op.params())
        cshape, (cstrides,) = collapse(sel, [strides])
        params = {
            "mode": mode, "shape": cshape, "strides": cstrides, "offset": offset, "total": math.prod(s),
            "elem": elem, "inplace": 1,
        }  # fmt: skip
        return Lowered(params, [src, value])

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join(f"{p['mode']}_subtensor", p["shape"], "s", p["strides"], f"o{p['offset']}",
                        f"t{p['total']}", p["elem"])  # fmt: skip

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        at = f"out[{p['offset']}L + x0]"
        body = f"{at} = val[o];" if p["mode"] == "set" else _add_into(p["elem"], at, "val[o]")
        loops = _strided_loops(p["shape"], [p["strides"]], body, math.prod(p["shape"]))
        args = "const void* src_, const void* val_, void* out_, unsigned char* ws, int nt"
        return _dense_update(sym, args, p["elem"], p["total"], loops)

    def support(self, em: CEmitter) -> str:
        return HEADER


# ----------------------------------------------------------------------------------------------
# Advanced indexing: indexing_multi_axis_vec and its set / incr forms


def index_geometry(p: dict[str, Any]) -> dict[str, Any]:
    """How an advanced index walks its tensors: the broadcast index shape ``B`` (collapsed, with each
    index tensor's strides), the non-indexed axes before ``B`` in the selection (``pre``) and after
    it (``post``), each collapsed with its strides into ``src`` and into the dense selection (the
    output of a gather, the value of set / incr)."""
    s, axes, ishapes = tuple(p["src"]), list(p["axes"]), [tuple(x) for x in p["ishapes"]]
    bshape = T.broadcast_shapes("indexing", ishapes)
    nb = math.prod(bshape)
    rest = [i for i in range(len(s)) if i not in axes]
    at = axes[0] if axes == list(range(axes[0], axes[0] + len(axes))) else 0
    src_strides = row_major(s)
    pre, post = rest[:at], rest[at:]
    post_shape = [s[i] for i in post]
    q = math.prod(post_shape)
    pre_shape = [s[i] for i in pre]
    pre_sel = [d * nb * q for d in row_major(tuple(pre_shape))]
    pre_c, (pre_src, pre_out) = collapse(pre_shape, [[src_strides[i] for i in pre], pre_sel])
    post_c, (post_src, post_out) = collapse(
        post_shape, [[src_strides[i] for i in post], row_major(tuple(post_shape))]
    )
    b_c, b_strides = collapse(bshape, [broadcast_strides(x, bshape) for x in ishapes])
    return {
        "nb": nb, "q": q, "pre": (pre_c, pre_src, pre_out), "post": (post_c, post_src, post_out),
        "b": (b_c, b_strides), "sizes": [s[a] for a in axes], "astrides": [src_strides[a] for a in axes],
    }  # fmt: skip


def _nest(
    prefix: str,
    dims: Sequence[int],
    strides: Sequence[Sequence[int]],
    names: Sequence[str],
    bases: Sequence[str],
    depth: int,
    pragma: str = "",
) -> tuple[list[str], list[str], int]:
    """Nested loops ``prefix0..`` over ``dims`` defining ``names[k] = bases[k] + sum(i * strides[k])``:
    (opening lines, closing lines, depth after)."""
    opening, closing = [], []
    for i, d in enumerate(dims):
        if i == 0 and pragma:
            opening.append("  " * depth + pragma)
        opening.append(f"{'  ' * depth}for (long {prefix}{i} = 0; {prefix}{i} < {d}; ++{prefix}{i}) {{")
        closing.insert(0, "  " * depth + "}")
        depth += 1
    for name, base, st in zip(names, bases, strides, strict=True):
        terms = " + ".join([base, *(f"{prefix}{i} * {v}L" for i, v in enumerate(st) if v)])
        opening.append(f"{'  ' * depth}const long {name} = {terms};")
    return opening, closing, depth


class Indexing(Template):
    """``out = src[idx...]`` (get), or ``out = src`` with that selection replaced by (set) or
    incremented by (incr) ``value``. First the source offset of each index position (the workspace:
    one ``long`` per position, indices wrapped and clamped), then per leading non-indexed position
    (in parallel), per index position in order, per trailing position, one element moved or added."""
    examples = (
        E.indexing((5, 4, 3), 0, 6),
        E.indexing((3, 7), 1, 4, kind="set"),
        E.indexing((6, 5), 0, 3, kind="incr"),
    )

    family = "indexing"
    ops = (T.IndexingMultiAxisVecOp, T.IndexingSetMultiAxisVecOp, T.IndexingIncrMultiAxisVecOp)
    priority = 100
    fails = True

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(
            op, T.IndexingMultiAxisVecOp | T.IndexingSetMultiAxisVecOp | T.IndexingIncrMultiAxisVecOp
        )
        if isinstance(op, T.IndexingMultiAxisVecOp):
            mode, data = "get", list(op.operands[:1])
        else:
            mode = "set" if isinstance(op, T.IndexingSetMultiAxisVecOp) else "incr"
            data = list(op.operands[:2])
        indices = list(op.operands[len(data) :])
        elem = _element(op, mode)
        if elem is None or not _plain(*op.operands, op.results[0]) or any(code(v) != "i32" for v in indices):
            return None
        s = shape(data[0])
        axes = tuple(op.params()["axes"])
        ishapes = tuple(shape(v) for v in indices)
        if any(s[a] == 0 for a in axes) and math.prod(T.broadcast_shapes(op.name, ishapes)):
            return None  # no element to clamp an index to (the reference raises)
        params: dict[str, Any] = {"mode": mode, "src": s, "axes": axes, "ishapes": ishapes, "elem": elem}
        if mode != "get":
            params["inplace"] = 1
        return Lowered(params, [*data, *indices])

    def symbol(self, p: dict[str, Any]) -> str:
        idx = [f"i{'x'.join(map(str, x))}" for x in p["ishapes"]]
        return sym_join("indexing", p["mode"], "s", p["src"], "a", p["axes"], *idx, p["elem"])

    def workspace(self, p: dict[str, Any]) -> int:
        return 8 * math.prod(T.broadcast_shapes("indexing", [tuple(x) for x in p["ishapes"]]))

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        g = index_geometry(p)
        n = len(p["axes"])
        t = _ctype(p["elem"])
        # 1. the source offset of every index position
        b_shape, b_strides = g["b"]
        offsets = []
        for k, (size, stride) in enumerate(zip(g["sizes"], g["astrides"], strict=True)):
            # out of range: the run fails naming this kernel (xm_run's error), and the walk reads
            # element 0 meanwhile, never outside the tensor
            offsets.append(
                f"{{ long v = idx{k}[x{k}]; if (v < 0) v += {size};"
                f" if ((unsigned long)v >= {size}ul) {{"
                f' xm_index_error(ctx, "{sym}", idx{k}[x{k}], {size}); v = 0; }}'
                f" off += v * {stride}L; }}"
            )
        table = _strided_loops(
            b_shape, b_strides, "long off = 0; " + " ".join(offsets) + " base[o] = off;", g["nb"]
        )
        # 2. the selection
        pre_shape, pre_src, pre_out = g["pre"]
        post_shape, post_src, post_out = g["post"]
        work = math.prod(pre_shape) * g["nb"] * g["q"]
        # in parallel over the leading non-indexed axes only: set / incr then apply a repeated
        # index in order within one thread
        lines, close_pre, depth = _nest(
            "i", pre_shape, [pre_src, pre_out], ["ps", "po"], ["0", "0"], 1, _par(work)
        )
        lines.append(f"{'  ' * depth}for (long b = 0; b < {g['nb']}; ++b) {{")
        close_b = "  " * depth + "}"
        depth += 1
        lines.append(f"{'  ' * depth}const long bs = ps + base[b], bo = po + b * {g['q']}L;")
        inner, close_post, depth = _nest(
            "j", post_shape, [post_src, post_out], ["si", "o"], ["bs", "bo"], depth
        )
        lines += inner
        if p["mode"] == "get":
            body = "out[o] = src[si];"
        elif p["mode"] == "set":
            body = "out[si] = val[o];"
        else:
            body = _add_into(p["elem"], "out[si]", "val[o]")
        lines.append("  " * depth + body)
        lines += close_post + [close_b] + close_pre
        walk = "\n".join(lines)
        idx_args = [f"const void* idx{k}_" for k in range(n)]
        idx_views = "\n".join(f"  const int32_t* idx{k} = (const int32_t*)idx{k}_;" for k in range(n))
        prologue = f"{idx_views}\n  long* base = (long*)(void*)ws;\n{table}\n"
        if p["mode"] == "get":
            args = ", ".join(
                ["const void* src_", *idx_args, "void* out_", "unsigned char* ws", "int nt", "xm_ctx* ctx"]
            )
            return f"""
static void {sym}({args}) {{
  const {t}* src = (const {t}*)src_;
  {t}* out = ({t}*)out_;
{prologue}{walk}
}}
"""
        args = ", ".join(
            [
                "const void* src_",
                "const void* val_",
                *idx_args,
                "void* out_",
                "unsigned char* ws",
                "int nt",
                "xm_ctx* ctx",
            ]
        )
        return _dense_update(sym, args, p["elem"], math.prod(p["src"]), prologue + walk)

    def support(self, em: CEmitter) -> str:
        return HEADER


# ----------------------------------------------------------------------------------------------
# Linspace


class Linspace(Template):
    """``num`` float32 values from ``start`` to ``stop`` (one-element float32 or float16 operands),
    as ``np.linspace`` computes them in double precision."""
    examples = (E.linspace(-1.5, 2.0, 7), E.linspace(0.0, 1.0, 5, endpoint=False))

    family = "linspace"
    ops = (T.LinspaceOp,)
    priority = 100

    def match(self, op: Operation) -> Lowered | None:
        assert isinstance(op, T.LinspaceOp)
        codes = tuple(code(v) for v in op.operands)
        if any(c not in ("f32", "f16") for c in codes) or code(op.results[0]) != "f32":
            return None
        p = op.params()
        params = {"num": int(p["num"]), "endpoint": int(bool(p["endpoint"])), "dtypes": codes}
        return Lowered(params, list(op.operands))

    def symbol(self, p: dict[str, Any]) -> str:
        return sym_join("linspace", f"n{p['num']}", "endpoint" if p["endpoint"] else "", *p["dtypes"])

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        num, endpoint = p["num"], p["endpoint"]
        t0, t1 = (CTYPES[c] for c in p["dtypes"])
        div = num - 1 if endpoint else num
        if div > 0:
            # numpy: y = arange(num) * step, or (arange(num) / div) * delta when step is 0 (denormals)
            value = f"(step == 0.0 ? ((double)i / {div}.0) * delta : (double)i * step)"
        else:
            value = "(double)i * delta"
        last = f"  if ({num} > 1) y[{num - 1}] = (float)stop;\n" if endpoint else ""
        return exact(f"""
static void {sym}(const void* start_, const void* stop_, void* out_, unsigned char* ws, int nt) {{
  const double start = (double)((const {t0}*)start_)[0], stop = (double)((const {t1}*)stop_)[0];
  const double delta = stop - start, step = delta / {max(div, 1)}.0;
  float* y = (float*)out_;
  (void)ws; (void)nt; (void)step;
  for (long i = 0; i < {num}; ++i) {{
    const double v = {value};
    y[i] = (float)(v + start);
  }}
{last}}}
""")

    def support(self, em: CEmitter) -> str:
        return REQUANT_C


KERNEL_UNITS = (ModifySubtensor(), Indexing(), Linspace())
