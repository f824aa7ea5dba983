"""``megengine.utils.network`` edits give files real MegEngine runs, with the edit visible.

tests/data/network_edits/<edit>.npz holds what MegEngine 1.13's Lite runtime computed on xmge's dump of
each edit (tests/data/network_edits/record.py); here each edit is made again and its reference outputs
must equal MegEngine's, while the edit must change what the unedited file computes."""

from __future__ import annotations

import os

import numpy as np
import pytest

from compiler.lite import Network
from tests.network_edits import EDITS, SOURCE, edited

RECORDED = os.path.join(os.path.dirname(__file__), "data", "network_edits")


def _recorded(name: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    data = dict(np.load(os.path.join(RECORDED, name + ".npz")))
    inputs = {k[3:]: v for k, v in data.items() if k.startswith("in:")}
    return inputs, {k: v for k, v in data.items() if not k.startswith("in:")}


@pytest.mark.parametrize("name", sorted(EDITS))
def test_edit_matches_what_megengine_computed(name: str, tmp_path: str) -> None:
    inputs, want = _recorded(name)
    got = Network(edited(name, os.path.join(tmp_path, name + ".mge")))(**inputs)
    assert sorted(got) == sorted(want)
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-5, atol=1e-5, err_msg=f"{name}: {key}")


def test_edits_are_visible() -> None:
    original = Network(SOURCE)
    inputs, replaced = _recorded("replace_var")
    before = original(**inputs)
    assert not np.allclose(before["score"], replaced["score"], atol=1e-3)
    np.testing.assert_allclose(before["feat"], replaced["feat"], rtol=1e-5, atol=1e-6)
    assert sorted(_recorded("remove_output")[1]) == ["feat"]
    assert "edited.image" in _recorded("remove_output")[0]
    assert sorted(_recorded("add_output")[1]) == ["extra", "feat", "score"]
