"""xmge's generated x86 code against ONNX Runtime and PyTorch on the CPU, side by side in one run.

    python bench/bench_x86.py [--models resnet18,resnet50] [--threads 1,2] [--size 224] [--iters 20]

For each model (batch 1, float32): trace, compile for the host's best x86 target (compile time
reported), export the *same* graph and weights to ONNX (built from xmge's optimised tensor IR with the
``onnx`` package, so every runtime computes the identical function), run it in ONNX Runtime, and run
the same graph op by op with PyTorch's CPU kernels. Prints median latencies, ratios (xmge / ORT, lower
is better), GFLOP/s, and the machine's measured single-core FMA peak (a register-only FMA loop compiled
for the same ISA). Models the hub does not define are skipped with a note.
"""

from __future__ import annotations

import argparse
import ctypes
import math
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from xdsl.dialects import func  # noqa: E402
from xdsl.dialects.builtin import ModuleOp, TensorType  # noqa: E402

from compiler.compile import benchmark, compile  # noqa: E402
from compiler.targets import host_target  # noqa: E402
from dialects import enums  # noqa: E402
from dialects import tensor as T  # noqa: E402

E = enums.ElemwiseMode


# ----------------------------------------------------------------------------------------------
# Models


def make_model(name: str) -> Any:
    from compiler.hub import resnet

    if hasattr(resnet, name):
        net = getattr(resnet, name)()
    else:
        try:
            import importlib

            mod = importlib.import_module(f"compiler.hub.{name}")
            net = getattr(mod, name)()
        except (ImportError, AttributeError):
            return None
    rng = np.random.default_rng(0)
    for pname, t in net.named_tensors():
        if "running_var" in pname:
            t._reset(rng.uniform(0.5, 2.0, t.shape).astype(np.float32))
        elif "running_mean" in pname or pname.endswith("bias"):
            t._reset(rng.uniform(-0.1, 0.1, t.shape).astype(np.float32))
    net.eval()
    return net


def conv_flops(module: ModuleOp) -> float:
    """Multiply-adds x 2 of convolutions and matrix products in the tensor IR."""
    total = 0.0
    for op in module.walk():
        if isinstance(op, T.ConvolutionOp | T.ConvBiasOp):
            w = op.operands[1].type
            out = op.results[0].type
            assert isinstance(w, TensorType) and isinstance(out, TensorType)
            ws = w.get_shape()
            per_out = math.prod(ws[-3:])  # ICg * FH * FW
            total += 2.0 * math.prod(out.get_shape()) * per_out
        elif isinstance(op, T.MatrixMulOp):
            a, out = op.operands[0].type, op.results[0].type
            assert isinstance(a, TensorType) and isinstance(out, TensorType)
            k = a.get_shape()[0] if op.params()["transpose_a"] else a.get_shape()[-1]
            total += 2.0 * math.prod(out.get_shape()) * k
    return total


# ----------------------------------------------------------------------------------------------
# The same graph in ONNX and in PyTorch


def _fn(module: ModuleOp) -> func.FuncOp:
    return next(op for op in module.ops if isinstance(op, func.FuncOp))


