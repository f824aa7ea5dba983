"""The golden corpus's mini ResNet: stem conv3x3 3->16 + BN + relu; layer1: 2 BasicBlocks(16);
layer2: BasicBlock(16->32, stride 2, 1x1 projection + BN) + BasicBlock(32); AvgPool2d(16); Linear 32->10.

Parameter names match MegEngine's (``conv1.weight``, ``layer2.0.downsample.1.running_var``, ...) so
``weights.npz`` state dicts load directly.
"""

from __future__ import annotations

import compiler.functional as F
import compiler.module as M
from compiler.tensor import Tensor


class BasicBlock(M.Module):
    """The mini ResNet's block: conv3x3 + BN + ReLU, conv3x3 + BN, plus the shortcut (a strided 1x1
    convolution + BN when the shape changes), then ReLU."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = M.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = M.BatchNorm2d(cout)
        self.conv2 = M.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = M.BatchNorm2d(cout)
        self.downsample = (
            M.Sequential(M.Conv2d(cin, cout, 1, stride=stride, bias=False), M.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else None
        )

    def forward(self, x: Tensor) -> Tensor:
        # the shortcut first, as in MegEngine's model: it fixes the operator order of the dump
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(identity + out)


class MiniResNet(M.Module):
    """The golden corpus's small ResNet for 32x32 images: a 3x3 stem to 16 channels, two BasicBlocks of
    16, two of 32 (the first with stride 2), 16x16 average pooling and a linear classifier; (N, 3,
    32, 32) gives (N, num_classes) logits."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = M.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = M.BatchNorm2d(16)
        self.layer1 = M.Sequential(BasicBlock(16, 16), BasicBlock(16, 16))
        self.layer2 = M.Sequential(BasicBlock(16, 32, stride=2), BasicBlock(32, 32))
        self.pool = M.AvgPool2d(16)
        self.fc = M.Linear(32, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer2(self.layer1(x))
        x = F.flatten(self.pool(x), 1)
        return self.fc(x)
