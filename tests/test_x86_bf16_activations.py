"""bfloat16 activations between ``+bf16`` NCHW88 convolutions (``kernel-bf16-activations``,
``passes/lowering/bf16_activations.py``; kernel ``conv2d_nchw88_bf16``): a result is a
``bf16`` tensor exactly where its producer and every reader take bfloat16, float32 at the model's
edges and next to float32 kernels; ``kernel.call`` refuses a bfloat16 tensor a kernel does not take.

Numerics: against the contract in float64 (bfloat16-rounded inputs and filters, exact sums, float32
epilogue, a stored bfloat16 activation rounded once), against float32 (relative L2) and against
PyTorch computing the same network in bfloat16 (its own rounding of every activation): xmge's error
vs float64 stays within PyTorch's. The network covers a padded copy, a direct read, a strided 1x1
subsample, a residual read as bfloat16, a bfloat16 result over two input-channel chunks (its
float32 partial sums in the workspace: 3x3, 48 channels) and 1 and 2 threads, ASan/UBSan."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import BFloat16Type, Float32Type, ModuleOp, TensorType
from xdsl.utils.exceptions import VerifyException

import compiler.functional as F
from backends.c.templates.x86.x86_amx_bf16 import round_bfloat16
from compiler.tensor import Tensor
from dialects import kernel as K
from semantics import run_module
from tests.codegen_util import compile_fn
from tests.test_x86_bf16 import require_avx512_bf16

TARGET = "x86-avx512-nchw88+bf16"


def _weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    def w(oc: int, ic: int, k: int) -> np.ndarray:
        return (rng.standard_normal((oc, ic, k, k)) * (1.5 / np.sqrt(ic * k * k))).astype(np.float32)

    return {
        "a": w(48, 16, 1), "b": w(48, 48, 3), "c": w(48, 48, 3), "d": w(32, 48, 1),
        "ba": rng.uniform(-0.1, 0.1, 48).astype(np.float32),
        "bb": rng.uniform(-0.1, 0.1, 48).astype(np.float32),
    }  # fmt: skip


def _net(ws: dict[str, np.ndarray]) -> Any:
    def f(x: Tensor) -> tuple[Tensor, Tensor]:
        a = F.relu(F.conv2d(x, Tensor(ws["a"]), Tensor(ws["ba"].reshape(1, -1, 1, 1))))
        b = F.relu(F.conv2d(a, Tensor(ws["b"]), Tensor(ws["bb"].reshape(1, -1, 1, 1)), padding=1))
        c = F.relu(F.conv2d(b, Tensor(ws["c"]), padding=1) + a)
        return F.conv2d(c, Tensor(ws["d"]), stride=2), F.max_pool2d(b, 2, 2)

    return f


def _reference(
    x: np.ndarray, ws: dict[str, np.ndarray], rounded: bool, dtype: torch.dtype
) -> list[np.ndarray]:
    """The network in ``dtype``; with ``rounded`` the activations xmge keeps in bfloat16 (``a``, and
    ``c`` which only a bfloat16 conv reads) are rounded to bfloat16 as the contract says (inputs of
    every bfloat16 conv are rounded there anyway)."""

    def t(v: np.ndarray) -> torch.Tensor:
        return torch.tensor(round_bfloat16(v) if rounded else v).to(dtype)

    def r(v: torch.Tensor) -> torch.Tensor:
        return t(v.double().numpy().astype(np.float32)) if rounded else v

    conv = torch.nn.functional.conv2d
    a = r(torch.relu(conv(t(x), t(ws["a"]), torch.tensor(ws["ba"]).to(dtype))))
    b = torch.relu(conv(a, t(ws["b"]), torch.tensor(ws["bb"]).to(dtype), padding=1))
    c = r(torch.relu(conv(r(b), t(ws["c"]), padding=1) + a))
    d = conv(c, t(ws["d"]), stride=2)
    return [d.double().numpy(), torch.nn.functional.max_pool2d(b, 2, 2).double().numpy()]


@pytest.fixture(scope="module")
def case() -> tuple[Any, list[np.ndarray], dict[str, np.ndarray]]:
    rng = np.random.default_rng(41)
    ws = _weights(rng)
    return _net(ws), [rng.standard_normal((1, 16, 10, 12)).astype(np.float32)], ws


def test_bf16_tensors_where_every_reader_takes_them(
    case: tuple[Any, list[np.ndarray], dict[str, np.ndarray]],
) -> None:
    """``a`` (read by a padded 3x3 conv and as a residual) and ``c`` (by a strided 1x1) become
    bfloat16; ``b`` stays float32 (max pooling reads it too) and so do the model's outputs. Needs gcc
    only."""
    fn, inputs, _ = case
    ir = compile_fn(fn, inputs, TARGET).ir("kernel-bf16-activations")
    calls = re.findall(r"kernel\.call @(\w+)\(.*\) : \((.*)\) -> (.*)", ir)
    convs = [(sym, outs) for sym, _, outs in calls if sym.startswith("conv2d_nchw88_bf16")]
    assert [("bf16" in o) for _, o in convs] == [True, False, True, False], convs
    tags = [re.sub(r"^.*?((_xb)?(_rb)?(_yb)?)$", r"\1", sym) for sym, _ in convs]
    assert tags == ["_yb", "_xb", "_rb_yb", "_xb"], convs
    # a (its result and two reads) and c (its result and one read), in the calls' signatures: blocked
    # NCHW88 shapes; nothing else (b, the outputs) is bfloat16
    assert ir.count("tensor<1x6x10x12x8xbf16") == ir.count("xbf16") == 5, ir


def _errors(got: list[np.ndarray], want: list[np.ndarray]) -> list[float]:
    return [float(np.linalg.norm(g - w) / np.linalg.norm(w)) for g, w in zip(got, want, strict=True)]


@pytest.mark.parametrize(("threads", "batch"), [(1, 1), (2, 2)])
def test_bf16_activations_numerics(
    case: tuple[Any, list[np.ndarray], dict[str, np.ndarray]], threads: int, batch: int
) -> None:
    """One image on one thread; two images on two threads (the workspace's copy and partial sums
    re-used image after image)."""
    require_avx512_bf16(TARGET)
    fn, inputs, ws = case
    if batch > 1:
        inputs = [np.random.default_rng(7).standard_normal((batch, *inputs[0].shape[1:])).astype(np.float32)]
    compiled = compile_fn(fn, inputs, TARGET, threads=threads)
    got = [np.asarray(g, np.float64) for g in compiled.run(inputs)]
    contract = _reference(inputs[0], ws, rounded=True, dtype=torch.float64)
    exact = _reference(inputs[0], ws, rounded=False, dtype=torch.float64)
    torch_bf16 = _reference(inputs[0], ws, rounded=False, dtype=torch.bfloat16)
    f32 = run_module(compiled._stages["tensor"], inputs)  # type: ignore[arg-type]
    # the contract up to a float32 sum landing on the other side of a bfloat16 rounding (one ulp of
    # an activation: 2^-8 relative) now and then; measured 3e-8 and 9e-8
    assert max(_errors(got, contract)) < 1e-4, _errors(got, contract)
    assert max(_errors(got, [np.asarray(v) for v in f32])) < 1e-2
    ours, theirs = _errors(got, exact), _errors(torch_bf16, exact)
    assert all(o <= 1.5 * t for o, t in zip(ours, theirs, strict=True)), (ours, theirs)
    assert not np.array_equal(got[0], np.asarray(f32[0], np.float64))


def test_bf16_activations_sanitized(case: tuple[Any, list[np.ndarray], dict[str, np.ndarray]]) -> None:
    require_avx512_bf16(TARGET)
    fn, inputs, _ = case
    compiled = compile_fn(fn, inputs, TARGET)
    plain = compiled.run(inputs)
    for g, w in zip(compiled.run_runner(inputs, sanitize=True), plain, strict=True):
        np.testing.assert_array_equal(g, w)


def test_call_refuses_undeclared_bf16() -> None:
    """A bfloat16 tensor handed to a kernel whose definition does not take it is a verify error that
    names the call, the argument and the parameter; declared, it verifies."""
    f32 = TensorType(Float32Type(), [1, 8, 2, 2])
    b16 = TensorType(BFloat16Type(), [1, 8, 2, 2])

    def module(params: dict[str, Any]) -> ModuleOp:
        d = K.KernelDefOp("k", "fam", "isa", params)
        fn = func.FuncOp("f", ((f32,), (f32,)))
        blk = fn.body.block
        first = K.CallOp("k", [blk.args[0]], [b16])
        second = K.CallOp("k", [first.outputs[0]], [f32])
        blk.add_ops([first, second, func.ReturnOp(second.outputs[0])])
        return ModuleOp([d, fn])

    with pytest.raises(VerifyException, match=r"kernel\.call @k: result 0 is .*bf16.*does not take it"):
        module({}).verify()
    with pytest.raises(VerifyException, match=r"argument 0 is .*f32.*takes it as bfloat16 \(bf16_args\)"):
        module({"bf16_outs": (0,), "bf16_args": (0,)}).verify()
