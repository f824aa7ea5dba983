"""The seed ConvNet from MegEngine's save/load guide (MNIST, 1x28x28 input)."""

from __future__ import annotations

import compiler.functional as F
import compiler.module as M
from compiler.tensor import Tensor


class ConvNet(M.Module):
    """The seed ConvNet of MegEngine's save/load guide for MNIST: two 5x5 convolutions (10 and 20
    channels) each followed by 2x2 max pooling, then Linear 320->50, ReLU and Linear 50->10; (N, 1,
    28, 28) images give (N, 10) logits."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = M.Conv2d(1, 10, 5)
        self.pool1 = M.MaxPool2d(2)
        self.conv2 = M.Conv2d(10, 20, 5)
        self.pool2 = M.MaxPool2d(2)
        self.fc1 = M.Linear(320, 50)
        self.relu1 = M.ReLU()
        self.fc2 = M.Linear(50, 10)

    def forward(self, x: Tensor) -> Tensor:
        x = self.pool1(self.conv1(x))
        x = self.pool2(self.conv2(x))
        x = F.flatten(x, 1)
        x = self.relu1(self.fc1(x))
        x = self.fc2(x)
        return x
