"""What every pass reads off an SSA value of the tensor dialects: its tensor type and its shape."""

from __future__ import annotations

from xdsl.dialects.builtin import TensorType
from xdsl.ir import SSAValue


def tensor_type(v: SSAValue) -> TensorType:
    t = v.type
    assert isinstance(t, TensorType)
    return t


def shape(v: SSAValue) -> tuple[int, ...]:
    return tuple(tensor_type(v).get_shape())
