"""Fuzzing the .mge reader and the reference interpreter with mutated golden files.

Each case mutates one seed file (bit flips, 32-bit words overwritten with boundary values, cuts,
inserted bytes), loads it with ``read_mge`` and, when it loads, runs every graph on the reference
interpreter with random inputs; every ``--compile-every``-th case that runs is also compiled for
x86-avx2 (gcc) and run there. Outcomes (ok, rejected: MgeFormatError / MgeUnsupportedError /
InterpreterError / LimitExceeded, bug, memory, timeout, crash) and the isolated, resumable workers
are :mod:`bench.fuzz_common`'s.

Workers run with ``XMGE_MAX_TENSOR_BYTES`` at 4 MiB (:data:`FUZZ_TENSOR_BYTES`) unless the
environment sets it (reading and running stay fast; the default cap is for real models) and an
address-space limit (``--mem-mb``). The long run (57 seed files, resumable: rerun the same command)::

    nice -n 19 python bench/fuzz_mge.py --seeds campaign --count 100000 --jobs 1 --clock cpu \
        --compile-every 250 --rng-seed 61 --progress 1000 --log /tmp/fuzz_mge.jsonl
    python bench/fuzz_mge.py --count 2000 --seeds convnet/fbs_v1 int8/plain

The in-suite slice (tests/test_mge_fuzz.py) calls :func:`run_cases` in-process with a few hundred
cases.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench.fuzz_common import (  # noqa: E402
    Campaign,
    Report,
    add_arguments,
    classify,
    read_header,
    run_isolated,
)

DATA = os.path.join(ROOT, "tests", "data")
GOLDEN = os.path.join(os.path.dirname(ROOT), "shared", "golden")
# FBS v2 float, FBS v1, int8, blocked layouts (NCHW88 / NCHW44), float16, append=True, multi-IO
DEFAULT_SEEDS: tuple[str, ...] = (
    "convnet/plain",
    "convnet/fbs_v1",
    "int8/plain",
    "int8/nchw44",
    "convnet/nchw88",
    "convnet/ioc16",
    "multi_io/append",
    "multi_io/named",
    "mini_resnet/plain",
)
FUZZ_TENSOR_BYTES = 4 << 20
"""The seeds' largest tensors are well under 1 MiB; a mutated shape beyond 4 MiB is a legitimately
big model that the numpy reference (int8 convolutions especially) may take seconds to run, which
says nothing about the reader's robustness."""


def seed_path(name: str) -> str:
    """``name`` is a path, ``golden:<case>/<variant>`` (../shared/golden, real MegEngine 1.13
    dumps) or ``<dir>/<file>`` under tests/data (without ``.mge``)."""
    if name.startswith("golden:"):
        return os.path.join(GOLDEN, f"{name[len('golden:') :]}.mge")
    if name.endswith(".mge"):
        return name
    return os.path.join(DATA, f"{name}.mge")


def campaign_seeds() -> list[str]:
    """The long run's seeds: every golden file, the MegEngine dumps under tests/data that are not
    copies of golden files (int8 MobileNetV2s, layouts, GroupNorm, NHWCD4), and xmge's own dumps
    of zoo-style models with each dump option (tests/data/fuzz_seeds, bench/fuzz_seeds.py)."""
    seeds: list[str] = []
    golden_bytes: set[bytes] = set()
    for base, prefix in ((GOLDEN, "golden:"), (DATA, "")):
        for folder, _, files in sorted(os.walk(base)):
            for f in sorted(files):
                if not f.endswith(".mge"):
                    continue
                path = os.path.join(folder, f)
                with open(path, "rb") as fh:
                    data = fh.read()
                if prefix:
                    golden_bytes.add(data)
                elif data in golden_bytes:
                    continue
                seeds.append(prefix + os.path.relpath(path, base)[: -len(".mge")])
    return seeds


def seed_bytes(name: str) -> bytes:
    with open(seed_path(name), "rb") as f:
        return f.read()


