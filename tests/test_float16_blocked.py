"""Float16 on every op of the ``mgb`` dialect, on plain and on already blocked graphs.

One traced model holds every op kind of the dialect (``test_model_covers_every_op`` keeps it so).
Under both float16 passes (``f16-io-f32-comp`` = ``enable_io16xc32``, ``f16-io-comp`` =
``enable_ioc16``), on the plain graph and on the graph a layout pass already blocked (NCHW44,
NCHW88: what compiling MegEngine's layout dumps for a float16 target does), the converted graph
must verify, follow MegEngine's ConvertF32ToF16Pass op by op, run on the reference interpreter
within float16 tolerance of the float32 graph, dump to ``.mge`` and read back, and compile and run
for x86 (``+io16xc32``) and ARM (``arm-fp16``, ``arm-nchw44+io16xc32``, under qemu) targets.
MegEngine's own float16 and NCHW44 golden dumps are also compiled for the ARM float16 targets.

Tolerance against the float32 reference (stated once, in ``assert_close_to_f32``): every float
output within 5e-3 x max(1, max |y|) (float16 keeps 11 significant bits, 4.9e-4 relative per
rounding; the model chains about ten roundings; measured at most 2e-3 on the ARM FP16 kernels);
the output quantized to qint8 (scale 0.1) within that plus one quantization step, since a float16
input may round to the neighbouring step; the argmax/argmin outputs exactly (their inputs are small integers,
exact in float16).
"""

from __future__ import annotations

import io
import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import Float16Type, Float32Type, FunctionType, IntegerType, ModuleOp, TensorType
from xdsl.ir import Attribute, Block, Region
from xdsl.irdl import irdl_op_definition, operand_def, result_def
from xdsl.passes import ModulePass

import compiler as xm
import compiler.functional as F
from backends.c.cross import toolchain_problem
from backends.mge.reader import read_mge
from compiler import dtype as D
from compiler.core import apply
from compiler.driver.compile import EmulationWarning, compile
from compiler.driver.targets import parse_target, runs_here
from compiler.tensor import Tensor
from dialects import enums
from dialects import layout as L
from dialects import tensor as T
from passes.inference import pipeline_for
from passes.inference.float16 import COMPUTE_MODE_OPS, F16IOCompPass, F16IOF32CompPass
from semantics import run_module

F16, F32 = Float16Type(), Float32Type()
DATA = os.path.join(os.path.dirname(__file__), "data")
F16_OPTIONS = {"enable_io16xc32": F16IOF32CompPass, "enable_ioc16": F16IOCompPass}
LAYOUTS = {"plain": None, "nchw44": "enable_nchw44", "nchw88": "enable_nchw88"}
X86_TARGETS = ["x86-avx2+io16xc32", "x86-avx2-nchw88+io16xc32"]
ARM_TARGETS = ["arm-fp16", "arm-nchw44+io16xc32"]
ARM_PROBLEM = toolchain_problem()

# -- the model: every op kind of the dialect ------------------------------------------------------

RNG = np.random.default_rng(16)
WEIGHTS = {
    "conv": (RNG.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32),
    "bias": RNG.standard_normal((1, 8, 1, 1)).astype(np.float32),
    "group": (RNG.standard_normal((2, 4, 4, 3, 3)) * 0.2).astype(np.float32),
    "deconv": (RNG.standard_normal((8, 4, 3, 3)) * 0.2).astype(np.float32),
    "fc": (RNG.standard_normal((10, 32)) * 0.2).astype(np.float32),
    "ln_weight": RNG.standard_normal(16).astype(np.float32),
    "ln_bias": RNG.standard_normal(16).astype(np.float32),
    "bn_mean": RNG.standard_normal((1, 8, 1, 1)).astype(np.float32),
    "bn_var": (RNG.random((1, 8, 1, 1)) + 0.5).astype(np.float32),
}
X = RNG.standard_normal((1, 8, 8, 8)).astype(np.float32)
# argmax/argmin read distinct small integers: exact in float16, so the indices are exact
K = RNG.permutation(8 * 4 * 4).reshape(1, 8, 4, 4).astype(np.float32)
OUTPUTS = ("pool", "concat", "reduce", "fc", "softmax", "bmm", "layer_norm", "argmax", "transpose",
           "subtensor", "axes", "broadcast", "pad", "resize", "deconv", "where", "argmin",
           "qadd", "setitem", "incr", "gather", "scatter", "scatter_add", "arange", "cumsum",
           "one_hot_pick", "sort", "topk", "symbolic_shape")  # fmt: skip
