"""Checkpoints exchanged with MegEngine 1.13 both ways, tested on the pickle format itself.

The files under tests/data/checkpoints/ were written by the real MegEngine 1.13 (numpy 1.23) with
make_megengine_checkpoints.py there; MegEngine is not needed to run these tests.
"""

from __future__ import annotations

import io
import pickle
import pickletools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import compiler as xm
import compiler.module as M
import compiler.random as xm_random
from compiler.core import XmgeError
from compiler.optimizer import SGD
from compiler.serialization import dumps, loads
from tests.conftest import data_path


@pytest.fixture(autouse=True)
def _leave_the_init_generator_alone() -> Iterator[None]:
    # the layers built here draw from the shared initialisation generator; later files (e.g. the
    # randomly initialised resnet10 of test_inference_passes, compared in float16) expect its state
    # as the files before this one left it
    state = xm_random.generator().bit_generator.state
    yield
    xm_random.generator().bit_generator.state = state


def _ckpt_path(name: str) -> str:
    return data_path("checkpoints", name)


def _expected() -> Any:
    return np.load(_ckpt_path("checkpoint_expected.npz"))


# ----------------------------------------------------------------------------------------------
# xmge -> MegEngine: the file is the one MegEngine itself writes


@pytest.mark.parametrize("protocol", [2, 4])
def test_save_writes_tensors_byte_for_byte_as_megengine_does(protocol: int) -> None:
    obj = {"t": xm.tensor(np.arange(3, dtype="float32")), "p": xm.Parameter(np.ones((2,), "float32"))}
    with open(_ckpt_path(f"tensors_p{protocol}.pkl"), "rb") as f:
        megengine_bytes = f.read()
    assert dumps(obj, protocol) == megengine_bytes
    buf = io.BytesIO()
    xm.save(obj, buf, pickle_protocol=protocol)
    assert buf.getvalue() == megengine_bytes


class _NameRecorder(pickle.Unpickler):
    """Lists every global a pickle names, resolving none of them."""

    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.names: set[tuple[str, str]] = set()

    def find_class(self, module: str, name: str) -> Any:
        self.names.add((module, name))
        return _Anything


