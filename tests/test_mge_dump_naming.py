"""The operator and var names of traced dumps, against what MegEngine 1.13 wrote for the same code
(tests/mge_naming_cases.py; MegEngine's names recorded by tests/data/dump_naming/record.py):
module scopes (a module's ``name`` or the attribute it was first assigned to, by call stack),
``name[i]`` for repeated names, user-named vars and parameters, input names from the tensors,
commutable inputs ordered by var id, constants named ``const<v>[id]`` and folded when all inputs
are constants, and the names MegEngine makes for unnamed operators when it loads a file."""

from __future__ import annotations

import json

import pytest

import compiler
from tests.mge_helpers import data_path
from tests.mge_naming_cases import dumped_names

with open(data_path("dump_naming", "names.json")) as f:
    MEGENGINE = json.load(f)


@pytest.fixture(scope="module")
def xmge_names() -> dict[str, list[list[object]]]:
    return dumped_names(compiler)


@pytest.mark.parametrize("case", sorted(MEGENGINE))
def test_dump_names_match_megengine(xmge_names: dict[str, list[list[object]]], case: str) -> None:
    want = MEGENGINE[case]
    if want and want[0][0].startswith("h2d["):
        # xmge's loaded graph is its Network, which names an input operator after its var (as
        # MegEngine's Network does); MegEngine's raw graph calls it h2d[id] when the file has no name
        want = [[want[0][2][0], *want[0][1:]], *want[1:]]
    assert xmge_names[case] == want


def test_module_names_follow_assignment() -> None:
    M = compiler.module

    class Net(M.Module):
        def __init__(self) -> None:
            super().__init__(name="net")
            self.a = M.Linear(2, 2)
            self.b = self.a  # an alias keeps the first name

    net = Net()
    assert (net.a._name, net.a._short_name) == ("net.a", "a")
    assert net.a.weight._name == "net.a.weight"
