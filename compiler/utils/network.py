"""MegEngine's ``megengine.utils.network``: load a ``.mge`` graph, edit it in Python, dump it again.

The graph is held as :mod:`~compiler.utils.network_node` objects built from the ``mgb`` IR that
:mod:`backends.mge.reader` reads (so ``Network`` loads every file xmge reads, FBS v1 and v2); ``dump``
rebuilds a function from the nodes reachable from :attr:`Network.output_vars` and writes it with
:mod:`backends.mge.writer`, optionally optimized exactly as ``trace.dump`` does.
"""

from __future__ import annotations

import collections.abc
import fnmatch
import io
import itertools
import os
import pickle
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO, Any

from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr
from xdsl.ir import Block, Region, SSAValue

from backends.mge.container import parse_first_graph
from backends.mge.fbs import MgeFormatError
from backends.mge.oprs import BY_IR_OP, WORKSPACE_KINDS
from backends.mge.reader import graph_to_func
from backends.mge.records import Metadata
from backends.mge.writer import write_graph
from compiler.utils.network_node import (
    ConstOpBase,
    Host2DeviceCopy,
    ImmutableTensor,
    OpNode,
    VarNode,
    _placeholder,
    node_from_ir,
)
from dialects import tensor as T
from dialects.errors import XmgeError

__all__ = ["Network", "NodeFilter", "as_oprnode", "as_varnode", "set_symbolic_shape"]


class NetworkError(XmgeError, ValueError):
    """A Network operation got something it cannot use (an unknown var name, a wrong node)."""


def _read_bytes(path_or_file: str | os.PathLike[str] | IO[bytes]) -> bytes:
    if isinstance(path_or_file, str | os.PathLike):
        with open(path_or_file, "rb") as f:
            return f.read()
    return path_or_file.read()


class LoadedGraph:
    """What :func:`load_nodes` returns: the graph's vars and its metadata record."""

    def __init__(
        self, inputs: list[VarNode], outputs: list[VarNode], metadata: Metadata | None, present: bool
    ) -> None:
        self.inputs = inputs
        self.outputs = outputs
        self.metadata = metadata
        self.metadata_present = present


def load_nodes(data: bytes) -> LoadedGraph:
    """The first graph of a ``.mge`` file as nodes."""
    raw = parse_first_graph(data)
    fn = graph_to_func(raw)
    try:
        ModuleOp([fn]).verify()
    except Exception as exc:  # noqa: BLE001 - the reader's own check, as read_mge makes it
        raise MgeFormatError(f"the graph read from the file does not verify: {exc}") from exc
    fn.detach()
    block = fn.body.block
    names = [a.data for a in fn.attributes["input_names"].data]  # type: ignore[attr-defined]
    env: dict[SSAValue, VarNode] = {}
    inputs: list[VarNode] = []
    # MegBrain numbers a loaded graph's nodes as they are made (an operator, then its vars); an
    # operator the file leaves unnamed is named after its inputs and that number
    load_id = 2 * len(block.args)
    for arg, name in zip(block.args, names, strict=True):
        # named after its var, as MegEngine's Network names it (its raw graph says h2d[id])
        h2d = Host2DeviceCopy(name=name)
        h2d._loaded_name = name
        var = VarNode._make(_placeholder(arg.type), h2d, name)
        h2d.outputs = [var]
        env[arg] = var
        inputs.append(var)
    outputs: list[VarNode] = []
    for op in block.ops:
        if isinstance(op, func.ReturnOp):
            outputs = [env[v] for v in op.arguments]
            break
        if not isinstance(op, T.MgbOp):
            raise NetworkError(f"Network.load: the graph holds {op.name}, which is not a MegEngine operator")
        node = node_from_ir(op)
        for v in op.operands:
            var = env[v]
            node.inputs.append(var)
            if not any(u is node for u in var.users):
                var.users.append(node)
        if isinstance(op, T.ElemwiseOp) and "opr_name" not in op.attributes:
            node.name = _default_opr_name(op.params()["mode"].name, node.inputs, load_id)
        elif isinstance(op, T.ConstOp) and "opr_name" not in op.attributes:
            shape = ",".join(str(d) for d in (tuple(op.output.type.get_shape()) or (1,)))
            node.name = _default_opr_name("const{" + shape + "}", [], load_id)
        row = BY_IR_OP.get(type(op))
        load_id += 1 + len(op.results) + (1 if row is not None and row.kind in WORKSPACE_KINDS else 0)
        for i, r in enumerate(op.results):
            if isinstance(op, T.ConstOp):
                arr = op.numpy()
            else:
                arr = _placeholder(r.type)
            first = getattr(node, "_var_name", None) or node.name
            name = first if i == 0 else (f"{node.name}:{i}" if node.name else None)
            var = VarNode._make(arr, node, name)
            node.outputs.append(var)
            env[r] = var
    out_names = [a.data for a in fn.attributes["output_names"].data]  # type: ignore[attr-defined]
    for var, name in zip(outputs, out_names, strict=True):
        if name and not name.startswith("unnamed"):
            var.name = name
    meta = raw.metadata
    return LoadedGraph(inputs, outputs, meta, meta.present)


