"""The nodes of :class:`compiler.utils.network.Network` (MegEngine's ``megengine.utils.network_node``).

A loaded ``.mge`` graph becomes :class:`OpNode` objects (one per ``mgb`` op of the graph read by
:mod:`backends.mge.reader`; the class is chosen by the operator's MegEngine kind, e.g.
:class:`ConvolutionForward`) linked by :class:`VarNode` objects. A ``VarNode`` is a
:class:`~compiler.tensor.Tensor`, so functional calls take it: while any of an op's inputs is a
``VarNode``, the op is recorded as a new ``OpNode`` whose outputs are ``VarNode`` objects too (that is
how MegEngine users build replacement sub-graphs). A ``VarNode``'s tensor value is a placeholder
(zeros of its shape and dtype, or the constant's value): only shapes, dtypes and the recorded graph
matter; values come from running the dumped graph.

Not thread-safe: the recorder that builds new nodes is process-wide, like MegEngine's graph.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from enum import Enum
from typing import Any, ClassVar

import numpy as np
from xdsl.dialects.builtin import StringAttr, TensorType
from xdsl.ir import Attribute

from backends.mge.oprs import BY_IR_OP
from compiler import core
from compiler.tensor import Tensor
from dialects import tensor as T
from dialects.dtypes import DTypeError, element_type, numpy_dtype, tensor_type
from dialects.tensor import to_attr

__all__ = [
    "NetworkNode",
    "VarNode",
    "OpNode",
    "str_to_mge_class",
    "Host2DeviceCopy",
    "ConstOpBase",
    "ImmutableTensor",
    "SharedDeviceTensor",
    "ReadOnlyOpNode",
]

_ids = itertools.count()


def _placeholder(t: Attribute) -> np.ndarray:
    """Zeros of an IR type's shape and dtype (blocked layouts: their stored shape)."""
    if isinstance(t, TensorType):
        try:
            return np.zeros(tuple(t.get_shape()), numpy_dtype(t.element_type))
        except DTypeError:
            return np.zeros(tuple(t.get_shape()), np.float32)
    return np.zeros((), np.float32)


class NetworkNode:
    """Base of the nodes of a :class:`~compiler.utils.network.Network`."""


class VarNode(NetworkNode, Tensor):
    """A var of a network graph: a Tensor (placeholder value) with its owner operator and users."""

    owner: OpNode | None
    users: list[OpNode]

    def __init__(self, data: Any = None, *, owner_opr: OpNode | None = None, name: str | None = None):
        arr = data._data if isinstance(data, Tensor) else np.asarray(data if data is not None else 0.0)
        self._init_var(arr, owner_opr, name)

    def _init_var(self, arr: np.ndarray, owner: OpNode | None, name: str | None) -> None:
        self._data = arr
        self.name = name
        self.grad = None
        self.owner = owner
        self.users = []
        self._id = next(_ids)

    @classmethod
    def _make(cls, arr: np.ndarray, owner: OpNode | None, name: str | None) -> VarNode:
        v = cls.__new__(cls)
        v._init_var(arr, owner, name)
        return v

    @property
    def id(self) -> int:
        return self._id

    @property
    def var(self) -> VarNode:
        """MegEngine's underlying graph var; xmge's node is its own var."""
        return self

    @property
    def graph(self) -> Any:
        """The :class:`~compiler.core.tensor.megbrain_graph.Graph` that runs this var: the one that
        made it, else one graph shared by the vars of networks and of functional calls."""
        from compiler.core.tensor.megbrain_graph import shared_graph

        return getattr(self, "_graph", None) or shared_graph()

    @property
    def partial_shape(self) -> tuple[int, ...]:
        return self.shape

    def shapeof(self, axis: int | None = None) -> Any:
        return self.shape if axis is None else self.shape[axis]

    def set_owner_opr(self, owner_opr: OpNode) -> None:
        self.owner = owner_opr

    def __bool__(self) -> bool:
        return True  # a symbolic var has no truth value to test; MegEngine's VarNode is always truthy

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"VarNode({self.name!r}, shape={self.shape}, dtype={self.dtype})"