def to_onnx(module: ModuleOp, path: str) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    fn = _fn(module)
    names: dict[Any, str] = {}
    nodes, inits = [], []
    counter = iter(range(1 << 30))

    def name(v: Any) -> str:
        if v not in names:
            names[v] = f"v{next(counter)}"
        return names[v]

    def const(array: np.ndarray) -> str:
        n = f"c{next(counter)}"
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array), n))
        return n

    inputs = [
        helper.make_tensor_value_info(name(a), TensorProto.FLOAT, list(a.type.get_shape()))  # type: ignore[attr-defined]
        for a in fn.body.block.args
    ]
    binary = {E.ADD: "Add", E.SUB: "Sub", E.MUL: "Mul", E.TRUE_DIV: "Div", E.MAX: "Max", E.MIN: "Min"}
    for op in fn.body.block.ops:
        if isinstance(op, func.ReturnOp):
            outputs = [
                helper.make_tensor_value_info(name(v), TensorProto.FLOAT, list(v.type.get_shape()))  # type: ignore[attr-defined]
                for v in op.arguments
            ]
            continue
        if isinstance(op, T.ConstOp):
            names[op.output] = const(op.numpy())
            continue
        p = op.params() if isinstance(op, T.MgbOp) else {}
        ins = [name(v) for v in op.operands]
        out = name(op.results[0])
        if isinstance(op, T.ConvolutionOp | T.ConvBiasOp):
            w = op.operands[1].owner.numpy()  # type: ignore[union-attr]
            groups = 1
            if p["sparse"] == enums.ConvSparse.GROUP:
                groups = w.shape[0]
                w = w.reshape(-1, *w.shape[2:])
            conv_in = [ins[0], const(w)]
            extra = list(op.operands[2:])
            if extra and math.prod(extra[0].type.get_shape()) == w.shape[0]:  # type: ignore[attr-defined]
                conv_in.append(const(extra[0].owner.numpy().reshape(-1)))  # type: ignore[union-attr]
                extra = extra[1:]
            y = (
                out
                if not extra
                and p.get("nonline_mode", enums.NonlineMode.IDENTITY) == enums.NonlineMode.IDENTITY
                else f"t{next(counter)}"
            )
            ph, pw = p["padding"]
            nodes.append(
                helper.make_node(
                    "Conv", conv_in, [y], strides=list(p["stride"]), pads=[ph, pw, ph, pw],
                    dilations=list(p["dilation"]), group=groups,
                )
            )  # fmt: skip
            for v in extra:
                z = f"t{next(counter)}"
                nodes.append(helper.make_node("Add", [y, name(v)], [z]))
                y = z
            nl = p.get("nonline_mode", enums.NonlineMode.IDENTITY)
            if nl == enums.NonlineMode.RELU:
                nodes.append(helper.make_node("Relu", [y], [out]))
            elif y != out:
                nodes.append(helper.make_node("Identity", [y], [out]))
        elif isinstance(op, T.ElemwiseOp):
            mode = p["mode"]
            if mode in binary:
                nodes.append(helper.make_node(binary[mode], ins, [out]))
            elif mode == E.FUSE_ADD_RELU:
                t = f"t{next(counter)}"
                nodes += [helper.make_node("Add", ins, [t]), helper.make_node("Relu", [t], [out])]
            elif mode == E.RELU:
                nodes.append(helper.make_node("Relu", ins, [out]))
            else:
                raise NotImplementedError(f"ONNX export of elemwise {mode}")
        elif isinstance(op, T.PoolingOp):
            ph, pw = p["padding"]
            kind = "MaxPool" if p["mode"] == enums.PoolingMode.MAX else "AveragePool"
            attrs: dict[str, Any] = {
                "kernel_shape": list(p["window"]),
                "strides": list(p["stride"]),
                "pads": [ph, pw, ph, pw],
            }
            if kind == "AveragePool":
                attrs["count_include_pad"] = int(p["mode"] == enums.PoolingMode.AVERAGE)
            nodes.append(helper.make_node(kind, ins, [out], **attrs))
        elif isinstance(op, T.ReshapeOp | T.AxisAddRemoveOp):
            nodes.append(
                helper.make_node(
                    "Reshape", [ins[0], const(np.array(op.results[0].type.get_shape(), np.int64))], [out]
                )
            )  # type: ignore[attr-defined]
        elif isinstance(op, T.MatrixMulOp):
            nodes.append(
                helper.make_node(
                    "Gemm", ins, [out], transA=int(p["transpose_a"]), transB=int(p["transpose_b"])
                )
            )
        else:
            raise NotImplementedError(f"ONNX export of {op.name}")
    graph = helper.make_graph(nodes, "xmge", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, path)


