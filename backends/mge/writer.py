"""``mgb`` dialect → ``.mge`` (FBS v2, the default, or FBS v1) that MegEngine 1.13 loads.

Writing happens in two steps. :func:`lower_func` turns one ``func.func`` into a list of
:class:`WOpr` records in MegEngine's vocabulary (Host2DeviceCopy per input, ImmutableTensor per
constant (in FBS v2, NHWCD4 constants together in one MultipleDeviceTensorWithFormatHolder with
Image2D tensor formats, as MegEngine's ParamMergePass leaves them; 4-bit values packed two a byte),
MegEngine operators with their param tables, shape sub-graphs for flatten-style reshapes,
dump-time compatibility rewrites of newer elemwise modes); :func:`serialize_v2` /
:func:`serialize_v1` then encode those records with ``flatbuffers.Builder``.

Operator order: inputs first, then the function's ops in IR order, each constant emitted right
before its first user (in operand order). The reader materialises constants at exactly that
point, so ``write → read → write`` reproduces the same bytes.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import flatbuffers
import numpy as np
import xxhash
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, BytesAttr, IntegerAttr, ModuleOp, StringAttr, TensorType
from xdsl.ir import Attribute, Operation, SSAValue

from backends.mge import layouts
from backends.mge import schema as S
from backends.mge.container import RawDType
from backends.mge.dtypes import FOUR_BIT, from_element, pack_4bit
from backends.mge.fbs import TableWriter, write_bytes, write_offsets, write_structs, write_vector
from backends.mge.oprs import BY_KIND
from backends.mge.records import ATTR_METADATA_VALID, ATTR_OPTIMIZE_OPTIONS, ATTR_USER_INFO
from dialects import enums
from dialects import tensor as T
from dialects.dtypes import QuantizedType, numpy_dtype

E = enums.ElemwiseMode
COMP_NODE = "xpux:0"  # what the tracer writes: "any device"
FORMATS = ("FBS_V2", "FBS")


class MgeWriteError(ValueError):
    """The IR cannot be written as a ``.mge`` graph; the message names the op."""


@dataclass
class WTensor:
    name: str | None
    shape: tuple[int, ...]
    dtype: RawDType
    data: bytes | None  # None: META_INPUT (a graph input's description)
    image2d_axis: int | None = None  # FBS v2 Image2DPackedTensorFormat (NHWCD4 weights)


@dataclass
class WOpr:
    kind: str  # schema.OprType.kind
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
    is_valid: bool = True
    graph_modified: bool = False
    optimize_options: int = 0
    user_info: bytes = b""


@dataclass
class LoweredGraph:
    oprs: list[WOpr]
    var_names: list[str]  # per var id
    outputs: list[int]


# ----------------------------------------------------------------------------------------------
# Lowering


EXECUTION_POLICY = ("ExecutionPolicy", {"strategy": 1, "workspace_limit": S.UINT_MAX64})


def _shape(v: SSAValue) -> tuple[int, ...]:
    t = v.type
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def _elem(v: SSAValue) -> Attribute:
    t = v.type
    assert isinstance(t, TensorType)
    return t.element_type


def _attr_str(op: Operation, key: str) -> str | None:
    a = op.attributes.get(key)
    return a.data if isinstance(a, StringAttr) else None


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


class _Lowering:
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
        (vid,) = self.add(WOpr("ImmutableTensor", [], tensors=[t], name=_attr_str(op, "opr_name")), [name])
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
                f"mgb.const {_attr_str(op, 'name') or ''}: its data was elided when the IR was printed"
            )
        shape = _shape(op.output)
        data = op.value.data.data
        want = math.prod(shape) * numpy_dtype(_elem(op.output)).itemsize
        if len(data) != want:
            raise MgeWriteError(f"mgb.const {shape}: holds {len(data)} bytes, needs {want}")
        t = WTensor(
            None, shape or (1,), from_element(_elem(op.output)), _value_bytes(data, shape, _elem(op.output))
        )
        return t, _attr_str(op, "name") or _const_name(shape)

    def var_name(self, op: Operation, kind: str) -> str:
        name = _attr_str(op, "name")
        if name:
            return name
        scope = _attr_str(op, "scope")
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
            t = WTensor(name, _shape(arg) or (1,), from_element(_elem(arg)), None)
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
        wopr = WOpr(kind, ins, params=params, name=_attr_str(op, "opr_name"), output_dtype=output_dtype)
        (vid,) = self.add(wopr, [self.var_name(op, name_kind or kind)])
        self.ids[op.results[0]] = vid

    def lower(self, op: T.MgbOp) -> None:
        if layouts.lower_layout_op(self, op):  # layout.relayout, padded-channel slices
            return
        p = op.params()
        if isinstance(op, T.ElemwiseOp):
            self.lower_elemwise(op, p["mode"])
            return
        if isinstance(op, T.ConvolutionOp | T.ConvBiasOp):
            fmt = p.get("format", enums.Format.NCHW)
            conv = _convolution_param(p, fmt)
            if isinstance(op, T.ConvBiasOp):
                conv["nonlineMode"] = enums.number(p["nonline_mode"])
                out_elem = _elem(op.output)
                out_dt = from_element(out_elem) if isinstance(out_elem, QuantizedType) else None
                self.simple(op, "ConvBias", [("ConvBias", conv), EXECUTION_POLICY], output_dtype=out_dt)
            else:
                self.simple(
                    op,
                    "Convolution",
                    [("Convolution", conv), EXECUTION_POLICY],
                    output_dtype=_non_default_dtype(op),
                )
            return
        if isinstance(op, T.PoolingOp):
            pool = {
                "mode": enums.number(p["mode"]),
                "pad_h": p["padding"][0],
                "pad_w": p["padding"][1],
                "stride_h": p["stride"][0],
                "stride_w": p["stride"][1],
                "window_h": p["window"][0],
                "window_w": p["window"][1],
                "format": enums.number(p.get("format", enums.Format.NCHW)),
            }
            self.simple(op, "Pooling", [("Pooling", pool)])
            return
        if isinstance(op, T.AdaptivePoolingOp):
            x = self.ids[op.operands[0]]
            shape = self.int_const(p["out_shape"])
            params = {
                "mode": enums.number(p["mode"]),
                "format": enums.number(p.get("format", enums.Format.NCHW)),
            }
            self.simple(op, "AdaptivePooling", [("AdaptivePooling", params)], [x, shape])
            return
        if isinstance(op, T.MatrixMulOp | T.BatchedMatrixMulOp):
            mm = {
                "transposeA": bool(p.get("transpose_a", False)),
                "transposeB": bool(p.get("transpose_b", False)),
                "compute_mode": enums.number(p["compute_mode"]),
                "format": enums.number(p["format"]),
            }
            kind = "BatchedMatrixMul" if isinstance(op, T.BatchedMatrixMulOp) else "MatrixMul"
            self.simple(op, kind, [("MatrixMul", mm)], output_dtype=_non_default_dtype(op))
            return
        if isinstance(op, T.ElemwiseMultiTypeOp):
            out_elem = _elem(op.output)
            out_dt = from_element(out_elem) if isinstance(out_elem, QuantizedType) else None
            mode = {"mode": enums.number(p["mode"])}
            self.simple(op, "ElemwiseMultiType", [("ElemwiseMultiType", mode)], output_dtype=out_dt)
            return
        if isinstance(op, T.ReshapeOp):
            self.lower_reshape(op)
            return
        if isinstance(op, T.BroadcastOp):
            target = self.int_const(_shape(op.output))
            self.simple(op, "Broadcast", [("Empty", {})], [self.ids[op.operands[0]], target])
            return
        if isinstance(op, T.DimshuffleOp):
            params = {"pattern": tuple(p["pattern"]), "ndim": len(_shape(op.operands[0]))}
            self.simple(op, "Dimshuffle", [("Dimshuffle", params)])
            return
        if isinstance(op, T.AxisAddRemoveOp):
            desc = tuple((enums.number(m), a) for m, a in zip(p["methods"], p["axes"], strict=True))
            self.simple(op, "AxisAddRemove", [("AxisAddRemove", {"desc": desc})])
            return
        if isinstance(op, T.ConcatOp):
            self.simple(op, "Concat", [("Axis", {"axis": p["axis"]})])
            return
        if isinstance(op, T.SubtensorOp):
            self.lower_subtensor(op, p)
            return
        if isinstance(op, T.SplitOp):
            self.lower_split(op, p)
            return
        if isinstance(op, T.ReduceOp):
            params = {
                "mode": enums.number(p["mode"]),
                "axis": p["axis"],
                "data_type": enums.number(p["data_type"]),
            }
            self.simple(op, "Reduce", [("Reduce", params)])
            return
        if isinstance(op, T.TypeCvtOp):
            self.simple(op, "TypeCvt", [("DType", {"dtype": from_element(_elem(op.output))})])
            return
        if isinstance(op, T.SoftmaxOp):
            self.simple(op, "Softmax", [("Softmax", {"axis": p["axis"]})])
            return
        if isinstance(op, T.BatchNormOp):
            bn = {
                "param_dim": enums.number(p["param_dim"]),
                "fwd_mode": enums.number(p["fwd_mode"]),
                "epsilon": float(p["epsilon"]),
                "avg_factor": 1.0,
                "scale": 1.0,
                "bias": 0.0,
            }
            base = self.var_name(op, "BatchNorm")
            # MegEngine's inference BatchNorm has 4 outputs; the normalised value is the last.
            wopr = WOpr(
                "BatchNorm",
                [self.ids[v] for v in op.operands],
                4,
                [("BN", bn)],
                name=_attr_str(op, "opr_name"),
            )
            vids = self.add(wopr, [f"{base}:o{i}" for i in range(2, 5)] + [base])
            self.ids[op.output] = vids[-1]
            return
        if isinstance(op, T.PaddingOp):
            front, back = list(p["front"]), list(p["back"])
            if len(front) > 7:
                raise MgeWriteError("mgb.padding: MegEngine pads at most 7 dimensions")
            params = {f"front_offset_dim{i}": (front[i] if i < len(front) else 0) for i in range(7)}
            params.update({f"back_offset_dim{i}": (back[i] if i < len(back) else 0) for i in range(7)})
            params["padding_val"] = float(p["value"])
            params["padding_mode"] = enums.number(p["mode"])
            self.simple(op, "Padding", [("Padding", params)])
            return
        if isinstance(op, T.ConvolutionBackwardDataOp):
            conv = _convolution_param(p, enums.Format.NCHW)
            ins = [self.ids[v] for v in op.operands]
            if any(p["output_padding"]):  # MegEngine passes the output shape as a third input
                ins.append(self.int_const(_shape(op.output)))
            self.simple(op, "ConvolutionBackwardData", [("Convolution", conv), EXECUTION_POLICY], ins)
            return
        if isinstance(op, T.ResizeOp):
            params = {"imode": enums.number(p["imode"]), "format": enums.number(p["format"])}
            ins = [self.ids[op.operands[0]], self.int_const(p["out_shape"])]
            self.simple(op, "Resize", [("Resize", params)], ins)
            return
        if isinstance(op, T.LayerNormOp):
            ln = {
                "affine": bool(p["affine"]),
                "eps": float(p["eps"]),
                "normalized_dim": p["normalized_dim"],
                "normalized_size": p["normalized_size"],
            }
            base = self.var_name(op, "LayerNorm")
            wopr = WOpr(
                "LayerNorm",
                [self.ids[v] for v in op.operands],
                3,
                [("LayerNorm", ln)],
                name=_attr_str(op, "opr_name"),
            )
            vids = self.add(wopr, [base, f"{base}:o1", f"{base}:o2"])
            for res, vid in zip(op.results, vids, strict=True):
                self.ids[res] = vid
            return
        if isinstance(op, T.ArgmaxOp | T.ArgminOp):
            kind = "Argmax" if isinstance(op, T.ArgmaxOp) else "Argmin"
            self.simple(op, kind, [("Axis", {"axis": p["axis"]})])
            return
        raise MgeWriteError(f"{op.name}: no MegEngine operator to write it as")

    # -- elemwise and its dump-time compatibility rewrites -----------------------------------
    def elem_opr(self, mode: Any, inputs: list[int], name: str, opr_name: str | None = None) -> int:
        wopr = WOpr("Elemwise", inputs, params=[("Elemwise", {"mode": enums.number(mode)})], name=opr_name)
        (vid,) = self.add(wopr, [name])
        return vid

    def scalar(self, value: float, like: SSAValue) -> int:
        return self.const(np.asarray([value]), _elem(like))

    def lower_elemwise(self, op: T.ElemwiseOp, mode: Any) -> None:
        ins = [self.ids[v] for v in op.operands]
        name = self.var_name(op, mode.name)
        oname = _attr_str(op, "opr_name")
        if not self.no_change_graph and mode in COMPAT_REWRITES:
            vid = COMPAT_REWRITES[mode](self, op, ins, name)
        else:
            vid = self.elem_opr(mode, ins, name, oname)
        self.ids[op.output] = vid

    # -- shapes -----------------------------------------------------------------------------
    def lower_reshape(self, op: T.ReshapeOp) -> None:
        src, dst = _shape(op.operands[0]), _shape(op.output)
        x = self.ids[op.operands[0]]
        k = flatten_start_axis(src, dst)
        if k is not None:
            # MegEngine's F.flatten: Reshape(x, Concat(x.shape[0], ..., x.shape[k-1], -1)), axis k
            shape = self.add(
                WOpr("GetVarShape", [x], params=[("OptionalAxisV1", {"axis": 7})]), ["GetVarShape"]
            )[0]
            parts = []
            for i in range(k):
                idx = self.int_const([i])
                item = {"items": ((0, False, False, False, True),)}
                parts.append(
                    self.add(
                        WOpr("Subtensor", [shape, idx], params=[("IndexDescMaskDump", item)]), ["Subtensor"]
                    )[0]
                )
            parts.append(self.int_const([-1]))
            target = self.add(WOpr("Concat", parts, params=[("Axis", {"axis": 0})]), ["Concat"])[0]
            self.simple(op, "Reshape", [("OptionalAxisV1", {"axis": k})], [x, target])
            return
        target = self.int_const(dst or (1,))
        self.simple(op, "Reshape", [("OptionalAxisV1", {"axis": 7})], [x, target])

    def lower_subtensor(self, op: T.SubtensorOp, p: dict[str, Any]) -> None:
        shape = _shape(op.operands[0])
        rows = sorted(
            zip(p["axes"], p["starts"], p["stops"], p["steps"], p["drop"], strict=True), reverse=True
        )
        inputs = [self.ids[op.operands[0]]]
        items = []
        for axis, start, stop, step, drop in rows:
            if drop:
                items.append((axis, False, False, False, True))
                inputs.append(self.int_const([start]))
                continue
            dim = shape[axis]
            s0, s1, st = slice(start, stop, step).indices(dim)
            want_begin = s0 != (0 if st > 0 else dim - 1)
            want_end = (s1 != dim) if st > 0 else True
            want_step = st != 1
            items.append((axis, want_begin, want_end, want_step, False))
            if want_begin:
                inputs.append(self.int_const([s0]))
            if want_end:
                inputs.append(self.int_const([s1 if st > 0 or s1 >= 0 else -(dim + 1)]))
            if want_step:
                inputs.append(self.int_const([st]))
        self.simple(op, "Subtensor", [("IndexDescMaskDump", {"items": tuple(items)})], inputs)

    def lower_split(self, op: T.SplitOp, p: dict[str, Any]) -> None:
        x = self.ids[op.operands[0]]
        axis, start = p["axis"], 0
        base = self.var_name(op, "Split")
        for i, (res, size) in enumerate(zip(op.results, p["sizes"], strict=True)):
            b, e = self.int_const([start]), self.int_const([start + size])
            item = {"items": ((axis, True, True, False, False),)}
            (vid,) = self.add(
                WOpr("Subtensor", [x, b, e], params=[("IndexDescMaskDump", item)]), [f"{base}:{i}"]
            )
            self.ids[res] = vid
            start += size


def flatten_start_axis(src: Sequence[int], dst: Sequence[int]) -> int | None:
    """``k`` when ``dst`` is ``src`` with axes k.. merged into one (``F.flatten(x, k)``), k ≥ 1."""
    k = len(dst) - 1
    if k < 1 or len(src) < k + 2 or tuple(src[:k]) != tuple(dst[:k]):
        return None
    return k if math.prod(src[k:]) == dst[k] else None


def _convolution_param(p: dict[str, Any], fmt: Any) -> dict[str, int]:
    """MegEngine's param.Convolution fields (shared by Convolution, ConvBias and
    ConvolutionBackwardData) from an op's parameters."""
    return {
        "mode": enums.number(p["mode"]),
        "pad_h": p["padding"][0],
        "pad_w": p["padding"][1],
        "stride_h": p["stride"][0],
        "stride_w": p["stride"][1],
        "dilate_h": p["dilation"][0],
        "dilate_w": p["dilation"][1],
        "sparse": enums.number(p["sparse"]),
        "format": enums.number(fmt),
        "compute_mode": enums.number(p["compute_mode"]),
    }


