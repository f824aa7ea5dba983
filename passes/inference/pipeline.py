"""MegEngine's ``optimize_for_inference`` options -> xmge's pass pipeline (the one place that maps them).

:func:`pipeline_for` takes the keyword options of ``trace.dump`` / ``optimize_for_inference``
(``enable_io16xc32``, ``enable_nchw44``, ...) and returns the passes in MegEngine's order (spec B.2
and the B.4 table): the base clean-ups, then one block per option, then constant folding and
dead-code removal. What each keyword means (its pass, layout and metadata bit) is one row of
:mod:`passes.inference.options`; option passes are looked up by that row's name in the pass
registry, so a layout pass is used as soon as it is registered.

Where MegEngine is lax, xmge is strict: two layout options (MegEngine silently keeps the last) and
both float16 modes (MegEngine fails an internal assertion) are errors naming both options.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xdsl.passes import ModulePass

from passes.canonicalize import MgbCanonicalizePass
from passes.dce import MgbDeadCodeEliminationPass
from passes.inference.arith import ArithFusePass, ArithSimplifyPass, ReorderArithChainPass
from passes.inference.batch_norm import FoldBatchNormPass
from passes.inference.options import (
    BY_KEYWORD,
    LAYOUT_OPTIONS,
    DumpOption,
    InferenceOptionError,
    metadata_word,
    parse_options,
)
from passes.inference.param_fuse import ParamFusePass

__all__ = ["InferenceOptionError", "InferenceOptions", "base_passes", "pipeline_for"]


@dataclass(frozen=True)
class InferenceOptions:
    """MegEngine's ``GraphOptimizeOptions`` as set by ``optimize_for_inference``'s keywords."""

    enabled: frozenset[str] = frozenset(o.keyword for o in BY_KEYWORD.values() if o.default)
    """The keywords that are on (``passes.inference.options.OPTIONS`` rows)."""

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> InferenceOptions:
        """Parse ``enable_*`` keywords; unknown ones raise ``unknown options: [...]`` as MegEngine."""
        return cls(parse_options(kwargs))

    @property
    def layout(self) -> DumpOption | None:
        """The layout option that is on, or None for plain NCHW."""
        return next((o for o in LAYOUT_OPTIONS if o.keyword in self.enabled), None)

    def metadata_word(self) -> int:
        """The ``optimize_options`` word a dump with these options records in its metadata."""
        return metadata_word(self.enabled)

    def option_passes(self) -> list[ModulePass]:
        """The passes of ``add_passes_for_optimize_options`` (B.4), in MegEngine's order."""
        steps: list[str] = []
        on = self.enabled.__contains__
        for keyword in ("enable_fuse_grain", "enable_fuse_preprocess", "enable_ioc16", "enable_io16xc32"):
            if on(keyword):
                steps.append(keyword)
        layout = self.layout
        if layout is not None:
            steps.append("enable_fuse_conv_bias_nonlinearity")
            if layout.also_fuses_z:
                steps.append("enable_fuse_conv_bias_with_z")
            steps.append(layout.keyword)
        if on("enable_fuse_conv_bias_nonlinearity"):
            steps.append("enable_fuse_conv_bias_nonlinearity")
        if on("enable_fuse_conv_bias_with_z"):
            steps += ["enable_fuse_conv_bias_nonlinearity", "enable_fuse_conv_bias_with_z"]
        out = [_option_pass(BY_KEYWORD[keyword]) for keyword in steps]
        if out:
            out.append(ParamFusePass())
        return out

    def passes(self) -> list[ModulePass]:
        """The whole ``optimize_for_inference`` pipeline for these options."""
        return [*base_passes(), *self.option_passes(), MgbCanonicalizePass(), MgbDeadCodeEliminationPass()]


def _option_pass(option: DumpOption) -> ModulePass:
    """The pass of an option, looked up by its registry name (layout passes register themselves)."""
    from passes.registry import builtin_passes

    if option.pass_name is None:
        raise InferenceOptionError(
            f"optimize option {option.keyword} is not implemented in xmge yet ({option.missing_reason}); "
            "dump without it"
        )
    cls = builtin_passes().get(option.pass_name)
    if cls is None:
        kind = "layout pass" if option.layout else "pass"
        raise InferenceOptionError(
            f"optimize option {option.keyword} is not implemented in xmge yet: it needs the {kind} "
            f"{option.pass_name!r}, which is not in the pass registry"
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
