"""``compiler.data`` (MegEngine's ``megengine.data``): samplers, collator, transforms and the
serial and parallel DataLoader, with values from MegEngine 1.13 where they are deterministic
(tests/data/mge_data/megengine_values.json, written by make_megengine_values.py on MegEngine)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from compiler.data import (
    Collator,
    DataLoader,
    Infinite,
    RandomSampler,
    ReplacementSampler,
    SequentialSampler,
    StreamSampler,
    get_worker_info,
)
from compiler.data.dataset import ArrayDataset, ConcatDataset, Dataset, StreamDataset
from compiler.data.transform import (
    CenterCrop,
    ColorJitter,
    Compose,
    Normalize,
    Pad,
    PseudoTransform,
    RandomCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
    ToMode,
    Transform,
)
from compiler.data.transform.vision import functional as VF

MGE = json.loads((Path(__file__).parent / "data" / "mge_data" / "megengine_values.json").read_text())
IMG = np.array(MGE["img"], dtype=np.uint8)


def _dataset(n: int = 20) -> ArrayDataset:
    return ArrayDataset(np.arange(n * 4, dtype=np.float32).reshape(n, 2, 2), np.arange(n))


def test_samplers_match_megengine() -> None:
    data = ArrayDataset(np.arange(10))
    assert list(RandomSampler(data, batch_size=3, seed=0)) == MGE["random_sampler_seed0"]
    weights = list(range(10))
    assert (
        list(ReplacementSampler(data, batch_size=4, num_samples=8, weights=weights, seed=1))
        == MGE["replacement_seed1"]
    )
    assert [len(SequentialSampler(data, 3, True)), len(SequentialSampler(data, 3, False))] == MGE["len_drop"]
    assert [b for b in SequentialSampler(data, 4)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    inf = Infinite(SequentialSampler(data, 4, drop_last=True))
    assert inf.batch_size == 4 and [next(inf) for _ in range(3)] == [[0, 1, 2, 3], [4, 5, 6, 7], [0, 1, 2, 3]]
    stream = iter(StreamSampler(batch_size=3))
    assert [next(stream), next(stream)] == [[0, 1, 2], [3, 4, 5]]


def test_sampler_and_dataset_errors() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        SequentialSampler(ArrayDataset(np.arange(4)), batch_size=0)
    with pytest.raises(ValueError, match="fewer than"):
        RandomSampler(ArrayDataset(np.arange(4)), batch_size=5)
    with pytest.raises(ValueError, match="weights"):
        ReplacementSampler(ArrayDataset(np.arange(4)), weights=[1, 2])
    with pytest.raises(ValueError, match="lengths"):
        ArrayDataset(np.zeros((3, 2)), np.zeros(2))
    with pytest.raises(TypeError):
        Dataset()  # abstract
    joined = ConcatDataset([ArrayDataset(np.arange(3)), ArrayDataset(np.arange(10, 15))])
    assert len(joined) == 8 and joined[4] == (11,) and joined[-1] == (14,)


def test_collator_matches_megengine() -> None:
    batch = Collator().apply([(np.ones(2, np.uint8), 1, 2.5, "a"), (np.zeros(2, np.uint8), 2, 3.5, "b")])
    assert type(batch).__name__ == MGE["collate_type"]
    assert [[x.tolist(), str(x.dtype)] if hasattr(x, "dtype") else x for x in batch] == MGE["collate"]
    assert Collator().apply([{"a": 1}, {"a": 2}])["a"].tolist() == [1, 2]
    with pytest.raises(TypeError, match="Collator"):
        Collator().apply([object(), object()])


def test_image_functions_match_megengine() -> None:
    np.testing.assert_array_equal(VF.resize(IMG, (8, 4), VF.INTER_NEAREST), MGE["resize_nearest_8x4"])
    np.testing.assert_array_equal(VF.resize(IMG, (3, 10)), MGE["resize_linear_3x10"])
    # OpenCV's uint8 path differs by at most one step at some borders; floats by rounding
    assert np.abs(VF.resize(IMG, (8, 4)).astype(int) - MGE["resize_linear_8x4"]).max() <= 1
    np.testing.assert_allclose(
        VF.resize(IMG.astype(np.float32), (4, 9)), MGE["resize_linear_f32_4x9"], atol=1e-4
    )
    np.testing.assert_array_equal(VF.pad(IMG, (1, 0, 2, 1), [1, 2, 3]), MGE["pad"])
    assert str(VF.pad(IMG, (1, 1, 1, 1), 0.5).dtype) == MGE["pad_float"]
    np.testing.assert_array_equal(VF.to_gray(IMG), MGE["gray"])
    hsv = VF.bgr_to_hsv(IMG)
    assert np.abs(VF.hsv_to_bgr(hsv).astype(int) - IMG).max() <= 8  # 8-bit HSV loses precision


def test_transforms_match_megengine() -> None:
    np.testing.assert_array_equal(CenterCrop((2, 4)).apply(IMG), MGE["center_crop"])
    np.testing.assert_allclose(
        Normalize(mean=(103, 116, 123), std=(57, 57, 58)).apply(IMG), MGE["normalize"], rtol=1e-6
    )
    np.testing.assert_array_equal(ToMode().apply(IMG), MGE["tomode"])
    np.random.seed(3)
    np.testing.assert_array_equal(
        RandomCrop((6, 6), padding_size=1, padding_value=[1, 2, 3]).apply(IMG), MGE["random_crop"]
    )


def test_transforms_move_boxes_with_the_image() -> None:
    img = np.zeros((10, 20, 3), np.uint8)
    boxes = np.array([[2.0, 1.0, 6.0, 4.0]])
    out_img, out_boxes = RandomHorizontalFlip(prob=1.0, order=("image", "boxes")).apply((img, boxes))
    assert out_img.shape == img.shape
    np.testing.assert_array_equal(out_boxes, [[14.0, 1.0, 18.0, 4.0]])
    padded, moved = Pad((1, 2, 3, 4), order=("image", "boxes")).apply((img, boxes.copy()))
    assert padded.shape == (13, 27, 3)
    np.testing.assert_array_equal(moved, [[5.0, 2.0, 9.0, 5.0]])
    out = Compose([RandomResizedCrop(8), ColorJitter(0.4, 0.4, 0.4, 0.1), ToMode()]).apply_batch([img, img])
    assert [o.shape for o in out] == [(3, 8, 8), (3, 8, 8)]
    with pytest.raises(AssertionError, match="exceeds"):
        CenterCrop(30).apply(img)


def test_serial_and_parallel_loaders_agree() -> None:
    data = _dataset()
    serial = [[x.tolist() for x in b] for b in DataLoader(data, SequentialSampler(data, batch_size=3))]
    parallel = [
        [x.tolist() for x in b]
        for b in DataLoader(data, SequentialSampler(data, batch_size=3), num_workers=2)
    ]
    assert serial == parallel and len(serial) == 7
    ref = DataLoader(
        ArrayDataset(np.arange(10).reshape(5, 2), np.arange(5)),
        sampler=SequentialSampler(ArrayDataset(np.arange(5)), batch_size=2),
        num_workers=2,
    )
    assert [[x.tolist() for x in batch] for batch in ref] == MGE["parallel"]
    loader = DataLoader(data, RandomSampler(data, batch_size=6), preload=True)
    from compiler.tensor import Tensor

    batches = list(loader)
    assert len(batches) == len(loader) == 4 and all(isinstance(b[0], Tensor) for b in batches)
    assert isinstance(DataLoader(data).transform, PseudoTransform)
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader(data, num_workers=-1)


class _Failing(Transform):
    def apply(self, input):  # noqa: ANN001, ANN201
        raise KeyError("no such field")


class _Dying(Transform):
    def apply(self, input):  # noqa: ANN001, ANN201
        os.kill(os.getpid(), signal.SIGKILL)


class _Slow(Transform):
    def apply(self, input):  # noqa: ANN001, ANN201
        time.sleep(5)
        return input


def test_worker_errors_deaths_and_timeouts() -> None:
    data = _dataset(8)
    with pytest.raises(RuntimeError, match=r"Caught KeyError in DataLoader worker process \d"):
        next(iter(DataLoader(data, SequentialSampler(data, 2), transform=_Failing(), num_workers=2)))
    with pytest.raises(RuntimeError, match=r"DataLoader worker .* exited unexpectedly, exitcode\(s\): -9"):
        next(iter(DataLoader(data, SequentialSampler(data, 2), transform=_Dying(), num_workers=1)))
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="timeout"):
        next(
            iter(DataLoader(data, SequentialSampler(data, 2), transform=_Slow(), num_workers=1, timeout=0.5))
        )
    assert time.monotonic() - start < 4


class _Counting(StreamDataset):
    def __init__(self, n: int, block: bool = False) -> None:
        self.n, self.block = n, block

    def __iter__(self):  # noqa: ANN204
        info = get_worker_info()
        idx, workers = (info.idx, info.worker) if info is not None else (0, 1)
        for i in range(idx, self.n, workers):
            if self.block:
                time.sleep(5)
            yield np.full((2,), i, np.int64), i


@pytest.mark.parametrize("workers,parallel", [(0, False), (2, False), (2, True)])
def test_stream_loaders(workers: int, parallel: bool) -> None:
    loader = DataLoader(
        _Counting(10), StreamSampler(batch_size=4), num_workers=workers, parallel_stream=parallel
    )
    seen = sorted(int(i) for batch in loader for i in batch[1])
    assert seen == list(range(10))


@pytest.mark.parametrize("workers", [0, 1])
def test_stream_timeout(workers: int) -> None:
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="timeout"):
        next(iter(DataLoader(_Counting(4, block=True), StreamSampler(2), num_workers=workers, timeout=0.5)))
    assert time.monotonic() - start < 4