EXACT = {"argmax", "argmin"}
QUANTIZED_STEP = {"qadd": 0.1}


def every_op(x: Tensor, k: Tensor) -> tuple[Tensor, ...]:
    w = {n: Tensor(a) for n, a in WEIGHTS.items()}
    c = F.quantized.conv_bias_activation(x, w["conv"], w["bias"], padding=1, nonlinear_mode="relu")
    g = F.conv2d(c, w["group"], padding=1, groups=2)
    e = F.maximum(F.sigmoid(g) * c + g - 0.5, F.abs(g) / 3.0)
    pool = F.max_pool2d(e, 2, 2)
    avg = F.avg_pool2d(e, 2, 2)
    adaptive = F.adaptive_avg_pool2d(e, (2, 2))
    bn = F.batch_norm(pool, w["bn_mean"], w["bn_var"], training=False)
    cat = F.concat([pool, avg, bn], axis=1)
    s1, s2 = F.split(cat, 2, axis=1)
    red = F.sum(s1, axis=2, keepdims=True) + F.mean(s2, axis=2, keepdims=True)
    flat = F.flatten(adaptive, 1)
    fc = F.matmul(flat, w["fc"], transpose_b=True)
    bmm = F.batch_matmul(flat.reshape(1, 8, 4), flat.reshape(1, 4, 8))
    ln = F.layer_norm(pool.reshape(1, 8, 16), 16, True, w["ln_weight"], w["ln_bias"])
    # integer ops on the argmax indices, then back to float (a typecvt from int32)
    amax = (F.argmax(k * 2.0 + 1.0, axis=1) + 1).astype("float32")
    amin = F.argmin(k, axis=2).astype("float32") * 2.0
    axes = F.expand_dims(F.squeeze(red, 2), 0)
    bcast = F.broadcast_to(F.mean(pool, axis=1, keepdims=True), (1, 8, 4, 4))
    where = F.where(g > 0, g, g * 0.1)
    q = c.astype(D.qint8(0.05))
    qadd = F.quantized.elemwise_multi_type(q, q, mode="qadd", dtype=D.qint8(0.1)).astype("float32")
    # indexing: basic and integer-tensor assignment, gather, and their accumulating forms (the incr
    # ops come from gradients and from MegEngine files; built here with their params directly)
    row = pool.reshape(8, 16)
    written = row * 1.0
    written[1:3, ::2] = row[4:6, 1::2]
    idx = Tensor(np.array([0, 3, 5], np.int32))
    gathered = row[idx]
    (incr,) = apply(T.IncrSubtensorOp, [row, row[4:6, 1::2]], label="incr", axes=(0, 1), starts=(1, 0),
                    stops=(3, 16), steps=(1, 2), drop=(0, 0))  # fmt: skip
    scattered = row * 1.0
    scattered[idx] = gathered * 2.0
    (scatter_add,) = apply(T.IndexingIncrMultiAxisVecOp, [row, gathered, idx], label="scatter_add", axes=(0,))
    cumsum = F.cumsum(row, axis=1)
    one_hot_pick = F.nn.indexing_one_hot(row, Tensor(np.arange(8, dtype=np.int32) % 16), axis=1)
    arange = F.arange(Tensor(np.float32(0.0)), red.shape[1] * 1.0 + F.zeros((1,)), 1.0) * 0.5
    # shapes computed in the graph (the trace's symbolic shapes)
    sym = F.broadcast_to(F.mean(pool, axis=1, keepdims=True), pool.shape).reshape(pool.shape[0], -1)
    return (
        pool, cat, red, fc, F.softmax(fc, axis=1), bmm, ln, amax, F.transpose(pool, (0, 2, 3, 1)),
        pool[:, 1:5, ::2], axes, bcast, F.nn.pad(pool, ((0, 0), (0, 0), (1, 1), (2, 0))),
        F.vision.interpolate(pool, size=(6, 6), mode="bilinear"),
        F.conv_transpose2d(e, w["deconv"], stride=2, padding=1), where, amin, qadd,
        written, incr, gathered, scattered, scatter_add, arange, cumsum, one_hot_pick,
        F.sort(row, descending=True)[0], F.topk(row, 3, descending=False)[0], sym,
    )  # fmt: skip


