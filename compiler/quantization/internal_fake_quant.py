"""MegEngine's ``quantization.internal_fake_quant``. In MegEngine 1.13 the module defines nothing
of its own: it only gathers the names a fake quantizer is built from, which it holds here too."""

from compiler.autodiff import Function as Function
from compiler.quantization.fake_quant import _FakeQuantize as _FakeQuantize
from compiler.quantization.observer import MinMaxObserver as MinMaxObserver
from compiler.quantization.qconfig import QConfig as QConfig
from compiler.quantization.utils import QParams as QParams

__all__: list[str] = []
