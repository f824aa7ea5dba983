"""MegEngine 1.13's ``functional`` API: every op as ``F.<name>``; the neural-network ones also as
``F.nn.<name>`` and the losses as ``F.loss.<name>``, as in MegEngine."""

from compiler.functional import (  # noqa: F401 - F.loss.<name>
    elemwise,
    loss,
    math,
    metric,
    nn,
    quantized,
    tensor,
    utils,
    vision,
)
from compiler.functional.einsum import einsum as einsum  # the function, as MegEngine's F.einsum
from compiler.functional.elemwise import *  # noqa: F403
from compiler.functional.math import *  # noqa: F403
from compiler.functional.nn import *  # noqa: F403
from compiler.functional.tensor import *  # noqa: F403
from compiler.functional.utils import *  # noqa: F403

__all__ = list(
    dict.fromkeys(
        [
            *elemwise.__all__,
            *math.__all__,
            *nn.__all__,
            *tensor.__all__,
            *utils.__all__,
            "einsum",
            "loss",
            "metric",
            "utils",
            "nn",
            "quantized",
            "vision",
        ]
    )
)
