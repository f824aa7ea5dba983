"""xmge's .mge dumps of the vision operators and conv3d run on real MegEngine with xmge's results.

tests/data/vision_mge/megengine_outputs.npz is what MegEngine 1.13's Lite runtime computed on xmge's
dump of each graph in tests/vision_graphs.py (WarpPerspectiveV2, ROIAlignV1, ROIPooling,
Convolution3D, Correlation). Here each graph is traced and dumped again; the dump, read back and
run by xmge's reference and (where the op has one) a compiled x86 kernel, must give MegEngine's
values."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest

import compiler as xm
from compiler import jit
from compiler.lite import Network
from tests.vision_graphs import GRAPHS

RECORDED = np.load(os.path.join(os.path.dirname(__file__), "data", "vision_mge", "megengine_outputs.npz"))
TOLERANCE = {"conv3d": 1e-5}  # a sum of 54 products in another order; the others are exact


def _dump(name: str) -> tuple[bytes, dict[str, np.ndarray]]:
    inputs = {key: RECORDED[f"{name}:{key}"] for key in ("a", "b")}
    traced = jit.trace(GRAPHS[name], symbolic=True, capture_as_const=True)
    traced(*[xm.tensor(v) for v in inputs.values()])
    buf = io.BytesIO()
    traced.dump(buf, arg_names=["a", "b"])
    return buf.getvalue(), inputs


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_dump_computes_what_megengine_computed_on_it(name: str) -> None:
    data, inputs = _dump(name)
    (got,) = Network(data)(**inputs).values()
    want = RECORDED[f"{name}:megengine"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=TOLERANCE.get(name, 0), atol=TOLERANCE.get(name, 0))


@pytest.mark.parametrize("name", ["warp", "roi_align", "conv3d"])
def test_compiled_vision_kernels_match_megengine(name: str) -> None:
    from tests.codegen_util import require

    require("x86-avx2")
    data, inputs = _dump(name)
    out = xm.compile(data, target="x86-avx2")(*inputs.values())
    got = np.asarray(out[0] if isinstance(out, list | tuple) else out)
    tol = TOLERANCE.get(name, 0)
    np.testing.assert_allclose(got, RECORDED[f"{name}:megengine"], rtol=tol, atol=tol)
