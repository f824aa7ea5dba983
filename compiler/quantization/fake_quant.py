"""MegEngine's fake quantizers: quantize-then-dequantize in float so training sees int8 rounding."""

from __future__ import annotations

from typing import Any

import numpy as np

import compiler.functional as F
from compiler.quantization.utils import QParams, QuantMode, _DtypeModule, fake_quant_tensor
from compiler.tensor import Parameter, Tensor


class _FakeQuantize(_DtypeModule):
    def forward(self, inp: Tensor, qparams: QParams | None = None) -> Tensor:
        return self.fake_quant_forward(inp, qparams) if self.enabled else inp

    def fake_quant_forward(self, inp: Tensor, qparams: QParams | None) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not define fake_quant_forward()")


class FakeQuantize(_FakeQuantize):
    """Fake-quantizes with the parameters its observer supplies."""

    def fake_quant_forward(self, inp: Tensor, qparams: QParams | None) -> Tensor:
        if qparams is None:
            raise ValueError("FakeQuantize needs quantization parameters (give the module an observer)")
        params = QParams(qparams.mode, self.dtype, qparams.scale, qparams.zero_point)
        return fake_quant_tensor(inp, params)


class TQT(_FakeQuantize):
    """Trained Quantization Thresholds: a learnable log2 scale; fake-quantizes with 2**scale."""

    def __init__(self, dtype: str = "qint8", enable: bool = True, **kwargs: Any) -> None:
        super().__init__(dtype, enable, **kwargs)
        self.scale = Parameter(np.float32(0.0))

    def set_qparams(self, qparams: QParams) -> None:
        if qparams.mode != QuantMode.SYMMERTIC:
            raise ValueError("TQT only supports symmetric quantization")
        if qparams.scale is not None:
            self.scale._reset(np.log2(np.asarray(qparams.scale.numpy(), np.float32)).reshape(()))

    def fake_quant_forward(self, inp: Tensor, qparams: QParams | None = None) -> Tensor:
        return fake_quant_tensor(inp, self.get_qparams(F.pow(2.0, self.scale)))

    def get_qparams(self, scale: Tensor | None = None) -> QParams:
        step = Tensor(np.float32(2.0) ** self.scale.numpy()) if scale is None else scale
        return QParams(QuantMode.SYMMERTIC, self.dtype, step)

    def normal_forward(self, inp: Tensor, qparams: QParams | None = None) -> Tensor:
        return inp


__all__ = ["TQT", "FakeQuantize"]
