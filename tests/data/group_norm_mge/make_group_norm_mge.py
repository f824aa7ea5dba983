"""Regenerate group_norm.mge and its npz files with real MegEngine 1.13:
``/work/shared/tools/megengine-oracle/mgepy tests/data/group_norm_mge/make_group_norm_mge.py``.

A conv, M.GroupNorm (affine, 4 groups), ReLU, M.InstanceNorm (affine) and M.GroupNorm without
affine, traced and dumped with ``no_change_graph=True`` so the file keeps MegEngine's GroupNorm
and InstanceNorm operators (the default dump would replace them with Reduce/Elemwise subgraphs).
"""

from __future__ import annotations

import os

import megengine as mge
import megengine.functional as F
import megengine.module as M
import numpy as np
from megengine.jit import trace

HERE = os.path.dirname(os.path.abspath(__file__))


class Head(M.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = M.Conv2d(3, 8, 3, padding=1)
        self.gn = M.GroupNorm(4, 8, affine=True)
        self.inorm = M.InstanceNorm(8, affine=True)
        self.gn_plain = M.GroupNorm(2, 8, affine=False)

    def forward(self, x: mge.Tensor) -> mge.Tensor:
        y = F.relu(self.gn(self.conv(x)))
        return self.gn_plain(self.inorm(y) * 2.0 + y)


def main() -> None:
    rng = np.random.default_rng(0)
    net = Head()
    # non-trivial affine parameters, so that a weight/bias mix-up shows
    for m in (net.gn, net.inorm):
        m.weight[:] = rng.uniform(0.5, 1.5, m.weight.shape).astype(np.float32)
        m.bias[:] = rng.uniform(-0.5, 0.5, m.bias.shape).astype(np.float32)
    net.eval()

    @trace(symbolic=True, capture_as_const=True)
    def fn(data: mge.Tensor) -> mge.Tensor:
        return net(data)

    x = rng.standard_normal((2, 3, 6, 5)).astype(np.float32) * 3 + 1
    out = fn(mge.tensor(x)).numpy()
    fn.dump(os.path.join(HERE, "group_norm.mge"), arg_names=["data"], no_change_graph=True)
    np.savez(os.path.join(HERE, "input.npz"), data=x)
    np.savez(os.path.join(HERE, "output.npz"), out=out)


if __name__ == "__main__":
    main()
