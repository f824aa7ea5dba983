"""``mgb`` IR -> :class:`~backends.mge.records.LoweredGraph`: a function in MegEngine's vocabulary.

:func:`lower_func` emits a Host2DeviceCopy per input, an ImmutableTensor per constant (in FBS v2,
NHWCD4 constants together in one MultipleDeviceTensorWithFormatHolder with Image2D tensor formats,
as MegEngine's ParamMergePass leaves them; 4-bit values packed two a byte), then each op through its
kind's row of :data:`backends.mge.oprs.OPRS` (layout ops through :mod:`backends.mge.layouts`).

Operator order: inputs first, then the function's ops in IR order, each constant emitted right
before its first user (in operand order). The reader materialises constants at exactly that
point, so ``write -> read -> write`` reproduces the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, StringAttr
from xdsl.ir import Attribute, Operation, SSAValue

import backends.mge.layouts as layouts
from backends.mge.dtypes import FOUR_BIT, RawDType, from_element, pack_4bit
from backends.mge.lower_ops import attr_str, value_elem, value_shape
from backends.mge.oprs import BY_IR_OP
from backends.mge.records import LoweredGraph, MgeWriteError, WOpr, WTensor
from dialects import enums
from dialects import tensor as T
from dialects.dtypes import numpy_dtype


def _value_bytes(data: bytes, shape: Sequence[int], elem: Attribute) -> bytes:
    """A constant's bytes as MegEngine stores them: 4-bit values (a byte each in xmge) packed."""
    dt = from_element(elem)
    if dt.name not in FOUR_BIT:
        return bytes(data)
    values = np.frombuffer(data, numpy_dtype(elem)).reshape(tuple(shape) or (1,))
    return pack_4bit(values, dt)


def _const_name(shape: Sequence[int], value: np.ndarray | None = None) -> str:
    if value is not None and value.size == 1:
        return f"const<{value.reshape(-1)[0]}>"
    return "const{" + ",".join(str(d) for d in shape) + "}"


