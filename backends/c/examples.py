"""Example builders for the kernel units' ``examples`` (XNNPACK's tester pattern): each returns an
:class:`~passes.lowering.kernels.Example`, a small tensor-dialect op (or the few ops a fused kernel
serves) built with the dialect's own constructors, so what it means comes from ``semantics/``. A
template names its examples in one line, e.g.::

    import backends.c.examples as E

    class Conv2dGemm(Template):
        examples = (E.conv2d((1, 13, 9, 11), 19, 3, pad=1), E.conv2d((2, 6, 7, 5), 8, 1, stride=2))

Shapes should be odd: channel counts that fill no vector, pixel counts that fill no register tile,
batch 2, strides and dilations, so tails and edges run. ``tests/test_kernel_conformance.py`` compiles
the examples of every unit of a target into one library, runs them and compares every output with the
reference interpreter, and fails naming any registered unit kernel-select never picked.

Quantized examples take float inputs and quantize them in the graph (``typecvt``), and hand their
results back as float32, as a post-training-quantized model does at its ends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    Float16Type,
    Float32Type,
    IntegerType,
    ModuleOp,
    Signedness,
    StringAttr,
    TensorType,
)
from xdsl.ir import Attribute, Block, Region, SSAValue

from dialects import enums
from dialects import tensor as T
from dialects.dtypes import QuantizedType, element_type
from passes.lowering.kernels import Example

F32: Attribute = Float32Type()
F16: Attribute = Float16Type()
I32: Attribute = IntegerType(32, Signedness.SIGNLESS)


def q8(scale: float) -> QuantizedType:
    """``qint8`` at ``scale`` rounded to float32, as the frontend's ``dtype.qint8`` stores it."""
    return QuantizedType("qint8", float(np.float32(scale)))


def q32(scale: float) -> QuantizedType:
    return QuantizedType("qint32", float(np.float32(scale)))


def u8(scale: float, zero_point: int) -> QuantizedType:
    return QuantizedType("quint8", float(np.float32(scale)), zero_point)


