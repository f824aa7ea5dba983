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

``--ncnn`` compares instructions per inference with ncnn instead (issue 19): ResNet-18, MobileNetV2
and ShuffleNetV2 (1.0x) in float32 (``arm-nchw44``), float16 (``arm-fp16``) and int8 ResNet-18
(``arm-nchw44-dot``; ``int8-i8mm``: ``arm-nchw44-dot-i8mm``, the ``smmla`` convolutions), batch 1,
``--size`` x ``--size`` (224 by default), one thread. Both sides
count every instruction the emulated process executes, for 2 inferences minus 1 (loading, warm-up and
set-up cancel). ncnn is built from source beside the project (nothing of it is committed):
``$XMGE_NCNN_BUILD`` (default ``/work/ncnn-build``, holding ``benchmark/benchncnn``) and its source
tree's ``benchmark/models/*.param`` (``$XMGE_NCNN_SRC``, default ``/work/ncnn-src``); without them
the ncnn column is skipped with a note. ``benchncnn`` turns on float16 arithmetic wherever the CPU
has it, so its float32 figures run under ``-cpu cortex-a72`` (ARMv8.0: no FP16, no dot product) and
its float16 and int8 ones under ``-cpu max``, as xmge's.

    .venv/bin/python bench/bench_arm.py --ncnn [--size 64] [--ncnn-models resnet18,mobilenet_v2]

The ``wino`` column lists the Winograd tiles (``f6``, ``f4``, ``f2``: neon_winograd.py) the xmge build
ran its 3x3 stride-1 convolutions with (``-``: none; those stay on the register-blocked GEMM).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from backends.c.cross import count_instructions, defined_functions, toolchain_problem  # noqa: E402
from compiler.driver.compile import CompiledModel, compile  # noqa: E402
from compiler.progress import track  # noqa: E402


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


# --- against ncnn -------------------------------------------------------------------------------

# model -> (xmge hub module and constructor, ncnn param file)
NCNN_MODELS = {
    "resnet18": ("resnet:resnet18", "resnet18.param"),
    "mobilenet_v2": ("mobilenet_v2:mobilenet_v2", "mobilenet_v2.param"),
    "shufflenet_v2": ("shufflenet_v2:shufflenet_v2_x1_0", "shufflenet_v2.param"),
}
# precision -> (xmge target, qemu CPU for ncnn, models it is compared on, ncnn param override)
NCNN_MODES: dict[str, tuple[str, str, tuple[str, ...], dict[str, str]]] = {
    "fp32": ("arm-nchw44", "cortex-a72", tuple(NCNN_MODELS), {}),
    "fp16": ("arm-fp16", "max", tuple(NCNN_MODELS), {}),
    "int8": ("arm-nchw44-dot", "max", ("resnet18",), {"resnet18": "resnet18_int8.param"}),
    # the same int8 model with the ARMv8.6 matrix multiply (smmla) convolutions
    "int8-i8mm": ("arm-nchw44-dot-i8mm", "max", ("resnet18",), {"resnet18": "resnet18_int8.param"}),
}


def ncnn_paths() -> tuple[str, str] | str:
    """(benchncnn binary, param folder), or why ncnn cannot be compared."""
    build = os.environ.get("XMGE_NCNN_BUILD", "/work/ncnn-build")
    src = os.environ.get("XMGE_NCNN_SRC", "/work/ncnn-src")
    exe = os.path.join(build, "benchmark", "benchncnn")
    params = os.path.join(src, "benchmark", "models")
    if not os.path.isfile(exe):
        return f"no ncnn build at {build} (benchmark/benchncnn; set XMGE_NCNN_BUILD)"
    if not os.path.isdir(params):
        return f"no ncnn param files at {params} (set XMGE_NCNN_SRC)"
    return exe, params


def total_instructions(command: list[str], cpu: str = "max") -> int:
    """Every instruction the emulated process executes (``cpu`` other than ``max``: a later
    ``-cpu`` given to qemu through a wrapper, which overrides cross.py's ``-cpu max``)."""
    if cpu == "max":
        return count_instructions(command, set()).total
    from backends.c.cross import qemu

    with tempfile.TemporaryDirectory(prefix="xmge-qemu-cpu-") as d:
        wrapper = os.path.join(d, "qemu")
        with open(wrapper, "w") as f:
            # cross.py runs `QEMU -cpu max -d ... PROGRAM ...`: keep its first two words, then ours
            f.write(f'#!/bin/sh\na="$1"; b="$2"; shift 2\nexec {qemu()} "$a" "$b" -cpu {cpu} "$@"\n')
        os.chmod(wrapper, 0o755)
        old = os.environ.get("XMGE_QEMU_AARCH64")
        os.environ["XMGE_QEMU_AARCH64"] = wrapper
        try:
            return count_instructions(command, set()).total
        finally:
            if old is None:
                del os.environ["XMGE_QEMU_AARCH64"]
            else:
                os.environ["XMGE_QEMU_AARCH64"] = old


