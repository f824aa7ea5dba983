"""Rebuild MegEngine's own ``.tm`` files (pickled ``megengine.traced_module.TracedModule``) as xmge
TracedModules, without megengine and without running anything the file names.

The file is unpickled with a loader that resolves only an explicit allow-list of names: MegEngine's
traced-module classes, ``Tensor``/``Parameter``, ``CompNode``, ``inspect.FullArgSpec`` and the data
types the restricted ``compiler.load`` admits. Every MegEngine class becomes an inert record (its
constructor arguments and pickled state, nothing called), and that record tree is then translated by
explicit tables: built-in layers (``_ModuleState``: module path + ``__dict__``) to xmge layers,
``megengine.functional`` names to xmge functions, Tensor methods to the allowed set. Anything else is
refused with an error naming it. See spec/mge-format.md Part D for the file's structure.
"""

from __future__ import annotations

import contextvars
import inspect
import io
import math
import os
import pickle
import pickletools
import struct
from collections.abc import Callable
from typing import IO, Any

import numpy as np

import compiler.functional as F
import compiler.module as M
import compiler.traced_module.policy as policy
import compiler.traced_module.pytree as pytree
from compiler.module.module import Module
from compiler.serialization import (
    SIZED_BUILTINS,
    UnsafePickleError,
    _check_dtype,
    _check_dtype_state,
    _check_ndarray_state,
    _RestrictedFinder,
    builtin_call_bytes,
    check_instance_state,
)
from compiler.tensor import Parameter, Tensor
from compiler.traced_module.expr import CallFunction, CallMethod, Constant, Expr, GetAttr, Input
from compiler.traced_module.node import ModuleNode, Node, TensorNode
from compiler.traced_module.policy import TracedModuleError
from compiler.traced_module.traced_module import InternalGraph, TracedModule
from dialects import limits
from dialects.errors import XmgeError

# the budget of the load in progress: every tensor and layer the file makes counts towards it
_LOAD: contextvars.ContextVar[limits.Budget | None] = contextvars.ContextVar("mge_tm_load", default=None)


def _budget() -> limits.Budget:
    current = _LOAD.get()
    return current if current is not None else limits.Budget(file="<.tm data>")


class MegEngineTMError(TracedModuleError, UnsafePickleError):
    """A MegEngine ``.tm`` names something outside the allow-list; nothing of it ran."""


# MegEngine classes that are read as inert records
_RECORDS = {
    "megengine.traced_module.traced_module": {"TracedModule", "InternalGraph", "NameSpace"},
    "megengine.traced_module.expr": {"Input", "GetAttr", "CallMethod", "CallFunction", "Constant", "Apply"},
    "megengine.traced_module.node": {"ModuleNode", "TensorNode", "NodeMixin", "Node"},
    "megengine.traced_module.pytree": {"TreeDef", "LeafDef", "ArgsIndex"},
    "megengine.traced_module.serialization": {"_ModuleState"},
    "megengine.tensor": {"Tensor", "Parameter"},
    "megengine.core._imperative_rt.common": {"CompNode"},
    "megengine.module.module": {"Module"},
    "inspect": {"FullArgSpec"},
}
# builtin types the file uses as class references (pytree node types) and containers
_BUILTIN_TYPES = {
    ("builtins", n): getattr(__builtins__, n, None) if not isinstance(__builtins__, dict) else __builtins__[n]
    for n in ("tuple", "list", "dict", "int", "float", "str", "bool")
}
_BUILTIN_TYPES[("collections", "defaultdict")] = __import__("collections").defaultdict

# megengine.functional names that map to the xmge function of the same name
_FUNCTIONS = frozenset(
    """add sub mul div floor_div mod pow maximum minimum neg abs exp log log1p expm1 sqrt square sin cos
    tanh sigmoid floor ceil round relu relu6 hswish hsigmoid gelu silu clip equal not_equal less
    less_equal greater greater_equal logical_and logical_or logical_xor logical_not conv2d linear
    max_pool2d avg_pool2d adaptive_avg_pool2d adaptive_max_pool2d softmax log_softmax logsumexp
    leaky_relu softplus batch_norm dropout pad reshape flatten transpose broadcast_to expand_dims squeeze
    concat stack split where zeros ones full zeros_like ones_like full_like arange linspace astype sum
    mean max min prod matmul norm""".split()
)