def _non_default_dtype(op: T.MgbOp) -> RawDType | None:
    """``Operator.output_dtype`` for a quantized result other than the op's deduced one (MegEngine
    deduces ``QuantizedS32(s_src * s_filter)`` for quantized convolutions and matrix products)."""
    out = _elem(op.results[0])
    if not isinstance(out, QuantizedType):
        return None
    (default,) = type(op).infer(list(op.operand_types), **op.params())
    return None if default.element_type == out else from_element(out)


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


# Dump-time rewrites of elemwise modes that MegEngine 1.13's default dump (no_change_graph=False)
# replaces by older ones (spec A.11). CLIP is written as MAX(x, lo) then MIN(·, hi): MegEngine's own
# rewrite drops ``hi`` (spec H), ours keeps the graph correct.
def _rw_sqrt(lw: _Lowering, op: T.ElemwiseOp, ins: list[int], name: str) -> int:
    return lw.elem_opr(E.POW, [ins[0], lw.scalar(0.5, op.output)], name)


def _rw_square(lw: _Lowering, op: T.ElemwiseOp, ins: list[int], name: str) -> int:
    return lw.elem_opr(E.POW, [ins[0], lw.scalar(2.0, op.output)], name)


def _rw_tan(lw: _Lowering, op: T.ElemwiseOp, ins: list[int], name: str) -> int:
    s = lw.elem_opr(E.SIN, [ins[0]], name + ":sin")
    c = lw.elem_opr(E.COS, [ins[0]], name + ":cos")
    return lw.elem_opr(E.TRUE_DIV, [s, c], name)