@pytest.fixture(scope="module")
def traced() -> xm.jit.trace:
    tr = xm.jit.trace(every_op, symbolic=True, capture_as_const=True)
    tr(xm.tensor(X), xm.tensor(K))
    return tr


@pytest.fixture(scope="module")
def want(traced: xm.jit.trace) -> list[np.ndarray]:
    return [np.asarray(y) for y in run_module(traced.module, [X, K])]


def assert_close_to_f32(got: list[np.ndarray], want: list[np.ndarray], what: str) -> None:
    assert len(got) == len(want) == len(OUTPUTS)
    for name, g, w in zip(OUTPUTS, got, want, strict=True):
        g = np.asarray(g, np.float32)
        assert g.shape == w.shape, f"{what}: output {name} has shape {g.shape}, expected {w.shape}"
        if name in EXACT:
            np.testing.assert_array_equal(g, w, err_msg=f"{what}: output {name}")
            continue
        atol = 5e-3 * max(1.0, float(np.abs(w).max())) + QUANTIZED_STEP.get(name, 0.0)
        np.testing.assert_allclose(g, w, rtol=0, atol=atol, err_msg=f"{what}: output {name}")


def _ops(module: ModuleOp) -> list[T.MgbOp]:
    return [op for op in module.walk() if isinstance(op, T.MgbOp)]


def _run_passes(module: ModuleOp, passes: list[ModulePass]) -> ModuleOp:
    out = module.clone()
    for p in passes:
        p.apply(Context(), out)
    out.verify()
    return out


def _blocked(module: ModuleOp, layout: str) -> ModuleOp:
    """``module`` as a MegEngine dump with the layout option holds it (float32, blocked)."""
    option = LAYOUTS[layout]
    return module.clone() if option is None else _run_passes(module, pipeline_for(**{option: True}))


# float32-only ops, outside the float16 model: MegEngine's Convolution3D and image operators take
# float32 (so do xmge's kernels); tests/test_mge_ops_vision.py and the conformance harness cover them
FLOAT32_ONLY = {
    T.Convolution3DOp,
    T.CorrelationOp,
    T.NMSKeepOp,
    T.ROIAlignOp,
    T.ROIPoolingOp,
    T.WarpPerspectiveOp,
    T.WarpAffineOp,
    T.RemapOp,
    T.CvtColorOp,
    T.DeformableConvOp,
    T.RegionRestrictedConvOp,
    T.DeformablePSROIPoolingOp,
}
# a count that depends on the data: compile refuses it (tests/test_symbolic_shape.py covers it);
# SVD runs on the reference interpreter only (tests/test_mge_svd.py); AssertEqual is a test-case check
# (tests/test_dump_input_data.py)
NOT_COMPILED = {T.CondTakeOp, T.SVDOp, T.AssertEqualOp}


def test_model_covers_every_op(traced: xm.jit.trace) -> None:
    """The model holds every op of the dialect but the float32-only ones (a new op must be added)."""
    have = {op.name for op in _ops(traced.module)}
    want = {op.name for op in T.TENSOR_OPS if op not in FLOAT32_ONLY | NOT_COMPILED}
    assert have == want, want - have


# -- the passes, op by op -------------------------------------------------------------------------


def _is_elem(t: Attribute, elem: Attribute) -> bool:
    return isinstance(t, TensorType) and t.element_type == elem


