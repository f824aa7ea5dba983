"""MegEngine's ``optimize_for_inference`` options -> xmge's pass pipeline (the one place that maps them).

:func:`pipeline_for` takes the keyword options of ``trace.dump`` / ``optimize_for_inference``
(``enable_io16xc32``, ``enable_nchw44``, ...) and returns the passes in MegEngine's order (spec B.2
and the B.4 table): the base clean-ups, then one block per option, then constant folding and
dead-code removal. Layout passes are looked up by name (``enable-nchw44``, ...) in the pass
registry, so they are used as soon as they are registered.

Where MegEngine is lax, xmge is strict: two layout options (MegEngine silently keeps the last) and
both float16 modes (MegEngine fails an internal assertion) are errors naming both options.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from xdsl.passes import ModulePass

from passes.canonicalize import MgbCanonicalizePass
from passes.dce import MgbDeadCodeEliminationPass
from passes.inference.arith import ArithFusePass, ArithSimplifyPass, ReorderArithChainPass
from passes.inference.batch_norm import FoldBatchNormPass
from passes.inference.conv_bias import FuseConvBiasNonlinearityPass, FuseConvBiasWithZPass
from passes.inference.float16 import F16IOCompPass, F16IOF32CompPass
from passes.inference.fuse_grain import FuseGrainPass
from passes.inference.param_fuse import ParamFusePass

# layout flags in the order MegEngine's Python side reads them (B.1) -> MegEngine's LayoutTransform
LAYOUT_FLAGS: dict[str, str] = {
    "enable_hwcd4": "NHWCD4",
    "enable_nchw4": "NCHW4",
    "enable_nchw88": "NCHW88",
    "enable_nchw32": "NCHW32",
    "enable_nchw44": "NCHW44",
    "enable_nchw44_dot": "NCHW44_DOT",
    "enable_chwn4": "CHWN4",
    "enable_nchw64": "NCHW64",
}
# layouts whose block also runs FuseConvBiasZ (B.4 rows 5, 10, 11, 12)
LAYOUTS_WITH_Z = frozenset({"enable_nchw4", "enable_nchw32", "enable_chwn4", "enable_nchw64"})

# enable_* keyword -> InferenceOptions field
FLAG_FIELDS: dict[str, str] = {
    "enable_io16xc32": "f16_io_f32_comp",
    "enable_ioc16": "f16_io_comp",
    "enable_fuse_conv_bias_nonlinearity": "fuse_conv_bias_nonlinearity",
    "enable_fuse_conv_bias_with_z": "fuse_conv_bias_with_z",
    "enable_fuse_preprocess": "fuse_preprocess",
    "enable_fuse_grain": "fuse_grain",
}


class InferenceOptionError(ValueError):
    """Unknown, conflicting or not yet supported ``optimize_for_inference`` options."""


def layout_pass_name(flag: str) -> str:
    """The registry name of a layout flag's pass: ``enable_nchw44_dot`` -> ``enable-nchw44-dot``."""
    return flag.replace("_", "-")


