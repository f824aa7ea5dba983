"""Every public module path of MegEngine 1.13 is either provided as ``compiler.<path>`` (and
imports) or listed, with its reason, in docs/MEGENGINE_API.md's table of absent paths."""

from __future__ import annotations

import importlib
import os
import re

import pytest

DOC = os.path.join(os.path.dirname(__file__), "..", "docs", "MEGENGINE_API.md")

PROVIDED = [
    "amp",
    "amp.autocast",
    "amp.convert_format",
    "amp.grad_scaler",
    "autodiff",
    "autodiff.grad_manager",
    "config",
    "core",
    "core.autodiff",
    "core.autodiff.grad",
    "core.ops",
    "core.ops.builtin",
    "core.ops.custom",
    "core.tensor",
    "core.tensor.amp",
    "core.tensor.dtype",
    "core.tensor.megbrain_graph",
    "core.tensor.utils",
    "data",
    "data.collator",
    "data.dataloader",
    "data.dataset",
    "data.dataset.meta_dataset",
    "data.dataset.vision",
    "data.dataset.vision.meta_vision",
    "data.sampler",
    "data.transform",
    "data.transform.meta_transform",
    "data.transform.vision",
    "data.transform.vision.functional",
    "data.transform.vision.transform",
    "device",
    "distributed",
    "distributed.functional",
    "distributed.group",
    "distributions",
    "distributions.distribution",
    "distributions.exponential",
    "functional",
    "functional.einsum",
    "functional.elemwise",
    "functional.loss",
    "functional.math",
    "functional.metric",
    "functional.nn",
    "functional.quantized",
    "functional.tensor",
    "functional.utils",
    "functional.vision",
    "hub",
    "hub.hub",
    "jit",
    "jit.partial_tracing",
    "jit.tracing",
    "logger",
    "module",
    "module.activation",
    "module.adaptive_pooling",
    "module.batch_matmul_activation",
    "module.batchnorm",
    "module.concat",
    "module.conv",
    "module.conv_bn",
    "module.conv_transpose_bn",
    "module.deformable_psroi_pooling",
    "module.dropout",
    "module.elemwise",
    "module.embedding",
    "module.identity",
    "module.init",
    "module.linear",
    "module.linear_bn",
    "module.lrn",
    "module.module",
    "module.multiheadattn",
    "module.normalization",
    "module.padding",
    "module.pixel_shuffle",
    "module.pooling",
    "module.qat",
    "module.qat.concat",
    "module.qat.conv",
    "module.qat.conv_bn",
    "module.qat.elemwise",
    "module.qat.linear",
    "module.qat.module",
    "module.qat.quant_dequant",
    "module.quant_dequant",
    "module.quantized",
    "module.quantized.concat",
    "module.quantized.conv",
    "module.quantized.conv_bn",
    "module.quantized.elemwise",
    "module.quantized.linear",
    "module.quantized.module",
    "module.quantized.quant_dequant",
    "module.rnn",
    "module.sequential",
    "module.sliding_window",
    "module.vision",
    "optimizer",
    "optimizer.adadelta",
    "optimizer.adagrad",
    "optimizer.adam",
    "optimizer.adamw",
    "optimizer.clip_grad",
    "optimizer.lamb",
    "optimizer.lr_scheduler",
    "optimizer.multi_step_lr",
    "optimizer.optimizer",
    "optimizer.sgd",
    "quantization",
    "quantization.fake_quant",
    "quantization.internal_fake_quant",
    "quantization.observer",
    "quantization.qconfig",
    "quantization.quantize",
    "quantization.utils",
    "random",
    "random.rng",
    "serialization",
    "tensor",
    "traced_module",
    "traced_module.expr",
    "traced_module.node",
    "traced_module.pytree",
    "traced_module.serialization",
    "traced_module.traced_module",
    "traced_module.utils",
    "utils",
    "utils.bn_fusion",
    "utils.comp_graph_tools",
    "utils.dlpack",
    "utils.module_stats",
    "utils.naming",
    "utils.network",
    "utils.network_node",
]

