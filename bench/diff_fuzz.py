"""Differential testing: random small graphs and fuzzed ``.mge`` files, compiled for every x86 target
and compared with the reference interpreter (the single source of truth of each op's semantics).

A graph (:func:`random_graph`) is a seeded random program over the tensor dialect, traced through the
functional API: convolutions (dense, group, depthwise, 1x1, transposed; strides, padding, dilation)
with bias, residual and activation, matmul / linear / batched matmul, pooling (max, average, adaptive),
every float32 elementwise mode (broadcasting operands, domain-limited modes included), int32
elementwise chains, reduce, softmax / log-softmax, concat / split / subtensor / dimshuffle /
broadcast / reshape, resize, padding, type conversions, layer and batch normalisation, argmax, and
(one graph in five) an int8 chain: quantized convolutions, Q-mode elementwise, max pooling and
float islands. Shapes are small and odd.

Each graph runs on two input sets: plain normal values, and the same with NaN, +-Inf, -0.0,
denormals and large magnitudes sprinkled in. Comparison (:func:`compare`): NaN and +-Inf positions
must match exactly, finite values within ``rtol * |want| + atol * scale`` (``scale``: the largest
finite magnitude of the output, at least 1; float32 ``rtol = atol = 1e-4``, float16 storage
``3e-2`` against the reference run of the float16 graph); int8 graphs are compared bit-exactly.

Outcomes per (case, target): ``ok``, ``mismatch``, ``crash`` (the process died or Python raised
something that is not an ``XmgeError``), ``sanitizer`` (the ASan/UBSan runner reported), and
``compile-error`` (an ``XmgeError``: a documented one-line refusal, counted by its message).

    python bench/diff_fuzz.py --graphs 300 --seed 1              # random graphs
    python bench/diff_fuzz.py --graphs 0 --mge 200 --seed 1      # fuzzed .mge files only
    python bench/diff_fuzz.py --minutes 15 --seed 7              # as many as fit in 15 minutes

Every case runs in a forked process (a crash costs that case only). The sanitized build runs for
every ``--sanitize-every``-th case (default 4) on one target, rotating through them.
tests/test_differential.py runs a fixed slice in-suite.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
import traceback
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from dialects import enums  # noqa: E402
from dialects.tensor import ELEMWISE_ARITY, ELEMWISE_BOOL_RESULT  # noqa: E402
from semantics.kernels import ELEMWISE  # noqa: E402

F32_TARGETS = ("x86-avx2", "x86-avx2-nchw88", "x86-avx512", "x86-avx512-nchw88", "x86-avx512-nchw88-vnni")
F16_TARGETS = tuple(t + "+io16xc32" for t in F32_TARGETS[:4])
ALL_TARGETS = F32_TARGETS + F16_TARGETS
OUTCOMES = ("ok", "mismatch", "crash", "sanitizer", "compile-error")
F32_TOL = 1e-4
F16_TOL = 3e-2

E = enums.ElemwiseMode
_INT_ONLY = {E.SHL, E.SHR}
_LOGICAL = {E.NOT, E.AND, E.OR, E.XOR}
FLOAT_MODES = sorted((m for m in ELEMWISE if m not in _INT_ONLY | _LOGICAL), key=lambda m: m.name)
# modes whose reference result is defined (not NaN) on a restricted domain: half the time the
# operand is mapped into it, the other half it is left raw so that NaN positions are compared too
DOMAIN: dict[Any, str] = {E.ACOS: "unit", E.ASIN: "unit", E.ATANH: "unit", E.ERFINV: "unit",
                          E.ERFCINV: "0to2", E.ACOSH: "above1", E.LOG: "pos", E.SQRT: "pos", E.POW: "pos",
                          E.LOG1P: "pos"}  # fmt: skip
INT_MODES = ("ADD", "SUB", "MUL", "MAX", "MIN", "ABS", "NEGATE", "RELU", "FLOOR_DIV", "MOD", "SHL", "SHR")
ACTIVATIONS = ("none", "relu", "sigmoid", "tanh", "relu6", "hswish", "leaky_relu", "silu", "gelu")


# ----------------------------------------------------------------------------------------------
# Random graphs


# Known bugs that only special input values (NaN, +-Inf, values beyond int32) reveal, keyed by the
# recipe step that triggers them; each has a strict-xfail reproducer in tests/test_differential.py.
# Graphs with such a step skip the special-valued input set unless ``include_known`` is set, so that
# one known bug does not hide new ones.
KNOWN_SPECIAL_VALUE_BUGS: dict[str, str] = {
}


@dataclass
class Graph:
    """One random program: its traced module, the inputs it was traced with, and a readable recipe."""

    seed: int
    module: Any
    inputs: list[np.ndarray]
    steps: list[str]
    int8: bool

    def known_bugs(self) -> list[str]:
        """The known special-value bugs this graph's recipe triggers (KNOWN_SPECIAL_VALUE_BUGS)."""
        return [
            bug
            for step, bug in KNOWN_SPECIAL_VALUE_BUGS.items()
            if any(s.startswith(step) for s in self.steps)
        ]

    @property
    def name(self) -> str:
        return f"graph {self.seed} ({'int8' if self.int8 else 'float'}, {len(self.steps)} steps)"