def xmge_per_inference(compiled: CompiledModel, x: np.ndarray) -> int:
    with tempfile.TemporaryDirectory(prefix="xmge-bench-arm-") as d:
        wpath, xpath = os.path.join(d, "w.bin"), os.path.join(d, "x.bin")
        with open(wpath, "wb") as f:
            f.write(compiled.weights)
        x.astype(np.float32).tofile(xpath)

        def run(n: int) -> int:
            cmd = [compiled.build.runner, wpath, "-n", str(n), "-w", "0", "-t", "1", "-i", xpath]
            return total_instructions(cmd)

        return run(2) - run(1)


def ncnn_per_inference(exe: str, param: str, size: int, cpu: str) -> int:
    # benchncnn links libstdc++ dynamically: qemu finds the AArch64 loader and libraries here
    os.environ.setdefault("QEMU_LD_PREFIX", "/usr/aarch64-linux-gnu")

    def run(loops: int) -> int:
        # benchncnn LOOPS THREADS POWERSAVE GPU COOLING_DOWN param=... shape=[w,h,c]
        cmd = [exe, str(loops), "1", "0", "-1", "0", f"param={param}", f"shape=[{size},{size},3]"]
        return total_instructions(cmd, cpu)

    return run(2) - run(1)


def compare_ncnn(args: argparse.Namespace) -> list[dict[str, Any]]:
    import importlib

    from compiler.quantization import quantize
    from compiler.random import seed

    paths = ncnn_paths()
    if isinstance(paths, str):
        print(f"bench_arm: ncnn column skipped: {paths}")
    rows = []
    head = f"{'model':14} {'precision':9} {'xmge target':16} {'xmge insns':>14} {'ncnn insns':>14}"
    head += f" {'ratio':>7} wino"
    print(f"{head}   (per inference, {args.size}x{args.size}, batch 1, 1 thread)")
    wanted = args.ncnn_models.split(",")
    for precision in args.precisions.split(","):
        target, cpu, names, override = NCNN_MODES[precision]
        for name in (m for m in names if m in wanted):
            ctor, param = NCNN_MODELS[name]
            seed(0)
            module, fn = ctor.split(":")
            net = getattr(importlib.import_module(f"compiler.hub.{module}"), fn)()
            net.eval()
            x = np.random.default_rng(0).random((1, 3, args.size, args.size), dtype=np.float32)
            model = quantize(net, [x]) if precision.startswith("int8") else net
            compiled = compile(model, target, [x])
            ours = xmge_per_inference(compiled, x)
            # distinct Winograd convolution kernels (neon_winograd.py), by tile: what 3x3 stride-1 layers ran
            wino = sorted(set(re.findall(r"static void conv2d_nchw44_winograd_\w+?_(f\d)_", compiled.source)))
            theirs = None
            if not isinstance(paths, str):
                exe, folder = paths
                param_path = os.path.join(folder, override.get(name, param))
                theirs = ncnn_per_inference(exe, param_path, args.size, cpu)
            ratio = f"{ours / theirs:.2f}x" if theirs else ""
            line = f"{name:14} {precision:9} {target:16} {ours:>14,} {theirs or 0:>14,} {ratio:>7}"
            line += f" {','.join(wino) or '-'}"
            print(line, flush=True)
            rows.append({"model": name, "precision": precision, "target": target, "size": args.size,
                         "xmge": ours, "ncnn": theirs, "winograd_tiles": wino})  # fmt: skip
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="convnet,mini_resnet,mobilenet_v2,shufflenet_v2")
    ap.add_argument("--targets", default="arm-nchw44,arm-nchw44-dot,arm-fp16")
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--ncnn", action="store_true", help="instructions per inference against ncnn")
    ap.add_argument("--ncnn-models", default=",".join(NCNN_MODELS))
    ap.add_argument("--precisions", default=",".join(NCNN_MODES))
    ap.add_argument("--size", type=int, default=224, help="input height and width (--ncnn)")
    args = ap.parse_args()
    problem = toolchain_problem()
    if problem:
        print(f"bench_arm: skipped: {problem}")
        return 0
    if args.ncnn:
        rows = compare_ncnn(args)
        if args.json:
            write_json(args.json, rows)
        return 0
    from compiler.quantization import quantize
    from compiler.random import seed

    zoo = models()
    rows = []
    print(f"{'model':14} {'target':16} {'build':7} {'kernel insns':>13} {'dot':>9} {'fp16':>9} {'neon':>10} "
          f"{'scalar':>10}  {'vs plain C':>10}")  # fmt: skip
    for name in track(args.models.split(","), "bench arm", detail=str):
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
        write_json(args.json, rows)
    return 0


def write_json(path: str, rows: list[dict[str, Any]]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rows, f, indent=2)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
