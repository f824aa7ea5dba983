"""The ``xmge`` command.

    xmge run MODEL.mge|PACKAGE_DIR --input NAME=FILE.npy ... [-o OUT.npz] [--graph N]
    xmge inspect MODEL.mge
    xmge compile MODEL.mge --target TARGET -o DIR [--threads N] [--graph N] [--name PREFIX]
    xmge bench MODEL.mge|PACKAGE_DIR [--target TARGET] [--threads N] [--iters N]
               [--profile [--chrome-trace OUT.json] [--plot OUT.png]]
    xmge convert MODEL.onnx -o MODEL.mge [--format FBS_V2|FBS] [--enable-OPTION ...]
    xmge serve PACKAGE_OR_MODEL [--replicas N] [--max-batch B] [--batch-wait-ms T] [--port P] ...

``compile``, ``bench`` and ``convert`` also take ONNX models (``.onnx``), read by
``backends.onnx.reader``.

``run`` feeds ``.npy`` (or ``.npz``: every array whose key is an input name) files, prints each
output's name, shape, dtype and a checksum (sum and sum of absolute values, float64), and saves
the outputs keyed by output var name (a ``PACKAGE_DIR`` that ``xmge compile -o`` wrote runs its
compiled library, loaded without compiling; ``bench PACKAGE_DIR`` times it). ``inspect`` lists every
graph's operators with params, output shapes and dtypes, the metadata and the weight bytes. Errors
print one line and exit 1 (2 for a malformed command line).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from dialects.errors import XmgeError


def _load_inputs(specs: Sequence[str], wanted: list[str]) -> dict[str, np.ndarray]:
    feeds: dict[str, np.ndarray] = {}
    import os

    for spec in specs:
        # MegEngine's load_and_run spells an input NAME:FILE; a path with a colon that exists stays a path
        if "=" not in spec and ":" in spec and not os.path.exists(spec):
            spec = spec.replace(":", "=", 1)
        if "=" in spec:
            name, path = spec.split("=", 1)
            try:
                arr = np.load(path, allow_pickle=False)
            except (OSError, ValueError, EOFError) as exc:
                raise ValueError(f"--input {spec}: {path} is not a .npy/.npz array file ({exc})") from None
            if isinstance(arr, np.lib.npyio.NpzFile):
                if name not in arr:
                    raise ValueError(f"{path} has no array {name!r} (it has {sorted(arr.files)})")
                arr = arr[name]
            feeds[name] = np.asarray(arr)
        else:  # a bare .npz: take every input it names
            with np.load(spec, allow_pickle=False) as z:
                if not isinstance(z, np.lib.npyio.NpzFile):
                    raise ValueError(f"--input {spec}: use NAME=FILE.npy for a single array")
                for name in wanted:
                    if name in z:
                        feeds[name] = z[name]
    return feeds


def _input_values(specs: Sequence[str] | None) -> dict[str, np.ndarray]:
    """``--input-value NAME=FILE.npy`` or ``NAME=1,2,3`` (an int64 vector, ONNX's type for shapes,
    axes and sizes): the value of an ONNX graph input known at compile time."""
    values: dict[str, np.ndarray] = {}
    for spec in specs or []:
        name, sep, text = spec.partition("=")
        if not sep or not name or not text:
            raise ValueError(f"--input-value {spec!r}: expected NAME=FILE.npy or NAME=1,2,3")
        if text.endswith(".npy"):
            try:
                values[name] = np.asarray(np.load(text, allow_pickle=False))
            except (OSError, ValueError, EOFError) as exc:
                raise ValueError(f"--input-value {spec}: {text} is not a .npy array file ({exc})") from None
            continue
        try:
            values[name] = np.array([int(v) for v in text.split(",")], np.int64)
        except ValueError:
            raise ValueError(
                f"--input-value {spec!r}: {text!r} is not a comma-separated list of integers"
            ) from None
    return values


def _model_source(args: argparse.Namespace) -> Any:
    """The model path, or with ``--input-value`` the ONNX model read with those values bound."""
    values = _input_values(getattr(args, "input_value", None))
    if not values:
        return args.model
    if not str(args.model).lower().endswith(".onnx"):
        raise ValueError(f"--input-value applies to ONNX models only, not {args.model}")
    from backends.onnx.reader import read_onnx

    return read_onnx(args.model, input_values=values)


def checksum(arr: np.ndarray) -> str:
    a = np.asarray(arr, dtype=np.float64)
    return f"sum={a.sum():.9g} abs_sum={np.abs(a).sum():.9g}"


def cmd_run(args: argparse.Namespace) -> int:
    import os

    from compiler.lite import Network

    # a folder is a saved compiled package (xmge compile -o DIR): run its library, compile nothing
    net: Any = (
        _PackageNetwork(args.model) if os.path.isdir(args.model) else Network(args.model, graph=args.graph)
    )
    feeds = _load_inputs(args.input or [], net.get_all_input_name())
    unknown = sorted(set(feeds) - set(net.get_all_input_name()))
    if unknown:
        raise ValueError(f"unknown input(s) {unknown}; the model's inputs are {net.get_all_input_name()}")
    missing = [n for n in net.get_all_input_name() if n not in feeds]
    if missing:
        raise ValueError(f"missing --input for {missing}")
    import time

    for _ in range(args.warmup_iter):
        net(**feeds)
    times: list[float] = []
    for _ in range(max(1, args.iter)):
        t0 = time.perf_counter()
        outs = net(**feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    engine = "compiled package" if os.path.isdir(args.model) else "reference interpreter"
    if len(times) == 1:
        print(f"ran once on the {engine} in {times[0]:.3f} ms")
    else:
        print(
            f"ran {len(times)} times on the {engine} (after {args.warmup_iter} warm-up): "
            f"median {float(np.median(times)):.3f} ms, min {min(times):.3f} ms"
        )
    for name, arr in outs.items():
        print(f"{name}: shape={tuple(arr.shape)} dtype={arr.dtype} {checksum(arr)}")
    if args.output:
        np.savez(args.output, **outs)
        print(f"saved {len(outs)} output(s) to {args.output}")
    return 0


class _PackageNetwork:
    """A loaded package with the named-input call ``cmd_run`` makes of a ``Network``."""

    def __init__(self, directory: str) -> None:
        from compiler.driver.package import load_compiled

        self.model = load_compiled(directory)
        self.inputs = [name for name, _, _ in self.model.variants[0].inputs]
        self.outputs = [name for name, _, _ in self.model.variants[0].outputs]

    def get_all_input_name(self) -> list[str]:
        return list(self.inputs)

    def __call__(self, **feeds: np.ndarray) -> dict[str, np.ndarray]:
        outs = self.model.run([feeds[n] for n in self.inputs])
        return dict(zip(self.outputs, outs, strict=True))


def _enum_fields() -> dict[tuple[str, str], Any]:
    from dialects import enums as E

    conv = {"mode": E.ConvMode, "sparse": E.ConvSparse, "format": E.Format, "compute_mode": E.ComputeMode}
    table: dict[tuple[str, str], Any] = {("Convolution", k): v for k, v in conv.items()}
    table.update({("ConvBias", k): v for k, v in conv.items()})
    table[("ConvBias", "nonlineMode")] = E.NonlineMode
    table.update(
        {
            ("Pooling", "mode"): E.PoolingMode,
            ("Pooling", "format"): E.Format,
            ("AdaptivePooling", "mode"): E.PoolingMode,
            ("Elemwise", "mode"): E.ElemwiseMode,
            ("Reduce", "mode"): E.ReduceMode,
            ("Reduce", "data_type"): E.ReduceDataType,
            ("MatrixMul", "compute_mode"): E.ComputeMode,
            ("MatrixMul", "format"): E.MatrixMulFormat,
            ("BN", "param_dim"): E.BNParamDim,
            ("BN", "fwd_mode"): E.BNFwdMode,
            ("Padding", "padding_mode"): E.PaddingMode,
        }
    )
    return table


def _show(kind: str, key: str, value: Any, table: dict[tuple[str, str], Any]) -> str:
    from dialects import enums as E

    if hasattr(value, "describe"):
        return value.describe()
    enum = table.get((kind, key))
    if enum is not None:
        try:
            return E.from_number(enum, int(value)).name
        except ValueError:
            return f"{value}(?)"
    return str(value)


def _fmt_params(params: list[Any]) -> str:
    parts = []
    table = _enum_fields()
    for p in params:
        vals = ", ".join(f"{k}={_show(p.kind, k, v, table)}" for k, v in p.values.items())
        parts.append(f"{p.kind}{{{vals}}}")
    return " ".join(parts)


def _option_names(word: int) -> str:
    """`` (enable_nchw44, enable_fuse_grain)``: the dump options an ``optimize_options`` word says."""
    from passes.inference.options import InferenceOptionError, keywords_from_word

    try:
        on = [k for k, v in keywords_from_word(word).items() if v]
    except InferenceOptionError as exc:
        return f" ({exc})"
    return f" ({', '.join(on)})" if on else ""


def _user_info_text(raw: bytes) -> str:
    """``trace.dump``'s user_info as the safe unpickler rebuilds it (data only, never code from
    the file), or its size and why it was not decoded."""
    if not raw:
        return "-"
    from compiler.serialization import loads

    try:
        text = repr(loads(raw))
    except XmgeError as exc:
        return f"({len(raw)} bytes, not decoded: {str(exc).splitlines()[0]})"
    return text if len(text) <= 200 else text[:197] + "..."


def cmd_inspect(args: argparse.Namespace) -> int:
    from backends.mge.container import parse_file
    from backends.mge.reader import read_mge

    with open(args.model, "rb") as f:
        data = f.read()
    graphs = parse_file(data)
    module = None
    try:
        module = read_mge(data)
    except ValueError as exc:  # still list what the container holds
        print(f"note: xmge cannot run this file: {exc}")
    funcs = list(module.ops) if module is not None else []
    print(f"{args.model}: {len(data)} bytes, {len(graphs)} graph(s)")
    if args.graph:
        if module is None:
            raise XmgeError(f"{args.model}: no graph to draw (xmge cannot read it)")
        from compiler.driver.pictures import graph_svg
        from compiler.serialization import atomic_write

        svg = graph_svg(module)
        atomic_write(args.graph, lambda f: f.write(svg), "w")
        print(f"graph drawn to {args.graph}")
    for gi, g in enumerate(graphs):
        md = g.metadata
        print(
            f"graph {gi}: format {g.format}, version {g.version}"
            + (f", model_version {g.model_version}" if g.model_version is not None else "")
            + f", {len(g.oprs)} operators, {g.nr_vars} vars, bytes {g.offset}..{g.offset + g.size}"
        )
        print(
            f"  metadata: is_valid={md.is_valid} graph_modified={md.graph_modified} "
            f"optimize_options={md.optimize_options}{_option_names(md.optimize_options)} "
            f"user_info={_user_info_text(md.user_info)}"
        )
        shapes: dict[str, tuple[tuple[int, ...], str]] = {}
        if gi < len(funcs):
            from xdsl.dialects.builtin import StringAttr, TensorType

            from dialects.dtypes import dtype_name

            fn = funcs[gi]
            for op in fn.walk():
                name = op.attributes.get("name")
                if isinstance(name, StringAttr) and op.results and isinstance(op.results[0].type, TensorType):
                    t = op.results[0].type
                    shapes[name.data] = (tuple(t.get_shape()), dtype_name(t.element_type))
            for n, a in zip(fn.attributes["input_names"].data, fn.body.block.args, strict=True):  # type: ignore[attr-defined]
                shapes[n.data] = (tuple(a.type.get_shape()), dtype_name(a.type.element_type))
        weight_bytes = 0
        for o in g.oprs:
            outs = []
            for v in o.outputs:
                nm = g.var_names.get(v, f"var{v}")
                if nm in shapes:
                    outs.append(f"{nm}: {shapes[nm][0]} {shapes[nm][1]}")
                else:
                    outs.append(nm)
            tens = []
            for t in o.tensors:
                size = len(t.data) if t.data is not None else 0
                weight_bytes += size
                dt = t.dtype.describe() if t.dtype else "?"
                tens.append(f"{t.name or ''}{list(t.shape)} {dt} {size}B")
            line = f"  #{o.index} {o.kind or o.type_name}"
            if o.name:
                line += f" '{o.name}'"
            line += f" in={o.inputs} out=[{', '.join(outs)}]"
            if o.params:
                line += " " + _fmt_params(o.params)
            if tens:
                line += " tensors=[" + "; ".join(tens) + "]"
            if o.output_dtype is not None:
                line += f" output_dtype={o.output_dtype.describe()}"
            print(line)
        out_names = [g.var_names.get(v, f"var{v}") for v in g.outputs]
        print(f"  outputs: {out_names}")
        print(f"  weight bytes: {weight_bytes}")
    return 0


def cmd_compile(args: argparse.Namespace) -> int:
    from pathlib import Path

    from compiler.driver.compile import compile as compile_model
    from compiler.driver.compile import compile_file

    source = _model_source(args)
    progress = False if args.quiet else None
    if source is args.model:
        compiled = compile_file(
            args.model,
            args.target,
            args.output,
            threads=args.threads,
            graph=args.graph,
            name=args.name,
            progress=progress,
        )
    else:  # an ONNX module read with --input-value: named after its file as compile_file would
        name = args.name or Path(args.model).stem
        compiled = compile_model(
            source, args.target, threads=args.threads, graph=args.graph, name=name, progress=progress
        )
        compiled.save(args.output)
    if args.quiet:
        return 0
    print(f"compiled {args.model} for {compiled.target} into {args.output}")
    print(f"  arena {compiled.arena_size} bytes, weights {compiled.weights_size} bytes")
    if compiled.emulated:
        print(f"  on the device: copy {args.output} there, run `make`, then ./runner weights.bin")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    import os
    import time

    from compiler.driver.compile import benchmark, compile, profile_layers
    from dialects.dtypes import numpy_dtype

    for flag in ("chrome_trace", "plot"):
        if getattr(args, flag) and not args.profile:
            raise XmgeError(f"--{flag.replace('_', '-')} needs --profile")
    if os.path.isdir(args.model):
        if args.profile:
            raise XmgeError("--profile needs a model file, not a package (it holds no profiling build)")
        return _bench_package(args)
    args.threads = args.threads or 1
    t0 = time.perf_counter()
    compiled = compile(args.model, args.target, threads=args.threads)
    seconds = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    inputs = [
        rng.standard_normal(tuple(t.get_shape())).astype(numpy_dtype(t.element_type))
        for t in compiled.input_types
    ]
    stats = benchmark(lambda: compiled.run(inputs), warmup=args.warmup_iter, iters=args.iters)
    print(f"{args.model}: target {compiled.target}, {args.threads} thread(s), compiled in {seconds:.1f} s")
    print(
        f"  median {stats['median_ms']:.3f} ms, min {stats['min_ms']:.3f} ms, mean {stats['mean_ms']:.3f} ms "
        f"over {stats['runs']} runs"
    )
    if args.profile:
        _print_profile(args, profile_layers(compiled, inputs), f"{args.model} on {compiled.target}")
    return 0


PROFILE_LINES = 20  # the slowest calls printed; the trace and the chart hold every one


def _print_profile(args: argparse.Namespace, rows: list[Any], title: str) -> None:
    """``--profile``: the slowest kernel calls with the model's operator names, then the files
    ``--chrome-trace`` and ``--plot`` ask for."""
    from compiler.driver.pictures import chrome_trace, latency_chart
    from compiler.serialization import atomic_write

    total = sum(r.ms for r in rows) or 1.0
    print(f"  per layer (ms per run, share of {total:.3f} ms, the model's operator name, kernel):")
    for r in sorted(rows, key=lambda r: -r.ms)[:PROFILE_LINES]:
        print(f"    {r.ms:8.3f} {100 * r.ms / total:5.1f}%  {r.layer}  {r.kernel}")
    if len(rows) > PROFILE_LINES:
        print(f"    ... {len(rows) - PROFILE_LINES} faster calls")
    if args.chrome_trace:
        trace = chrome_trace(rows)
        atomic_write(args.chrome_trace, lambda f: f.write(trace), "w")
        print(f"  Chrome trace written to {args.chrome_trace} (open it in https://ui.perfetto.dev)")
    if args.plot:
        png = latency_chart(rows, f"xmge: per-layer latency of {title}")
        atomic_write(args.plot, lambda f: f.write(png))
        print(f"  per-layer latency chart written to {args.plot}")


def _bench_package(args: argparse.Namespace) -> int:
    """``xmge bench DIR``: time a saved package's library on random inputs of each shape it holds."""
    import time

    from compiler.driver.compile import benchmark
    from compiler.driver.package import load_compiled

    t0 = time.perf_counter()
    model = load_compiled(args.model, threads=args.threads)
    seconds = time.perf_counter() - t0
    print(
        f"{args.model}: package {model.name}, target {model.target}, {model.threads} thread(s), "
        f"loaded in {seconds * 1e3:.1f} ms"
    )
    rng = np.random.default_rng(0)
    for variant in model.variants:
        inputs = [
            rng.standard_normal(shape).astype(dt)
            for (_, shape, _), dt in zip(variant.inputs, variant.input_dtypes, strict=True)
        ]
        stats = benchmark(lambda inputs=inputs: model.run(inputs), warmup=args.warmup_iter, iters=args.iters)
        shapes = ", ".join(str(s) for s in variant.input_shapes)
        print(
            f"  {shapes}: median {stats['median_ms']:.3f} ms, min {stats['min_ms']:.3f} ms, "
            f"mean {stats['mean_ms']:.3f} ms over {stats['runs']} runs"
        )
    return 0