def mutate(data: bytes, rng: np.random.Generator) -> bytes:
    b = bytearray(data)
    kind = int(rng.integers(0, 5))
    if kind == 0:
        for _ in range(int(rng.integers(1, 8))):
            b[int(rng.integers(0, len(b)))] ^= 1 << int(rng.integers(0, 8))
    elif kind in (1, 2):  # 32-bit words: offsets, sizes, shapes, params (kind 2: small deltas)
        p = int(rng.integers(0, len(b) - 4)) & ~3 if kind == 2 else int(rng.integers(0, len(b) - 4))
        if kind == 1:
            value = int(rng.choice([0, 1, 2, 0xFFFFFFFF, 0x7FFFFFFF, 0x10000, 4_300_000_000 % 2**32, len(b)]))
        else:
            value = (struct.unpack_from("<I", b, p)[0] + int(rng.integers(-3, 300))) % 2**32
        struct.pack_into("<I", b, p, value)
    elif kind == 3:
        b = b[: int(rng.integers(0, len(b)))]
    else:
        p = int(rng.integers(0, len(b)))
        b[p:p] = rng.bytes(int(rng.integers(1, 16)))
    return bytes(b)


@dataclass
class Case:
    index: int
    seed: str
    data: bytes


def case_seed(seeds: Sequence[str], index: int) -> str:
    return seeds[index % len(seeds)]


def make_case(seeds: Sequence[str], index: int, rng_seed: int, originals: dict[str, bytes]) -> Case:
    """Case ``index`` alone (its own random stream), so that workers build only their cases."""
    seed = case_seed(seeds, index)
    if seed not in originals:
        originals[seed] = seed_bytes(seed)
    return Case(index, seed, mutate(originals[seed], np.random.default_rng([rng_seed, index])))


def cases(seeds: Sequence[str], n: int, rng_seed: int, start: int = 0, step: int = 1) -> Iterator[Case]:
    originals: dict[str, bytes] = {}
    for i in range(start, n, step):
        yield make_case(seeds, i, rng_seed, originals)


COMPILE_TARGET = "x86-avx2"
"""The x86 target a sample of the loaded cases is compiled for (gcc, AVX2 + FMA)."""


def run_one(
    data: bytes, timeout_s: float, clock: str = "wall", compile_timeout_s: float = 0.0
) -> tuple[str, str]:
    """(outcome, detail) of loading and running one file; with ``compile_timeout_s`` a file that
    loads and runs is also compiled for :data:`COMPILE_TARGET` and run there (detail ``compiled``,
    or the error: a documented ``XmgeError`` while compiling is ``rejected``, anything else a bug)."""
    from backends.mge.fbs import MgeFormatError
    from backends.mge.reader import read_mge
    from bench.fuzz_common import alarm
    from dialects.dtypes import numpy_dtype
    from semantics.interpreter import InterpreterError, run_function

    np.seterr(all="ignore")  # random inputs overflow float16 and int8 models: not a finding
    stage = "load"
    try:
        with alarm(timeout_s, clock):
            module = read_mge(data)
            stage = "run"
            rng = np.random.default_rng(0)
            inputs = []
            for fn in module.ops:
                args = []
                for a in fn.body.block.args:  # type: ignore[attr-defined]
                    dt = numpy_dtype(a.type.element_type)
                    shape = tuple(a.type.get_shape())
                    args.append((rng.standard_normal(shape) * 3).astype(dt))
                run_function(fn, args)  # type: ignore[arg-type]
                inputs.append(args)
        if not compile_timeout_s:
            return "ok", ""
        # compiling runs gcc in child processes: a wall clock sees their time
        stage = "compile"
        with alarm(compile_timeout_s, "wall"):
            return compile_one(module, inputs[0] if inputs else [])
    except BaseException as exc:  # noqa: BLE001 - classified: documented, timeout, memory or a bug
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        return classify(exc, (MgeFormatError, InterpreterError), stage)


