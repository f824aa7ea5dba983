"""Gradients of every op against PyTorch autograd (float64) and against central finite differences
of xmge's own float32 forward.

Each case is a function of some float32 inputs, written once for xmge and once for torch. The
scalar being differentiated is ``sum(out * W)`` with a fixed random ``W``, so every output element
contributes with its own weight. The finite-difference check is directional (``<grad, v>`` against
``(f(x + h v) - f(x - h v)) / 2h`` for a random ``v``), which keeps float32 rounding noise well below
the tolerance; inputs of kinked ops (relu, max, pooling, clip) keep a margin from the kinks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import compiler as xm
import compiler.functional as F
from compiler import autodiff
from compiler.autodiff import GradError, GradManager
from compiler.core import apply
from dialects import enums
from dialects import tensor as T

E = enums.ElemwiseMode


@dataclass
class Case:
    name: str
    xfn: Callable[..., xm.Tensor]
    tfn: Callable[..., torch.Tensor]
    inputs: Callable[[np.random.Generator], list[np.ndarray]]
    rtol: float = 1e-4
    fd: bool = True  # False for functions of float16 casts etc., where float32 FD says nothing
    fd_rtol: float = 2e-2
    no_grad: Sequence[int] = field(default_factory=tuple)  # inputs that carry no gradient


def _spaced(rng: np.random.Generator, shape: tuple[int, ...], gap: float = 0.05) -> np.ndarray:
    """Distinct values at least ``gap`` apart (in random order): max/pool/sort-like ops then have a
    unique winner that a finite-difference step of 1e-3 cannot change."""
    n = int(np.prod(shape))
    return (rng.permutation(n).reshape(shape) * gap - n * gap / 2).astype(np.float32)


def _away_from(
    rng: np.random.Generator, shape: tuple[int, ...], kinks: Sequence[float], lo: float, hi: float
):
    x = rng.uniform(lo, hi, size=shape).astype(np.float32)
    for k in kinks:
        near = np.abs(x - k) < 0.1
        x[near] = (k + 0.1 * np.sign(x[near] - k + 1e-9) + 0.05 * np.sign(x[near] - k + 1e-9)).astype(
            np.float32
        )
    return x


def _n(*shape: int, scale: float = 1.0) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: (rng.standard_normal(shape) * scale).astype(np.float32)


def _pos(*shape: int, lo: float = 0.5, hi: float = 2.0) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.uniform(lo, hi, size=shape).astype(np.float32)


def _gen(
    *makers: Callable[[np.random.Generator], np.ndarray],
) -> Callable[[np.random.Generator], list[np.ndarray]]:
    return lambda rng: [m(rng) for m in makers]


def _kinked(*shape: int, kinks: Sequence[float] = (0.0,), lo: float = -2.0, hi: float = 2.0):
    return lambda rng: _away_from(rng, shape, kinks, lo, hi)


def _ew(mode: Any) -> Callable[..., xm.Tensor]:
    """An elemwise mode the frontend does not expose, applied directly."""
    return lambda *xs: apply(T.ElemwiseOp, list(xs), label="test", mode=mode)[0]


CASES: list[Case] = [
    # -- elementwise, unary ------------------------------------------------------------------------
    Case("relu", F.relu, torch.relu, _gen(_kinked(3, 4))),
    Case("relu6", F.relu6, TF.relu6, _gen(_kinked(3, 4, kinks=(0, 6), lo=-2, hi=8))),
    Case("abs", F.abs, torch.abs, _gen(_kinked(3, 4))),
    Case("neg", F.neg, torch.neg, _gen(_n(3, 4))),
    Case("exp", F.exp, torch.exp, _gen(_n(3, 4))),
    Case("log", F.log, torch.log, _gen(_pos(3, 4))),
    Case("log1p", F.log1p, torch.log1p, _gen(_pos(3, 4, lo=-0.5, hi=2))),
    Case("expm1", F.expm1, torch.expm1, _gen(_n(3, 4))),
    Case("sqrt", F.sqrt, torch.sqrt, _gen(_pos(3, 4))),
    Case("square", F.square, torch.square, _gen(_n(3, 4))),
    Case("sin", F.sin, torch.sin, _gen(_n(3, 4))),
    Case("cos", F.cos, torch.cos, _gen(_n(3, 4))),
    Case("tanh", F.tanh, torch.tanh, _gen(_n(3, 4))),
    Case("sigmoid", F.sigmoid, torch.sigmoid, _gen(_n(3, 4))),
    Case("hswish", F.hswish, TF.hardswish, _gen(_kinked(3, 4, kinks=(-3, 3), lo=-5, hi=5))),
    Case("hsigmoid", F.hsigmoid, TF.hardsigmoid, _gen(_kinked(3, 4, kinks=(-3, 3), lo=-5, hi=5))),
    Case("gelu", F.gelu, TF.gelu, _gen(_n(3, 4))),
    Case("silu", F.silu, TF.silu, _gen(_n(3, 4))),
    Case("softplus", F.nn.softplus, TF.softplus, _gen(_n(3, 4, scale=3))),
    Case(
        "leaky_relu", lambda x: F.nn.leaky_relu(x, 0.1), lambda x: TF.leaky_relu(x, 0.1), _gen(_kinked(3, 4))
    ),
    Case(
        "floor", lambda x: F.floor(x) * x, lambda x: torch.floor(x) * x, _gen(_kinked(3, 4, kinks=(-1, 0, 1)))
    ),
    Case(
        "round",
        lambda x: F.round(x) + x,
        lambda x: torch.round(x) + x,
        _gen(_kinked(3, 4, kinks=(-1.5, -0.5, 0.5, 1.5))),
    ),
    # -- elementwise, binary with broadcasting --------------------------------------------------------
    Case("add", F.add, torch.add, _gen(_n(3, 4), _n(4))),
    Case("sub", F.sub, torch.sub, _gen(_n(3, 1), _n(1, 4))),
    Case("mul", F.mul, torch.mul, _gen(_n(2, 3, 4), _n(3, 1))),
    Case("div", F.div, torch.div, _gen(_n(3, 4), _pos(4))),
    Case("pow", F.pow, torch.pow, _gen(_pos(3, 4), _n(3, 4))),
    Case("pow_scalar", lambda x: x**3.0, lambda x: x**3.0, _gen(_n(3, 4))),
    Case(
        "maximum",
        F.maximum,
        torch.maximum,
        _gen(lambda r: _spaced(r, (3, 4)), lambda r: _spaced(r, (3, 4)) + 0.025),
    ),
    Case(
        "minimum",
        F.minimum,
        torch.minimum,
        _gen(lambda r: _spaced(r, (3, 4)), lambda r: _spaced(r, (4,)) + 0.025),
    ),
    Case(
        "mod",
        F.mod,
        torch.fmod,
        _gen(_pos(3, 4, lo=0.1, hi=0.9), lambda r: np.full((3, 4), 0.37, np.float32)),
    ),
    Case(
        "clip",
        lambda x: F.clip(x, -0.5, 0.5),
        lambda x: x.clamp(-0.5, 0.5),
        _gen(_kinked(3, 4, kinks=(-0.5, 0.5))),
    ),
    Case(
        "where",
        lambda x, y: F.where(x > 0, x, y),
        lambda x, y: torch.where(x > 0, x, y),
        _gen(_kinked(3, 4), _n(3, 4)),
    ),
    # elemwise modes reached through passes or direct construction
    Case(
        "fuse_add_relu",
        _ew(E.FUSE_ADD_RELU),
        lambda a, b: torch.relu(a + b),
        _gen(_kinked(3, 4), lambda r: np.zeros((3, 4), np.float32)),
    ),
    Case(
        "fuse_add_sigmoid", _ew(E.FUSE_ADD_SIGMOID), lambda a, b: torch.sigmoid(a + b), _gen(_n(3, 4), _n(4))
    ),
    Case("fuse_add_tanh", _ew(E.FUSE_ADD_TANH), lambda a, b: torch.tanh(a + b), _gen(_n(3, 4), _n(3, 4))),
    Case("fuse_mul_add3", _ew(E.FUSE_MUL_ADD3), lambda a, b, c: a * b + c, _gen(_n(3, 4), _n(3, 4), _n(4))),
    Case(
        "fuse_mul_add4",
        _ew(E.FUSE_MUL_ADD4),
        lambda a, b, c, d: a * b + c * d,
        _gen(_n(3, 4), _n(4), _n(3, 4), _n(3, 4)),
    ),
    Case("log_sum_exp", _ew(E.LOG_SUM_EXP), torch.logaddexp, _gen(_n(3, 4), _n(3, 4))),
    Case("atan2", _ew(E.ATAN2), torch.atan2, _gen(_n(3, 4), _pos(3, 4))),
    Case("erf", _ew(E.ERF), torch.erf, _gen(_n(3, 4))),
    Case("logsigmoid", _ew(E.LOGSIGMOID), TF.logsigmoid, _gen(_n(3, 4))),
    Case("prelu", _ew(E.PRELU), lambda x, w: torch.where(x > 0, x, x * w), _gen(_kinked(3, 4), _n(4))),
    # -- reductions ---------------------------------------------------------------------------------
    Case("sum", lambda x: F.sum(x, 1), lambda x: x.sum(1), _gen(_n(3, 4, 5))),
    Case("sum_all", lambda x: F.sum(x), lambda x: x.sum(), _gen(_n(3, 4))),
    Case(
        "mean",
        lambda x: F.mean(x, (0, 2), keepdims=True),
        lambda x: x.mean((0, 2), keepdim=True),
        _gen(_n(3, 4, 5)),
    ),
    Case("max", lambda x: F.max(x, 1), lambda x: x.amax(1), _gen(lambda r: _spaced(r, (3, 4, 5)))),
    Case(
        "min",
        lambda x: F.min(x, -1, keepdims=True),
        lambda x: x.amin(-1, keepdim=True),
        _gen(lambda r: _spaced(r, (3, 4))),
    ),
    Case("prod", lambda x: F.prod(x, 1), lambda x: x.prod(1), _gen(_pos(3, 4, lo=-1.5, hi=1.5))),
    Case(
        "prod_with_zero",
        lambda x: F.prod(x, 0),
        lambda x: x.prod(0),
        _gen(lambda r: np.array([[0.0, 1.5], [2.0, -0.5], [0.7, 0.0]], np.float32)),
    ),
    Case("norm", lambda x: F.norm(x, axis=1), lambda x: torch.linalg.vector_norm(x, dim=1), _gen(_n(3, 4))),
    # -- matrix products ----------------------------------------------------------------------------
    Case("matmul", F.matmul, torch.matmul, _gen(_n(3, 4), _n(4, 5))),
    Case(
        "matmul_ta",
        lambda a, b: F.matmul(a, b, transpose_a=True),
        lambda a, b: a.T @ b,
        _gen(_n(4, 3), _n(4, 5)),
    ),
    Case(
        "matmul_tb",
        lambda a, b: F.matmul(a, b, transpose_b=True),
        lambda a, b: a @ b.T,
        _gen(_n(3, 4), _n(5, 4)),
    ),
    Case("matmul_vec", F.matmul, torch.matmul, _gen(_n(4), _n(4, 5))),
    Case("matmul_batched_broadcast", F.matmul, torch.matmul, _gen(_n(2, 1, 3, 4), _n(3, 4, 2))),
    Case(
        "batch_matmul_tt",
        lambda a, b: F.batch_matmul(a, b, transpose_a=True, transpose_b=True),
        lambda a, b: a.transpose(1, 2) @ b.transpose(1, 2),
        _gen(_n(2, 4, 3), _n(2, 5, 4)),
    ),
    Case("linear", F.nn.linear, TF.linear, _gen(_n(2, 3, 6), _n(5, 6), _n(5))),
    # -- shape and data movement --------------------------------------------------------------------
    Case("reshape", lambda x: F.reshape(x, (4, -1)) * 1.0, lambda x: x.reshape(4, -1), _gen(_n(2, 3, 2))),
    Case("flatten", lambda x: F.flatten(x, 1), lambda x: x.flatten(1), _gen(_n(2, 3, 2, 2))),
    Case("transpose", lambda x: F.transpose(x, (2, 0, 1)), lambda x: x.permute(2, 0, 1), _gen(_n(2, 3, 4))),
    Case(
        "dimshuffle_newaxis",
        lambda x: F.transpose(x, (1, "x", 0)),
        lambda x: x.T.unsqueeze(1),
        _gen(_n(3, 4)),
    ),
    Case(
        "expand_squeeze",
        lambda x: F.squeeze(F.expand_dims(x, (0, 3)) * 2.0, 0),
        lambda x: (x[None, :, :, None] * 2)[0],
        _gen(_n(3, 4)),
    ),
    Case("broadcast_to", lambda x: F.broadcast_to(x, (2, 3, 4)), lambda x: x.expand(2, 3, 4), _gen(_n(3, 1))),
    Case(
        "concat",
        lambda a, b: F.concat([a, b, a], axis=1),
        lambda a, b: torch.cat([a, b, a], 1),
        _gen(_n(2, 3), _n(2, 2)),
    ),
    Case(
        "stack",
        lambda a, b: F.stack([a, b], axis=1),
        lambda a, b: torch.stack([a, b], 1),
        _gen(_n(2, 3), _n(2, 3)),
    ),
    Case(
        "split",
        lambda x: F.split(x, [1, 3], axis=1)[0] * 2.0 + F.split(x, [1, 3], axis=1)[2].sum(),
        lambda x: torch.split(x, [1, 2, 1], 1)[0] * 2 + torch.split(x, [1, 2, 1], 1)[2].sum(),
        _gen(_n(3, 4)),
    ),
    Case("getitem", lambda x: x[1:, ::2, 1], lambda x: x[1:, ::2, 1], _gen(_n(3, 5, 2))),
    Case(
        "getitem_negstep",
        lambda x: x[::-2, None, 0],
        lambda x: torch.flip(x, [0])[::2, None, 0],
        _gen(_n(5, 2)),
    ),
    Case(
        "astype_f16",
        lambda x: x.astype("float16").astype("float32"),
        lambda x: x.half().double(),
        _gen(_n(3, 4)),
        rtol=1e-3,
        fd=False,
    ),
    Case(
        "astype_int_blocks",
        lambda x: x * x.astype("int32").astype("float32"),
        lambda x: x * x.trunc().detach(),
        _gen(_kinked(3, 4, kinks=(-1, 0, 1))),
    ),
    # -- nn -----------------------------------------------------------------------------------------
    Case("softmax", lambda x: F.softmax(x, 1), lambda x: torch.softmax(x, 1), _gen(_n(3, 5))),
    Case("log_softmax", lambda x: F.nn.log_softmax(x, 0), lambda x: torch.log_softmax(x, 0), _gen(_n(4, 3))),
    Case("logsumexp", lambda x: F.nn.logsumexp(x, 1), lambda x: torch.logsumexp(x, 1), _gen(_n(3, 5))),
    Case(
        "conv2d",
        lambda x, w, b: F.conv2d(x, w, b),
        lambda x, w, b: TF.conv2d(x, w, b.reshape(-1)),
        _gen(_n(2, 3, 6, 6), _n(4, 3, 3, 3), _n(1, 4, 1, 1)),
    ),
    Case(
        "conv2d_stride_pad_dilation",
        lambda x, w: F.conv2d(x, w, stride=(2, 1), padding=(1, 2), dilation=(2, 1)),
        lambda x, w: TF.conv2d(x, w, stride=(2, 1), padding=(1, 2), dilation=(2, 1)),
        _gen(_n(2, 2, 7, 6), _n(3, 2, 3, 2)),
    ),
    Case(
        "conv2d_groups",
        lambda x, w: F.conv2d(x, w, groups=2, padding=1),
        lambda x, w: TF.conv2d(x, w, groups=2, padding=1),
        _gen(_n(1, 4, 5, 5), _n(6, 2, 3, 3)),
    ),
    Case(
        "conv2d_groups_5d",
        lambda x, w: F.conv2d(x, w, groups=3, stride=2),
        lambda x, w: TF.conv2d(x, w.reshape(-1, *w.shape[2:]), groups=3, stride=2),
        _gen(_n(2, 3, 6, 6), _n(3, 2, 1, 3, 3)),
    ),
    Case(
        "conv_transpose2d",
        lambda x, w, b: F.conv_transpose2d(x, w, b, stride=(2, 1), padding=(1, 0), dilation=(1, 2)),
        lambda x, w, b: TF.conv_transpose2d(
            x, w, b.reshape(-1), stride=(2, 1), padding=(1, 0), dilation=(1, 2)
        ),
        _gen(_n(2, 3, 5, 4), _n(3, 2, 3, 2), _n(1, 2, 1, 1)),
    ),
    Case(
        "conv_transpose2d_groups_output_padding",
        lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1, groups=2),
        lambda x, w: TF.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1, groups=2),
        _gen(_n(1, 4, 3, 5), _n(4, 3, 3, 3)),
    ),
    Case(
        "interpolate_bilinear",
        lambda x: F.nn.interpolate(x, (7, 4)),
        lambda x: TF.interpolate(x, (7, 4), mode="bilinear", align_corners=False),
        _gen(_n(2, 3, 5, 6)),
    ),
    Case(
        "interpolate_nearest",
        lambda x: F.vision.interpolate(x, scale_factor=1.5, mode="nearest"),
        lambda x: TF.interpolate(x, (7, 9), mode="nearest"),
        _gen(_n(1, 2, 5, 6)),
    ),
    Case(
        "interpolate_align_corners",
        lambda x: F.nn.interpolate(x, (9, 3), align_corners=True),
        lambda x: TF.interpolate(x, (9, 3), mode="bilinear", align_corners=True),
        _gen(_n(2, 1, 4, 5)),
    ),
    Case(
        "layer_norm_affine",
        lambda x, w, b: F.nn.layer_norm(x, (3, 5), True, w, b, eps=1e-3),
        lambda x, w, b: TF.layer_norm(x, (3, 5), w, b, eps=1e-3),
        _gen(_n(2, 4, 3, 5), _n(3, 5), _n(3, 5)),
    ),
    Case(
        "layer_norm_plain",
        lambda x: F.nn.layer_norm(x, 7, False),
        lambda x: TF.layer_norm(x, (7,)),
        _gen(_n(3, 7)),
    ),
    Case(
        "argmax_argmin_no_gradient",
        lambda x: x * F.argmax(x, 1, True).astype("float32") + x * F.argmin(x, 0).astype("float32"),
        lambda x: x * x.argmax(1, keepdim=True).to(x.dtype) + x * x.argmin(0).to(x.dtype),
        lambda rng: [_spaced(rng, (3, 5))],
    ),
    Case(
        "conv2d_convolution_mode",
        lambda x, w: F.conv2d(x, w, conv_mode="convolution"),
        lambda x, w: TF.conv2d(x, torch.flip(w, [2, 3])),
        _gen(_n(1, 2, 5, 5), _n(3, 2, 3, 2)),
    ),
    Case(
        "max_pool2d",
        lambda x: F.nn.max_pool2d(x, 3, 2, 1),
        lambda x: TF.max_pool2d(x, 3, 2, 1),
        _gen(lambda r: _spaced(r, (2, 2, 7, 7), gap=0.02)),
    ),
    Case(
        "avg_pool2d_include_pad",
        lambda x: F.nn.avg_pool2d(x, 3, 2, 1, mode="average"),
        lambda x: TF.avg_pool2d(x, 3, 2, 1, count_include_pad=True),
        _gen(_n(2, 2, 7, 7)),
    ),
    Case(
        "avg_pool2d_exclude_pad",
        lambda x: F.nn.avg_pool2d(x, 2, 1, 1),
        lambda x: TF.avg_pool2d(x, 2, 1, 1, count_include_pad=False),
        _gen(_n(1, 2, 5, 4)),
    ),
    Case(
        "adaptive_avg_pool2d",
        lambda x: F.nn.adaptive_avg_pool2d(x, (2, 3)),
        lambda x: TF.adaptive_avg_pool2d(x, (2, 3)),
        _gen(_n(2, 2, 6, 6)),
    ),
    Case(
        "adaptive_max_pool2d",
        lambda x: F.nn.adaptive_max_pool2d(x, 2),
        lambda x: TF.adaptive_max_pool2d(x, 2),
        _gen(lambda r: _spaced(r, (1, 2, 4, 6))),
    ),
    Case(
        "pad_constant",
        lambda x: F.nn.pad(x, ((1, 0), (0, 2), (2, 1)), constant_value=0.5),
        lambda x: TF.pad(x, (2, 1, 0, 2, 1, 0), value=0.5),
        _gen(_n(2, 3, 4)),
    ),
    Case(
        "pad_reflect",
        lambda x: F.nn.pad(x, ((0, 0), (0, 0), (2, 1), (1, 2)), mode="reflect"),
        lambda x: TF.pad(x, (1, 2, 2, 1), mode="reflect"),
        _gen(_n(1, 2, 4, 4)),
    ),
    Case(
        "pad_edge",
        lambda x: F.nn.pad(x, ((0, 0), (0, 0), (3, 1), (0, 2)), mode="edge"),
        lambda x: TF.pad(x, (0, 2, 3, 1), mode="replicate"),
        _gen(_n(1, 2, 3, 3)),
    ),
    Case(
        "batch_norm_training",
        lambda x, w, b: F.nn.batch_norm(x, None, None, w, b, training=True),
        lambda x, w, b: TF.batch_norm(x, None, None, w.reshape(-1), b.reshape(-1), training=True),
        _gen(_n(4, 3, 2, 2), _pos(1, 3, 1, 1), _n(1, 3, 1, 1)),
        rtol=2e-4,
    ),
    Case(
        "batch_norm_inference",
        lambda x, m, v, w, b: F.nn.batch_norm(x, m, v, w, b, training=False, eps=1e-3),
        lambda x, m, v, w, b: (x - m) / torch.sqrt(v + 1e-3) * w + b,
        _gen(_n(2, 3, 2, 2), _n(1, 3, 1, 1), _pos(1, 3, 1, 1), _pos(1, 3, 1, 1), _n(1, 3, 1, 1)),
    ),
    # -- losses -------------------------------------------------------------------------------------
    Case(
        "cross_entropy",
        lambda p: F.nn.cross_entropy(p, xm.tensor([1, 0, 3, 3])),
        lambda p: TF.cross_entropy(p, torch.tensor([1, 0, 3, 3])),
        _gen(_n(4, 5)),
    ),
    Case(
        "cross_entropy_smooth_sum",
        lambda p: F.nn.cross_entropy(p, xm.tensor([1, 0, 3]), label_smooth=0.1, reduction="sum"),
        lambda p: TF.cross_entropy(p, torch.tensor([1, 0, 3]), label_smoothing=0.1, reduction="sum"),
        _gen(_n(3, 5)),
    ),
    Case(
        "cross_entropy_probs_axis0",
        lambda p: F.nn.cross_entropy(F.softmax(p, 0), xm.tensor([2, 0]), axis=0, with_logits=False),
        lambda p: TF.nll_loss(torch.log(torch.softmax(p, 0)).T, torch.tensor([2, 0])),
        _gen(_n(4, 2)),
    ),
    Case("square_loss", lambda p, y: F.nn.square_loss(p, y), TF.mse_loss, _gen(_n(3, 4), _n(3, 4))),
    Case(
        "l1_loss",
        lambda p, y: F.nn.l1_loss(p, y, reduction="none"),
        lambda p, y: TF.l1_loss(p, y, reduction="none"),
        _gen(_kinked(3, 4), lambda r: np.zeros((3, 4), np.float32)),
    ),
    Case(
        "binary_cross_entropy",
        lambda p, y: F.nn.binary_cross_entropy(p, y),
        TF.binary_cross_entropy_with_logits,
        _gen(_n(3, 4, scale=3), _pos(3, 4, lo=0, hi=1)),
    ),
    Case(
        "binary_cross_entropy_probs",
        lambda p, y: F.nn.binary_cross_entropy(p, y, with_logits=False),
        TF.binary_cross_entropy,
        _gen(_pos(3, 4, lo=0.1, hi=0.9), _pos(3, 4, lo=0, hi=1)),
    ),
]


def _weights(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(99).uniform(-1, 1, size=shape).astype(np.float32)


def xmge_grads(case: Case, arrays: Sequence[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray | None]]:
    tensors = [xm.Parameter(a) for a in arrays]
    gm = GradManager().attach(tensors)
    with gm:
        out = case.xfn(*tensors)
        w = xm.tensor(_weights(out.shape))
        gm.backward(F.sum(out * w) if out.ndim else out * w)
    return out.numpy(), [None if t.grad is None else t.grad.numpy() for t in tensors]


def torch_grads(case: Case, arrays: Sequence[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray | None]]:
    tensors = [torch.tensor(a.astype(np.float64), requires_grad=True) for a in arrays]
    out = case.tfn(*tensors)
    (out * torch.tensor(_weights(tuple(out.shape)).astype(np.float64))).sum().backward()
    return out.detach().numpy(), [None if t.grad is None else t.grad.numpy() for t in tensors]


def objective(case: Case, arrays: Sequence[np.ndarray]) -> float:
    out = case.xfn(*[xm.tensor(a) for a in arrays]).numpy()
    return float(np.sum(out.astype(np.float64) * _weights(out.shape)))


def check_against_torch(case: Case, arrays: Sequence[np.ndarray]) -> None:
    out, grads = xmge_grads(case, arrays)
    t_out, t_grads = torch_grads(case, arrays)
    np.testing.assert_allclose(out, t_out, rtol=1e-4, atol=1e-5, err_msg=f"{case.name}: forward")
    for i, (g, tg) in enumerate(zip(grads, t_grads, strict=True)):
        tg = np.zeros_like(arrays[i], np.float64) if tg is None else tg
        g = np.zeros_like(arrays[i]) if g is None else g
        scale = max(1.0, float(np.abs(tg).max()))
        np.testing.assert_allclose(
            g, tg, rtol=case.rtol, atol=case.rtol * scale, err_msg=f"{case.name}: input {i}"
        )


def check_against_finite_differences(case: Case, arrays: Sequence[np.ndarray], h: float = 1e-3) -> None:
    _, grads = xmge_grads(case, arrays)
    rng = np.random.default_rng(7)
    for i, g in enumerate(grads):
        if g is None:
            continue
        for _ in range(2):
            v = rng.uniform(-1, 1, size=arrays[i].shape).astype(np.float32)
            plus = [a + h * v if j == i else a for j, a in enumerate(arrays)]
            minus = [a - h * v if j == i else a for j, a in enumerate(arrays)]
            numeric = (objective(case, plus) - objective(case, minus)) / (2 * h)
            analytic = float(np.sum(g.astype(np.float64) * v))
            # float32 rounding of f, amplified by 1/h, bounds what FD can resolve
            noise = 1e-6 * (abs(objective(case, arrays)) + np.abs(g).sum()) / h
            assert abs(numeric - analytic) <= case.fd_rtol * abs(analytic) + noise + 1e-3, (
                f"{case.name}: input {i}: finite difference {numeric:.6g} vs gradient {analytic:.6g}"
            )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_gradient_matches_torch(case: Case) -> None:
    check_against_torch(case, case.inputs(np.random.default_rng(0)))


@pytest.mark.parametrize("case", [c for c in CASES if c.fd], ids=[c.name for c in CASES if c.fd])
def test_gradient_matches_finite_differences(case: Case) -> None:
    check_against_finite_differences(case, case.inputs(np.random.default_rng(0)))


def test_checks_catch_a_wrong_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """The two checkers above are able to fail: a MUL rule off by a factor of 1.5 is caught by both."""
    case = next(c for c in CASES if c.name == "mul")
    arrays = case.inputs(np.random.default_rng(0))
    right = autodiff.ELEMWISE_BACKWARD[E.MUL]
    monkeypatch.setitem(autodiff.ELEMWISE_BACKWARD, E.MUL, lambda x, y, g: [1.5 * d for d in right(x, y, g)])
    with pytest.raises(AssertionError):
        check_against_torch(case, arrays)
    with pytest.raises(AssertionError):
        check_against_finite_differences(case, arrays)


def test_every_op_with_a_kernel_has_a_gradient_rule_or_declares_none() -> None:
    from semantics.kernels import KERNELS

    undeclared = [op for op in KERNELS if op not in autodiff.BACKWARD and op is not T.ConstOp]
    missing = sorted(op.name for op in undeclared if op.NO_GRADIENT is None)
    assert missing == []
    contradictions = sorted(op.name for op in autodiff.BACKWARD if op.NO_GRADIENT is not None)
    assert contradictions == []  # a rule for an op that says it has no gradient


def test_differentiating_through_an_op_without_gradient_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """An op declaring NO_GRADIENT with a float result: backward through it is an error naming the
    op and the reason; its index-valued siblings (argmax) simply carry no gradient."""
    monkeypatch.delitem(autodiff.BACKWARD, T.SoftmaxOp)
    monkeypatch.setattr(T.SoftmaxOp, "NO_GRADIENT", "declared inference-only by this test")
    x = xm.Parameter(np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32))
    gm = GradManager().attach([x])
    with gm:
        y = F.sum(F.softmax(x, axis=1) * 2.0)
        with pytest.raises(GradError, match=r"mgb\.softmax is not differentiable: declared inference-only"):
            gm.backward(y)
    with gm:
        y = F.sum(x * F.argmax(x, axis=1, keepdims=True).astype("float32"))
        gm.backward(y)
    np.testing.assert_array_equal(x.grad.numpy(), np.broadcast_to(np.argmax(x.numpy(), 1)[:, None], (2, 3)))


def test_conv_bias_gradients_match_torch() -> None:
    rng = np.random.default_rng(3)
    x, w = (
        rng.standard_normal((2, 3, 5, 5)).astype(np.float32),
        rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
    )
    b, z = (
        rng.standard_normal((1, 4, 1, 1)).astype(np.float32),
        rng.standard_normal((2, 4, 3, 3)).astype(np.float32),
    )
    for mode, tnl in [
        ("RELU", torch.relu),
        ("SIGMOID", torch.sigmoid),
        ("H_SWISH", TF.hardswish),
        ("IDENTITY", lambda t: t),
    ]:

        def xfn(*ts: xm.Tensor, mode: str = mode) -> xm.Tensor:
            return apply(T.ConvBiasOp, list(ts), label="conv_bias", nonline_mode=enums.NonlineMode[mode])[0]

        case = Case(
            f"conv_bias_{mode}", xfn, lambda a, w_, b_, z_, f=tnl: f(TF.conv2d(a, w_) + b_ + z_), lambda r: []
        )
        check_against_torch(case, [x, w, b, z])


def test_dropout_gradient_is_the_kept_mask() -> None:
    x = xm.Parameter(np.random.default_rng(0).uniform(1, 2, size=(50, 20)).astype(np.float32))
    gm = GradManager().attach(x)
    with gm:
        out = F.nn.dropout(x, 0.25)
        gm.backward(F.sum(out))
    scale = out.numpy() / x.numpy()  # 0 where dropped, 1/(1-p) where kept
    kept = scale > 0
    assert 0.6 < kept.mean() < 0.9
    np.testing.assert_allclose(scale[kept], 1 / 0.75, rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), scale, rtol=1e-6)


def test_batch_norm_training_running_stats_and_gradients_match_torch() -> None:
    rng = np.random.default_rng(5)
    bn = xm.module.BatchNorm2d(3)
    tbn = torch.nn.BatchNorm2d(3, momentum=0.1).double()  # MegEngine's momentum 0.9 == torch's 0.1
    x = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    xt = torch.tensor(x.astype(np.float64), requires_grad=True)
    xx = xm.Parameter(x)
    gm = GradManager().attach([xx, *bn.parameters()])
    with gm:
        out = bn(xx)
        gm.backward(F.sum(out * xm.tensor(_weights(out.shape))))
    (tbn(xt) * torch.tensor(_weights(out.shape).astype(np.float64))).sum().backward()
    np.testing.assert_allclose(xx.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        bn.weight.grad.numpy().reshape(-1), tbn.weight.grad.numpy(), rtol=1e-4, atol=1e-5
    )
    np.testing.assert_allclose(bn.bias.grad.numpy().reshape(-1), tbn.bias.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        bn.running_mean.numpy().reshape(-1), tbn.running_mean.numpy(), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        bn.running_var.numpy().reshape(-1), tbn.running_var.numpy(), rtol=1e-5, atol=1e-6
    )


# ----------------------------------------------------------------------------------------------
# GradManager behaviour


def test_gradients_accumulate_until_cleared_and_callbacks_run() -> None:
    w = xm.Parameter(np.array([1.0, 2.0], np.float32))
    seen: list[np.ndarray] = []

    def callback(param: xm.Tensor, grad: xm.Tensor) -> xm.Tensor:
        seen.append(grad.numpy())
        return grad * 10.0

    gm = GradManager().attach([w], callbacks=callback)
    for _ in range(2):
        with gm:
            gm.backward(F.sum(w * w))
    np.testing.assert_array_equal(seen[0], [2.0, 4.0])
    np.testing.assert_array_equal(w.grad.numpy(), [40.0, 80.0])  # 2 x (10 x 2w)


def test_unused_and_unattached_tensors_get_no_gradient() -> None:
    a, b, c = (xm.Parameter(np.ones(3, np.float32)) for _ in range(3))
    gm = GradManager().attach([a, b])
    with gm:
        gm.backward(F.sum(a * c))
    assert a.grad is not None and b.grad is None and c.grad is None


def test_only_ops_depending_on_attached_tensors_are_recorded() -> None:
    a = xm.Parameter(np.ones((2, 2), np.float32))
    const = xm.tensor(np.ones((2, 2), np.float32))
    gm = GradManager().attach(a)
    with gm:
        _ = F.exp(const) + 1.0  # independent of a: not on the tape
        y = F.sum(a * const)
        assert gm._tape is not None
        recorded = [e.params.get("mode", e.op_cls.name) for e in gm._tape.entries]
        gm.backward(y)
    # a * const, then F.sum's flatten, reduce and reshape to a scalar; no exp, no add
    assert recorded == [E.MUL, "mgb.reshape", enums.ReduceMode.SUM, "mgb.reshape"]


def test_backward_without_recording_is_an_error() -> None:
    a = xm.Parameter(np.ones(2, np.float32))
    gm = GradManager().attach(a)
    with gm:
        y = F.sum(a)
    with pytest.raises(GradError, match="no computation history"):
        gm.backward(y)
    with gm:
        y = F.sum(a)
        gm.backward(y)
        with pytest.raises(GradError, match="no computation history"):
            gm.backward(y)  # backward ends the recording, as in MegEngine


def test_an_op_without_a_rule_is_named_with_the_user_line() -> None:
    a = xm.Parameter(np.ones(2, np.float32))
    gm = GradManager().attach(a)
    with gm:
        y = apply(T.ElemwiseOp, [a, a], label="t", mode=E.SIGMOID_GRAD)[0]
        with pytest.raises(GradError, match=r"sigmoid_grad: no gradient rule"):
            gm.backward(F.sum(y))


def test_weights_updated_in_place_between_forward_and_backward_do_not_change_the_gradient() -> None:
    w = xm.Parameter(np.array([3.0], np.float32))
    x = xm.Parameter(np.array([2.0], np.float32))
    gm = GradManager().attach([x])
    with gm:
        y = F.sum(w * x)
        w._reset(np.array([100.0], np.float32))  # the tape kept the value the op saw
        gm.backward(y)
    np.testing.assert_array_equal(x.grad.numpy(), [3.0])


def test_convnet_gradients_match_torch() -> None:
    from compiler.hub.convnet import ConvNet

    net = ConvNet()
    x = np.random.default_rng(0).standard_normal((4, 1, 28, 28)).astype(np.float32)
    y = np.array([3, 1, 4, 1])
    gm = GradManager().attach(net.parameters())
    with gm:
        loss = F.nn.cross_entropy(net(xm.tensor(x)), xm.tensor(y))
        gm.backward(loss)
    p = {k: torch.tensor(v.astype(np.float64), requires_grad=True) for k, v in net.state_dict().items()}
    h = TF.max_pool2d(TF.conv2d(torch.tensor(x, dtype=torch.float64), p["conv1.weight"]) + p["conv1.bias"], 2)
    h = TF.max_pool2d(TF.conv2d(h, p["conv2.weight"]) + p["conv2.bias"], 2).flatten(1)
    h = TF.relu(TF.linear(h, p["fc1.weight"], p["fc1.bias"]))
    t_loss = TF.cross_entropy(TF.linear(h, p["fc2.weight"], p["fc2.bias"]), torch.tensor(y))
    t_loss.backward()
    assert loss.item() == pytest.approx(t_loss.item(), rel=1e-5)
    for name, param in net.named_parameters():
        tg = p[name].grad.numpy()
        np.testing.assert_allclose(
            param.grad.numpy(), tg, rtol=1e-4, atol=1e-5 * max(1, np.abs(tg).max()), err_msg=name
        )


def test_relayout_gradient_is_the_inverse_relayout() -> None:
    from dialects import layout as L

    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, 3, 3)).astype(np.float32)
    lay = L.Layout.NCHW44
    spec = L.SPECS[lay]
    y = L.relayout_array(x, None, lay, x.shape)
    w = rng.standard_normal(y.shape).astype(np.float32)
    (gx,) = autodiff.BACKWARD[L.RelayoutOp]([x], [y], [w], {"src": None, "dst": lay, "channels": None})
    # d/dx sum(relayout(x) * w): each input element meets the weight it was moved onto; padded
    # channels (6 -> 8) carry weights but no input, so they contribute nothing.
    expected = spec.unpack(w, x.shape)
    np.testing.assert_array_equal(gx, expected)
    assert gx.shape == x.shape
