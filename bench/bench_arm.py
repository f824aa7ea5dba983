"""Instruction counts of the ARM builds under qemu, against portable-C builds of the same kernels.

There is no ARM CPU here, so timings mean nothing; what an emulated AArch64 core executes does. For
each model and ARM target, the model is compiled twice: with its intrinsic templates (NEON,
``sdot``, FP16) and with ``+plain-c`` (the same templates rendered as scalar C, gcc's vectoriser
off). Each runner executes one inference under ``qemu-aarch64 -cpu max`` with qemu's translation log
(Debian's qemu has no ``libinsn.so`` plugin); instructions are counted in the functions of the
generated ``model.c`` (the kernels; the runtime, libc and the runner's I/O excluded) and split into
``dot`` (sdot/udot), ``fp16`` (half-precision arithmetic), ``neon`` (other vector-register
instructions) and ``scalar``.

    .venv/bin/python bench/bench_arm.py [--models convnet,mini_resnet,mobilenet_v2,shufflenet_v2]
                                        [--targets arm-nchw44,arm-nchw44-dot,arm-fp16] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from backends.c.cross import count_instructions, defined_functions, toolchain_problem  # noqa: E402
from compiler.driver.compile import CompiledModel, compile  # noqa: E402


def models() -> dict[str, tuple[Any, tuple[int, ...]]]:
    from compiler.hub.convnet import ConvNet
    from compiler.hub.mini_resnet import MiniResNet
    from compiler.hub.mobilenet_v2 import mobilenet_v2
    from compiler.hub.shufflenet_v2 import shufflenet_v2_x0_5

    return {
        "convnet": (ConvNet, (1, 1, 28, 28)),
        "mini_resnet": (MiniResNet, (1, 3, 32, 32)),
        "mobilenet_v2": (lambda: mobilenet_v2(width_mult=0.5, num_classes=10), (1, 3, 64, 64)),
        "shufflenet_v2": (lambda: shufflenet_v2_x0_5(num_classes=10), (1, 3, 64, 64)),
    }


def count(compiled: CompiledModel, x: np.ndarray) -> dict[str, int]:
    with tempfile.TemporaryDirectory(prefix="xmge-bench-arm-") as d:
        wpath, xpath = os.path.join(d, "w.bin"), os.path.join(d, "x.bin")
        with open(wpath, "wb") as f:
            f.write(compiled.weights)
        x.astype(np.float32).tofile(xpath)
        cmd = [compiled.build.runner, wpath, "-n", "1", "-w", "0", "-t", "1", "-i", xpath]
        got = count_instructions(cmd, defined_functions(compiled.source))
    kernels = sum(got.per_class.values())
    return {
        "total": got.total,
        "kernels": kernels,
        **{k: got.per_class.get(k, 0) for k in ("dot", "fp16", "neon", "scalar")},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="convnet,mini_resnet,mobilenet_v2,shufflenet_v2")
    ap.add_argument("--targets", default="arm-nchw44,arm-nchw44-dot,arm-fp16")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    problem = toolchain_problem()
    if problem:
        print(f"bench_arm: skipped: {problem}")
        return 0
    from compiler.quantization import quantize
    from compiler.random import seed

    zoo = models()
    rows = []
    print(f"{'model':14} {'target':16} {'build':7} {'kernel insns':>13} {'dot':>9} {'fp16':>9} {'neon':>10} "
          f"{'scalar':>10}  {'vs plain C':>10}")  # fmt: skip
    for name in args.models.split(","):
        make, shape = zoo[name]
        seed(0)
        net = make()
        net.eval()
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        qnet = None
        for target in args.targets.split(","):
            if "dot" in target and qnet is None:
                qnet = quantize(net, [x])
            model = qnet if "dot" in target else net
            fast = count(compile(model, target, [x]), x)
            plain = count(compile(model, target + "+plain-c", [x]), x)
            for build, c in (("simd", fast), ("plain-c", plain)):
                ratio = f"{plain['kernels'] / c['kernels']:.2f}x" if build == "simd" else ""
                print(f"{name:14} {target:16} {build:7} {c['kernels']:>13,} {c['dot']:>9,} {c['fp16']:>9,} "
                      f"{c['neon']:>10,} {c['scalar']:>10,}  {ratio:>10}")  # fmt: skip
                rows.append({"model": name, "target": target, "build": build, **c})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