def _rw_clip(lw: _Lowering, op: T.ElemwiseOp, ins: list[int], name: str) -> int:
    lo = lw.elem_opr(E.MAX, [ins[0], ins[1]], name + ":max")
    return lw.elem_opr(E.MIN, [lo, ins[2]], name)


def _rw_relu6(lw: _Lowering, op: T.ElemwiseOp, ins: list[int], name: str) -> int:
    lo = lw.elem_opr(E.MAX, [ins[0], lw.scalar(0.0, op.output)], name + ":max")
    return lw.elem_opr(E.MIN, [lo, lw.scalar(6.0, op.output)], name)


def _rw_hsigmoid(lw: _Lowering, op: T.ElemwiseOp, ins: list[int], name: str) -> int:
    a = lw.elem_opr(E.ADD, [ins[0], lw.scalar(3.0, op.output)], name + ":add")
    b = lw.elem_opr(E.MAX, [a, lw.scalar(0.0, op.output)], name + ":max")
    c = lw.elem_opr(E.MIN, [b, lw.scalar(6.0, op.output)], name + ":min")
    return lw.elem_opr(E.TRUE_DIV, [c, lw.scalar(6.0, op.output)], name)


def _rw_sign(lw: _Lowering, op: T.ElemwiseOp, ins: list[int], name: str) -> int:
    zero = lw.scalar(0.0, op.output)
    neg = lw.elem_opr(E.LT, [ins[0], zero], name + ":lt")
    pos = lw.elem_opr(E.LT, [zero, ins[0]], name + ":gt")
    # LT yields bool; the TypeCvt back to the input dtype keeps SUB well-typed
    dt = from_element(_elem(op.output))
    negf = lw.add(WOpr("TypeCvt", [neg], params=[("DType", {"dtype": dt})]), [name + ":neg"])[0]
    posf = lw.add(WOpr("TypeCvt", [pos], params=[("DType", {"dtype": dt})]), [name + ":pos"])[0]
    return lw.elem_opr(E.SUB, [posf, negf], name)


