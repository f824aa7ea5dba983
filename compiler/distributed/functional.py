"""Collective communication of ``megengine.distributed.functional`` for a world of one process:
each collective's result is what MegEngine gives when the group holds only this rank (a copy of the
input, or the input split or gathered over one rank), differentiable like any other op."""

from __future__ import annotations

from typing import Any

import compiler.functional as F
from compiler.distributed.group import WORLD, Group
from compiler.tensor import Tensor

__all__ = [
    "all_gather",
    "all_reduce_max",
    "all_reduce_min",
    "all_reduce_sum",
    "all_to_all",
    "broadcast",
    "gather",
    "reduce_scatter_sum",
    "reduce_sum",
    "remote_recv",
    "remote_send",
    "scatter",
]


def _one(inp: Tensor, group: Group | None) -> Tensor:
    g = WORLD if group is None else group
    assert g.size == 1, f"a group of {g.size} ranks in a one-process world"
    return F.reshape(inp, inp.shape)  # a new tensor with the same values (and gradient path)


def _axis(inp: Tensor, axis: int) -> None:
    if not -inp.ndim <= axis < max(inp.ndim, 1):
        raise ValueError(f"axis {axis} is out of range for a tensor of rank {inp.ndim}")


def reduce_sum(inp: Tensor, group: Group | None = WORLD, device: Any = None) -> Tensor:
    return _one(inp, group)


def broadcast(inp: Tensor, group: Group | None = WORLD, device: Any = None) -> Tensor:
    return _one(inp, group)


def all_gather(inp: Tensor, group: Group | None = WORLD, device: Any = None, axis: int = 0) -> Tensor:
    _axis(inp, axis)
    return _one(inp, group)


def reduce_scatter_sum(inp: Tensor, group: Group | None = WORLD, device: Any = None, axis: int = 0) -> Tensor:
    _axis(inp, axis)
    return _one(inp, group)


def all_reduce_sum(inp: Tensor, group: Group | None = WORLD, device: Any = None) -> Tensor:
    return _one(inp, group)


def all_reduce_max(inp: Tensor, group: Group | None = WORLD, device: Any = None) -> Tensor:
    return _one(inp, group)


def all_reduce_min(inp: Tensor, group: Group | None = WORLD, device: Any = None) -> Tensor:
    return _one(inp, group)


def gather(inp: Tensor, group: Group | None = WORLD, device: Any = None, axis: int = 0) -> Tensor:
    _axis(inp, axis)
    return _one(inp, group)


def scatter(inp: Tensor, group: Group | None = WORLD, device: Any = None, axis: int = 0) -> Tensor:
    _axis(inp, axis)
    return _one(inp, group)


def all_to_all(
    inp: Tensor, group: Group | None = WORLD, device: Any = None, split_axis: int = 0, concat_axis: int = 0
) -> Tensor:
    _axis(inp, split_axis)
    _axis(inp, concat_axis)
    return _one(inp, group)


def remote_send(inp: Tensor, dest_rank: int) -> None:
    raise ValueError(f"remote_send to rank {dest_rank}: a one-process world has no other rank")


def remote_recv(src_rank: int, device: Any = None, inp: Any = None) -> Tensor:
    raise ValueError(f"remote_recv from rank {src_rank}: a one-process world has no other rank")
