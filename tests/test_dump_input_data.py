"""trace.dump(input_data=...): MegEngine's mgbtest0 load_and_run test-case files, with AssertEqual
checks of the outputs (the default) or without them (no_assert=True)."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pytest

import compiler.functional as F
from backends.mge.container import parse_file
from backends.mge.reader import read_mge
from compiler import tensor
from compiler.jit import trace
from compiler.test_cases import InputDataError, read_cases
from dialects.errors import AssertEqualError
from semantics import run_module

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


def _run_case(model: bytes, case: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The model of a test-case file on the reference interpreter, inputs by name."""
    module = read_mge(model)
    names = [a.data for a in module.ops.first.attributes["input_names"].data]  # type: ignore[union-attr]
    shapes = [tuple(t.get_shape()) for t in module.ops.first.function_type.inputs.data]  # type: ignore[union-attr]
    return run_module(module, [case[n].reshape(s) for n, s in zip(names, shapes, strict=True)])


def _named_cases(model: bytes, cases: list[list[np.ndarray]]) -> list[dict[str, np.ndarray]]:
    h2d = [o for o in parse_file(model)[0].oprs if o.kind == "Host2DeviceCopy"]
    names = sorted(t.name for o in h2d for t in o.tensors)
    return [dict(zip(names, c, strict=True)) for c in cases]


def test_megengine_assert_file_checks_outputs() -> None:
    # written by MegEngine 1.13 (tests/data/assert_equal/record.py): outputs o1, o2 checked
    # against inputs o1:expect, o2:expect by AssertEqual operators, maxerr 1e-3
    model, raw = read_cases((DATA / "mge_input_data_assert.mge").read_bytes())
    (case,) = _named_cases(model, raw)
    assert sorted(case) == ["o1:expect", "o2:expect", "x", "y"]
    x, y = case["x"], case["y"]
    np.testing.assert_array_equal(case["o1:expect"], np.maximum(x * 2 + y, 0))
    np.testing.assert_array_equal(case["o2:expect"], x - y)
    o1, o2 = _run_case(model, case)
    np.testing.assert_array_equal(o1, case["o1:expect"])
    bad = {**case, "o2:expect": case["o2:expect"] + 0.01}
    with pytest.raises(AssertEqualError, match="maxerr 0.001"):
        _run_case(model, bad)


def test_dump_checks_outputs_with_assert_equal(tmp_path: Path) -> None:
    f = _traced()
    out = tmp_path / "m.mge"
    info = f.dump(str(out), arg_names=["x", "y"], output_names=["o"], input_data=[_npys(tmp_path)])
    assert info.inputs == ["o:expect", "x", "y"]
    model, raw = read_cases(out.read_bytes())
    assert [o.kind for o in parse_file(model)[0].oprs].count("AssertEqual") == 1
    (case,) = _named_cases(model, raw)
    np.testing.assert_array_equal(case["o:expect"], np.full((2, 3), 11, "float32"))
    (got,) = _run_case(model, case)
    np.testing.assert_array_equal(got, case["o:expect"])
    with pytest.raises(AssertEqualError, match="largest difference at"):
        _run_case(model, {**case, "o:expect": case["o:expect"] * 1.01})
    # maxerr and silent (verbose) reach the operator, as MegEngine's param.AssertEqual
    f.dump(str(out), arg_names=["x", "y"], input_data=[_npys(tmp_path)], maxerr=0.5, silent=True)
    model, _ = read_cases(out.read_bytes())
    (check,) = [o for o in parse_file(model)[0].oprs if o.kind == "AssertEqual"]
    assert check.param("AssertEqual") == {"maxerr": 0.5, "verbose": False}


def test_dump_scalar_with_rand_case() -> None:
    # MegEngine's own test (test_tracing.py::test_dump_with_testcase): a scalar input, a #rand case
    @trace(symbolic=True, capture_as_const=True)
    def f(x):  # type: ignore[no-untyped-def]
        return F.exp(x)

    f(tensor(1.0))
    buf = io.BytesIO()
    f.dump(buf, input_data=["#rand(0, 1, 1)"])
    model, raw = read_cases(buf.getvalue())
    (case,) = _named_cases(model, raw)
    np.testing.assert_allclose(case["EXP:expect"], np.exp(case["arg_0"]), rtol=1e-6)
