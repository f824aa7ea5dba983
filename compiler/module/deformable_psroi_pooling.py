"""MegEngine's DeformablePSROIPooling module."""

from __future__ import annotations

from typing import Any

from compiler.functional.nn import deformable_psroi_pooling
from compiler.module.module import Module
from compiler.tensor import Tensor


class DeformablePSROIPooling(Module):
    """``forward(inp, rois, trans)`` is ``F.deformable_psroi_pooling`` with the module's settings."""

    def __init__(
        self,
        no_trans: bool,
        part_size: int,
        pooled_h: int,
        pooled_w: int,
        sample_per_part: int,
        spatial_scale: float,
        trans_std: float = 0.1,
        **kwargs: Any,
    ) -> None:
        super().__init__(kwargs.get("name"))
        self.no_trans, self.part_size = no_trans, part_size
        self.pooled_h, self.pooled_w = pooled_h, pooled_w
        self.sample_per_part, self.spatial_scale, self.trans_std = sample_per_part, spatial_scale, trans_std

    def forward(self, inp: Tensor, rois: Tensor, trans: Tensor) -> Tensor:
        return deformable_psroi_pooling(inp, rois, trans, self.no_trans, self.part_size, self.pooled_h,
                                        self.pooled_w, self.sample_per_part, self.spatial_scale,
                                        self.trans_std)  # fmt: skip
