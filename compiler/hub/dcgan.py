"""GAN generators of the zoo's ``official/vision/gan`` family.

* :class:`DCGANGenerator` — DCGAN (Radford et al., 2015): the noise vector is a 1x1 image grown
  by ``ConvTranspose2d(4, stride 2) + BatchNorm + ReLU`` stages to ``image_size``, with a Tanh on
  the last transposed convolution.
* :class:`WGANGenerator` — the zoo's CIFAR generator of its WGAN(-GP) and DCGAN trainers
  (``megengine_mimicry``'s ResNet generator): a linear layer to a 4x4 map, three residual
  ``GBlock``\\ s that upsample 2x (bilinear Resize) and a 3x3 conv; Tanh output (the zoo's DCGAN
  variant ends in a sigmoid: ``output="sigmoid"``).

Both map noise ``(N, nz)`` to images ``(N, 3, image_size, image_size)`` in [-1, 1] (or [0, 1]).
"""

from __future__ import annotations

import math
from typing import Any

import compiler.functional as F
import compiler.module as M
from compiler.tensor import Tensor

__all__ = ["DCGANGenerator", "WGANGenerator", "dcgan_generator", "wgan_generator", "dcgan_cifar_generator"]


class DCGANGenerator(M.Module):
    """DCGAN's generator: noise (N, nz) seen as a 1x1 image, grown by ConvTranspose2d + BatchNorm + ReLU
    stages that double the size and halve the channels (ngf at the last) to (N, channels, image_size,
    image_size) in [-1, 1] (Tanh); image_size a power of two >= 8."""

    def __init__(self, nz: int = 100, ngf: int = 64, image_size: int = 64, channels: int = 3) -> None:
        super().__init__()
        stages = int(math.log2(image_size)) - 2
        if image_size < 8 or 2 ** (stages + 2) != image_size:
            raise ValueError(f"image_size must be a power of two >= 8, got {image_size}")
        self.nz = nz
        width = ngf * 2 ** (stages - 1)
        # 1x1 -> 4x4, then each stage doubles H and W and halves the channels
        layers: list[M.Module] = [
            M.ConvTranspose2d(nz, width, 4, 1, 0, bias=False),
            M.BatchNorm2d(width),
            M.ReLU(),
        ]
        for _ in range(stages - 1):
            layers += [
                M.ConvTranspose2d(width, width // 2, 4, 2, 1, bias=False),
                M.BatchNorm2d(width // 2),
                M.ReLU(),
            ]
            width //= 2
        layers += [M.ConvTranspose2d(width, channels, 4, 2, 1, bias=False), M.Tanh()]
        self.main = M.Sequential(*layers)
        for module in self.modules():
            # DCGAN's initialisation: N(0, 0.02) weights, BN scale N(1, 0.02)
            if isinstance(module, M.ConvTranspose2d):
                M.init.normal_(module.weight, 0.0, 0.02)
            elif isinstance(module, M.BatchNorm2d):
                M.init.normal_(module.weight, 1.0, 0.02)
                M.init.zeros_(module.bias)

    def forward(self, z: Tensor) -> Tensor:
        return self.main(z.reshape(z.shape[0], self.nz, 1, 1))


class GBlock(M.Module):
    """Pre-activation residual block: BN-ReLU-(upsample)-conv3x3-BN-ReLU-conv3x3, plus a 1x1 conv
    shortcut (after the same upsampling) when the shape changes."""

    def __init__(self, in_channels: int, out_channels: int, upsample: bool = False) -> None:
        super().__init__()
        self.upsample = upsample
        self.learnable_sc = in_channels != out_channels or upsample
        self.b1 = M.BatchNorm2d(in_channels)
        self.c1 = M.Conv2d(in_channels, out_channels, 3, 1, 1)
        self.b2 = M.BatchNorm2d(out_channels)
        self.c2 = M.Conv2d(out_channels, out_channels, 3, 1, 1)
        M.init.xavier_uniform_(self.c1.weight, math.sqrt(2.0))
        M.init.xavier_uniform_(self.c2.weight, math.sqrt(2.0))
        if self.learnable_sc:
            self.c_sc = M.Conv2d(in_channels, out_channels, 1, 1, 0)
            M.init.xavier_uniform_(self.c_sc.weight, 1.0)

    def _up(self, x: Tensor) -> Tensor:
        if not self.upsample:
            return x
        return F.vision.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)

    def forward(self, x: Tensor) -> Tensor:
        h = self.c1(self._up(F.relu(self.b1(x))))
        h = self.c2(F.relu(self.b2(h)))
        shortcut = self.c_sc(self._up(x)) if self.learnable_sc else x
        return h + shortcut


class WGANGenerator(M.Module):
    """The zoo's CIFAR generator (ResNet style): a linear layer maps noise (N, nz) to a bottom_width x
    bottom_width map of ngf channels, num_blocks residual blocks each upsample 2x, then BatchNorm,
    ReLU and a 3x3 convolution give (N, 3, H, W) images through Tanh (or Sigmoid with
    output='sigmoid')."""

    def __init__(
        self, nz: int = 128, ngf: int = 256, bottom_width: int = 4, num_blocks: int = 3, output: str = "tanh"
    ) -> None:
        super().__init__()
        if output not in ("tanh", "sigmoid"):
            raise ValueError(f"output must be 'tanh' or 'sigmoid', got {output!r}")
        self.nz, self.ngf, self.bottom_width, self.output = nz, ngf, bottom_width, output
        self.l1 = M.Linear(nz, bottom_width**2 * ngf)
        # the zoo names the blocks block2..block4
        self.blocks = [GBlock(ngf, ngf, upsample=True) for _ in range(num_blocks)]
        for i, block in enumerate(self.blocks, start=2):
            setattr(self, f"block{i}", block)
        self.b5 = M.BatchNorm2d(ngf)
        self.c5 = M.Conv2d(ngf, 3, 3, 1, 1)
        M.init.xavier_uniform_(self.l1.weight, 1.0)
        M.init.xavier_uniform_(self.c5.weight, 1.0)

    def forward(self, z: Tensor) -> Tensor:
        h = self.l1(z).reshape(z.shape[0], self.ngf, self.bottom_width, self.bottom_width)
        for block in self.blocks:
            h = block(h)
        h = self.c5(F.relu(self.b5(h)))
        return F.tanh(h) if self.output == "tanh" else F.sigmoid(h)


def dcgan_generator(**kwargs: Any) -> DCGANGenerator:
    """DCGAN's generator with its paper's sizes: noise (N, 100) to (N, 3, 64, 64) images in [-1, 1],
    ngf=64; keywords go to DCGANGenerator."""
    return DCGANGenerator(**kwargs)


def wgan_generator(**kwargs: Any) -> WGANGenerator:
    """The zoo's WGAN(-GP) CIFAR-10 generator: noise (N, 128) to (N, 3, 32, 32) images in [-1, 1]
    (tanh), ngf=256, grown from 4x4 by three upsampling residual blocks; keywords go to WGANGenerator."""
    return WGANGenerator(**kwargs)


def dcgan_cifar_generator(**kwargs: Any) -> WGANGenerator:
    """The zoo's DCGAN CIFAR-10 generator: the same network with a sigmoid output."""
    return WGANGenerator(**{"output": "sigmoid", **kwargs})
