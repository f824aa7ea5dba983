"""Per-pass numeric bisect (``compiler.driver.numerics``): a pass that breaks numerics is found by name
after correct passes ran, correct pipelines pass on every hub model (float and int8), the failing
IR is dumped, and the tolerances follow the dtypes."""

from __future__ import annotations

import functools
import io
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, ModuleOp
from xdsl.dialects.func import Func
from xdsl.parser import Parser
from xdsl.passes import ModulePass

import compiler as xm
from compiler import jit
from compiler.driver.compile import kernel_passes, to_module
from compiler.driver.demo import randomise_statistics
from compiler.driver.numerics import (
    CODE_TOLERANCE,
    REFERENCE_TOLERANCE,
    NumericsError,
    NumericsMismatch,
    Tolerance,
    compare_outputs,
    load_inputs,
    random_inputs,
    verify_compile,
    verify_compiled,
    verify_pipeline,
)
from compiler.driver.targets import parse_target
from dialects import tensor as T
from dialects.dtypes import quantized_numpy_dtype
from dialects.layout import LayoutDialect
from dialects.weights import full_weights
from passes.inference import pipeline_for
from passes.registry import import_plugin
from semantics import run_module
from tests.codegen_util import require

PLUGIN = os.path.join(os.path.dirname(__file__), "data", "plugins", "break_numerics.py")
OPTIONS: dict[str, dict[str, bool]] = {
    "default": {},
    "fuse": {"enable_fuse_conv_bias_nonlinearity": True},
    "nchw88": {"enable_nchw88": True},
    "nchw44": {"enable_nchw44": True},
    "io16xc32": {"enable_io16xc32": True},
}


def plugin() -> Any:
    return import_plugin(PLUGIN)


def _ctx() -> Context:
    ctx = Context()
    for d in (Builtin, Func, T.Mgb, LayoutDialect):
        ctx.load_dialect(d)
    return ctx


# -- the hub models, small ---------------------------------------------------------------------


@dataclass(frozen=True)
class HubCase:
    build: Callable[[], Any]
    shapes: tuple[tuple[int, ...], ...]
    quantized: bool = False


def _float(module: str, fn: str, *shapes: tuple[int, ...], **kwargs: Any) -> HubCase:
    def build() -> Any:
        import importlib

        net = getattr(importlib.import_module(f"compiler.hub.{module}"), fn)(**kwargs)
        randomise_statistics(net, np.random.default_rng(3), spread=0.3)
        return net

    return HubCase(build, shapes)


def _int8(fn: str, **kwargs: Any) -> HubCase:
    def build() -> Any:
        import compiler.hub.quantized as Q

        return getattr(Q, fn)(quantized=True, calibration_shape=(1, 3, 32, 32), **kwargs)

    return HubCase(build, ((1, 3, 32, 32),), quantized=True)


HUB: dict[str, HubCase] = {
    "convnet": _float("convnet", "ConvNet", (1, 1, 28, 28)),
    "mini_resnet": _float("mini_resnet", "MiniResNet", (1, 3, 32, 32)),
    "multi_io": _float("multi_io", "MultiIO", (1, 3, 8, 8), (1, 1, 1, 1)),
    "resnet18": _float("resnet", "resnet18", (1, 3, 16, 16), num_classes=10),
    "resnext50": _float("resnext", "resnext50_32x4d", (1, 3, 16, 16), layers=[1, 1, 1, 1], num_classes=10),
    "mobilenet_v2": _float("mobilenet_v2", "mobilenet_v2", (1, 3, 32, 32), num_classes=10, width_mult=0.25),
    "shufflenet_v2": _float("shufflenet_v2", "shufflenet_v2_x0_5", (1, 3, 32, 32), num_classes=10),
    # the sizes of tests/test_zoo_models.py's QUANTIZED variants
    "quantized_resnet18": _int8("quantized_resnet18", layers=[1, 1, 1, 1], width=8, num_classes=10),
    "quantized_mobilenet_v2": _int8(
        "quantized_mobilenet_v2", width_mult=0.25, depth=4, last_channel=64, num_classes=10
    ),
    "quantized_shufflenet_v1": _int8(
        "quantized_shufflenet_v1",
        groups=2,
        stage_repeats=[1, 2, 1],
        stage_channels=[32, 64, 128],
        stem=8,
        num_classes=10,
    ),  # fmt: skip
}
FLOAT_HUB = [n for n, c in HUB.items() if not c.quantized]
INT8_HUB = [n for n, c in HUB.items() if c.quantized]


