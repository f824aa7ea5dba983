"""MegEngine's ``megengine.utils.comp_graph_tools``: walk, edit and run a loaded ``.mge`` graph.

The vars and operators are :mod:`compiler.utils.network_node` objects (from
``megbrain_graph.load_graph`` or :class:`~compiler.utils.network.Network`). ``GraphInference`` runs a
graph on xmge's reference interpreter.
"""

from __future__ import annotations

import collections
import heapq
import os
from collections import OrderedDict
from collections.abc import Sequence
from typing import IO, Any

import numpy as np

from compiler.utils.network_node import ConstOpBase, OpNode, VarNode
from dialects.errors import XmgeError

__all__ = [
    "get_dep_vars",
    "get_owner_opr_inputs",
    "get_owner_opr_type",
    "get_opr_type",
    "graph_traversal",
    "get_oprs_seq",
    "replace_vars",
    "replace_oprs",
    "set_priority_to_id",
    "GraphInference",
]


class GraphToolsError(XmgeError, ValueError):
    """A graph tool got vars or names it cannot use."""


def _as_list(var: VarNode | Sequence[VarNode]) -> list[VarNode]:
    return [var] if isinstance(var, VarNode) else list(var)


def get_dep_vars(
    var: VarNode | Sequence[VarNode], var_type: str | Sequence[str] | None = None
) -> list[VarNode]:
    """Vars ``var`` depends on (breadth first, ``var`` itself included) whose owner operator's type
    is in ``var_type``; all of them when ``var_type`` is None."""
    types = [var_type] if isinstance(var_type, str) else var_type
    out: list[VarNode] = []
    memo: set[int] = set()
    queue = collections.deque(_as_list(var))
    while queue:
        v = queue.popleft()
        if id(v) in memo:
            continue
        memo.add(id(v))
        queue.extend(get_owner_opr_inputs(v))
        if types is None or get_owner_opr_type(v) in types:
            out.append(v)
    return out


def get_owner_opr_inputs(var: VarNode) -> list[VarNode]:
    """The inputs of the operator that computes ``var``."""
    return list(var.owner.inputs) if var.owner is not None else []


def get_owner_opr_type(var: VarNode) -> str:
    """The type name of the operator that computes ``var``."""
    if var.owner is None:
        raise GraphToolsError(f"var {var.name!r} has no owner operator")
    return var.owner.type


def get_opr_type(opr: OpNode) -> str:
    """The MegEngine type name of an operator (``Elemwise``, ``ConvolutionForward``, ...)."""
    if not isinstance(opr, OpNode):
        raise TypeError(f"get_opr_type: expected an OpNode, got {type(opr).__name__}")
    return opr.type


def graph_traversal(outputs: Sequence[VarNode]) -> tuple[Any, ...]:
    """``(map_oprs, map_vars, var2oprs, opr2receivers, indegree2opr, opr2indegree)``: operators and
    vars by id, the (operator id, input index) pairs reading each var, the receivers of each
    operator, operators by in-degree and in-degree by operator id."""
    map_oprs: dict[int, OpNode] = {}
    map_vars: dict[int, VarNode] = {}
    var2oprs: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
    opr2receivers: dict[int, list[int]] = collections.defaultdict(list)
    indegree2opr: dict[int, Any] = collections.defaultdict(set)
    indegree2opr[0] = []
    opr2indegree: dict[int, int] = {}
    queue: list[OpNode] = []
    for v in outputs:
        if v.owner is not None and not any(v.owner is q for q in queue):
            queue.append(v.owner)
    visited = {o.id for o in queue}
    idx = 0
    while idx < len(queue):
        cur = queue[idx]
        idx += 1
        map_oprs[cur.id] = cur
        for i, var in enumerate(cur.inputs):
            map_vars[var.id] = var
            var2oprs[var.id].append((cur.id, i))
            pre = var.owner
            assert pre is not None
            if pre.id not in visited:
                visited.add(pre.id)
                queue.append(pre)
            opr2receivers[pre.id].append(cur.id)
        deg = len(cur.inputs)
        if deg == 0:
            indegree2opr[0].append(cur)
        else:
            indegree2opr[deg].add(cur.id)
        opr2indegree[cur.id] = deg
    return map_oprs, map_vars, var2oprs, opr2receivers, indegree2opr, opr2indegree


