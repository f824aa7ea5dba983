"""``megengine.core.tensor.dtype``'s quantized kinds as MegEngine 1.13 has them: qint1 (QuantizedS1)
with its numpy helpers and Tensor conversions, the 2-bit metas without a dump form, MegEngine's
``QuantDtypeMeta`` (name, cname, np_dtype_str, qmin, qmax, is_unsigned) for custom QAT dtypes, and
``is_dtype_equal``. MegEngine's values: tests/data/mge_names/qdtypes.npz (record.py there)."""

from __future__ import annotations

import copy
import os

import numpy as np
import pytest

import compiler as mge
from compiler.core.tensor import dtype as D
from compiler.quantization.utils import QuantMode, create_qparams, fake_quant_tensor, get_quantized_dtype

DATA = dict(np.load(os.path.join(os.path.dirname(__file__), "data", "mge_names", "qdtypes.npz")))


def test_qint1_conversions_match_megengine() -> None:
    dt = D.qint1(0.01)
    assert D.is_quantize(dt) and dt.metadata["mgb_dtype"]["name"] == "QuantizedS1"
    np.testing.assert_allclose(D.get_scale(dt), 0.01, rtol=1e-7)
    q = D.convert_to_qint1(DATA["data"], dt)
    np.testing.assert_array_equal(q.astype(np.int8), DATA["to_qint1"])
    np.testing.assert_allclose(D.convert_from_qint1(q), DATA["from_qint1"], rtol=1e-6)
    t = mge.tensor(DATA["data"]).astype(dt)
    assert t.dtype.metadata["mgb_dtype"]["name"] == "QuantizedS1"
    np.testing.assert_array_equal(t.numpy().astype(np.int8), DATA["astype_qint1"])
    np.testing.assert_allclose(t.astype("float32").numpy(), DATA["back_float"], rtol=1e-6)


def test_megengine_private_helpers() -> None:
    meta = D._builtin_quant_dtypes["quint8"]
    q = D._convert_to_quantized_dtype(np.array([0.3, -0.2, 50.0], np.float32), D.quint8(0.1, 3), meta)
    np.testing.assert_array_equal(q.astype(np.int32), [6, 1, 255])
    np.testing.assert_allclose(D._convert_from_quantized_dtype(q, meta), [0.3, -0.2, 25.2], rtol=1e-6)
    with pytest.raises(ValueError, match="should be a qint8 dtype"):
        D._convert_to_quantized_dtype(
            np.zeros(2, np.float32), D.quint8(0.1, 3), D._builtin_quant_dtypes["qint8"]
        )
    with pytest.raises(ValueError, match=r"within \[0, 255\] for quint8"):
        D._check_zero_point(300, meta)


def test_is_dtype_equal_matches_megengine() -> None:
    pairs = [
        (D.qint8(0.1), D.qint8(0.1)),
        (D.qint8(0.1), D.qint8(0.2)),
        (D.qint8(0.1), np.dtype("int8")),
        (D.quint8(0.1, 3), D.quint8(0.1, 4)),
        (D.qint1(0.5), D.qint1(0.5)),
        (np.dtype("float32"), np.dtype("float32")),
    ]
    np.testing.assert_array_equal([D.is_dtype_equal(a, b) for a, b in pairs], DATA["dtype_equal"])


def test_quant_dtype_meta_is_megengines() -> None:
    two = D._builtin_quant_dtypes["qint2"]
    assert [two.np_dtype_str, str(two.qmin), str(two.qmax), str(two.is_unsigned)] == list(DATA["meta_qint2"])
    assert two.cname is None and D._builtin_quant_dtypes["quint2"].is_unsigned
    assert D._builtin_quant_dtypes["qint8"].cname == "QuantizedS8"
    for name in ("quint2", "qint2"):
        with pytest.raises(ValueError, match="without cname attr is not supported"):
            D.create_quantized_dtype(D._builtin_quant_dtypes[name], 0.1, None)
    assert D.create_quantized_dtype(D._builtin_quant_dtypes["qint1"], 0.5, None).metadata["mgb_dtype"][
        "name"
    ] == ("QuantizedS1")
    with pytest.raises(ValueError, match="zero_point should be within"):
        D.create_quantized_dtype(D._builtin_quant_dtypes["quint4"], 0.1, 16)
    custom = D.QuantDtypeMeta("test_qint8", None, "int8", -126, 129)
    assert not custom.is_unsigned and copy.deepcopy(custom) is custom
    with pytest.raises(ValueError):
        D.quint8(0.05, 0.233)  # MegEngine raises ValueError for a fractional zero point


def test_custom_and_two_bit_metas_fake_quantize() -> None:
    """MegEngine's test_fakequant: a custom meta's range drives fake quantization."""
    custom = D.QuantDtypeMeta("test_qint8", None, "int8", -126, 129)
    x = np.array([-600.0, -3.3, 0.0, 2.6, 700.0], np.float32)
    qp = create_qparams(QuantMode.ASYMMERTIC, custom, mge.tensor(2.0), mge.tensor(1.0))
    want = (np.clip(np.round(x / 2.0) + 1.0, -126, 129) - 1.0) * 2.0
    np.testing.assert_allclose(fake_quant_tensor(mge.tensor(x), qp).numpy(), want)
    qp2 = create_qparams(
        QuantMode.ASYMMERTIC, D._builtin_quant_dtypes["quint2"], mge.tensor(1.0), mge.tensor(1.0)
    )
    np.testing.assert_allclose(fake_quant_tensor(mge.tensor(x), qp2).numpy(), [-1.0, -1.0, 0.0, 2.0, 2.0])
    with pytest.raises(ValueError, match="no dump form"):
        get_quantized_dtype(qp2)
    qp8 = create_qparams(QuantMode.SYMMERTIC, D._builtin_quant_dtypes["qint8_narrow"], mge.tensor(0.5))
    assert get_quantized_dtype(qp8).metadata["mgb_dtype"]["name"] == "QuantizedS8"