class _Record:
    """An instance of an allow-listed MegEngine class: constructor arguments and state, inert."""

    _mge_name = ""

    def __new__(cls, *args: Any, **kwargs: Any) -> _Record:
        obj = object.__new__(cls)
        obj._args = args
        obj._state = None
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        self._state = state

    @property
    def kind(self) -> str:
        return self._mge_name.rpartition(".")[2]

    @property
    def state(self) -> dict[str, Any]:
        st = self._state
        if isinstance(st, tuple) and len(st) == 2:  # (__dict__, __slots__ values)
            merged = dict(st[0] or {})
            merged.update(st[1] or {})
            return merged
        return st if isinstance(st, dict) else {}


_record_classes: dict[str, type[_Record]] = {}


def _record_class(full_name: str) -> type[_Record]:
    cls = _record_classes.get(full_name)
    if cls is None:
        cls = type(full_name.rpartition(".")[2], (_Record,), {"_mge_name": full_name})
        _record_classes[full_name] = cls
    return cls


def _refuse(what: str, why: str) -> MegEngineTMError:
    return MegEngineTMError(f"load_megengine_tm: refusing {what}: {why}. Nothing from the file was executed.")


class _Unpickler(pickle._Unpickler):  # type: ignore[name-defined, misc]
    """The pure-Python unpickler: its BUILD can check numpy states before numpy applies them (the C
    unpickler hands them straight to ``__setstate__``, which crashes on some malformed tuples)."""

    dispatch = dict(pickle._Unpickler.dispatch)  # type: ignore[attr-defined]

    def __init__(self, f: IO[bytes]) -> None:
        super().__init__(f)
        self._data = _RestrictedFinder(())

    def _load_build(self) -> None:
        state, inst = self.stack[-1], self.stack[-2]
        try:
            if isinstance(inst, np.ndarray):
                _check_ndarray_state(state)
            elif isinstance(inst, np.dtype):
                _check_dtype_state(inst, state)
            pickle._Unpickler.load_build(self)  # type: ignore[attr-defined]
            if isinstance(inst, np.dtype):
                _check_dtype(inst)
        except UnsafePickleError as exc:
            raise MegEngineTMError(str(exc).replace("xmge.load: ", "load_megengine_tm: ")) from None

    def find_class(self, module: str, name: str) -> Any:
        if name in _RECORDS.get(module, ()):
            return _record_class(f"{module}.{name}")
        if (module, name) in _BUILTIN_TYPES:
            return _BUILTIN_TYPES[(module, name)]
        if module.startswith("megengine.functional") and name in _FUNCTIONS:
            return _record_class(f"{module}.{name}")
        if (module, name) in _LAYERS:
            return _record_class(f"{module}.{name}")
        if not module.startswith(("numpy", "_codecs", "collections", "copyreg", "builtins")):
            raise _refuse(f"'{module}.{name}'", "it is not a MegEngine class this loader knows")
        try:  # numpy arrays and plain data, exactly as the default compiler.load admits them
            found = self._data.find(module, name)
        except UnsafePickleError:
            raise _refuse(f"'{module}.{name}'", "it is not data this loader rebuilds") from None
        return _sized(found) if found in SIZED_BUILTINS else found