def _rw_prelu(lw: _Lowering, op: T.ElemwiseOp, ins: list[int], name: str) -> int:
    zero = lw.scalar(0.0, op.output)
    mn = lw.elem_opr(E.MIN, [ins[0], zero], name + ":min")
    mx = lw.elem_opr(E.MAX, [ins[0], zero], name + ":max")
    return lw.elem_opr(E.FUSE_MUL_ADD3, [mn, ins[1], mx], name)


def _rw_softplus(lw: _Lowering, op: T.ElemwiseOp, ins: list[int], name: str) -> int:
    # softplus(x) = log1p(exp(-|x|)) + relu(x)
    a = lw.elem_opr(E.ABS, [ins[0]], name + ":abs")
    n = lw.elem_opr(E.NEGATE, [a], name + ":neg")
    e = lw.elem_opr(E.EXP, [n], name + ":exp")
    lg = lw.elem_opr(E.LOG1P, [e], name + ":log1p")
    r = lw.elem_opr(E.RELU, [ins[0]], name + ":relu")
    return lw.elem_opr(E.ADD, [lg, r], name)


def _rw_logsigmoid(lw: _Lowering, op: T.ElemwiseOp, ins: list[int], name: str) -> int:
    # logsigmoid(x) = -softplus(-x)
    nx = lw.elem_opr(E.NEGATE, [ins[0]], name + ":negx")
    a = lw.elem_opr(E.ABS, [nx], name + ":abs")
    n = lw.elem_opr(E.NEGATE, [a], name + ":neg")
    e = lw.elem_opr(E.EXP, [n], name + ":exp")
    lg = lw.elem_opr(E.LOG1P, [e], name + ":log1p")
    r = lw.elem_opr(E.RELU, [nx], name + ":relu")
    s = lw.elem_opr(E.ADD, [lg, r], name + ":softplus")
    return lw.elem_opr(E.NEGATE, [s], name)


