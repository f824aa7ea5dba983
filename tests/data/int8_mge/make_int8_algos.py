"""Writes the ``algos_*`` case of this folder with real MegEngine 1.13 (run with megengine-oracle's
``mgepy``):

    mgepy make_int8_algos.py OUT_DIR

an int8 net whose convolutions fall into each class of MegEngine's x86 int8 ConvBias algorithms as
``dnn/src/x86/conv_bias`` selects them: the AVX2 direct kernels (filter 2/3/5/7, stride 1 and 2, at most
128 channels), the channel-wise AVX2 kernels (3x3 and 5x5, stride 1 and 2), the oneDNN matmul and
convolution algorithms (1x1; both channel counts above 128), and the im2col fallback (dilation,
groups, 1x1 with stride). ``expected_plain.npz`` is what GraphInference computes on the dump, on the
CPU named in ``cpu.txt``: MegEngine picks among these by the CPU's features (AVX2, AVX-512 VNNI), so
a case made on one vendor's CPU is checked against xmge on every other."""
import os
import platform
import sys

import make_int8_mge  # the same quantize-trace-dump-run steps as the seed cases
import megengine.functional as F
import megengine.module as M


class Net(M.Module):
    def __init__(self):
        super().__init__()
        self.quant = M.QuantStub()
        self.stem7 = M.ConvBnRelu2d(3, 16, 7, 2, 3)  # AVX2 direct, stride 2, filter 7
        self.direct5 = M.ConvBn2d(16, 16, 5, 1, 2)  # AVX2 direct, stride 1, filter 5
        self.dw3 = M.ConvBnRelu2d(16, 16, 3, 1, 1, groups=16)  # channel-wise stride 1
        self.dw5s2 = M.ConvBnRelu2d(16, 16, 5, 2, 2, groups=16)  # channel-wise stride 2
        self.expand = M.ConvBnRelu2d(16, 136, 1)  # 1x1: oneDNN matmul
        self.wide3 = M.ConvBn2d(136, 136, 3, 1, 1)  # both > 128 channels: direct not preferred
        self.wide3s2 = M.ConvBnRelu2d(136, 136, 3, 2, 1)
        self.group = M.ConvBnRelu2d(136, 136, 1, groups=4)
        self.dilated = M.ConvBn2d(136, 32, 3, 1, 2, dilation=2)  # im2col fallback
        self.pw_s2 = M.ConvBn2d(32, 24, 1, 2)  # 1x1 with stride
        self.add_relu = M.Elemwise("FUSE_ADD_RELU")
        self.fc = M.Linear(24, 10)
        self.dequant = M.DequantStub()

    def forward(self, x):
        x = self.quant(x)
        a = self.stem7(x)
        b = self.direct5(a)
        c = self.add_relu(a, b)
        d = self.dw5s2(self.dw3(c))
        e = self.expand(d)
        f = self.wide3(e)
        g = self.wide3s2(self.add_relu(e, f))
        h = self.dilated(self.group(g))
        i = self.pw_s2(h)
        y = self.fc(F.flatten(F.avg_pool2d(i, 2), 1))
        return self.dequant(y), a, b, c, d, e, f, g, h, i


def main(out_dir: str, seed: int = 3, hw: int = 32) -> None:  # hw 32: the last map is 2x2
    make_int8_mge.main(out_dir, seed, hw, make_net=Net)  # quantize, trace, dump, GraphInference
    first_cpu = open("/proc/cpuinfo").read().split("\n\n")[0].splitlines()
    info = {k.strip(): v.strip() for k, v in (ln.split(":", 1) for ln in first_cpu if ":" in ln)}
    cpu, flags = info.get("model name", "?"), info.get("flags", "").split()
    vnni, amx = "avx512_vnni" in flags, "amx_tile" in flags
    with open(os.path.join(out_dir, "cpu.txt"), "w") as f:
        f.write(f"{cpu} ({platform.machine()}); avx512_vnni={vnni} amx={amx}\n")


if __name__ == "__main__":
    main(sys.argv[1])
