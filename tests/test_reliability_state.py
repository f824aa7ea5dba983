"""Files restore data, never behaviour: no pickle or .tm state may set a method, property,
descriptor or dunder on an instance (issue 28), and the shared loader budget (dialects.limits)."""

from __future__ import annotations

import io
import pickle
from typing import Any

import numpy as np
import pytest

import compiler as xm
import compiler.module as M
from compiler import traced_module as tm
from compiler.serialization import UnsafePickleError
from dialects import limits

BEHAVIOUR = ["forward", "__call__", "__class__", "__dict__", "__getattr__", "named_parameters",
             "state_dict", "__setstate__", "__init__"]


@pytest.mark.parametrize("key", BEHAVIOUR)
def test_pickle_state_cannot_set_behaviour(key: str) -> None:
    lin = M.Linear(2, 3)
    lin.__dict__[key] = M.Conv2d(1, 4, 3)
    data = pickle.dumps(lin)
    with pytest.raises(UnsafePickleError, match=f"attribute '{key}'") as info:
        xm.load(io.BytesIO(data), allowed_classes=[M.Linear, M.Conv2d])
    assert "\n" not in str(info.value)


class _WithProperty(M.Module):
    @property
    def scale(self) -> int:  # a property a file must not shadow
        return 1

    @staticmethod
    def helper() -> int:
        return 1

    def forward(self, x: Any) -> Any:
        return x


@pytest.mark.parametrize("key", ["scale", "helper", "forward"])
def test_pickle_state_cannot_shadow_property_staticmethod_or_method(key: str) -> None:
    net = _WithProperty()
    net.__dict__[key] = 5
    data = pickle.dumps(net)
    with pytest.raises(UnsafePickleError, match=f"attribute '{key}'"):
        xm.load(io.BytesIO(data), allowed_classes=[_WithProperty])


def test_plain_data_state_still_loads() -> None:
    lin = M.Linear(2, 3)
    back = xm.load(io.BytesIO(pickle.dumps(lin)), allowed_classes=[M.Linear])
    np.testing.assert_array_equal(back.weight.numpy(), lin.weight.numpy())


@pytest.mark.parametrize("key", ["forward", "__call__", "graph"])
def test_tm_cannot_replace_forward(key: str) -> None:
    net = M.Sequential(M.Conv2d(1, 4, 3), M.ReLU())
    x = xm.tensor(np.zeros((1, 1, 6, 6), np.float32))
    traced = tm.trace_module(net, x)
    buf = io.BytesIO()
    xm.save(traced, buf)
    back = xm.serialization.loads(buf.getvalue())
    # the attack: an instance attribute that shadows the replay method with one of its layers
    back.__dict__[key] = next(iter(back.children()))
    tampered = io.BytesIO()
    pickle.dump(back, tampered)
    with pytest.raises(UnsafePickleError, match=f"'{key}'"):
        xm.serialization.loads(tampered.getvalue())


def test_limits_name_the_limit_file_and_place(monkeypatch: pytest.MonkeyPatch) -> None:
    budget = limits.Budget(file="net.tm")
    with pytest.raises(limits.LimitExceeded, match=r"net.tm: expr %3: .*XMGE_MAX_TENSOR_BYTES"):
        budget.add_tensor(30000 * 30000 * 4 * 2, place="expr %3")
    monkeypatch.setenv(limits.MAX_TENSOR_BYTES_ENV, "100")
    with pytest.raises(limits.LimitExceeded, match="limit of 100 "):
        limits.check_tensor_bytes(101, file="a.mge", place="operator #1")
    limits.check_tensor_bytes(100)
    monkeypatch.setenv(limits.MAX_TENSOR_BYTES_ENV, "lots")
    with pytest.raises(limits.LimitError, match="XMGE_MAX_TENSOR_BYTES"):
        limits.max_tensor_bytes()
    monkeypatch.setenv(limits.MAX_TOTAL_BYTES_ENV, "1000")
    monkeypatch.delenv(limits.MAX_TENSOR_BYTES_ENV)
    b = limits.Budget()
    b.add_tensor(600)
    with pytest.raises(limits.LimitExceeded, match="XMGE_MAX_TOTAL_BYTES"):
        b.add_tensor(600)
    with pytest.raises(limits.LimitExceeded, match="XMGE_MAX_LOOP_ITERATIONS"):
        limits.check_loop_iterations(10**12)