MEGENGINE_1_13_PUBLIC_PATHS = [
    "amp",
    "amp.autocast",
    "amp.convert_format",
    "amp.grad_scaler",
    "autodiff",
    "autodiff.grad_manager",
    "config",
    "conftest",
    "core",
    "core.autodiff",
    "core.autodiff.grad",
    "core.ops",
    "core.ops.builtin",
    "core.ops.custom",
    "core.tensor",
    "core.tensor.amp",
    "core.tensor.array_method",
    "core.tensor.dtype",
    "core.tensor.megbrain_graph",
    "core.tensor.utils",
    "data",
    "data.collator",
    "data.dataloader",
    "data.dataset",
    "data.dataset.meta_dataset",
    "data.dataset.vision",
    "data.dataset.vision.cifar",
    "data.dataset.vision.cityscapes",
    "data.dataset.vision.coco",
    "data.dataset.vision.folder",
    "data.dataset.vision.imagenet",
    "data.dataset.vision.meta_vision",
    "data.dataset.vision.mnist",
    "data.dataset.vision.objects365",
    "data.dataset.vision.utils",
    "data.dataset.vision.voc",
    "data.sampler",
    "data.signal_handling",
    "data.tools",
    "data.transform",
    "data.transform.meta_transform",
    "data.transform.vision",
    "data.transform.vision.functional",
    "data.transform.vision.transform",
    "device",
    "distributed",
    "distributed.functional",
    "distributed.group",
    "distributed.helper",
    "distributed.launcher",
    "distributed.server",
    "distributions",
    "distributions.distribution",
    "distributions.exponential",
    "dtr",
    "dtr.dtr",
    "experimental",
    "experimental.weight_scaler",
    "functional",
    "functional.debug_param",
    "functional.distributed",
    "functional.einsum",
    "functional.elemwise",
    "functional.external",
    "functional.inplace",
    "functional.loss",
    "functional.math",
    "functional.metric",
    "functional.nn",
    "functional.quantized",
    "functional.tensor",
    "functional.tensor_cache",
    "functional.utils",
    "functional.vision",
    "hub",
    "hub.const",
    "hub.exceptions",
    "hub.fetcher",
    "hub.hub",
    "hub.tools",
    "jit",
    "jit.dtr_config",
    "jit.graph_opt_config",
    "jit.partial_tracing",
    "jit.sublinear_memory_config",
    "jit.tracing",
    "jit.xla_backend",
    "logger",
    "module",
    "module.activation",
    "module.adaptive_pooling",
    "module.batch_matmul_activation",
    "module.batchnorm",
    "module.concat",
    "module.conv",
    "module.conv_bn",
    "module.conv_transpose_bn",
    "module.deformable_psroi_pooling",
    "module.dropout",
    "module.elemwise",
    "module.embedding",
    "module.external",
    "module.identity",
    "module.init",
    "module.linear",
    "module.linear_bn",
    "module.lrn",
    "module.module",
    "module.multiheadattn",
    "module.normalization",
    "module.padding",
    "module.pixel_shuffle",
    "module.pooling",
    "module.qat",
    "module.qat.batch_matmul_activation",
    "module.qat.concat",
    "module.qat.conv",
    "module.qat.conv_bn",
    "module.qat.conv_transpose_bn",
    "module.qat.elemwise",
    "module.qat.linear",
    "module.qat.linear_bn",
    "module.qat.module",
    "module.qat.quant_dequant",
    "module.quant_dequant",
    "module.quantized",
    "module.quantized.batch_matmul_activation",
    "module.quantized.concat",
    "module.quantized.conv",
    "module.quantized.conv_bn",
    "module.quantized.conv_transpose_bn",
    "module.quantized.elemwise",
    "module.quantized.linear",
    "module.quantized.linear_bn",
    "module.quantized.module",
    "module.quantized.quant_dequant",
    "module.rnn",
    "module.sequential",
    "module.sliding_window",
    "module.vision",
    "optimizer",
    "optimizer.adadelta",
    "optimizer.adagrad",
    "optimizer.adam",
    "optimizer.adamw",
    "optimizer.clip_grad",
    "optimizer.lamb",
    "optimizer.lr_scheduler",
    "optimizer.multi_step_lr",
    "optimizer.optimizer",
    "optimizer.sgd",
    "quantization",
    "quantization.fake_quant",
    "quantization.internal_fake_quant",
    "quantization.observer",
    "quantization.qconfig",
    "quantization.quantize",
    "quantization.utils",
    "random",
    "random.rng",
    "serialization",
    "tensor",
    "tools",
    "tools.accuracy_shake_var_tree",
    "tools.benchmark_op",
    "tools.compare_binary_iodump",
    "tools.draw_graph",
    "tools.graph_info_analyze",
    "tools.load_network_and_run",
    "tools.network_visualize",
    "tools.profile_analyze",
    "tools.profiler",
    "tools.svg_viewer",
    "traced_module",
    "traced_module.checker",
    "traced_module.compat",
    "traced_module.expr",
    "traced_module.fake_quant",
    "traced_module.module_tracer",
    "traced_module.node",
    "traced_module.pytree",
    "traced_module.serialization",
    "traced_module.tm_config",
    "traced_module.traced_module",
    "traced_module.utils",
    "utils",
    "utils.bn_fusion",
    "utils.comp_graph_tools",
    "utils.custom_op_tools",
    "utils.deprecation",
    "utils.dlpack",
    "utils.future",
    "utils.hook",
    "utils.http_download",
    "utils.max_recursion_limit",
    "utils.module_stats",
    "utils.module_utils",
    "utils.naming",
    "utils.network",
    "utils.network_node",
    "utils.persistent_cache",
    "utils.profile_analyzer",
    "utils.profiler",
    "utils.tensor_sanity_check",
    "utils.tensorboard",
    "utils.tuple_function",
    "xla",
    "xla.build",
    "xla.compile",
    "xla.device",
    "xla.distribute",
    "xla.dtype",
    "xla.ir_utils",
    "xla.lib",
    "xla.lib.config",
    "xla.lib.mlir",
    "xla.lib.mlir.dialects",
    "xla.lib.xla_bridge",
    "xla.lower",
    "xla.rules",
    "xla.rules.communicate",
    "xla.rules.elemwise",
    "xla.rules.hlotensor",
    "xla.rules.indexing",
    "xla.rules.math",
    "xla.rules.nn",
    "xla.rules.normalize",
    "xla.rules.random",
    "xla.rules.reduction",
    "xla.rules.tensor",
    "xla.rules.trivial",
    "xla.rules.utils",
    "xla.rules.vision",
    "xla.sharding",
    "xla.utils",
]


