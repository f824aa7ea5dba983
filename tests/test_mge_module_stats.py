"""``compiler.utils.module_stats`` (MegEngine's ``utils.module_stats``): flops, parameter and
activation totals by MegEngine's formulas, on a small net."""

from __future__ import annotations

import numpy as np
import pytest

import compiler as mge
import compiler.functional as F
import compiler.module as M
from compiler.traced_module import trace_module
from compiler.utils.module_stats import hook_modules, module_stats, register_hook_module


class Small(M.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = M.Conv2d(3, 4, 3, padding=1)
        self.bn = M.BatchNorm2d(4)
        self.pool = M.MaxPool2d(2)
        self.fc = M.Linear(4 * 4 * 4, 5)

    def forward(self, x):  # noqa: ANN001, ANN201
        x = self.pool(F.relu(self.bn(self.conv(x))))
        return self.fc(F.flatten(x, 1))


def test_totals_follow_megengine_formulas() -> None:
    total, details = module_stats(Small(), input_shapes=(2, 3, 8, 8), logging_to_stdout=False)
    conv = 2 * 4 * 8 * 8 * (3 * 3 * 3 + 1)
    bn = 2 * 4 * 8 * 8 * 7
    pool = 2 * 4 * 4 * 4 * 2 * 2
    fc = 2 * 5 * 64 + 5
    assert total.flops == conv + bn + pool + fc
    assert total.act_dims == 2 * 4 * 8 * 8 * 2 + 2 * 4 * 4 * 4 + 2 * 5
    # conv w+b, bn w+b, fc w+b (running statistics are buffers, not counted)
    assert total.param_dims == 4 * 3 * 9 + 4 + 4 + 4 + 5 * 64 + 5
    assert total.param_size == total.param_dims * 4
    assert [p["name"] for p in details.params[:-1]] == ["conv-w", "conv-b", "bn-w", "bn-b", "fc-w", "fc-b"]


def test_parameters_read_without_a_call_are_counted() -> None:
    class Direct(M.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = M.Conv2d(3, 2, 1)

        def forward(self, x):  # noqa: ANN001, ANN201
            return self.conv.calc_conv(x, self.conv.weight, self.conv.bias)

    total, details = module_stats(Direct(), inputs=np.ones((1, 3, 2, 2), np.float32), logging_to_stdout=False)
    assert [p["name"] for p in details.params[:-1]] == ["conv-w", "conv-b"] and total.flops == 0
    assert details.params[1]["mean"] == "0" and details.params[1]["std"] == "0"


def test_traced_modules_and_registration() -> None:
    x = mge.tensor(np.ones((1, 3, 8, 8), np.float32))
    tm = trace_module(Small(), x)
    assert module_stats(tm, inputs=x, logging_to_stdout=False)[0].flops > 0

    class Custom(M.Module):
        def forward(self, x):  # noqa: ANN001, ANN201
            return x * 2

    register_hook_module([Custom])
    try:
        total, details = module_stats(Custom(), input_shapes=(3, 4), logging_to_stdout=False)
        assert total.act_dims == 12 and total.flops == 0
    finally:
        hook_modules.remove(Custom)
    with pytest.raises(TypeError, match="Module class"):
        register_hook_module(3)
    with pytest.raises(ValueError, match="input_shapes"):
        module_stats(Small())


def test_conv_reset_parameters_draws_megengine_init() -> None:
    conv = M.Conv2d(16, 32, 3)
    conv.bias = mge.Parameter(np.ones((1, 32, 1, 1), np.float32))
    weight = conv.weight
    conv.reset_parameters()
    assert conv.weight is weight  # in place
    np.testing.assert_array_equal(conv.bias.numpy(), 0)
    assert abs(float(conv.weight.numpy().std()) - (1 / (16 * 9)) ** 0.5) < 0.01