class _Anything(dict):  # type: ignore[type-arg]
    """Stands in for every class and function: called, built, filled as a dict or a list."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def append(self, item: Any) -> None:
        pass

    def extend(self, items: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass

    def __call__(self, *args: Any) -> _Anything:
        return _Anything()


# every name a file xmge saves may use: all exist in numpy 1.2x and MegEngine 1.13 (and numpy 2)
_NUMPY1_AND_MEGENGINE_NAMES = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("megengine.tensor", "Tensor"),
    ("megengine.tensor", "Parameter"),
    ("collections", "OrderedDict"),
    ("_codecs", "encode"),
}


def _training_checkpoint() -> dict[str, Any]:
    net = M.Sequential(M.Linear(4, 3), M.ReLU(), M.Linear(3, 2))
    opt = SGD(net.parameters(), lr=0.1, momentum=0.9)
    for p in net.parameters():  # a momentum buffer per parameter, as after a step
        opt._state[p] = {"momentum_buffer": xm.tensor(np.full(p.shape, 0.5, np.float32))}
    return {
        "epoch": 7,
        "state_dict": net.state_dict(),
        "model_tensors": net.state_dict(keep_var=True),
        "opt": opt.state_dict(),
        "opt_tensors": opt.state_dict(keep_var=True),
        "extras": [
            np.float32(2.5),
            np.int64(3),
            np.arange(4, dtype=np.int64)[::2],
            xm.tensor([1, 2], dtype="int8"),
        ],
    }


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
def test_saved_checkpoint_names_only_what_numpy1_and_megengine_have(protocol: int) -> None:
    data = dumps(_training_checkpoint(), protocol)
    recorder = _NameRecorder(data)
    recorder.load()
    assert recorder.names <= _NUMPY1_AND_MEGENGINE_NAMES, recorder.names - _NUMPY1_AND_MEGENGINE_NAMES
    assert ("megengine.tensor", "Parameter") in recorder.names and (
        "megengine.tensor",
        "Tensor",
    ) in recorder.names
    # and numpy 2's own pickle of the same arrays would not do (the reason for the neutral names)
    assert any(m.startswith("numpy._core") for m, _ in _names_of(pickle.dumps(np.ones(2), protocol=protocol)))


def _names_of(data: bytes) -> set[tuple[str, str]]:
    recorder = _NameRecorder(data)
    recorder.load()
    return recorder.names


@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_tensors_round_trip_through_megengines_form(protocol: int) -> None:
    ckpt = _training_checkpoint()
    back = loads(dumps(ckpt, protocol))
    for key, value in ckpt["model_tensors"].items():
        got = back["model_tensors"][key]
        assert type(got) is xm.Parameter and got.dtype == value.dtype
        np.testing.assert_array_equal(got.numpy(), value.numpy())
    for index, state in ckpt["opt_tensors"]["state"].items():
        got = back["opt_tensors"]["state"][index]["momentum_buffer"]
        assert type(got) is xm.Tensor
        np.testing.assert_array_equal(got.numpy(), state["momentum_buffer"].numpy())
    scalar, i64, strided, int8 = back["extras"]
    assert type(scalar) is np.float32 and scalar == 2.5 and type(int8) is xm.Tensor and int8.dtype == np.int8
    assert i64.dtype == np.int64 and list(strided) == [0, 2]
    named = xm.tensor([1.0])
    named.name = "conv1.weight"
    assert loads(dumps([named, named], protocol))[0].name == "conv1.weight"
    shared = loads(dumps([named, named], protocol))
    assert shared[0] is shared[1]  # one tensor saved twice is one tensor loaded


def test_quantized_tensor_keeps_its_dtype() -> None:
    from compiler.dtype import qint8

    dtype = qint8(0.25)
    t = xm.tensor(np.array([1.0, -2.0, 0.5], np.float32), dtype=dtype)
    back = loads(dumps(t))
    assert back.dtype == t.dtype and back.dtype.metadata == t.dtype.metadata
    np.testing.assert_array_equal(back.numpy(), t.numpy())


# ----------------------------------------------------------------------------------------------
# MegEngine -> xmge


@pytest.mark.parametrize("protocol", [2, 4])
def test_megengine_checkpoint_loads_and_resumes(protocol: int) -> None:
    ckpt = xm.load(_ckpt_path(f"checkpoint_p{protocol}.pkl"))  # the default, restricted loader
    expected = _expected()
    assert ckpt["epoch"] == 2 and isinstance(ckpt["loss"], float)
    for name, tensor in ckpt["tensors"].items():
        assert type(tensor) is (xm.Parameter if name == "param" else xm.Tensor)
        assert tensor.dtype == expected[f"tensors.{name}"].dtype
        np.testing.assert_array_equal(tensor.numpy(), expected[f"tensors.{name}"])
    for index, state in ckpt["opt_keep_var"]["state"].items():
        assert type(state["momentum_buffer"]) is xm.Tensor
        np.testing.assert_array_equal(
            state["momentum_buffer"].numpy(), expected[f"opt.{index}.momentum_buffer"]
        )

    net = M.Sequential(M.Linear(4, 3), M.ReLU(), M.Linear(3, 2))
    net.load_state_dict(ckpt["state_dict"])
    for key, value in net.state_dict().items():
        np.testing.assert_array_equal(value, expected[f"state_dict.{key}"])
    out = net.eval()(xm.tensor(expected["checkpoint_input"])).numpy()
    np.testing.assert_allclose(out, expected["checkpoint_output"], rtol=1e-5, atol=1e-6)
    opt = SGD(net.parameters(), lr=1.0)
    opt.load_state_dict(ckpt["opt"])
    assert opt.param_groups[0]["lr"] == 0.1 and opt.param_groups[0]["momentum"] == 0.9
    for index, p in enumerate(net.parameters()):
        np.testing.assert_array_equal(
            opt._state[p]["momentum_buffer"].numpy(), expected[f"opt.{index}.momentum_buffer"]
        )


def _devices_seen(path: str, **kwargs: Any) -> list[str]:
    seen: list[str] = []

    def record(device: str) -> str:
        seen.append(device)
        return "cpu0"

    xm.load(path, map_location=record, **kwargs)
    return seen


def test_map_location_callable_sees_each_saved_device() -> None:
    seen = _devices_seen(_ckpt_path("checkpoint_p4.pkl"))
    # 4 parameters' momentum buffers (keep_var) and 4 loose tensors, one of them saved on cpu0
    assert len(seen) == 8 and seen.count("cpu0:0") == 1 and set(seen) == {"xpux:0", "cpu0:0"}
    assert _devices_seen(_ckpt_path("checkpoint_p4.pkl"), trusted=True) == seen


@pytest.mark.parametrize("map_location", ["cpu0", "cpux", "gpu1:2", {"gpu0": "cpu0"}, {"xpux": "cpu1"}, None])
def test_map_location_forms_megengine_documents(map_location: Any) -> None:
    ckpt = xm.load(_ckpt_path("checkpoint_p2.pkl"), map_location=map_location)
    np.testing.assert_array_equal(ckpt["tensors"]["cpu0"].numpy(), _expected()["tensors.cpu0"])


@pytest.mark.parametrize(
    ("map_location", "message"),
    [
        ("nowhere", "'nowhere' is not a device name"),
        ({"gpu0": "tpu9"}, "'tpu9' is not a device name"),
        ({0: "cpu0"}, "0 is not a device name"),
        (lambda device: 3, r"map_location\('xpux:0'\) returned 3"),
        (7, "must be a device name, a dict or a callable, not int"),
    ],
)
def test_bad_map_location_is_named(map_location: Any, message: str) -> None:
    with pytest.raises(XmgeError, match=message):
        xm.load(_ckpt_path("checkpoint_p4.pkl"), map_location=map_location)


def test_megengine_pre_1_2_tensor_state_loads() -> None:
    # MegEngine before 1.2 pickled Tensor() with its data in the state (its tensor_v1_1.mge form);
    # assembled here: GLOBAL, an empty NEWOBJ, then the state dict's protocol-2 body and BUILD
    state = {"data": np.array([1, 2, 3], np.int8), "device": "cpu0:0", "dtype": np.int8}
    state["qdict"] = {"mode": None, "scale": None, "zero_point": None}
    body = pickle.dumps(state, protocol=2)[2:-1]
    data = b"\x80\x02cmegengine.tensor\nTensor\n)\x81" + body + b"b."
    assert [op.name for op, _, _ in pickletools.genops(data)][:4] == [
        "PROTO",
        "GLOBAL",
        "EMPTY_TUPLE",
        "NEWOBJ",
    ]
    t = loads(data, map_location=lambda device: device)
    assert type(t) is xm.Tensor and t.dtype == np.int8 and t.numpy().tolist() == [1, 2, 3]


def test_earlier_xmge_tensor_form_still_loads() -> None:
    t = xm.Parameter(np.arange(4, dtype=np.float32))
    t.name = "w"
    for protocol in (0, 2, 4):
        legacy = pickle.dumps(t, protocol=protocol)  # the default pickling: compiler.tensor + __dict__
        assert b"compiler.tensor" in legacy
        back = loads(legacy)
        assert type(back) is xm.Parameter and back.name == "w"
        np.testing.assert_array_equal(back.numpy(), t.numpy())


def test_trusted_load_needs_no_megengine_for_tensors() -> None:
    data = dumps({"t": xm.tensor([1.0, 2.0]), "p": xm.Parameter([3.0])})
    with pytest.raises(ModuleNotFoundError, match="megengine"):
        pickle.loads(data)  # the file names MegEngine's class, as MegEngine's own files do
    back = loads(data, trusted=True)
    assert type(back["t"]) is xm.Tensor and type(back["p"]) is xm.Parameter
    assert back["p"].numpy().tolist() == [3.0]


def test_megengine_tensor_with_quantization_params_is_refused_by_name() -> None:
    body = pickle.dumps({"qparams": {"scale": np.float32(0.5)}}, protocol=2)[2:-1]
    data = b"\x80\x02cmegengine.tensor\nTensor\n" + pickle.dumps((np.ones(2, np.float32),), 2)[2:-1]
    with pytest.raises(xm.serialization.UnsafePickleError, match="qparams"):
        loads(data + b"\x81" + body + b"b.")


@pytest.mark.parametrize(
    "options",
    [{}, {"allowed_classes": ["megengine.module.sequential.Sequential"]}, {"trusted": True}],
    ids=["default", "allowed", "trusted"],
)
def test_whole_module_pickled_by_megengine_is_refused_in_one_line(options: dict[str, Any]) -> None:
    """A file from MegEngine's ``mge.save(net)`` names MegEngine's own Module classes: never a
    ModuleNotFoundError traceback, with or without an opt-in, but a refusal saying what to do."""
    with pytest.raises(xm.serialization.UnsafePickleError, match=r"megengine\.module\.sequential"):
        xm.load(_ckpt_path("megengine_whole_sequential.pkl"), **options)