@functools.cache
def _traced(name: str) -> tuple[str, tuple[np.ndarray, ...]]:
    """The traced model's IR text (full weights) and the inputs it was traced on."""
    case = HUB[name]
    net = case.build()
    net.eval()
    rng = np.random.default_rng(7)
    xs = tuple(rng.standard_normal(s).astype(np.float32) for s in case.shapes)
    traced = jit.trace(lambda *ts: net(*ts), symbolic=True, capture_as_const=True)
    traced(*[xm.tensor(x) for x in xs])
    with full_weights():
        return str(traced.module), xs


def hub_module(name: str) -> tuple[ModuleOp, tuple[np.ndarray, ...]]:
    text, xs = _traced(name)
    with full_weights():
        return Parser(_ctx(), text).parse_module(), xs


def _check_clean(report: Any) -> None:
    assert report.ok, str(report)
    assert report.failing_pass is None
    assert all(s.status in ("ok", "skipped") for s in report.stages)
    ran = [s for s in report.stages[1:] if s.status == "ok"]
    assert ran and all(s.max_error <= s.tolerance for s in ran if s.worst is not None)


# -- a broken pass is found by name -------------------------------------------------------------


def _with_inserted(passes: list[ModulePass], after: str, bad: ModulePass) -> list[ModulePass]:
    at = next(i for i, p in enumerate(passes) if p.name == after) + 1
    return [*passes[:at], bad, *passes[at:]]


def test_flipped_conv_bias_is_found_after_correct_passes(tmp_path: Any) -> None:
    module, _ = hub_module("mini_resnet")
    good = pipeline_for(enable_fuse_conv_bias_nonlinearity=True)
    passes = _with_inserted(good, "fuse-conv-bias-nonlinearity", plugin().FlipConvBiasPass(scope="layer2"))
    report = verify_pipeline(module, passes, seed=1)

    assert not report.ok and report.failing_pass == "test-flip-conv-bias"
    names = [s.name for s in report.stages]
    at = names.index("test-flip-conv-bias")
    assert at == len(names) - 1  # the run stops at the failing pass
    assert names[1:at] == [p.name for p in good[: at - 1]]  # every correct pass before it ran...
    assert all(s.status == "ok" for s in report.stages[1:at])  # ...and agreed
    failing = report.failing
    assert failing is not None and failing.options == {"scope": "layer2"}
    assert failing.worst is not None and failing.max_error > 100 * failing.tolerance
    text = str(report)
    assert "FAILED at pass test-flip-conv-bias" in text and "scope='layer2'" in text
    assert f"worst output: {failing.worst.output} at index {failing.worst.index}" in text
    assert "IR before test-flip-conv-bias:" in text and "IR after test-flip-conv-bias:" in text
    assert "mgb.elemwise negate" in report.ir_after and "mgb.elemwise negate" not in report.ir_before
    assert str(module) == str(hub_module("mini_resnet")[0])  # the caller's module is left alone


