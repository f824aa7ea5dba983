"""Seed .mge files for bench/fuzz_mge.py dumped by xmge itself (tests/data/fuzz_seeds/).

Small zoo-style models (MobileNetV2 blocks, a ResNet with batch norm and a projection shortcut)
traced and dumped with different options, so the fuzzer also starts from files whose structure
xmge's own writer chose (operator order, fused ConvBias, NCHW88 layouts, float16 I/O, FBS v1).
Rerun to regenerate; the files are committed so a campaign is reproducible.

    python bench/fuzz_seeds.py
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

OUT = os.path.join(ROOT, "tests", "data", "fuzz_seeds")
OPTIONS: dict[str, dict[str, Any]] = {
    "plain": {},
    "fuse": {"enable_fuse_conv_bias_nonlinearity": True},
    "nchw88": {"enable_nchw88": True},
    "ioc16": {"enable_ioc16": True},
    "fbs_v1": {"dump_format": "FBS"},
}


def _models() -> dict[str, Callable[[], Any]]:
    from compiler.hub.mini_resnet import MiniResNet
    from compiler.hub.mobilenet_v2 import mobilenet_v2

    return {
        "mobilenet_v2": lambda: mobilenet_v2(
            num_classes=10, width_mult=0.25, inverted_residual_setting=[[1, 16, 1, 1], [6, 24, 2, 2]]
        ),
        "mini_resnet": lambda: MiniResNet(),
    }


def main() -> int:
    import compiler as xm
    from compiler import jit
    from compiler.random import seed

    os.makedirs(OUT, exist_ok=True)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    for name, build in _models().items():
        seed(0)
        model = build()
        model.eval()
        traced = jit.trace(lambda data, m=model: m(data), symbolic=True, capture_as_const=True)
        traced(xm.tensor(x))
        for variant, options in OPTIONS.items():
            buf = io.BytesIO()
            try:
                traced.dump(buf, arg_names=["data"], **options)
            except (ValueError, NotImplementedError) as exc:
                print(f"{name}/{variant}: skipped ({exc})")
                continue
            path = os.path.join(OUT, f"{name}_{variant}.mge")
            with open(path, "wb") as f:
                f.write(buf.getvalue())
            print(f"{path}: {len(buf.getvalue())} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