def _rw_hyperbolic(kind: str) -> Any:
    def rewrite(lw: _Lowering, op: T.ElemwiseOp, ins: list[int], name: str) -> int:
        x = ins[0]
        if kind in ("SINH", "COSH"):
            ep = lw.elem_opr(E.EXP, [x], name + ":exp")
            nx = lw.elem_opr(E.NEGATE, [x], name + ":negx")
            en = lw.elem_opr(E.EXP, [nx], name + ":expneg")
            s = lw.elem_opr(E.SUB if kind == "SINH" else E.ADD, [ep, en], name + ":comb")
            return lw.elem_opr(E.MUL, [s, lw.scalar(0.5, op.output)], name)
        one = lw.scalar(1.0, op.output)
        if kind == "ATANH":
            num = lw.elem_opr(E.ADD, [one, x], name + ":num")
            den = lw.elem_opr(E.SUB, [one, x], name + ":den")
            q = lw.elem_opr(E.TRUE_DIV, [num, den], name + ":q")
            lg = lw.elem_opr(E.LOG, [q], name + ":log")
            return lw.elem_opr(E.MUL, [lg, lw.scalar(0.5, op.output)], name)
        sq = lw.elem_opr(E.MUL, [x, x], name + ":sq")
        t = lw.elem_opr(E.ADD if kind == "ASINH" else E.SUB, [sq, one], name + ":t")
        r = lw.elem_opr(E.POW, [t, lw.scalar(0.5, op.output)], name + ":sqrt")
        s = lw.elem_opr(E.ADD, [x, r], name + ":sum")
        return lw.elem_opr(E.LOG, [s], name)

    return rewrite


COMPAT_REWRITES: dict[Any, Any] = {
    E.SQRT: _rw_sqrt,
    E.SQUARE: _rw_square,
    E.TAN: _rw_tan,
    E.CLIP: _rw_clip,
    E.RELU6: _rw_relu6,
    E.HSIGMOID: _rw_hsigmoid,
    E.SIGN: _rw_sign,
    E.PRELU: _rw_prelu,
    E.SOFTPLUS: _rw_softplus,
    E.LOGSIGMOID: _rw_logsigmoid,
    E.SINH: _rw_hyperbolic("SINH"),
    E.COSH: _rw_hyperbolic("COSH"),
    E.ASINH: _rw_hyperbolic("ASINH"),
    E.ACOSH: _rw_hyperbolic("ACOSH"),
    E.ATANH: _rw_hyperbolic("ATANH"),
}