def test_failing_ir_dump_reproduces_the_failure(tmp_path: Any) -> None:
    module, _ = hub_module("convnet")
    passes = _with_inserted(pipeline_for(), "fuse-grain", plugin().MaxToAveragePoolPass())
    report = verify_pipeline(module, passes)
    assert report.failing_pass == "test-max-to-average-pool"

    out = tmp_path / "fail"
    paths = report.write_failing_ir(out)
    assert sorted(os.listdir(out)) == ["after.mlir", "before.mlir"]  # no temporary file left behind
    before, after = (out / "before.mlir").read_text(), (out / "after.mlir").read_text()
    assert paths == [str(out / "before.mlir"), str(out / "after.mlir")]
    assert "mgb.pooling max" in before and "mgb.pooling max" not in after
    assert "mgb.pooling average" in after
    # full weights: the dumped IR parses and the pass fails again on it
    with full_weights():
        parsed = Parser(_ctx(), before).parse_module()
    again = verify_pipeline(parsed, [plugin().MaxToAveragePoolPass()], inputs=report.inputs)
    assert again.failing_pass == "test-max-to-average-pool"
    assert again.failing is not None and report.failing is not None
    assert again.failing.max_error == report.failing.max_error
    assert verify_pipeline(module, pipeline_for()).write_failing_ir(tmp_path / "none") == []


def test_broken_pass_in_an_int8_model_is_found() -> None:
    module, _ = hub_module("quantized_resnet18")
    passes = _with_inserted(pipeline_for(enable_nchw44=True), "fuse-grain", plugin().MaxToAveragePoolPass())
    report = verify_pipeline(module, passes)
    assert report.failing_pass == "test-max-to-average-pool"
    worst = report.failing.worst if report.failing else None
    assert worst is not None and worst.step is not None and worst.error > worst.step  # > 1 step


@dataclass(frozen=True)
class RaisingPass(ModulePass):
    """A pass that crashes."""

    name = "test-raise"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        raise RuntimeError("boom\nsecond line")


def test_a_pass_that_raises_is_the_failing_pass() -> None:
    module, _ = hub_module("convnet")
    report = verify_pipeline(module, [*pipeline_for()[:2], RaisingPass()])
    assert report.failing_pass == "test-raise"
    assert report.failing is not None and report.failing.note == "the pass failed: RuntimeError: boom"


# -- correct pipelines pass ---------------------------------------------------------------------


@pytest.mark.parametrize("name", FLOAT_HUB)
def test_default_pipeline_on_every_float_hub_model(name: str) -> None:
    module, xs = hub_module(name)
    _check_clean(verify_pipeline(module, pipeline_for(), inputs=list(xs)))


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_every_option_on_a_small_resnet(option: str) -> None:
    module, _ = hub_module("mini_resnet")
    report = verify_pipeline(module, pipeline_for(**OPTIONS[option]), seed=2)
    _check_clean(report)
    if option == "io16xc32":  # float16 values appear: the float16 tolerance applies from there on
        f16 = next(s for s in report.stages if s.name == "f16-io-f32-comp")
        assert f16.worst is not None and 0 < f16.max_error and "float16" in f16.worst.rule


@pytest.mark.parametrize("name", INT8_HUB)
def test_int8_hub_models_pass_with_their_step_tolerance(name: str) -> None:
    module, xs = hub_module(name)
    for option in ("default", "nchw44"):
        report = verify_pipeline(module, pipeline_for(**OPTIONS[option]), inputs=list(xs))
        _check_clean(report)
        worst = report.stages[-1].worst
        assert worst is not None and worst.step is not None and "quantization step" in worst.rule


@pytest.mark.slow
@pytest.mark.parametrize("option", sorted(OPTIONS))
@pytest.mark.parametrize("name", sorted(HUB))
def test_every_hub_model_with_every_option(name: str, option: str) -> None:
    module, xs = hub_module(name)
    _check_clean(verify_pipeline(module, pipeline_for(**OPTIONS[option]), inputs=list(xs)))


# -- kernel stages and generated code -----------------------------------------------------------


