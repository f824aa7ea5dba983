"""MegEngine's ``random``: RNG objects and the module functions, shapes with tensor parameters,
seeding, and the distributions' moments on enough samples to tell them apart."""

from __future__ import annotations

import numpy as np
import pytest

import compiler as mge
import compiler.random as R


def test_rng_with_a_seed_is_reproducible_and_independent_of_the_global_one() -> None:
    a, b = R.RNG(seed=5), R.RNG(seed=5)
    np.testing.assert_array_equal(a.uniform(size=(3, 2)).numpy(), b.uniform(size=(3, 2)).numpy())
    R.seed(1)
    x = R.normal(size=(4,)).numpy()
    R.seed(1)
    assert np.array_equal(R.normal(size=(4,)).numpy(), x)
    assert R.uniform(size=(2, 3)).dtype == np.float32


def test_tensor_parameters_add_their_shape_after_size() -> None:
    g = R.gamma(mge.tensor(np.full((2, 3), 2.0, np.float32)), size=(4,))
    assert g.shape == (4, 2, 3)
    assert R.beta(2.0, 3.0, size=(5,)).shape == (5,)
    assert R.poisson(mge.tensor([1.0, 4.0]), size=(3,)).shape == (3, 2)


@pytest.mark.parametrize(
    ("draw", "mean", "var"),
    [
        (lambda r: r.gamma(3.0, 2.0, size=(20000,)), 6.0, 12.0),
        (lambda r: r.beta(2.0, 3.0, size=(20000,)), 0.4, 0.04),
        (lambda r: r.poisson(4.0, size=(20000,)), 4.0, 4.0),
        (lambda r: r.exponential(2.0, size=(20000,)), 0.5, 0.25),
    ],
    ids=["gamma", "beta", "poisson", "exponential"],
)
def test_moments(draw: object, mean: float, var: float) -> None:
    x = draw(R.RNG(seed=11)).numpy().astype(np.float64)  # type: ignore[operator]
    assert abs(x.mean() - mean) < 0.05 * max(mean, 1) and abs(x.var() - var) < 0.1 * max(var, 0.1)


def test_multinomial_permutation_shuffle() -> None:
    rng = R.RNG(seed=2)
    p = mge.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]])
    s = rng.multinomial(p, 1)
    assert s.dtype == np.int32 and s.numpy()[0, 0] == 1 and s.numpy()[1, 0] in (0, 2)
    without = rng.multinomial(mge.tensor([1.0, 1.0, 1.0, 1.0]), 4)
    assert sorted(without.numpy().tolist()) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="num_samples exceeds"):
        rng.multinomial(mge.tensor([1.0, 0.0]), 2)
    perm = rng.permutation(6)
    assert perm.dtype == np.int32 and sorted(perm.numpy().tolist()) == list(range(6))
    t = mge.tensor(np.arange(12).reshape(4, 3))
    rng.shuffle(t)
    assert sorted(map(tuple, t.numpy().tolist())) == [tuple(r) for r in np.arange(12).reshape(4, 3).tolist()]
    with pytest.raises(ValueError, match="gamma: shape and scale must be positive"):
        rng.gamma(-1.0)
