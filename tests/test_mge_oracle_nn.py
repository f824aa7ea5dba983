"""F.nn helpers checked against what real MegEngine 1.13 does (issue 32); values are recorded, so
the tests need no MegEngine."""

import numpy as np
import pytest

import compiler as mge
import compiler.functional as F
from compiler.core import OpError


def test_pad_width_for_leading_axes_only_leaves_the_rest_unpadded() -> None:
    # MegEngine 1.13: pad(x of (1, 2, 3, 4), ((1, 1),)) has shape (3, 2, 3, 4)
    x = np.arange(24, dtype="float32").reshape(1, 2, 3, 4)
    out = F.nn.pad(mge.tensor(x), ((1, 1),), constant_value=-1.0)
    assert out.shape == (3, 2, 3, 4)
    expected = np.pad(x, ((1, 1), (0, 0), (0, 0), (0, 0)), constant_values=-1)
    np.testing.assert_array_equal(out.numpy(), expected)


def test_pad_width_longer_than_ndim_is_refused() -> None:
    with pytest.raises(OpError, match="pad"):
        F.nn.pad(mge.tensor(np.zeros((2, 2), "float32")), ((1, 1), (1, 1), (1, 1)))


@pytest.mark.parametrize(
    ("pad_width", "mode", "value", "expected"),
    [  # the examples of MegEngine 1.13's module.Pad docstring, run on real MegEngine
        (((1, 1),), "constant", 0.0, [[0, 0, 0], [1, 2, 3], [4, 5, 6], [0, 0, 0]]),
        (((1, 1),), "constant", 9.0, [[9, 9, 9], [1, 2, 3], [4, 5, 6], [9, 9, 9]]),
        (((1, 1), (1, 2)), "reflect", 0.0, [[5, 4, 5, 6, 5, 4], [2, 1, 2, 3, 2, 1]] * 2),
        (((1, 1), (1, 2)), "replicate", 0.0, [[1, 1, 2, 3, 3, 3]] * 2 + [[4, 4, 5, 6, 6, 6]] * 2),
    ],
)
def test_pad_module_matches_megengine(pad_width: tuple, mode: str, value: float, expected: list) -> None:
    m = mge.module.Pad(pad_width, mode=mode, constant_val=value)
    out = m(mge.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
    np.testing.assert_array_equal(out.numpy(), np.array(expected, "float32"))
    assert repr(m) == "Pad()" and not list(m.parameters())


def test_pixel_shuffle_module_and_nn_normalize_exist_as_in_megengine() -> None:
    x = np.arange(2 * 8 * 2 * 3, dtype="float32").reshape(2, 8, 2, 3)
    m = mge.module.PixelShuffle(2)
    out = m(mge.tensor(x))
    assert repr(m) == "PixelShuffle()" and out.shape == (2, 2, 4, 6)
    # MegEngine 1.13: out[0, 0, :2] == [[0, 6, 1, 7, 2, 8], [12, 18, 13, 19, 14, 20]]
    np.testing.assert_array_equal(out.numpy()[0, 0, :2], [[0, 6, 1, 7, 2, 8], [12, 18, 13, 19, 14, 20]])
    np.testing.assert_allclose(
        F.nn.normalize(mge.tensor(x[0, 0]), axis=1).numpy(), F.normalize(mge.tensor(x[0, 0]), axis=1).numpy()
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [  # MegEngine 1.13, first 6 values: alpha multiplies the window sum undivided (torch divides by n)
        ((5, 2.0, 1e-4, 0.75), [1.04865, 0.23792, 0.58192, 1.33209, 1.11016, -0.58106]),
        ((3, 1.0, 0.5, 0.5), [0.85072, 0.32063, 0.70446, 1.19402, 0.90008, -0.76269]),
        ((1, 0.5, 1.0, 1.0), [0.4884, 0.60618, 0.67132, 0.40584, 0.46832, -0.67164]),
    ],
)
def test_local_response_norm_matches_megengine(args: tuple, expected: list) -> None:
    x = mge.tensor(np.random.RandomState(0).randn(1, 6, 2, 2).astype("float32"))
    np.testing.assert_allclose(F.nn.local_response_norm(x, *args).numpy().ravel()[:6], expected, atol=1e-4)
    m = mge.module.LocalResponseNorm(*args)
    np.testing.assert_allclose(m(x).numpy().ravel()[:6], expected, atol=1e-4)


def test_local_response_norm_needs_an_odd_window() -> None:
    # MegEngine asserts inside its kernel (n & 1); xmge refuses the call
    with pytest.raises(OpError, match="odd"):
        F.nn.local_response_norm(mge.tensor(np.zeros((1, 4, 2, 2), "float32")), 4)


@pytest.mark.parametrize(
    ("kwargs", "shape", "every7th", "total"),
    [  # recorded from MegEngine 1.13 on arange(120).reshape(2, 2, 5, 6)
        (
            {"kernel_size": 3},
            (2, 2, 3, 4, 3, 3),
            [0, 13, 9, 8, 4, 17, 18, 14, 10, 9, 22, 20, 19, 15, 28, 27, 37, 33, 32, 45],
            25704.0,
        ),
        (
            {"kernel_size": (2, 3), "padding": (1, 0), "stride": (2, 1), "dilation": (1, 2)},
            (2, 2, 3, 2, 2, 3),
            [0, 0, 10, 13, 26, 29, 0, 38, 41, 54, 57, 64, 66, 69, 82, 85, 92, 95, 97, 110],
            7140.0,
        ),
        (
            {"kernel_size": 2, "padding": 1, "stride": 2},
            (2, 2, 3, 4, 2, 2),
            [0, 2, 5, 8, 11, 24, 27, 0, 0, 0, 43, 0, 49, 58, 0, 0, 0, 74, 77, 80],
            7140.0,
        ),
    ],
)
def test_sliding_window_matches_megengine(kwargs: dict, shape: tuple, every7th: list, total: float) -> None:
    x = mge.tensor(np.arange(120, dtype="float32").reshape(2, 2, 5, 6))
    out = F.sliding_window(x, **kwargs)
    assert out.shape == shape
    np.testing.assert_array_equal(out.numpy().ravel()[::7][:20], every7th)
    assert float(out.numpy().sum()) == total


def test_sliding_window_gradient_counts_window_memberships() -> None:
    x = mge.Parameter(np.ones((1, 1, 3, 3), "float32"))
    gm = mge.autodiff.GradManager().attach([x])
    with gm:
        gm.backward(F.sum(F.sliding_window(x, 2)))
    np.testing.assert_array_equal(x.grad.numpy()[0, 0], [[1, 2, 1], [2, 4, 2], [1, 2, 1]])


def test_sliding_window_module() -> None:
    x = mge.tensor(np.arange(120, dtype="float32").reshape(2, 2, 5, 6))
    m = mge.module.SlidingWindow((2, 3), padding=(1, 0), stride=(2, 1), dilation=(1, 2))
    assert m(x).shape == (2, 2, 3, 2, 2, 3) and float(m(x).numpy().sum()) == 7140.0
