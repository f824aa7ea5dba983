"""The ``layout`` dialect: tensor formats carried in tensor types, and the one definition of their
index math.

A tensor in a blocked format carries ``#layout.fmt<...>`` as the encoding of its tensor type::

    tensor<1x2x8x8x4xf32, #layout.fmt<nchw44>>          // activation (N, C/4, H, W, C%4)
    tensor<3x5x5x1x4xf32, #layout.fmt<KRSCk4>>          // packed filter of a hybrid first conv

Plain tensors (NCHW activations, KCRS / GKCRS filters) have no encoding. Every named layout is a
:class:`LayoutSpec`: the logical axes it stores (``NCHW``, ``KCRS`` or ``GKCRS``) and the physical
dims as blocks of them (``"N C/4 H W C%4"``). ``pack``/``unpack`` (numpy), ``physical_index`` /
``logical_index`` and ``offset`` (pure integer maps for code generators) all derive from that one
description; the reference interpreter, the weight packer (constant folding of relayouts) and the
shape inference of the ``mgb`` ops in blocked formats use nothing else.

``layout.relayout`` converts between layouts. Its source and destination layouts are those of its
operand and result types; ``channels`` names the logical channel count when one side holds padded
channels (NHWCD4 and NCHW4's small-input path pad C up to a multiple of 4 with zeros; converting
back slices them off)::

    %y = layout.relayout %x : tensor<1x16x8x8xf32> -> tensor<1x4x8x8x4xf32, #layout.fmt<nchw44>>
    %z = layout.relayout %x {channels = 3} : tensor<1x3x8x8xf32> -> tensor<1x8x1x8x4xf32, #layout.fmt<nhwcd4>>

A conv's ``format`` parameter decides the layouts of its operands (:func:`conv_operand_layouts`),
as MegEngine's does, so a graph in this form maps one to one onto MegEngine's: the format param,
packed weight shapes (spec B.6.2), biases (1, K/x, 1, 1, x) and relayouts at the boundaries.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, ClassVar

import numpy as np
from xdsl.dialects.builtin import I64, IntegerAttr, NoneAttr, TensorType, i64
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Attribute, Dialect
from xdsl.irdl import (
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    result_def,
    traits_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.pattern_rewriter import RewritePattern
from xdsl.printer import Printer
from xdsl.traits import HasCanonicalizationPatternsTrait, Pure
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

from dialects import enums
from dialects import tensor as T
from dialects.syntax import attach_attrs, parse_unary, print_unary

Format = enums.Format
ConvSparse = enums.ConvSparse


class Layout(StrEnum):
    """Every named layout: activation formats (lower case, as MegEngine's ``Format`` values) and
    packed filter layouts (MegEngine's names; ``c``/``k`` = input/output channel block)."""

    # activations
    NHWC = "nhwc"
    NHWCD4 = "nhwcd4"
    NCHW4 = "nchw4"
    NCHW32 = "nchw32"
    NCHW88 = "nchw88"
    NCHW44 = "nchw44"
    CHWN4 = "chwn4"
    NCHW64 = "nchw64"
    # dense filters
    KCRSc4k4 = "KCRSc4k4"
    KCRSc8k8 = "KCRSc8k8"
    KCRSk4c4 = "KCRSk4c4"
    KRSCk4 = "KRSCk4"
    KRSCk8 = "KRSCk8"
    KCRSc4 = "KCRSc4"
    KCRSc32 = "KCRSc32"
    KCRSc64 = "KCRSc64"
    CRSKc4 = "CRSKc4"
    KRSC = "KRSC"
    # group and channel-wise filters
    GKCRSc4k4 = "GKCRSc4k4"
    GKCRSc8k8 = "GKCRSc8k8"
    GKCRSk4c4 = "GKCRSk4c4"
    GKCRSc4 = "GKCRSc4"
    C11RSc4 = "C11RSc4"
    C11RSc8 = "C11RSc8"
    # NHWCD4 filters (MegEngine's RelayoutFormat INTER_WEIGHT_DENSEI / GROUPI / CHANI)
    DENSEI = "weight_densei"
    GROUPI = "weight_groupi"
    CHANI = "weight_chani"


# ----------------------------------------------------------------------------------------------
# The index math (the single definition)


@dataclass(frozen=True)
class Dim:
    """One physical dimension: logical axis ``axis`` whole (``block == 1``), its outer part
    (``x // block``), its inner part (``x % block``), or whole but padded to a multiple of
    ``block`` (``pad_only``)."""

    axis: int
    block: int = 1
    inner: bool = False
    pad_only: bool = False

    def size(self, logical_padded: int) -> int:
        if self.block == 1 or self.pad_only:
            return logical_padded
        return self.block if self.inner else logical_padded // self.block

    def index(self, i: int) -> int:
        if self.block == 1 or self.pad_only:
            return i
        return i % self.block if self.inner else i // self.block


@dataclass(frozen=True)
class LayoutSpec:
    """A layout as blocks of logical axes, e.g. ``LayoutSpec("NCHW", "N C/4 H W C%4")``.

    Dims: ``X`` (whole axis), ``X/b`` (block index), ``X%b`` (index inside the block), ``X^b``
    (whole, padded to a multiple of b). Logical axes of size 1 may be left out (``C11RSc4`` keeps
    only G, R, S). A blocked axis is zero-padded up to a multiple of its block when packing."""

    logical: str
    physical: str

    @property
    def dims(self) -> tuple[Dim, ...]:
        return _parse_dims(self.logical, self.physical)

    @property
    def rank(self) -> int:
        return len(self.dims)

    def align(self, axis: int) -> int:
        """The multiple the logical axis ``axis`` is padded to (1 if not blocked)."""
        return max((d.block for d in self.dims if d.axis == axis), default=1)

    def channel_axis(self) -> int | None:
        return self.logical.index("C") if "C" in self.logical else None

    def physical_shape(self, logical_shape: Sequence[int]) -> tuple[int, ...]:
        if len(logical_shape) != len(self.logical):
            raise ValueError(
                f"{self} stores {len(self.logical)}-D {self.logical} tensors, got {tuple(logical_shape)}"
            )
        padded = [_round_up(n, self.align(a)) for a, n in enumerate(logical_shape)]
        present = {d.axis for d in self.dims}
        for a, n in enumerate(logical_shape):
            if a not in present and n != 1:
                raise ValueError(f"{self} drops axis {self.logical[a]}, which must have size 1, got {n}")
        return tuple(d.size(padded[d.axis]) for d in self.dims)

    def padded_logical_shape(self, physical_shape: Sequence[int]) -> tuple[int, ...]:
        """The logical shape a physical shape holds, padding included."""
        if len(physical_shape) != self.rank:
            raise ValueError(f"{self} has {self.rank}-D tensors, got shape {tuple(physical_shape)}")
        sizes = [1] * len(self.logical)
        for d, n in zip(self.dims, physical_shape, strict=True):
            if d.block == 1 or d.pad_only:
                sizes[d.axis] = n
            elif d.inner:
                if n != d.block:
                    raise ValueError(
                        f"{self}: dimension {self._dim_name(d)} must be {d.block}, "
                        f"got shape {tuple(physical_shape)}"
                    )
            else:
                sizes[d.axis] = n * d.block
        return tuple(sizes)

    def logical_shape(self, physical_shape: Sequence[int], channels: int | None = None) -> tuple[int, ...]:
        """The logical shape of a physical one; ``channels`` narrows a padded channel axis."""
        shape = list(self.padded_logical_shape(physical_shape))
        if channels is not None:
            c = self.channel_axis()
            if c is None:
                raise ValueError(f"{self} has no channel axis to pad")
            if not shape[c] - self.align(c) < channels <= shape[c]:
                raise ValueError(
                    f"{channels} channels do not pad to {shape[c]} with alignment {self.align(c)}"
                )
            shape[c] = channels
        return tuple(shape)

    # -- arrays -------------------------------------------------------------------------------
    def pack(self, logical: np.ndarray) -> np.ndarray:
        """The physical array of a logical one; padded positions are zero."""
        padded_shape = [_round_up(n, self.align(a)) for a, n in enumerate(logical.shape)]
        self.physical_shape(logical.shape)  # checks rank and dropped axes
        if tuple(padded_shape) != logical.shape:
            logical = np.pad(logical, [(0, p - n) for p, n in zip(padded_shape, logical.shape, strict=True)])
        split, order = self._split(padded_shape)
        return np.ascontiguousarray(logical.reshape(split).transpose(order)).reshape(
            self.physical_shape(padded_shape)
        )

    def unpack(self, physical: np.ndarray, logical_shape: Sequence[int] | None = None) -> np.ndarray:
        """The logical array of a physical one, sliced to ``logical_shape`` (default: all of it)."""
        padded = self.padded_logical_shape(physical.shape)
        split, order = self._split(padded)
        inverse = np.argsort(order)
        x = physical.reshape([split[i] for i in order]).transpose(inverse).reshape(padded)
        if logical_shape is not None and tuple(logical_shape) != padded:
            x = x[tuple(slice(0, n) for n in logical_shape)]
        return np.ascontiguousarray(x)

    def _split(self, padded: Sequence[int]) -> tuple[list[int], list[int]]:
        """Logical axes split into (outer, inner) parts, and the permutation to physical order."""
        split: list[int] = []
        where: dict[tuple[int, str], int] = {}
        for a, n in enumerate(padded):
            block = self._split_block(a)
            if block > 1:
                where[(a, "outer")], where[(a, "inner")] = len(split), len(split) + 1
                split += [n // block, block]
            else:
                where[(a, "whole")] = len(split)
                split.append(n)
        order = []
        for d in self.dims:
            part = "whole" if d.block == 1 or d.pad_only else ("inner" if d.inner else "outer")
            order.append(where[(d.axis, part)])
        order += [i for i in range(len(split)) if i not in order]  # dropped size-1 axes
        return split, order

    # -- pure index maps (for code generators) --------------------------------------------------
    def physical_index(self, logical_index: Sequence[int]) -> tuple[int, ...]:
        return tuple(d.index(logical_index[d.axis]) for d in self.dims)

    def logical_index(self, physical_index: Sequence[int]) -> tuple[int, ...]:
        idx = [0] * len(self.logical)
        for d, i in zip(self.dims, physical_index, strict=True):
            if d.block == 1 or d.pad_only:
                idx[d.axis] = i
            elif d.inner:
                idx[d.axis] += i
            else:
                idx[d.axis] += i * d.block
        return tuple(idx)

    def offset(self, logical_index: Sequence[int], physical_shape: Sequence[int]) -> int:
        """The element offset of a logical index in a contiguous physical tensor."""
        off = 0
        for i, n in zip(self.physical_index(logical_index), physical_shape, strict=True):
            off = off * n + i
        return off

    def split_strides(
        self, logical_shape: Sequence[int]
    ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[tuple[int, int, int], ...]]:
        """Both sides of a relayout as strided walks over one index space, for code generators.

        Returns ``(shape, logical_strides, physical_strides, bounds)``: ``shape`` is the padded
        logical shape with every blocked axis split into (outer, inner) parts; an index ``i`` of it
        is element ``sum(i * logical_strides)`` of the dense logical tensor and element ``sum(i *
        physical_strides)`` of the physical one. ``bounds`` lists ``(outer_dim, inner_dim, n)`` for
        each padded axis: the index is a real element only where ``outer * block + inner < n``."""
        padded = [_round_up(n, self.align(a)) for a, n in enumerate(logical_shape)]
        split, order = self._split(padded)
        lstride = [math.prod(logical_shape[a + 1 :]) for a in range(len(logical_shape))]
        phys_shape = [split[i] for i in order]
        pstride_of_dim = [math.prod(phys_shape[k + 1 :]) for k in range(len(phys_shape))]
        pstrides = [0] * len(split)
        for k, i in enumerate(order):
            pstrides[i] = pstride_of_dim[k]
        lstrides: list[int] = []
        bounds = []
        for a, n in enumerate(padded):
            block = self._split_block(a)
            if block > 1:
                i = len(lstrides)
                lstrides += [block * lstride[a], lstride[a]]
                if n != logical_shape[a]:
                    bounds.append((i, i + 1, logical_shape[a]))
            else:
                if n != logical_shape[a]:
                    bounds.append((len(lstrides), -1, logical_shape[a]))
                lstrides.append(lstride[a])
        return tuple(split), tuple(lstrides), tuple(pstrides), tuple(bounds)

    def dim_strides(self, logical_shape: Sequence[int]) -> dict[str, int]:
        """Element strides of the physical dims of a contiguous tensor holding ``logical_shape``,
        keyed by dim name (``"C/4"``, ``"C%4"``, ``"K/4"``, ``"R"``, ...), for code generators."""
        shape = self.physical_shape(logical_shape)
        return {
            self._dim_name(d): math.prod(shape[i + 1 :]) for i, d in enumerate(self.dims)
        }

    def _split_block(self, axis: int) -> int:
        """The block ``axis`` is split by (1: stored whole, padded or not)."""
        return next((d.block for d in self.dims if d.axis == axis and d.block > 1 and not d.pad_only), 1)

    def _dim_name(self, d: Dim) -> str:
        name = self.logical[d.axis]
        return name if d.block == 1 else f"{name}{'^' if d.pad_only else '%' if d.inner else '/'}{d.block}"

    def __str__(self) -> str:
        return f"{self.logical}->({self.physical})"


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


@cache
def _parse_dims(logical: str, physical: str) -> tuple[Dim, ...]:
    dims = []
    for tok in physical.split():
        name, op, block = tok[0], tok[1:2], int(tok[2:] or 1)
        if name not in logical:
            raise ValueError(f"layout dim {tok!r} names no axis of {logical}")
        dims.append(Dim(logical.index(name), block, inner=op == "%", pad_only=op == "^"))
    return tuple(dims)


SPECS: dict[Layout, LayoutSpec] = {
    Layout.NHWC: LayoutSpec("NCHW", "N H W C"),
    Layout.NHWCD4: LayoutSpec("NCHW", "N H C/4 W C%4"),
    Layout.NCHW4: LayoutSpec("NCHW", "N C/4 H W C%4"),
    Layout.NCHW32: LayoutSpec("NCHW", "N C/32 H W C%32"),
    Layout.NCHW88: LayoutSpec("NCHW", "N C/8 H W C%8"),
    Layout.NCHW44: LayoutSpec("NCHW", "N C/4 H W C%4"),
    Layout.CHWN4: LayoutSpec("NCHW", "C/4 H W N C%4"),
    Layout.NCHW64: LayoutSpec("NCHW", "N C/64 H W C%64"),
    Layout.KCRSc4k4: LayoutSpec("KCRS", "K/4 C/4 R S C%4 K%4"),
    Layout.KCRSc8k8: LayoutSpec("KCRS", "K/8 C/8 R S C%8 K%8"),
    Layout.KCRSk4c4: LayoutSpec("KCRS", "K/4 C/4 R S K%4 C%4"),
    Layout.KRSCk4: LayoutSpec("KCRS", "K/4 R S C K%4"),
    Layout.KRSCk8: LayoutSpec("KCRS", "K/8 R S C K%8"),
    Layout.KCRSc4: LayoutSpec("KCRS", "K C/4 R S C%4"),
    Layout.KCRSc32: LayoutSpec("KCRS", "K C/32 R S C%32"),
    Layout.KCRSc64: LayoutSpec("KCRS", "K C/64 R S C%64"),
    Layout.CRSKc4: LayoutSpec("KCRS", "C/4 R S K C%4"),
    Layout.KRSC: LayoutSpec("KCRS", "K R S C"),
    Layout.GKCRSc4k4: LayoutSpec("GKCRS", "G K/4 C/4 R S C%4 K%4"),
    Layout.GKCRSc8k8: LayoutSpec("GKCRS", "G K/8 C/8 R S C%8 K%8"),
    Layout.GKCRSk4c4: LayoutSpec("GKCRS", "G K/4 C/4 R S K%4 C%4"),
    Layout.GKCRSc4: LayoutSpec("GKCRS", "G K C/4 R S C%4"),
    Layout.C11RSc4: LayoutSpec("GKCRS", "G/4 K C R S G%4"),
    Layout.C11RSc8: LayoutSpec("GKCRS", "G/8 K C R S G%8"),
    Layout.DENSEI: LayoutSpec("KCRS", "K/4 R S C^4 K%4"),
    Layout.GROUPI: LayoutSpec("GKCRS", "G K/4 R S C K%4"),
    Layout.CHANI: LayoutSpec("GKCRS", "G/4 K R S G%4"),
}


def winograd_filter_spec(panel: int) -> LayoutSpec:
    """The Winograd-transformed filter of the x86 Winograd kernels: the logical ``(K, C, A, A)``
    tensor ``U = G g G^T`` (``A = m + r - 1`` transform points per axis, R/S index them) stored per
    point as panels of ``panel`` output channels (a GEMM register tile's width), each a contiguous
    ``C x panel`` matrix: ``U[r][s][k / panel][c][k % panel]``, K zero-padded to whole panels."""
    return LayoutSpec("KCRS", f"R S K/{panel} C K%{panel}")


def winograd_tile_spec() -> LayoutSpec:
    """The scratch layouts of the x86 Winograd kernels, per block of output tiles: the transformed
    inputs ``V`` and the per-point products ``M``, both logical ``(A, A, T, C)`` (points, tiles,
    channels) stored point-major with channels contiguous, so that one point is a ``T x C``
    matrix of the batched GEMM."""
    return LayoutSpec("RSNC", "R S N C")


ACTIVATION_LAYOUTS = frozenset(lay for lay, s in SPECS.items() if s.logical == "NCHW")


def pack(array: np.ndarray, layout: Layout) -> np.ndarray:
    """A logical (plain) array in ``layout``."""
    return SPECS[layout].pack(array)


def unpack(array: np.ndarray, layout: Layout, logical_shape: Sequence[int] | None = None) -> np.ndarray:
    """A physical array in ``layout`` as a plain (logical) array."""
    return SPECS[layout].unpack(array, logical_shape)


# ----------------------------------------------------------------------------------------------
# The attribute


@irdl_attr_definition
class LayoutAttr(EnumAttribute[Layout]):
    """``#layout.fmt<nchw44>``: the layout of the tensor type it is the encoding of."""

    name = "layout.fmt"

    def print_parameter(self, printer: Printer) -> None:
        printer.print_string(f"<{self.data.value}>")

    @classmethod
    def parse_parameter(cls, parser: AttrParser) -> Layout:
        with parser.in_angle_brackets():
            return parser.parse_str_enum(Layout)

    @property
    def spec(self) -> LayoutSpec:
        return SPECS[self.data]


def layout_of(t: Attribute) -> Layout | None:
    """The layout of a tensor type (``None`` for plain tensors)."""
    if isinstance(t, TensorType) and isinstance(t.encoding, LayoutAttr):
        return t.encoding.data
    return None


def with_layout(t: TensorType, layout: Layout | None, shape: Sequence[int]) -> TensorType:
    enc: Attribute = LayoutAttr(layout) if layout is not None else NoneAttr()
    return TensorType(t.element_type, list(shape), enc)


def to_logical(t: TensorType, channels: int | None = None) -> TensorType:
    """The plain type of the logical tensor ``t`` holds."""
    layout = layout_of(t)
    if layout is None:
        return t
    return TensorType(t.element_type, list(SPECS[layout].logical_shape(t.get_shape(), channels)))


def to_layout(t: TensorType, layout: Layout | None) -> TensorType:
    """The type of the plain tensor ``t`` stored in ``layout``."""
    if layout is None:
        return t
    if layout_of(t) is not None:
        raise ValueError(f"{t} already has a layout")
    return with_layout(t, layout, SPECS[layout].physical_shape(t.get_shape()))


# ----------------------------------------------------------------------------------------------
# Formats of the mgb ops: which layout each operand of an op in a given ``format`` has


ACTIVATION_OF_FORMAT: dict[Any, Layout] = {
    Format.NHWC: Layout.NHWC,
    Format.NHWCD4: Layout.NHWCD4,
    Format.NCHW4: Layout.NCHW4,
    Format.NCHW32: Layout.NCHW32,
    Format.NCHW88: Layout.NCHW88,
    Format.NCHW44: Layout.NCHW44,
    Format.NCHW44_DOT: Layout.NCHW44,  # same tensor layout as NCHW44; only filters differ
    Format.CHWN4: Layout.CHWN4,
    Format.NCHW64: Layout.NCHW64,
    Format.NCHW4_NCHW: Layout.NCHW4,  # input NCHW4, output NCHW
}

# (format, sparse) -> the filter layouts a conv in that format takes (distinct ranks).
FILTER_LAYOUTS: dict[tuple[Any, Any], tuple[Layout, ...]] = {
    (Format.NCHW44, ConvSparse.DENSE): (Layout.KCRSc4k4, Layout.KRSCk4),
    (Format.NCHW44, ConvSparse.GROUP): (Layout.GKCRSc4k4, Layout.C11RSc4),
    (Format.NCHW88, ConvSparse.DENSE): (Layout.KCRSc8k8, Layout.KRSCk8),
    (Format.NCHW88, ConvSparse.GROUP): (Layout.GKCRSc8k8, Layout.C11RSc8),
    (Format.NCHW44_DOT, ConvSparse.DENSE): (Layout.KCRSk4c4, Layout.KRSCk4),
    (Format.NCHW44_DOT, ConvSparse.GROUP): (Layout.GKCRSk4c4,),
    (Format.NCHW4, ConvSparse.DENSE): (Layout.KCRSc4,),
    (Format.NCHW4, ConvSparse.GROUP): (Layout.GKCRSc4,),
    (Format.NCHW4_NCHW, ConvSparse.DENSE): (Layout.KCRSc4,),
    (Format.NCHW4_NCHW, ConvSparse.GROUP): (Layout.GKCRSc4,),
    (Format.NCHW32, ConvSparse.DENSE): (Layout.KCRSc32,),
    (Format.NCHW64, ConvSparse.DENSE): (Layout.KCRSc64,),
    (Format.CHWN4, ConvSparse.DENSE): (Layout.CRSKc4,),
    (Format.NHWC, ConvSparse.DENSE): (Layout.KRSC,),
    (Format.NHWCD4, ConvSparse.DENSE): (Layout.DENSEI,),
    (Format.NHWCD4, ConvSparse.GROUP): (Layout.GROUPI, Layout.CHANI),
}

# Filters of the hybrid first-layer convs: the input stays plain NCHW.
HYBRID_FILTERS = frozenset({Layout.KRSCk4, Layout.KRSCk8})


@dataclass(frozen=True)
class ConvLayouts:
    src: Layout | None
    filter: Layout
    dst: Layout | None  # also the layout of bias and z


def conv_operand_layouts(fmt: Any, sparse: Any, filter_ndim: int) -> ConvLayouts:
    """The layouts of a conv's operands in format ``fmt``; the filter's rank picks between the
    layouts a format allows (e.g. NCHW44 dense: 6-D KCRSc4k4, or 5-D KRSCk4 with an NCHW input)."""
    choices = FILTER_LAYOUTS.get((fmt, sparse))
    if choices is None:
        raise ValueError(f"no {sparse.name.lower()} convolution in format {fmt.name}")
    filt = next((c for c in choices if SPECS[c].rank == filter_ndim), None)
    if filt is None:
        want = " or ".join(f"{SPECS[c].rank}-D {c.value}" for c in choices)
        raise ValueError(
            f"a {sparse.name.lower()} {fmt.name} convolution needs a {want} filter, got {filter_ndim}-D"
        )
    act = ACTIVATION_OF_FORMAT[fmt]
    src = None if filt in HYBRID_FILTERS else act
    dst = None if fmt == Format.NCHW4_NCHW else act
    return ConvLayouts(src, filt, dst)


def _expect_layout(op: str, what: str, t: TensorType, want: Layout | None) -> None:
    got = layout_of(t)
    if got != want:
        name = lambda lay: f"#layout.fmt<{lay.value}>" if lay is not None else "plain"  # noqa: E731
        raise T.ShapeInferenceError(op, f"{what} must be {name(want)}, got {t}")


def infer_conv(
    cls: type[T.MgbOp], operand_types: Sequence[TensorType], params: dict[str, Any]
) -> list[TensorType]:
    """Result types of a conv op in a blocked format: its NCHW inference on the logical shapes."""
    src, filt, *rest = operand_types
    try:
        lay = conv_operand_layouts(params["format"], params["sparse"], len(filt.get_shape()))
    except ValueError as exc:
        raise T.ShapeInferenceError(cls.name, str(exc)) from None
    _expect_layout(cls.name, "the input", src, lay.src)
    _expect_layout(cls.name, "the filter", filt, lay.filter)
    for what, t in zip(("the bias", "z"), rest, strict=False):
        if math.prod(t.get_shape()) != 1:
            _expect_layout(cls.name, what, t, lay.dst)
    try:
        logical = [to_logical(t) for t in operand_types]
    except ValueError as exc:
        raise T.ShapeInferenceError(cls.name, str(exc)) from None
    (out,) = cls.infer(logical, **{**params, "format": Format.NCHW})
    return [to_layout(out, lay.dst)]


def infer_pooling(
    cls: type[T.MgbOp], operand_types: Sequence[TensorType], params: dict[str, Any]
) -> list[TensorType]:
    """Result types of a (adaptive) pooling in a blocked format."""
    (src,) = operand_types
    act = ACTIVATION_OF_FORMAT.get(params["format"])
    if act is None or params["format"] == Format.NCHW4_NCHW:
        raise T.ShapeInferenceError(cls.name, f"no pooling in format {params['format'].name}")
    _expect_layout(cls.name, "the input", src, act)
    try:
        (out,) = cls.infer([to_logical(src)], **{**params, "format": Format.NCHW})
    except ValueError as exc:
        raise T.ShapeInferenceError(cls.name, str(exc)) from None
    return [to_layout(out, act)]


def common_layout(op: str, types: Sequence[TensorType]) -> Layout | None:
    """The one layout of the non-scalar operands of an elementwise-like op (``None``: plain)."""
    layouts = {layout_of(t) for t in types if math.prod(t.get_shape()) != 1 or layout_of(t) is not None}
    if len(layouts) > 1:
        names = sorted(lay.value if lay is not None else "plain" for lay in layouts)
        raise T.ShapeInferenceError(op, f"operands mix layouts {', '.join(names)}; relayout them first")
    return layouts.pop() if layouts else None


def blocked_axes(t: TensorType) -> set[int]:
    """Physical axes of ``t`` that hold only part of a logical axis (C/4, C%4, ...)."""
    layout = layout_of(t)
    if layout is None:
        return set()
    dims = SPECS[layout].dims
    split = {d.axis for d in dims if d.block > 1 and not d.pad_only}
    return {i for i, d in enumerate(dims) if d.axis in split}


def inner_axes(t: TensorType) -> set[int]:
    """Physical axes of ``t`` that index inside a block (C%4, ...)."""
    layout = layout_of(t)
    if layout is None:
        return set()
    return {i for i, d in enumerate(SPECS[layout].dims) if d.inner and d.block > 1}


# ----------------------------------------------------------------------------------------------
# The relayout op


class RelayoutCanonicalization(HasCanonicalizationPatternsTrait):
    """Cancel inverse pairs, merge chains and fold relayouts of constants
    (``passes.layout.canonicalize``, imported lazily)."""

    @classmethod
    def get_canonicalization_patterns(cls) -> tuple[RewritePattern, ...]:
        from passes.layout.canonicalize import RELAYOUT_PATTERNS

        return RELAYOUT_PATTERNS


@irdl_op_definition
class RelayoutOp(T.MgbOp):
    """Converts a tensor between layouts (those of its operand and result types)."""

    name = "layout.relayout"
    ACCEPTS_LAYOUTS: ClassVar[bool] = True
    input = operand_def(TensorType)
    output = result_def(TensorType)
    channels = opt_prop_def(IntegerAttr[I64])
    traits = traits_def(Pure(), RelayoutCanonicalization())

    @classmethod
    def build(cls, value: Any, dst: Layout | None, channels: int | None = None) -> RelayoutOp:
        """Relayout ``value`` into ``dst`` (``None``: plain); ``channels`` as for the op."""
        t = value.type
        assert isinstance(t, TensorType)
        logical = to_logical(t, channels if layout_of(t) is not None else None)
        shape = logical.get_shape()
        out = with_layout(t, dst, SPECS[dst].physical_shape(shape) if dst is not None else shape)
        props = {"channels": IntegerAttr(channels, i64)} if channels is not None else {}
        return cls.create(operands=[value], result_types=[out], properties=props)

    def params(self) -> dict[str, Any]:
        ch = self.channels.value.data if self.channels is not None else None
        return {"src": layout_of(self.input.type), "dst": layout_of(self.output.type), "channels": ch}

    def logical_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        p = self.params()
        src, dst = self.input.type, self.output.type
        assert isinstance(src, TensorType) and isinstance(dst, TensorType)
        ls = to_logical(src, p["channels"] if p["src"] is not None else None).get_shape()
        ld = to_logical(dst, p["channels"] if p["dst"] is not None else None).get_shape()
        return tuple(ls), tuple(ld)

    def is_lossless(self) -> bool:
        """Every element of the source reaches the result (no padded channels are dropped)."""
        src = self.input.type
        assert isinstance(src, TensorType)
        return self.logical_shapes()[0] == tuple(to_logical(src).get_shape())

    def verify_(self) -> None:
        T._verify_tensor_types(self)
        src, dst = self.input.type, self.output.type
        assert isinstance(src, TensorType) and isinstance(dst, TensorType)
        if src.element_type != dst.element_type:
            raise VerifyException(f"layout.relayout: element types differ: {src} -> {dst}")
        p = self.params()
        if p["src"] == p["dst"]:
            raise VerifyException(f"layout.relayout: source and result have the same layout: {src} -> {dst}")
        if p["channels"] is not None and p["src"] is not None and p["dst"] is not None:
            raise VerifyException(
                "layout.relayout: channels applies only between a plain and a padded layout"
            )
        try:
            ls, ld = self.logical_shapes()
        except ValueError as exc:
            raise VerifyException(f"layout.relayout: {exc}") from None
        if ls != ld:
            raise VerifyException(
                f"layout.relayout: {src} holds a logical {ls} tensor but {dst} holds {ld}"
                + (f" (channels = {p['channels']})" if p["channels"] is not None else "")
            )

    def print(self, printer: Printer) -> None:
        print_unary(printer, self, {"channels": self.channels})

    @classmethod
    def parse(cls, parser: Parser) -> RelayoutOp:
        value, dst, attrs = parse_unary(parser)
        return attach_attrs(cls.create(operands=[value], result_types=[dst]), attrs, "channels")


def relayout_array(
    x: np.ndarray, src: Layout | None, dst: Layout | None, logical_shape: Sequence[int]
) -> np.ndarray:
    """The one relayout of an array: unpack from ``src``, pack into ``dst``."""
    logical = x if src is None else SPECS[src].unpack(x, logical_shape)
    if src is None and tuple(logical.shape) != tuple(logical_shape):
        raise ValueError(f"relayout: plain input {x.shape} is not the logical shape {tuple(logical_shape)}")
    return logical if dst is None else SPECS[dst].pack(logical)


LayoutDialect = Dialect("layout", [RelayoutOp], [LayoutAttr])

__all__ = [
    "ACTIVATION_LAYOUTS",
    "FILTER_LAYOUTS",
    "SPECS",
    "ConvLayouts",
    "Dim",
    "Layout",
    "LayoutAttr",
    "LayoutDialect",
    "LayoutSpec",
    "RelayoutOp",
    "blocked_axes",
    "common_layout",
    "conv_operand_layouts",
    "infer_conv",
    "infer_pooling",
    "inner_axes",
    "layout_of",
    "pack",
    "relayout_array",
    "to_layout",
    "to_logical",
    "unpack",
    "winograd_filter_spec",
    "winograd_tile_spec",
    "with_layout",
]