# The public classes/functions MegEngine 1.13 defines in (or re-exports from) these paths, as far as
# xmge provides them (docs/MEGENGINE_API.md lists the ones still missing from provided paths).
MEGENGINE_NAMES: dict[str, list[str]] = {
    "module.adaptive_pooling": ["AdaptiveAvgPool2d", "AdaptiveMaxPool2d"],
    "optimizer.multi_step_lr": ["MultiStepLR"],
    "quantization.internal_fake_quant": ["Function", "MinMaxObserver", "QConfig", "QParams"],
    "functional.metric": ["topk_accuracy"],
    "functional.utils": ["topk_accuracy"],
    "module.qat.concat": ["Concat"],
    "module.qat.conv": ["Conv2d", "ConvRelu2d"],
    "module.qat.conv_bn": ["ConvBn2d", "ConvBnRelu2d"],
    "module.qat.elemwise": ["Elemwise"],
    "module.qat.linear": ["Linear", "LinearRelu"],
    "module.qat.quant_dequant": ["DequantStub", "QuantStub"],
    "module.qat.module": ["QATModule"],
    "module.quantized.concat": ["Concat"],
    "module.quantized.conv": ["Conv2d", "ConvRelu2d"],
    "module.quantized.conv_bn": ["ConvBn2d", "ConvBnRelu2d"],
    "module.quantized.elemwise": ["Elemwise"],
    "module.quantized.linear": ["Linear", "LinearRelu"],
    "module.quantized.quant_dequant": ["DequantStub", "QuantStub"],
    "module.quantized.module": ["QuantizedModule"],
}