def lower_func(
    fn: func.FuncOp,
    *,
    no_change_graph: bool = False,
    output_names: Sequence[str] | None = None,
    image_holder: bool = False,
) -> LoweredGraph:
    """``image_holder``: NHWCD4 constants as one MultipleDeviceTensorWithFormatHolder (FBS v2)
    rather than an ImmutableTensor each."""
    return _Lowering(fn, no_change_graph, output_names, image_holder).run()


# ----------------------------------------------------------------------------------------------
# Serialization


def _write_dtype(b: flatbuffers.Builder, dt: RawDType) -> int:
    q = None
    if dt.scale is not None:
        tw = TableWriter(b).scalar(0, "f", float(dt.scale))
        if dt.zero_point is not None:
            tw.scalar(1, "B", int(dt.zero_point))
        q = tw.finish()
    tw = TableWriter(b).scalar(0, "b", S.DTYPE_FILE_ENUM.index(dt.name))
    if q is not None:
        tw.scalar(1, "B", S.LINEAR_QUANTIZATION_PARAM).offset(2, q)
    return tw.finish()


def _write_param(b: flatbuffers.Builder, kind: str, values: dict[str, Any]) -> tuple[int, int]:
    pdef = S.PARAMS[kind]
    if kind == "DType":
        return pdef.tag, _write_dtype(b, values["dtype"])
    offsets: dict[int, int] = {}
    for slot, (name, fmt, _default) in enumerate(pdef.fields):
        if fmt == "vec_i":
            offsets[slot] = write_vector(b, "i", list(values[name]))
        elif fmt == "vec_axisdesc":
            packed = [struct.pack("<b3xi", m, a) for m, a in values[name]]
            offsets[slot] = write_structs(b, S.AXIS_DESC_SIZE, 4, packed)
        elif fmt == "vec_indexdesc":
            packed = [struct.pack("<b4B", it[0], *(int(f) for f in it[1:])) for it in values[name]]
            offsets[slot] = write_structs(b, S.INDEX_DESC_SIZE, 1, packed)
    tw = TableWriter(b)
    for slot, (name, fmt, _default) in enumerate(pdef.fields):
        if slot in offsets:
            tw.offset(slot, offsets[slot])
        else:
            tw.scalar(slot, fmt, values[name])
    return pdef.tag, tw.finish()


def _comp_node(b: flatbuffers.Builder, cache: dict[str, int]) -> int:
    # one shared CompNode table: every tensor names the same device
    if "cn" not in cache:
        s = b.CreateString(COMP_NODE)
        cache["cn"] = TableWriter(b).offset(0, s).finish()
    return cache["cn"]


def _params_fields(
    b: flatbuffers.Builder, opr: WOpr
) -> tuple[tuple[int, int] | None, int | None, int | None]:
    written = [_write_param(b, k, v) for k, v in opr.params]
    first = written[0] if written else None
    add_types = add_vals = None
    if len(written) > 1:
        add_types = write_vector(b, "B", [t for t, _ in written[1:]])
        add_vals = write_offsets(b, [o for _, o in written[1:]])
    return first, add_types, add_vals