def get_oprs_seq(
    outputs: VarNode | Sequence[VarNode], prune_reshape: bool = False, prune_immtensor: bool = True
) -> list[OpNode]:
    """The operators ``outputs`` depend on in an execution order (a topological sort preferring
    lower priority, then lower id). ``prune_immtensor`` leaves constants out; ``prune_reshape``
    leaves out the operators that only compute a Reshape's target shape."""
    outs = _as_list(outputs)
    map_oprs, _, _, opr2receivers, _, opr2indegree = graph_traversal(outs)
    indeg = dict(opr2indegree)
    heap = [(o.priority, o.id, o) for o in map_oprs.values() if indeg[o.id] == 0]
    heapq.heapify(heap)
    seq: list[OpNode] = []
    while heap:
        _, _, opr = heapq.heappop(heap)
        seq.append(opr)
        for r in opr2receivers.get(opr.id, []):
            indeg[r] -= 1
            if indeg[r] == 0:
                rec = map_oprs[r]
                heapq.heappush(heap, (rec.priority, rec.id, rec))
    if prune_reshape:
        seq = _prune_reshape_inputs(outs, seq)
    if prune_immtensor:
        seq = [o for o in seq if not isinstance(o, ConstOpBase)]
    return seq


def _prune_reshape_inputs(outputs: list[VarNode], seq: list[OpNode]) -> list[OpNode]:
    """Drop operators whose results only feed the shape operand of Reshape operators."""
    needed: set[int] = set()
    stack = [v.owner for v in outputs if v.owner is not None]
    while stack:
        opr = stack.pop()
        if opr.id in needed:
            continue
        needed.add(opr.id)
        ins = opr.inputs[:1] if opr.type == "Reshape" else opr.inputs
        stack.extend(v.owner for v in ins if v.owner is not None)
    return [o for o in seq if o.id in needed]


def _rebuild(dst: list[VarNode], var_map: dict[int, VarNode], opr_map: dict[int, OpNode]) -> list[VarNode]:
    """Copies of the operators ``dst`` depends on, with vars and operators replaced; ``dst``'s new vars."""
    import copy

    from compiler.utils.network import _deps

    new_vars: dict[int, VarNode] = dict(var_map)
    for opr in _deps(dst):
        if all(id(v) in new_vars for v in opr.outputs):
            continue
        src = opr_map.get(id(opr), opr)
        ins = [new_vars.get(id(v), v) for v in src.inputs]
        if src is not opr:
            for old, new in zip(opr.outputs, src.outputs, strict=True):
                new_vars[id(old)] = new
            continue
        if all(a is b for a, b in zip(ins, opr.inputs, strict=True)):
            continue
        clone = copy.copy(opr)
        clone.inputs = ins
        clone.outputs = []
        for v in ins:
            v.users.append(clone)
        for old in opr.outputs:
            nv = VarNode._make(old._data, clone, old.name)
            clone.outputs.append(nv)
            new_vars[id(old)] = nv
    return [new_vars.get(id(v), v) for v in dst]


def replace_vars(
    dst: Sequence[VarNode], varmap: dict[VarNode, VarNode] | Sequence[tuple[VarNode, VarNode]]
) -> list[VarNode]:
    """New vars for ``dst`` computed with every key var of ``varmap`` replaced by its value (the
    original graph is left as it was)."""
    items = varmap.items() if isinstance(varmap, dict) else varmap
    vm: dict[int, VarNode] = {}
    for k, v in items:
        if not isinstance(k, VarNode) or not isinstance(v, VarNode):
            raise TypeError("replace_vars: varmap must map VarNode to VarNode")
        vm[id(k)] = v
    return _rebuild(list(dst), vm, {})