def _inference_option(word: str) -> str:
    """An ``--enable`` word (``nchw88``, ``enable_nchw88``, ``fuse-conv-bias-nonlinearity``) as its
    ``enable_*`` keyword; a word no option is close to is a ValueError with the closest suggestion."""
    from passes.inference.options import BY_KEYWORD, suggest_option

    norm = word.strip().replace("-", "_")
    keyword = norm if norm.startswith("enable_") else f"enable_{norm}"
    if keyword in BY_KEYWORD:
        return keyword
    hint = suggest_option(word)
    valid = ", ".join(k.removeprefix("enable_").replace("_", "-") for k in BY_KEYWORD)
    raise ValueError(
        f"unknown option --enable {word}"
        + (
            f": did you mean {hint.removeprefix('enable_').replace('_', '-')}?"
            if hint
            else f"; valid: {valid}"
        )
    )


def cmd_convert(args: argparse.Namespace) -> int:
    """mgeconvert's job: a model file (ONNX, or a .mge to rewrite) to a .mge that MegEngine loads,
    optimized with MegEngine's ``optimize_for_inference`` options like ``trace.dump``."""
    from compiler.driver.compile import read_model_file
    from compiler.dump import dump_module
    from compiler.serialization import atomic_write

    source = _model_source(args)
    module = read_model_file(args.model) if source is args.model else source
    options = {_inference_option(name): True for name in args.enable or []}
    data = dump_module(module, dump_format=args.format, **options)
    atomic_write(args.output, lambda f: f.write(data))
    print(f"converted {args.model} to {args.output} ({len(data)} bytes)")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """Deploy a package or model on Ray Serve and serve until interrupted."""
    import signal
    import threading

    from compiler import serving

    sizes = tuple(int(b) for b in args.batch_sizes.split(",")) if args.batch_sizes else None
    options = serving.ServeOptions(
        name=args.name,
        replicas=args.replicas,
        max_batch=args.max_batch,
        batch_wait_ms=args.batch_wait_ms,
        batch_sizes=sizes or tuple(b for b in serving.DEFAULT_BATCH_SIZES if b <= args.max_batch),
        threads=args.threads,
        workers=args.workers,
        max_ongoing=args.max_ongoing,
        target=args.target,
    )
    serving.run(args.model, options, host=args.host, port=args.port, address=args.address)
    name = options.name or serving.source_name(args.model)
    print(f"serving {args.model} at http://{args.host}:{args.port}/{name} (Ctrl-C stops)", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        serving.shutdown()
    return 0


def list_targets() -> str:
    """The ``--list-targets`` text: every architecture with its features and options, which of them
    run on this machine, and what ``host`` (the default) means here."""
    from backends.targets import ARCHES, OPTIONS, host_target

    lines = [
        f"host (the default): {host_target()} on this machine",
        "architectures (ARCH[-FEATURE...][+OPTION...]):",
    ]
    for name, arch in ARCHES.items():
        feats = ", ".join(arch.features) or "none"
        built = "" if arch.backend is not None else " (parsed only, nothing compiles for it)"
        lines.append(f"  {name:5s} {arch.description}{built}; features: {feats}")
    lines.append(f"options (+OPTION): {', '.join(OPTIONS)}")
    return "\n".join(lines)


def _split_enable_flags(argv: list[str]) -> list[str]:
    """``--enable-nchw88`` (the spelling MegEngine's dump scripts use) as ``--enable nchw88``."""
    out: list[str] = []
    for arg in argv:
        if arg.startswith("--enable-") and "=" not in arg:
            out += ["--enable", arg[len("--enable-") :]]
        else:
            out.append(arg)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--list-targets" in argv:
        print(list_targets())
        return 0
    if argv[:1] == ["convert"]:
        argv = _split_enable_flags(argv)
    parser = argparse.ArgumentParser(prog="xmge", description="Run and inspect MegEngine .mge models")
    parser.add_argument(
        "--list-targets",
        action="store_true",
        help="list the compilation targets and exit (any subcommand too)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a .mge model on the reference interpreter")
    run.add_argument("model")
    run.add_argument(
        "--input",
        "-i",
        action="append",
        metavar="NAME=FILE.npy",
        help="an input array (repeatable; NAME:FILE.npy as load_and_run spells it works too); "
        "a bare FILE.npz feeds every input it names",
    )
    run.add_argument("--iter", type=int, default=1, help="runs to time (load_and_run's --iter; default 1)")
    run.add_argument("--warmup-iter", type=int, default=0, help="untimed runs first (default 0)")
    run.add_argument("-o", "--output", help="save the outputs to this .npz, keyed by output name")
    run.add_argument("--graph", type=int, default=0, help="which graph of an append=True file (default 0)")
    run.set_defaults(handler=cmd_run)
    insp = sub.add_parser("inspect", help="list a .mge file's operators, params, shapes and metadata")
    insp.add_argument("model")
    insp.add_argument("--graph", metavar="OUT.svg", help="also draw the operator graph as SVG")
    insp.set_defaults(handler=cmd_inspect)
    comp = sub.add_parser("compile", help="compile a .mge model to C kernels, a library and a runner")
    comp.add_argument("model")
    comp.add_argument(
        "--target", "-t", default=None, help="default host (this machine's best); see --list-targets"
    )
    comp.add_argument("-o", "--output", required=True, help="the folder to write")
    comp.add_argument("--threads", type=int, default=1)
    comp.add_argument("--graph", type=int, default=0, help="which graph of an append=True file (default 0)")
    comp.add_argument(
        "--name", default=None, help="the C symbol prefix and library name (default: the file's)"
    )
    comp.add_argument(
        "--input-value",
        action="append",
        metavar="NAME=VALUE",
        help="an ONNX graph input's value known at compile time (shape, axes, sizes): NAME=FILE.npy "
        "or NAME=1,2,3 (int64); repeatable",
    )
    comp.add_argument(
        "-q", "--quiet", action="store_true", help="no progress lines and no summary (errors still print)"
    )
    comp.set_defaults(handler=cmd_compile)
    bench = sub.add_parser("bench", help="compile a .mge model and time it (median of --iters runs)")
    bench.add_argument("model")
    bench.add_argument(
        "--target", "-t", default=None, help="default host (this machine's best); see --list-targets"
    )
    bench.add_argument("--threads", type=int, default=None, help="default 1 (a package: its own count)")
    bench.add_argument("--iters", "--iter", type=int, default=20, help="timed runs (default 20)")
    bench.add_argument("--warmup-iter", type=int, default=3, help="untimed runs first (default 3)")
    bench.add_argument(
        "--profile", action="store_true", help="also time every kernel call, named after the model's operator"
    )
    bench.add_argument(
        "--chrome-trace",
        metavar="OUT.json",
        help="with --profile: the kernel times as a Chrome trace (Perfetto)",
    )
    bench.add_argument(
        "--plot", metavar="OUT.png", help="with --profile: a per-layer latency bar chart (PNG)"
    )
    bench.set_defaults(handler=cmd_bench)
    conv = sub.add_parser("convert", help="convert an ONNX model (or rewrite a .mge) to a MegEngine .mge")
    conv.add_argument("model")
    conv.add_argument("-o", "--output", required=True, help="the .mge file to write")
    conv.add_argument("--format", default="FBS_V2", choices=("FBS_V2", "FBS"), help="FlatBuffers v2 or v1")
    conv.add_argument(
        "--enable",
        action="append",
        metavar="OPTION",
        help="an optimize_for_inference option, with or without its enable_ prefix (repeatable), e.g. "
        "fuse-conv-bias-nonlinearity, nchw88, io16xc32; --enable-nchw88 works too",
    )
    conv.add_argument(
        "--input-value",
        action="append",
        metavar="NAME=VALUE",
        help="an ONNX graph input's value known at compile time (shape, axes, sizes): NAME=FILE.npy "
        "or NAME=1,2,3 (int64); repeatable",
    )
    conv.set_defaults(handler=cmd_convert)
    srv = sub.add_parser("serve", help="serve a package or model on Ray Serve with dynamic batching")
    srv.add_argument("model", help="a saved package folder, a .mge or an .onnx file")
    srv.add_argument("--name", help="the route (/NAME) and application name (default: the model's)")
    srv.add_argument("--replicas", type=int, default=1)
    srv.add_argument("--max-batch", type=int, default=8, help="samples per model run, at most")
    srv.add_argument("--batch-sizes", help="batch sizes to compile a model file for (default 1,2,4,8)")
    srv.add_argument("--batch-wait-ms", type=float, default=5.0, help="how long a batch waits to fill")
    srv.add_argument("--threads", type=int, default=1, help="threads per model run")
    srv.add_argument(
        "--workers", type=int, default=1, help="concurrent model runs per replica, each on --threads threads"
    )
    srv.add_argument(
        "--max-ongoing", type=int, default=256, help="requests a replica holds at once (queued or running)"
    )
    srv.add_argument("--target", "-t", default=None, help="for a model file (default: this machine)")
    srv.add_argument("--host", default="127.0.0.1")
    srv.add_argument("--port", type=int, default=8000)
    srv.add_argument("--address", help="a running Ray cluster to join (e.g. auto), default: start one here")
    srv.set_defaults(handler=cmd_serve)
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except BrokenPipeError:
        from compiler.driver.opt import exit_quietly_on_broken_pipe

        exit_quietly_on_broken_pipe()
        return 1
    except MemoryError:
        cap = "XMGE_MAX_TENSOR_BYTES caps one tensor"
        print(f"xmge {args.command}: error: out of memory ({cap})", file=sys.stderr)
        return 1
    except (XmgeError, ValueError, OSError, KeyError) as exc:
        print(f"xmge {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
