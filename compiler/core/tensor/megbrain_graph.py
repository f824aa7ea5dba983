"""The parts of MegEngine's ``megengine.core.tensor.megbrain_graph`` that users load and dump
``.mge`` graphs with; the vars are :class:`compiler.utils.network_node.VarNode` objects."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import IO, Any, NamedTuple

from compiler.utils.network_node import OpNode, VarNode

__all__ = [
    "CompGraphDumpResult",
    "apply_normal_varnode",
    "CompGraphLoadResult",
    "OpNode",
    "VarNode",
    "deserialize_infer_option",
    "dump_graph",
    "load_graph",
    "set_priority_to_id",
]


class CompGraphLoadResult(NamedTuple):
    graph: Any
    output_vars_dict: dict[str, VarNode]
    output_vars_list: list[VarNode]
    metadata: Any


def load_graph(fpath: str | os.PathLike[str] | IO[bytes]) -> CompGraphLoadResult:
    """Load the first graph of a ``.mge`` file: its output vars (by name and in order) and its
    metadata record. ``graph`` is the :class:`~compiler.utils.network.Network` holding the vars."""
    from compiler.utils.network import Network

    net = Network.load(fpath)
    outs = list(net.output_vars)
    return CompGraphLoadResult(net, {v.name: v for v in outs if v.name}, outs, net._metadata)


from compiler.dump import DumpResult as CompGraphDumpResult  # noqa: E402 - MegEngine's namedtuple, one definition


def dump_graph(output_vars: Sequence[VarNode] | dict[str, VarNode], **kwargs: Any) -> tuple[bytes, Any]:
    """Serialize the graph ending at ``output_vars`` (a dict names them); returns the bytes and
    the dump information. Keywords are :meth:`Network.dump`'s (no graph optimization unless
    ``optimize_for_inference=True``)."""
    import io

    from compiler.utils.network import Network

    if isinstance(output_vars, dict):
        named = []
        for name, var in output_vars.items():
            var.name = name
            named.append(var)
        output_vars = named
    net = Network()
    net.add_output(*output_vars)
    kwargs.setdefault("optimize_for_inference", False)
    buf = io.BytesIO()
    info = net.dump(buf, **kwargs)
    return buf.getvalue(), info


def apply_normal_varnode(op: Any, *args: VarNode) -> list[VarNode]:
    """Apply the OpDef ``op`` (from ``core.ops.builtin``) to graph vars: the operator joins their
    graph and its output vars are returned (a list, as MegEngine's)."""
    from compiler.core._imperative_rt.core2 import apply

    bad = [type(a).__name__ for a in args if not isinstance(a, VarNode)]
    if bad:
        raise TypeError(f"apply_normal_varnode: expected graph VarNodes, got {', '.join(bad)}")
    return apply(op, *args)  # type: ignore[return-value]


def set_priority_to_id(dest_vars: Sequence[VarNode]) -> None:
    """Give every operator the graph ending at ``dest_vars`` depends on whose priority is 0 its id
    as priority (MegEngine does this before dumping so the execution order is kept)."""
    from compiler.utils.network import _deps

    for opr in _deps(dest_vars):
        if opr.priority == 0:
            opr.priority = opr.id


def deserialize_infer_option(x: int) -> dict[str, bool]:
    """The ``optimize_for_inference`` keywords encoded in a metadata ``optimize_options`` word
    (only those that are on)."""
    from passes.inference.options import keywords_from_word

    return {k: v for k, v in keywords_from_word(int(x)).items() if v}
