"""utils.dlpack (MegEngine 1.13): round trips with torch and numpy share memory; errors are clear."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compiler as mge
from compiler.utils.dlpack import DLPackError, from_dlpack, to_dlpack


def test_to_dlpack_gives_torch_the_same_values_and_memory():
    x = mge.tensor([[0.2, 0.3, 0.5], [0.1, 0.2, 0.6]])
    capsule = to_dlpack(x)
    assert "dltensor" in repr(capsule)
    t = torch.utils.dlpack.from_dlpack(capsule)
    np.testing.assert_array_equal(t.numpy(), x.numpy())
    assert t.data_ptr() == x._data.ctypes.data  # shared, not copied
    np.testing.assert_array_equal(torch.from_dlpack(x).numpy(), x.numpy())


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.int32, torch.uint8, torch.int8, torch.bool]
)
def test_from_dlpack_capsules_and_producers(dtype):
    src = (torch.arange(6).reshape(2, 3) % 2).to(dtype)
    for ext in (torch.utils.dlpack.to_dlpack(src), src):
        y = from_dlpack(ext)
        assert isinstance(y, mge.Tensor)
        np.testing.assert_array_equal(y.numpy(), src.numpy())
        assert y.dtype == src.numpy().dtype


def test_from_dlpack_64_bit_becomes_32_bit_and_stream_is_refused():
    y = from_dlpack(torch.arange(4))
    assert y.dtype == np.int32 and y.numpy().tolist() == [0, 1, 2, 3]
    with pytest.raises(DLPackError, match="stream"):
        from_dlpack(torch.ones(2), stream=1)
    with pytest.raises(DLPackError, match="cannot read"):
        from_dlpack(object())