def torch_runner(module: ModuleOp) -> Any:
    """A closure running the tensor IR op by op with PyTorch's CPU kernels (weights pre-converted)."""
    import torch
    import torch.nn.functional as TF

    fn = _fn(module)
    consts = {
        op.output: torch.from_numpy(op.numpy().copy())
        for op in fn.body.block.ops
        if isinstance(op, T.ConstOp)
    }
    ops = [op for op in fn.body.block.ops if not isinstance(op, T.ConstOp)]

    def run(x: Any) -> Any:
        env = dict(consts)
        env[fn.body.block.args[0]] = x
        for op in ops:
            if isinstance(op, func.ReturnOp):
                return env[op.arguments[0]]
            p = op.params()  # type: ignore[attr-defined]
            a = [env[v] for v in op.operands]
            if isinstance(op, T.ConvolutionOp | T.ConvBiasOp):
                w, groups = a[1], 1
                if p["sparse"] == enums.ConvSparse.GROUP:
                    groups = w.shape[0]
                    w = w.reshape(-1, *w.shape[2:])
                bias = None
                rest = a[2:]
                if rest and rest[0].numel() == w.shape[0]:
                    bias, rest = rest[0].reshape(-1), rest[1:]
                y = TF.conv2d(
                    a[0], w, bias, tuple(p["stride"]), tuple(p["padding"]), tuple(p["dilation"]), groups
                )
                for z in rest:
                    y = y + z
                if p.get("nonline_mode") == enums.NonlineMode.RELU:
                    y = torch.relu(y)
            elif isinstance(op, T.ElemwiseOp):
                m = p["mode"]
                if m in (E.ADD, E.FUSE_ADD_RELU):
                    y = a[0] + a[1]
                elif m == E.MUL:
                    y = a[0] * a[1]
                else:
                    y = a[0]
                if m in (E.RELU, E.FUSE_ADD_RELU):
                    y = torch.relu(y)
            elif isinstance(op, T.PoolingOp):
                if p["mode"] == enums.PoolingMode.MAX:
                    y = TF.max_pool2d(a[0], tuple(p["window"]), tuple(p["stride"]), tuple(p["padding"]))
                else:
                    y = TF.avg_pool2d(
                        a[0], tuple(p["window"]), tuple(p["stride"]), tuple(p["padding"]),
                        count_include_pad=p["mode"] == enums.PoolingMode.AVERAGE,
                    )  # fmt: skip
            elif isinstance(op, T.ReshapeOp | T.AxisAddRemoveOp):
                y = a[0].reshape(tuple(op.results[0].type.get_shape()))  # type: ignore[attr-defined]
            elif isinstance(op, T.MatrixMulOp):
                x0 = a[0].t() if p["transpose_a"] else a[0]
                x1 = a[1].t() if p["transpose_b"] else a[1]
                y = x0 @ x1
            else:
                raise NotImplementedError(op.name)
            env[op.results[0]] = y
        raise RuntimeError("no return")

    return run


# ----------------------------------------------------------------------------------------------
# FMA peak


def fma_peak(isa: str) -> float:
    """Single-core float32 GFLOP/s of independent FMA chains held in registers."""
    vec, vt, set1, fma, hadd = {
        "avx512": (16, "__m512", "_mm512_set1_ps", "_mm512_fmadd_ps", "_mm512_reduce_add_ps({v})"),
        "avx2": (8, "__m256", "_mm256_set1_ps", "_mm256_fmadd_ps", "_mm256_cvtss_f32({v})"),
    }[isa]
    n = 12
    add = "_mm512_add_ps" if isa == "avx512" else "_mm256_add_ps"
    src = f"""
#include <immintrin.h>
float xm_peak(long iters) {{
  {" ".join(f"{vt} a{i} = {set1}(1.f + {i} * 1e-3f);" for i in range(n))}
  const {vt} b = {set1}(0.999999f), c = {set1}(1e-7f);
  for (long k = 0; k < iters; ++k) {{
    {" ".join(f"a{i} = {fma}(a{i}, b, c);" for i in range(n))}
    __asm__ volatile("" : {", ".join(f'"+v"(a{i})' for i in range(n))});
  }}
  {vt} s = a0; {" ".join(f"s = {add}(s, a{i});" for i in range(1, n))}
  return {hadd.format(v="s")};
}}
"""
    flags = ["-O2", "-mavx2", "-mfma"] + (["-mavx512f"] if isa == "avx512" else [])
    with tempfile.TemporaryDirectory() as d:
        c, so = os.path.join(d, "peak.c"), os.path.join(d, "peak.so")
        with open(c, "w") as f:
            f.write(src)
        subprocess.run(["gcc", *flags, "-shared", "-fPIC", c, "-o", so], check=True)
        lib = ctypes.CDLL(so)
        lib.xm_peak.restype = ctypes.c_float
        lib.xm_peak.argtypes = [ctypes.c_long]
        iters = 20_000_000
        best = 0.0
        for _ in range(3):
            t0 = time.perf_counter()
            lib.xm_peak(iters)
            dt = time.perf_counter() - t0
            best = max(best, iters * n * vec * 2 / dt / 1e9)
        return best


