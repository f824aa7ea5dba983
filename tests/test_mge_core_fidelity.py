"""MegEngine 1.13 behaviours that its own unit tests check, each with the values real MegEngine gives
(taken once with the MegEngine oracle; the tests do not need MegEngine)."""

from __future__ import annotations

import numpy as np
import pytest

import compiler as mge
import compiler.module as M
from compiler.module.init import calculate_fan_in_and_fan_out


def test_fan_in_fan_out_drops_first_axis_of_5d_weights() -> None:
    # MegEngine treats the first axis of any 5+-d weight as a groups axis (ungrouped conv3d too)
    assert calculate_fan_in_and_fan_out(M.Conv3d(2, 4, (5, 7, 9), groups=2).weight) == (315, 630)
    assert calculate_fan_in_and_fan_out(M.Conv3d(2, 3, (5, 7, 9)).weight) == (315, 126)
    assert calculate_fan_in_and_fan_out(M.Conv2d(2, 4, (5, 7), groups=2).weight) == (35, 70)
    with pytest.raises(ValueError):
        calculate_fan_in_and_fan_out(M.Linear(3, 8).bias)


def test_import_tensor_submodule_gives_the_class() -> None:
    import compiler.tensor as tensor_attr

    assert tensor_attr is mge.Tensor
    mod = __import__("sys").modules["compiler.tensor"]
    mge.tensor = mod  # what the import system does when an alias package loads the submodule
    assert mge.tensor is mge.Tensor
    assert isinstance(mge.tensor(np.ones(2)), mge.tensor)