class _Builder:
    """The random choices of one graph, made while its function is traced (shapes are concrete)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.steps: list[str] = []

    # -- helpers ---------------------------------------------------------------------------------
    def pick(self, seq: Sequence[Any]) -> Any:
        return seq[int(self.rng.integers(0, len(seq)))]

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def const(self, *shape: int, scale: float = 0.5) -> Any:
        import compiler as xm

        return xm.tensor((self.rng.standard_normal(shape) * scale).astype(np.float32))

    def note(self, text: str) -> None:
        self.steps.append(text)

    # -- float ops -------------------------------------------------------------------------------
    def activation(self, y: Any) -> Any:
        import compiler.functional as F

        act = self.pick(ACTIVATIONS)
        fns: dict[str, Callable[[Any], Any]] = {
            "none": lambda t: t,
            "relu": F.relu,
            "sigmoid": F.sigmoid,
            "tanh": F.tanh,
            "relu6": F.relu6,
            "hswish": F.hswish,
            "leaky_relu": lambda t: F.leaky_relu(t, 0.1),
            "silu": F.silu,
            "gelu": F.gelu,
        }
        self.note(f"  activation {act}")
        return fns[act](y)

    def conv(self, x: Any, pool: list[Any]) -> Any:
        import compiler.functional as F

        if x.ndim != 4:
            return None
        n, c, h, w = x.shape
        kind = self.pick(("dense", "dense", "group", "depthwise", "1x1", "transposed"))
        k = 1 if kind == "1x1" else int(self.pick((1, 2, 3, 3, 5)))
        stride = int(self.pick((1, 1, 2, 3)))
        dil = 1 if k == 1 else int(self.pick((1, 1, 2)))
        pad = int(self.rng.integers(0, k // 2 * dil + 2)) if k > 1 else int(self.pick((0, 0, 1)))
        divisors = [g for g in range(2, c + 1) if c % g == 0]
        if kind in ("group", "depthwise") and not divisors:  # one channel: grouping means nothing
            kind = "dense"
        if kind == "transposed":
            oc = int(self.rng.integers(1, 9))
            stride = min(stride, 2)
            # the output must not be empty: (size - 1) * stride - 2 * pad + dil * (k - 1) + 1 > 0
            pad = min(pad, (k - 1) * dil, ((min(h, w) - 1) * stride + dil * (k - 1)) // 2)
            wt = self.const(c, oc, k, k, scale=1 / np.sqrt(c * k * k))
            self.note(f"conv_transpose2d {x.shape} oc={oc} k={k} s={stride} p={pad} d={dil}")
            return F.conv_transpose2d(x, wt, stride=stride, padding=pad, dilation=dil)
        if (h + 2 * pad - dil * (k - 1) - 1) < 0 or (w + 2 * pad - dil * (k - 1) - 1) < 0:
            k, dil, pad = 1, 1, 0
        if kind == "group":
            g = int(self.pick(divisors))
            oc = g * int(self.rng.integers(1, 4))
            wt = self.const(g, oc // g, c // g, k, k, scale=1 / np.sqrt(c // g * k * k))
        elif kind == "depthwise":
            g, oc = c, c * int(self.pick((1, 1, 2)))
            wt = self.const(g, oc // g, 1, k, k, scale=1 / k)
        else:
            g, oc = 1, int(self.rng.integers(1, 20))
            wt = self.const(oc, c, k, k, scale=1 / np.sqrt(c * k * k))
        bias = self.const(1, oc, 1, 1) if self.chance(0.6) else None
        self.note(
            f"conv2d {kind} {x.shape} oc={oc} g={g} k={k} s={stride} p={pad} d={dil} bias={bias is not None}"
        )
        y = F.conv2d(x, wt, bias, stride=stride, padding=pad, dilation=dil, groups=g)
        if self.chance(0.4):
            same = [t for t in pool if t.shape == y.shape and t.dtype == y.dtype]
            if same:
                self.note("  + residual")
                y = y + self.pick(same)
        return self.activation(y)

    def matmul(self, x: Any, pool: list[Any]) -> Any:
        import compiler.functional as F

        if x.ndim == 4 and self.chance(0.5):
            n = x.shape[0]
            rows = F.flatten(x, 1)
            k = int(self.rng.integers(1, 24))
            wt = self.const(k, rows.shape[1], scale=1 / np.sqrt(rows.shape[1]))
            bias = self.const(k) if self.chance(0.5) else None
            self.note(f"linear {rows.shape} -> {k} bias={bias is not None}")
            y = F.linear(rows, wt, bias)
            return F.reshape(self.activation(y), (n, k, 1, 1)) if self.chance(0.5) else y
        if x.ndim < 2:
            return None
        # batched: the last two axes as matrices, the leading ones as the batch
        m, kk = x.shape[-2], x.shape[-1]
        ta, tb = self.chance(0.3), self.chance(0.3)
        a = F.transpose(x, (*range(x.ndim - 2), x.ndim - 1, x.ndim - 2)) if ta else x
        cols = int(self.rng.integers(1, 12))
        b = self.const(*(cols, kk) if tb else (kk, cols), scale=1 / np.sqrt(kk))
        self.note(f"matmul {x.shape} transpose_a={ta} transpose_b={tb} cols={cols}")
        if x.ndim == 2:
            return F.matmul(a, b, transpose_a=ta, transpose_b=tb)
        batch = int(np.prod(x.shape[:-2]))
        a3 = F.reshape(a, (batch, *a.shape[-2:]))
        b3 = F.broadcast_to(F.expand_dims(b, 0), (batch, *b.shape))
        y = F.matmul(a3, b3, transpose_a=ta, transpose_b=tb)
        return F.reshape(y, (*x.shape[:-2], m, cols))

    def pooling(self, x: Any, pool: list[Any]) -> Any:
        import compiler.functional as F

        if x.ndim != 4:
            return None
        h, w = x.shape[2:]
        kind = self.pick(("max", "avg", "avg_incl", "adaptive_avg", "adaptive_max"))
        if kind.startswith("adaptive"):
            oh, ow = int(self.rng.integers(1, h + 1)), int(self.rng.integers(1, w + 1))
            self.note(f"{kind}_pool2d {x.shape} -> ({oh}, {ow})")
            fn = F.adaptive_avg_pool2d if kind == "adaptive_avg" else F.adaptive_max_pool2d
            return fn(x, (oh, ow))
        k = int(self.rng.integers(1, min(4, h, w) + 1))
        s = int(self.rng.integers(1, 3))
        p = int(self.rng.integers(0, k // 2 + 1))
        self.note(f"{kind}_pool2d {x.shape} k={k} s={s} p={p}")
        if kind == "max":
            return F.max_pool2d(x, k, s, p)
        mode = "average" if kind == "avg_incl" else "average_count_exclude_padding"
        return F.avg_pool2d(x, k, s, p, mode=mode)

    def elemwise(self, x: Any, pool: list[Any]) -> Any:
        import compiler.functional as F
        from compiler.functional.elemwise import _elemwise

        mode = self.pick(FLOAT_MODES)
        arity = ELEMWISE_ARITY[mode]
        first = x
        domain = DOMAIN.get(mode) if self.chance(0.5) else None
        if domain == "unit":
            first = F.tanh(x) * 0.95
        elif domain == "0to2":
            first = F.sigmoid(x) * 1.9 + 0.05
        elif domain == "above1":
            first = F.abs(x) + 1.0
        elif domain == "pos":
            first = F.abs(x) + 0.1
        operands = [first]
        for _ in range(arity - 1):
            operands.append(self.broadcast_operand(x, pool))
        shapes = [tuple(getattr(o, "shape", ())) for o in operands]
        self.note(f"elemwise {mode.name} {shapes} domain={domain}")
        y = _elemwise(mode.name, *operands)
        return y.astype("float32") if mode in ELEMWISE_BOOL_RESULT else y

    def broadcast_operand(self, x: Any, pool: list[Any]) -> Any:
        """A second operand for ``x``: another live tensor of its shape, a constant broadcast along
        some axes, or a scalar."""
        same = [t for t in pool if t.shape == x.shape and t.dtype == x.dtype and t is not x]
        choice = self.rng.integers(0, 4)
        if choice == 0 and same:
            return self.pick(same)
        if choice == 1:
            return float(self.rng.standard_normal())
        shape = tuple(d if self.chance(0.5) else 1 for d in x.shape)
        return self.const(*shape, scale=1.0)

    def int_chain(self, x: Any, pool: list[Any]) -> Any:
        import compiler as xm
        from compiler.functional.elemwise import _elemwise

        a = (x * 3.0).astype("int32")
        mode = self.pick(INT_MODES)
        arity = ELEMWISE_ARITY[E[mode]]
        if arity == 1:
            y = _elemwise(mode, a)
        else:
            shape = tuple(d if self.chance(0.5) else 1 for d in x.shape)
            if mode in ("SHL", "SHR"):
                other = self.rng.integers(0, 8, shape)
            elif mode in ("FLOOR_DIV", "MOD"):  # no zero divisor: C traps on it, numpy warns
                other = self.rng.integers(1, 6, shape) * self.pick((1, -1))
            else:
                other = self.rng.integers(-9, 10, shape)
            y = _elemwise(mode, a, xm.tensor(other.astype(np.int32)))
        self.note(f"int32 elemwise {mode} {x.shape}")
        return y.astype("float32")

    def reduce(self, x: Any, pool: list[Any]) -> Any:
        import compiler.functional as F

        axis = int(self.rng.integers(0, x.ndim))
        kind = self.pick(("sum", "mean", "max", "min", "prod", "norm", "argmax", "argmin"))
        keep = self.chance(0.6)
        self.note(f"reduce {kind} {x.shape} axis={axis} keepdims={keep}")
        if kind == "prod":
            return F.prod(F.tanh(x) * 0.5 + 1.0, axis=axis, keepdims=keep)
        if kind == "norm":
            y = F.norm(x, ord=2, axis=axis)
            return F.expand_dims(y, axis) if keep else y
        if kind in ("argmax", "argmin"):
            fn = F.argmax if kind == "argmax" else F.argmin
            return fn(x, axis=axis, keepdims=keep).astype("float32")
        fn = {"sum": F.sum, "mean": F.mean, "max": F.max, "min": F.min}[kind]
        return fn(x, axis=axis, keepdims=keep)

    def softmax(self, x: Any, pool: list[Any]) -> Any:
        import compiler.functional as F

        axis = int(self.rng.integers(0, x.ndim))
        log = self.chance(0.3)
        self.note(f"{'log_' if log else ''}softmax {x.shape} axis={axis}")
        return F.log_softmax(x, axis=axis) if log else F.softmax(x, axis=axis)

    def movement(self, x: Any, pool: list[Any]) -> Any:
        import compiler.functional as F

        kind = self.pick(("concat", "split", "subtensor", "transpose", "broadcast", "reshape", "stack"))
        axis = int(self.rng.integers(0, x.ndim))
        self.note(f"{kind} {x.shape} axis={axis}")
        if kind == "concat":

            def fits(t: Any) -> bool:  # same shape but along ``axis``
                same_rank = t.ndim == x.ndim and t.dtype == x.dtype
                return same_rank and all(
                    a == b for i, (a, b) in enumerate(zip(t.shape, x.shape, strict=False)) if i != axis
                )

            others = [t for t in pool if fits(t)]
            parts = [x, self.pick(others) if others else x * 2.0]
            if self.chance(0.3):
                parts.append(x)
            return F.concat(parts, axis=axis)
        if kind == "split":
            if x.shape[axis] < 2:
                return None
            cut = int(self.rng.integers(1, x.shape[axis]))
            return self.pick(F.split(x, [cut], axis=axis))
        if kind == "subtensor":
            index: list[Any] = []
            for d in x.shape:
                lo = int(self.rng.integers(0, d))
                hi = int(self.rng.integers(lo + 1, d + 1))
                step = int(self.pick((1, 1, 2)))
                index.append(slice(lo, hi, step) if self.chance(0.6) else slice(None))
            if self.chance(0.2) and x.ndim > 1:
                index[axis] = int(self.rng.integers(0, x.shape[axis]))  # an axis removed
            return x[tuple(index)]
        if kind == "transpose":
            return F.transpose(x, tuple(int(i) for i in self.rng.permutation(x.ndim)))
        if kind == "broadcast":
            reduced = F.sum(x, axis=axis, keepdims=True)
            shape = list(x.shape)
            shape[axis] = int(self.rng.integers(1, 5))
            return F.broadcast_to(reduced, tuple(shape))
        if kind == "stack":
            return F.stack([x, x * 0.5], axis=axis)
        size = int(np.prod(x.shape))
        dims = [d for d in range(1, min(size, 16) + 1) if size % d == 0]
        first = int(self.pick(dims))
        return F.reshape(x, (first, -1) if self.chance(0.5) else (1, first, -1))

    def resize(self, x: Any, pool: list[Any]) -> Any:
        from compiler.functional.vision import interpolate

        if x.ndim != 4:
            return None
        h, w = x.shape[2:]
        size = (int(self.rng.integers(1, 2 * h + 2)), int(self.rng.integers(1, 2 * w + 2)))
        mode = self.pick(("bilinear", "nearest"))
        self.note(f"resize {x.shape} -> {size} {mode}")
        return interpolate(x, size=size, mode=mode)

    def padding(self, x: Any, pool: list[Any]) -> Any:
        import compiler.functional as F

        mode = self.pick(("constant", "reflect", "edge"))
        widths = []
        for d in x.shape:
            top = d - 1 if mode == "reflect" else 3
            widths.append(
                (int(self.rng.integers(0, min(top, 2) + 1)), int(self.rng.integers(0, min(top, 2) + 1)))
            )
        value = float(self.rng.standard_normal())
        self.note(f"pad {x.shape} {widths} {mode}")
        return F.pad(x, widths, mode=mode, constant_value=value)

    def typecvt(self, x: Any, pool: list[Any]) -> Any:
        kind = self.pick(("int32", "float16", "int16", "uint8"))
        self.note(f"typecvt {x.shape} float32 -> {kind} -> float32")
        scale = 3.0 if kind != "float16" else 1.0
        src = x * scale
        if kind == "uint8":
            src = src.__abs__()
        return src.astype(kind).astype("float32")

    def norm(self, x: Any, pool: list[Any]) -> Any:
        import compiler.functional as F

        if x.ndim == 4 and self.chance(0.3):
            c = x.shape[1]
            mean, var = self.const(1, c, 1, 1), F.abs(self.const(1, c, 1, 1)) + 0.5
            gamma, beta = self.const(1, c, 1, 1), self.const(1, c, 1, 1)
            self.note(f"batch_norm {x.shape} (inference)")
            return F.batch_norm(x, mean, var, gamma, beta, training=False)
        dims = int(self.rng.integers(1, min(2, x.ndim) + 1))
        shape = x.shape[-dims:]
        affine = self.chance(0.5)
        self.note(f"layer_norm {x.shape} over {shape} affine={affine}")
        if affine:
            return F.layer_norm(x, shape, True, self.const(*shape, scale=1.0), self.const(*shape, scale=1.0))
        return F.layer_norm(x, shape, False)

    # -- int8 ops --------------------------------------------------------------------------------
    def int8_chain(self, x: Any) -> list[Any]:
        """Quantized convolutions (dense / group / depthwise / 1x1, strides, padding, dilation,
        relu or identity), residual Q-adds, max pooling and a float island, as PTQ leaves them."""
        import compiler.functional as F
        from compiler import dtype as D
        from compiler.tensor import Tensor
        from semantics.quant_kernels import quantize

        sx = float(self.pick((1 / 40, 1 / 16, 0.1)))
        q = x.astype(D.qint8(sx))
        outs = []
        for _ in range(int(self.rng.integers(1, 4))):
            _, c, h, w = q.shape
            kind = self.pick(("dense", "group", "depthwise", "1x1"))
            k = 1 if kind == "1x1" else int(self.pick((1, 3, 3, 5)))
            dil = 1 if k == 1 else int(self.pick((1, 1, 2)))
            s, p = int(self.pick((1, 1, 2))), int(self.rng.integers(0, k // 2 * dil + 1))
            if h + 2 * p - dil * (k - 1) - 1 < 0 or w + 2 * p - dil * (k - 1) - 1 < 0:
                k, dil, p = 1, 1, 0
            divisors = [g for g in range(2, c + 1) if c % g == 0]
            if kind == "group" and divisors:
                g = int(self.pick(divisors))
                oc = g * int(self.rng.integers(1, 4))
                shape: tuple[int, ...] = (g, oc // g, c // g, k, k)
            elif kind == "depthwise" and c > 1:
                g = oc = c
                shape = (c, 1, 1, k, k)
            else:
                g, oc = 1, int(self.rng.integers(1, 20))
                shape = (oc, c, k, k)
            wf = (self.rng.standard_normal(shape) * 0.3).astype(np.float32)
            sw = float(np.abs(wf).max()) / 127 or 1.0
            wq = Tensor(quantize(wf, D.qint8(sw)), dtype=D.qint8(sw))
            s_in = float(q.dtype.metadata["mgb_dtype"]["scale"]) if q.dtype.metadata else sx
            bias = None
            if self.chance(0.7):
                bf = self.rng.standard_normal((1, oc, 1, 1)).astype(np.float32)
                s_acc = float(np.float32(s_in) * np.float32(sw))
                bias = Tensor(quantize(bf, D.qint32(s_acc)), dtype=D.qint32(s_acc))
            s_out = float(self.pick((0.02, 0.05, 0.1)))
            act = self.pick(("relu", "identity"))
            self.note(f"int8 conv {kind} {q.shape} oc={oc} g={g} k={k} s={s} p={p} d={dil} {act}")
            y = F.quantized.conv_bias_activation(
                q, wq, bias, dtype=D.qint8(s_out), stride=s, padding=p, dilation=dil, groups=g,
                nonlinear_mode=act,
            )  # fmt: skip
            extra = self.pick(("none", "qadd", "qfuse_add_relu", "maxpool", "island"))
            self.note(f"  int8 {extra}")
            if extra in ("qadd", "qfuse_add_relu"):
                y = F.quantized.elemwise_multi_type(y, y, mode=extra, dtype=D.qint8(s_out * 2))
            elif extra == "maxpool" and min(y.shape[2:]) >= 2:
                y = F.max_pool2d(y, 2, int(self.pick((1, 2))), 0)
            elif extra == "island":
                y = F.relu6(y.astype("float32")).astype(D.qint8(0.03))
            outs.append(y.astype("float32"))
            q = y
        return outs


FLOAT_OPS: tuple[tuple[str, float], ...] = (
    ("conv", 4.0), ("matmul", 1.5), ("pooling", 1.5), ("elemwise", 4.0), ("int_chain", 0.7),
    ("reduce", 1.2), ("softmax", 0.8), ("movement", 2.0), ("resize", 0.7), ("padding", 0.8),
    ("typecvt", 0.6), ("norm", 0.8),
)  # fmt: skip


def random_graph(seed: int) -> Graph:
    """The graph of ``seed``: traced with the functional API on normal inputs (its recipe in
    ``steps``). One seed in five is an int8 chain."""
    import compiler as xm

    rng = np.random.default_rng([seed, 0x5EED])
    int8 = seed % 5 == 4
    n = int(rng.choice([1, 1, 2]))
    c = int(rng.integers(1, 13))
    h, w = int(rng.integers(1, 14)), int(rng.integers(1, 14))
    if int8:
        h, w = max(h, 3), max(w, 3)
    inputs = [rng.standard_normal((n, c, h, w)).astype(np.float32)]
    if not int8 and rng.random() < 0.4:
        inputs.append(rng.standard_normal((n, c, h, w)).astype(np.float32))
    b = _Builder(rng)
    n_steps = int(rng.integers(2, 8))
    names = [name for name, _ in FLOAT_OPS]
    weights = np.array([wt for _, wt in FLOAT_OPS])

    def fn(*xs: Any) -> tuple[Any, ...]:
        if int8:
            return tuple(b.int8_chain(xs[0] * 2.0))
        pool = list(xs)
        produced: list[Any] = []
        for _ in range(n_steps):
            # the most recent tensors are likelier operands: chains, not just fans
            idx = len(pool) - 1 - min(int(rng.geometric(0.5)) - 1, len(pool) - 1)
            x = pool[idx]
            op = names[int(rng.choice(len(names), p=weights / weights.sum()))]
            y = getattr(b, op)(x, pool)
            if y is None or y.size == 0 or y.size > 200_000:
                continue
            pool.append(y)
            produced.append(y)
        outs = produced[-int(rng.integers(1, 4)) :] or [xs[0] * 1.0]
        return tuple(o if o.dtype == np.float32 else o.astype("float32") for o in outs)

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        # the generator reads shapes as tuples (static shapes) to pick operands of matching shape
        traced = xm.jit.trace(fn, symbolic=True, capture_as_const=True, symbolic_shape=False)
        traced(*[xm.tensor(x) for x in inputs])
    return Graph(seed, traced.module, inputs, b.steps, int8)


def special_inputs(inputs: Sequence[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
    """``inputs`` with NaN, +-Inf, -0.0, denormals and large magnitudes at a few random positions."""
    specials = np.array(
        [np.nan, np.inf, -np.inf, -0.0, 1e-40, -3e-39, 1e6, -2.5e7, 6e4, 3e38], dtype=np.float32
    )
    out = []
    for x in inputs:
        y = x.copy().reshape(-1)
        k = max(1, int(y.size * rng.uniform(0.01, 0.08)))
        pos = rng.choice(y.size, size=min(k, y.size), replace=False)
        y[pos] = rng.choice(specials, size=pos.size)
        out.append(y.reshape(x.shape))
    return out


# ----------------------------------------------------------------------------------------------
# Comparison


F16_OVERFLOW = 1e4
"""With float16 storage the reference runs the float16 graph in float16, the kernels compute in
float32: an intermediate beyond float16's range is Inf in one and a large finite value in the other."""


