"""State restored by the loaders onto instances is data, never behaviour: a pickle or ``.tm`` whose
instance state names a method (``forward``), a property, a descriptor or a dunder is refused with a
one-line error naming the attribute, and the class stays as it was (issue 28)."""

from __future__ import annotations

import io
import pickle
from typing import Any

import numpy as np
import pytest

import compiler as xm
import compiler.functional as F
import compiler.module as M
import compiler.traced_module as tm
from compiler.serialization import UnsafePickleError, behaviour_attribute


class Net(M.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = M.Conv2d(1, 4, 3)
        self.fc = M.Linear(4 * 26 * 26, 10)

    def forward(self, x: Any) -> Any:
        return self.fc(F.flatten(self.conv(x), 1))


def _pickled_with(obj: Any, key: str, value: Any) -> bytes:
    obj.__dict__[key] = value  # what a crafted file's BUILD state holds
    try:
        return pickle.dumps(obj, protocol=4)
    finally:
        del obj.__dict__[key]


@pytest.mark.parametrize("key", ["forward", "__call__", "state_dict", "named_parameters", "train"])
def test_a_module_method_named_in_state_is_refused(key: str) -> None:
    net = Net()
    data = _pickled_with(net, key, net.conv)
    with pytest.raises(UnsafePickleError, match=f"attribute '{key}' of Net") as err:
        xm.load(io.BytesIO(data), allowed_classes=[Net])
    assert "\n" not in str(err.value)


def test_a_property_or_descriptor_named_in_state_is_refused() -> None:
    t = xm.tensor([1.0, 2.0])
    assert behaviour_attribute(type(t), "shape") is not None  # a property of Tensor
    assert behaviour_attribute(M.Linear, "weight") is None  # parameters are instance data
    assert behaviour_attribute(M.Linear, "forward") is not None
    lin = M.Linear(2, 2)
    data = _pickled_with(lin, "parameters", 1)
    with pytest.raises(UnsafePickleError, match="attribute 'parameters' of Linear"):
        xm.load(io.BytesIO(data), allowed_classes=[M.Linear])
    assert xm.load(io.BytesIO(pickle.dumps(lin, protocol=4)), allowed_classes=[M.Linear]).in_features == 2


def test_a_traced_module_whose_state_replaces_forward_is_refused() -> None:
    net = Net()
    net.eval()
    traced = tm.trace_module(net, xm.tensor(np.zeros((1, 1, 28, 28), np.float32)))
    good = xm.load(io.BytesIO(pickle.dumps(traced, protocol=4)))
    assert good(xm.tensor(np.zeros((1, 1, 28, 28), np.float32))).shape == (1, 10)
    data = _pickled_with(traced, "forward", traced.conv)
    with pytest.raises(UnsafePickleError, match="attribute 'forward' of TracedModule"):
        xm.load(io.BytesIO(data))
    assert M.Module.__dict__.get("forward") is not None or hasattr(M.Module, "forward")
