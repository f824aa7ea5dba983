"""megengine.amp: autocast state and rules, GradScaler, format conversion (MegEngine 1.13 semantics)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compiler as mge
import compiler.functional as F
import compiler.module as M
from compiler import amp
from compiler.autodiff import GradManager
from compiler.core.tensor import amp as origin_amp


def _check(enabled: bool, low: str, high: str) -> None:
    assert amp.enabled == enabled and origin_amp._enabled == enabled
    assert amp.low_prec_dtype == low and origin_amp._get_amp_low_prec_dtype() == low
    assert amp.high_prec_dtype == high and origin_amp._get_amp_high_prec_dtype() == high


def test_autocast_settings_restore() -> None:
    before = (amp.enabled, amp.low_prec_dtype, amp.high_prec_dtype)
    with amp.autocast(low_prec_dtype="float16", high_prec_dtype="float32"):
        _check(True, "float16", "float32")
    _check(*before)
    amp.enabled = True
    _check(True, "float16", "float32")
    amp.enabled = before[0]
    _check(*before)
    with amp.autocast(enabled=False):
        _check(*before)
    with pytest.raises(ValueError, match="int32"):
        amp.low_prec_dtype = "int32"


def test_autocast_rules_match_torch_half() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    a = rng.standard_normal((3, 5)).astype(np.float32)
    b = rng.standard_normal((5, 2)).astype(np.float32)

    @amp.autocast()
    def step(x, w, a, b):
        return F.conv2d(x, w), F.matmul(a, b), F.exp(F.matmul(a, b)), a + 1.0

    y, m, e, s = step(mge.tensor(x), mge.tensor(w), mge.tensor(a), mge.tensor(b))
    assert (y.dtype, m.dtype, e.dtype, s.dtype) == (np.float16, np.float16, np.float32, np.float32)
    # low-precision inputs, float32 accumulation, a float16 result
    ty = torch.nn.functional.conv2d(torch.tensor(x).half().float(), torch.tensor(w).half().float()).half()
    np.testing.assert_allclose(y.numpy().astype(np.float32), ty.float().numpy(), rtol=2e-3, atol=2e-3)
    tm = (torch.tensor(a).half().float() @ torch.tensor(b).half().float()).half()
    np.testing.assert_allclose(m.numpy().astype(np.float32), tm.float().numpy(), rtol=2e-3, atol=2e-3)
    # outside autocast nothing is converted
    assert F.matmul(mge.tensor(a), mge.tensor(b)).dtype == np.float32


def test_autocast_batchnorm_and_grad() -> None:
    bn = M.BatchNorm2d(3)
    conv = M.Conv2d(3, 3, 1)
    gm = GradManager().attach(conv.parameters())
    x = mge.tensor(np.random.default_rng(1).standard_normal((2, 3, 4, 4)).astype(np.float32))
    with amp.autocast():
        with gm:
            y = bn(conv(x))
            gm.backward(F.sum(y.astype("float32")))
    assert conv.weight.grad is not None and conv.weight.grad.dtype == np.float32
    assert np.isfinite(conv.weight.grad.numpy()).all()


@pytest.mark.parametrize("shape", [(1, 2, 3, 4), ()])
def test_grad_scaler_scales_and_unscales(shape: tuple[int, ...]) -> None:
    gm = GradManager()
    scaler = amp.GradScaler()
    data = np.random.default_rng(2).random(shape).astype(np.float32)
    for calc in (
        lambda x, y: 2 * (x + 2 * y) + 1,
        lambda x, y: 2 * (x + 1) + 1,
        lambda x, y: 2 * (x + y) + 1,
    ):
        x, y = mge.tensor(data), mge.tensor(data)
        gm.attach([x, y])
        with gm:
            scaler.backward(gm, calc(x, y), unscale_grad=False)
        np.testing.assert_equal(x.grad.numpy(), 2 * scaler.scale_factor)
        scaler.unscale([t for t in gm.attached_tensors() if t.grad is not None])
        np.testing.assert_equal(x.grad.numpy(), 2)


def test_grad_scaler_update_rules() -> None:
    s = amp.GradScaler(init_scale=8.0, growth_interval=2)
    s.update()
    assert s.scale_factor == 8.0
    s.update()
    assert s.scale_factor == 16.0
    p = mge.Parameter([1.0])
    p.grad = mge.tensor([np.inf])
    s.unscale([p])
    assert p.grad is None
    s.update()
    assert s.scale_factor == 8.0
    s.update(new_scale=3.0)
    assert s.state_dict()["scale_factor"] == 3.0
    t = amp.GradScaler()
    t.load_state_dict(s.state_dict())
    assert t.state_dict() == s.state_dict()


def test_convert_format_tags_nhwc_keeps_shapes() -> None:
    m = M.Sequential(M.Conv2d(4, 4, 3, groups=2), M.BatchNorm2d(4))
    shapes = {n: t.shape for n, t in m.named_tensors()}
    out = amp.convert_module_format(m, inplace=False)
    assert out is not m
    for n, t in out.named_tensors():
        assert t.shape == shapes[n]
        if t.ndim in (4, 5):
            assert t.format == "nhwc"
    x = mge.tensor(np.ones((1, 4, 2, 2), np.float32))
    assert amp.convert_tensor_format(x).format == "nhwc"
    v = mge.tensor([1.0])
    assert amp.convert_tensor_format(v) is v


def test_nhwc_tag_propagates_through_training_step() -> None:
    from compiler.core._config import set_auto_format_convert

    m = M.Sequential(M.Conv2d(3, 4, 3, padding=1, bias=False), M.BatchNorm2d(4))
    m = amp.convert_module_format(m)
    gm = GradManager().attach(m.parameters())
    scaler = amp.GradScaler()
    image = amp.convert_tensor_format(
        mge.tensor(np.random.default_rng(3).normal(size=(1, 3, 8, 8)), "float32")
    )

    @amp.autocast(enabled=True)
    def step(x):
        with gm:
            out = F.relu(m(x))
            scaler.backward(gm, F.sum(out.astype("float32")))
        return out

    for _ in range(2):
        assert step(image).format == "nhwc"
    assert mge.tensor(np.ones((1, 1, 2, 2), np.float32)).format == "default"
    prev = set_auto_format_convert(True)
    assert set_auto_format_convert(prev) is True