def replace_oprs(
    dst: Sequence[VarNode], oprmap: dict[OpNode, OpNode] | Sequence[tuple[OpNode, OpNode]]
) -> list[VarNode]:
    """New vars for ``dst`` computed with every key operator of ``oprmap`` replaced by its value."""
    items = oprmap.items() if isinstance(oprmap, dict) else oprmap
    om: dict[int, OpNode] = {}
    for k, v in items:
        if not isinstance(k, OpNode) or not isinstance(v, OpNode):
            raise TypeError("replace_oprs: oprmap must map OpNode to OpNode")
        if len(k.outputs) != len(v.outputs):
            raise GraphToolsError(
                f"can not replace {k!r} ({len(k.outputs)} outputs) with {v!r} ({len(v.outputs)})"
            )
        om[id(k)] = v
    return _rebuild(list(dst), {}, om)


def find_vars_by_name(dst: Sequence[VarNode], names: Sequence[str]) -> list[VarNode]:
    """The vars named ``names`` among those ``dst`` depends on, in the order of ``names``."""
    found: dict[str, VarNode] = {}
    for v in get_dep_vars(list(dst)) + list(dst):
        if v.name in names and v.name not in found:
            found[v.name] = v
    missing = [n for n in names if n not in found]
    if missing:
        raise GraphToolsError(f"Can not find varnode {missing} in this model")
    return [found[n] for n in names]


def set_priority_to_id(dest_vars: Sequence[VarNode]) -> None:
    from compiler.core.tensor.megbrain_graph import set_priority_to_id as _set

    _set(dest_vars)


class GraphInference:
    """Run a serialized ``.mge`` graph on xmge's reference interpreter (MegEngine's
    ``GraphInference``). ``outputs`` names the vars to compute (default: the graph's outputs)."""

    def __init__(
        self,
        file: str | os.PathLike[str] | IO[bytes],
        outputs: list[str] | None = None,
        profiling: bool = False,
        optimize_for_inference: bool = False,
        **kwargs: Any,
    ) -> None:
        from compiler.core.tensor.megbrain_graph import load_graph
        from compiler.utils.network import Network

        ret = load_graph(file)
        out_vars = ret.output_vars_list
        if outputs is not None:
            out_vars = find_vars_by_name(out_vars, outputs)
        self._origin_outputs = out_vars
        inputs = get_dep_vars(out_vars, "Host2DeviceCopy")
        self._inp_names = [v.name or f"arg_{i}" for i, v in enumerate(inputs)]
        self._out_names = [v.name or f"unnamed{i}" for i, v in enumerate(out_vars)]
        net = Network()
        net.input_vars = list(inputs)
        net.output_vars = list(out_vars)
        self._fn = net._to_func()
        if optimize_for_inference:
            from xdsl.dialects import func
            from xdsl.dialects.builtin import ModuleOp

            from compiler.dump import check_options, run_passes
            from passes.inference import pipeline_for

            module = run_passes(ModuleOp([self._fn]), pipeline_for(**check_options(dict(kwargs))))
            self._fn = next(op for op in module.ops if isinstance(op, func.FuncOp))
        self._inp_dict = OrderedDict((n, v) for n, v in zip(self._inp_names, inputs, strict=True))

    def run(self, *inp_args: Any, inp_dict: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
        """Outputs by name for inputs given in order (``inp_args``) and/or by name (``inp_dict``)."""
        from semantics.interpreter import run_function

        if len(inp_args) > len(self._inp_names):
            raise GraphToolsError(f"This model expects {len(self._inp_names)} inputs, got {len(inp_args)}")
        inputs: dict[str, Any] = dict(zip(self._inp_names, inp_args, strict=False))
        if inp_dict is not None:
            inputs.update(inp_dict)
        if set(inputs) != set(self._inp_names):
            raise GraphToolsError(
                f"This model expects inputs {self._inp_names}, but gets inputs {list(inputs)}"
            )
        arrays = [np.asarray(inputs[n]) for n in self._inp_names]
        # a graph file has no 0-d vars (a traced scalar is dumped as shape (1,)); MegEngine sets
        # such an input from a scalar, so a one-element value takes the var's shape
        for i, t in enumerate(self._fn.function_type.inputs.data):
            want = tuple(getattr(t, "get_shape", lambda: ())())
            if arrays[i].shape != want and arrays[i].size == 1 and int(np.prod(want)) == 1:
                arrays[i] = arrays[i].reshape(want)
        outs = run_function(self._fn, arrays)
        return OrderedDict(zip(self._out_names, outs, strict=True))