def _check_megengine_rules(module: ModuleOp, f32_comp: bool) -> None:
    """ConvertF32ToF16Pass's result, op by op: float32 survives only at the graph's edges and in
    LayerNorm's mean/rstd (and what reads nothing else); compute modes as MegEngine sets them."""
    fn = next(op for op in module.ops if isinstance(op, func.FuncOp))
    for op in _ops(module):
        if isinstance(op, T.TypeCvtOp):
            edge = op.src in fn.body.block.args or all(
                isinstance(u.operation, func.ReturnOp) for u in op.output.uses
            )
            assert edge or not _is_elem(op.output.type, F32), f"float32 typecvt inside the graph: {op}"
            continue
        if isinstance(op, T.LayerNormOp):
            assert _is_elem(op.output.type, F16), op
            assert _is_elem(op.mean.type, F32) and _is_elem(op.rstd.type, F32), op
            continue
        if isinstance(op, T.LinspaceOp):
            # MegEngine's replace_lsp_opr keeps Linspace float32 and converts after it; here the
            # readers convert the kept float32 value
            assert _is_elem(op.output.type, F32), op
            assert all(_is_elem(u.operation.results[0].type, F16) or isinstance(u.operation, func.ReturnOp)
                       for u in op.output.uses if isinstance(u.operation, T.TypeCvtOp)), op  # fmt: skip
            continue
        if isinstance(op, T.ArgmaxOp | T.ArgminOp):
            assert _is_elem(op.output.type, IntegerType(32)), op
        assert not any(_is_elem(t, F32) for t in (*op.operand_types, *op.result_types)), f"float32 left: {op}"
        params = op.params()
        if isinstance(op, COMPUTE_MODE_OPS):
            want = enums.ComputeMode.FLOAT32 if f32_comp else enums.ComputeMode.DEFAULT
            assert params["compute_mode"] == want, op
        if isinstance(op, T.ReduceOp) and any(_is_elem(t, F16) for t in op.operand_types):
            want_dt = enums.ReduceDataType.FLOAT_O16xC32 if f32_comp else enums.ReduceDataType.DEFAULT
            assert params["data_type"] == want_dt, op


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("option", F16_OPTIONS)
def test_float16_pass_on_every_op(
    traced: xm.jit.trace, want: list[np.ndarray], option: str, layout: str
) -> None:
    """The pass alone, on the float32 graph as traced (batch_norm and every other op still there)
    or as a layout dump holds it: verifies, keeps every op kind and each layout, follows
    MegEngine's rules, and computes within float16 tolerance."""
    src = _blocked(traced.module, layout)
    out = _run_passes(src, [F16_OPTIONS[option]()])
    assert {op.name for op in _ops(out)} == {op.name for op in _ops(src)}
    layouts = {L.layout_of(t) for op in _ops(out) for t in op.result_types}
    assert layouts == {L.layout_of(t) for op in _ops(src) for t in op.result_types}
    assert (layouts == {None}) == (layout == "plain")
    _check_megengine_rules(out, f32_comp=option == "enable_io16xc32")
    assert_close_to_f32(run_module(out, [X, K]), want, f"{option} on {layout}")


def test_pass_is_idempotent(traced: xm.jit.trace) -> None:
    """A graph already in float16 (MegEngine's float16 dumps, read and optimized again) is left as
    it is, its float32 edges included."""
    once = _run_passes(traced.module, [F16IOF32CompPass()])
    twice = _run_passes(once, [F16IOF32CompPass()])
    assert str(twice) == str(once)


# -- .mge dumps -------------------------------------------------------------------------------------


def _dump(tr: xm.jit.trace, **options: bool) -> bytes:
    buf = io.BytesIO()
    tr.dump(buf, output_names=list(OUTPUTS), **options)
    return buf.getvalue()


@pytest.fixture(scope="module")
def dumps(traced: xm.jit.trace) -> dict[str, bytes]:
    """Every float16 option x layout as ``trace.dump`` writes it, and the float32 layout dumps."""
    out: dict[str, bytes] = {}
    for layout, layout_option in LAYOUTS.items():
        extra = {layout_option: True} if layout_option else {}
        if extra:
            out[f"float32_{layout}"] = _dump(traced, **extra)
        for option in F16_OPTIONS:
            out[f"{option[7:]}_{layout}"] = _dump(traced, **{option: True}, **extra)
    return out


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("option", F16_OPTIONS)
def test_float16_dump_reads_back(
    dumps: dict[str, bytes], want: list[np.ndarray], option: str, layout: str
) -> None:
    module = read_mge(dumps[f"{option[7:]}_{layout}"])
    module.verify()
    types = [t for op in _ops(module) for t in op.result_types]
    assert any(_is_elem(t, F16) for t in types)
    if layout != "plain":
        assert any(L.layout_of(t) is not None and _is_elem(t, F16) for t in types)
    assert_close_to_f32(run_module(module, [X, K]), want, f"{option}_{layout}.mge")


# -- compiled --------------------------------------------------------------------------------------

SOURCES = ["float32_nchw44", "float32_nchw88", *(f"{o[7:]}_{lay}" for o in F16_OPTIONS for lay in LAYOUTS)]


def _compile_and_run(source: bytes, target: str) -> list[np.ndarray]:
    compiled = compile(source, target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmulationWarning)
        return compiled.run([X, K])


@pytest.mark.parametrize("target", X86_TARGETS)
@pytest.mark.parametrize("source", SOURCES)
def test_compiled_x86(dumps: dict[str, bytes], want: list[np.ndarray], source: str, target: str) -> None:
    if not runs_here(parse_target(target)):
        pytest.skip(f"{target} does not run on this machine")
    assert_close_to_f32(_compile_and_run(dumps[source], target), want, f"{source}.mge on {target}")


