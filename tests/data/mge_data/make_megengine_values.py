"""Run on MegEngine 1.13 (the oracle) to write megengine_values.json for tests/test_mge_data.py."""

import json

import numpy as np
from megengine.data import Collator, DataLoader, RandomSampler, ReplacementSampler, SequentialSampler
from megengine.data.dataset import ArrayDataset
from megengine.data.transform import CenterCrop, Normalize, RandomCrop, ToMode
from megengine.data.transform.vision import functional as VF

out = {}
img = (np.arange(5 * 7 * 3) * 37 % 256).astype(np.uint8).reshape(5, 7, 3)
out["img"] = img.tolist()
out["resize_linear_8x4"] = VF.resize(img, (8, 4)).tolist()
out["resize_linear_3x10"] = VF.resize(img, (3, 10)).tolist()
out["resize_nearest_8x4"] = VF.resize(img, (8, 4), 0).tolist()
out["resize_linear_f32_4x9"] = VF.resize(img.astype(np.float32), (4, 9)).tolist()
out["pad"] = VF.pad(img, (1, 0, 2, 1), [1, 2, 3]).tolist()
out["pad_float"] = str(VF.pad(img, (1, 1, 1, 1), 0.5).dtype)
out["gray"] = VF.to_gray(img).tolist()
out["center_crop"] = CenterCrop((2, 4)).apply(img).tolist()
out["normalize"] = Normalize(mean=(103, 116, 123), std=(57, 57, 58)).apply(img).tolist()
out["tomode"] = ToMode().apply(img).tolist()
np.random.seed(3)
out["random_crop"] = RandomCrop((6, 6), padding_size=1, padding_value=[1, 2, 3]).apply(img).tolist()
c = Collator()
b = c.apply([(np.ones(2, np.uint8), 1, 2.5, "a"), (np.zeros(2, np.uint8), 2, 3.5, "b")])
out["collate"] = [[x.tolist(), str(x.dtype)] if hasattr(x, "dtype") else x for x in b]
out["collate_type"] = type(b).__name__
out["random_sampler_seed0"] = list(RandomSampler(ArrayDataset(np.arange(10)), batch_size=3, seed=0))
out["replacement_seed1"] = list(
    ReplacementSampler(
        ArrayDataset(np.arange(10)), batch_size=4, num_samples=8, weights=list(range(10)), seed=1
    )
)
out["len_drop"] = [
    len(SequentialSampler(ArrayDataset(np.arange(10)), 3, True)),
    len(SequentialSampler(ArrayDataset(np.arange(10)), 3, False)),
]
dl = DataLoader(
    ArrayDataset(np.arange(10).reshape(5, 2), np.arange(5)),
    sampler=SequentialSampler(ArrayDataset(np.arange(5)), batch_size=2),
    num_workers=2,
)
out["parallel"] = [[x.tolist() for x in batch] for batch in dl]
print(json.dumps(out))