class Graph:
    """A one-function tensor-dialect module under construction: inputs (random arrays drawn from
    ``rng``), constants and ops in program order."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.block = Block()
        self.inputs: list[np.ndarray] = []

    def input(self, shape: Sequence[int], scale: float = 1.0, dtype: Any = np.float32) -> SSAValue:
        """A model input of ``shape``: standard normal times ``scale`` (integers: uniform in
        ``[0, scale)``; bools: random)."""
        dt = np.dtype(dtype)
        if dt.kind == "f":
            a = (self.rng.standard_normal(tuple(shape)) * scale).astype(dt)
        elif dt.kind == "b":
            a = self.rng.random(tuple(shape)) < 0.5
        else:
            a = self.rng.integers(0, max(1, int(scale)), tuple(shape)).astype(dt)
        self.inputs.append(a)
        return self.block.insert_arg(
            TensorType(element_type(dt), [int(s) for s in shape]), len(self.block.args)
        )

    def grid_input(self, shape: Sequence[int], step: float, n: int) -> SSAValue:
        """A float32 input of integers in ``[-n, n)`` times ``step``: values a quantized type of scale
        ``step`` holds exactly (sums of them land on rounding ties)."""
        x = self.input(shape)
        self.inputs[-1] = (self.rng.integers(-n, n, tuple(shape)) * step).astype(np.float32)
        return x

    def const(self, array: Any, element: Attribute | None = None) -> SSAValue:
        op = T.ConstOp.from_numpy(np.asarray(array), element)
        self.block.add_op(op)
        return op.output

    def weight(self, shape: Sequence[int], scale: float = 0.3) -> SSAValue:
        return self.const((self.rng.standard_normal(tuple(shape)) * scale).astype(np.float32))

    def op(
        self,
        cls: type[T.MgbOp],
        operands: Sequence[SSAValue | None],
        types: Sequence[Attribute] | None = None,
        **params: Any,
    ) -> SSAValue:
        """The first result of a new ``cls`` op (result types inferred unless given)."""
        return self.ops(cls, operands, types, **params)[0]

    def ops(
        self,
        cls: type[T.MgbOp],
        operands: Sequence[SSAValue | None],
        types: Sequence[Attribute] | None = None,
        **params: Any,
    ) -> list[SSAValue]:
        op = cls.make(list(operands), list(types) if types is not None else None, **params)
        self.block.add_op(op)
        return list(op.results)

    def cvt(self, v: SSAValue, element: Attribute) -> SSAValue:
        """``typecvt`` of ``v`` to ``element``."""
        t = v.type
        return self.op(T.TypeCvtOp, [v], [_retype(t, element)])

    def elemwise(self, mode: str, *operands: SSAValue) -> SSAValue:
        return self.op(T.ElemwiseOp, list(operands), mode=enums.ElemwiseMode[mode.upper()])

    def module(self, *outputs: SSAValue) -> tuple[ModuleOp, list[np.ndarray]]:
        self.block.add_op(func.ReturnOp(*outputs))
        fn = func.FuncOp(
            "main",
            ([a.type for a in self.block.args], [o.type for o in outputs]),
            Region(self.block),
        )
        fn.attributes["input_names"] = ArrayAttr([StringAttr(f"in{i}") for i in range(len(self.inputs))])
        return ModuleOp([fn]), self.inputs


def _retype(t: Attribute, element: Attribute) -> Attribute:
    return TensorType(element, list(t.get_shape()))  # type: ignore[attr-defined]


def example(name: str) -> Callable[[Callable[[Graph], Sequence[SSAValue]]], Example]:
    """An :class:`Example` named ``name`` from a function that adds ops to a :class:`Graph` and
    returns its outputs."""

    def wrap(body: Callable[[Graph], Sequence[SSAValue]]) -> Example:
        def build(rng: np.random.Generator) -> tuple[ModuleOp, list[np.ndarray]]:
            g = Graph(rng)
            return g.module(*body(g))

        return Example(name, build)

    return wrap


def _pair(v: int | Sequence[int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _tag(*parts: Any) -> str:
    return " ".join(
        "x".join(map(str, p)) if isinstance(p, tuple | list) else str(p) for p in parts if p not in ("", None)
    )


# ----------------------------------------------------------------------------------------------
# Convolutions


def _filter(g: Graph, ic: int, oc: int, k: tuple[int, int], groups: int) -> SSAValue:
    if groups == 1:
        return g.weight((oc, ic, *k))
    return g.weight((groups, oc // groups, ic // groups, *k))


def _conv_params(stride: Any, pad: Any, dil: Any, groups: int) -> dict[str, Any]:
    return {
        "stride": _pair(stride),
        "padding": _pair(pad),
        "dilation": _pair(dil),
        "sparse": enums.ConvSparse.GROUP if groups > 1 else enums.ConvSparse.DENSE,
    }


def conv2d(
    x: Sequence[int],
    oc: int,
    k: int | Sequence[int],
    *,
    stride: Any = 1,
    pad: Any = 0,
    dil: Any = 1,
    groups: int = 1,
    bias: bool = True,
    act: str = "identity",
    residual: bool = False,
    scale: float = 1.0,
) -> Example:
    """A float32 convolution of an input of shape ``x`` (NCHW) into ``oc`` channels with a constant
    filter, then (as the frontend writes them; the inference passes fuse them) a per-channel bias,
    a residual addend of the result's shape and an activation (``relu``, ``sigmoid``, ``h_swish``,
    ``relu6``). ``groups == oc == x[1]`` is depthwise."""
    kk = _pair(k)

    @example(
        _tag(
            "conv2d",
            x,
            f"oc{oc}",
            f"k{kk[0]}x{kk[1]}",
            f"s{stride}",
            f"p{pad}",
            f"d{dil}",
            f"g{groups}",
            "bias" if bias else "",
            act,
            "residual" if residual else "",
        )
    )
    def body(g: Graph) -> list[SSAValue]:
        src = g.input(x, scale)
        y = g.op(
            T.ConvolutionOp, [src, _filter(g, x[1], oc, kk, groups)], **_conv_params(stride, pad, dil, groups)
        )
        if bias:
            y = g.elemwise("add", y, g.weight((1, oc, 1, 1)))
        if residual:
            y = g.elemwise("add", y, g.input(y.type.get_shape()))  # type: ignore[attr-defined]
        if act != "identity":
            y = g.elemwise(act, y)
        return [y]

    return body


def conv_case(case: tuple[int, int, int, int, int, int, int, int, int, int, str]) -> Example:
    """:func:`conv2d` from the tests' case tuples ``(n, ic, h, w, oc, k, stride, pad, dilation,
    groups, epilogue)``, epilogue ``none``, ``relu``, ``sigmoid``, ``hswish``, ``relu6`` or
    ``residual`` (a residual addend, then ReLU)."""
    n, ic, h, w, oc, k, stride, pad, dil, groups, epi = case
    act = {"none": "identity", "hswish": "h_swish", "residual": "relu"}.get(epi, epi)
    return conv2d(
        (n, ic, h, w),
        oc,
        k,
        stride=stride,
        pad=pad,
        dil=dil,
        groups=groups,
        act=act,
        residual=epi == "residual",
    )


def conv_chain(
    x: Sequence[int],
    *layers: tuple[int, int, int, int, str],
    residual: bool = False,
    pool: tuple[str, int, int, int] | None = None,
) -> Example:
    """Float32 convolutions one after another, each ``(oc, k, stride, groups, act)`` with a bias and
    "same" padding (``k // 2``), as MobileNetV2's inverted residual writes its expand 1x1, depthwise
    3x3 and project 1x1 (``groups == -1``: depthwise); ``residual`` adds the input to the last result;
    ``pool`` = ``(mode, window, stride, padding)`` pools it (in the convolutions' blocked layout)."""

    @example(
        _tag(
            "conv_chain",
            x,
            *[f"{oc}:k{k}s{s}g{g}{a}" for oc, k, s, g, a in layers],
            "residual" if residual else "",
            pool and "pool" + "_".join(map(str, pool)),
        )
    )
    def body(g: Graph) -> list[SSAValue]:
        src = y = g.input(x)
        c = x[1]
        for oc, k, stride, groups, act in layers:
            groups = c if groups == -1 else groups
            params = _conv_params(stride, k // 2, 1, groups)
            y = g.op(T.ConvolutionOp, [y, _filter(g, c, oc, (k, k), groups)], **params)
            y = g.elemwise("add", y, g.weight((1, oc, 1, 1)))
            if act != "identity":
                y = g.elemwise(act, y)
            c = oc
        if residual:
            y = g.elemwise("add", y, src)
        if pool is not None:
            mode, w, st, p = pool
            y = g.op(
                T.PoolingOp,
                [y],
                mode=enums.PoolingMode[mode.upper()],
                window=(w, w),
                stride=(st, st),
                padding=(p, p),
            )
        return [y]

    return body


def conv2d_runtime_weight(x: Sequence[int], w: Sequence[int], *, stride: int = 1, pad: int = 0) -> Example:
    """A float32 convolution whose filter is a model input (no ahead-of-time packing)."""

    @example(_tag("conv2d runtime weight", x, w, f"s{stride}", f"p{pad}"))
    def body(g: Graph) -> list[SSAValue]:
        src, filt = g.input(x), g.input(w)
        return [g.op(T.ConvolutionOp, [src, filt], **_conv_params(stride, pad, 1, 1))]

    return body


def deconv2d(x: Sequence[int], oc: int, k: int, *, stride: int = 1, pad: int = 0, groups: int = 1) -> Example:
    """A float32 transposed convolution (``ConvolutionBackwardData``) with a constant filter."""

    @example(_tag("deconv2d", x, f"oc{oc}", f"k{k}", f"s{stride}", f"p{pad}", f"g{groups}"))
    def body(g: Graph) -> list[SSAValue]:
        ic = x[1]
        shape = (ic, oc, k, k) if groups == 1 else (groups, ic // groups, oc // groups, k, k)
        filt = g.weight(shape)
        params = _conv_params(stride, pad, 1, groups)
        return [g.op(T.ConvolutionBackwardDataOp, [filt, g.input(x)], **params)]

    return body


def _q8_conv(
    g: Graph,
    x: Sequence[int],
    oc: int,
    k: tuple[int, int],
    stride: Any,
    pad: Any,
    dil: Any,
    groups: int,
    act: str,
    sx: float,
    sy: float,
    out: Attribute | None = None,
    x_scale: float = 2.0,
    ties: bool = False,
) -> SSAValue:
    shape = (oc, x[1], *k) if groups == 1 else (groups, oc // groups, x[1] // groups, *k)
    if ties:
        # inputs on the grid of sx, small integer weights at scale 1: requantized sums land on ties
        src = g.cvt(g.grid_input(x, sx, 40), q8(sx))
        wq = g.rng.integers(-3, 4, shape).astype(np.int8)
        sw = 1.0
        bq = g.rng.integers(-20, 20, (1, oc, 1, 1)).astype(np.int32)
    else:
        src = g.cvt(g.input(x, x_scale), q8(sx))
        w = (g.rng.standard_normal(shape) * 0.3).astype(np.float32)
        sw = float(np.abs(w).max()) / 127
        wq = np.clip(np.round(w / np.float32(sw)), -127, 127).astype(np.int8)
        bq = np.round(g.rng.standard_normal((1, oc, 1, 1)) / float(np.float32(sx) * np.float32(sw))).astype(
            np.int32
        )
    sb = float(np.float32(sx) * np.float32(sw))
    return g.op(
        T.ConvBiasOp,
        [src, g.const(wq, q8(sw)), g.const(bq, q32(sb))],
        [TensorType(out or q8(sy), _conv_shape(x, oc, k, stride, pad, dil))],
        nonline_mode=enums.NonlineMode[act.upper()],
        **_conv_params(stride, pad, dil, groups),
    )


def _conv_shape(x: Sequence[int], oc: int, k: tuple[int, int], stride: Any, pad: Any, dil: Any) -> list[int]:
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(pad), _pair(dil)
    oh = (x[2] + 2 * ph - dh * (k[0] - 1) - 1) // sh + 1
    ow = (x[3] + 2 * pw - dw * (k[1] - 1) - 1) // sw + 1
    return [x[0], oc, oh, ow]


def conv2d_q8(
    x: Sequence[int],
    oc: int,
    k: int | Sequence[int],
    *,
    stride: Any = 1,
    pad: Any = 0,
    dil: Any = 1,
    groups: int = 1,
    act: str = "identity",
    sx: float = 1 / 40,
    sy: float = 0.05,
    out: str = "q8",
    x_scale: float = 2.0,
    pool: tuple[str, int, int, int] | None = None,
    ties: bool = False,
) -> Example:
    """An int8 ``ConvBias`` (qint8 input at scale ``sx``, per-tensor qint8 filter, qint32 bias)
    with activation ``act`` into qint8 at ``sy`` (``out="f32"``: a float32 result; ``"q32"``: the
    accumulator), its result converted to float32. Inputs are ``x_scale`` standard deviations wide,
    so the int8 extremes saturate. ``pool`` = ``(mode, window, stride, padding)`` pools the int8
    result (in the convolution's blocked layout where the target has one). ``ties``: inputs on the
    grid of ``sx`` (1/16 unless given) and small integer weights, so requantization meets ties."""
    kk = _pair(k)
    if ties and sx == 1 / 40:
        sx = 1 / 16

    @example(
        _tag(
            "conv2d_q8",
            x,
            f"oc{oc}",
            f"k{kk[0]}x{kk[1]}",
            f"s{stride}",
            f"p{pad}",
            f"d{dil}",
            f"g{groups}",
            act,
            out,
            pool and "pool" + "_".join(map(str, pool)),
            "ties" if ties else "",
            f"sy{sy:g}" if sy != 0.05 else "",
        )
    )
    def body(g: Graph) -> list[SSAValue]:
        sw_out = {"q8": None, "f32": F32}.get(out)
        y = _q8_conv(g, x, oc, kk, stride, pad, dil, groups, act, sx, sy, sw_out, x_scale, ties)
        if pool is not None:
            mode, w, st, p = pool
            y = g.op(
                T.PoolingOp,
                [y],
                mode=enums.PoolingMode[mode.upper()],
                window=(w, w),
                stride=(st, st),
                padding=(p, p),
            )
        return [y if out == "f32" else g.cvt(y, F32)]

    return body


def conv2d_q8_chain(x: Sequence[int], *layers: tuple[int, int, int], sx: float = 1 / 40) -> Example:
    """int8 convolutions one after another, each ``(oc, k, stride)`` with "same" padding, a ReLU and
    a qint8 result (at 0.05, then 0.1, ...), the last converted to float32: the layers a blocked
    layout pass may give different layouts (and relayouts between them)."""

    @example(_tag("conv2d_q8_chain", x, *[f"{oc}:k{k}s{s}" for oc, k, s in layers]))
    def body(g: Graph) -> list[SSAValue]:
        y = g.cvt(g.input(x, 2.0), q8(sx))
        c, s_in, shape = x[1], sx, list(x)
        for i, (oc, k, stride) in enumerate(layers):
            w = (g.rng.standard_normal((oc, c, k, k)) * 0.3).astype(np.float32)
            sw = float(np.abs(w).max()) / 127
            wq = np.clip(np.round(w / np.float32(sw)), -127, 127).astype(np.int8)
            sb = float(np.float32(s_in) * np.float32(sw))
            bq = np.round(g.rng.standard_normal((1, oc, 1, 1)) / sb).astype(np.int32)
            shape = _conv_shape(shape, oc, (k, k), stride, k // 2, 1)
            s_out = 0.05 * (i + 1)
            y = g.op(
                T.ConvBiasOp,
                [y, g.const(wq, q8(sw)), g.const(bq, q32(sb))],
                [TensorType(q8(s_out), shape)],
                nonline_mode=enums.NonlineMode.RELU,
                **_conv_params(stride, k // 2, 1, 1),
            )
            c, s_in = oc, s_out
        return [g.cvt(y, F32)]

    return body


def relu6_island(
    x: Sequence[int],
    oc: int,
    k: int,
    *,
    stride: int = 1,
    pad: int = 0,
    groups: int = 1,
    sx: float = 1 / 40,
    sy: float = 0.05,
    sz: float = 0.03,
) -> Example:
    """An int8 convolution, then the float island post-training quantization leaves around a RELU6
    (``typecvt`` to float32, ``relu6``, ``typecvt`` to qint8 at ``sz``)."""

    @example(_tag("relu6_island", x, f"oc{oc}", f"k{k}", f"s{stride}", f"p{pad}", f"g{groups}"))
    def body(g: Graph) -> list[SSAValue]:
        y = _q8_conv(g, x, oc, (k, k), stride, pad, 1, groups, "identity", sx, sy)
        island = g.cvt(g.elemwise("relu6", g.cvt(y, F32)), q8(sz))
        return [g.cvt(island, F32)]

    return body


def q8_stem_relu6(x: Sequence[int], oc: int, k: int = 3, *, stride: int = 2, pad: int = 1) -> Example:
    """A network's first layer quantized: a float input quantized, an int8 convolution, its RELU6
    island (:func:`relu6_island` on a 3-channel input)."""
    return relu6_island(x, oc, k, stride=stride, pad=pad)


# ----------------------------------------------------------------------------------------------
# Matrix products


def matmul(
    m: int,
    k: int,
    n: int,
    *,
    ta: bool = False,
    tb: bool = False,
    const_b: bool = True,
    batch: int = 0,
    bias: bool = False,
    act: str = "identity",
    residual: bool = False,
) -> Example:
    """A float32 ``(m x k) @ (k x n)`` (stored transposed with ``ta`` / ``tb``), ``b`` a constant
    unless ``const_b`` is False, batched over ``batch`` when nonzero; a column bias, a residual addend
    and an activation after it when asked."""

    @example(
        _tag(
            "matmul",
            f"b{batch}" if batch else "",
            f"{m}x{k}x{n}",
            "ta" if ta else "",
            "tb" if tb else "",
            "" if const_b else "runtime_b",
            "bias" if bias else "",
            "residual" if residual else "",
            act,
        )
    )
    def body(g: Graph) -> list[SSAValue]:
        lead = (batch,) if batch else ()
        a = g.input((*lead, *((k, m) if ta else (m, k))))
        bshape = (*lead, *((n, k) if tb else (k, n)))
        b = g.weight(bshape, 1.0) if const_b else g.input(bshape)
        cls = T.BatchedMatrixMulOp if batch else T.MatrixMulOp
        y = g.op(cls, [a, b], transpose_a=ta, transpose_b=tb)
        if bias:
            y = g.elemwise("add", y, g.weight((1, n)))
        if residual:
            y = g.elemwise("add", y, g.input(y.type.get_shape()))  # type: ignore[attr-defined]
        if act != "identity":
            y = g.elemwise(act, y)
        return [y]

    return body


def matmul_q8(m: int, k: int, n: int, *, tb: bool = False, sx: float = 1 / 40, sy: float = 0.5) -> Example:
    """An int8 matrix product of two quantized run-time inputs (qint32 accumulator), requantized to
    qint8 at ``sy`` and returned as float32."""

    @example(_tag("matmul_q8", f"{m}x{k}x{n}", "tb" if tb else ""))
    def body(g: Graph) -> list[SSAValue]:
        a = g.cvt(g.input((m, k), 2.0), q8(sx))
        b = g.cvt(g.input((n, k) if tb else (k, n), 2.0), q8(sx))
        acc = g.op(T.MatrixMulOp, [a, b], transpose_b=tb)
        return [g.cvt(g.cvt(acc, q8(sy)), F32)]

    return body


def matmul_q8_const(
    m: int, k: int, n: int, *, tb: bool = False, sx: float = 1 / 40, sy: float = 0.5
) -> Example:
    """An int8 matrix product with a constant qint8 right operand (a Linear layer's weight, stored
    ``(n, k)`` with ``tb``): its int32 accumulators and them requantized to qint8 at ``sy``, both as
    float32."""

    @example(_tag("matmul_q8 const_b", f"{m}x{k}x{n}", "tb" if tb else "", f"sy{sy:g}"))
    def body(g: Graph) -> list[SSAValue]:
        a = g.cvt(g.grid_input((m, k), sx, 127), q8(sx))
        w = g.rng.integers(-127, 128, (n, k) if tb else (k, n)).astype(np.int8)
        acc = g.op(T.MatrixMulOp, [a, g.const(w, q8(1.0))], transpose_b=tb)
        return [g.cvt(acc, F32), g.cvt(g.cvt(acc, q8(sy)), F32)]

    return body


# ----------------------------------------------------------------------------------------------
# Pooling


def pool2d(
    x: Sequence[int], mode: str, window: int, stride: int, pad: int = 0, *, dtype: str = "f32"
) -> Example:
    """``Pooling`` (``max``, ``average``, ``average_count_exclude_padding``) of an NCHW input
    (``dtype`` ``q8``: quantized at 1/40 and back; ``i32``: integers)."""

    @example(_tag("pool2d", dtype, mode, x, f"w{window}", f"s{stride}", f"p{pad}"))
    def body(g: Graph) -> list[SSAValue]:
        src = _typed_input(g, x, dtype)
        y = g.op(
            T.PoolingOp,
            [src],
            mode=enums.PoolingMode[mode.upper()],
            window=(window, window),
            stride=(stride, stride),
            padding=(pad, pad),
        )
        return [_typed_output(g, y, dtype)]

    return body


def adaptive_pool2d(x: Sequence[int], mode: str, out: Sequence[int], *, dtype: str = "f32") -> Example:
    @example(_tag("adaptive_pool2d", dtype, mode, x, "to", tuple(out)))
    def body(g: Graph) -> list[SSAValue]:
        src = _typed_input(g, x, dtype)
        y = g.op(T.AdaptivePoolingOp, [src], mode=enums.PoolingMode[mode.upper()], out_shape=tuple(out))
        return [_typed_output(g, y, dtype)]

    return body


INT_DTYPES = {"i32": np.int32, "i16": np.int16, "i8": np.int8, "ui8": np.uint8, "ui16": np.uint16}


def _typed_input(g: Graph, shape: Sequence[int], dtype: str) -> SSAValue:
    if dtype == "q8":
        return g.cvt(g.input(shape, 2.0), q8(1 / 40))
    if dtype == "u8":
        return g.cvt(g.input(shape, 2.0), u8(1 / 40, 128))
    if dtype == "f16":
        return g.cvt(g.input(shape), F16)
    if dtype in INT_DTYPES:
        return g.input(shape, 50, INT_DTYPES[dtype])
    if dtype == "b1":
        return g.input(shape, dtype=np.bool_)
    return g.input(shape)


def _typed_output(g: Graph, y: SSAValue, dtype: str) -> SSAValue:
    return g.cvt(y, F32) if dtype in ("q8", "u8", "f16") else y


# ----------------------------------------------------------------------------------------------
# Elementwise


def elemwise(mode: str, *shapes: Sequence[int], dtype: str = "f32") -> Example:
    """``Elemwise`` ``mode`` of inputs of ``shapes`` (broadcast as numpy does) in ``dtype``
    (``f32``; ``f16``: converted in the graph; integer codes ``i32``, ``i16``, ``i8``, ``ui8``,
    ``b1``)."""

    @example(_tag("elemwise", dtype, mode, *[tuple(s) for s in shapes]))
    def body(g: Graph) -> list[SSAValue]:
        srcs = [_typed_input(g, s, dtype) for s in shapes]
        return [_typed_output(g, g.elemwise(mode, *srcs), dtype)]

    return body


def elemwise_q8(mode: str, *shapes: Sequence[int], sy: float = 0.07, ties: bool = False) -> Example:
    """``ElemwiseMultiType`` ``mode`` (``qadd``, ``qfuse_add_relu``, ``qmul``, ...) of qint8 inputs
    into qint8 at ``sy``; ``ties``: inputs on the grid of 1/8, so results at ``sy`` 1/4 meet ties."""

    @example(_tag("elemwise_q8", mode, *[tuple(s) for s in shapes], f"sy{sy:g}", "ties" if ties else ""))
    def body(g: Graph) -> list[SSAValue]:
        if ties:
            srcs = [g.cvt(g.grid_input(s, 1 / 8, 100), q8(1 / 8)) for s in shapes]
        else:
            srcs = [g.cvt(g.input(s, 2.0), q8(1 / 40 * (1 + i))) for i, s in enumerate(shapes)]
        mode_ = enums.ElemwiseMultiTypeMode[mode.upper()]
        out_shape = list(np.broadcast_shapes(*[tuple(s) for s in shapes]))
        y = g.op(T.ElemwiseMultiTypeOp, srcs, [TensorType(q8(sy), out_shape)], mode=mode_)
        return [g.cvt(y, F32)]

    return body


def typecvt(shape: Sequence[int], src: str, dst: str) -> Example:
    """``typecvt`` between element types (codes as :func:`elemwise`, ``q8``, ``u8``, ``f16``);
    quantized and float16 ends are reached through float32 in the graph."""

    @example(_tag("typecvt", src, "to", dst, shape))
    def body(g: Graph) -> list[SSAValue]:
        x = _typed_input(g, shape, src)
        target = {
            "f32": F32,
            "f16": F16,
            "q8": q8(0.05),
            "u8": u8(0.05, 120),
            "q32": q32(0.01),
            "i32": I32,
            "i16": element_type("int16"),
            "i8": element_type("int8"),
            "ui8": element_type("uint8"),
            "ui16": element_type("uint16"),
            "b1": element_type("bool"),
        }[dst]
        return [_typed_output(g, g.cvt(x, target), dst)]

    return body


# ----------------------------------------------------------------------------------------------
# Shape, reduction and indexing ops


def reduce(shape: Sequence[int], mode: str, axis: int, *, dtype: str = "f32") -> Example:
    @example(_tag("reduce", dtype, mode, shape, f"axis{axis}"))
    def body(g: Graph) -> list[SSAValue]:
        return [
            g.op(T.ReduceOp, [_typed_input(g, shape, dtype)], mode=enums.ReduceMode[mode.upper()], axis=axis)
        ]

    return body


def softmax(shape: Sequence[int], axis: int) -> Example:
    @example(_tag("softmax", shape, f"axis{axis}"))
    def body(g: Graph) -> list[SSAValue]:
        return [g.op(T.SoftmaxOp, [g.input(shape, 3.0)], axis=axis)]

    return body


def concat(shapes: Sequence[Sequence[int]], axis: int, *, dtype: str = "f32") -> Example:
    @example(_tag("concat", dtype, *[tuple(s) for s in shapes], f"axis{axis}"))
    def body(g: Graph) -> list[SSAValue]:
        return [g.op(T.ConcatOp, [_typed_input(g, s, dtype) for s in shapes], axis=axis)]

    return body


def split(shape: Sequence[int], axis: int, sizes: Sequence[int]) -> Example:
    @example(_tag("split", shape, f"axis{axis}", tuple(sizes)))
    def body(g: Graph) -> list[SSAValue]:
        return g.ops(T.SplitOp, [g.input(shape)], axis=axis, sizes=tuple(sizes))

    return body


def dimshuffle(shape: Sequence[int], pattern: Sequence[int], *, dtype: str = "f32") -> Example:
    @example(_tag("dimshuffle", dtype, shape, tuple(pattern)))
    def body(g: Graph) -> list[SSAValue]:
        y = g.op(T.DimshuffleOp, [_typed_input(g, shape, dtype)], pattern=tuple(pattern))
        return [_typed_output(g, y, dtype)]

    return body


def broadcast(shape: Sequence[int], out: Sequence[int]) -> Example:
    @example(_tag("broadcast", shape, "to", out))
    def body(g: Graph) -> list[SSAValue]:
        return [g.op(T.BroadcastOp, [g.input(shape)], [TensorType(F32, list(out))])]

    return body


def subtensor(
    shape: Sequence[int], slices: Sequence[tuple[int, int, int, int]], *, dtype: str = "f32"
) -> Example:
    """A strided slice: ``slices`` holds ``(axis, start, stop, step)`` per sliced axis."""

    @example(_tag("subtensor", dtype, shape, *slices))
    def body(g: Graph) -> list[SSAValue]:
        y = g.op(T.SubtensorOp, [_typed_input(g, shape, dtype)], **_slice_params(slices))
        return [_typed_output(g, y, dtype)]

    return body


def _slice_params(slices: Sequence[tuple[int, int, int, int]]) -> dict[str, Any]:
    return {
        "axes": tuple(s[0] for s in slices),
        "starts": tuple(s[1] for s in slices),
        "stops": tuple(s[2] for s in slices),
        "steps": tuple(s[3] for s in slices),
        "drop": tuple(0 for _ in slices),
    }


def modify_subtensor(
    shape: Sequence[int], slices: Sequence[tuple[int, int, int, int]], *, incr: bool
) -> Example:
    @example(_tag("incr_subtensor" if incr else "set_subtensor", shape, *slices))
    def body(g: Graph) -> list[SSAValue]:
        src = g.input(shape)
        sub = [len(range(*slice(s[1], s[2], s[3]).indices(shape[s[0]]))) for s in slices]
        vshape = list(shape)
        for s, n in zip(slices, sub, strict=True):
            vshape[s[0]] = n
        cls = T.IncrSubtensorOp if incr else T.SetSubtensorOp
        return [g.op(cls, [src, g.input(vshape)], **_slice_params(slices))]

    return body


def indexing(shape: Sequence[int], axis: int, n: int, *, kind: str = "get") -> Example:
    """``IndexingMultiAxisVec`` on ``axis`` with ``n`` int32 indices (some negative); ``kind``
    ``set`` / ``incr``: the indexed entries replaced or incremented."""

    @example(_tag("indexing", kind, shape, f"axis{axis}", f"n{n}"))
    def body(g: Graph) -> list[SSAValue]:
        src = g.input(shape)
        idx = g.rng.integers(-shape[axis], shape[axis], n).astype(np.int32)
        if kind == "get":
            return [g.op(T.IndexingMultiAxisVecOp, [src, g.const(idx)], axes=(axis,))]
        vshape = list(shape)
        vshape[axis] = n
        idx = g.rng.permutation(shape[axis])[:n].astype(np.int32)  # distinct: a set is order-free
        cls = T.IndexingSetMultiAxisVecOp if kind == "set" else T.IndexingIncrMultiAxisVecOp
        return [g.op(cls, [src, g.input(vshape), g.const(idx)], axes=(axis,))]

    return body


def linspace(start: float, stop: float, num: int, *, endpoint: bool = True) -> Example:
    @example(_tag("linspace", start, stop, num, "endpoint" if endpoint else ""))
    def body(g: Graph) -> list[SSAValue]:
        # run-time ends (constant ones fold away): the inputs' values replaced by ``start``, ``stop``
        a, b = g.input(()), g.input(())
        g.inputs[-2:] = [np.array(start, np.float32), np.array(stop, np.float32)]
        return [g.op(T.LinspaceOp, [a, b], num=num, endpoint=endpoint)]

    return body


def pad(
    shape: Sequence[int],
    front: Sequence[int],
    back: Sequence[int],
    mode: str = "constant",
    value: float = 0.0,
) -> Example:
    @example(_tag("pad", mode, shape, tuple(front), tuple(back)))
    def body(g: Graph) -> list[SSAValue]:
        return [
            g.op(
                T.PaddingOp,
                [g.input(shape)],
                front=tuple(front),
                back=tuple(back),
                mode=enums.PaddingMode[mode.upper()],
                value=value,
            )
        ]

    return body


def resize(shape: Sequence[int], out: Sequence[int], mode: str = "linear") -> Example:
    @example(_tag("resize", mode, shape, "to", tuple(out)))
    def body(g: Graph) -> list[SSAValue]:
        return [
            g.op(
                T.ResizeOp,
                [g.input(shape)],
                out_shape=tuple(out),
                imode=enums.InterpolationMode[mode.upper()],
            )
        ]

    return body


def layer_norm(shape: Sequence[int], normalized: int, *, affine: bool = True) -> Example:
    """LayerNorm over the last ``normalized`` elements of each row."""

    @example(_tag("layer_norm", shape, f"n{normalized}", "affine" if affine else ""))
    def body(g: Graph) -> list[SSAValue]:
        ops = [g.input(shape, 2.0)]
        if affine:
            ops += [g.weight((normalized,), 1.0), g.weight((normalized,), 1.0)]
        return g.ops(T.LayerNormOp, ops, affine=affine, normalized_dim=1, normalized_size=normalized)[:1]

    return body


def batch_norm(shape: Sequence[int]) -> Example:
    """Inference BatchNorm whose statistics are model inputs (constant ones fold into the graph)."""

    @example(_tag("batch_norm", shape))
    def body(g: Graph) -> list[SSAValue]:
        c = (1, shape[1], 1, 1)
        var = g.elemwise("add", g.elemwise("abs", g.input(c)), g.const(np.full(c, 0.5, np.float32)))
        params = [g.input(c), g.input(c), g.input(c), var]
        return g.ops(T.BatchNormOp, [g.input(shape), *params])[-1:]

    return body


def arg_reduce(shape: Sequence[int], axis: int, *, largest: bool = True) -> Example:
    @example(_tag("argmax" if largest else "argmin", shape, f"axis{axis}"))
    def body(g: Graph) -> list[SSAValue]:
        return [g.op(T.ArgmaxOp if largest else T.ArgminOp, [g.input(shape)], axis=axis)]

    return body


def cumsum(
    shape: Sequence[int], axis: int, *, exclusive: bool = False, reverse: bool = False, dtype: str = "f32"
) -> Example:
    @example(
        _tag(
            "cumsum",
            dtype,
            shape,
            f"axis{axis}",
            "exclusive" if exclusive else "",
            "reverse" if reverse else "",
        )
    )
    def body(g: Graph) -> list[SSAValue]:
        src = _typed_input(g, shape, dtype)
        if dtype == "i32":  # sums past 2**31 wrap around, as numpy's do
            g.inputs[-1] = (g.rng.integers(-40, 44, tuple(shape)) * 100_000_000).astype(np.int32)
        return [g.op(T.CumsumOp, [src], axis=axis, exclusive=exclusive, reverse=reverse)]

    return body


def argsort(shape: Sequence[int], *, descending: bool = False) -> Example:
    @example(_tag("argsort", shape, "descending" if descending else ""))
    def body(g: Graph) -> list[SSAValue]:
        return g.ops(T.ArgsortOp, [g.input(shape)], descending=descending)

    return body


def topk(shape: Sequence[int], k: int, mode: str = "value_idx_sorted") -> Example:
    @example(_tag("topk", shape, f"k{k}", mode))
    def body(g: Graph) -> list[SSAValue]:
        return g.ops(T.TopKOp, [g.input(shape)], k=k, mode=enums.number(enums.TopKMode[mode.upper()]))

    return body


def one_hot(shape: Sequence[int], axis: int) -> Example:
    """``IndexingOneHot``: one entry of ``axis`` picked per position."""

    @example(_tag("indexing_one_hot", shape, f"axis{axis}"))
    def body(g: Graph) -> list[SSAValue]:
        ishape = [s for i, s in enumerate(shape) if i != axis]
        idx = g.rng.integers(0, shape[axis], ishape).astype(np.int32)
        return [g.op(T.IndexingOneHotOp, [g.input(shape), g.const(idx)], axis=axis)]

    return body


def float16(base: Example) -> Example:
    """``base`` as it is: a float32 graph the target's float16 options (``+ioc16``, ``+io16xc32``)
    turn into float16 storage or compute. Named for the reader of a unit's examples."""
    return Example(f"{base.name} (float16 by the target)", base.build)


# ----------------------------------------------------------------------------------------------
# Batching: many examples in one function, so one compile and one gcc run serve them all


def batch(
    parts: Sequence[tuple[ModuleOp, list[np.ndarray]]],
) -> tuple[ModuleOp, list[np.ndarray], list[slice]]:
    """One module whose function runs the functions of ``parts`` (built examples) side by side, their
    inputs and outputs one after another; its inputs; and each part's slice of its outputs."""
    block = Block()
    inputs: list[np.ndarray] = []
    outputs: list[SSAValue] = []
    slices: list[slice] = []
    for module, ins in parts:
        fn = next(op for op in module.ops if isinstance(op, func.FuncOp))
        body = fn.clone().body.block
        for old in body.args:
            old.replace_all_uses_with(block.insert_arg(old.type, len(block.args)))
        start = len(outputs)
        for op in list(body.ops):
            op.detach()
            if isinstance(op, func.ReturnOp):
                outputs.extend(op.operands)
                op.drop_all_references()
            else:
                block.add_op(op)
        inputs.extend(ins)
        slices.append(slice(start, len(outputs)))
    block.add_op(func.ReturnOp(*outputs))
    fn = func.FuncOp("main", ([a.type for a in block.args], [o.type for o in outputs]), Region(block))
    fn.attributes["input_names"] = ArrayAttr([StringAttr(f"in{i}") for i in range(len(inputs))])
    return ModuleOp([fn]), inputs, slices


def conv3d(
    x: Sequence[int], oc: int, k: int, *, stride: Any = 1, pad: Any = 0, dil: Any = 1, groups: int = 1
) -> Example:
    """``Convolution3D`` of an NCDHW input (``groups`` > 1: a (G, OC/G, IC/G, k, k, k) filter)."""

    def triple(v: Any) -> tuple[int, int, int]:
        return (v, v, v) if isinstance(v, int) else tuple(v)  # type: ignore[return-value]

    @example(
        _tag(
            "conv3d",
            x,
            f"oc{oc}",
            f"k{k}",
            f"s{triple(stride)}",
            f"p{triple(pad)}",
            f"d{triple(dil)}",
            f"g{groups}",
        )
    )
    def body(g: Graph) -> list[SSAValue]:
        ic = x[1]
        w = (oc, ic, k, k, k) if groups == 1 else (groups, oc // groups, ic // groups, k, k, k)
        sparse = enums.ConvSparse.DENSE if groups == 1 else enums.ConvSparse.GROUP
        return [
            g.op(
                T.Convolution3DOp,
                [g.input(x), g.weight(w)],
                stride=triple(stride),
                padding=triple(pad),
                dilation=triple(dil),
                sparse=sparse,
            )
        ]

    return body


def warp_perspective(
    x: Sequence[int], out: Sequence[int], bmode: str = "replicate", *, indexed: bool = False
) -> Example:
    """``WarpPerspective`` of an NCHW input by mildly perspective matrices (some taps fall outside the
    image, so ``bmode`` matters); ``indexed``: three matrices picking images by ``mat_idx``."""

    @example(_tag("warp_perspective", x, out, bmode, "indexed" if indexed else ""))
    def body(g: Graph) -> list[SSAValue]:
        n = 3 if indexed else x[0]
        mats = np.tile(
            np.array([[1.1, 0.1, -0.7], [0.05, 0.9, 0.4], [0.002, -0.003, 1.0]], np.float32), (n, 1, 1)
        )
        mats = (
            mats
            + g.rng.uniform(-0.05, 0.05, mats.shape) * np.array([1, 1, 10, 1, 1, 10, 0, 0, 0]).reshape(3, 3)
        ).astype(np.float32)
        operands = [g.input(x), g.const(mats)]
        if indexed:
            operands.append(g.const(g.rng.integers(0, x[0], (n,)).astype(np.int32)))
        return [
            g.op(
                T.WarpPerspectiveOp,
                operands,
                out_shape=tuple(out),
                bmode=enums.BorderMode[bmode.upper()],
                border_val=0.25,
            )
        ]

    return body


def roi_align(
    x: Sequence[int], pooled: Sequence[int], mode: str = "average", *, samples: int = 2, aligned: bool = True
) -> Example:
    """``ROIAlign`` of four rois over a batch-2 map: inside, on the border and partly outside."""

    @example(_tag("roi_align", x, pooled, mode, f"s{samples}", "aligned" if aligned else ""))
    def body(g: Graph) -> list[SSAValue]:
        h, w = x[2], x[3]
        rois = np.array(
            [
                [0, 1.0, 1.5, w - 2.0, h - 1.5],
                [1, 0.0, 0.0, 3.3, 4.1],
                [x[0] - 1, -2.0, 1.0, w + 1.5, h / 2],
                [0, 2.2, 2.2, 2.6, 3.0],
            ],
            np.float32,
        )
        return [
            g.ops(
                T.ROIAlignOp,
                [g.input(x), g.const(rois)],
                mode=enums.ROIMode[mode.upper()],
                spatial_scale=0.9,
                offset=0.5 if aligned else 0.0,
                pooled_shape=tuple(pooled),
                sample_shape=(samples, samples),
            )[0]
        ]

    return body


def nms_keep(batch: int, n: int, iou: float, max_output: int) -> Example:
    """``NMSKeep`` of ``n`` boxes per image, clustered so that some overlap past ``iou``."""

    @example(_tag("nms_keep", f"b{batch}", f"n{n}", f"iou{iou}", f"max{max_output}"))
    def body(g: Graph) -> list[SSAValue]:
        centers = g.rng.uniform(0, 20, (batch, n, 2)) // 4 * 4 + g.rng.uniform(0, 1.5, (batch, n, 2))
        sizes = g.rng.uniform(2, 6, (batch, n, 2))
        boxes = np.concatenate([centers - sizes / 2, centers + sizes / 2], axis=2).astype(np.float32)
        src = g.input(boxes.shape)
        g.inputs[-1] = boxes  # an input, not a constant: a constant graph would be folded away
        indices, count = g.ops(T.NMSKeepOp, [src], iou_thresh=iou, max_output=max_output)
        return [indices, count]

    return body


def warp_affine(
    x: Sequence[int], out: Sequence[int], bmode: str = "replicate", imode: str = "linear", *,
    dtype: str = "float32", fmt: str = "NHWC",
) -> Example:  # fmt: skip
    """``WarpAffine`` of an NHWC (or NCHW) image batch by rotating, scaling, shifting matrices (some
    taps fall outside the image, so ``bmode`` matters); uint8 images span 0..255."""

    @example(_tag("warp_affine", fmt.lower(), x, out, bmode, imode, dtype))
    def body(g: Graph) -> list[SSAValue]:
        base = np.array([[0.9, 0.3, -1.3], [-0.25, 1.05, 0.6]], np.float32)
        mats = (base + g.rng.uniform(-0.1, 0.1, (x[0], 2, 3)) * np.array([1, 1, 10, 1, 1, 10])
                .reshape(2, 3)).astype(np.float32)  # fmt: skip
        src = g.input(x, 256.0, np.uint8) if dtype == "uint8" else g.input(x)
        return [g.op(T.WarpAffineOp, [src, g.const(mats)], out_shape=tuple(out),
                     imode=enums.InterpolationMode[imode.upper()], bmode=enums.BorderMode[bmode.upper()],
                     border_val=0.75 if dtype == "float32" else 9.5, format=enums.Format[fmt])]  # fmt: skip

    return body


def remap(
    x: Sequence[int], out: Sequence[int], bmode: str = "replicate", imode: str = "linear", *,
    dtype: str = "float32",
) -> Example:  # fmt: skip
    """``Remap`` of an NCHW image batch by a map whose positions reach two pixels past each side."""

    @example(_tag("remap", x, out, bmode, imode, dtype))
    def body(g: Graph) -> list[SSAValue]:
        h, w = x[2], x[3]
        mp = np.stack([g.rng.uniform(-2, w + 1, (x[0], *out)), g.rng.uniform(-2, h + 1, (x[0], *out))], -1)
        src = g.input(x, 256.0, np.uint8) if dtype == "uint8" else g.input(x)
        return [g.op(T.RemapOp, [src, g.const(mp.astype(np.float32))],
                     imode=enums.InterpolationMode[imode.upper()], bmode=enums.BorderMode[bmode.upper()],
                     scalar=0.5)]  # fmt: skip

    return body


def cvt_color(x: Sequence[int], mode: str, *, dtype: str = "float32") -> Example:
    """``CvtColor`` of NHWC images (float32 around 0..1; uint8 spanning 0..255)."""

    @example(_tag("cvt_color", x, mode, dtype))
    def body(g: Graph) -> list[SSAValue]:
        src = g.input(x, 256.0, np.uint8) if dtype == "uint8" else g.input(x, 0.5)
        return [g.op(T.CvtColorOp, [src], mode=enums.CvtColorMode[mode])]

    return body


def deformable_conv(
    x: Sequence[int], oc: int, k: int | Sequence[int], *, stride: Any = 1, pad: Any = 0, dil: Any = 1,
    groups: int = 1, dg: int = 1,
) -> Example:  # fmt: skip
    """``DeformableConv`` with offsets of about a pixel (taps reach outside) and a (0, 1) mask."""

    def pair(v: Any) -> tuple[int, int]:
        return (v, v) if isinstance(v, int) else tuple(v)  # type: ignore[return-value]

    (fh, fw), (sh, sw), (ph, pw), (dh, dw) = pair(k), pair(stride), pair(pad), pair(dil)

    @example(_tag("deformable_conv", x, f"oc{oc}", f"k{(fh, fw)}", f"s{(sh, sw)}", f"p{(ph, pw)}",
                  f"d{(dh, dw)}", f"g{groups}", f"dg{dg}"))  # fmt: skip
    def body(g: Graph) -> list[SSAValue]:
        oh = (x[2] + 2 * ph - dh * (fh - 1) - 1) // sh + 1
        ow = (x[3] + 2 * pw - dw * (fw - 1) - 1) // sw + 1
        w = (oc, x[1], fh, fw) if groups == 1 else (groups, oc // groups, x[1] // groups, fh, fw)
        off = (g.rng.standard_normal((x[0], 2 * dg * fh * fw, oh, ow)) * 1.3).astype(np.float32)
        mask = g.rng.random((x[0], dg * fh * fw, oh, ow)).astype(np.float32)
        sparse = enums.ConvSparse.DENSE if groups == 1 else enums.ConvSparse.GROUP
        return [g.op(T.DeformableConvOp, [g.input(x), g.weight(w), g.const(off), g.const(mask)],
                     stride=(sh, sw), padding=(ph, pw), dilation=(dh, dw), sparse=sparse)]  # fmt: skip

    return body


def region_restricted_conv(
    x: Sequence[int], oc: int, k: int, groups: int, *, stride: Any = 1, pad: Any = 0, dil: Any = 1,
    dtype: str = "int32",
) -> Example:  # fmt: skip
    """``RegionRestrictedConvolution`` with three regions scattered over input and output."""

    def pair(v: Any) -> tuple[int, int]:
        return (v, v) if isinstance(v, int) else tuple(v)  # type: ignore[return-value]

    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(pad), pair(dil)

    @example(_tag("region_restricted_conv", x, f"oc{oc}", f"k{k}", f"g{groups}", f"s{(sh, sw)}",
                  f"p{(ph, pw)}", f"d{(dh, dw)}", dtype))  # fmt: skip
    def body(g: Graph) -> list[SSAValue]:
        oh = (x[2] + 2 * ph - dh * (k - 1) - 1) // sh + 1
        ow = (x[3] + 2 * pw - dw * (k - 1) - 1) // sw + 1
        rin = g.rng.integers(0, 3, (x[0], x[2], x[3])).astype(dtype)
        rout = g.rng.integers(0, 3, (x[0], oh, ow)).astype(dtype)
        w = g.weight((groups, oc // groups, x[1] // groups, k, k))
        return [g.op(T.RegionRestrictedConvOp, [g.input(x), w, g.const(rin), g.const(rout)], stride=(sh, sw),
                     padding=(ph, pw), dilation=(dh, dw))]  # fmt: skip

    return body


def deformable_psroi_pooling(
    x: Sequence[int], ph: int, pw: int, *, part: int, samples: int, no_trans: bool = False
) -> Example:
    """``DeformablePSROIPooling`` of four rois over a batch-2 map (inside, on the border, partly
    outside, tiny), trans of about a bin."""

    @example(_tag("deformable_psroi_pooling", x, (ph, pw), f"part{part}", f"s{samples}",
                  "notrans" if no_trans else ""))  # fmt: skip
    def body(g: Graph) -> list[SSAValue]:
        h, w = x[2], x[3]
        rois = np.array([[0, 1.2, 2.0, w - 2.5, h - 1.7], [1, 0, 0, w - 1, h - 1],
                         [x[0] - 1, -2, 3, w + 2, h + 1], [0, 3, 1, 3.4, 1.6]], np.float32)  # fmt: skip
        trans = (g.rng.standard_normal((4, 2, ph, pw)) * 0.6).astype(np.float32)
        operands = [g.input(x), g.const(rois), g.const(trans)]
        params = {"pooled_h": ph, "pooled_w": pw, "part_size": part, "sample_per_part": samples,
                  "no_trans": no_trans, "spatial_scale": 0.8, "trans_std": 0.2}  # fmt: skip
        out = g.ops(T.DeformablePSROIPoolingOp, operands, **params)
        return [out[0]]

    return body
