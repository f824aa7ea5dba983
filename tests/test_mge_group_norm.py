"""MegEngine's GroupNorm and InstanceNorm operators read from .mge files as Reduce/Elemwise/Reshape
compositions: hand-built files checked against torch, and a real MegEngine 1.13 dump (made by
tests/data/group_norm_mge/make_group_norm_mge.py) checked against MegEngine's own output, on the
reference interpreter and compiled for x86-avx2."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backends.mge.dtypes import RawDType
from backends.mge.read_context import MgeFormatError
from backends.mge.reader import read_mge
from backends.mge.records import LoweredGraph, Metadata, WOpr, WTensor
from backends.mge.serialize import serialize_v1, serialize_v2
from compiler.driver.compile import compile
from compiler.lite import Network
from semantics.interpreter import run_module
from tests.codegen_util import require
from tests.conftest import data_path

F32 = RawDType("Float32")
SHAPE = (2, 6, 3, 4)
EPS = 1e-3


class _Graph:
    def __init__(self) -> None:
        self.oprs: list[WOpr] = []
        self.names: list[str] = []

    def add(self, opr: WOpr, name: str) -> list[int]:
        opr.outputs = list(range(len(self.names), len(self.names) + opr.n_outputs))
        self.names.extend(f"{name}:{i}" if opr.n_outputs > 1 else name for i in range(opr.n_outputs))
        self.oprs.append(opr)
        return opr.outputs

    def const(self, values: np.ndarray) -> int:
        t = WTensor(None, values.shape, F32, values.astype(np.float32).tobytes())
        return self.add(WOpr("ImmutableTensor", [], tensors=[t]), f"c{len(self.names)}")[0]

    def norm(self, kind: str, inputs: list[int], affine: bool, group: int) -> list[int]:
        param = {"affine": affine, "eps": EPS, "group": group, "format": 0}
        return self.add(WOpr(kind, inputs, 3, params=[("GroupNorm", param)]), kind.lower())


def _file(fmt: str, weight: np.ndarray, bias: np.ndarray, group: int = 3) -> bytes:
    g = _Graph()
    h2d = WOpr(
        "Host2DeviceCopy",
        [],
        params=[
            (
                "Host2DeviceCopy",
                {"enable_value_infer": True, "dump_default_value": False, "allow_cpu_mem_fwd": True},
            )
        ],
        tensors=[WTensor("x", SHAPE, F32, None)],
    )
    (x,) = g.add(h2d, "x")
    gn = g.norm("GroupNorm", [x, g.const(weight), g.const(bias)], affine=True, group=group)
    # InstanceNorm ignores its param's group: one group per channel
    inorm = g.norm("InstanceNorm", [gn[0]], affine=False, group=1)
    graph = LoweredGraph(g.oprs, g.names, [*gn, *inorm])
    meta = Metadata()
    return serialize_v2(graph, meta) if fmt == "FBS_V2" else serialize_v1(graph, meta)


def _stats(x: np.ndarray, group: int) -> tuple[np.ndarray, np.ndarray]:
    grouped = x.reshape(x.shape[0], group, -1).astype(np.float64)
    return grouped.mean(axis=2), grouped.var(axis=2)


@pytest.mark.parametrize("fmt", ["FBS_V2", "FBS"])
def test_hand_built_group_and_instance_norm(fmt: str) -> None:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(SHAPE) * 2 + 0.5).astype(np.float32)
    weight = rng.uniform(0.5, 1.5, SHAPE[1]).astype(np.float32)
    bias = rng.uniform(-1, 1, SHAPE[1]).astype(np.float32)
    gn, gn_mean, gn_var, inorm, in_mean, in_var = run_module(read_mge(_file(fmt, weight, bias)), [x])

    t = torch.from_numpy(x)
    want_gn = torch.nn.functional.group_norm(t, 3, torch.from_numpy(weight), torch.from_numpy(bias), EPS)
    np.testing.assert_allclose(gn, want_gn.numpy(), rtol=1e-5, atol=1e-5)
    want_in = torch.nn.functional.instance_norm(want_gn, eps=EPS)
    np.testing.assert_allclose(inorm, want_in.numpy(), rtol=1e-5, atol=1e-5)
    # the statistics as MegEngine's CPU kernel writes them: (N, G) mean and biased variance
    for (mean, var), (got_mean, got_var) in (
        (_stats(x, 3), (gn_mean, gn_var)),
        (_stats(want_gn.numpy(), SHAPE[1]), (in_mean, in_var)),
    ):
        assert got_mean.shape == mean.shape and got_var.shape == var.shape
        np.testing.assert_allclose(got_mean, mean, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got_var, var, rtol=1e-5, atol=1e-5)


def test_groups_that_do_not_divide_channels_are_refused() -> None:
    ones = np.ones(SHAPE[1], np.float32)
    with pytest.raises(MgeFormatError, match="6 channels do not split into 4 groups"):
        read_mge(_file("FBS_V2", ones, ones, group=4))


def _real_dump() -> tuple[str, np.ndarray, np.ndarray]:
    path = data_path("group_norm_mge", "group_norm.mge")
    x = np.load(data_path("group_norm_mge", "input.npz"))["data"]
    want = np.load(data_path("group_norm_mge", "output.npz"))["out"]
    return path, x, want


def test_megengine_dump_holds_the_operators() -> None:
    path, _, _ = _real_dump()
    raw = open(path, "rb").read()
    assert b"GroupNorm" in raw and b"InstanceNorm" in raw  # dumped with no_change_graph=True


def test_megengine_dump_runs_like_megengine() -> None:
    path, x, want = _real_dump()
    (got,) = Network(path)(data=x).values()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_megengine_dump_compiles_for_x86_avx2() -> None:
    require("x86-avx2")
    path, x, want = _real_dump()
    (got,) = compile(path, "x86-avx2").run([x])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
