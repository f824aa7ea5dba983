"""Transforms applied to samples before they are collated (``Transform.apply`` on one sample,
``apply_batch`` on a batch's list of samples), and the vision transforms on HWC images."""

from compiler.data.transform.meta_transform import CudaTransform, PseudoTransform, Transform
from compiler.data.transform.vision import *  # noqa: F403
from compiler.data.transform.vision import __all__ as _vision_all

__all__ = ["CudaTransform", "PseudoTransform", "Transform", *_vision_all]
