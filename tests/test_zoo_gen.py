"""The zoo's GAN generators in ``compiler.hub.dcgan``: small configs trace, dump in three variants
and read back; the DCGAN generator matches a torch.nn.functional re-implementation with the same
weights, and the residual generator's GBlock matches torch too."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import compiler as xm
import compiler.module as M
from compiler import hub
from tests.test_zoo_models import _check_dumps

SMALL: dict[str, dict[str, Any]] = {
    "dcgan_generator": {"nz": 16, "ngf": 8, "image_size": 32},
    "wgan_generator": {"nz": 16, "ngf": 16},
    "dcgan_cifar_generator": {"nz": 16, "ngf": 8, "num_blocks": 2},
}
OUT_SIZE = {"dcgan_generator": 32, "wgan_generator": 32, "dcgan_cifar_generator": 16}


def _noise(n: int = 2, nz: int = 16) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((n, nz)).astype(np.float32)


def _randomize_batch_norm_statistics(model: M.Module, seed: int = 0) -> None:
    """Eval-mode BN with non-trivial running statistics, so the checks see them."""
    rng = np.random.default_rng(seed)
    for module in model.modules():
        if isinstance(module, M.BatchNorm2d):
            shape = module.running_mean.shape
            module.running_mean._reset(rng.normal(0, 0.1, shape).astype(np.float32))
            module.running_var._reset(rng.uniform(0.5, 1.5, shape).astype(np.float32))
            module.bias._reset(rng.normal(0, 0.1, module.bias.shape).astype(np.float32))


@pytest.mark.parametrize("entry", sorted(SMALL))
def test_generator_traces_dumps_and_reads_back(entry: str) -> None:
    model = hub.load("megengine/models", entry, **SMALL[entry])
    _randomize_batch_norm_statistics(model)
    (image,) = _check_dumps(model, [_noise()])
    size = OUT_SIZE[entry]
    assert image.shape == (2, 3, size, size)
    low = -1.0 if entry != "dcgan_cifar_generator" else 0.0
    assert image.min() >= low and image.max() <= 1.0


def _t(x: Any) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x.numpy()))


def _torch_bn(x: torch.Tensor, bn: M.BatchNorm2d) -> torch.Tensor:
    stats = (bn.running_mean, bn.running_var, bn.weight, bn.bias)
    mean, var, weight, bias = (_t(p).reshape(-1) for p in stats)
    return TF.batch_norm(x, mean, var, weight, bias, training=False, eps=bn.eps)


def test_dcgan_generator_matches_torch() -> None:
    model = hub.load("megengine/models", "dcgan_generator", **SMALL["dcgan_generator"])
    _randomize_batch_norm_statistics(model)
    model.eval()
    z = _noise()
    got = model(xm.tensor(z)).numpy()

    h = torch.from_numpy(z).reshape(2, 16, 1, 1)
    for layer in model.main:
        if isinstance(layer, M.ConvTranspose2d):
            # MegEngine's transposed-conv weight is (IC, OC, KH, KW), as torch's
            h = TF.conv_transpose2d(h, _t(layer.weight), None, layer.stride, layer.padding)
        elif isinstance(layer, M.BatchNorm2d):
            h = _torch_bn(h, layer)
        elif isinstance(layer, M.ReLU):
            h = TF.relu(h)
        else:
            assert isinstance(layer, M.Tanh)
            h = torch.tanh(h)
    np.testing.assert_allclose(got, h.numpy(), rtol=1e-4, atol=1e-5)


def test_residual_generator_block_matches_torch() -> None:
    model = hub.load("megengine/models", "wgan_generator", **SMALL["wgan_generator"])
    _randomize_batch_norm_statistics(model)
    model.eval()
    block = model.block2
    x = np.random.default_rng(2).standard_normal((2, 16, 4, 4)).astype(np.float32)
    got = block(xm.tensor(x)).numpy()

    def up(t: torch.Tensor) -> torch.Tensor:
        return TF.interpolate(t, scale_factor=2, mode="bilinear", align_corners=False)

    def conv(t: torch.Tensor, c: M.Conv2d) -> torch.Tensor:
        return TF.conv2d(t, _t(c.weight), _t(c.bias).reshape(-1), padding=c.padding)

    tx = torch.from_numpy(x)
    h = conv(up(TF.relu(_torch_bn(tx, block.b1))), block.c1)
    h = conv(TF.relu(_torch_bn(h, block.b2)), block.c2)
    want = h + conv(up(tx), block.c_sc)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)


def test_bad_generator_config_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="power of two"):
        hub.load("megengine/models", "dcgan_generator", image_size=48)
    with pytest.raises(ValueError, match="'tanh' or 'sigmoid'"):
        hub.load("megengine/models", "wgan_generator", output="softmax")


def test_hub_lists_the_generators() -> None:
    assert {"DCGANGenerator", "WGANGenerator", *SMALL} <= set(hub.list("megengine/models"))


@pytest.mark.slow
def test_default_dcgan_generator_matches_its_dump() -> None:
    model = hub.load("megengine/models", "dcgan_generator")
    (image,) = _check_dumps(model, [_noise(2, 100)])
    assert image.shape == (2, 3, 64, 64)
