"""State restored onto an instance is an allow-list (issue 28): what the class declares (annotations,
``__slots__``, attributes its methods assign) plus parameters, buffers and submodules; a name that
shadows a method, property, static/class method, descriptor, callable class attribute or dunder is
refused with one line naming the attribute, the class and the file. The MegEngine ``.tm`` loader
sizes every tensor, layer and builtin call under the shared budget."""

from __future__ import annotations

import functools
import io
import pickle
from typing import Any

import numpy as np
import pytest

import compiler as xm
import compiler.module as M
from compiler import traced_module as tm
from compiler.serialization import UnsafePickleError, declared_fields
from dialects import limits


class _Descriptor:
    def __get__(self, obj: Any, objtype: Any = None) -> int:
        return 1

    def __set__(self, obj: Any, value: Any) -> None:
        raise AttributeError("read-only")


class _Net(M.Module):
    gain: float  # an annotated config field
    helper_partial = functools.partial(max, 1)  # a callable class attribute
    described = _Descriptor()

    def __init__(self) -> None:
        super().__init__()
        self.fc = M.Linear(2, 2)
        self.scale = 2.0

    @property
    def size(self) -> int:
        return 2

    @staticmethod
    def helper() -> int:
        return 1

    @classmethod
    def build(cls) -> _Net:
        return cls()

    def forward(self, x: Any) -> Any:
        return self.fc(x) * self.scale


def _tampered(obj: Any, key: str, value: Any) -> bytes:
    obj.__dict__[key] = value
    return pickle.dumps(obj)


def _load(data: bytes, name: str = "net.pkl") -> Any:
    f = io.BytesIO(data)
    f.name = name  # type: ignore[attr-defined]
    return xm.load(f, allowed_classes=[_Net, M.Linear, M.Conv2d])


VARIANTS = {
    "forward": "function _Net.forward",
    "size": "property _Net.size",
    "helper": "staticmethod _Net.helper",
    "build": "classmethod _Net.build",
    "described": "a descriptor _Net.described",
    "helper_partial": "callable class attribute _Net.helper_partial",
    "__class__": "dunder",
    "__dict__": "dunder",
    "__reduce__": "dunder",
    "__call__": "dunder",
}


@pytest.mark.parametrize(("key", "why"), VARIANTS.items(), ids=list(VARIANTS))
def test_state_naming_behaviour_is_refused_naming_attribute_class_and_file(key: str, why: str) -> None:
    data = _tampered(_Net(), key, M.Conv2d(1, 4, 3))
    with pytest.raises(UnsafePickleError) as info:
        _load(data)
    msg = str(info.value)
    assert "\n" not in msg
    assert f"attribute {key!r} of _Net" in msg and why in msg and "net.pkl" in msg


def test_undeclared_plain_value_is_refused() -> None:
    data = _tampered(_Net(), "injected_option", 5)
    with pytest.raises(UnsafePickleError, match="'injected_option' of _Net .*not a field _Net declares"):
        _load(data)


def test_declared_fields_parameters_and_submodules_load() -> None:
    net = _Net()
    net.gain = 0.5  # annotated
    net.extra = M.Linear(2, 2)  # a submodule under a name the class never wrote
    back = _load(pickle.dumps(net))
    assert back.gain == 0.5 and back.scale == 2.0 and isinstance(back.extra, M.Linear)
    x = np.ones((1, 2), np.float32)
    np.testing.assert_allclose(back(xm.tensor(x)).numpy(), net(xm.tensor(x)).numpy())
    seq = M.Sequential(M.Linear(2, 3), M.ReLU())  # "0", "1": dynamic names of submodules
    back_seq = xm.load(io.BytesIO(pickle.dumps(seq)), allowed_classes=[M.Sequential, M.Linear, M.ReLU])
    assert isinstance(back_seq, M.Sequential) and isinstance(back_seq[0], M.Linear)


def test_declared_fields_come_from_the_class_code() -> None:
    fields = declared_fields(_Net)
    assert {"gain", "fc", "scale", "training"} <= fields
    assert "forward" not in fields and "__dict__" not in fields


def _golden_tm() -> bytes:
    from tests.conftest import data_path

    with open(data_path("convnet", "convnet.tm"), "rb") as f:
        return f.read()