def test_kernel_stages_are_skipped_with_a_note() -> None:
    module, _ = hub_module("convnet")
    target = parse_target("x86-avx2")
    report = verify_pipeline(module, [*pipeline_for(), *kernel_passes(target, 1)])
    _check_clean(report)
    skipped = [s for s in report.stages if s.status == "skipped"]
    assert [s.name for s in skipped] == [p.name for p in kernel_passes(target, 1)]
    assert all("no kernel for kernel." in s.note for s in skipped)
    assert report.reference_module is not None and "kernel." not in str(report.reference_module)


@pytest.mark.parametrize("target", ["x86-avx2", "x86-avx2-nchw88+io16xc32"])
def test_verify_compile_checks_the_generated_code(target: str) -> None:
    require(target)
    module, xs = hub_module("mini_resnet")
    report = verify_compile(module, target, inputs=list(xs))
    _check_clean(report)
    code = report.stages[-1]
    assert code.name == f"code ({target})" and code.status == "ok" and code.worst is not None
    assert ("float16" in code.worst.rule) == ("io16xc32" in target)
    assert report.compiled is not None
    np.testing.assert_array_equal(report.compiled.run(list(xs))[0], report.compiled(*xs))


def test_generated_code_disagreeing_with_the_reference_fails() -> None:
    """The (correct) code against a reference stage a broken pass produced: the code stage fails."""
    require("x86-avx2")
    module, xs = hub_module("convnet")
    compiled = xm.compile(module, "x86-avx2")
    broken = verify_pipeline(module, [plugin().MaxToAveragePoolPass()]).module
    assert broken is not None
    stage = verify_compiled(broken, compiled, list(xs))
    assert stage.status == "failed" and stage.name == "code (x86-avx2)"
    assert verify_compiled(module, compiled, list(xs)).status == "ok"


def test_verify_compile_of_an_int8_model_on_arm() -> None:
    from backends.c.cross import toolchain_problem

    problem = toolchain_problem()
    if problem is not None:
        pytest.skip(f"ARM toolchain: {problem}")
    module, xs = hub_module("quantized_resnet18")
    with pytest.warns(UserWarning, match="qemu"):
        report = verify_compile(module, "arm-nchw44", inputs=list(xs))
    _check_clean(report)
    assert report.stages[-1].name == "code (arm-nchw44)"


# -- tolerances ---------------------------------------------------------------------------------


def _compare(got: np.ndarray, want: np.ndarray, step: float | None = None, float16: bool = False) -> Any:
    worst = compare_outputs([got], [want], ["y"], [step], float16, REFERENCE_TOLERANCE)
    assert worst is not None
    return worst


def test_float_tolerances_are_relative_with_a_floor_from_the_output_scale() -> None:
    want = np.array([[1000.0, 1.0, 0.0]], np.float32)
    assert _compare(want * np.float32(1 + 5e-6), want).ok
    assert _compare(want + np.float32(5e-3), want).ok  # 5e-3 < 1e-5 * 1000: the scale's floor
    bad = want.copy()
    bad[0, 1] += 0.02
    worst = _compare(bad, want)
    assert not worst.ok and worst.index == (0, 1) and worst.output == "y"
    assert abs(worst.error - 0.02) < 1e-6 and worst.want == 1.0
    assert _compare(bad, want, float16=True).ok  # 0.02 < 1e-2 * 1 + 1e-2 * 1000
    assert not _compare(want * np.float32(1.05), want, float16=True).ok


def test_nan_and_inf_compare_equal_only_to_themselves() -> None:
    want = np.array([np.nan, np.inf, 1.0], np.float32)
    assert _compare(want.copy(), want).error == 0
    worst = _compare(np.array([1.0, np.inf, 1.0], np.float32), want)
    assert not worst.ok and worst.index == (0,) and worst.error == np.inf


