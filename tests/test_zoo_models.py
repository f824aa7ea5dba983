"""Test-sized versions of the model-zoo architectures in ``compiler.hub``: each runs eagerly,
traces with ``jit.trace(symbolic=True, capture_as_const=True)``, dumps (plain, with
``enable_fuse_conv_bias_nonlinearity``, with ``enable_nchw88``) and reads back with
``compiler.lite.Network`` matching the eager output."""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import compiler as xm
from backends.mge.container import parse_file
from compiler import jit
from compiler.lite import Network

DUMP_OPTIONS = [{}, {"enable_fuse_conv_bias_nonlinearity": True}, {"enable_nchw88": True}]


def _check_dumps(model: Any, inputs: list[np.ndarray], rtol: float = 1e-4) -> list[np.ndarray]:
    model.eval()
    eager = model(*[xm.tensor(x) for x in inputs])
    eager_list = [eager] if isinstance(eager, xm.Tensor) else list(eager)
    traced = jit.trace(lambda *xs: model(*xs), symbolic=True, capture_as_const=True)
    traced(*[xm.tensor(x) for x in inputs])
    replay = traced(*[xm.tensor(x) for x in inputs])
    replay_list = [replay] if isinstance(replay, xm.Tensor) else list(replay)
    for e, r in zip(eager_list, replay_list, strict=True):
        np.testing.assert_array_equal(r.numpy(), e.numpy())
    for options in DUMP_OPTIONS:
        buf = io.BytesIO()
        traced.dump(buf, **options)
        net = Network(buf.getvalue())
        outs = net(*inputs)
        assert len(outs) == len(eager_list)
        for got, want in zip(outs.values(), eager_list, strict=True):
            want_np = want.numpy()
            scale = max(float(np.abs(want_np).max()), 1e-6)
            err = float(np.abs(got - want_np).max()) / scale
            assert err <= rtol, f"{options}: relative error {err:.2e}"
    return [e.numpy() for e in eager_list]


def _image(shape: tuple[int, ...] = (2, 3, 32, 32)) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


FLOAT_MODELS: dict[str, Callable[[], tuple[Any, list[np.ndarray]]]] = {}


def float_model(fn: Callable[[], tuple[Any, list[np.ndarray]]]) -> Callable[[], tuple[Any, list[np.ndarray]]]:
    FLOAT_MODELS[fn.__name__] = fn
    return fn


@float_model
def resnext50_32x4d() -> tuple[Any, list[np.ndarray]]:
    from compiler.hub.resnext import resnext50_32x4d

    return resnext50_32x4d(layers=[1, 1, 1, 1], num_classes=10), [_image()]


@pytest.mark.parametrize("name", sorted(FLOAT_MODELS))
def test_float_zoo_model_traces_dumps_and_reads_back(name: str) -> None:
    model, inputs = FLOAT_MODELS[name]()
    (out,) = _check_dumps(model, inputs)
    assert np.isfinite(out).all()


QUANTIZED = {
    "quantized_resnet18": {"layers": [1, 1, 1, 1], "width": 8, "num_classes": 10},
    "quantized_mobilenet_v2": {"width_mult": 0.25, "depth": 4, "last_channel": 64, "num_classes": 10},
    "quantized_shufflenet_v1": {
        "groups": 2,
        "stage_repeats": [1, 2, 1],
        "stage_channels": [32, 64, 128],
        "stem": 8,
        "num_classes": 10,
    },  # fmt: skip
}


@pytest.mark.parametrize("name", sorted(QUANTIZED))
def test_quantized_zoo_model_converts_traces_and_dumps(name: str) -> None:
    """MegEngine's flow: float -> quantize_qat -> calibrate -> quantize -> int8 eager == dump."""
    import compiler.hub.quantized as Q
    import compiler.module as M
    from compiler.quantization import enable_observer, quantize, quantize_qat

    x = _image((2, 3, 32, 32))
    model = getattr(Q, name)(**QUANTIZED[name])
    model.eval()
    y_float = model(xm.tensor(x)).numpy()
    quantize_qat(model)
    assert any(isinstance(m, M.qat.QATModule) for m in model.modules())
    model.eval()
    enable_observer(model)
    y_qat = model(xm.tensor(x)).numpy()
    quantize(model)
    model.eval()
    assert not any(isinstance(m, M.qat.QATModule) for m in model.modules())
    (y_int8,) = _check_dumps(model, [x], rtol=1e-6)
    # int8 tracks the fake-quantized (QAT) model to a few output steps (integer average pooling
    # and requantization round differently) and the float model roughly
    scale = np.abs(y_qat).max()
    assert np.abs(y_int8 - y_qat).max() <= 0.1 * scale
    assert np.abs(y_int8 - y_float).max() <= 0.25 * max(np.abs(y_float).max(), 1e-6)
    traced = jit.trace(lambda t: model(t), symbolic=True, capture_as_const=True)
    traced(xm.tensor(x))
    buf = io.BytesIO()
    traced.dump(buf)
    kinds = Counter(o.kind or o.type_name for o in parse_file(buf.getvalue())[0].oprs)
    assert kinds["ConvBias"] >= 3 and "Convolution" not in kinds and "BatchNorm" not in kinds
    assert kinds["TypeCvt"] >= 2  # QuantStub in, DequantStub out


def test_quantized_entry_point_builds_an_int8_model() -> None:
    from compiler.hub.quantized import quantized_resnet18

    model = quantized_resnet18(
        quantized=True, calibration_shape=(1, 3, 32, 32), **QUANTIZED["quantized_resnet18"]
    )
    y = model(xm.tensor(_image((1, 3, 32, 32))))
    assert y.shape == (1, 10) and y.dtype == np.float32
