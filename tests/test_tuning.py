"""Tuning files (compiler/tuning.py) and the kernel-select hook that reads their choices."""

from __future__ import annotations

import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

import compiler as xm
import compiler.functional as F
from compiler.driver.compile import inference_clean, to_module
from compiler.driver.targets import host_target
from compiler.tuning import TuningFile, TuningFileError, TuningKey, cpu_model, load_for
from dialects import kernel as K
from passes.lowering.select import LowerToKernelPass, op_signature
from passes.target import Target

KEY = TuningKey(cpu_model(), ("avx2", "fma"), 1)


def test_round_trip(tmp_path: Path) -> None:
    tf = TuningFile(KEY, {"mgb.conv(a)->(b){}": "conv2d_direct"})
    tf.save(tmp_path / "t.json")
    back = load_for(tmp_path / "t.json", KEY)
    assert back is not None and back.choices == tf.choices and back.key == KEY


@pytest.mark.parametrize(
    ("other", "word"),
    [(TuningKey("Other CPU", KEY.isa, 1), "CPU"), (TuningKey(KEY.cpu, ("sse4",), 1), "ISA"),
     (TuningKey(KEY.cpu, KEY.isa, 4), "thread count")],
)
def test_key_mismatch_warns_and_ignores(tmp_path: Path, other: TuningKey, word: str) -> None:
    TuningFile(other, {"s": "f"}).save(tmp_path / "t.json")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert load_for(tmp_path / "t.json", KEY) is None
    assert len(caught) == 1 and word in str(caught[0].message) and "ignored" in str(caught[0].message)


def test_bad_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_text("{not json")
    with pytest.raises(TuningFileError, match="t.json: not a tuning file"):
        load_for(tmp_path / "t.json", KEY)


def test_concurrent_writers_keep_every_entry(tmp_path: Path) -> None:
    path = tmp_path / "t.json"

    def tune(i: int) -> None:
        for j in range(5):
            TuningFile(KEY, {f"sig{i}.{j}": f"fam{i}"}).save(path)

    threads = [threading.Thread(target=tune, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tf = load_for(path, KEY)
    assert tf is not None and len(tf.choices) == 40
    assert not [p for p in tmp_path.iterdir() if p.name != "t.json"]  # no temp file left behind


def _conv_module() -> ModuleOp:
    w = xm.tensor(np.random.default_rng(0).standard_normal((8, 4, 3, 3)).astype(np.float32))

    m = xm.tensor(np.random.default_rng(1).standard_normal((512, 8)).astype(np.float32))

    def f(x: xm.Tensor) -> xm.Tensor:
        # a matrix-vector product: the matvec and gemm families both accept it
        return F.matmul(F.flatten(F.relu(F.conv2d(x, w, padding=1)), 1), m)

    traced = xm.jit.trace(f, symbolic=True, capture_as_const=True)
    traced(xm.tensor(np.zeros((1, 4, 8, 8), np.float32)))
    return to_module(traced)


def _defs(module: ModuleOp) -> set[str]:
    return {op.family.data for op in module.ops if isinstance(op, K.KernelDefOp)}


def _accepting(target: Target, op: Operation) -> list[str]:
    """The families (priority order) with a unit on the target that accept ``op``."""
    out = []
    for f in target.kernels.families(type(op)):
        unit = target.kernels.first(f, target.isas)
        if unit is not None and unit.match(op) is not None:
            out.append(f)
    return out


def test_select_uses_the_files_choice() -> None:
    target = host_target()
    clean = inference_clean(_conv_module(), target)
    fn, families = next(
        (o, fams) for o in clean.walk() if len(fams := _accepting(target, o)) >= 2
    )
    plain = clean.clone()
    LowerToKernelPass(target).apply_for(plain, target)
    assert families[0] in _defs(plain)  # without choices: today's priority order
    tuned = clean.clone()
    LowerToKernelPass(target, choices=((op_signature(fn), families[-1]),)).apply_for(tuned, target)
    assert families[-1] in _defs(tuned) and families[0] not in _defs(tuned)


def test_stale_choice_falls_back_to_priority() -> None:
    target = host_target()
    clean = inference_clean(_conv_module(), target)
    fn = next(o for o in clean.walk() if o.name.startswith("mgb.conv"))
    plain, stale = clean.clone(), clean.clone()
    LowerToKernelPass(target).apply_for(plain, target)
    LowerToKernelPass(target, choices=((op_signature(fn), "no_such_family"),)).apply_for(stale, target)
    assert str(plain) == str(stale)


def test_compile_reads_the_tuning_file(tmp_path: Path) -> None:
    from compiler.driver.compile import compile as xcompile
    from compiler.tuning import key_for

    target = host_target()
    clean = inference_clean(_conv_module(), target)
    fn, families = next((o, fams) for o in clean.walk() if len(fams := _accepting(target, o)) >= 2)
    TuningFile(key_for(target, 1), {op_signature(fn): families[-1]}).save(tmp_path / "t.json")
    x = np.random.default_rng(2).standard_normal((1, 4, 8, 8)).astype(np.float32)
    plain = xcompile(_conv_module(), target)
    tuned = xcompile(_conv_module(), target, tuning_file=tmp_path / "t.json")
    assert f'"{families[-1]}"' in tuned.ir("kernel-select")
    np.testing.assert_allclose(tuned(x)[0], plain(x)[0], rtol=1e-4, atol=1e-4)
