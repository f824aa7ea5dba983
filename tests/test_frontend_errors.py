"""Bad input gives a clear error that names the op and the user's source line, raised by xmge itself
rather than surfacing from deep inside numpy."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import compiler as xm
import compiler.functional as F
import compiler.module as M
from compiler import jit
from compiler.core import OpError


def T(*shape: int, dtype: Any = np.float32) -> xm.Tensor:
    return xm.tensor(np.ones(shape, dtype))


# (id, exception type, op name the message starts with, call, fragments the message must contain)
# Each call sits on one line so its line number is the one the error must report.
CASES: list[tuple[str, type[Exception], str, Callable[[], Any], tuple[str, ...]]] = [
    ("conv_3d_input", OpError, "conv2d", lambda: F.conv2d(T(3, 5, 5), T(2, 3, 3, 3)), ("4-D", "(3, 5, 5)")),
    (
        "conv_channels",
        OpError,
        "conv2d",
        lambda: F.conv2d(T(1, 4, 5, 5), T(2, 3, 3, 3)),
        ("4 channels", "expects 3"),
    ),
    (
        "conv_weight_3d",
        OpError,
        "conv2d",
        lambda: F.conv2d(T(1, 3, 5, 5), T(3, 3, 3)),
        ("weight must be 4-D",),
    ),
    ("conv_kernel_big", OpError, "conv2d", lambda: F.conv2d(T(1, 3, 2, 2), T(2, 3, 3, 3)), ("larger than",)),
    ("conv_groups", OpError, "conv2d", lambda: F.conv2d(T(1, 4, 5, 5), T(3, 2, 3, 3), groups=2), ("groups",)),
    (
        "conv_group_weight",
        OpError,
        "conv2d",
        lambda: F.conv2d(T(1, 4, 5, 5), T(3, 1, 2, 3, 3), groups=2),
        ("3 groups",),
    ),
    (
        "conv_bias",
        OpError,
        "conv2d",
        lambda: F.conv2d(T(1, 3, 5, 5), T(2, 3, 3, 3), T(3)),
        ("bias", "(1, 2, 1, 1)"),
    ),
    (
        "conv_mode",
        OpError,
        "conv2d",
        lambda: F.conv2d(T(1, 3, 5, 5), T(2, 3, 3, 3), conv_mode="x"),
        ("conv_mode",),
    ),
    (
        "conv_compute",
        OpError,
        "conv2d",
        lambda: F.conv2d(T(1, 3, 5, 5), T(2, 3, 3, 3), compute_mode="x"),
        ("compute",),
    ),
    (
        "conv_stride_str",
        OpError,
        "conv2d",
        lambda: F.conv2d(T(1, 3, 5, 5), T(2, 3, 3, 3), stride="ab"),
        ("stride",),
    ),
    (
        "conv_stride_0",
        OpError,
        "conv2d",
        lambda: F.conv2d(T(1, 3, 5, 5), T(2, 3, 3, 3), stride=0),
        ("stride (0, 0)",),
    ),
    ("linear_in", OpError, "linear", lambda: F.linear(T(2, 5), T(3, 4)), ("must be 4", "(2, 5)")),
    ("linear_weight", OpError, "linear", lambda: F.linear(T(2, 5), T(5)), ("2-D",)),
    ("linear_bias", OpError, "linear", lambda: F.linear(T(2, 5), T(3, 5), T(4)), ("bias has shape (4,)",)),
    ("matmul_inner", OpError, "matmul", lambda: F.matmul(T(3, 4), T(5, 6)), ("4 == 5",)),
    ("matmul_0d", OpError, "matmul", lambda: F.matmul(T(), T(3)), ("at least 1-D",)),
    ("matmul_batch", OpError, "matmul", lambda: F.matmul(T(2, 3, 4), T(3, 4, 5)), ("batch dimensions",)),
    ("matmul_bool", OpError, "matmul", lambda: F.matmul(T(2, 2, dtype=bool), T(2, 2)), ("bool",)),
    ("matmul_op", OpError, "matmul", lambda: T(3, 4) @ T(3, 4), ("4 == 3",)),
    ("bmm_2d", OpError, "batch_matmul", lambda: F.batch_matmul(T(3, 4), T(4, 5)), ("3-D",)),
    ("bmm_batch", OpError, "batch_matmul", lambda: F.batch_matmul(T(2, 3, 4), T(3, 4, 5)), ("batch sizes",)),
    ("add_broadcast", OpError, "add", lambda: T(3, 4) + T(5), ("(3, 4), (5,)",)),
    ("where_broadcast", OpError, "where", lambda: F.where(T(3, dtype=bool), T(4), T(3)), ("broadcast",)),
    ("reshape", OpError, "reshape", lambda: T(3, 4).reshape(5, -1), ("(5, -1)",)),
    ("reshape_two_unknown", OpError, "reshape", lambda: T(3, 4).reshape(-1, -1), ("one -1",)),
    ("transpose", OpError, "transpose", lambda: T(3, 4).transpose(0, 0), ("permutation",)),
    ("squeeze", OpError, "squeeze", lambda: F.squeeze(T(3, 4), 0), ("size 3",)),
    ("expand_dims", OpError, "expand_dims", lambda: F.expand_dims(T(3), 3), ("out of range",)),
    ("flatten", OpError, "flatten", lambda: F.flatten(T(2, 3, 4), 2, 1), ("after",)),
    ("concat", OpError, "concat", lambda: F.concat([T(3, 4), T(3, 5)]), ("differ outside axis 0",)),
    ("concat_axis", OpError, "concat", lambda: F.concat([T(3, 4), T(3, 4)], 2), ("axis 2",)),
    ("stack", OpError, "stack", lambda: F.stack([T(3), T(4)]), ("same shape",)),
    ("broadcast_to", OpError, "broadcast_to", lambda: F.broadcast_to(T(3), (4,)), ("(3,) to (4,)",)),
    ("sum_axis", OpError, "sum", lambda: F.sum(T(3, 4), 2), ("axis 2",)),
    ("max_empty", OpError, "max", lambda: F.max(T(0)), ("empty",)),
    ("softmax_axis", OpError, "softmax", lambda: F.softmax(T(3, 4), 3), ("axis 3",)),
    ("pool_big", OpError, "max_pool2d", lambda: F.max_pool2d(T(1, 1, 2, 2), 3), ("larger than",)),
    ("pool_3d", OpError, "max_pool2d", lambda: F.max_pool2d(T(1, 2, 2), 3), ("4-D",)),
    ("avg_mode", OpError, "avg_pool2d", lambda: F.avg_pool2d(T(1, 1, 4, 4), 2, mode="foo"), ("foo",)),
    (
        "adaptive",
        OpError,
        "adaptive_avg_pool2d",
        lambda: F.adaptive_avg_pool2d(T(1, 1, 2, 2), 3),
        ("between",),
    ),
    ("pad_widths", OpError, "pad", lambda: F.pad(T(2, 2), [(1, 1)] * 3), ("pair per axis",)),
    ("pad_mode", OpError, "pad", lambda: F.pad(T(2, 2), [(1, 1), (1, 1)], mode="circular"), ("circular",)),
    ("pad_negative", OpError, "pad", lambda: F.pad(T(2, 2), [(-1, 1), (1, 1)]), ("negative",)),
    ("where_mask", OpError, "where", lambda: F.where(T(3), T(3), T(3)), ("bool",)),
    ("dropout_prob", OpError, "dropout", lambda: F.dropout(T(3), 1.5), ("[0, 1)",)),
    ("clip_no_bounds", OpError, "clip", lambda: F.clip(T(3)), ("lower and upper",)),
    ("batch_norm_stats", OpError, "batch_norm", lambda: F.batch_norm(T(2, 3, 4, 4)), ("running_mean",)),
    (
        "batch_norm_channels",
        OpError,
        "batch_norm",
        lambda: F.batch_norm(T(2, 3, 4, 4), T(4), T(4)),
        ("3 channels",),
    ),
    ("logical_float", OpError, "logical_and", lambda: F.logical_and(T(2), T(2)), ("bool",)),
    ("index_bounds", OpError, "getitem", lambda: T(3, 4)[5], ("out of bounds",)),
    ("index_negative_bounds", OpError, "getitem", lambda: T(3, 4)[:, -5], ("out of bounds",)),
    ("index_too_many", OpError, "getitem", lambda: T(3, 4)[1, 2, 3], ("too many",)),
    ("index_two_ellipses", OpError, "getitem", lambda: T(3, 4)[..., ...], ("one ellipsis",)),
    ("index_step_zero", OpError, "getitem", lambda: T(3, 4)[::0], ("zero",)),
    ("index_str", OpError, "getitem", lambda: T(3, 4)["a"], ("'a'",)),
    ("index_float", OpError, "getitem", lambda: T(3, 4)[1.0], ("1.0",)),
    (
        "complex_tensor",
        TypeError,
        "Tensor",  # ``tensor`` is the Tensor class, as in MegEngine
        lambda: xm.tensor(np.ones(2, complex)),
        ("complex128", "float32"),
    ),
    ("complex_dtype_arg", TypeError, "Tensor", lambda: xm.Tensor([1, 2], dtype="complex64"), ("complex64",)),
    ("ragged_list", TypeError, "Tensor", lambda: xm.tensor([[1, 2], [3]]), ("cannot convert list",)),
    ("string_tensor", TypeError, "Tensor", lambda: xm.tensor("abc"), ("<U3",)),
    ("astype_complex", OpError, "astype", lambda: T(2).astype(complex), ("complex128",)),
    ("str_operand", TypeError, "add", lambda: T(2) + "a", ("str",)),
    ("none_operand", TypeError, "mul", lambda: T(2) * None, ("None",)),
    ("none_conv_weight", TypeError, "conv2d", lambda: F.conv2d(T(1, 3, 5, 5), None), ("None",)),
    ("conv_module_groups", OpError, "Conv2d", lambda: M.Conv2d(3, 4, 3, groups=2), ("divisible",)),
    ("conv_module_input", OpError, "conv2d", lambda: M.Conv2d(3, 4, 3)(T(1, 4, 5, 5)), ("4 channels",)),
    ("linear_module_input", OpError, "linear", lambda: M.Linear(3, 4)(T(2, 5)), ("must be 3",)),
    ("bn_module_input", OpError, "BatchNorm2d", lambda: M.BatchNorm2d(3)(T(2, 3)), ("4-D",)),
    ("sequential_item", TypeError, "Sequential", lambda: M.Sequential(M.ReLU(), 3), ("int",)),
    # the grouped-weight, mode and index checks each function shares with its siblings
    (
        "deconv_groups",
        OpError,
        "conv_transpose2d",
        lambda: F.conv_transpose2d(T(1, 3, 5, 5), T(3, 2, 3, 3), groups=2),
        ("3 input channels",),
    ),
    (
        "deconv_compute",
        OpError,
        "conv_transpose2d",
        lambda: F.conv_transpose2d(T(1, 2, 5, 5), T(2, 2, 3, 3), compute_mode="x"),
        ("unknown compute_mode 'x'",),
    ),
    (
        "conv_bias_act_groups",
        OpError,
        "conv_bias_activation",
        lambda: F.quantized.conv_bias_activation(T(1, 4, 5, 5), T(4, 2, 3, 3), groups=0),
        ("groups must be positive",),
    ),
    (
        "conv_bias_act_group_weight",
        OpError,
        "conv_bias_activation",
        lambda: F.quantized.conv_bias_activation(T(1, 4, 5, 5), T(3, 1, 2, 3, 3), groups=2),
        ("3 groups",),
    ),
    (
        "conv_bias_act_mode",
        OpError,
        "conv_bias_activation",
        lambda: F.quantized.conv_bias_activation(T(1, 4, 5, 5), T(2, 4, 3, 3), nonlinear_mode="x"),
        ("unknown nonlinear_mode 'x'",),
    ),
    (
        "cross_entropy_label_shape",
        OpError,
        "cross_entropy",
        lambda: F.nn.cross_entropy(T(2, 5), T(3, dtype=np.int32)),
        ("label has shape (3,), expected (2,) for pred (2, 5)",),
    ),
    (
        # MegEngine accepts float class indices but refuses soft labels (pred's ndim) with this message
        "cross_entropy_soft_label",
        OpError,
        "cross_entropy",
        lambda: F.nn.cross_entropy(T(2, 5), T(2, 5)),
        ("target ndim must be one less than input ndim; input_ndim=2 target_ndim=2",),
    ),
]


@pytest.mark.parametrize("exc_type,op,call,fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_error_names_op_and_user_line(
    exc_type: type[Exception], op: str, call: Callable[[], Any], fragments: tuple[str, ...]
) -> None:
    with pytest.raises(exc_type) as info:
        call()
    msg = str(info.value)
    assert msg.startswith(f"{op}:"), msg
    line = call.__code__.co_firstlineno
    assert f"{os.path.basename(__file__)}:{line})" in msg, msg
    for fragment in fragments:
        assert fragment in msg, (fragment, msg)
    # xmge raised it on purpose: the innermost frame is xmge's own code, not numpy's
    innermost = str(info.traceback[-1].path)
    assert "numpy" not in innermost and os.sep + "site-packages" + os.sep not in innermost, innermost


def test_float64_and_int64_inputs_convert() -> None:
    x64 = np.ones((1, 3, 5, 5), np.float64)
    w64 = np.ones((2, 3, 3, 3), np.float64)
    out = F.conv2d(xm.tensor(x64), xm.tensor(w64))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out.numpy(), np.full((1, 2, 3, 3), 27, np.float32))
    assert (xm.tensor(np.int64(5)) + 1).dtype == np.int32
    assert F.linear(xm.tensor(np.ones((2, 3))), xm.tensor(np.ones((4, 3)))).dtype == np.float32
    assert F.concat([T(2), T(2, dtype=np.int32)]).dtype == np.float32  # concat promotes
    assert F.softmax(T(2, 3, dtype=np.int32)).dtype == np.float32


def test_state_dict_key_and_shape_errors() -> None:
    lin = M.Linear(3, 2)
    bad = {"weight": np.zeros((3, 2), np.float32), "bias": np.zeros(2), "extra": np.zeros(1)}
    line = sys._getframe().f_lineno + 2
    with pytest.raises(ValueError) as info:
        lin.load_state_dict(bad)
    msg = str(info.value)
    assert "weight: expected (2, 3), got (3, 2)" in msg and "unexpected keys: extra" in msg
    assert f"test_frontend_errors.py:{line})" in msg, msg
    with pytest.raises(KeyError, match="missing keys: bias"):
        lin.load_state_dict({"weight": np.zeros((2, 3), np.float32)})
    with pytest.raises(ValueError, match="bad values: bias"):
        lin.load_state_dict({"weight": np.zeros((2, 3)), "bias": np.array(["a", "b"])})


def test_untraceable_operations_fail_clearly() -> None:
    @jit.trace(symbolic=True, capture_as_const=True)
    def train_dropout(x: xm.Tensor) -> xm.Tensor:
        return F.dropout(x, 0.5, training=True)

    with pytest.raises(OpError, match=r"dropout: .*eval\(\)"):
        train_dropout(T(4))

    @jit.trace(symbolic=True, capture_as_const=True)
    def assign(x: xm.Tensor) -> xm.Tensor:
        y = x * 2
        y[0] = 1.0
        return y

    assert np.array_equal(assign(T(4)).numpy(), [1.0, 2.0, 2.0, 2.0])  # traced as SetSubtensor

    @jit.trace(symbolic=True, capture_as_const=True)
    def assign_mask(x: xm.Tensor) -> xm.Tensor:
        y = x * 2
        y[y > 2.0] = 0.0
        return y

    # a boolean mask is read while tracing (numpy's rules, as MegEngine): the same data replays,
    # other data is a TraceError, never a silently stale mask
    x = np.array([1.0, 2.0, 3.0, 0.5], np.float32)
    assert np.array_equal(assign_mask(xm.tensor(x)).numpy(), [2.0, 0.0, 0.0, 1.0])
    with pytest.raises(jit.TraceError):
        assign_mask(xm.tensor(np.array([3.0, 0.0, 3.0, 3.0], np.float32)))
