"""MegEngine's ``functional.utils``: where ``topk_accuracy`` is also exported, and the
``_assert_equal`` check that a traced graph keeps (an AssertEqual operator)."""

from __future__ import annotations

import numpy as np

from compiler.functional.metric import topk_accuracy
from compiler.tensor import Tensor

__all__ = ["topk_accuracy"]


def _assert_equal(expect: Tensor, actual: Tensor, *, maxerr: float = 0.0001, verbose: bool = False) -> Tensor:
    """``expect`` when ``actual`` equals it within ``maxerr`` (the error being the smaller of the
    absolute and the relative error), else an AssertEqualError (a RuntimeError); recorded in a
    trace as MegEngine's AssertEqual operator, so a dumped graph checks it whenever it runs."""
    import dialects.tensor as T
    from compiler.core import apply
    from compiler.functional.elemwise import abs as abs_
    from compiler.functional.elemwise import maximum, minimum

    one = Tensor(np.float32(1.0))
    err = (abs_(expect - actual) / maximum(minimum(abs_(expect), abs_(actual)), one)).max()
    params = {"maxerr": float(maxerr), "verbose": bool(verbose)}
    (result,) = apply(T.AssertEqualOp, [expect, actual, err], label="assert_equal", **params)
    return result