def _sized(func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` (bytearray, set, range, ...) sized under the load's budget before each call: the C
    unpickler calls what find_class returns, and ``bytearray(1 << 34)`` takes a few bytes to ask for."""

    def call(*args: Any) -> Any:
        nbytes = builtin_call_bytes(func, args)
        if nbytes:
            _budget().add_tensor(nbytes, place=f"a call to {func.__name__}()", what=f"a {func.__name__}")
        return func(*args)

    return call


_Unpickler.dispatch[pickle.BUILD[0]] = _Unpickler._load_build


# ---------------------------------------------------------------------------------------------------
# Built-in layers: MegEngine's (module path, class) and its pickled __dict__ -> an xmge layer


def _tensor(value: Any, cls: type = Tensor) -> Tensor:
    if not isinstance(value, _Record) or value._mge_name not in (
        "megengine.tensor.Tensor",
        "megengine.tensor.Parameter",
    ):
        raise _refuse(f"a {type(value).__name__} where a tensor was expected", "not a MegEngine Tensor")
    args = value._args
    if not args or not isinstance(args[0], np.ndarray):
        raise _refuse("a MegEngine Tensor without array data", "unsupported tensor encoding")
    arr = args[0]
    dtype = args[1] if len(args) > 1 and isinstance(args[1], np.dtype) else arr.dtype
    _budget().add_tensor(arr.size * dtype.itemsize, place=f"a {value.kind}", what="a tensor")
    arr = arr.astype(dtype, copy=False)
    if value._mge_name.endswith("Parameter"):
        cls = Parameter
    return cls(arr)


def _opt_param(value: Any) -> Parameter | None:
    return None if value is None else _tensor(value, Parameter)  # type: ignore[return-value]


def _conv2d(s: dict[str, Any]) -> Module:
    if s.get("padding_mode", "zeros") != "zeros":
        raise _refuse(f"Conv2d padding_mode={s['padding_mode']!r}", "xmge convolutions pad with zeros")
    m = M.Conv2d(
        s["in_channels"], s["out_channels"], s["kernel_size"], s["stride"], s["padding"], s["dilation"],
        s["groups"], bias=s.get("bias") is not None, conv_mode=s.get("conv_mode", "cross_correlation"),
        compute_mode=s.get("compute_mode", "default"),
    )  # fmt: skip
    m.weight, m.bias = _tensor(s["weight"], Parameter), _opt_param(s.get("bias"))  # type: ignore[assignment]
    return m


def _linear(s: dict[str, Any]) -> Module:
    m = M.Linear(s["in_features"], s["out_features"], bias=s.get("bias") is not None)
    m.weight, m.bias = _tensor(s["weight"], Parameter), _opt_param(s.get("bias"))  # type: ignore[assignment]
    return m


def _batch_norm(cls: type) -> Callable[[dict[str, Any]], Module]:
    def build(s: dict[str, Any]) -> Module:
        m = cls(
            s["num_features"],
            eps=s.get("eps", 1e-5),
            momentum=s.get("momentum", 0.9),
            affine=s.get("affine", True),
            track_running_stats=s.get("track_running_stats", True),
            freeze=s.get("freeze", False),
        )
        for key in ("weight", "bias"):
            setattr(m, key, _opt_param(s.get(key)))
        for key in ("running_mean", "running_var"):
            setattr(m, key, None if s.get(key) is None else _tensor(s[key]))
        return m

    return build


def _plain(cls: type, *fields: str) -> Callable[[dict[str, Any]], Module]:
    return lambda s: cls(*(s[f] for f in fields if f in s))


_LAYERS: dict[tuple[str, str], Callable[[dict[str, Any]], Module]] = {
    ("megengine.module.conv", "Conv2d"): _conv2d,
    ("megengine.module.linear", "Linear"): _linear,
    ("megengine.module.batchnorm", "BatchNorm2d"): _batch_norm(M.BatchNorm2d),
    ("megengine.module.batchnorm", "BatchNorm1d"): _batch_norm(M.BatchNorm1d),
    ("megengine.module.pooling", "MaxPool2d"): _plain(M.MaxPool2d, "kernel_size", "stride", "padding"),
    ("megengine.module.pooling", "AvgPool2d"): _plain(
        M.AvgPool2d, "kernel_size", "stride", "padding", "mode"
    ),
    ("megengine.module.adaptive_pooling", "AdaptiveAvgPool2d"): _plain(M.AdaptiveAvgPool2d, "oshp"),
    ("megengine.module.adaptive_pooling", "AdaptiveMaxPool2d"): _plain(M.AdaptiveMaxPool2d, "oshp"),
    ("megengine.module.activation", "ReLU"): _plain(M.ReLU),
    ("megengine.module.activation", "Sigmoid"): _plain(M.Sigmoid),
    ("megengine.module.activation", "SiLU"): _plain(M.SiLU),
    ("megengine.module.activation", "GELU"): _plain(M.GELU),
    ("megengine.module.activation", "LeakyReLU"): _plain(M.LeakyReLU, "negative_slope"),
    ("megengine.module.activation", "Softmax"): _plain(M.Softmax, "axis"),
    ("megengine.module.identity", "Identity"): _plain(M.Identity),
    ("megengine.module.dropout", "Dropout"): _plain(M.Dropout, "drop_prob"),
}


def _ints(value: Any) -> list[int]:
    items = value if isinstance(value, list | tuple) else [value]
    return [int(v) for v in items if isinstance(v, int | np.integer) and not isinstance(v, bool)]


def _layer_bytes(cls: str, s: dict[str, Any]) -> int:
    """Bytes the xmge layer's constructor allocates (float32 parameters) for MegEngine state ``s``,
    sized before it runs: a 30,000-channel conv asks for gigabytes in a few bytes of file."""
    if cls == "Conv2d":
        groups = max(_ints(s.get("groups", 1)) or [1])
        counts = [*_ints(s.get("out_channels")), *_ints(s.get("in_channels"))]
        kernel = _ints(s.get("kernel_size"))
        if len(counts) != 2 or not kernel:
            return 0
        out, inp = (max(c, 0) for c in counts)
        kh, kw = (max(kernel[0], 0), max(kernel[-1], 0))
        return 4 * (out * (inp // max(groups, 1)) * kh * kw + out)
    if cls == "Linear":
        counts = [*_ints(s.get("in_features")), *_ints(s.get("out_features"))]
        return 4 * (math.prod(max(c, 0) for c in counts) + max(counts[-1], 0)) if len(counts) == 2 else 0
    if cls.startswith("BatchNorm"):
        return 16 * max(_ints(s.get("num_features")) or [0])
    return 0


def _layer(record: _Record) -> Module:
    st = record.state
    path = tuple(st.get("module", ()))
    build = _LAYERS.get(path) if len(path) == 2 else None  # type: ignore[call-overload]
    if build is None:
        raise _refuse(f"module class '{'.'.join(map(str, path))}'", "it is not a built-in layer xmge maps")
    state = st.get("state", {})
    name = ".".join(map(str, path))
    if not isinstance(state, dict):
        raise _refuse(f"layer {name} whose state is a {type(state).__name__}", "a layer's state is a dict")
    try:
        _budget().add_tensor(_layer_bytes(path[1], state), place=f"layer {name}", what="a layer's parameters")
        m = build(state)
    except KeyError as exc:
        raise _refuse(f"layer {name}", f"its state lacks the field {exc.args[0]!r}") from None
    except (TypeError, ValueError, IndexError, ZeroDivisionError) as exc:
        why = f"its configuration is invalid ({type(exc).__name__}: {exc})"
        raise _refuse(f"layer {name}", why) from None
    m.training = bool(state.get("training", False))
    return m


# ---------------------------------------------------------------------------------------------------
# Records -> xmge TracedModule

_BOOKKEEPING = frozenset(
    """_modules name training quantize_disabled _forward_pre_hooks _forward_hooks _name _short_name
    argdef_graph_map argdef_outdef_map _is_top watch_points watch_node_value end_points is_qat argspec
    dump_info""".split()
)
_SKIP = object()


def _value(v: Any) -> Any:
    """A pickled attribute value as xmge: layers, nested TracedModules, tensors, containers."""
    if isinstance(v, _Record):
        if v.kind == "_ModuleState":
            return _layer(v)
        if v.kind == "TracedModule":
            return _traced_module(v)
        if v.kind in ("Tensor", "Parameter"):
            return _tensor(v)
        raise _refuse(f"an attribute of type {v._mge_name}", "not a module or tensor")
    if isinstance(v, list | tuple | dict):
        items = v.items() if isinstance(v, dict) else enumerate(v)
        conv = {k: _value(x) for k, x in items}
        if all(x is _SKIP for x in conv.values()):
            return _SKIP
        if any(x is _SKIP for x in conv.values()):
            raise _refuse("a container mixing modules/tensors with other values", "not supported")
        return (
            dict(conv)
            if isinstance(v, dict)
            else type(v)(conv.values())
            if type(v) in (list, tuple)
            else list(conv.values())
        )
    return _SKIP


def _check_state(tm: TracedModule, state: dict[str, Any], source: str, declared_only: bool = True) -> None:
    try:
        check_instance_state(tm, state, source, declared_only=declared_only)
    except UnsafePickleError as exc:  # this loader's errors are TracedModuleErrors too
        raise MegEngineTMError(str(exc)) from None


def _traced_module(record: _Record) -> TracedModule:
    from compiler.traced_module.budget import nested

    with nested("a nested TracedModule", _budget().file):
        return _traced_module_at(record)


def _traced_module_at(record: _Record) -> TracedModule:
    st = record.state
    graphs = st.get("argdef_graph_map") or {}
    if len(graphs) != 1:
        raise _refuse(
            f"a TracedModule with {len(graphs)} argument signatures", "xmge keeps exactly one graph"
        )
    ((argdef, graph_rec),) = graphs.items()
    outdef = (st.get("argdef_outdef_map") or {}).get(argdef)
    if outdef is None:
        raise _refuse("a TracedModule without an output structure", "argdef_outdef_map is incomplete")
    graph = _graph(graph_rec, argdef, outdef)
    tm = TracedModule(graph)
    source = f"load_megengine_tm({_budget().file})"
    attrs: dict[str, Any] = {}
    for key, v in st.items():
        if key in _BOOKKEEPING or key in vars(tm):
            continue
        converted = _value(v)
        if converted is _SKIP:  # not restored; a name that would shadow behaviour still says so
            _check_state(tm, {key: converted}, source, declared_only=False)
        else:
            attrs[key] = converted
    _check_state(tm, attrs, source)
    for key, converted in attrs.items():
        setattr(tm, key, converted)
    tm.training = bool(st.get("training", False))
    # module nodes point at the modules they stand for (as trace_module's do)
    env: dict[Node, Any] = {graph._inputs[0]: tm}
    graph._inputs[0].owner = tm  # type: ignore[attr-defined]
    for e in graph._exprs:
        if isinstance(e, GetAttr) and isinstance(e.outputs[0], ModuleNode) and e.inputs[0] in env:
            env[e.outputs[0]] = e.outputs[0].owner = e.interpret(env[e.inputs[0]])[0]
        elif isinstance(e, Constant) and isinstance(e.outputs[0], ModuleNode):
            e.outputs[0].owner = e.value
    return tm


def _is_tensor_leafdef(leaf: _Record) -> bool:
    types_ = leaf.state.get("type", ())
    types_ = types_ if isinstance(types_, tuple) else (types_,)
    return any(
        isinstance(t, type)
        and issubclass(t, _Record)
        and t.__name__ in ("Tensor", "TensorNode", "Module", "ModuleNode")
        for t in types_
    )


def _spec(td: Any, consts: dict[int, Any] | None, counter: list[int]) -> pytree.Spec:
    """A MegEngine TreeDef/LeafDef as an xmge spec. ``consts`` (leaf index -> value) says which
    leaves are constants; without it the LeafDef's own types decide (graph arguments)."""
    if not isinstance(td, _Record) or td.kind not in ("TreeDef", "LeafDef"):
        raise _refuse(f"an argument structure of type {type(td).__name__}", "not a MegEngine pytree")
    st = td.state
    if td.kind == "LeafDef":
        i = counter[0]
        counter[0] += 1
        if consts is not None:
            return ("const", _const(consts[i])) if i in consts else pytree.LEAF
        return pytree.LEAF if _is_tensor_leafdef(td) else ("const", _const(st.get("const_val")))
    kind, children = st.get("type"), [_spec(c, consts, counter) for c in st.get("children_defs", ())]
    if kind is tuple:
        return ("tuple", *children)
    if kind is list:
        return ("list", *children)
    if kind is dict:
        return ("dict", tuple(st.get("aux_data") or ()), *children)
    raise _refuse(
        f"an argument structure of type {getattr(kind, '__name__', kind)!r}", "only tuple/list/dict"
    )


def _const(v: Any) -> Any:
    if isinstance(v, _Record):
        if v.kind in ("Tensor", "Parameter"):
            return _tensor(v)
        raise _refuse(f"a constant argument of type {v._mge_name}", "not plain data")
    if isinstance(v, list | tuple):
        return type(v)(_const(x) for x in v)
    return v


def _node(rec: Any, expr: Expr, graph: InternalGraph) -> Node:
    if not isinstance(rec, _Record) or rec.kind not in ("TensorNode", "ModuleNode"):
        raise _refuse(f"a graph value of type {type(rec).__name__}", "not a MegEngine node")
    st = rec.state
    name, qualname, nid = str(st.get("_name")), str(st.get("_qualname", "")), int(st.get("_id", 0))
    graph._used_names.setdefault(name, 0)
    if rec.kind == "ModuleNode":
        mtype = st.get("module_type", ("", "Module"))
        node: Node = ModuleNode(expr, name, qualname, nid, ".".join(map(str, mtype)))
    else:
        node = TensorNode(
            expr, name, qualname, nid, tuple(st.get("_shape") or ()), np.dtype(st.get("_dtype", "float32"))
        )
    expr.outputs.append(node)
    return node


def _function(func: Any) -> tuple[str, str]:
    module, name = (
        (func._mge_name.rpartition(".")[0], func.kind) if isinstance(func, _Record) else tuple(func)
    )
    if not (str(module).startswith("megengine.functional") and name in _FUNCTIONS and hasattr(F, name)):
        raise _refuse(f"function '{module}.{name}'", "it is not in the megengine.functional allow-list")
    fn = getattr(F, name)
    return fn.__module__, fn.__qualname__


def _graph(rec: _Record, argdef: Any, outdef: Any) -> InternalGraph:
    st = rec.state
    graph = InternalGraph(str(st.get("_name", "Graph")), str(st.get("_qualname", st.get("_name", "Graph"))))
    nodes: dict[int, Node] = {}
    for n in st.get("_inputs", ()):
        expr_rec = n.state.get("expr") if isinstance(n, _Record) else None
        expr = Input(int(expr_rec.state.get("_id", 0)) if isinstance(expr_rec, _Record) else 0, "")
        node = _node(n, expr, graph)
        expr.name = node.name
        graph._inputs.append(node)
        nodes[id(n)] = node
    if not graph._inputs or not isinstance(graph._inputs[0], ModuleNode):
        raise _refuse("a graph whose first input is not self", "unexpected structure")
    in_spec = _spec(argdef, None, [0])
    if (
        in_spec[0] != "tuple"
        or len(in_spec) != 3
        or in_spec[1][0] != "tuple"
        or in_spec[1][1:2] != (pytree.LEAF,)
    ):
        raise _refuse("graph arguments not of the form ((self, ...), {...})", "unexpected structure")
    graph._in_spec = ("tuple", ("tuple", *in_spec[1][2:]), in_spec[2])
    for e in st.get("_exprs", ()):
        graph._exprs.append(_expr(e, nodes, graph))
    graph._outputs = [nodes[id(n)] for n in st.get("_outputs", ())]
    graph._out_spec = _spec(outdef, None, [0])
    if pytree.num_leaves(graph._out_spec) != len(graph._outputs):
        raise _refuse("a graph whose output structure does not match its outputs", "inconsistent file")
    ids = st.get("_total_ids")
    if isinstance(ids, tuple | list) and len(ids) == 2:
        graph._total_ids = [int(ids[0]), int(ids[1])]
    return graph


def _expr(rec: Any, nodes: dict[int, Node], graph: InternalGraph) -> Expr:
    if not isinstance(rec, _Record):
        raise _refuse(f"an expression of type {type(rec).__name__}", "not a MegEngine expression")
    st = rec.state
    try:
        inputs = [nodes[id(n)] for n in st.get("inputs", ())]
    except KeyError:
        raise _refuse(f"expression %{st.get('_id')}", "it reads a value defined after it") from None
    eid, kind = int(st.get("_id", 0)), rec.kind
    if kind in ("CallMethod", "CallFunction"):
        consts = dict(st.get("const_val") or ())
        spec = _spec(st.get("arg_def"), consts, [0])
        if pytree.num_leaves(spec) != len(inputs):
            raise _refuse(f"expression %{eid}", "its argument structure does not match its inputs")
        out_spec = _spec(st.get("out_def"), {}, [0]) if st.get("out_def") is not None else pytree.LEAF
    expr: Expr
    if kind == "GetAttr":
        policy.check_attr_path(str(st.get("name")))
        expr = GetAttr(eid, inputs[0], str(st.get("name")))  # type: ignore[arg-type]
    elif kind == "CallMethod":
        method = str(st.get("method"))
        obj = inputs[0]
        if not (isinstance(obj, ModuleNode) and method == "__call__"):
            policy.check_tensor_method(method)
        # MegEngine's args start with the object itself; xmge keeps it as the expression's first input
        args = spec[1]
        if args[0] != "tuple" or args[1:2] != (pytree.LEAF,):
            raise _refuse(f"expression %{eid}", "a method call whose first argument is not its object")
        expr = CallMethod(eid, obj, method, inputs[1:], ("tuple", ("tuple", *args[2:]), spec[2]), out_spec)
    elif kind == "CallFunction":
        func = _function(st.get("func"))
        expr = CallFunction(eid, func, inputs, spec, out_spec)
        _check_binds(expr)
    elif kind == "Constant":
        value = st.get("value")
        if isinstance(value, _Record) and value.kind == "_ModuleState":
            expr = Constant(eid, _layer(value))
        else:
            expr = Constant(eid, _tensor(value))
    else:
        raise _refuse(
            f"expression %{eid} of kind {rec._mge_name}",
            "xmge maps GetAttr, CallMethod, CallFunction, Constant",
        )
    for n in expr.inputs:
        if expr not in n.users:
            n.users.append(expr)
    for n in st.get("outputs", ()):
        nodes[id(n)] = _node(n, expr, graph)
    return expr


def _check_binds(expr: CallFunction) -> None:
    # MegEngine binds every parameter; the xmge function must accept the same call
    fn = policy.resolve_function(*expr.func_key)
    args, kwargs = pytree.unflatten(expr.arg_spec, iter([None] * len(expr.inputs)))
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as exc:
        where = f"expression %{expr.id} ({expr.func_key[1]})"
        raise _refuse(where, f"xmge's signature differs: {exc}") from None


def load_megengine_tm(f: str | os.PathLike[str] | IO[bytes] | bytes) -> TracedModule:
    """Rebuild a ``.tm`` written by MegEngine's ``megengine.save(trace_module(...))`` as an xmge
    :class:`TracedModule` (see the module docstring for what is admitted)."""
    if isinstance(f, bytes):
        f = io.BytesIO(f)
    name = os.fspath(f) if isinstance(f, str | os.PathLike) else getattr(f, "name", "<.tm data>")
    try:
        if isinstance(f, str | os.PathLike):
            with open(f, "rb") as fh:
                data = fh.read()
        else:
            data = f.read()
        # the C unpickler allocates a counted argument's declared length before reading it: check
        # every declared length against the bytes present first (pickletools reads, never allocates)
        for _ in pickletools.genops(data):
            pass
        token = _LOAD.set(limits.Budget(file=str(name)))
        try:
            root = _Unpickler(io.BytesIO(data)).load()
            top_name = "megengine.traced_module.traced_module.TracedModule"
            if not (isinstance(root, _Record) and root._mge_name == top_name):
                raise _refuse(f"a file holding {type(root).__name__}", "it is not a MegEngine TracedModule")
            top = _traced_module(root)
        finally:
            _LOAD.reset(token)
    except (XmgeError, OSError):
        raise
    except RecursionError:
        raise _refuse(f"{name}", "its graphs nest too deeply") from None
    except (EOFError, IndexError, KeyError, TypeError, ValueError, AttributeError, StopIteration,
            MemoryError, OverflowError, SystemError, struct.error, pickle.UnpicklingError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else "no detail"
        why = f"it is not a well-formed MegEngine .tm ({type(exc).__name__}: {detail})"
        raise _refuse(f"{name}", why) from None
    top._update_ref()
    _share_ids(top)
    return top


def _share_ids(top: TracedModule) -> None:
    """One id counter for all graphs, past every id the file used (MegEngine numbers them so)."""
    graphs = [top.graph, *top.graph._subgraphs()]
    counter = [0, 0]
    for g in graphs:
        for n in g.nodes(recursive=False):
            counter[0] = max(counter[0], n.id + 1)
        for e in g.exprs(recursive=False):
            counter[1] = max(counter[1], e.id + 1)
    for g in graphs:
        counter = [max(counter[0], g._total_ids[0]), max(counter[1], g._total_ids[1])]
    for g in graphs:
        g._total_ids = counter
