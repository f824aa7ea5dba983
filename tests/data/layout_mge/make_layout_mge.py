"""Writes this folder with real MegEngine 1.13 (run it with megengine-oracle's ``mgepy``):
a float32 MobileNetV2-style net (stem, inverted residual blocks with ReLU6 and a residual ADD, a
stride-2 block, average pool, linear) dumped with each layout option, its inputs, and the outputs
MegEngine's GraphInference computes on each file (MegEngine's Lite crashes on some x86 NCHW44
files)."""

import os
import sys

import megengine as mge
import megengine.functional as F
import megengine.module as M
import numpy as np
from megengine import jit
from megengine.utils.comp_graph_tools import GraphInference

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = {
    "plain": {},
    "fuse": {"enable_fuse_conv_bias_nonlinearity": True},
    "nchw44": {"enable_nchw44": True},
    "nchw44_fuse": {"enable_nchw44": True, "enable_fuse_conv_bias_nonlinearity": True},
    "nchw88": {"enable_nchw88": True},
    "nchw44_dot": {"enable_nchw44_dot": True},
}


class InvertedResidual(M.Module):
    def __init__(self, inp, oup, stride, expand):
        super().__init__()
        hidden = inp * expand
        self.use_res = stride == 1 and inp == oup
        self.pw = M.ConvBnRelu2d(inp, hidden, 1, bias=False) if expand != 1 else None
        self.dw = M.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False)
        self.dw_bn = M.BatchNorm2d(hidden)
        self.pl = M.Conv2d(hidden, oup, 1, bias=False)
        self.pl_bn = M.BatchNorm2d(oup)

    def forward(self, x):
        y = F.clip(self.pw(x), 0, 6) if self.pw is not None else x
        y = F.clip(self.dw_bn(self.dw(y)), 0, 6)
        y = self.pl_bn(self.pl(y))
        return x + y if self.use_res else y


class MobileBlocks(M.Module):
    def __init__(self):
        super().__init__()
        self.stem = M.Conv2d(3, 16, 3, 2, 1, bias=False)
        self.stem_bn = M.BatchNorm2d(16)
        self.blocks = M.Sequential(
            InvertedResidual(16, 16, 1, 1),
            InvertedResidual(16, 24, 2, 3),
            InvertedResidual(24, 24, 1, 3),
        )
        self.fc = M.Linear(24, 10)

    def forward(self, x):
        x = F.clip(self.stem_bn(self.stem(x)), 0, 6)
        x = self.blocks(x)
        x = F.avg_pool2d(x, 8)
        return self.fc(F.flatten(x, 1))


def main():
    rng = np.random.RandomState(0)
    net = MobileBlocks()
    for m in net.modules():
        if isinstance(m, M.BatchNorm2d):
            m.running_mean[...] = (rng.randn(*m.running_mean.shape) * 0.1).astype("float32")
            m.running_var[...] = (rng.rand(*m.running_var.shape) + 0.5).astype("float32")
            m.bias[...] = (rng.randn(*m.bias.shape) * 0.1).astype("float32")
    net.eval()

    @jit.trace(symbolic=True, capture_as_const=True)
    def infer(data):
        return net(data)

    x = rng.randn(1, 3, 32, 32).astype("float32")
    infer(mge.tensor(x))
    np.savez(os.path.join(HERE, "inputs.npz"), data=x)
    for name, kwargs in VARIANTS.items():
        path = os.path.join(HERE, name + ".mge")
        infer.dump(path, arg_names=["data"], **kwargs)
        out = GraphInference(path).run(inp_dict={"data": x})
        np.savez(os.path.join(HERE, "expected_" + name + ".npz"), **out)
        print(name, os.path.getsize(path), list(out))


if __name__ == "__main__":
    sys.exit(main())
