"""MegEngine's ``optimize_for_inference`` options: one row per dump keyword (spec A.8, B.1, B.4).

Each :class:`DumpOption` says, for one keyword of ``trace.dump`` / ``optimize_for_inference``
(``enable_nchw44``, ...), which xmge pass implements it (its registry name, what ``xmge-opt``
users type), the MegEngine ``LayoutTransform`` it selects, how it is stored in a ``.mge`` file's
``optimize_options`` metadata word (``GraphOptimizeOptions::serialize``: a flag bit in bits 0..6,
or the layout's enum value in bits 32..63), and which other options exclude it. Everything else
(the pipeline builder, ``trace.dump``'s option check and metadata word, reading that word back from
a file) derives from :data:`OPTIONS`; this module imports no pass, so the ``.mge`` backend can read
it without pulling in the optimizer.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dialects.errors import XmgeError


class InferenceOptionError(XmgeError, ValueError):
    """Unknown, conflicting or not yet supported ``optimize_for_inference`` options."""


@dataclass(frozen=True)
class DumpOption:
    """One ``optimize_for_inference`` keyword."""

    keyword: str
    """What ``trace.dump`` takes (``enable_nchw44``)."""
    pass_name: str | None
    """Registry name of the xmge pass that implements it; None when xmge has none yet."""
    bit: int | None = None
    """Flag bit of the ``optimize_options`` metadata word (flags only)."""
    layout: str | None = None
    """MegEngine's ``LayoutTransform`` name (layout options only)."""
    layout_code: int = 0
    """That enum's value, stored in bits 32..63 of the metadata word."""
    also_fuses_z: bool = False
    """The layout's block of ``add_passes_for_optimize_options`` also runs FuseConvBiasZ (B.4)."""
    exclusive: str | None = None
    """Options sharing a group cannot be combined (the key of :data:`CONFLICTS`)."""
    default: bool = False
    """Set unless the keyword says otherwise (only ``enable_fuse_grain``)."""
    missing_reason: str = ""
    """Why xmge has no pass for it (``pass_name`` None)."""


# Why two options of one group cannot be combined; MegEngine is laxer, xmge refuses by name.
CONFLICTS: dict[str, str] = {
    "layout": "choose one (MegEngine would silently keep only {last})",
    "float16": "choose one float16 mode (MegEngine fails with an internal assertion)",
}

LAYOUT_SHIFT = 32
"""Bits 32..63 of the metadata word hold the LayoutTransform value; DEFAULT (no layout) is 0."""
WEIGHT_PREPROCESS_BIT = 4
"""A flag MegEngine's C++ API sets and Python cannot: no keyword, ignored when reading back."""

OPTIONS: tuple[DumpOption, ...] = (
    # flags, in bit order
    DumpOption("enable_io16xc32", "f16-io-f32-comp", bit=0, exclusive="float16"),
    DumpOption("enable_ioc16", "f16-io-comp", bit=1, exclusive="float16"),
    DumpOption("enable_fuse_conv_bias_nonlinearity", "fuse-conv-bias-nonlinearity", bit=2),
    DumpOption("enable_fuse_conv_bias_with_z", "fuse-conv-bias-with-z", bit=3),
    DumpOption(
        "enable_fuse_preprocess",
        None,
        bit=5,
        missing_reason="it fuses int8 GPU input pre-processing and has no effect on float graphs",
    ),
    DumpOption("enable_fuse_grain", "fuse-grain", bit=6, default=True),
    # layouts, in the order MegEngine's Python side reads them (B.1): with several set, the last wins
    DumpOption("enable_hwcd4", "enable-hwcd4", layout="NHWCD4", layout_code=2, exclusive="layout"),
    DumpOption("enable_nchw4", "enable-nchw4", layout="NCHW4", layout_code=1, also_fuses_z=True,
               exclusive="layout"),  # fmt: skip
    DumpOption("enable_nchw88", "enable-nchw88", layout="NCHW88", layout_code=3, exclusive="layout"),
    DumpOption("enable_nchw32", "enable-nchw32", layout="NCHW32", layout_code=6, also_fuses_z=True,
               exclusive="layout"),  # fmt: skip
    DumpOption("enable_nchw44", "enable-nchw44", layout="NCHW44", layout_code=4, exclusive="layout"),
    DumpOption("enable_nchw44_dot", "enable-nchw44-dot", layout="NCHW44_DOT", layout_code=5,
               exclusive="layout"),  # fmt: skip
    DumpOption("enable_chwn4", "enable-chwn4", layout="CHWN4", layout_code=7, also_fuses_z=True,
               exclusive="layout"),  # fmt: skip
    DumpOption("enable_nchw64", "enable-nchw64", layout="NCHW64", layout_code=8, also_fuses_z=True,
               exclusive="layout"),  # fmt: skip
)
BY_KEYWORD: dict[str, DumpOption] = {o.keyword: o for o in OPTIONS}
LAYOUT_OPTIONS: tuple[DumpOption, ...] = tuple(o for o in OPTIONS if o.layout is not None)


