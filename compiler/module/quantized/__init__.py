"""MegEngine's ``module.quantized``: int8 inference modules, with MegEngine's submodules
(``module.quantized.conv``, ``.linear``, ...) re-exporting the classes :mod:`.layers` defines."""

# MegEngine's submodules, bound here as MegEngine's package binds them
import compiler.module.quantized.concat as concat  # noqa: F401
import compiler.module.quantized.conv as conv  # noqa: F401
import compiler.module.quantized.conv_bn as conv_bn  # noqa: F401
import compiler.module.quantized.elemwise as elemwise  # noqa: F401
import compiler.module.quantized.linear as linear  # noqa: F401
import compiler.module.quantized.module as module  # noqa: F401
import compiler.module.quantized.quant_dequant as quant_dequant  # noqa: F401
from compiler.module.quantized import layers as _layers
from compiler.module.quantized.layers import *  # noqa: F403
from compiler.module.quantized.module import QuantizedModule as QuantizedModule

__all__ = sorted([*_layers.__all__, "QuantizedModule"])
