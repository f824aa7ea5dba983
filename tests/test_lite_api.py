"""``compiler.lite`` as ``megenginelite``: scripts written against MegEngine Lite's Python names
(``sys.modules["megenginelite"] = compiler.lite``) load MegEngine's and xmge's ``.mge`` files, feed
inputs by copy and by share, forward, wait and read outputs; input shapes (batch and image size)
change between forwards on the reference interpreter and on compiled kernels for this machine."""

from __future__ import annotations

import ctypes
import io
import logging
import sys
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch

import compiler as xm
import compiler.functional as F
import compiler.lite
import compiler.module as M
from compiler import jit
from compiler.driver.targets import host_target, runs_here
from compiler.hub.multi_io import MultiIO
from tests.conftest import data_path

CONVNET = data_path("convnet", "plain.mge")  # written by MegEngine 1.13
MULTI_IO = data_path("multi_io", "named.mge")  # written by MegEngine 1.13: image, scale -> feat, score


@pytest.fixture
def lite(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setitem(sys.modules, "megenginelite", compiler.lite)
    import megenginelite

    return megenginelite


class SpatialNet(M.Module):
    """Shape-generic: conv + BN + relu, a global mean and a classifier; two outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = M.Conv2d(3, 8, 3, padding=1)
        self.bn = M.BatchNorm2d(8)
        self.fc = M.Linear(8, 5)

    def forward(self, x: Any) -> tuple[Any, Any]:
        feat = F.relu(self.bn(self.conv(x)))
        return self.fc(F.mean(feat, axis=(2, 3))), feat


@pytest.fixture(scope="module")
def spatial() -> tuple[SpatialNet, bytes]:
    """The network with non-trivial BN statistics, and its .mge dumped at 1x3x8x8."""
    rng = np.random.default_rng(11)
    net = SpatialNet()
    for name, t in net.named_tensors():
        scale = (0.5, 2.0) if "running_var" in name else (-0.5, 0.5)
        t._reset(rng.uniform(*scale, t.shape).astype(np.float32))
    net.eval()

    @jit.trace(symbolic=True, capture_as_const=True)
    def infer(data: Any, *, net: SpatialNet) -> Any:
        return net(data)

    infer(xm.tensor(rng.standard_normal((1, 3, 8, 8)).astype(np.float32)), net=net)
    buf = io.BytesIO()
    infer.dump(buf, arg_names=["data"], output_names=["logits", "feat"])
    return net, buf.getvalue()


def _eager(net: SpatialNet, x: np.ndarray) -> list[np.ndarray]:
    return [t.numpy() for t in net(xm.tensor(x))]


def _torch(net: SpatialNet, x: np.ndarray) -> list[np.ndarray]:
    """The same network in PyTorch, from the xmge parameters."""
    p = {k: torch.from_numpy(np.asarray(v).copy()) for k, v in net.state_dict().items()}
    y = torch.nn.functional.conv2d(
        torch.from_numpy(x), p["conv.weight"], p["conv.bias"].reshape(-1), padding=1
    )
    y = torch.nn.functional.batch_norm(
        y,
        p["bn.running_mean"].reshape(-1),
        p["bn.running_var"].reshape(-1),
        p["bn.weight"].reshape(-1),
        p["bn.bias"].reshape(-1),
        eps=net.bn.eps,
    )
    feat = torch.relu(y)
    logits = feat.mean(dim=(2, 3)) @ p["fc.weight"].T + p["fc.bias"]
    return [logits.numpy(), feat.numpy()]


# -- MegEngine Lite's basic flow, on MegEngine's own file ------------------------------------------
def test_megengine_lite_script_on_a_megengine_file(lite: ModuleType) -> None:
    from megenginelite import LiteConfig, LiteDataType, LiteDeviceType, LiteNetwork

    x = np.load(data_path("convnet", "inputs.npz"))["data"]
    want = np.load(data_path("convnet", "expected_plain.npz"))["fc2.ADD"]

    config = LiteConfig()
    config.device_type = LiteDeviceType.LITE_CPU
    network = LiteNetwork(config)
    network.load(CONVNET)

    input_name = network.get_input_name(0)
    input_tensor = network.get_io_tensor(input_name)
    output_name = network.get_output_name(0)
    output_tensor = network.get_io_tensor(output_name)
    assert (input_name, output_name) == ("data", "fc2.ADD")
    assert network.get_all_input_name() == ["data"] and network.get_all_output_name() == ["fc2.ADD"]
    assert input_tensor.layout.shapes == [1, 1, 28, 28] and input_tensor.layout.ndim == 4
    assert input_tensor.layout.data_type == LiteDataType.LITE_FLOAT
    assert input_tensor.nbytes == 28 * 28 * 4 and output_tensor.layout.shapes == [1, 10]

    input_tensor.set_data_by_copy(x)
    for _ in range(3):
        network.forward()
        network.wait()
    np.testing.assert_allclose(output_tensor.to_numpy(), want, rtol=1e-5, atol=1e-5)


def test_set_data_by_share_reads_the_callers_memory(lite: ModuleType) -> None:
    from megenginelite import LiteLayout, LiteNetwork, LiteTensor

    network = LiteNetwork()
    with open(CONVNET, "rb") as f:  # a binary file object works as well as a path
        network.load(f)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 1, 28, 28)).astype(np.float32)
    reference = compiler.lite.Network(CONVNET)
    network.get_io_tensor("data").set_data_by_share(x)
    out = network.get_io_tensor("fc2.ADD")
    network.forward()
    np.testing.assert_allclose(out.to_numpy(), reference(data=x)["fc2.ADD"], rtol=1e-6, atol=1e-6)
    x[...] = rng.standard_normal(x.shape)  # no new set_data call: the shared memory is the input
    network.forward()
    np.testing.assert_allclose(out.to_numpy(), reference(data=x)["fc2.ADD"], rtol=1e-6, atol=1e-6)

    # MegEngine's test_network_by_share: a tensor sharing the user's array, shared with the input
    y = rng.standard_normal((1, 1, 28, 28)).astype(np.float32)
    tmp = LiteTensor(layout=LiteLayout(y.shape, y.dtype))
    tmp.set_data_by_share(y)
    network.get_io_tensor("data").share_memory_with(tmp)
    network.forward()
    np.testing.assert_allclose(out.to_numpy(), reference(data=y)["fc2.ADD"], rtol=1e-6, atol=1e-6)

    with pytest.raises(RuntimeError, match="C-contiguous"):
        network.get_io_tensor("data").set_data_by_share(np.zeros((1, 1, 28, 56), np.float32)[..., ::2])


def test_two_inputs_two_outputs_by_name(lite: ModuleType) -> None:
    from megenginelite import LiteNetwork

    z = np.load(data_path("multi_io", "inputs.npz"))
    want = np.load(data_path("multi_io", "expected_named.npz"))
    network = LiteNetwork()
    network.load(MULTI_IO)
    assert network.get_all_input_name() == ["image", "scale"]
    network.get_io_tensor("image").set_data_by_copy(z["image"])
    network.get_io_tensor("scale").set_data_by_copy(z["scale"])
    network.forward()
    network.wait()
    for name in ("feat", "score"):
        np.testing.assert_allclose(network.get_io_tensor(name).to_numpy(), want[name], rtol=1e-5, atol=1e-5)


# -- changing input shapes -------------------------------------------------------------------------
SHAPES = [(1, 3, 8, 8), (3, 3, 8, 8), (2, 3, 12, 10), (1, 3, 8, 8), (2, 3, 12, 10)]


def _run_shapes(network: Any, net: SpatialNet, *, with_torch: bool) -> None:
    rng = np.random.default_rng(7)
    data = network.get_io_tensor("data")
    for shape in SHAPES:
        x = rng.standard_normal(shape).astype(np.float32)
        data.set_data_by_copy(x)
        network.forward()
        network.wait()
        assert data.layout.shapes == list(shape)
        got = [network.get_io_tensor(n).to_numpy() for n in ("logits", "feat")]
        assert network.get_io_tensor("feat").layout.shapes == [shape[0], 8, shape[2], shape[3]]
        for g, w in zip(got, _eager(net, x), strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
        if with_torch:
            for g, w in zip(got, _torch(net, x), strict=True):
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_batch_and_image_size_change_on_the_reference(lite: ModuleType, spatial: Any) -> None:
    from megenginelite import LiteNetwork

    net, model = spatial
    network = LiteNetwork()
    network.load(model)
    _run_shapes(network, net, with_torch=True)


def test_batch_and_image_size_change_on_compiled_kernels(
    lite: ModuleType, spatial: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from megenginelite import LiteLogLevel, LiteNetwork, set_log_level

    target = host_target()
    if target.backend is None or target.backend.kernels is None or not runs_here(target):
        pytest.skip(f"no native target on this machine ({target})")
    net, model = spatial
    network = LiteNetwork(target=str(target))
    network.threads_number = 2
    network.load(model)
    set_log_level(LiteLogLevel.INFO)
    try:
        with caplog.at_level(logging.INFO, logger="xmge.lite"):
            _run_shapes(network, net, with_torch=False)
    finally:
        set_log_level(LiteLogLevel.WARN)
    compiled = [r.getMessage() for r in caplog.records if r.getMessage().startswith("compiling")]
    # the file's shape was compiled by load(); each other signature once, however often it recurs
    assert len(compiled) == len(set(SHAPES)) - 1, compiled


def test_megengine_file_runs_at_another_batch_and_image_size(lite: ModuleType) -> None:
    from megenginelite import LiteNetwork

    model = MultiIO()
    weights = np.load(data_path("multi_io", "weights.npz"))
    model.load_state_dict({k: weights[k] for k in weights.files})
    network = LiteNetwork()
    network.load(MULTI_IO)
    image = np.random.default_rng(4).standard_normal((2, 3, 16, 12)).astype(np.float32)
    scale = np.full((1, 1, 1, 1), 0.7, np.float32)
    network.get_io_tensor("image").set_data_by_copy(image)
    network.get_io_tensor("scale").set_data_by_copy(scale)
    network.forward()
    want = [t.numpy() for t in model(xm.tensor(image), xm.tensor(scale))]
    for name, w in zip(("feat", "score"), want, strict=True):
        np.testing.assert_allclose(network.get_io_tensor(name).to_numpy(), w, rtol=1e-5, atol=1e-5)


# -- errors ----------------------------------------------------------------------------------------
def test_unknown_io_names_and_indices(lite: ModuleType) -> None:
    from megenginelite import LiteNetwork, LiteTensorPhase

    network = LiteNetwork()
    with pytest.raises(RuntimeError, match="no model loaded: call load"):
        network.get_io_tensor("data")
    network.load(CONVNET)
    with pytest.raises(
        RuntimeError, match=r"no input or output tensor named 'dat'; inputs are \['data'\], outputs"
    ):
        network.get_io_tensor("dat")
    with pytest.raises(RuntimeError, match="no output tensor named 'data'"):
        network.get_io_tensor("data", LiteTensorPhase.LITE_OUTPUT)
    with pytest.raises(RuntimeError, match=r"output index 1 out of range: the model has 1 output\(s\)"):
        network.get_output_name(1)


def test_bad_inputs_get_clear_errors(lite: ModuleType) -> None:
    from megenginelite import LiteNetwork

    network = LiteNetwork()
    network.load(CONVNET)
    data = network.get_io_tensor("data")
    with pytest.raises(RuntimeError, match=r"input 'data' has no data: call set_data_by_copy"):
        network.forward()
    with pytest.raises(RuntimeError, match="no data type for.*float64"):
        data.set_data_by_copy(np.zeros((1, 1, 28, 28)))
    data.set_data_by_copy(np.zeros((1, 1, 28, 28), np.int32))
    with pytest.raises(RuntimeError, match="input 'data' is float32 in the model, got int32 data"):
        network.forward()
    # the flatten feeds a 320-wide Linear: 20x20 images cannot work, and the message says where
    data.set_data_by_copy(np.zeros((1, 1, 20, 20), np.float32))
    with pytest.raises(
        RuntimeError, match=r"cannot run with input shapes data=\[1, 1, 20, 20\]: .*MatrixMul.*80 == 320"
    ):
        network.forward()


def test_unsupported_configurations(lite: ModuleType) -> None:
    from megenginelite import LiteConfig, LiteDeviceType, LiteIO, LiteNetwork, LiteNetworkIO

    with pytest.raises(RuntimeError, match="on the CPU; device LITE_CUDA is not supported"):
        LiteNetwork(LiteConfig(device_type=LiteDeviceType.LITE_CUDA))
    config = LiteConfig()
    config.bare_model_cryption_name = "AES_default"
    with pytest.raises(RuntimeError, match="encrypted models"):
        LiteNetwork(config).load(CONVNET)
    with pytest.raises(RuntimeError, match=r"inputs \['image'\] the model lacks"):
        LiteNetwork(io=LiteNetworkIO([LiteIO("image")])).load(CONVNET)
    network = LiteNetwork()
    network.load(CONVNET)
    with pytest.raises(RuntimeError, match="threads_number must be set before the network is loaded"):
        network.threads_number = 2


# -- the rest of the Lite surface ------------------------------------------------------------------
def test_network_io_configuration(lite: ModuleType) -> None:
    from megenginelite import LiteIO, LiteLayout, LiteNetwork, LiteNetworkIO, get_model_io_info

    info = get_model_io_info(MULTI_IO)
    assert [(i.name, i.config_layout.shapes) for i in info.inputs] == [
        ("image", [1, 3, 8, 8]),
        ("scale", [1, 1, 1, 1]),
    ]
    assert [o.name for o in info.outputs] == ["feat", "score"]

    ios = LiteNetworkIO()
    ios.add_input("image", layout=LiteLayout([2, 3, 4, 4], "float32"))
    ios.add_output(LiteIO("score", layout=LiteLayout([2, 3])))
    network = LiteNetwork(io=ios)
    network.load(MULTI_IO)
    assert network.get_io_tensor("image").layout.shapes == [2, 3, 4, 4]
    assert network.get_all_output_name() == ["score"]  # registered outputs are the only ones
    network.get_io_tensor("image").fill_zero()
    network.get_io_tensor("scale").set_data_by_copy([1.0])
    network.forward()
    np.testing.assert_allclose(network.get_io_tensor("score").to_numpy(), np.full((2, 3), 0.5), atol=1e-7)
    network.get_io_tensor("image").set_data_by_copy(np.zeros((1, 3, 4, 4), np.float32))
    with pytest.raises(RuntimeError, match=r"output 'score' has shape \[1, 3\], not the configured \[2, 3\]"):
        network.forward()


def test_callbacks_and_shared_weights(lite: ModuleType) -> None:
    from megenginelite import LiteNetwork

    x = np.load(data_path("convnet", "inputs.npz"))["data"]
    want = np.load(data_path("convnet", "expected_plain.npz"))["fc2.ADD"]
    seen: list[str] = []
    src = LiteNetwork()
    src.load(CONVNET)
    src.set_start_callback(lambda ios: seen.extend(f"start:{io.name}" for io in ios))
    src.set_finish_callback(
        lambda ios: seen.extend(f"finish:{io.name}:{t.layout.shapes}" for io, t in ios.items())
    )
    src.async_with_callback(lambda: seen.append("done"))
    src.get_io_tensor("data").set_data_by_copy(x)
    src.forward()
    src.wait()
    assert seen == ["start:data", "finish:fc2.ADD:[1, 10]", "done"]

    shared = LiteNetwork()
    shared.share_weights_with(src)
    assert shared.get_io_tensor("data") is not src.get_io_tensor("data")
    shared.get_io_tensor("data").set_data_by_copy(2 * x)
    shared.forward()
    np.testing.assert_allclose(src.get_io_tensor("fc2.ADD").to_numpy(), want, rtol=1e-5, atol=1e-5)
    assert not np.allclose(shared.get_io_tensor("fc2.ADD").to_numpy(), want)


def test_lite_tensor_and_layout(lite: ModuleType) -> None:
    from megenginelite import LiteDataType, LiteLayout, LiteTensor, LiteTensorConcat, lite_dtype_2_numpy

    assert LiteLayout([2, 3], "int8").data_type == LiteDataType.LITE_INT8
    assert LiteLayout([2, 3], np.dtype("uint16")).dtype is np.uint16
    assert LiteLayout([2], np.float16).data_type == LiteDataType.LITE_HALF
    assert lite_dtype_2_numpy(LiteDataType.LITE_INT) is np.int32

    t = LiteTensor(shapes=[2, 6], dtype="float32")
    assert t.nbytes == 48 and t.layout.shapes == [2, 6]
    t.set_data_by_copy(list(range(12)))
    t.reshape([3, -1])
    np.testing.assert_array_equal(t.to_numpy(), np.arange(12, dtype=np.float32).reshape(3, 4))
    with pytest.raises(RuntimeError, match="cannot reshape"):
        t.reshape([5, -1])

    # writes through the ctypes address are the tensor's data; by-share views see them
    view = t.get_data_by_share()
    ctypes.memmove(t.get_ctypes_memory(), np.full(12, 7, np.float32).ctypes.data, 48)
    assert (view == 7).all()

    c = LiteTensor()
    c.copy_from(t)
    c.get_data_by_share()[0, 0] = 1
    assert t.to_numpy()[0, 0] == 7  # a copy, not a share

    s = t.slice([1, 0], [3, 4], [1, 2])
    assert s.layout.shapes == [2, 2] and not s.is_continue

    a = LiteTensor(shapes=[1, 2], dtype="int32")
    a.set_data_by_copy(np.array([[1, 2]], np.int32))
    joined = LiteTensorConcat([a, a], dim=0)
    np.testing.assert_array_equal(joined.to_numpy(), [[1, 2], [1, 2]])

    buf = (ctypes.c_float * 4)(1, 2, 3, 4)
    shared = LiteTensor(LiteLayout([2, 2], "float32"))
    shared.set_data_by_share(buf)
    buf[3] = 9
    np.testing.assert_array_equal(shared.to_numpy(), [[1, 2], [3, 9]])