def _default_opr_name(kind: str, inputs: Sequence[VarNode], opr_id: int) -> str:
    """MegBrain's ``OperatorNodeConfig::make_name``: ``KIND(in0,in1)[id]``, each input's name
    without its outermost parentheses, cut with ``...`` once the name reaches 64 characters."""
    text = kind
    if inputs:
        text += "("
        for i, var in enumerate(inputs):
            if i:
                text += ","
            if len(text) >= 64:
                text += "..."
                break
            name = var.name or ""
            begin = name.find("(")
            if begin != -1:
                end = name.rfind(")")
                name = name[:begin] + (name[end + 1 :] if end >= begin else "")
            text += name
        text += ")"
    return f"{text}[{opr_id}]"


def _deps(vars: Iterable[VarNode]) -> list[OpNode]:
    """Operators the vars depend on, in a topological order (inputs first, stable in discovery)."""
    order: list[OpNode] = []
    seen: set[int] = set()
    for root in vars:
        if root.owner is None or id(root.owner) in seen:
            continue
        stack: list[tuple[OpNode, Iterator[VarNode]]] = [(root.owner, iter(root.owner.inputs))]
        seen.add(id(root.owner))
        while stack:
            opr, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                order.append(opr)
                continue
            owner = nxt.owner
            if owner is not None and id(owner) not in seen:
                seen.add(id(owner))
                stack.append((owner, iter(owner.inputs)))
    return order


