"""The reference semantics of the tensor and layout dialects: numpy kernels and their interpreter."""

from semantics import deformable_kernels as _deformable_kernels  # noqa: F401  (deformable conv)
from semantics import image_kernels as _image_kernels  # noqa: F401  (warp_affine, remap, cvt_color)
from semantics import layout_kernels as _layout_kernels  # noqa: F401  (registers its kernels)
from semantics import linalg_kernels as _linalg_kernels  # noqa: F401  (registers SVD)
from semantics import quant_kernels as _quant_kernels  # noqa: F401  (registers the quantized kernels)
from semantics import vision_kernels as _vision_kernels  # noqa: F401  (registers conv3d and the image ops)
from semantics.interpreter import run_function, run_module
from semantics.kernels import KERNELS, ResultSpec, run_op

__all__ = ["KERNELS", "ResultSpec", "run_function", "run_module", "run_op"]
