"""The default loader cannot be bent: hand-assembled pickles that would change a class for the
whole process, call an allow-listed class oddly, or reach names through side doors are refused,
and every class stays as it was."""

from __future__ import annotations

import collections
import pickle
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import compiler as xm
import compiler.module as M
import compiler.traced_module as tm
from compiler import serialization
from compiler.serialization import UnsafePickleError, loads

PROTO2, PROTO4, STOP = b"\x80\x02", b"\x80\x04", b"."


def _global(module: str, name: str) -> bytes:
    """GLOBAL: push the named class or function."""
    return b"c" + f"{module}\n{name}\n".encode()


def _push(obj: Any) -> bytes:
    """Opcodes that push ``obj`` (a protocol-2 pickle without its header and STOP)."""
    return pickle.dumps(obj, protocol=2)[2:-1]


def _class_state(module: str, name: str, state: Any) -> bytes:
    """BUILD applied to the class itself: with the standard unpickler this sets class attributes."""
    return PROTO2 + _global(module, name) + _push(state) + b"b" + STOP


class _Victim:
    """A class named in a pickle, to show what the standard unpickler does with the attack."""

    def numpy(self) -> str:
        return "intact"


_VICTIMS = {
    "Tensor": xm.Tensor,
    "Parameter": xm.Parameter,
    "TracedModule": tm.TracedModule,
    "Linear": M.Linear,
    "OrderedDict": collections.OrderedDict,
    "ndarray": np.ndarray,
    "_Victim": _Victim,
}


@pytest.fixture(autouse=True)
def classes_untouched() -> Iterator[None]:
    before = {name: {k: id(v) for k, v in vars(cls).items()} for name, cls in _VICTIMS.items()}
    yield
    after = {name: {k: id(v) for k, v in vars(cls).items()} for name, cls in _VICTIMS.items()}
    assert after == before


def _refused(data: bytes, match: str = "", **kwargs: Any) -> None:
    with pytest.raises(UnsafePickleError, match=match):
        loads(data, **kwargs)


class _ControlVictim:
    def numpy(self) -> str:
        return "intact"


def test_the_attack_works_on_the_standard_unpickler_and_not_here() -> None:
    # the control: a few dozen bytes replace a method for the whole process
    control = _class_state(__name__, "_ControlVictim", (None, {"numpy": 1}))
    original = _ControlVictim.__dict__["numpy"]
    try:
        pickle.loads(control)
        assert _ControlVictim.numpy == 1
    finally:
        _ControlVictim.numpy = original  # type: ignore[method-assign]
    # the same bytes against a class the caller allowed explicitly
    _refused(
        _class_state(__name__, "_Victim", (None, {"numpy": 1})),
        "state for the class",
        allowed_classes=[_Victim],
    )
    assert _Victim().numpy() == "intact"


@pytest.mark.parametrize(
    ("module", "name", "prefix"),
    [
        ("compiler.tensor", "Tensor", b""),
        ("compiler.tensor", "Parameter", b""),
        ("megengine.tensor", "Tensor", b""),
        ("megengine.tensor", "Parameter", b""),
        ("compiler.traced_module.traced_module", "TracedModule", b""),
        # a built-in layer becomes nameable once the pickle named a TracedModule class (then POP)
        (
            "compiler.module.layers",
            "Linear",
            _global("compiler.traced_module.traced_module", "TracedModule") + b"0",
        ),
        ("collections", "OrderedDict", b""),
        ("numpy", "ndarray", b""),
    ],
)
@pytest.mark.parametrize("state", [(None, {"numpy": 1}), {"numpy": 1}, (None, {"__init__": None})])
def test_state_on_an_allow_listed_class_is_refused(module: str, name: str, prefix: bytes, state: Any) -> None:
    data = PROTO2 + prefix + _global(module, name) + _push(state) + b"b" + STOP
    _refused(data, "state for the class")
    assert xm.tensor([1.0]).numpy().tolist() == [1.0]


def test_state_on_a_function_is_refused() -> None:
    _refused(_class_state("_codecs", "encode", (None, {"__code__": None})), "state for a builtins.function")
    assert not hasattr(serialization._latin1_encode, "__wrapped__")