# ----------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,resnet50,mobilenet_v2,shufflenet_v2")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--target", default=None, help="default: this machine's best x86 target")
    args = ap.parse_args()
    import onnxruntime as ort
    import torch

    target = args.target or str(host_target())
    isa = "avx512" if "avx512" in target else "avx2"
    peak = fma_peak(isa)
    print(f"target {target}; measured single-core FMA peak ({isa}): {peak:.1f} GFLOP/s")
    threads = [int(t) for t in args.threads.split(",")]
    header = (
        f"{'model':<14}{'thr':>4}{'xmge ms':>10}{'ORT ms':>10}{'torch ms':>10}{'x/ORT':>8}{'x/torch':>8}"
        f"{'GFLOP/s':>9}{'%peak':>7}"
    )
    rows = []
    for name in args.models.split(","):
        net = make_model(name)
        if net is None:
            print(f"{name}: not in compiler.hub yet, skipped")
            continue
        x = np.random.default_rng(1).standard_normal((1, 3, args.size, args.size)).astype(np.float32)
        t0 = time.perf_counter()
        compiled = {t: compile(net, target, [x], threads=t) for t in threads[:1]}
        ctime = time.perf_counter() - t0
        base = compiled[threads[0]]
        for t in threads[1:]:
            compiled[t] = compile(base._stages["tensor"], target, threads=t)  # type: ignore[arg-type]
        inference = base._stages["inference"]
        assert isinstance(inference, ModuleOp)
        flops = conv_flops(inference)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, f"{name}.onnx")
            to_onnx(inference, path)
            sessions = {}
            for t in threads:
                so = ort.SessionOptions()
                so.intra_op_num_threads = t
                so.inter_op_num_threads = 1
                so.log_severity_level = 3
                sessions[t] = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        in_name = sessions[threads[0]].get_inputs()[0].name
        y_ref = sessions[threads[0]].run(None, {in_name: x})[0]
        err = float(np.abs(base(x) - y_ref).max())
        trun = torch_runner(inference)
        tx = torch.from_numpy(x)
        print(
            f"{name}: {flops / 1e9:.2f} GFLOP, compile {ctime:.1f} s "
            f"(build {base.times.get('build', 0):.1f} s), arena {base.arena_size / 2**20:.1f} MiB "
            f"(workspace {base.workspace_size / 2**20:.1f}), weights {base.weights_size / 2**20:.1f} MiB, "
            f"max |xmge - ORT| = {err:.2e}"
        )
        for t in threads:
            torch.set_num_threads(t)
            m = compiled[t]
            feed = {in_name: x}
            xm_ms = benchmark(lambda m=m, x=x: m(x), iters=args.iters)["median_ms"]
            sess = sessions[t]
            ort_ms = benchmark(lambda s=sess, f=feed: s.run(None, f), iters=args.iters)["median_ms"]
            with torch.inference_mode():
                th_ms = benchmark(lambda r=trun, a=tx: r(a), iters=args.iters)["median_ms"]
            gf = flops / xm_ms / 1e6
            rows.append(
                f"{name:<14}{t:>4}{xm_ms:>10.2f}{ort_ms:>10.2f}{th_ms:>10.2f}{xm_ms / ort_ms:>8.2f}"
                f"{xm_ms / th_ms:>8.2f}{gf:>9.1f}{100 * gf / (peak * t):>6.0f}%"
            )
    print(header)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
