"""Writes one case of this folder with real MegEngine 1.13 (run with megengine-oracle's ``mgepy``):

    mgepy make_int8_mge.py OUT_DIR SEED HW

a MobileNetV2-style float net with random BatchNorm statistics, quantized WITH MEGENGINE'S OWN API
(quantize_qat with calibration_qconfig -> observers over 4 random batches -> quantize), traced and
dumped; ``inputs.npz``; and ``expected_<variant>.npz``: what MegEngine's GraphInference computes on
the file (the final float output and the int8 intermediate values the net returns: QADD,
QFUSE_ADD_RELU, QH_SWISH, QFUSE_ADD_H_SWISH, QMUL, ConvBias, Concat of different scales, average and
max pooling)."""
import os
import sys

import megengine as mge
import megengine.functional as F
import megengine.module as M
import numpy as np
from megengine import jit
from megengine.quantization import calibration_qconfig, enable_observer, quantize, quantize_qat
from megengine.utils.comp_graph_tools import GraphInference


class InvertedResidual(M.Module):
    def __init__(self, inp, oup, stride, expand):
        super().__init__()
        hidden = inp * expand
        self.use_res = stride == 1 and inp == oup
        self.pw = M.ConvBnRelu2d(inp, hidden, 1, bias=False) if expand != 1 else None
        self.dw = M.ConvBnRelu2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False)
        self.pl = M.ConvBn2d(hidden, oup, 1, bias=False)
        self.add = M.Elemwise("ADD") if self.use_res else None
    def forward(self, x):
        y = self.pw(x) if self.pw is not None else x
        y = self.pl(self.dw(y))
        return self.add(x, y) if self.use_res else y

class Net(M.Module):
    def __init__(self):
        super().__init__()
        self.quant = M.QuantStub()
        self.stem = M.ConvBnRelu2d(3, 16, 3, 2, 1, bias=False)
        self.blocks = M.Sequential(
            InvertedResidual(16, 16, 1, 1), InvertedResidual(16, 24, 2, 3), InvertedResidual(24, 24, 1, 3)
        )
        self.side = M.ConvBn2d(24, 24, 1, bias=False)
        self.add_relu = M.Elemwise("FUSE_ADD_RELU")
        self.hswish = M.Elemwise("H_SWISH")
        self.add_hswish = M.Elemwise("FUSE_ADD_H_SWISH")
        self.mul = M.Elemwise("MUL")
        self.branch = M.ConvBnRelu2d(24, 8, 3, 1, 1, bias=False)
        self.cat = M.Concat()
        self.last = M.ConvBnRelu2d(32, 64, 1, bias=False)
        self.fc = M.Linear(64, 10)
        self.dequant = M.DequantStub()
    def forward(self, x):
        x = self.quant(x)
        a = self.blocks(self.stem(x))
        s = self.side(a)
        b = self.add_relu(a, s)
        h = self.hswish(s)
        g = self.add_hswish(b, h)
        m = self.mul(g, b)
        c = self.cat([m, self.branch(g)], axis=1)
        p = F.avg_pool2d(c, 3, 2, 1)
        mx = F.max_pool2d(c, 2, 2)
        y = self.last(p)
        y = F.avg_pool2d(y, HW // 8)
        y = self.fc(F.flatten(y, 1))
        return self.dequant(y), a, s, b, h, g, m, c, p, mx

# NCHW44 variants are left out: xmge's .mge reader cannot read MegEngine's int8 NCHW44 dump of this net yet
VARIANTS = {"plain": {}}
HW = int(sys.argv[3]) if len(sys.argv) > 3 else 64

def main(out_dir, seed=0, hw=HW, make_net=None):
    """``make_net`` (default: this file's Net) builds the float net to quantize and dump."""
    rng = np.random.RandomState(seed)
    mge.random.seed(seed)
    net = (make_net or Net)()
    for m in net.modules():
        if isinstance(m, M.BatchNorm2d):
            m.running_mean[...] = (rng.randn(*m.running_mean.shape) * 0.1).astype("float32")
            m.running_var[...] = (rng.rand(*m.running_var.shape) + 0.5).astype("float32")
            m.bias[...] = (rng.randn(*m.bias.shape) * 0.1).astype("float32")
    net.eval()
    qat = quantize_qat(net, qconfig=calibration_qconfig)
    qat.eval()
    enable_observer(qat)
    for _ in range(4):
        qat(mge.tensor(rng.randn(2, 3, hw, hw).astype("float32")))
    q = quantize(qat)
    q.eval()
    @jit.trace(symbolic=True, capture_as_const=True)
    def infer(data):
        return q(data)
    x = rng.randn(2, 3, hw, hw).astype("float32")
    infer(mge.tensor(x))
    os.makedirs(out_dir, exist_ok=True)
    np.savez(os.path.join(out_dir, "inputs.npz"), data=x)
    for variant in VARIANTS:
        path = os.path.join(out_dir, variant + ".mge")
        infer.dump(path, arg_names=["data"], **VARIANTS[variant])
        out = GraphInference(path).run(inp_dict={"data": x})
        np.savez(os.path.join(out_dir, "expected_" + variant + ".npz"), **out)
        print(path, os.path.getsize(path), list(out))

if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0, HW)