class OpNode(NetworkNode):
    """An operator of a network graph. ``type`` is MegEngine's operator type name."""

    type: ClassVar[str] = "OpNode"
    opdef: ClassVar[type[T.MgbOp] | None] = None

    def __init__(self) -> None:
        self.inputs: list[VarNode] = []
        self.outputs: list[VarNode] = []
        self.name: str | None = None
        self.params: dict[str, Any] = {}
        self.priority = 0
        self._id = next(_ids)
        # how to rebuild the op when the graph is dumped
        self._op_cls: type[T.MgbOp] | None = None
        self._props: dict[str, Attribute] = {}
        self._attrs: dict[str, Attribute] = {}
        self._in_types: list[Attribute] = []
        self._out_types: list[Attribute] = []

    @property
    def id(self) -> int:
        return self._id

    def add_inp_var(self, x: VarNode) -> None:
        self.inputs.append(x)

    def add_out_var(self, x: VarNode) -> None:
        self.outputs.append(x)

    @classmethod
    def _from_ir(cls, op: T.MgbOp) -> OpNode:
        node = cls()
        node._op_cls = type(op)
        node._props = dict(op.properties)
        node._attrs = {k: v for k, v in op.attributes.items() if k not in ("name", "opr_name")}
        node._in_types = [v.type for v in op.operands]
        node._out_types = [r.type for r in op.results]
        node.params = _mge_params(op.params())
        name = op.attributes.get("opr_name") or op.attributes.get("name")
        node.name = name.data if isinstance(name, StringAttr) else None
        var_name = op.attributes.get("name")
        node._var_name = var_name.data if isinstance(var_name, StringAttr) else None
        return node

    @classmethod
    def _from_applied(cls, applied: core.AppliedOp) -> OpNode:
        node = cls()
        node._op_cls = applied.op_cls
        node._props = {k: to_attr(v) for k, v in applied.params.items()}
        node._in_types = [core.tensor_type_of(t) for t in applied.inputs]
        node._out_types = list(applied.result_types)
        node.params = _mge_params(applied.op_cls.params_with_defaults(node._props))
        return node

    def _build(self, operands: Sequence[Any], block: Any) -> T.MgbOp:
        """This operator as an IR op on ``operands`` (SSA values); result types are inferred again
        when an input was replaced by a var of another type. A replacement of another dtype is
        converted to the dtype the operator read (a TypeCvt added to ``block``), as MegEngine's
        graph converts a constant of another dtype."""
        assert self._op_cls is not None, self
        operands = list(operands)
        if len(operands) == len(self._in_types):
            for i, (v, want) in enumerate(zip(operands, self._in_types, strict=True)):
                have = v.type
                if (
                    isinstance(have, TensorType)
                    and isinstance(want, TensorType)
                    and have.element_type != want.element_type
                    and have.encoding == want.encoding
                ):
                    cvt = T.TypeCvtOp.create(
                        operands=[v], result_types=[TensorType(want.element_type, have.get_shape())]
                    )
                    block.add_op(cvt)
                    operands[i] = cvt.output
        in_types = [o.type for o in operands]
        out_types = self._out_types
        if in_types != self._in_types:
            out_types = list(self._op_cls.infer(in_types, **self._op_cls.params_with_defaults(self._props)))
        op = self._op_cls.create(
            operands=list(operands),
            result_types=out_types,
            properties=dict(self._props),
            attributes=dict(self._attrs),
        )
        # the var keeps its own name, the operator its own (MegEngine names them apart: a traced
        # op `simple.ADD` whose var the user named `o_x`)
        op.attributes.pop("opr_name", None)
        var_name = (self.outputs[0].name if self.outputs else None) or self.name
        if var_name:
            op.attributes["name"] = StringAttr(var_name)
        if self.name and self.name != var_name:
            op.attributes["opr_name"] = StringAttr(self.name)
        return op

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class ReadOnlyOpNode(OpNode):
    """An operator of a kind xmge has no dedicated node class for."""


class Host2DeviceCopy(OpNode):
    """A graph input."""

    type = "Host2DeviceCopy"

    def __init__(
        self,
        shape: Sequence[int] | None = None,
        dtype: Any = None,
        name: str | None = None,
        device: str | None = None,
    ) -> None:
        super().__init__()
        self.name = name
        self.device = device or "xpux"
        if shape is not None:
            dt = numpy_dtype(element_type(dtype if dtype is not None else np.float32))
            self.outputs = [VarNode._make(np.zeros(tuple(shape), dt), self, name)]

    @property
    def shape(self) -> tuple[int, ...]:
        return self.outputs[0].shape

    @shape.setter
    def shape(self, shape: Sequence[int]) -> None:
        out = self.outputs[0]
        out._data = np.zeros(tuple(shape), out.dtype)

    @property
    def dtype(self) -> np.dtype:
        return self.outputs[0].dtype

    def _type(self) -> TensorType:
        return tensor_type(self.shape, self.dtype)


class ConstOpBase(OpNode):
    """A constant (a weight or a literal) the graph holds."""

    def __init__(
        self, data: Any = None, name: str | None = None, device: str | None = None, graph: Any = None
    ) -> None:
        super().__init__()
        self.name = name
        self.device = device or "xpux"
        self._const: T.ConstOp | None = None  # the read op, kept while the value is unchanged
        if data is not None:
            self.set_value(data)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.outputs[0].shape

    @property
    def dtype(self) -> np.dtype:
        return self.outputs[0].dtype

    def numpy(self) -> np.ndarray:
        return self.outputs[0].numpy()

    def set_value(self, data: Any, device: str | None = None) -> None:
        """Replace the value; a value of another dtype is converted to the current one (MegEngine
        keeps a parameter's dtype), a scalar is broadcast to the current shape."""
        arr = data._data if isinstance(data, Tensor) else np.asarray(data)
        if self.outputs:
            old = self.outputs[0]
            arr = np.broadcast_to(arr, old.shape) if arr.ndim == 0 else arr
            old._data = np.array(arr, dtype=old.dtype)
        else:
            arr = Tensor(arr)._data  # MegEngine's dtype defaults (float64 -> float32, int64 -> int32)
            self.outputs = [VarNode._make(arr, self, self.name)]
        if device is not None:
            self.device = device
        from compiler.device import device_name

        self.outputs[0]._device = device_name(self.device)  # the var is on the constant's device
        self._const = None

    def _build(self, operands: Sequence[Any], block: Any) -> T.MgbOp:
        if self._const is not None:
            op = self._const.clone()
        else:
            arr = self.outputs[0]._data
            op = T.ConstOp.from_numpy(arr, element_type(arr.dtype))
        name = self.outputs[0].name or self.name
        if name:
            op.attributes["name"] = StringAttr(name)
        return op