def serialize_v2(
    g: LoweredGraph,
    meta: Metadata,
    *,
    keep_var_name: int = 1,
    keep_opr_name: bool = False,
    keep_opr_priority: bool = False,
    model_version: int = 2,
) -> bytes:
    b = flatbuffers.Builder(1024 + sum(len(t.data or b"") for o in g.oprs for t in o.tensors))
    cache: dict[str, int] = {}
    default_format = TableWriter(b).finish()  # DefaultTensorFormat: an empty table
    opr_offsets = []
    for opr in g.oprs:
        otype = BY_KIND[opr.kind]
        type_name, type_id, version = otype.v2_id(model_version)
        tensor_offs = []
        for t in opr.tensors:
            data = write_bytes(b, t.data) if t.data is not None else None
            shape = write_vector(b, "I", list(t.shape))
            name = b.CreateString(t.name) if t.name is not None else None
            dt = _write_dtype(b, t.dtype)
            cn = _comp_node(b, cache)
            tw = TableWriter(b).offset(0, name).offset(1, shape).offset(2, cn).offset(3, dt)
            if t.image2d_axis is None:
                tw.scalar(4, "B", S.DEFAULT_TENSOR_FORMAT).offset(5, default_format)
            else:
                image = TableWriter(b).scalar(0, "B", t.image2d_axis).finish()
                tw.scalar(4, "B", S.IMAGE2D_TENSOR_FORMAT).offset(5, image)
            tw.offset(6, data)
            tensor_offs.append(tw.finish())
        tensors = write_offsets(b, tensor_offs) if tensor_offs else None
        first, add_types, add_vals = _params_fields(b, opr)
        inputs = write_vector(b, "I", opr.inputs)
        outputs = write_vector(b, "I", opr.outputs)
        tname = b.CreateString(type_name)
        oname = b.CreateString(opr.name or g.var_names[opr.outputs[0]]) if keep_opr_name else None
        odt = _write_dtype(b, opr.output_dtype) if opr.output_dtype is not None else None
        tw = TableWriter(b).offset(0, tname).scalar(1, "Q", type_id).offset(2, oname)
        if first is not None:
            tw.scalar(3, "B", first[0]).offset(4, first[1])
        tw.offset(5, add_types).offset(6, add_vals).offset(7, inputs).offset(8, outputs)
        tw.offset(10, odt).offset(11, tensors).scalar(12, "I", version)
        if keep_opr_priority:
            tw.scalar(13, "i", opr.priority)
        opr_offsets.append(tw.finish())
    oprs = write_offsets(b, opr_offsets)
    middle = None
    if keep_var_name >= 1:
        mts = []
        for name in g.var_names:
            s = b.CreateString(name)
            mts.append(TableWriter(b).offset(0, s).finish())
        middle = write_offsets(b, mts)
    outs = write_offsets(b, [TableWriter(b).scalar(0, "I", v).scalar(1, "I", v).finish() for v in g.outputs])
    alias = write_offsets(b, [])
    md = _write_metadata(b, meta, v2=True)
    root = (
        TableWriter(b)
        .scalar(0, "I", S.MGB_VERSION)
        .scalar(1, "I", model_version)
        .offset(2, oprs)
        .offset(3, middle)
        .offset(4, outs)
        .offset(5, alias)
        .scalar(6, "I", _nr_shared_tensors(g))
        .offset(7, md)
        .finish()
    )
    b.FinishSizePrefixed(root, b"mgv2")
    return bytes(b.Output())


def _nr_shared_tensors(g: LoweredGraph) -> int:
    """VALUE_SHARED tensors: those of the (WithFormat) holders."""
    holders = ("MultipleDeviceTensorHolder", "MultipleDeviceTensorWithFormatHolder")
    return sum(len(o.tensors) for o in g.oprs if o.kind in holders)


def _write_metadata(b: flatbuffers.Builder, meta: Metadata, v2: bool) -> int:
    # a FlatBuffers string: the verifier insists on the terminating NUL (pickle bytes are not UTF-8,
    # MegEngine stores them raw all the same)
    ui = b.CreateString(bytes(meta.user_info))
    tw = TableWriter(b).scalar(0, "?", meta.is_valid).scalar(1, "?", meta.graph_modified)
    if v2:
        tw.scalar(2, "Q", meta.optimize_options).offset(3, ui)
    else:
        tw.offset(2, ui).scalar(3, "Q", meta.optimize_options)
    return tw.finish()


def serialize_v1(
    g: LoweredGraph,
    meta: Metadata,
    *,
    keep_var_name: int = 1,
    keep_opr_name: bool = False,
    keep_opr_priority: bool = False,
) -> bytes:
    b = flatbuffers.Builder(1024)
    cache: dict[str, int] = {}
    blobs: list[bytes] = []
    out_set = set(g.outputs)
    opr_offsets = []
    for opr in g.oprs:
        otype = BY_KIND[opr.kind]
        tensor_offs = []
        for t in opr.tensors:
            shape = write_vector(b, "I", list(t.shape))
            name = b.CreateString(t.name) if t.name is not None else None
            dt = _write_dtype(b, t.dtype)
            cn = _comp_node(b, cache)
            tw = TableWriter(b).offset(0, name).offset(1, shape).offset(2, cn).offset(3, dt)
            tw.scalar(4, "I", len(t.data or b"")).scalar(5, "I", 0)
            tensor_offs.append(tw.finish())
            if t.data:
                blobs.append(t.data)
        tensors = write_offsets(b, tensor_offs) if tensor_offs else None
        first, add_types, add_vals = _params_fields(b, opr)
        inputs = write_vector(b, "I", opr.inputs)
        out_names = None
        if keep_var_name >= 2 or (keep_var_name == 1 and out_set.intersection(opr.outputs)):
            out_names = write_offsets(b, [b.CreateString(g.var_names[v]) for v in opr.outputs])
        oname = b.CreateString(opr.name or g.var_names[opr.outputs[0]]) if keep_opr_name else None
        odt = _write_dtype(b, opr.output_dtype) if opr.output_dtype is not None else None
        tw = TableWriter(b).scalar(0, "Q", otype.persist_id)
        if first is not None:
            tw.scalar(1, "B", first[0]).offset(2, first[1])
        tw.offset(3, inputs).offset(5, out_names).offset(6, odt).offset(7, tensors)
        if keep_opr_priority:
            tw.scalar(8, "i", opr.priority)
        tw.offset(10, add_types).offset(11, add_vals).offset(12, oname)
        opr_offsets.append(tw.finish())
    oprs = write_offsets(b, opr_offsets)
    outs = write_structs(b, 8, 4, [struct.pack("<II", v, v) for v in g.outputs])
    md = _write_metadata(b, meta, v2=False)
    # The graph hash only has to be non-zero and stable; hash what has been built so far.
    graph_hash = xxhash.xxh64_intdigest(bytes(b.Bytes[b.Head() :]), S.GRAPH_HASH_SEED) or 1
    root = (
        TableWriter(b)
        .scalar(0, "I", S.MGB_VERSION)
        .scalar(1, "Q", graph_hash)
        .scalar(2, "I", 0)
        .offset(3, oprs)
        .offset(4, outs)
        .offset(5, md)
        .finish()
    )
    # Size-prefixed like MegEngine's dumper: the v1 loader verifies the buffer *including* its
    # size word (VerifySizePrefixedGraphBuffer), so 8-byte fields align relative to that word.
    b.FinishSizePrefixed(root, b"mgb1")
    fbs = bytes(b.Output())
    blob = b"".join(blobs)
    header = struct.pack("<I8sIQ", 0x4342474D, b"\0" * 8, 0, len(blob))
    return header + blob + fbs


