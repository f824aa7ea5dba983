"""Shapes computed in the graph (MegEngine's symbolic shapes).

With ``set_symbolic_shape(True)`` (the default inside ``jit.trace``, whose ``symbolic_shape`` is
True as in MegEngine) ``x.shape`` in user code is an int32 Tensor made by ``mgb.get_var_shape``;
indexing it and arithmetic on it are ordinary ops, and ``reshape``/``broadcast_to``/``zeros``/
``ones``/``full`` given such a shape take it as an operand (``mgb.reshape_to``,
``mgb.broadcast_to``). xmge still computes every value now and types every result statically, so
a trace holds the shape as traced; what the graph gains is the computation, which ``dump`` writes
as MegEngine operators (GetVarShape, Subtensor, Concat, Reshape/Broadcast with a shape input), so
the dumped file runs on other input shapes. ``compile`` specialises those ops to the traced shape.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from compiler.core import _PACKAGE_ROOTS, _trace_option, active_recorders, apply
from dialects import tensor as T
from dialects.dtypes import tensor_type

if TYPE_CHECKING:
    from compiler.tensor import Tensor


def called_from_user_code(depth: int = 2) -> bool:
    """Whether the frame ``depth`` levels up (the caller of the caller) is outside xmge's packages:
    xmge's own code always works on tuple shapes, only the user's code sees shape tensors."""
    path = sys._getframe(depth).f_code.co_filename
    if not os.path.isabs(path):
        path = os.path.abspath(path)
    return not path.startswith(_PACKAGE_ROOTS)


def use_symbolic_shape() -> bool:
    return _trace_option.use_symbolic_shape()


def shape_of(t: Tensor) -> Tensor:
    """``t``'s shape as an int32 vector computed in the graph (``mgb.get_var_shape``)."""
    (out,) = apply(T.GetVarShapeOp, [t], label="shape")
    return out


_TENSOR_METHODS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tensor.py")


def user_call_in_symbolic_trace() -> bool:
    """Whether a trace is recording with symbolic shapes on and the calling API function (two
    frames up; ``Tensor``'s methods count as the API too) was called by user code: a user's
    ``reshape(..., -1)`` then keeps its -1 in the graph, as MegEngine's does, while xmge's own
    reshapes stay static."""
    from compiler.jit.tracing import Trace, _Checker

    if not use_symbolic_shape() or not any(isinstance(r, Trace | _Checker) for r in active_recorders()):
        return False
    frame = sys._getframe(2)
    if os.path.abspath(frame.f_code.co_filename) == _TENSOR_METHODS and frame.f_back is not None:
        frame = frame.f_back
    path = os.path.abspath(frame.f_code.co_filename)
    return not path.startswith(_PACKAGE_ROOTS)


def _is_tensor(v: Any) -> bool:
    from compiler.tensor import Tensor

    return isinstance(v, Tensor)


def is_graph_shape(shape: Any) -> bool:
    """Whether ``shape`` (a Tensor, or a sequence holding Tensors) must enter the graph as a shape
    operand: it holds computed values and some recorder (a trace, a gradient tape) is watching."""
    if not active_recorders():
        return False
    if _is_tensor(shape):
        return True
    return isinstance(shape, Sequence) and any(_is_tensor(s) for s in shape)


def _int32_piece(v: Any, label: str) -> Tensor:
    """One entry of a shape as an int32 tensor of shape (1,)."""
    from compiler.functional.tensor import astype, reshape
    from compiler.tensor import Tensor

    if not _is_tensor(v):
        return Tensor(np.array([int(v)], np.int32))
    if v.size != 1:
        from compiler.core import op_error

        raise op_error(label, f"a shape entry must hold one value, got a tensor of shape {v._data.shape}")
    if v.dtype != np.int32:
        v = astype(v, "int32")
    return v if v._data.shape == (1,) else reshape(v, (1,))


def shape_tensor(shape: Any, label: str) -> Tensor:
    """``shape`` (an int Tensor, or a sequence of ints and one-value Tensors) as one int32 vector
    in the graph: MegEngine's ``astensor1d`` (entries concatenated along axis 0)."""
    from compiler.functional.tensor import astype, concat, reshape

    if _is_tensor(shape):
        out = shape if shape.dtype == np.int32 else astype(shape, "int32")
        return out if out._data.ndim == 1 else reshape(out, (out.size,))
    pieces = [_int32_piece(v, label) for v in shape]
    return pieces[0] if len(pieces) == 1 else concat(pieces, axis=0)


def reshape_to(inp: Tensor, shape: Any, static: Sequence[int], unspec_axis: int) -> Tensor:
    """``inp`` reshaped to ``static`` (the shape's values now) with the shape in the graph."""
    target = shape_tensor(shape, "reshape")
    (out,) = apply(
        T.ReshapeToOp,
        [inp, target],
        label="reshape",
        result_types=[tensor_type(tuple(static), inp.dtype)],
        unspec_axis=unspec_axis,
    )
    return out


def broadcast_to(inp: Tensor, shape: Any, static: Sequence[int], label: str = "broadcast_to") -> Tensor:
    """``inp`` broadcast to ``static`` (the shape's values now) with the shape in the graph."""
    target = shape_tensor(shape, label)
    (out,) = apply(
        T.BroadcastToOp, [inp, target], label=label, result_types=[tensor_type(tuple(static), inp.dtype)]
    )
    return out
