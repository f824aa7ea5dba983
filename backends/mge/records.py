"""Records shared by the ``.mge`` reader, lowering and serialisation (no behaviour of their own)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backends.mge.dtypes import RawDType
from dialects.errors import XmgeError

# Func attributes the reader sets so that a later write reproduces the file (see writer).
ATTR_USER_INFO = "mge.user_info"
ATTR_OPTIMIZE_OPTIONS = "mge.optimize_options"
ATTR_METADATA_VALID = "mge.metadata_valid"
ATTR_FORMAT = "mge.format"


class MgeWriteError(XmgeError, ValueError):
    """The IR cannot be written as a ``.mge`` graph; the message names the op."""


@dataclass
class WTensor:
    """A tensor an operator holds: a constant's value or an input's description."""

    name: str | None
    shape: tuple[int, ...]
    dtype: RawDType
    data: bytes | None  # None: META_INPUT (a graph input's description)
    image2d_axis: int | None = None  # FBS v2 Image2DPackedTensorFormat (NHWCD4 weights)


@dataclass
class WOpr:
    """One MegEngine operator to write, with its param tables (``schema.PARAMS`` names)."""

    kind: str  # backends.mge.oprs.Opr.kind
    inputs: list[int]
    n_outputs: int = 1
    params: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    tensors: list[WTensor] = field(default_factory=list)
    output_dtype: RawDType | None = None
    name: str | None = None  # operator name (keep_opr_name)
    priority: int = 0
    outputs: list[int] = field(default_factory=list)  # var ids, filled by the lowering


@dataclass
class Metadata:
    """The graph's metadata table (spec A.8)."""

    is_valid: bool = True
    graph_modified: bool = False
    optimize_options: int = 0
    user_info: bytes = b""


@dataclass
class LoweredGraph:
    """A function in MegEngine's vocabulary: what the lowering makes and the serialisers encode."""

    oprs: list[WOpr]
    var_names: list[str]  # per var id
    outputs: list[int]
