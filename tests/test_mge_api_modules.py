"""MegEngine module paths and names that user code imports first: ``megengine.device``,
``megengine.config``, ``megengine.distributed`` (a world of one process), ``megengine.logger``,
``megengine.core.tensor.dtype`` and ``megengine.tensor`` being the Tensor class."""

from __future__ import annotations

import importlib
import logging

import numpy as np
import pytest

import compiler as mge
import compiler.autodiff as ad
import compiler.distributed as dist
import compiler.functional as F
import compiler.module as M
import compiler.optimizer as optim

# MegEngine 1.13 module paths that xmge provides (docs/mge-names.md lists those it does not)
CLAIMED_MODULES = [
    "autodiff",
    "config",
    "core",
    "core.tensor",
    "core.tensor.dtype",
    "device",
    "distributed",
    "distributed.functional",
    "distributed.group",
    "dtype",
    "functional",
    "hub",
    "jit",
    "logger",
    "lite",
    "module",
    "module.qat",
    "module.quantized",
    "optimizer",
    "quantization",
    "random",
    "random.rng",
    "serialization",
    "tensor",
    "traced_module",
]


@pytest.mark.parametrize("path", CLAIMED_MODULES)
def test_claimed_module_paths_import(path: str) -> None:
    importlib.import_module(f"compiler.{path}")


def test_tensor_is_the_tensor_class() -> None:
    x = mge.tensor([1, 2, 3], dtype="int32")
    assert isinstance(x, mge.tensor) and isinstance(x, mge.Tensor) and mge.tensor is mge.Tensor
    assert x.dtype == np.int32 and x.numpy().tolist() == [1, 2, 3]
    assert isinstance(mge.Parameter([1.0]), mge.tensor)


def test_device_names() -> None:
    assert mge.is_cuda_available() is False
    assert mge.get_device_count("gpu") == 0
    assert mge.get_device_count("cpu") >= 1
    old = mge.get_default_device()
    try:
        mge.set_default_device("cpu0")
        assert mge.get_default_device() == "cpu0"
        with pytest.raises(AssertionError, match="Invalid device name"):
            mge.set_default_device("tpu0")
        with pytest.raises(RuntimeError, match="CPU only"):
            mge.set_default_device("gpu0")
    finally:
        mge.set_default_device(old)
    total, free = mge.get_mem_status_bytes()
    assert total >= free > 0
    assert mge.get_max_allocated_memory() >= mge.get_allocated_memory() > 0
    with pytest.raises(RuntimeError, match="no CUDA device"):
        mge.get_cuda_version()


def test_config_settings_are_shared_with_core_config() -> None:
    from compiler.core import _config

    assert mge.config.benchmark_kernel is False
    mge.config.benchmark_kernel = True
    try:
        assert mge.config.benchmark_kernel is True and _config._get("benchmark_kernel") is True
    finally:
        mge.config.benchmark_kernel = False
    with mge.config._override(async_level=0, compute_mode="float32"):
        assert mge.config.async_level == 0 and mge.config._compute_mode == "float32"
    assert mge.config.async_level == 2 and mge.config._compute_mode == "default"
    with pytest.raises(AssertionError, match="async_level should be 0, 1 or 2"):
        mge.config.async_level = 3


def test_distributed_world_of_one_trains_like_one_process() -> None:
    assert (dist.get_rank(), dist.get_world_size(), dist.is_distributed()) == (0, 1, False)

    @dist.launcher
    def train(steps: int) -> np.ndarray:
        assert dist.is_distributed() and dist.get_world_size() == 1
        net = M.Linear(3, 1)
        net.weight._reset(np.ones((1, 3), np.float32))
        net.bias._reset(np.zeros((1,), np.float32))
        gm = ad.GradManager().attach(net.parameters(), callbacks=[dist.make_allreduce_cb("mean")])
        opt = optim.SGD(net.parameters(), lr=0.1)
        x = mge.tensor(np.array([[1.0, 2.0, 3.0]], np.float32))
        for _ in range(steps):
            with gm:
                loss = F.sum(net(x) ** 2)
                gm.backward(loss)
            opt.step().clear_grad()
        return net.weight.numpy()

    (w,) = train(1)
    # d/dw (w.x)^2 = 2 (w.x) x = 12 x; one SGD step of 0.1
    np.testing.assert_allclose(w, 1 - 0.1 * 12 * np.array([[1.0, 2.0, 3.0]]), rtol=1e-6)
    assert not dist.is_distributed()
    y = dist.functional.all_reduce_sum(mge.tensor([1.0, 2.0]))
    assert y.numpy().tolist() == [1.0, 2.0]
    with pytest.raises(RuntimeError, match="only a world of one process"):
        dist.init_process_group("localhost", 1234, 2, 0, 0)
    with pytest.raises(RuntimeError, match="one process on the CPU"):
        dist.launcher(lambda: None, n_gpus=2)


def test_logger(caplog: pytest.LogCaptureFixture) -> None:
    logger = mge.get_logger("megengine.test")
    assert logger.name == "megengine.test"
    mge.set_log_level("WARNING")
    try:
        assert logging.getLogger("megengine").level == logging.WARNING
    finally:
        mge.set_log_level(logging.INFO)


def test_core_tensor_dtype() -> None:
    from compiler.core.tensor import dtype as D

    q = D.create_quantized_dtype(D._builtin_quant_dtypes["quint8"], 0.1, 3)
    assert D.is_quantize(q) and D.get_zero_point(q) == 3 and abs(D.get_scale(q) - 0.1) < 1e-7
    assert D.get_dtype_bit("qint4") == 4 and D.get_dtype_bit("bool") == 1
    with pytest.raises(ValueError, match="zero_point should be within"):
        D.create_quantized_dtype(D._builtin_quant_dtypes["quint8"], 0.1, 300)
    with pytest.raises(ValueError, match="only supports symmetric"):
        D.create_quantized_dtype(D._builtin_quant_dtypes["qint8"], 0.1, 1)
    x = np.array([0.26, -1.0], np.float32)
    s8 = D.convert_to_qint8(x, D.qint8(0.1))
    assert s8.view(np.int8).tolist() == [3, -10]
    np.testing.assert_allclose(D.convert_from_qint8(s8), [0.3, -1.0], rtol=1e-6)
    assert D.is_differentible_dtype(np.float32) and not D.is_differentible_dtype(np.int32)