def compile_one(module: object, inputs: list[np.ndarray]) -> tuple[str, str]:
    """Compile the first graph for :data:`COMPILE_TARGET` and run it once on ``inputs``."""
    import compiler as xm
    from dialects.errors import XmgeError

    try:
        compiled = xm.compile(module, target=COMPILE_TARGET)
    except XmgeError as exc:
        return "ok", f"compile refused: {type(exc).__name__}"
    try:
        compiled.run(inputs)
    except XmgeError as exc:
        return "ok", f"compiled, run refused: {type(exc).__name__}"
    return "ok", "compiled"


def run_cases(seeds: Sequence[str], n: int, rng_seed: int = 0, timeout_s: float = 5.0) -> Report:
    """All cases in this process (no crash isolation, no memory cap): the in-suite slice."""
    report = Report()
    t0 = time.perf_counter()
    # the fuzz cap holds for these cases only: the process (a test session) goes on with its own
    previous = os.environ.get("XMGE_MAX_TENSOR_BYTES")
    os.environ.setdefault("XMGE_MAX_TENSOR_BYTES", str(FUZZ_TENSOR_BYTES))
    try:
        for case in cases(seeds, n, rng_seed):
            report.add(case.index, case.seed, *run_one(case.data, timeout_s))
    finally:
        if previous is None:
            del os.environ["XMGE_MAX_TENSOR_BYTES"]
        else:
            os.environ["XMGE_MAX_TENSOR_BYTES"] = previous
    report.seconds = time.perf_counter() - t0
    return report


# ----------------------------------------------------------------------------------------------
# the campaign: isolated workers (bench/fuzz_common.py)


def campaign(
    seeds: Sequence[str],
    rng_seed: int,
    timeout_s: float,
    clock: str,
    compile_every: int,
    compile_timeout_s: float,
) -> Campaign:
    originals: dict[str, bytes] = {}

    def prepare() -> None:
        import backends.mge.reader  # noqa: F401 - imported before the memory cap applies
        import semantics.interpreter  # noqa: F401

        if compile_every:
            import compiler  # noqa: F401

    def run(index: int) -> tuple[str, str]:
        case = make_case(seeds, index, rng_seed, originals)
        sample = compile_timeout_s if compile_every and index % compile_every == 0 else 0.0
        return run_one(case.data, timeout_s, clock, sample)

    return Campaign(
        run=run,
        label=lambda index: case_seed(seeds, index),
        prepare=prepare,
        env={"XMGE_MAX_TENSOR_BYTES": str(FUZZ_TENSOR_BYTES)},
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap, count=5000, jobs=2, mem_mb=3072)
    ap.add_argument(
        "--seeds",
        nargs="+",
        default=list(DEFAULT_SEEDS),
        help="tests/data/<name>, golden:<case>/<variant> or .mge paths; 'campaign': every seed file",
    )
    ap.add_argument(
        "--compile-every",
        type=int,
        default=0,
        help=f"compile every Nth case that loads and runs for {COMPILE_TARGET} and run it (0: never)",
    )
    ap.add_argument("--compile-timeout", type=float, default=600.0, help="wall seconds for one compile")
    args = ap.parse_args(argv)
    seeds = campaign_seeds() if args.seeds == ["campaign"] else args.seeds
    logged = read_header(args.log) if args.log else None
    if logged is not None and args.seeds == ["campaign"]:
        seeds = logged["seeds"]  # resuming: the seed files of the run that wrote the log
    report = run_isolated(
        campaign(seeds, args.rng_seed, args.timeout, args.clock, args.compile_every, args.compile_timeout),
        args.start,
        args.count,
        args.jobs,
        args.mem_mb,
        hang_after_s=args.timeout + 10 + (args.compile_timeout if args.compile_every else 0),
        log=args.log,
        progress_every=args.progress,
        header={"seeds": list(seeds), "rng_seed": args.rng_seed},
    )
    print(f"{len(seeds)} seeds: {' '.join(seeds)}")
    print(f"cases {args.start}..{args.start + args.count - 1}, rng seed {args.rng_seed}")
    print(report.summary(COMPILE_TARGET if args.compile_every else None))
    return 1 if report.bad() else 0


if __name__ == "__main__":
    sys.exit(main())
