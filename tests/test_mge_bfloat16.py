"""MegEngine's ``bfloat16`` numpy dtype (``core.tensor.dtype.bfloat16``): tensors hold and return
bfloat16 values (rounded to nearest, as MegEngine's values below); xmge's ops refuse them by name."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from compiler import Tensor
from compiler.core.tensor.dtype import bfloat16, is_bfloat16
from dialects.errors import XmgeError


def test_bfloat16_rounds_like_megengine() -> None:
    # the values MegEngine 1.13's own test expects (test_dtype_bfloat16.py)
    got = np.array([0.5, 0.13425, 3.4687, -1.34976, -9.34673, 0.0], dtype=bfloat16).astype(np.float32)
    np.testing.assert_allclose(got, [0.5, 0.133789, 3.46875, -1.351562, -9.375, 0.0], atol=1e-6)
    assert is_bfloat16(np.dtype(bfloat16)) and not is_bfloat16(np.float16)


def test_tensor_holds_bfloat16() -> None:
    data = np.array([-3.4, 1.394683, 2.323497, -7.439948, -5.2397], dtype=bfloat16)
    t = Tensor(data, dtype=bfloat16)
    assert t.numpy().dtype == bfloat16 and t.dtype == bfloat16
    want = [-3.40625, 1.398438, 2.328125, -7.4375, -5.25]
    np.testing.assert_allclose(t.numpy().astype(np.float32), want, atol=1e-6)
    x = np.ascontiguousarray(np.random.default_rng(0).random(64), dtype=bfloat16)
    assert pickle.loads(pickle.dumps(x)).dtype is x.dtype


def test_ops_refuse_bfloat16_by_name() -> None:
    t = Tensor(np.ones(3, dtype=bfloat16), dtype=bfloat16)
    with pytest.raises(XmgeError, match="add: unsupported dtype bfloat16"):
        (t + t).numpy()
