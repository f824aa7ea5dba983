"""fake_quant_tensor checked against values recorded from real MegEngine 1.13 (issue 32); the input
is regenerated from a fixed numpy seed, so the tests need no MegEngine."""

import numpy as np
import pytest

import compiler as mge
import compiler.quantization as Q


def _x() -> mge.Tensor:
    return mge.tensor(np.random.RandomState(0).randn(2, 5).astype("float32"))


@pytest.mark.parametrize(
    ("mode", "dtype", "scale", "zero_point", "expected"),
    [
        ("sym", "qint8", 0.05, None, [[1.75, 0.4, 1.0, 2.25, 1.85], [-1.0, 0.95, -0.15, -0.1, 0.4]]),
        ("asym", "quint8", 0.02, 100.0, [[1.76, 0.4, 0.98, 2.24, 1.86], [-0.98, 0.96, -0.16, -0.1, 0.42]]),
        ("sym", "qint4", 0.3, None, [[1.8, 0.3, 0.9, 2.1, 1.8], [-0.9, 0.9, -0.3, 0.0, 0.3]]),
    ],
)
def test_fake_quant_tensor_matches_megengine(
    mode: str, dtype: str, scale: float, zero_point: float | None, expected: list[list[float]]
) -> None:
    qmode = Q.utils.QuantMode.SYMMERTIC if mode == "sym" else Q.utils.QuantMode.ASYMMERTIC
    zp = None if zero_point is None else mge.tensor(zero_point)
    qparams = Q.utils.QParams(
        mode=qmode, dtype_meta=Q.utils._builtin_quant_dtypes[dtype], scale=mge.tensor(scale), zero_point=zp
    )
    out = Q.fake_quant_tensor(_x(), qparams).numpy()
    np.testing.assert_allclose(out, expected, atol=1e-5)
    # MegEngine adds the zero point even when symmetric, so a value rounding to zero is +0.0
    assert not np.signbit(out[np.asarray(expected) == 0.0]).any()