def test_quantized_outputs_may_move_one_step() -> None:
    q = quantized_numpy_dtype("qint8", 0.25)
    want = np.array([10, -3, 127], np.int8).view(q)
    one = np.array([11, -3, 126], np.int8).view(q)
    two = np.array([12, -3, 127], np.int8).view(q)
    assert _compare(one, want, step=0.25).ok
    worst = _compare(two, want, step=0.25)
    assert not worst.ok and worst.error == pytest.approx(0.5) and "2 steps" in str(worst)
    strict = Tolerance(quantized_steps=0)
    assert compare_outputs([one], [want], ["y"], [0.25], False, strict).ok is False  # type: ignore[union-attr]
    # a float output dequantized from a qint8 value of step 0.25 gets the same allowance
    assert _compare(np.array([2.75], np.float32), np.array([2.5], np.float32), step=0.25).ok
    assert not _compare(np.array([3.0], np.float32), np.array([2.5], np.float32), step=0.25).ok


def test_plain_integer_outputs_are_exact() -> None:
    want = np.array([1, 2, 3], np.int32)
    assert _compare(want.copy(), want).ok
    assert not _compare(np.array([1, 2, 4], np.int32), want).ok


def test_code_tolerance_is_looser_for_float32_only() -> None:
    assert CODE_TOLERANCE.float32_rtol > REFERENCE_TOLERANCE.float32_rtol
    assert CODE_TOLERANCE.quantized_steps == REFERENCE_TOLERANCE.quantized_steps


# -- inputs -------------------------------------------------------------------------------------

TYPED = """
builtin.module {
  func.func @main(%q: tensor<2x64x!mgb.quant<qint8, 0.5>>, %h: tensor<2x64xf16>, %i: tensor<2x64xi32>,
                  %f: tensor<2x64xf32>) -> (tensor<2x64x!mgb.quant<qint8, 0.5>>, tensor<2x64xf32>)
      attributes {input_names = ["q", "h", "i", "f"]} {
    func.return %q, %f : tensor<2x64x!mgb.quant<qint8, 0.5>>, tensor<2x64xf32>
  }
}
"""


def test_random_inputs_respect_dtypes() -> None:
    module = Parser(_ctx(), TYPED).parse_module()
    q, h, i, f = random_inputs(module, seed=4)
    assert q.dtype == quantized_numpy_dtype("qint8", 0.5) and q.view(np.int8).min() < -64
    assert h.dtype == np.float16 and i.dtype == np.int32 and f.dtype == np.float32
    assert set(np.unique(i)) <= {0, 1, 2, 3}
    assert abs(float(f.std()) - 1.0) < 0.3
    again = random_inputs(module, seed=4)
    assert all(np.array_equal(a, b) for a, b in zip((q, h, i, f), again, strict=True))
    assert not np.array_equal(f, random_inputs(module, seed=5)[3])
    outs = run_module(module, [q, h, i, f])
    assert np.array_equal(outs[0].view(np.int8), q.view(np.int8))


def test_given_inputs_from_npy_files(tmp_path: Any) -> None:
    module = Parser(_ctx(), TYPED).parse_module()
    f = np.arange(128, dtype=np.float32).reshape(2, 64)
    q = np.full((2, 64), -7, np.int8)
    np.save(tmp_path / "f.npy", f)
    np.save(tmp_path / "q.npy", q)
    inputs = load_inputs(module, {"f": str(tmp_path / "f.npy"), "q": str(tmp_path / "q.npy")})
    assert np.array_equal(inputs[3], f) and np.array_equal(inputs[0].view(np.int8), q)
    assert inputs[0].dtype == quantized_numpy_dtype("qint8", 0.5)
    with pytest.raises(NumericsError, match="no input named x; the inputs are q, h, i, f"):
        load_inputs(module, {"x": str(tmp_path / "f.npy")})
    with pytest.raises(NumericsError, match=r"input f must have shape \(2, 64\)"):
        np.save(tmp_path / "bad.npy", f[:1])
        load_inputs(module, {"f": str(tmp_path / "bad.npy")})
    with pytest.raises(NumericsError, match="input h: cannot read"):
        load_inputs(module, {"h": str(tmp_path / "missing.npy")})
    with pytest.raises(NumericsError, match="quantized: give its integer storage values"):
        load_inputs(module, {"q": str(tmp_path / "f.npy")})


