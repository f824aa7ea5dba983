"""The numpy reference interpreter of the tensor (and layout) dialects."""

from backends.reference import layout_kernels as _layout_kernels  # noqa: F401  (registers its kernels)
from backends.reference import quant_kernels as _quant_kernels  # noqa: F401  (registers the quantized kernels)
from backends.reference.interpreter import run_function, run_module
from backends.reference.kernels import KERNELS, ResultSpec, run_op

__all__ = ["KERNELS", "ResultSpec", "run_function", "run_module", "run_op"]