@dataclass(frozen=True)
class InferenceOptions:
    """MegEngine's ``GraphOptimizeOptions`` as set by ``optimize_for_inference``'s keywords."""

    f16_io_f32_comp: bool = False
    f16_io_comp: bool = False
    fuse_conv_bias_nonlinearity: bool = False
    fuse_conv_bias_with_z: bool = False
    fuse_preprocess: bool = False
    fuse_grain: bool = True
    layout: str | None = None
    """The layout flag (``"enable_nchw44"``, ...), or None for plain NCHW."""

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> InferenceOptions:
        """Parse ``enable_*`` keywords; unknown ones raise ``unknown options: [...]`` as MegEngine."""
        unknown = [k for k in kwargs if k not in FLAG_FIELDS and k not in LAYOUT_FLAGS]
        if unknown:
            raise InferenceOptionError(f"unknown options: {unknown}")
        values: dict[str, Any] = {FLAG_FIELDS[k]: bool(v) for k, v in kwargs.items() if k in FLAG_FIELDS}
        layouts = [k for k in LAYOUT_FLAGS if kwargs.get(k)]
        if len(layouts) > 1:
            raise InferenceOptionError(
                f"conflicting layout options {' and '.join(layouts)}: choose one "
                f"(MegEngine would silently keep only {layouts[-1]})"
            )
        if values.get("f16_io_f32_comp") and values.get("f16_io_comp"):
            raise InferenceOptionError(
                "conflicting options enable_io16xc32 and enable_ioc16: choose one float16 mode "
                "(MegEngine fails with an internal assertion)"
            )
        return cls(layout=layouts[0] if layouts else None, **values)

    @property
    def layout_transform(self) -> str:
        """MegEngine's LayoutTransform name (``DEFAULT`` when no layout is set)."""
        return LAYOUT_FLAGS[self.layout] if self.layout else "DEFAULT"

    def enabled(self) -> list[str]:
        """The set flags, as ``enable_*`` keywords."""
        by_field = {f: k for k, f in FLAG_FIELDS.items()}
        out = [by_field[f.name] for f in fields(self) if f.name in by_field and getattr(self, f.name)]
        return out + ([self.layout] if self.layout else [])

    def option_passes(self) -> list[ModulePass]:
        """The passes of ``add_passes_for_optimize_options`` (B.4), in MegEngine's order."""
        out: list[ModulePass] = []
        if self.fuse_grain:
            out.append(FuseGrainPass())
        if self.fuse_preprocess:
            raise InferenceOptionError(
                "optimize option enable_fuse_preprocess is not implemented in xmge yet (it fuses int8 "
                "GPU input pre-processing and has no effect on float graphs); dump without it"
            )
        if self.f16_io_comp:
            out.append(F16IOCompPass())
        if self.f16_io_f32_comp:
            out.append(F16IOF32CompPass())
        if self.layout:
            out.append(FuseConvBiasNonlinearityPass())
            if self.layout in LAYOUTS_WITH_Z:
                out.append(FuseConvBiasWithZPass())
            out.append(_layout_pass(self.layout))
        if self.fuse_conv_bias_nonlinearity:
            out.append(FuseConvBiasNonlinearityPass())
        if self.fuse_conv_bias_with_z:
            out += [FuseConvBiasNonlinearityPass(), FuseConvBiasWithZPass()]
        if out:
            out.append(ParamFusePass())
        return out

    def passes(self) -> list[ModulePass]:
        """The whole ``optimize_for_inference`` pipeline for these options."""
        return [*base_passes(), *self.option_passes(), MgbCanonicalizePass(), MgbDeadCodeEliminationPass()]


def _layout_pass(flag: str) -> ModulePass:
    from passes.registry import builtin_passes

    name = layout_pass_name(flag)
    cls = builtin_passes().get(name)
    if cls is None:
        raise InferenceOptionError(
            f"optimize option {flag} is not implemented in xmge yet: it needs the layout pass "
            f"{name!r}, which is not in the pass registry"
        )
    return cls()


def base_passes() -> list[ModulePass]:
    """What ``optimize_for_inference`` always runs (B.2 steps 1-18 that matter for xmge's IR)."""
    return [
        FoldBatchNormPass(),
        MgbCanonicalizePass(),
        ArithSimplifyPass(),
        ParamFusePass(),
        ReorderArithChainPass(),
        ArithFusePass(),
        ParamFusePass(),
        MgbDeadCodeEliminationPass(),
    ]


def pipeline_for(*, optimize_for_inference: bool = True, **options: Any) -> list[ModulePass]:
    """The passes ``trace.dump(..., optimize_for_inference=..., **options)`` runs, in order.

    ``options`` are MegEngine's ``enable_*`` keywords; unknown ones raise ``unknown options: [...]``
    (checked even when ``optimize_for_inference`` is False, where no pass runs at all).
    """
    opts = InferenceOptions.from_kwargs(options)
    return opts.passes() if optimize_for_inference else []