class ImmutableTensor(ConstOpBase):
    type = "ImmutableTensor"


class SharedDeviceTensor(ConstOpBase):
    type = "SharedDeviceTensor"


def _kind_class(kind: str) -> type[OpNode]:
    """One node class per MegEngine operator type (``Elemwise``, ``ConvolutionForward``, ...)."""
    cls = _KIND_CLASSES.get(kind)
    if cls is None:
        cls = type(kind, (OpNode,), {"type": kind, "__module__": __name__})
        _KIND_CLASSES[kind] = cls
        setattr(sys.modules[__name__], kind, cls)
    return cls


_KIND_CLASSES: dict[str, type[OpNode]] = {
    "Host2DeviceCopy": Host2DeviceCopy,
    "ImmutableTensor": ImmutableTensor,
    "SharedDeviceTensor": SharedDeviceTensor,
}


def _mge_params(params: dict[str, Any]) -> dict[str, Any]:
    """Operator parameters as MegEngine's ``OpNode.params`` shows them: enum values by their
    MegEngine name (``{"mode": "ADD"}``)."""
    return {k: v.name if isinstance(v, Enum) else v for k, v in params.items()}


def _elemwise_repr(self: OpNode) -> str:
    mode = self.params.get("mode")
    return f"Elemwise({self.name!r}, mode={getattr(mode, 'name', mode)})"


def str_to_mge_class(classname: str) -> type[OpNode]:
    """The node class of a MegEngine operator type name; :class:`ReadOnlyOpNode` for an unknown one."""
    if classname == "RNGOpr<MegDNNOpr>":
        classname = "RNGOpr"
    cls = getattr(sys.modules[__name__], classname, None)
    return cls if isinstance(cls, type) and issubclass(cls, OpNode) else ReadOnlyOpNode


def _class_of(op_cls: type[T.MgbOp]) -> type[OpNode]:
    row = BY_IR_OP.get(op_cls)
    return _kind_class(row.typeinfo) if row is not None else ReadOnlyOpNode


# every operator the .mge table knows gets its class up front, named by MegEngine's C++ type name
# (what ``get_opr_type`` returns: ``ConvolutionForward``, ``Elemwise``, ``PoolingForward``, ...)
def _define_kind_classes() -> None:
    from backends.mge.oprs import BY_KIND

    for row in BY_KIND.values():
        cls = _kind_class(row.typeinfo)
        if len(row.ir_ops) == 1 and cls.opdef is None:
            cls.opdef = row.ir_ops[0]
    _KIND_CLASSES["Elemwise"].__repr__ = _elemwise_repr  # type: ignore[method-assign]


_define_kind_classes()


def node_from_ir(op: T.MgbOp) -> OpNode:
    """The node of one op of a read graph (outputs not attached yet)."""
    if isinstance(op, T.ConstOp):
        node = ImmutableTensor()
        node._const = op
        name = op.attributes.get("opr_name") or op.attributes.get("name")
        node.name = name.data if isinstance(name, StringAttr) else None
        var_name = op.attributes.get("name")
        node._var_name = var_name.data if isinstance(var_name, StringAttr) else None
        return node
    return _class_of(type(op))._from_ir(op)


class _Recorder:
    """Turns an op applied to a VarNode into a new OpNode (MegEngine's graph-mode functional)."""

    def record(self, applied: core.AppliedOp) -> None:
        if not any(isinstance(t, VarNode) for t in applied.inputs):
            return
        node = _class_of(applied.op_cls)._from_applied(applied)
        for t in applied.inputs:
            var = t if isinstance(t, VarNode) else _const_var(t)
            node.inputs.append(var)
            if not any(u is node for u in var.users):
                var.users.append(node)
        for t in applied.outputs:
            t.__class__ = VarNode  # the caller's result object becomes the graph var it stands for
            assert isinstance(t, VarNode)
            t._init_var(t._data, node, None)
            node.outputs.append(t)


def _const_var(t: Tensor) -> VarNode:
    node = ImmutableTensor(t._data)
    return node.outputs[0]


core.push_recorder(_Recorder())