def compare(
    got: Sequence[np.ndarray], want: Sequence[Any], *, tol: float, exact: bool = False, f16: bool = False
) -> str | None:
    """None when every output agrees, else one line naming the first bad output and how it differs:
    NaN and +-Inf positions must match; finite values within ``tol * |want| + tol * scale``
    (``exact``: bit-equal values)."""
    if len(got) != len(want):
        return f"{len(got)} outputs, the reference has {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g, np.float32), np.asarray(w).astype(np.float32)
        if g.shape != w.shape:
            return f"output {i}: shape {g.shape} != {w.shape}"
        gn, wn = np.isnan(g), np.isnan(w)
        if (gn != wn).any():
            at = tuple(int(v) for v in np.argwhere(gn != wn)[0])
            count = int((gn != wn).sum())
            return f"output {i}: NaN positions differ ({count}), e.g. at {at}: got {g[at]}, want {w[at]}"
        gi, wi = np.isinf(g), np.isinf(w)
        inf_bad = (gi | wi) & ~(g == w) & ~wn
        if f16:
            inf_bad &= ~((gi ^ wi) & (np.abs(np.where(gi, w, g)) >= F16_OVERFLOW))
        if inf_bad.any():
            at = tuple(int(v) for v in np.argwhere(inf_bad)[0])
            count = int(inf_bad.sum())
            return f"output {i}: Inf positions differ ({count}), e.g. at {at}: got {g[at]}, want {w[at]}"
        fin = np.isfinite(w) & np.isfinite(g) if f16 else np.isfinite(w)
        if exact:
            bad = fin & (g != w)
        else:
            scale = max(1.0, float(np.abs(w[fin]).max())) if fin.any() else 1.0
            with np.errstate(all="ignore"):
                bad = fin & ~(np.abs(g.astype(np.float64) - w) <= tol * np.abs(w) + tol * scale)
        if bad.any():
            at = tuple(int(v) for v in np.argwhere(bad)[0])
            diff = float(np.nanmax(np.abs(g[bad].astype(np.float64) - w[bad])))
            return (
                f"output {i}: {int(bad.sum())}/{w.size} values differ, max |diff| {diff:.3g}, "
                f"e.g. at {at}: got {g[at]}, want {w[at]}"
            )
    return None