def suggest_option(name: str) -> str | None:
    """The known keyword closest to a misspelt ``name`` (``enable_nchw88x``, ``nchw88``,
    ``enable-nchw88``), or None when nothing is close."""
    norm = name.strip().lstrip("-").replace("-", "_")
    if not norm.startswith("enable_"):
        norm = "enable_" + norm
    while norm.startswith("enable_enable_"):
        norm = norm[len("enable_") :]
    if norm in BY_KEYWORD:
        return norm
    close = difflib.get_close_matches(norm, list(BY_KEYWORD), n=1, cutoff=0.75)
    return close[0] if close else None


def parse_options(kwargs: Mapping[str, Any]) -> frozenset[str]:
    """The keywords that ``kwargs`` turn on (defaults included); unknown keywords raise
    ``unknown options: [...]`` as MegEngine does, and two options of one exclusive group an error
    naming both."""
    unknown = [k for k in kwargs if k not in BY_KEYWORD]
    if unknown:
        hints = [f"{k!r}: did you mean {h!r}?" for k in unknown if (h := suggest_option(k))]
        hint = f" ({'; '.join(hints)})" if hints else ""
        raise InferenceOptionError(f"unknown options: {unknown}{hint}")
    on = [o for o in OPTIONS if bool(kwargs.get(o.keyword, o.default))]
    for group, reason in CONFLICTS.items():
        clash = [o.keyword for o in on if o.exclusive == group]
        if len(clash) > 1:
            what = "layout options" if group == "layout" else "options"
            raise InferenceOptionError(
                f"conflicting {what} {' and '.join(clash)}: {reason.format(last=clash[-1])}"
            )
    return frozenset(o.keyword for o in on)


def metadata_word(keywords: Iterable[str]) -> int:
    """``GraphOptimizeOptions::serialize()`` for these keywords: the ``optimize_options`` word."""
    word = 0
    for keyword in keywords:
        option = BY_KEYWORD[keyword]
        if option.bit is not None:
            word |= 1 << option.bit
        word |= option.layout_code << LAYOUT_SHIFT
    return word


def keywords_from_word(word: int) -> dict[str, bool]:
    """The inverse (MegEngine's ``deserialize_infer_option``): every keyword with its value.

    A layout value no keyword selects raises :class:`InferenceOptionError`."""
    code = word >> LAYOUT_SHIFT
    out = {o.keyword: o.bit is not None and bool(word >> o.bit & 1) for o in OPTIONS if o.layout is None}
    if code and not any(o.layout_code == code for o in LAYOUT_OPTIONS):
        raise InferenceOptionError(f"optimize_options {word}: no layout has LayoutTransform value {code}")
    out.update({o.keyword: o.layout_code == code for o in LAYOUT_OPTIONS})
    return out