class Network:
    """A ``.mge`` computing graph as editable nodes (MegEngine's ``Network``)."""

    def __init__(self) -> None:
        self.input_vars: list[VarNode] = []
        self.output_vars: list[VarNode] = []
        self._metadata: Metadata | None = None
        self._metadata_present = False
        self._trusted = False

    # -- loading ----------------------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        model_path: str | os.PathLike[str] | IO[bytes],
        outspec: list[str] | None = None,
        *,
        trusted: bool = False,
    ) -> Network:
        """Load a ``.mge`` file (a path or a binary file object); ``outspec`` names the vars to use
        as outputs (the sub-graph ending there). ``trusted`` lets :attr:`metadata` unpickle any
        ``user_info`` (by default only data, like :func:`compiler.load`)."""
        self = cls()
        g = load_nodes(_read_bytes(model_path))
        outputs = g.outputs
        if outspec is not None:
            found: dict[str, VarNode] = {}
            for opr in _deps(outputs):
                for v in opr.outputs:
                    if v.name in outspec and v.name not in found:
                        found[v.name] = v
            missing = [n for n in outspec if n not in found]
            if missing:
                raise NetworkError(f"Network.load: can not find {missing} in this model")
            outputs = [found[n] for n in outspec]
        self.output_vars = list(outputs)
        self._orig_outputs = list(outputs)
        self.input_vars = list(g.inputs)
        self._metadata = g.metadata
        self._metadata_present = g.metadata_present
        self._trusted = trusted
        return self

    @property
    def metadata(self) -> dict[str, Any] | None:
        """The file's metadata as MegEngine shows it; None when it has none (or an invalid one)."""
        m = self._metadata
        if m is None or not self._metadata_present or not m.is_valid:
            return None
        user_info: Any
        try:
            if self._trusted:
                user_info = pickle.loads(m.user_info)
            else:
                from compiler.serialization import load

                user_info = load(io.BytesIO(m.user_info), allowed_classes=["compiler.module.Module"])
        except Exception:  # noqa: BLE001 - MegEngine also falls back to the bytes on any failure
            warnings.warn(
                "can't parse user info by pickle, so return the original bytes object!", stacklevel=2
            )
            user_info = m.user_info
        ret: dict[str, Any] = {
            "user_info": user_info,
            "graph_modified": m.graph_modified,
            "optimized_for_inference": m.optimize_options != 0,
        }
        if m.optimize_options:
            from passes.inference.options import keywords_from_word

            ret.update({k: v for k, v in keywords_from_word(m.optimize_options).items() if v})
        return ret

    # -- building ---------------------------------------------------------------------------------
    def make_const(self, data: Any, name: str | None = None, device: str | None = None) -> VarNode:
        """An ImmutableTensor operator providing ``data``; returns its var."""
        return ImmutableTensor(data, name, device).outputs[0]

    def make_input_node(
        self, shape: Any, dtype: Any, name: str | None = None, device: str | None = None
    ) -> VarNode:
        """A Host2DeviceCopy operator (a new graph input); returns its var. As in MegEngine it is
        not added to ``input_vars`` (code iterates that list while making replacements); it becomes
        an input of the dumped graph once the graph uses it, in the place of the input it
        replaces (:meth:`replace_vars`)."""
        return Host2DeviceCopy(shape, dtype, name, device).outputs[0]

    def add_output(self, *vars: VarNode) -> None:
        for var in vars:
            _check_var(var, "add_output")
            if not any(var is o for o in self.output_vars):
                self.output_vars.append(var)

    def remove_output(self, *vars: VarNode) -> None:
        for var in vars:
            n = len(self.output_vars)
            self.output_vars = [o for o in self.output_vars if o is not var]
            if len(self.output_vars) == n:
                warnings.warn(
                    f"Failed to remove {var.name}({id(var)}). Please check whether this node is in the "
                    "output list.",
                    stacklevel=2,
                )

    def add_dep_oprs(self, *vars: VarNode) -> list[VarNode]:
        """Make the operators ``vars`` depend on part of the network's graph; returns ``vars``
        (the network's outputs when none are given). xmge's vars carry their operators already,
        so this only checks them and names unnamed ones after their operator."""
        if not vars:
            vars = tuple(self.output_vars)
        for var in vars:
            _check_var(var, "add_dep_oprs")
        for opr in _deps(vars):
            for v in opr.outputs:
                if v.name is None and opr.name is not None:
                    v.name = opr.name
        return list(vars)

    def modify_opr_names(self, modifier: str | Callable[[str], str]) -> None:
        """Rename every operator: prefix ``modifier.`` (a string) or map names through a function."""
        if isinstance(modifier, str):
            prefix = modifier
            modifier = lambda v: f"{prefix}.{v}"  # noqa: E731
        if not isinstance(modifier, collections.abc.Callable):
            raise TypeError(
                f"modify_opr_names: modifier must be a str or callable, got {type(modifier).__name__}"
            )
        for opr in self.all_oprs:
            new = modifier(opr.name)
            if not isinstance(new, str):
                raise TypeError(f"modify_opr_names: the modifier returned {type(new).__name__}, not str")
            opr.name = new

    def reset_batch_size(self, batchsize: int, *, blacklist: Iterable[str] = ()) -> None:
        """Set the first dimension of every input (except those in ``blacklist``) to ``batchsize``."""
        black = set(blacklist)
        prev = None
        for opr in self.data_providers_filter:
            assert isinstance(opr, Host2DeviceCopy)
            if opr.name in black:
                black.remove(opr.name)
                continue
            shp = list(opr.shape)
            if prev is None:
                prev = shp[0]
            elif prev != shp[0]:
                raise NetworkError(f"batchsize mismatch: batchsize={prev} shape={shp} dp={opr.name}")
            shp[0] = batchsize
            opr.shape = tuple(shp)
        if prev is None:
            raise NetworkError("reset_batch_size: no data provider found")
        if black:
            raise NetworkError(f"reset_batch_size: unused items in blacklist: {sorted(black)}")

    def replace_vars(self, repl_dict: dict[VarNode, VarNode]) -> None:
        """Every operator that reads a key var reads its value var instead."""
        repl = {id(k): v for k, v in repl_dict.items()}
        for v in repl.values():
            _check_var(v, "replace_vars")
        for var in self.all_vars:
            new = repl.get(id(var))
            if new is None or new is var:
                continue
            for opr in list(var.users):
                opr.inputs = [new if i is var else i for i in opr.inputs]
                if not any(u is opr for u in new.users):
                    new.users.append(opr)
            var.users.clear()
            self.output_vars = [new if o is var else o for o in self.output_vars]
            if any(var is i for i in self.input_vars) and not _reaches(self.output_vars, var):
                if isinstance(new.owner, Host2DeviceCopy) and not any(new is i for i in self.input_vars):
                    self.input_vars = [new if i is var else i for i in self.input_vars]
                else:
                    self.input_vars = [i for i in self.input_vars if i is not var]

    def replace_oprs(self, repl_dict: dict[OpNode, OpNode]) -> None:
        """Every key operator is replaced by its value operator (which takes over the key's output
        vars, so their readers now read the new operator's results)."""
        repl = {id(k): v for k, v in repl_dict.items()}
        for opr in self.all_oprs:
            new = repl.get(id(opr))
            if new is None or new is opr:
                continue
            if len(opr.outputs) != len(new.outputs):
                raise NetworkError(
                    f"can not replace {type(opr).__name__} ({len(opr.outputs)} outputs) with "
                    f"{type(new).__name__} ({len(new.outputs)} outputs)"
                )
            for old_var, new_var in zip(opr.outputs, new.outputs, strict=True):
                old_var.owner = new
                old_var._data = new_var._data
                for u in new_var.users:
                    u.inputs = [old_var if i is new_var else i for i in u.inputs]
                    if not any(x is u for x in old_var.users):
                        old_var.users.append(u)
            new.outputs = list(opr.outputs)

    # -- queries ----------------------------------------------------------------------------------
    def get_opr_by_type(self, oprcls: type[OpNode], unique: bool = True) -> Any:
        if not (isinstance(oprcls, type) and issubclass(oprcls, OpNode)):
            raise TypeError(f"get_opr_by_type: {oprcls!r} is not an OpNode class")
        return _pick(self.opr_filter.type(oprcls).as_list(), unique, f"operators of type {oprcls.__name__}")

    def get_opr_by_name(self, name: str, unique: bool = True) -> Any:
        return _pick(self.opr_filter.name(name).as_list(), unique, f"operators named {name!r}")

    def get_var_by_name(self, name: str, unique: bool = True) -> Any:
        return _pick(self.var_filter.name(name).as_list(), unique, f"vars named {name!r}")

    def get_var_receive_oprs(self, var: VarNode) -> list[OpNode]:
        return self.opr_filter.has_input(var).as_list()

    def get_dep_oprs(self, var: VarNode | list[VarNode]) -> list[OpNode]:
        return _deps(var if isinstance(var, list) else [var])

    @property
    def opr_filter(self) -> NodeFilter:
        return NodeFilter(iter(self.all_oprs))

    @property
    def var_filter(self) -> NodeFilter:
        return NodeFilter(iter(self.all_vars))

    @property
    def params_filter(self) -> NodeFilter:
        return self.opr_filter.param_provider()

    @property
    def data_providers_filter(self) -> NodeFilter:
        return self.opr_filter.data_provider()

    @property
    def dest_vars(self) -> list[VarNode]:
        return self.output_vars

    @property
    def all_oprs(self) -> list[OpNode]:
        """Every operator the outputs depend on, constants included, in execution order: a
        topological sort preferring lower priority, then lower id (as MegEngine's)."""
        from compiler.utils.comp_graph_tools import get_oprs_seq

        return get_oprs_seq(self.output_vars, prune_reshape=False, prune_immtensor=False)

    @property
    def all_vars(self) -> list[VarNode]:
        out: list[VarNode] = []
        seen: set[int] = set()
        for opr in self.all_oprs:
            for v in itertools.chain(opr.inputs, opr.outputs):
                if id(v) not in seen:
                    seen.add(id(v))
                    out.append(v)
        return out

    @property
    def all_vars_dict(self) -> dict[int, VarNode]:
        return self.var_filter.as_dict()

    @property
    def all_oprs_dict(self) -> dict[int, OpNode]:
        return self.opr_filter.as_dict()

    # -- dumping ----------------------------------------------------------------------------------
    def _to_func(self) -> func.FuncOp:
        oprs = self.all_oprs
        used = [o for o in oprs if isinstance(o, Host2DeviceCopy)]
        # the loaded/created input order first, then inputs only reached through the graph
        order = [v.owner for v in self.input_vars if v.owner is not None]
        inputs = [o for o in order if any(o is u for u in used)]
        inputs += [o for o in used if not any(o is i for i in inputs)]
        block = Block(arg_types=[o._type() for o in inputs])  # type: ignore[attr-defined]
        env: dict[int, SSAValue] = {}
        for opr, arg in zip(inputs, block.args, strict=True):
            env[id(opr.outputs[0])] = arg
        for opr in oprs:
            if isinstance(opr, Host2DeviceCopy):
                continue
            operands = []
            for v in opr.inputs:
                if id(v) not in env:
                    raise NetworkError(
                        f"{opr!r} reads var {v.name!r}, which no operator of the network defines"
                    )
                operands.append(env[id(v)])
            op = opr._build(operands, block)
            block.add_op(op)
            for var, r in zip(opr.outputs, op.results, strict=True):
                env[id(var)] = r
        if not self.output_vars:
            raise NetworkError("Network.dump: the network has no output vars")
        block.add_op(func.ReturnOp(*[env[id(v)] for v in self.output_vars]))
        fn = func.FuncOp(
            "main", ([a.type for a in block.args], [env[id(v)].type for v in self.output_vars]), Region(block)
        )
        in_names = [_input_name(o, i) for i, o in enumerate(inputs)]
        fn.attributes["input_names"] = ArrayAttr([StringAttr(n) for n in in_names])
        return fn

    def dump(
        self,
        file: str | os.PathLike[str] | IO[bytes],
        *,
        keep_var_name: int = 1,
        keep_opr_name: bool = False,
        keep_param_name: bool = False,
        keep_opr_priority: bool = False,
        strip_info_file: Any = None,
        append_json: bool = False,
        optimize_for_inference: bool = True,
        append: bool = False,
        user_info: Any = None,
        enable_metadata: bool = True,
        dump_format: str | None = None,
        compat_older_version: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Serialize the network (MegEngine's ``Network.dump``; keywords as ``trace.dump``'s).
        Returns the dump information ``trace.dump`` returns."""
        from compiler.dump import DumpResult, _write_strip_info, check_options, run_passes, strip_info
        from compiler.serialization import atomic_write
        from passes.inference import InferenceOptions, pipeline_for

        if compat_older_version is not None:
            if compat_older_version.strip() != "8.14":
                raise ValueError("Forward compatibility for older version only support 8.14 currently.")
            if dump_format != "FBS":
                raise ValueError("forward compatibility for older version only works when dump_format is FBS")
        for key in ("arg_names", "output_names"):
            if kwargs.pop(key, None):
                warnings.warn(
                    f'"{key}" is not supported in Network.dump, rename the vars directly', stacklevel=2
                )
        options = check_options(dict(kwargs))
        fn = self._to_func()
        names = [v.name for v in self.output_vars]
        module = ModuleOp([fn])
        if optimize_for_inference:
            module = run_passes(module, pipeline_for(**options))
            fn = next(op for op in module.ops if isinstance(op, func.FuncOp))
        if enable_metadata:
            word = InferenceOptions.from_kwargs(options).metadata_word() if optimize_for_inference else 0
            meta = Metadata(
                is_valid=True, graph_modified=True, optimize_options=word, user_info=pickle.dumps(user_info)
            )
        else:
            meta = Metadata(is_valid=False, optimize_options=0, user_info=b"")
        out_names = [n or f"unnamed{i}" for i, n in enumerate(names)]
        if len(set(out_names)) != len(out_names):
            raise NetworkError(f"Network.dump: output var names must be unique, got {out_names}")
        res = write_graph(
            fn,
            dump_format=dump_format or "FBS_V2",
            keep_var_name=keep_var_name,
            keep_opr_name=keep_opr_name,
            keep_opr_priority=keep_opr_priority,
            output_names=out_names,
            metadata=meta,
        )
        del (
            keep_param_name
        )  # only SharedDeviceTensor weights have param names; read graphs hold ImmutableTensors
        data = res.data
        if isinstance(file, str | os.PathLike):
            if append and os.path.exists(file):
                with open(file, "rb") as f:
                    data = f.read() + data
            atomic_write(file, lambda f: f.write(data))
        else:
            file.write(data)
        if strip_info_file is not None:
            _write_strip_info(strip_info_file, strip_info(res.graph, res.content_hash), append_json)
        g = res.graph
        return DumpResult(
            nr_opr=len(g.oprs),
            tot_bytes=len(data),
            tensor_value_bytes=sum(len(t.data or b"") for o in g.oprs for t in o.tensors),
            content_hash=res.content_hash,
            inputs=sorted(a.data for a in fn.attributes["input_names"].data),  # type: ignore[attr-defined]
            outputs=out_names,
        )


def _input_name(opr: OpNode, i: int) -> str:
    """An input's name: the operator's when it was renamed (``modify_opr_names``), else its var's."""
    renamed = opr.name is not None and opr.name != getattr(opr, "_loaded_name", None)
    return (opr.name if renamed else opr.outputs[0].name or opr.name) or f"arg_{i}"


def _reaches(outputs: list[VarNode], var: VarNode) -> bool:
    return any(var is v for opr in _deps(outputs) for v in opr.outputs)


def _check_var(var: Any, what: str) -> None:
    if not isinstance(var, VarNode):
        raise TypeError(f"{what}: expected a VarNode of a network, got {type(var).__name__}")


def _pick(found: list[Any], unique: bool, what: str) -> Any:
    if unique:
        if len(found) != 1:
            raise NetworkError(f"{len(found)} {what} found, expected exactly one")
        return found[0]
    return found


def set_symbolic_shape(option: bool) -> bool:
    """MegEngine's switch for symbolic shapes in graph building; xmge's network vars always have
    static shapes. Returns the previous setting, as MegEngine does."""
    from compiler.jit import set_symbolic_shape as _set

    return _set(option)


def as_varnode(obj: Any) -> VarNode:
    """The single var ``obj`` stands for: a VarNode, an operator with one output, or a one-element
    container of those."""
    if isinstance(obj, VarNode):
        return obj
    if isinstance(obj, OpNode):
        if len(obj.outputs) != 1:
            raise NetworkError(f"operator {obj!r} has {len(obj.outputs)} outputs, not exactly one")
        return obj.outputs[0]
    if isinstance(obj, collections.abc.Iterable) and not isinstance(obj, str):
        items = list(obj)
        if len(items) != 1:
            raise NetworkError(f"as_varnode: {len(items)} items, not exactly one")
        return as_varnode(items[0])
    raise TypeError(f"as_varnode: can not convert {type(obj).__name__} to a VarNode")


def as_oprnode(obj: Any) -> OpNode:
    """The single operator ``obj`` stands for: an OpNode, a var's owner, or a one-element container."""
    if isinstance(obj, OpNode):
        return obj
    if isinstance(obj, VarNode):
        if obj.owner is None:
            raise NetworkError(f"var {obj.name!r} has no owner operator")
        return obj.owner
    if isinstance(obj, collections.abc.Iterable) and not isinstance(obj, str):
        items = list(obj)
        if len(items) != 1:
            raise NetworkError(f"as_oprnode: {len(items)} items, not exactly one")
        return as_oprnode(items[0])
    raise TypeError(f"as_oprnode: can not convert {type(obj).__name__} to an OpNode")


class NodeFilter:
    """A chainable iterator over nodes (MegEngine's ``NodeFilter``)."""

    def __init__(self, node_iter: Iterable[Any]) -> None:
        self._iter = node_iter

    @classmethod
    def make_all_deps(cls, *dest_vars: VarNode) -> NodeFilter:
        return cls(iter(_deps(dest_vars)))

    def __iter__(self) -> Iterator[Any]:
        return iter(self._iter)

    def type(self, node_type: type | str) -> NodeFilter:
        return NodeFilter(x for x in self if _is_type(x, node_type))

    def check_type(self, node_type: type) -> NodeFilter:
        def gen() -> Iterator[Any]:
            for x in self:
                if not isinstance(x, node_type):
                    raise TypeError(f"all nodes should be {node_type.__name__}, got {x!r}")
                yield x

        return NodeFilter(gen())

    def not_type(self, node_type: type | str) -> NodeFilter:
        return NodeFilter(x for x in self if not _is_type(x, node_type))

    def param_provider(self) -> NodeFilter:
        return self.type(ConstOpBase)

    def data_provider(self) -> NodeFilter:
        return self.type(Host2DeviceCopy)

    def name(self, pattern: str, ignorecase: bool = True) -> NodeFilter:
        """Nodes whose name matches the shell-style ``pattern`` (``*`` and ``?`` wildcards)."""
        regex = re.compile(fnmatch.translate(pattern), re.IGNORECASE if ignorecase else 0)
        return NodeFilter(x for x in self if x.name is not None and regex.match(x.name))

    def has_input(self, var: VarNode) -> NodeFilter:
        return NodeFilter(x for x in self if any(i is var for i in getattr(x, "inputs", ())))

    def as_list(self) -> list[Any]:
        return list(self)

    def as_unique(self) -> Any:
        items = self.as_list()
        if len(items) != 1:
            raise NetworkError(f"as_unique: {len(items)} nodes match, expected exactly one")
        return items[0]

    def as_dict(self) -> dict[int, Any]:
        return collections.OrderedDict((x.id, x) for x in self)

    def as_count(self) -> int:
        return sum(1 for _ in self)


def _is_type(x: Any, node_type: type | str) -> bool:
    if isinstance(node_type, str):
        return getattr(x, "type", None) == node_type
    return isinstance(x, node_type)
