"""trace.dump(input_data=..., no_assert=True): MegEngine's mgbtest0 load_and_run test-case files."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from backends.mge.container import parse_file
from compiler import tensor
from compiler.jit import trace
from compiler.test_cases import InputDataError, read_cases

DATA = Path(__file__).parent / "data"


def _traced() -> trace:
    @trace(symbolic=True, capture_as_const=True)
    def f(a, b):  # type: ignore[no-untyped-def]
        return a * 2 + b

    f(tensor(np.arange(6, dtype="float32").reshape(2, 3)), tensor(np.ones((2, 3), "float32")))
    return f


def _npys(tmp_path: Path) -> str:
    np.save(tmp_path / "a.npy", np.full((2, 3), 3, "float32"))
    np.save(tmp_path / "b.npy", np.full((2, 3), 5, "float32"))
    return f"x:{tmp_path / 'a.npy'};y:{tmp_path / 'b.npy'}"


def test_megengine_file_layout_is_read() -> None:
    # written by MegEngine 1.13: f.dump(..., arg_names=["x", "y"], input_data=[npy files], no_assert=True)
    model, cases = read_cases((DATA / "mge_input_data_no_assert.mge").read_bytes())
    assert parse_file(model)[0].oprs[0].kind == "Host2DeviceCopy"
    assert len(cases) == 1
    np.testing.assert_array_equal(cases[0][0], np.full((2, 3), 3, "float32"))
    np.testing.assert_array_equal(cases[0][1], np.full((2, 3), 5, "float32"))


def test_dump_writes_cases_like_megengine(tmp_path: Path) -> None:
    f = _traced()
    out = tmp_path / "m.mge"
    info = f.dump(str(out), arg_names=["x", "y"], input_data=[_npys(tmp_path), "#rand(0,1)"], no_assert=True)
    data = out.read_bytes()
    assert data[:8] == b"mgbtest0" and struct.unpack_from("<I", data, 8)[0] == 2
    assert info.inputs == ["x", "y"] and info.tot_bytes == parse_file(data[12:])[0].size
    model, cases = read_cases(data)
    graphs = parse_file(data[12:])
    assert [o.kind for g in graphs[1:] for o in g.oprs] == ["SharedDeviceTensor"] * 4
    np.testing.assert_array_equal(cases[0][0], np.full((2, 3), 3, "float32"))
    np.testing.assert_array_equal(cases[0][1], np.full((2, 3), 5, "float32"))
    r = cases[1][0]
    assert r.shape == (2, 3) and r.dtype == np.float32 and (r >= 0).all() and (r <= 1).all()
    # the model graph is the plain dump, byte for byte
    plain = tmp_path / "p.mge"
    f.dump(str(plain), arg_names=["x", "y"])
    assert model == plain.read_bytes()


def test_rand_shape_list_file_and_transform(tmp_path: Path) -> None:
    f = _traced()
    lst = tmp_path / "list.txt"
    lst.write_text("#rand(2,3,2,...)\n\n" + _npys(tmp_path) + "\n")
    out = tmp_path / "m.mge"
    f.dump(str(out), arg_names=["x", "y"], input_data=f"@{lst}", no_assert=True, input_transform=None)
    _, cases = read_cases(out.read_bytes())
    assert len(cases) == 2 and cases[0][0].shape == (2, 3) and (cases[0][0] >= 2).all()
    f.dump(
        str(out), arg_names=["x", "y"], input_data=_npys(tmp_path), no_assert=True, input_transform="data + 1"
    )
    _, cases = read_cases(out.read_bytes())
    np.testing.assert_array_equal(cases[0][0], np.full((2, 3), 4, "float32"))


def test_unsupported_forms_fail_by_name(tmp_path: Path) -> None:
    f = _traced()
    out = str(tmp_path / "m.mge")
    with pytest.raises(ValueError, match="no_assert=True"):
        f.dump(out, input_data="#rand(0,1)")
    with pytest.raises(InputDataError, match="resize_input"):
        f.dump(out, input_data="#rand(0,1)", no_assert=True, resize_input=True)
    with pytest.raises(InputDataError, match="bad spec"):
        f.dump(out, input_data="#rand(0)", no_assert=True)
    img = tmp_path / "x.png"
    img.write_bytes(b"\x89PNG not really")
    with pytest.raises(InputDataError, match="image files"):
        f.dump(out, arg_names=["x", "y"], input_data=f"x:{img};y:{img}", no_assert=True)
    with pytest.raises(InputDataError, match="no input named"):
        f.dump(out, arg_names=["x", "y"], input_data="z:#rand(0,1);y:#rand(0,1)", no_assert=True)
    with pytest.raises(InputDataError, match="mgbtest0"):
        read_cases(b"MGBC" + bytes(20))
