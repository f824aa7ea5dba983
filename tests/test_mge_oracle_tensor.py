"""Tensor behaviour checked against what real MegEngine 1.13 prints (issue 32); the expected strings
are recorded, so the tests need no MegEngine."""

import numpy as np
import pytest

import compiler as mge


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.1, "Tensor(0.1, device=xpux:0)"),
        (np.float32(1 / 3), "Tensor(0.33333334, device=xpux:0)"),
        (np.float16(0.1), "Tensor(0.1, dtype=float16, device=xpux:0)"),
        (5, "Tensor(5, dtype=int32, device=xpux:0)"),
    ],
)
def test_scalar_repr_prints_the_stored_precision(value: object, expected: str) -> None:
    assert repr(mge.tensor(value)) == expected


def test_scalar_result_repr() -> None:
    assert repr(mge.tensor(0.1) * 3) == "Tensor(0.3, device=xpux:0)"