# -- xmge-opt --verify-numerics (the wiring the driver gets) -------------------------------------


def _opt_main(argv: list[str]) -> Any:
    """xmge-opt itself, its --verify-numerics table captured."""
    from compiler.driver.opt import XmgeOptMain

    main = XmgeOptMain(args=argv)
    main.verify_log = io.StringIO()
    main.log = main.verify_log  # type: ignore[attr-defined]
    return main


def test_opt_driver_names_the_plugin_pass_and_dumps_ir(tmp_path: Any) -> None:
    module, xs = hub_module("convnet")
    with full_weights():
        (tmp_path / "net.mlir").write_text(str(module))
    np.save(tmp_path / "x.npy", xs[0])
    dump = tmp_path / "dump"
    pipeline = (
        "fold-batch-norm,arith-fuse,fuse-conv-bias-nonlinearity,test-flip-conv-bias{scope=conv2},mgb-dce"
    )
    argv = [str(tmp_path / "net.mlir"), "--load-plugin", PLUGIN, "-p", pipeline, "--verify-numerics"]
    argv += ["--input", f"arg_0={tmp_path / 'x.npy'}", "--dump-failing-ir", str(dump)]
    main = _opt_main(argv)
    with pytest.raises(
        NumericsMismatch, match=r"numerics changed by test-flip-conv-bias\{scope=conv2\}: output"
    ):
        main.run()
    log = main.log.getvalue()
    assert "FAILED at pass test-flip-conv-bias" in log and f"wrote {dump / 'before.mlir'}" in log
    assert "  ok       fuse-conv-bias-nonlinearity: " in log and "mgb-dce" not in log.split("FAILED")[0]
    assert "mgb.elemwise negate" in (dump / "after.mlir").read_text()

    good = _opt_main([str(tmp_path / "net.mlir"), "-p", "fold-batch-norm,arith-fuse", "--verify-numerics"])
    good.run()
    assert "all stages agree within tolerance" in good.log.getvalue()
    with pytest.raises(NumericsError, match="expected NAME=FILE.npy"):
        _opt_main([str(tmp_path / "net.mlir"), "-p", "mgb-dce", "--verify-numerics", "--input", "x"]).run()


def test_verify_compile_of_a_module_object_needs_no_inputs() -> None:
    module, _ = hub_module("multi_io")
    report = verify_compile(module, "ref")
    _check_clean(report)
    assert [a.shape for a in report.inputs] == [(1, 3, 8, 8), (1, 1, 1, 1)]
    assert to_module(module) is module


def test_compile_verify_returns_the_model_or_names_the_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    import compiler.driver.compile as driver

    module, xs = hub_module("convnet")
    compiled = driver.compile(module, "x86-avx2", example_inputs=list(xs), verify=True)
    np.testing.assert_allclose(compiled(*xs), driver.compile(module, "ref")(*xs), rtol=1e-4, atol=1e-5)

    spec = importlib.util.spec_from_file_location("break_numerics", PLUGIN)
    assert spec is not None and spec.loader is not None
    plugin = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "break_numerics", plugin)  # dataclasses look their module up
    spec.loader.exec_module(plugin)
    correct = driver.inference_passes
    broken = plugin.FlipConvBiasPass(scope="conv2")
    monkeypatch.setattr(driver, "inference_passes", lambda target=None: [*correct(target), broken])
    with pytest.raises(NumericsMismatch, match=r"numerics changed by test-flip-conv-bias"):
        driver.compile(module, "x86-avx2", example_inputs=list(xs), verify=True)
