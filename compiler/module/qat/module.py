"""``QATModule``: the base of quantization-aware-training modules. Each owns (per its QConfig) an
observer and a fake quantizer for its weight and for its output activation."""

from __future__ import annotations

from typing import Any

import numpy as np

from compiler.module.module import Module
from compiler.quantization.utils import (
    QParams,
    QuantMode,
    _meta_of,
    fake_quant_tensor,
    get_quantized_dtype,
)
from compiler.tensor import Tensor


def _scalar(t: Tensor | None) -> float | None:
    return None if t is None else float(np.asarray(t.numpy()).reshape(-1)[0])


class QATModule(Module):
    with_weight = True
    with_act = True
    weight_observer: Any = None
    act_observer: Any = None
    weight_fake_quant: Any = None
    act_fake_quant: Any = None

    def set_qconfig(self, qconfig: Any) -> None:
        """Build this module's observers and fake quantizers from ``qconfig``'s factories."""

        def build(factory: Any) -> Any:
            return None if factory is None else factory()

        # activation parts first: MegEngine's order, which printed nets and state dicts follow
        if self.with_act:
            self.act_observer = build(qconfig.act_observer)
            self.act_fake_quant = build(qconfig.act_fake_quant)
        if self.with_weight:
            self.weight_observer = build(qconfig.weight_observer)
            self.weight_fake_quant = build(qconfig.weight_fake_quant)

    def __repr__(self) -> str:
        return "QAT." + super().__repr__()  # as MegEngine prints QAT modules

    def _switch(self, parts: tuple[Any, ...], enable: bool) -> None:
        for part in parts:
            if part is not None:
                part.enable() if enable else part.disable()

    def set_fake_quant(self, enable: bool) -> None:
        self._switch((self.weight_fake_quant, self.act_fake_quant), enable)

    def set_observer(self, enable: bool) -> None:
        self._switch((self.weight_observer, self.act_observer), enable)

    def _apply_fakequant_with_observer(self, target: Tensor, fake_quant: Any, observer: Any) -> Tensor:
        qparams: QParams | None = None
        out = target
        if observer is not None:
            out = observer(target)
            qparams = observer.get_qparams()
        if fake_quant is not None:
            out = fake_quant(out, qparams)
            if hasattr(fake_quant, "get_qparams"):
                qparams = fake_quant.get_qparams()
        if qparams is not None:
            # later layers read the scale of what they consume (bias fake-quantization)
            out.qparams = qparams  # type: ignore[attr-defined]
        return out

    def apply_quant_weight(self, target: Tensor) -> Tensor:
        return self._apply_fakequant_with_observer(target, self.weight_fake_quant, self.weight_observer)

    def apply_quant_activation(self, target: Tensor) -> Tensor:
        return self._apply_fakequant_with_observer(target, self.act_fake_quant, self.act_observer)

    def apply_quant_bias(self, target: Tensor | None, inp: Tensor, w_qat: Tensor) -> Tensor | None:
        """The bias as the int8 kernel will see it: qint32 with scale input_scale * weight_scale
        (left in float when either scale is unknown). Only while both the activation and the
        weight fake quantization are enabled, as in MegEngine: with fake quantization disabled the
        QAT module computes exactly what the float module does."""
        if target is None:
            return None
        act, weight = self.act_fake_quant, self.weight_fake_quant
        if not (act is not None and act.enabled and weight is not None and weight.enabled):
            return target
        in_scale = _scalar(getattr(getattr(inp, "qparams", None), "scale", None))
        w_scale = _scalar(getattr(getattr(w_qat, "qparams", None), "scale", None))
        if in_scale is None or w_scale is None:
            return target
        scale = Tensor(np.float32(np.float32(in_scale) * np.float32(w_scale)))
        return fake_quant_tensor(target, QParams(QuantMode.SYMMERTIC, _meta_of("qint32"), scale))

    def _get_method_result(self, method: str, fake_quant: Any, observer: Any) -> Any:
        if hasattr(fake_quant, method):
            return getattr(fake_quant, method)()
        if hasattr(observer, method):
            return getattr(observer, method)()
        return None

    def get_weight_qparams(self) -> QParams | None:
        return self._get_method_result("get_qparams", self.weight_fake_quant, self.weight_observer)

    def get_activation_qparams(self) -> QParams | None:
        return self._get_method_result("get_qparams", self.act_fake_quant, self.act_observer)

    def get_weight_dtype(self) -> np.dtype | None:
        qparams = self.get_weight_qparams()
        return None if qparams is None else get_quantized_dtype(qparams)

    def get_activation_dtype(self) -> np.dtype | None:
        qparams = self.get_activation_qparams()
        return None if qparams is None else get_quantized_dtype(qparams)

    @classmethod
    def from_float_module(cls, float_module: Module) -> QATModule:
        raise NotImplementedError(f"{cls.__name__} does not define from_float_module()")