@pytest.mark.parametrize("name", [b"train", b"__a__", b"apply"])
def test_megengine_tm_submodule_named_like_behaviour_is_refused(name: bytes) -> None:
    data = _golden_tm().replace(b"conv1", name)  # same length: the pickle stays well-formed
    # refused by the state check (a method name), or earlier by the graph's attribute-path check
    with pytest.raises(tm.TracedModuleError, match=f"attribute '{name.decode()}'") as info:
        tm.load_megengine_tm(data)
    assert "\n" not in str(info.value)


def test_megengine_tm_is_under_the_total_and_tensor_budget(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Any) -> None:
    path = tmp_path / "convnet.tm"
    path.write_bytes(_golden_tm())
    tm.load_megengine_tm(str(path))  # fits the default budget
    monkeypatch.setenv(limits.MAX_TOTAL_BYTES_ENV, "20000")
    with pytest.raises(limits.LimitExceeded, match=r"XMGE_MAX_TOTAL_BYTES.*|convnet\.tm") as info:
        tm.load_megengine_tm(str(path))
    assert "convnet.tm" in str(info.value) and "XMGE_MAX_TOTAL_BYTES" in str(info.value)
    monkeypatch.delenv(limits.MAX_TOTAL_BYTES_ENV)
    monkeypatch.setenv(limits.MAX_TENSOR_BYTES_ENV, "1000")
    with pytest.raises(limits.LimitExceeded, match="XMGE_MAX_TENSOR_BYTES") as info:
        tm.load_megengine_tm(str(path))
    assert "layer megengine.module" in str(info.value) or "Tensor" in str(info.value)


def test_megengine_tm_builtin_bombs_are_sized_before_the_call() -> None:
    bytearray_16g = b"\x80\x04cbuiltins\nbytearray\n\x8a\x05\x00\x00\x00\x00\x04\x85R."
    with pytest.raises(limits.LimitExceeded, match="a bytearray of 17179869184 bytes|17179869184"):
        tm.load_megengine_tm(bytearray_16g)
    set_range = b"\x80\x04cbuiltins\nset\ncbuiltins\nrange\nJ\x00\xca\x9a;\x85R\x85R."
    with pytest.raises(limits.LimitExceeded, match="a set"):
        tm.load_megengine_tm(set_range)


def test_megengine_tm_huge_layer_is_sized_before_it_is_built() -> None:
    from compiler.traced_module.megengine_tm import _layer_bytes

    state = {"in_channels": 30000, "out_channels": 30000, "kernel_size": (3, 3), "groups": 1}
    assert _layer_bytes("Conv2d", state) > 30000 * 30000 * 9 * 4
    with pytest.raises(limits.LimitExceeded, match="XMGE_MAX_TENSOR_BYTES"):
        limits.Budget(file="x.tm").add_tensor(_layer_bytes("Conv2d", state), place="layer Conv2d")
    assert _layer_bytes("Linear", {"in_features": 3, "out_features": 4}) == 4 * (12 + 4)
    assert _layer_bytes("Conv2d", {"in_channels": "x"}) == 0  # malformed: the constructor reports it


class _Zeros(M.Module):
    def forward(self, x: Any) -> Any:
        import compiler.functional as F

        return x + F.zeros((64, 64)) + F.zeros((64, 64)) + F.zeros((64, 64))


def test_tm_replay_sums_one_call_under_the_total(monkeypatch: pytest.MonkeyPatch) -> None:
    traced = tm.trace_module(_Zeros(), xm.tensor(np.zeros((64, 64), np.float32)))
    monkeypatch.setenv(limits.MAX_TOTAL_BYTES_ENV, str(2 * 64 * 64 * 8 + 100))
    with pytest.raises(limits.LimitExceeded, match="XMGE_MAX_TOTAL_BYTES") as info:
        traced(xm.tensor(np.zeros((64, 64), np.float32)))
    assert "replay of" in str(info.value)
    monkeypatch.setenv(limits.MAX_TOTAL_BYTES_ENV, str(3 * 64 * 64 * 8))
    traced(xm.tensor(np.zeros((64, 64), np.float32)))  # each call has its own total
    traced(xm.tensor(np.zeros((64, 64), np.float32)))


def test_state_cannot_install_a_class_as_a_hook() -> None:
    """A declared field (``_forward_hooks``) must still hold data: an allow-listed class put there
    would be called with the module's inputs on every forward."""
    lin = M.Linear(2, 2)
    lin.__dict__["_forward_hooks"] = [M.Conv2d]
    with pytest.raises(UnsafePickleError, match="'_forward_hooks' of Linear .*class or function"):
        xm.load(io.BytesIO(pickle.dumps(lin)), allowed_classes=[M.Linear, M.Conv2d])