def _absent_prefixes() -> list[str]:
    text = open(DOC, encoding="utf-8").read()
    table = text.split("<!-- absent-paths", 1)[1]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    return [p for row in rows for p in re.findall(r"`([a-z0-9_.]+)`", row.split("|")[1])]


def _covered(path: str, prefixes: list[str]) -> bool:
    return any(path == p or path.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("path", PROVIDED)
def test_provided_path_imports(path: str) -> None:
    importlib.import_module(f"compiler.{path}")


def test_every_path_is_provided_or_documented() -> None:
    prefixes = _absent_prefixes()
    unaccounted = [p for p in MEGENGINE_1_13_PUBLIC_PATHS if p not in PROVIDED and not _covered(p, prefixes)]
    assert not unaccounted, f"neither provided nor listed in docs/MEGENGINE_API.md: {unaccounted}"
    both = [p for p in PROVIDED if _covered(p, prefixes)]
    assert not both, f"provided but documented as absent: {both}"
    assert set(PROVIDED) <= set(MEGENGINE_1_13_PUBLIC_PATHS)


@pytest.mark.parametrize("path", sorted(MEGENGINE_NAMES))
def test_provided_path_has_megengine_names(path: str) -> None:
    module = importlib.import_module(f"compiler.{path}")
    missing = [n for n in MEGENGINE_NAMES[path] if not hasattr(module, n)]
    assert not missing, f"compiler.{path} lacks {missing}"


@pytest.mark.parametrize("kind", ["qat", "quantized"])
def test_qat_and_quantized_submodules_reexport_one_class(kind: str) -> None:
    """A class has one identity (and one ``__module__``, which pickles and .tm files name) whichever of
    MegEngine's paths imports it, and the package's names are the submodules' names."""
    package = importlib.import_module(f"compiler.module.{kind}")
    for path, names in MEGENGINE_NAMES.items():
        if path.startswith(f"module.{kind}."):
            sub = importlib.import_module(f"compiler.{path}")
            for name in names:
                assert getattr(sub, name) is getattr(package, name), (path, name)
                assert getattr(sub, name).__module__.startswith(f"compiler.module.{kind}."), (path, name)


def test_documented_absent_paths_do_not_import() -> None:
    """A row of the absent table is stale once its path imports: the path belongs in PROVIDED."""
    prefixes = _absent_prefixes()
    importable = []
    for path in MEGENGINE_1_13_PUBLIC_PATHS:
        if not _covered(path, prefixes):
            continue
        try:
            importlib.import_module(f"compiler.{path}")
        except ModuleNotFoundError:
            continue
        importable.append(path)
    assert not importable, f"documented as absent in docs/MEGENGINE_API.md but importable: {importable}"


def test_auto_naming_scopes_name_traced_ops() -> None:
    import io

    import numpy as np

    import compiler as mge
    from compiler.jit import trace
    from compiler.utils.naming import AutoNaming
    from compiler.utils.network import Network

    AutoNaming.clear()

    @trace(symbolic=True, capture_as_const=True)
    def f(x):
        AutoNaming.push_scope("head")
        try:
            y = mge.functional.relu(x)
        finally:
            AutoNaming.pop_scope()
        return y * 2

    f(mge.tensor(np.ones(3, np.float32)))
    buf = io.BytesIO()
    f.dump(buf, keep_var_name=2, optimize_for_inference=False)
    buf.seek(0)
    names = [v.name for v in Network.load(buf).all_vars]
    assert "head.RELU" in names
    assert AutoNaming.get_scope() == ""
    with pytest.raises(IndexError):
        AutoNaming.pop_scope()
