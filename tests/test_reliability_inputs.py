"""The reference interpreter refuses lossy input conversions, naming the input (issue 28)."""

from __future__ import annotations

import numpy as np
import pytest

from semantics.interpreter import InterpreterError, check_exact_conversion


@pytest.mark.parametrize(
    ("value", "want", "match"),
    [
        (np.array([2**32 + 1], np.int64), np.int32, r"4294967297 \(int64\) is outside"),
        (np.array([1.7, 2.0]), np.int32, r"non-integer value 1.7"),
        (np.array([np.nan]), np.int32, r"non-integer value nan"),
        (np.array([-1], np.int32), np.uint8, r"-1 \(int32\) is outside \[0, 255\]"),
        (np.array([2], np.int32), np.bool_, r"values other than 0 and 1"),
    ],
)
def test_lossy_input_conversions_are_refused(value: np.ndarray, want: type, match: str) -> None:
    with pytest.raises(InterpreterError, match=match) as info:
        check_exact_conversion(value, np.dtype(want), "input 0 'idx' of @main")
    assert "input 0 'idx'" in str(info.value)


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (np.array([1, 2**31 - 1], np.int64), np.int32),
        (np.array([3.0, -2.0]), np.int32),
        (np.array([0.1], np.float64), np.float32),  # float rounding is a normal conversion
        (np.array([1, 0], np.int64), np.bool_),
        (np.zeros((0,), np.float64), np.int8),
    ],
)
def test_exact_conversions_pass(value: np.ndarray, want: type) -> None:
    check_exact_conversion(value, np.dtype(want), "input 0")
