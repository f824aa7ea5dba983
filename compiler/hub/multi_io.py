"""The golden corpus's two-input, two-output model: y = image * scale;
feat = relu(conv3x3 p1 3->8 (y)); score = mean(sigmoid(y), axis=(2, 3))."""

from __future__ import annotations

import compiler.functional as F
import compiler.module as M
from compiler.tensor import Tensor


class MultiIO(M.Module):
    """The golden corpus's two-input, two-output model: ``model(image, scale)`` scales the (N, 3, H, W)
    image, and returns relu(conv3x3 3->8 (y)) of shape (N, 8, H, W) and mean(sigmoid(y)) over H and
    W, (N, 3)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = M.Conv2d(3, 8, 3, padding=1)

    def forward(self, image: Tensor, scale: Tensor) -> tuple[Tensor, Tensor]:
        y = image * scale
        feat = F.relu(self.conv(y))
        score = F.mean(F.sigmoid(y), axis=(2, 3))
        return feat, score