@pytest.mark.parametrize(
    ("data", "match"),
    [
        # copyreg._reconstructor must be (allowed class, object, None): no state, no other base
        (
            PROTO2 + _global("copyreg", "_reconstructor") + _push((xm.Tensor, object, {"numpy": 1})) + b"R.",
            "_reconstructor",
        ),
        (
            PROTO2 + _global("copyreg", "_reconstructor") + _push((xm.Tensor, set, None)) + b"R.",
            "_reconstructor",
        ),
        # a Tensor is only built from (array, dtype, device)
        (
            PROTO2 + _global("megengine.tensor", "Tensor") + _push((xm.Tensor,)) + b"R.",
            "not \\(array, dtype, device\\)",
        ),
        (
            PROTO2 + _global("megengine.tensor", "Tensor") + _push((np.ones(1), xm.Tensor)) + b"R.",
            "dtype is the class",
        ),
        (
            PROTO2 + _global("megengine.tensor", "Tensor") + _push((np.ones(1), None, 5)) + b"\x81.",
            "device is a int",
        ),
        # only what find_class handed out may be called: not an instance, not a pushed class
        (PROTO2 + _push(collections.OrderedDict()) + _push(()) + b"R.", "not an allow-listed constructor"),
        # NEWOBJ needs a class; NEWOBJ_EX takes no keyword arguments
        (
            PROTO2 + _global("_codecs", "encode") + _push(("x", "latin1")) + b"\x81.",
            "NEWOBJ of a builtins.function",
        ),
        (PROTO4 + _global("collections", "OrderedDict") + b")" + _push({"numpy": 1}) + b"\x92.", "keyword"),
        # a Tensor's state is one of the known forms, nothing else
        (
            PROTO2 + _global("compiler.tensor", "Tensor") + b")\x81" + _push({"numpy": 1}) + b"b.",
            "unknown keys",
        ),
        (
            PROTO2 + _global("compiler.tensor", "Tensor") + b")\x81" + _push({"_data": "x"}) + b"b.",
            "data of type str",
        ),
        # instance state with dunder names (e.g. swapping an instance's class)
        (
            PROTO2 + _global("collections", "OrderedDict") + b")R" + _push((None, {"__class__": 1})) + b"b.",
            "attribute '__class__' of OrderedDict",
        ),
        (
            PROTO2 + _global("collections", "OrderedDict") + b")R" + _push({1: 2}) + b"b.",
            "plain attribute names",
        ),
    ],
    ids=[
        "reconstructor_state",
        "reconstructor_base",
        "tensor_of_class",
        "tensor_dtype_class",
        "tensor_device_int",
        "call_instance",
        "newobj_function",
        "newobj_ex_kwargs",
        "tensor_state_keys",
        "tensor_state_data",
        "dunder_slot_state",
        "non_str_state_key",
    ],
)
def test_odd_calls_and_state_are_refused(data: bytes, match: str) -> None:
    _refused(data, match)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"(icompiler.tensor\nTensor\n.", "INST/OBJ"),
        (PROTO2 + b"(" + _global("compiler.tensor", "Tensor") + b"o.", "INST/OBJ"),
        (PROTO2 + b"\x82\x01.", "EXT"),
        (PROTO2 + b"\x83\x01\x00.", "EXT"),
        (PROTO2 + b"\x84\x01\x00\x00\x00.", "EXT"),
        (b"Pabc\n.", "persistent id"),
        (PROTO2 + _push("abc") + b"Q.", "persistent id"),
        (PROTO4 + b"K\x01K\x02\x93.", "non-string names \\(int, int\\)"),
        (PROTO2 + _global("compiler.tensor", "Tensor.__dict__") + b".", "compiler.tensor.Tensor.__dict__"),
        (PROTO4 + _push("compiler.tensor")[:] + _push("Tensor.__dict__") + b"\x93.", "Tensor.__dict__"),
        (PROTO2 + _global("compiler.tensor", "np") + b".", "compiler.tensor.np"),
        (PROTO2 + _global("builtins", "getattr") + b".", "builtins.getattr"),
        # filling a class as if it were a container
        (PROTO2 + _global("collections", "OrderedDict") + b"(K\x01K\x02u.", "SETITEMS into the class"),
        (PROTO2 + _global("collections", "OrderedDict") + b"K\x01K\x02s.", "SETITEM into the class"),
        (PROTO2 + _global("compiler.tensor", "Tensor") + b"(K\x01e.", "APPENDS into the class"),
        (PROTO2 + _global("compiler.tensor", "Tensor") + b"K\x01a.", "APPEND into the class"),
        (PROTO4 + _global("builtins", "set") + b"(K\x01\x90.", "ADDITEMS into the class"),
    ],
    ids=[
        "INST",
        "OBJ",
        "EXT1",
        "EXT2",
        "EXT4",
        "PERSID",
        "BINPERSID",
        "stack_global_ints",
        "global_dunder",
        "stack_global_dunder",
        "module_attribute",
        "getattr",
        "setitems_class",
        "setitem_class",
        "appends_class",
        "append_class",
        "additems_class",
    ],
)
def test_side_doors_are_refused(data: bytes, match: str) -> None:
    _refused(data, match)


@pytest.mark.parametrize("name", ["Tensor.__dict__", "np", "Tensor.__class__", "Tensor.__init__.__globals__"])
def test_opting_in_to_modules_opens_no_side_door(name: str) -> None:
    _refused(
        PROTO2 + _global("compiler.tensor", name) + b".",
        "refusing",
        allowed_classes=["compiler.tensor.Tensor"],
    )
    _refused(PROTO2 + _global("compiler.module.layers", name) + b".", "refusing", allowed_classes=[M.Linear])


def test_the_checks_leave_real_files_alone() -> None:
    # what the checks admit: every container form, shared references, instances' own state
    obj = {"a": [np.arange(3), {1, 2}, frozenset([3])], "od": collections.OrderedDict(x=np.float32(1))}
    obj["again"] = obj["a"]
    for protocol in range(6):
        back = loads(pickle.dumps(obj, protocol=protocol))
        assert back["again"] is back["a"] and back["a"][1] == {1, 2} and back["od"]["x"] == 1
