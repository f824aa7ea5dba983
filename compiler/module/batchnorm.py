"""MegEngine's ``module.batchnorm`` (``BatchNorm1d``/``BatchNorm2d`` are defined in
:mod:`compiler.module.layers`) and ``SyncBatchNorm``."""

from __future__ import annotations

from typing import Any

from compiler.core import op_error
from compiler.distributed.group import WORLD, Group
from compiler.module.layers import BatchNorm1d, BatchNorm2d, _BatchNorm
from compiler.tensor import Tensor

__all__ = ["BatchNorm1d", "BatchNorm2d", "SyncBatchNorm"]


class SyncBatchNorm(_BatchNorm):
    """Batch normalization whose batch statistics are taken over every process of ``group``.

    xmge's distributed world is one process (``compiler.distributed``), so the statistics are this
    process's batch statistics and the module computes what ``BatchNorm2d`` computes; 2-D (N, C) and
    3-D (N, C, L) inputs are normalized per channel like 4-D ones, as MegEngine's does."""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.9,
        affine: bool = True,
        track_running_stats: bool = True,
        freeze: bool = False,
        group: Group | None = WORLD,
        **kwargs: Any,
    ) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, freeze, **kwargs)
        self.group = group

    def _check_input_ndim(self, inp: Tensor) -> None:
        if inp.ndim not in (2, 3, 4):
            raise ValueError(f"expected 2D, 3D or 4D input (got {inp.ndim}D input)")

    def forward(self, inp: Tensor) -> Tensor:
        self._check_input_ndim(inp)
        shape = inp.shape
        if inp.shape[1] != self.num_features:
            raise op_error(
                "SyncBatchNorm", f"input has {inp.shape[1]} channels, the module {self.num_features}"
            )
        if inp.ndim != 4:
            inp = inp.reshape(*shape, *([1] * (4 - inp.ndim)))
        out = super().forward(inp)
        return out.reshape(shape) if len(shape) != 4 else out
