"""CUDA renders of the C indexing units (``backends/c/templates/portable/indexing.py``: their rules,
parameters, symbols and semantics): ``modify_subtensor``, ``indexing`` and ``linspace``.

* A modifying kernel's launcher first copies ``src`` into ``out`` on the run's stream unless the
  planner put ``out`` over ``src``; the kernels that follow on the same stream see the copy.
* Gathers and slice updates run one thread per element (a slice addresses each element once).
* Set / incr by index tensors run one thread per (leading, trailing) non-indexed position, each
  walking the index positions in order: a repeated index keeps its last value (set) or accumulates
  in the reference's order (incr), without atomics.
* Index offsets are computed per thread from the int32 index tensors (wrapped, then clamped into
  the axis: a kernel never touches memory outside its tensors); no workspace.
* Unlike the C kernels, an index outside ``[-size, size)`` does not fail the run (the device has no
  error channel back to ``xm_run`` yet): it is clamped into the axis, where the reference interpreter
  and the C targets raise. Check indices on the host first where they may be out of range.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from backends.c.templates.portable import indexing as C
from backends.c.templates.portable.generic import BYTES_CTYPE
from backends.c.templates.portable.requant import REQUANT_C, exact
from backends.cuda.templates import BLOCK, CudaRender, kernel_args, thread_kernel
from backends.cuda.templates.portable import CUDA_TYPES

if TYPE_CHECKING:
    from backends.c.emitter import CEmitter

# element code -> ``{a} + {b}`` in that CUDA type (float16 through float, as the C units)
INCR_CUDA = {
    **{k: v for k, (_, v) in C.INCR_C.items()},
    "f16": "__float2half(__half2float({a}) + __half2float({b}))",
}


def _ctype(elem: str) -> str:
    return BYTES_CTYPE[int(elem[1:])] if elem.startswith("e") else CUDA_TYPES[elem]


def _decode(prefix: str, shape: Sequence[int], flat: str) -> str:
    """Lines declaring ``prefix0..`` (row-major indices of ``shape``) from the flat index ``flat``."""
    lines = [f"long {prefix}r_ = {flat};"]
    for k in range(len(shape) - 1, 0, -1):
        lines.append(f"const long {prefix}{k} = {prefix}r_ % {shape[k]}L; {prefix}r_ /= {shape[k]}L;")
    lines.append(f"const long {prefix}0 = {prefix}r_;")
    # nvcc -Werror: an index with stride 0 everywhere (a size-1 axis) is not read
    lines += [f"(void){prefix}{k};" for k in range(len(shape))]
    return " ".join(lines)


def _dot(prefix: str, strides: Sequence[int]) -> str:
    return " + ".join(f"{prefix}{k} * {s}L" for k, s in enumerate(strides) if s) or "0"


def _update(elem: str, at: str, value: str) -> str:
    t = _ctype(elem)
    return f"{{ const {t} a_ = {at}, b_ = {value}; {at} = {INCR_CUDA[elem].format(a='a_', b='b_')}; }}"


def _kernel(
    sym: str, args: Sequence[tuple[str, str]], threads: int, body: str, copy_bytes: int | None
) -> str:
    """A one-thread-per-index kernel and its launcher (the launcher first copying ``src`` into
    ``out`` for the modifying kernels, unless they are one buffer)."""
    params, launcher, casts = kernel_args(args)
    copy = (
        f"  if (out_ != src_ && {copy_bytes}UL) cudaMemcpyAsync(out_, src_, {copy_bytes}UL, "
        "cudaMemcpyDeviceToDevice, xm_stream);\n"
        if copy_bytes is not None
        else ""
    )
    launch = (
        f"  XM_LAUNCH({sym}_k, dim3({max(1, math.ceil(threads / BLOCK))}), dim3({BLOCK}), {casts});\n"
        if threads
        else f"  (void)({sym}_k);\n"
    )
    return thread_kernel(sym, params, threads, body) + f"""static void {sym}({launcher}) {{
  (void)ws; (void)nt;
{copy}{launch}}}
"""


class ModifySubtensor(CudaRender, C.ModifySubtensor):
    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        t = _ctype(p["elem"])
        at = f"out[{p['offset']}L + {_dot('i', p['strides'])}]"
        update = f"{at} = val[i];" if p["mode"] == "set" else _update(p["elem"], at, "val[i]")
        body = f"{_decode('i', p['shape'], 'i')}\n    {update}"
        args = [(f"const {t}*", "src"), (f"const {t}*", "val"), (f"{t}*", "out")]
        return _kernel(sym, args, math.prod(p["shape"]), body, p["total"] * C._bytes(p["elem"]))


class Indexing(CudaRender, C.Indexing):
    fails = False  # clamps an index out of range (no error channel from the device): no context

    def workspace(self, p: dict[str, Any]) -> int:
        return 0  # index offsets are computed per thread

    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        g = C.index_geometry(p)
        t = _ctype(p["elem"])
        n = len(p["axes"])
        pre_shape, pre_src, _ = g["pre"]
        post_shape, post_src, _ = g["post"]
        b_shape, b_strides = g["b"]
        nb, q = g["nb"], g["q"]
        base = [f"{_decode('b', b_shape, 'b')} long base = 0;"]
        for k, (size, stride) in enumerate(zip(g["sizes"], g["astrides"], strict=True)):
            base.append(
                f"{{ long v = idx{k}[{_dot('b', b_strides[k])}]; if (v < 0) v += {size};"
                f" v = v < 0 ? 0 : v > {size - 1} ? {size - 1} : v; base += v * {stride}L; }}"
            )
        offsets = " ".join(base)
        pre = f"{_decode('p', pre_shape, 'pf')} const long ps = {_dot('p', pre_src)};"
        post = f"{_decode('q', post_shape, 'qf')} const long qs = {_dot('q', post_src)};"
        idx_args = [("const int32_t*", f"idx{k}") for k in range(n)]
        if p["mode"] == "get":
            body = (
                f"const long pf = i / {nb * q}L, b = (i / {q}L) % {nb}L, qf = i % {q}L;\n"
                f"    {pre}\n    {post}\n    {offsets}\n    out[i] = src[ps + base + qs];"
            )
            args = [(f"const {t}*", "src"), *idx_args, (f"{t}*", "out")]
            return _kernel(sym, args, math.prod(pre_shape) * nb * q, body, None)
        move = "out[si] = val[o];" if p["mode"] == "set" else _update(p["elem"], "out[si]", "val[o]")
        body = (
            f"const long pf = i / {q}L, qf = i % {q}L;\n    {pre}\n    {post}\n"
            f"    for (long b = 0; b < {nb}L; ++b) {{\n      {offsets}\n"
            f"      const long si = ps + base + qs, o = (pf * {nb}L + b) * {q}L + qf;\n      {move}\n    }}"
        )
        args = [(f"const {t}*", "src"), (f"const {t}*", "val"), *idx_args, (f"{t}*", "out")]
        return _kernel(sym, args, math.prod(pre_shape) * q, body, math.prod(p["src"]) * C._bytes(p["elem"]))


class Linspace(CudaRender, C.Linspace):
    def render(self, em: CEmitter, sym: str, p: dict[str, Any]) -> str:
        num, endpoint = p["num"], p["endpoint"]
        t0, t1 = (CUDA_TYPES[c] for c in p["dtypes"])
        load = {"__half": "(double)__half2float({x}[0])"}
        start = load.get(t0, "(double){x}[0]").format(x="a")
        stop = load.get(t1, "(double){x}[0]").format(x="z")
        div = num - 1 if endpoint else num
        value = (
            f"(step == 0.0 ? ((double)i / {div}.0) * delta : (double)i * step)"
            if div > 0
            else "(double)i * delta"
        )
        last = f"(i == {num - 1}L && {num} > 1) ? (float)stop : " if endpoint else ""
        body = (
            f"const double start = {start}, stop = {stop};\n"
            f"    const double delta = stop - start, step = delta / {max(div, 1)}.0;\n    (void)step;\n"
            f"    y[i] = {last}(float)({value} + start);"
        )
        return exact(
            _kernel(sym, [(f"const {t0}*", "a"), (f"const {t1}*", "z"), ("float*", "y")], num, body, None)
        )

    def support(self, em: CEmitter) -> str:
        return REQUANT_C


KERNEL_UNITS = (ModifySubtensor(), Indexing(), Linspace())