# ----------------------------------------------------------------------------------------------
# Entry point


def _func_metadata(fn: func.FuncOp) -> Metadata:
    meta = Metadata()
    ui = fn.attributes.get(ATTR_USER_INFO)
    if isinstance(ui, BytesAttr):
        meta.user_info = ui.data
    oo = fn.attributes.get(ATTR_OPTIMIZE_OPTIONS)
    if isinstance(oo, StringAttr):
        meta.optimize_options = int(oo.data)
    valid = fn.attributes.get(ATTR_METADATA_VALID)
    if isinstance(valid, IntegerAttr):
        meta.is_valid = bool(valid.value.data)
    return meta


@dataclass
class WriteResult:
    data: bytes
    graph: LoweredGraph
    content_hash: int  # FBS v1's graph hash; 0 for FBS v2 (MegEngine never sets it there)


def write_graph(
    fn: func.FuncOp,
    *,
    dump_format: str = "FBS_V2",
    model_version: int = 2,
    keep_var_name: int = 1,
    keep_opr_name: bool = False,
    keep_opr_priority: bool = False,
    no_change_graph: bool = False,
    output_names: Sequence[str] | None = None,
    metadata: Metadata | None = None,
) -> WriteResult:
    """One function as one ``.mge`` graph."""
    if dump_format not in FORMATS:
        raise KeyError(f"unknown dump_format {dump_format!r}; expected one of {FORMATS}")
    if model_version not in (1, 2):
        raise ValueError(f"model_version must be 1 or 2, got {model_version}")
    if keep_var_name not in (0, 1, 2):
        raise ValueError(f"keep_var_name must be 0, 1 or 2, got {keep_var_name}")
    # FBS v1 stores each holder tensor's TensorFormat in a blob whose layout is not pinned down
    # (spec F): v1 files keep an ImmutableTensor per NHWCD4 constant
    g = lower_func(
        fn,
        no_change_graph=no_change_graph,
        output_names=output_names,
        image_holder=dump_format == "FBS_V2",
    )
    for i, opr in enumerate(g.oprs):
        opr.priority = opr.priority or i + 1  # keep_opr_priority: the operator's id when unset
    meta = metadata or _func_metadata(fn)
    kwargs = {
        "keep_var_name": keep_var_name,
        "keep_opr_name": keep_opr_name,
        "keep_opr_priority": keep_opr_priority,
    }
    if dump_format == "FBS_V2":
        return WriteResult(serialize_v2(g, meta, model_version=model_version, **kwargs), g, 0)
    data = serialize_v1(g, meta, **kwargs)
    from backends.mge.container import parse_file

    return WriteResult(data, g, parse_file(data)[0].graph_hash or 0)


def write_mge(
    module: ModuleOp | func.FuncOp,
    *,
    dump_format: str | None = None,
    model_version: int = 2,
    keep_var_name: int = 1,
    keep_opr_name: bool = False,
    keep_opr_priority: bool = False,
    no_change_graph: bool = False,
    output_names: Sequence[str] | None = None,
    metadata: Metadata | None = None,
) -> bytes:
    """Every function of ``module`` as one ``.mge`` graph each, back to back (one for a plain trace).

    ``dump_format`` is MegEngine's: ``None``/``"FBS_V2"`` (default) or ``"FBS"`` (v1). Metadata
    defaults to what the reader recorded on the function (so a read file is written back as it
    was) or to a valid, empty record.
    """
    funcs = (
        [module]
        if isinstance(module, func.FuncOp)
        else [op for op in module.ops if isinstance(op, func.FuncOp)]
    )
    if not funcs:
        raise MgeWriteError("can't dump empty graph: the module has no function")
    out = bytearray()
    for fn in funcs:
        out += write_graph(
            fn,
            dump_format=dump_format or "FBS_V2",
            model_version=model_version,
            keep_var_name=keep_var_name,
            keep_opr_name=keep_opr_name,
            keep_opr_priority=keep_opr_priority,
            no_change_graph=no_change_graph,
            output_names=output_names,
            metadata=metadata,
        ).data
    return bytes(out)
