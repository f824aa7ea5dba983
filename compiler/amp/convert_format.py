"""``amp.convert_tensor_format`` / ``convert_module_format``: MegEngine's NHWC format tag.

MegEngine keeps a converted tensor's logical shape (NCHW) and stores it channels-last; results are
the same numbers. xmge's eager tensors are plain row-major arrays, so conversion tags the tensor
``format = "nhwc"`` (what MegEngine code reads back) and leaves its values and shape as they are;
the compiler picks layouts itself (``enable_nhwc``-style options at dump/compile time).
"""

from __future__ import annotations

import copy

from compiler.tensor import Tensor


def _is_nchw_format(x: Tensor) -> bool:
    return x.ndim in (4, 5) and getattr(x, "format", "default") != "nhwc"


def convert_tensor_format(x: Tensor, inplace: bool = True) -> Tensor:
    """Tag a 4-D/5-D tensor as NHWC (a new tensor unless ``inplace``); other tensors unchanged."""
    if not _is_nchw_format(x):
        return x
    if not inplace:
        x = Tensor(x)
    x.format = "nhwc"  # type: ignore[attr-defined]
    return x


def convert_module_format(module, inplace: bool = True):  # type: ignore[no-untyped-def]
    """Tag every 4-D/5-D parameter and buffer of ``module`` as NHWC (of a deep copy unless ``inplace``)."""
    if not inplace:
        module = copy.deepcopy(module)
    for _, t in module.named_tensors():
        convert_tensor_format(t, inplace=True)
    return module
