"""Edits of a MegEngine-made ``.mge`` with ``megengine.utils.network`` in MegEngine's own idioms.

Shared by ``tests/test_mge_network_edits.py`` and ``tests/data/network_edits/record.py``, which ran
each edited file through real MegEngine 1.13 (megengine-oracle) and stored what it computed."""

from __future__ import annotations

import os
from collections.abc import Callable

import compiler.functional as F
from compiler.utils import network_node as N
from compiler.utils.network import Network

GOLDEN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "golden")
SOURCE = os.path.join(GOLDEN, "multi_io", "named.mge")


def replace_var(net: Network) -> None:
    """SIGMOID(MUL) becomes relu(MUL * 2 - 0.5): new operators built on a var of the loaded graph."""
    mul = net.var_filter.name("MUL").as_unique()
    # the file keeps var names only: MegEngine names the operator SIGMOID(MUL)[17], its var SIGMOID
    users = net.opr_filter.has_input(mul).type(N.Elemwise)
    sigmoid = [o for o in users if o.outputs[0].name == "SIGMOID"][0]
    net.replace_vars({sigmoid.outputs[0]: F.relu(mul * 2.0 - 0.5)})


def remove_output_and_rename(net: Network) -> None:
    net.remove_output(net.var_filter.name("score").as_unique())
    net.modify_opr_names("edited")


def add_output(net: Network) -> None:
    extra = F.exp(net.var_filter.name("conv.Convolution").as_unique())
    extra.name = "extra"
    net.add_output(extra)


EDITS: dict[str, Callable[[Network], None]] = {
    "replace_var": replace_var,
    "remove_output": remove_output_and_rename,
    "add_output": add_output,
}


def edited(name: str, path: str) -> str:
    """Apply edit ``name`` to the golden file and dump it to ``path``."""
    net = Network.load(SOURCE)
    EDITS[name](net)
    net.dump(path)
    return path