class Lowering:
    """The walk over one function: its vars and the operator records made so far. The per-kind
    functions (``backends.mge.lower_ops``) add records through :meth:`simple`, :meth:`add` and
    :meth:`int_const`."""

    def __init__(
        self,
        fn: func.FuncOp,
        no_change_graph: bool,
        output_names: Sequence[str] | None,
        image_holder: bool = False,
    ):
        self.fn = fn
        self.image_holder = image_holder
        self.image_consts: list[T.ConstOp] = []  # NHWCD4 constants, in order of first use
        self.no_change_graph = no_change_graph
        self.oprs: list[WOpr] = []
        self.names: list[str] = []
        self.ids: dict[SSAValue, int] = {}
        self.int_consts: dict[tuple[int, ...], int] = {}
        self.user_output_names = output_names

    # -- var/opr helpers --------------------------------------------------------------------
    def add(self, opr: WOpr, names: Sequence[str]) -> list[int]:
        assert len(names) == opr.n_outputs
        start = len(self.names)
        opr.outputs = list(range(start, start + opr.n_outputs))
        self.names.extend(names)
        self.oprs.append(opr)
        return opr.outputs

    def const(self, array: np.ndarray, elem: Attribute | None = None, name: str | None = None) -> int:
        """An ImmutableTensor holding ``array`` (int32 shape vectors and indices by default)."""
        if elem is None:
            from dialects.dtypes import element_type

            elem = element_type(array.dtype)
        data = np.ascontiguousarray(array, dtype=numpy_dtype(elem))
        shape = tuple(data.shape) or (1,)  # MegEngine stores scalars as shape (1,)
        t = WTensor(None, shape, from_element(elem), _value_bytes(data.tobytes(), shape, elem))
        (vid,) = self.add(WOpr("ImmutableTensor", [], tensors=[t]), [name or _const_name(shape, data)])
        return vid

    def int_const(self, values: Sequence[int]) -> int:
        """An int32 shape/index constant; equal ones are shared, as MegEngine shares them."""
        key = tuple(int(v) for v in values)
        if key not in self.int_consts:
            self.int_consts[key] = self.const(np.asarray(values, dtype=np.int32))
        return self.int_consts[key]

    def value_id(self, v: SSAValue) -> int:
        vid = self.ids.get(v)
        if vid is None:
            op = v.owner
            if not isinstance(op, T.ConstOp):
                raise MgeWriteError(f"value {v} is used before it is defined")
            self.emit_const(op)
            vid = self.ids[v]
        return vid

    def emit_const(self, op: T.ConstOp) -> None:
        if op in self.image_consts:
            self.emit_image_holder()
            return
        t, name = self.const_tensor(op)
        (vid,) = self.add(WOpr("ImmutableTensor", [], tensors=[t], name=attr_str(op, "opr_name")), [name])
        self.ids[op.output] = vid

    def emit_image_holder(self) -> None:
        """MegEngine's form of NHWCD4 constants (ParamFusePass makes them
        SharedDeviceTensorWithFormat, ParamMergePass merges those): one
        MultipleDeviceTensorWithFormatHolder, a VALUE_SHARED Image2D tensor per constant."""
        tensors, names = [], []
        for c in self.image_consts:
            t, name = self.const_tensor(c)
            t.image2d_axis = layouts.image2d_axis(c.output.type)
            tensors.append(t)
            names.append(name)
        kind = "MultipleDeviceTensorWithFormatHolder"
        vids = self.add(WOpr(kind, [], n_outputs=len(tensors), tensors=tensors), names)
        for c, vid in zip(self.image_consts, vids, strict=True):
            self.ids[c.output] = vid

    def collect_image_consts(self, block: Any, live: set[Operation], ret: Operation) -> None:
        if not self.image_holder:
            return
        for op in block.ops:
            if op is ret or isinstance(op, T.ConstOp) or op not in live:
                continue
            for v in op.operands:
                c = v.owner
                if (
                    isinstance(c, T.ConstOp)
                    and c not in self.image_consts
                    and layouts.image2d_axis(c.output.type) is not None
                ):
                    self.image_consts.append(c)

    def const_tensor(self, op: T.ConstOp) -> tuple[WTensor, str]:
        if op.value.is_elided:
            raise MgeWriteError(
                f"mgb.const {attr_str(op, 'name') or ''}: its data was elided when the IR was printed"
            )
        shape = value_shape(op.output)
        data = op.value.data.data
        want = math.prod(shape) * numpy_dtype(value_elem(op.output)).itemsize
        if len(data) != want:
            raise MgeWriteError(f"mgb.const {shape}: holds {len(data)} bytes, needs {want}")
        elem = value_elem(op.output)
        t = WTensor(None, shape or (1,), from_element(elem), _value_bytes(data, shape, elem))
        return t, attr_str(op, "name") or _const_name(shape)

    def var_name(self, op: Operation, kind: str) -> str:
        name = attr_str(op, "name")
        if name:
            return name
        scope = attr_str(op, "scope")
        return f"{scope}.{kind}" if scope else kind

    # -- the walk ---------------------------------------------------------------------------
    def run(self) -> LoweredGraph:
        block = self.fn.body.block
        input_names = _names_attr(self.fn, "input_names") or [f"arg_{i}" for i in range(len(block.args))]
        if len(input_names) != len(block.args):
            raise MgeWriteError(f"input_names has {len(input_names)} names for {len(block.args)} inputs")
        seen: set[str] = set()
        for arg, name in zip(block.args, input_names, strict=True):
            if not name:
                raise MgeWriteError("a graph input has an empty name")
            if name in seen:
                raise MgeWriteError(f"duplicated input tensor name {name!r}")
            seen.add(name)
            t = WTensor(name, value_shape(arg) or (1,), from_element(value_elem(arg)), None)
            params = {"enable_value_infer": True, "dump_default_value": False, "allow_cpu_mem_fwd": True}
            (vid,) = self.add(
                WOpr("Host2DeviceCopy", [], params=[("Host2DeviceCopy", params)], tensors=[t]), [name]
            )
            self.ids[arg] = vid
        ret = block.last_op
        if not isinstance(ret, func.ReturnOp):
            raise MgeWriteError(f"@{self.fn.sym_name.data} does not end with func.return")
        live = _live_ops(block, ret)
        self.collect_image_consts(block, live, ret)
        for op in block.ops:
            if op is ret or isinstance(op, T.ConstOp) or op not in live:
                continue
            if not isinstance(op, T.MgbOp):
                raise MgeWriteError(f"{op.name}: only mgb ops can be written to a .mge file")
            for v in op.operands:
                self.value_id(v)
            self.lower(op)
        outputs = [self.value_id(v) for v in ret.arguments]
        if not outputs:
            raise MgeWriteError("can't dump empty graph: the function returns nothing")
        names = self.user_output_names or _names_attr(self.fn, "output_names")
        if names is not None:
            if len(names) != len(outputs):
                raise MgeWriteError(f"{len(names)} output names for {len(outputs)} outputs")
            for vid, name in zip(outputs, names, strict=True):
                if name:
                    self.names[vid] = name
        out_names = [self.names[v] for v in outputs]
        dup = {n for n in out_names if out_names.count(n) > 1}
        if dup and len(set(outputs)) != len(outputs):
            raise MgeWriteError(f"the same var is returned twice under {sorted(dup)}")
        if dup:
            raise MgeWriteError(f"duplicated output var name {sorted(dup)[0]!r}")
        return LoweredGraph(self.oprs, self.names, outputs)

    def simple(
        self,
        op: T.MgbOp,
        kind: str,
        params: list[tuple[str, dict[str, Any]]],
        inputs: list[int] | None = None,
        name_kind: str | None = None,
        output_dtype: RawDType | None = None,
    ) -> None:
        ins = inputs if inputs is not None else [self.ids[v] for v in op.operands]
        wopr = WOpr(kind, ins, params=params, name=attr_str(op, "opr_name"), output_dtype=output_dtype)
        (vid,) = self.add(wopr, [self.var_name(op, name_kind or kind)])
        self.ids[op.results[0]] = vid

    def lower(self, op: T.MgbOp) -> None:
        if layouts.lower_layout_op(self, op):  # layout.relayout, padded-channel slices
            return
        row = BY_IR_OP.get(type(op))
        if row is None or row.lower is None:
            raise MgeWriteError(f"{op.name}: no MegEngine operator to write it as")
        row.lower(self, op, op.params())

    # -- elemwise and its dump-time compatibility rewrites -----------------------------------
    def elem_opr(self, mode: Any, inputs: list[int], name: str, opr_name: str | None = None) -> int:
        wopr = WOpr("Elemwise", inputs, params=[("Elemwise", {"mode": enums.number(mode)})], name=opr_name)
        (vid,) = self.add(wopr, [name])
        return vid

    def scalar(self, value: float, like: SSAValue) -> int:
        return self.const(np.asarray([value]), value_elem(like))


def _names_attr(fn: func.FuncOp, key: str) -> list[str] | None:
    a = fn.attributes.get(key)
    if not isinstance(a, ArrayAttr):
        return None
    return [x.data for x in a.data if isinstance(x, StringAttr)]


def _live_ops(block: Any, ret: Operation) -> set[Operation]:
    live: set[Operation] = set()
    stack = [v.owner for v in ret.operands if isinstance(v.owner, Operation)]
    while stack:
        op = stack.pop()
        if op in live:
            continue
        live.add(op)
        stack.extend(v.owner for v in op.operands if isinstance(v.owner, Operation))
    return live


def lower_func(
    fn: func.FuncOp,
    *,
    no_change_graph: bool = False,
    output_names: Sequence[str] | None = None,
    image_holder: bool = False,
) -> LoweredGraph:
    """``image_holder``: NHWCD4 constants as one MultipleDeviceTensorWithFormatHolder (FBS v2)
    rather than an ImmutableTensor each."""
    return Lowering(fn, no_change_graph, output_names, image_holder).run()