# ----------------------------------------------------------------------------------------------
# One case on one target


@dataclass
class Result:
    target: str
    outcome: str
    detail: str = ""


def runnable_targets(targets: Sequence[str] = ALL_TARGETS) -> list[str]:
    from compiler.driver.targets import parse_target, runs_here

    return [t for t in targets if runs_here(parse_target(t))]


def _reference(module: Any, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    from semantics import run_module

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return [np.asarray(o) for o in run_module(module, list(inputs))]


def check_target(
    module: Any, input_sets: Sequence[Sequence[np.ndarray]], target: str, *, exact: bool, sanitize: bool
) -> Result:
    """Compile ``module`` for ``target``, run it (and its sanitized runner on the last input set when
    ``sanitize``) on every input set, and compare with the reference."""
    from compiler.driver.compile import compile
    from dialects.errors import XmgeError

    f16 = "io16xc32" in target
    try:
        compiled = compile(module, target)
    except XmgeError as exc:
        return Result(
            target, "compile-error", f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"
        )
    except Exception as exc:  # noqa: BLE001 - an undocumented exception from the compiler is a finding
        return Result(target, "crash", f"compile raised {_describe_exception(exc)}")
    # float16 storage: the reference runs the float16 graph the inference passes made
    ref_module = compiled._stages["inference" if f16 else "tensor"]
    tol = F16_TOL if f16 or _has_float16(module) else F32_TOL
    for k, inputs in enumerate(input_sets):
        want = _reference(ref_module, inputs)
        try:
            got = compiled.run(inputs)
        except Exception as exc:  # noqa: BLE001
            return Result(target, "crash", f"run raised {_describe_exception(exc)}")
        bad = compare(got, want, tol=tol, exact=exact and not f16, f16=f16)
        if bad:
            return Result(target, "mismatch", f"input set {k}: {bad}")
    if sanitize:
        try:
            got = compiled.run_runner(input_sets[-1], sanitize=True)
        except Exception as exc:  # noqa: BLE001
            text = str(exc)
            kind = "sanitizer" if "Sanitizer" in text or "runtime error" in text else "crash"
            return Result(target, kind, _sanitizer_summary(text))
        bad = compare(got, _reference(ref_module, input_sets[-1]), tol=tol, exact=exact and not f16, f16=f16)
        if bad:
            return Result(target, "mismatch", f"sanitized runner: {bad}")
    return Result(target, "ok")


def _has_float16(module: Any) -> bool:
    """Whether any value of ``module`` is stored as float16 (a float16 model: float16 tolerance)."""
    from xdsl.dialects.builtin import Float16Type, TensorType

    return any(
        isinstance(r.type, TensorType) and isinstance(r.type.element_type, Float16Type)
        for op in module.walk()
        for r in op.results
    )


def _describe_exception(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" ({os.path.relpath(tb[-1].filename, ROOT)}:{tb[-1].lineno})" if tb else ""
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first[:200]}{where}"


def _sanitizer_summary(text: str) -> str:
    """The sanitizer's own one-line verdict ("SUMMARY: ..." or "... runtime error: ...")."""
    for line in text.splitlines():
        if "runtime error:" in line or line.startswith("SUMMARY:"):
            return line.strip()[:300]
    return (text.strip().splitlines() or [""])[0][:300]


def check_graph(
    graph: Graph, targets: Sequence[str], sanitize_target: str | None, *, include_known: bool = False
) -> list[Result]:
    """Every target on the graph's plain and special-valued inputs (the latter left out when the
    recipe triggers a known special-value bug, unless ``include_known``); ``sanitize_target`` also
    runs its sanitized runner (on the last input set)."""
    rng = np.random.default_rng([graph.seed, 0x1A7])
    input_sets = [graph.inputs]
    if include_known or not graph.known_bugs():
        input_sets.append(special_inputs(graph.inputs, rng))
    return [
        check_target(graph.module, input_sets, t, exact=graph.int8, sanitize=t == sanitize_target)
        for t in targets
    ]


# ----------------------------------------------------------------------------------------------
# Fuzzed .mge files


def fuzzed_mge(index: int, rng_seed: int) -> tuple[Any, list[np.ndarray], str] | None:
    """Mutated seed file ``index`` (bench/fuzz_mge.py's cases) when it loads and runs on the
    reference: its module, random inputs for its first graph, and its name; None otherwise."""
    from backends.mge.reader import read_mge
    from bench.fuzz_mge import DEFAULT_SEEDS, make_case, run_one
    from compiler.driver.compile import select_graph
    from dialects.dtypes import numpy_dtype

    case = make_case(DEFAULT_SEEDS, index, rng_seed, {})
    outcome, _ = run_one(case.data, 5.0)
    if outcome != "ok":
        return None
    module = select_graph(read_mge(case.data), 0)
    fn = next(iter(module.ops))
    rng = np.random.default_rng(index)
    inputs = []
    for a in fn.body.block.args:  # type: ignore[attr-defined]
        if numpy_dtype(a.type.element_type).kind != "f":
            return None  # compiled models take float32 inputs only
        inputs.append((rng.standard_normal(tuple(a.type.get_shape())) * 3).astype(np.float32))
    return module, inputs, f"mge {index} ({case.seed})"


def check_mge(index: int, rng_seed: int, targets: Sequence[str], sanitize_target: str | None) -> list[Result]:
    found = fuzzed_mge(index, rng_seed)
    if found is None:
        return []
    module, inputs, _ = found
    exact = "int8" in _case_seed(index)
    input_sets = [inputs, special_inputs(inputs, np.random.default_rng(index))]
    return [check_target(module, input_sets, t, exact=exact, sanitize=t == sanitize_target) for t in targets]


def _case_seed(index: int) -> str:
    from bench.fuzz_mge import DEFAULT_SEEDS, case_seed

    return case_seed(DEFAULT_SEEDS, index)


# ----------------------------------------------------------------------------------------------
# The long run: each case in a forked process


@dataclass
class Report:
    counts: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    findings: dict[str, list[str]] = field(default_factory=dict)  # "outcome target: detail" -> cases
    compile_errors: Counter[str] = field(default_factory=Counter)
    cases: int = 0
    skipped: int = 0  # fuzzed files that did not load or run on the reference
    special_skipped: int = 0  # graphs whose special-valued inputs were left out (a known bug)
    seconds: float = 0.0

    def add(self, case: str, results: Sequence[Result]) -> None:
        self.cases += 1
        for r in results:
            self.counts[r.target][r.outcome] += 1
            if r.outcome == "compile-error":
                self.compile_errors[r.detail] += 1
            elif r.outcome != "ok":
                key = f"{r.outcome} {r.target}: {_signature(r.detail)}"
                self.findings.setdefault(key, []).append(f"{case}: {r.detail}")

    def bad(self) -> int:
        return sum(c[o] for c in self.counts.values() for o in ("mismatch", "crash", "sanitizer"))

    def summary(self) -> str:
        lines = [
            f"{self.cases} cases in {self.seconds:.0f}s ({self.skipped} fuzzed files skipped: they do not "
            f"run on the reference; {self.special_skipped} graphs ran plain inputs only: a known bug)"
        ]
        width = max([len(t) for t in self.counts] + [6])
        lines.append(f"{'target':{width}}  " + "  ".join(f"{o:>13}" for o in OUTCOMES))
        for target in sorted(self.counts, key=lambda t: ALL_TARGETS.index(t) if t in ALL_TARGETS else 99):
            c = self.counts[target]
            lines.append(f"{target:{width}}  " + "  ".join(f"{c[o]:>13}" for o in OUTCOMES))
        if self.compile_errors:
            lines.append("compile errors (one-line messages):")
            lines += [f"  {n:5} x {msg}" for msg, n in self.compile_errors.most_common(30)]
        if self.findings:
            lines.append("findings (distinct signatures):")
            for key, where in sorted(self.findings.items(), key=lambda kv: -len(kv[1])):
                lines.append(f"  [{len(where)}] {key}")
                lines += [f"      {w[:400]}" for w in where[:3]]
        return "\n".join(lines)


def _signature(detail: str) -> str:
    """A finding's detail with its numbers and positions dropped: repeats of one bug group together."""
    import re

    text = re.sub(r"e\.g\. at .*", "", detail)
    text = re.sub(r"input set \d: ", "", text)
    return re.sub(r"[-+]?\d[\d.e+-]*", "#", text).strip()


def _run_case(
    conn: Any,
    kind: str,
    index: int,
    rng_seed: int,
    targets: Sequence[str],
    sanitize_target: str | None,
    include_known: bool,
) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        if kind == "graph":
            graph = random_graph(index + rng_seed * 1_000_003)
            results = check_graph(graph, targets, sanitize_target, include_known=include_known)
            known = "" if include_known or not graph.known_bugs() else " [special inputs skipped: known bug]"
            name = f"{graph.name}{known} " + " | ".join(graph.steps)
        else:
            name, results = f"mge {index}", check_mge(index, rng_seed, targets, sanitize_target)
        conn.send((name, results))
    except Exception as exc:  # noqa: BLE001 - the generator itself failed: reported, not hidden
        conn.send((f"{kind} {index}", [Result("generator", "crash", _describe_exception(exc))]))


def run_isolated(
    jobs_list: Sequence[tuple[str, int]],
    rng_seed: int,
    targets: Sequence[str],
    *,
    jobs: int = 2,
    sanitize_every: int = 4,
    deadline: float | None = None,
    timeout_s: float = 300.0,
    progress: bool = True,
    include_known: bool = False,
) -> Report:
    report = Report()
    t0 = time.perf_counter()
    ctx = mp.get_context("fork")
    queue = list(jobs_list)
    running: list[tuple[Any, Any, str, float]] = []
    done = 0
    from compiler.progress import start

    bar = start("diff fuzz", total=None if deadline else len(queue))  # on a terminal: a line a second
    while queue or running:
        while queue and len(running) < jobs and (deadline is None or time.time() < deadline):
            kind, index = queue.pop(0)
            san = targets[(index // sanitize_every) % len(targets)] if index % sanitize_every == 0 else None
            parent, child = ctx.Pipe(duplex=False)
            p = ctx.Process(
                target=_run_case, args=(child, kind, index, rng_seed, targets, san, include_known)
            )
            p.start()
            child.close()
            running.append((p, parent, f"{kind} {index}", time.perf_counter()))
        if not running:
            break
        for item in list(running):
            p, conn, label, started = item
            if conn.poll(0.05):
                try:
                    name, results = conn.recv()
                except EOFError:
                    name, results = label, [Result("process", "crash", "worker died before reporting")]
                p.join()
            elif not p.is_alive():
                p.join()
                name, results = label, [Result("process", "crash", f"worker died, exit code {p.exitcode}")]
            elif time.perf_counter() - started > timeout_s:
                p.kill()
                p.join()
                name, results = label, [Result("process", "crash", f"timeout after {timeout_s:.0f}s")]
            else:
                continue
            running.remove(item)
            if results:
                report.add(name, results)
                report.special_skipped += "[special inputs skipped" in name
            else:
                report.skipped += 1
            done += 1
            bar.advance(f"{name}: {report.bad()} bad")
            if progress and done % 10 == 0:
                print(f"  {done} cases, {time.perf_counter() - t0:.0f}s, {report.bad()} bad", flush=True)
    bar.finish()
    report.seconds = time.perf_counter() - t0
    return report


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", type=int, default=100, help="random graphs")
    ap.add_argument("--mge", type=int, default=0, help="fuzzed .mge cases (those that run on the reference)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--targets", nargs="+", default=None, help=f"default: those of {' '.join(ALL_TARGETS)} this CPU runs"
    )
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--sanitize-every", type=int, default=4, help="a sanitized run every N-th case (0: none)")
    ap.add_argument("--minutes", type=float, default=None, help="stop starting cases after this long")
    ap.add_argument(
        "--include-known", action="store_true", help="special inputs even where a known bug fires"
    )
    ap.add_argument("--show", type=int, default=None, help="print the recipe of graph SEED and exit")
    args = ap.parse_args(argv)
    if args.show is not None:
        g = random_graph(args.show)
        print(g.name, [x.shape for x in g.inputs])
        print("\n".join(g.steps))
        return 0
    targets = args.targets or runnable_targets()
    graphs = args.graphs if args.minutes is None else max(args.graphs, 1_000_000)
    jobs_list: list[tuple[str, int]] = []
    for i in range(max(graphs, args.mge)):  # interleaved: a time-boxed run sees both kinds
        if i < graphs:
            jobs_list.append(("graph", i))
        if i < args.mge:
            jobs_list.append(("mge", i))
    deadline = time.time() + args.minutes * 60 if args.minutes else None
    every = args.sanitize_every or 1 << 62
    report = run_isolated(
        jobs_list, args.seed, targets, jobs=args.jobs, sanitize_every=every, deadline=deadline,
        include_known=args.include_known,
    )  # fmt: skip
    print(f"targets: {' '.join(targets)}; seed {args.seed}")
    print(report.summary())
    return 1 if report.bad() else 0


if __name__ == "__main__":
    sys.exit(main())