@pytest.mark.skipif(ARM_PROBLEM is not None, reason=f"ARM toolchain: {ARM_PROBLEM}")
@pytest.mark.parametrize("target", ARM_TARGETS)
@pytest.mark.parametrize("source", SOURCES)
def test_compiled_arm(dumps: dict[str, bytes], want: list[np.ndarray], source: str, target: str) -> None:
    if source.endswith("nchw88"):
        pytest.skip("no NEON kernel reads NCHW88 (an x86 layout), in float32 either")
    assert_close_to_f32(_compile_and_run(dumps[source], target), want, f"{source}.mge on {target}")


# -- MegEngine's golden dumps on the ARM float16 targets ------------------------------------------

GOLDEN = [f"{case}/{variant}.mge" for case in ("convnet", "mini_resnet")
          for variant in ("io16xc32", "ioc16", "nchw44", "plain")]  # fmt: skip


def _input_names(compiled: Any) -> list[str]:
    fn = next(op for op in compiled._stages["tensor"].ops if isinstance(op, func.FuncOp))
    return [n.data for n in fn.attributes["input_names"].data]


@pytest.mark.skipif(ARM_PROBLEM is not None, reason=f"ARM toolchain: {ARM_PROBLEM}")
@pytest.mark.parametrize("target", ARM_TARGETS)
@pytest.mark.parametrize("path", GOLDEN)
def test_golden_dump_on_arm_float16(path: str, target: str) -> None:
    """Against MegEngine's own outputs where it saved them (float16: 5e-2 of the output's scale,
    as tests/test_compile_golden_x86.py)."""
    compiled = compile(os.path.join(DATA, path), target)
    case, variant = os.path.split(path)
    expected = os.path.join(DATA, case, f"expected_{variant[:-4]}.npz")
    if not os.path.exists(expected):
        return
    inputs = np.load(os.path.join(DATA, case, "inputs.npz"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmulationWarning)
        got = compiled.run([inputs[n] for n in _input_names(compiled)])
    for g, w in zip(got, np.load(expected).values(), strict=True):
        np.testing.assert_allclose(g, w, rtol=5e-2, atol=5e-2 * max(1.0, float(np.abs(w).max())))


@irdl_op_definition
class Float32OnlyOp(T.MgbOp):
    """An op (as a plugin might define) whose inference refuses float16 operands."""

    name = "test.float32_only"
    src = operand_def(TensorType)
    output = result_def(TensorType)

    @classmethod
    def infer(cls, operand_types: Sequence[Attribute], **params: Any) -> list[TensorType]:
        (src,) = operand_types
        assert isinstance(src, TensorType)
        if src.element_type != F32:
            raise T.ShapeInferenceError(cls.name, f"needs float32, got {src.element_type}")
        return [src]


def test_op_without_float16_form_stays_float32() -> None:
    """Between float16 ops, an op that refuses float16 reads its operand converted back to
    float32; what reads only its float32 result stays float32 (MegEngine keeps inferred dtypes)."""
    t32 = TensorType(F32, [2, 3])
    block = Block(arg_types=[t32])
    relu = T.ElemwiseOp.make([block.args[0]], mode=enums.ElemwiseMode.RELU)
    only = Float32OnlyOp.make([relu.results[0]])
    neg = T.ElemwiseOp.make([only.results[0]], mode=enums.ElemwiseMode.NEGATE)
    block.add_ops([relu, only, neg, func.ReturnOp(neg.results[0])])
    fn = func.FuncOp("main", FunctionType.from_lists([t32], [t32]), Region(block))
    out = _run_passes(ModuleOp([fn]), [F16IOF32CompPass()])
    modes = {op.params()["mode"]: op for op in _ops(out) if isinstance(op, T.ElemwiseOp)}
    assert _is_elem(modes[enums.ElemwiseMode.RELU].output.type, F16)
    assert _is_elem(modes[enums.ElemwiseMode.NEGATE].output.type, F32)
    (kept,) = [op for op in _ops(out) if isinstance(op, Float32OnlyOp)]
    cvt = kept.operands[0].owner
    assert isinstance(cvt, T.TypeCvtOp) and _is_elem(cvt.src.type, F16) and _is_elem(cvt.output.type, F32)
