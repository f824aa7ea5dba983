"""`make demo`: trace the seed ConvNet, compare the traced replay with eager, print its IR."""

from __future__ import annotations

import numpy as np

import compiler as xm
from compiler import jit
from compiler.hub.convnet import ConvNet


def main() -> None:
    net = ConvNet()
    net.eval()
    data = xm.tensor(np.random.default_rng(0).standard_normal((1, 1, 28, 28)).astype(np.float32))

    @jit.trace(symbolic=True, capture_as_const=True)
    def infer(data: xm.Tensor, *, net: ConvNet) -> xm.Tensor:
        return net(data)

    eager = net(data).numpy()
    first = infer(data, net=net).numpy()  # traces
    replay = infer(data, net=net).numpy()  # runs the recorded IR on the reference interpreter
    print("seed ConvNet: output shape", replay.shape)
    print("max |traced - eager| =", float(np.abs(replay - eager).max()))
    print("max |first call - eager| =", float(np.abs(first - eager).max()))
    print()
    print(infer.ir())


if __name__ == "__main__":
    main()
