"""``kernel-fuse-moves`` (passes/lowering/moves.py) and its ``gather`` kernel
(backends/c/templates/portable/moves.py): chains of copies, concats and splits compile to one
gather per value something else reads, give the reference interpreter's and torch's values exactly,
and the same bits on 1 and 2 threads (the parallel path of a large gather too)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compiler.functional as F
from compiler.driver.compile import CompiledModel
from passes.lowering.moves import MAX_SOURCES, call_map, check_pieces, pieces_of
from semantics import run_module
from tests.codegen_util import compile_fn, kernel_families, require

TARGET = "x86-avx2"


def _shuffle(x: F.Tensor) -> tuple[F.Tensor, F.Tensor]:
    """ShuffleNetV2's channel shuffle (MegEngine's reshape / transpose form): even, odd channels."""
    n, c, h, w = x.shape
    x = F.transpose(x.reshape(n * c // 2, 2, h * w), (1, 0, 2)).reshape(2, -1, c // 2, h, w)
    return x[0], x[1]


def _units(x: F.Tensor, y: F.Tensor, units: int) -> F.Tensor:
    """``units`` shuffle units: the odd half through a compute op, concatenated with the even one."""
    c = F.concat([x, y], axis=1)
    for _ in range(units):
        even, odd = _shuffle(c)
        c = F.concat([even, F.relu(odd * 1.5 - 0.25)], axis=1)
    return c


def _torch_units(x: np.ndarray, y: np.ndarray, units: int) -> np.ndarray:
    c = torch.cat([torch.from_numpy(x), torch.from_numpy(y)], 1)
    for _ in range(units):
        n, ch, h, w = c.shape
        s = c.reshape(n * ch // 2, 2, h * w).permute(1, 0, 2).reshape(2, -1, ch // 2, h, w)
        c = torch.cat([s[0], torch.relu(s[1] * 1.5 - 0.25)], 1)
    return c.numpy()


def _run_both(fn, inputs: list[np.ndarray]) -> tuple[CompiledModel, list[np.ndarray], list[np.ndarray]]:  # type: ignore[no-untyped-def]
    require(TARGET)
    one = compile_fn(fn, inputs, TARGET, threads=1)
    two = compile_fn(fn, inputs, TARGET, threads=2)
    want = run_module(one._stages["tensor"], list(inputs))  # type: ignore[arg-type]
    y1, y2 = one.run(inputs), two.run(inputs)
    for a, b, w in zip(y1, y2, want, strict=True):
        np.testing.assert_array_equal(a, b)  # copies only: the same bits on any thread count
        np.testing.assert_allclose(a, np.asarray(w), rtol=1e-6, atol=1e-6)
    return one, y1, [np.asarray(w) for w in want]


def _families(m: CompiledModel) -> set[str]:
    return {f for f, _ in kernel_families(m)}


@pytest.mark.parametrize("batch", [1, 2])
def test_shuffle_units_become_gathers(batch: int) -> None:
    rng = np.random.default_rng(33)
    x = rng.standard_normal((batch, 6, 5, 3)).astype(np.float32)
    y = rng.standard_normal((batch, 6, 5, 3)).astype(np.float32)
    one, got, _ = _run_both(lambda a, b: _units(a, b, 3), [x, y])
    np.testing.assert_allclose(got[0], _torch_units(x, y, 3), rtol=1e-6, atol=1e-6)
    fams = _families(one)
    assert "gather" in fams
    assert not fams & {"copy", "concat", "split"}, fams
    # one gather per odd half (read by the compute op) and one for the returned result
    assert one.ir("kernel-fuse-moves").count("kernel.call @gather") == 4


def test_large_gather_opens_a_region() -> None:
    rng = np.random.default_rng(34)
    x = rng.standard_normal((1, 32, 64, 64)).astype(np.float32)
    y = rng.standard_normal((1, 32, 64, 64)).astype(np.float32)
    one, got, _ = _run_both(lambda a, b: _units(a, b, 1), [x, y])
    np.testing.assert_allclose(got[0], _torch_units(x, y, 1), rtol=1e-6, atol=1e-6)
    two = compile_fn(lambda a, b: _units(a, b, 1), [x, y], TARGET, threads=2)
    gathers = [line for line in two.ir("c").split("\nstatic void ") if line.startswith("gather_")]
    assert gathers and all("#pragma omp parallel" in g for g in gathers)


def test_slices_of_transposed_concat() -> None:
    """Slices with steps and a transpose of a concat along another axis, read by a compute op."""
    rng = np.random.default_rng(35)
    a = rng.standard_normal((2, 3, 7)).astype(np.float32)
    b = rng.standard_normal((2, 5, 7)).astype(np.float32)

    def fn(p: F.Tensor, q: F.Tensor) -> F.Tensor:
        c = F.transpose(F.concat([p, q], axis=1), (2, 0, 1))  # (7, 2, 8)
        return F.relu(c[1:6:2, :, ::-3]) + 1.0

    one, got, _ = _run_both(fn, [a, b])
    c = np.concatenate([a, b], 1).transpose(2, 0, 1)
    np.testing.assert_array_equal(got[0], np.maximum(c[1:6:2, :, ::-3], 0) + 1.0)
    assert "gather" in _families(one)


def test_integer_elements() -> None:
    rng = np.random.default_rng(36)
    a = rng.integers(-99, 99, (1, 4, 3, 2)).astype(np.int32)
    b = rng.integers(-99, 99, (1, 4, 3, 2)).astype(np.int32)
    one, got, want = _run_both(lambda p, q: _shuffle(F.concat([p, q], axis=1))[1] * 2, [a, b])
    np.testing.assert_array_equal(got[0], np.concatenate([a, b], 1)[:, 1::2] * 2)
    assert "gather" in _families(one)


def test_too_many_sources_keep_their_kernels() -> None:
    """A concat of more inputs than a gather takes stays a concat (and a copy after it)."""
    rng = np.random.default_rng(37)
    xs = [rng.standard_normal((1, 2, 3)).astype(np.float32) for _ in range(MAX_SOURCES + 2)]
    one, got, _ = _run_both(lambda *t: F.relu(F.transpose(F.concat(list(t), axis=1), (0, 2, 1))), xs)
    np.testing.assert_array_equal(got[0], np.maximum(np.concatenate(xs, 1).transpose(0, 2, 1), 0))
    assert {"concat", "copy"} <= _families(one)


def test_pieces_of_a_shuffle_map() -> None:
    """The odd channels of a concat of two 3-channel inputs: channel 1 of the first input, then
    channels 0 and 2 of the second (one piece of two rows)."""
    src, pos = call_map("concat", {"outer": 1, "chunks": (12, 12)}, 0, 24)
    odd = np.arange(24).reshape(6, 4)[1::2].reshape(-1)
    pieces = pieces_of(src[odd], pos[odd], (1, 3, 4))
    assert pieces is not None
    assert [p.as_param() for p in pieces] == [
        (0, 0, 4, (4,), (1,), (1,)),
        (1, 4, 0, (2, 4), (4, 1), (8, 1)),
    ]


def test_pieces_of_a_scattered_map_is_none() -> None:
    rng = np.random.default_rng(38)
    perm = rng.permutation(4096).astype(np.int64)
    assert pieces_of(np.zeros(4096, np.int64), perm, (64, 64)) is None


def test_split_broadcast_and_reorder() -> None:
    """Split halves swapped, a broadcast row and a transpose, all in one gather (split and
    stride-0 copies compose too); the second output is a value the chain also reads."""
    rng = np.random.default_rng(39)
    a = rng.standard_normal((2, 6, 4)).astype(np.float32)
    r = rng.standard_normal((1, 1, 4)).astype(np.float32)

    def fn(p: F.Tensor, q: F.Tensor) -> tuple[F.Tensor, F.Tensor]:
        lo, hi = F.split(p, 2, axis=1)
        row = F.broadcast_to(q, (2, 2, 4))
        mid = F.concat([hi, row, lo], axis=1)  # (2, 8, 4)
        return F.transpose(mid, (0, 2, 1)) * 2.0, mid

    one, got, _ = _run_both(fn, [a, r])
    mid = np.concatenate([a[:, 3:], np.broadcast_to(r, (2, 2, 4)), a[:, :3]], 1)
    np.testing.assert_array_equal(got[0], mid.transpose(0, 2, 1) * 2.0)
    np.testing.assert_array_equal(got[1], mid)
    fams = _families(one)
    assert "gather" in fams and "split" not in fams, fams


def test_pieces_reproduce_random_piecewise_maps() -> None:
    """Random maps made of a few strided blocks (transposes, steps, reversed axes, several
    sources): whenever pieces are recovered they write exactly the map, and small maps always are."""
    rng = np.random.default_rng(40)
    recovered = 0
    for _ in range(60):
        shape = tuple(int(d) for d in rng.integers(1, 6, rng.integers(1, 4)))
        n = int(np.prod(shape))
        cut = sorted({0, n, *(int(c) * (n // shape[0]) for c in rng.integers(0, shape[0] + 1, 2))})
        src = np.zeros(n, np.int64)
        pos = np.zeros(n, np.int64)
        for b, (lo, hi) in enumerate(zip(cut, cut[1:], strict=False)):
            block = np.arange(200, dtype=np.int64).reshape(5, 5, 8)
            block = block[:, :, ::-1] if rng.random() < 0.5 else block.transpose(1, 0, 2)
            src[lo:hi] = b
            pos[lo:hi] = (
                block.reshape(-1)[: hi - lo] if rng.random() < 0.5 else block[:, 1::2].reshape(-1)[: hi - lo]
            )
        pieces = pieces_of(src, pos, shape)
        if pieces is not None:
            assert check_pieces(pieces, src, pos)
            recovered += 1
    assert recovered == 60  # a few regular blocks: always within MAX_PIECES
