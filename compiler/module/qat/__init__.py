"""MegEngine's ``module.qat``: quantization-aware-training modules, with MegEngine's submodules
(``module.qat.conv``, ``.linear``, ...) re-exporting the classes :mod:`.layers` defines."""

# MegEngine's submodules, bound here as MegEngine's package binds them
import compiler.module.qat.concat as concat  # noqa: F401
import compiler.module.qat.conv as conv  # noqa: F401
import compiler.module.qat.conv_bn as conv_bn  # noqa: F401
import compiler.module.qat.elemwise as elemwise  # noqa: F401
import compiler.module.qat.linear as linear  # noqa: F401
import compiler.module.qat.module as module  # noqa: F401
import compiler.module.qat.quant_dequant as quant_dequant  # noqa: F401
from compiler.module.qat import layers as _layers
from compiler.module.qat.layers import *  # noqa: F403

__all__ = list(_layers.__all__)
