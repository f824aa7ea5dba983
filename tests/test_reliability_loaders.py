"""Pickle bombs and broken pickles get one-line xmge errors before anything is allocated (issue 28)."""

from __future__ import annotations

import io
import pickle
import time
from typing import Any

import numpy as np
import pytest

import compiler as xm
import compiler.functional as F
import compiler.module as M
from compiler import traced_module as tm
from compiler.serialization import CorruptPickleError, UnsafePickleError
from dialects import limits
from dialects.errors import XmgeError

BYTEARRAY_16G = b"\x80\x04c__builtin__\nbytearray\n\x8a\x05\x00\x00\x00\x00\x04\x85R."
SET_RANGE_1E9 = b"\x80\x04c__builtin__\nset\nc__builtin__\nrange\nJ\x00\xca\x9a;\x85R\x85R."


@pytest.mark.parametrize(("data", "what"), [(BYTEARRAY_16G, "bytearray"), (SET_RANGE_1E9, "set")])
def test_pickle_bombs_are_refused_under_the_budget(data: bytes, what: str) -> None:
    start = time.process_time()
    pattern = rf"REDUCE {what}\(\) before byte \d+: .*XMGE_MAX_TENSOR_BYTES"
    with pytest.raises(limits.LimitExceeded, match=pattern):
        xm.load(io.BytesIO(data))
    assert time.process_time() - start < 1.0


def test_pickle_budget_is_overridable(monkeypatch: pytest.MonkeyPatch) -> None:
    small = b"\x80\x04c__builtin__\nbytearray\nK\x10\x85R."
    assert xm.load(io.BytesIO(small)) == bytearray(16)
    monkeypatch.setenv(limits.MAX_TENSOR_BYTES_ENV, "8")
    with pytest.raises(limits.LimitExceeded, match="limit of 8 "):
        xm.load(io.BytesIO(small))


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "ends in the middle"),
        (b"\x80\x04\xff.", "unknown pickle opcode 0xff"),
        (b"0.", "more values than the pickle stack holds"),
        (pickle.dumps({"a": [1, 2, 3]})[:-3], "not a valid pickle"),
    ],
)
def test_broken_pickles_get_clear_errors(data: bytes, why: str) -> None:
    with pytest.raises(CorruptPickleError, match=why) as info:
        xm.load(io.BytesIO(data))
    assert isinstance(info.value, XmgeError) and "\n" not in str(info.value)


# -- .tm replay ------------------------------------------------------------------------------------


class _Zeros(M.Module):
    def forward(self, x: Any) -> Any:
        return x + F.zeros((3, 3))


class _Pad(M.Module):
    def forward(self, x: Any) -> Any:
        return F.nn.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)])


HUGE_PAD = [(0, 0), (0, 0), (1, 10**6), (1, 10**4)]


def _tampered_tm(net: M.Module, edit: Any) -> Any:
    traced = tm.trace_module(net, xm.tensor(np.zeros((1, 1, 3, 3), np.float32)))
    edit(traced)
    buf = io.BytesIO()
    xm.save(traced, buf)
    return xm.load(io.BytesIO(buf.getvalue()))


def _set_call_arg(traced: Any, suffix: str, name: str, value: Any) -> None:
    for e in traced.graph.exprs():
        if getattr(e, "func_key", ("", ""))[1].endswith(suffix):
            e.set_arg(name, value)


def _widen_conv(traced: Any) -> None:
    for m in traced.modules():
        if isinstance(m, M.Conv2d):
            m.out_channels = 30000
            m.weight = xm.Parameter(np.zeros((30000, 1, 3, 3), np.float32))


@pytest.mark.parametrize(
    ("net", "edit", "what"),
    [
        (_Zeros, lambda t: _set_call_arg(t, "zeros", "shape", (30000, 30000)), "zeros"),
        (_Pad, lambda t: _set_call_arg(t, "pad", "pad_width", HUGE_PAD), "pad"),
        (lambda: M.Sequential(M.Conv2d(1, 4, 3)), _widen_conv, "Conv2d"),
    ],
)
def test_tm_replay_bombs_are_refused_before_allocating(net: Any, edit: Any, what: str) -> None:
    back = _tampered_tm(net(), edit)
    pattern = rf"expr %\d+: .*{what}'s result needs \d+ bytes.*XMGE_MAX_TENSOR_BYTES"
    with pytest.raises(limits.LimitExceeded, match=pattern) as info:
        back(xm.tensor(np.zeros((1, 1, 300, 300), np.float32)))
    assert "\n" not in str(info.value) and "\t" not in str(info.value)


def test_tm_replay_of_a_graph_using_an_uncomputed_node_is_a_clear_error() -> None:
    def drop_first(t: Any) -> None:
        t.graph._exprs.pop(0)  # a broken file: the zeros expression is gone, its output still used

    back = _tampered_tm(_Zeros(), drop_first)
    with pytest.raises(tm.TracedModuleError, match="which no earlier expression computes"):
        back(xm.tensor(np.zeros((1, 1, 3, 3), np.float32)))


# -- MegEngine .tm -----------------------------------------------------------------------------------


def _golden_tm() -> bytes:
    from tests.conftest import data_path

    with open(data_path("convnet", "convnet.tm"), "rb") as f:
        return f.read()


def test_megengine_tm_missing_layer_field_names_the_field() -> None:
    data = _golden_tm()
    assert b"in_channels" in data
    broken = data.replace(b"in_channels", b"in_channelz")
    with pytest.raises(tm.TracedModuleError, match="lacks the field 'in_channels'") as info:
        tm.load_megengine_tm(broken)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("cut", [0, 10, 100, 1000, -7])
def test_truncated_megengine_tm_is_a_clear_error(cut: int) -> None:
    data = _golden_tm()
    with pytest.raises(tm.TracedModuleError, match="not a well-formed MegEngine .tm|refusing"):
        tm.load_megengine_tm(data[:cut])


# -- mixing up .pkl and .mge (issue 31) ---------------------------------------------------------------


def test_load_of_a_mge_points_to_the_graph_loaders() -> None:
    from compiler.serialization import NotAPickleError
    from tests.conftest import data_path

    path = data_path("convnet", "plain.mge")
    with pytest.raises(NotAPickleError, match=r"\.mge graph, not a pickle: run it with compiler\.lite"):
        xm.load(path)


def test_load_state_dict_of_a_path_says_to_load_first() -> None:
    with pytest.raises(TypeError, match=r"load the file first.*compiler\.load\('model\.pkl'\)"):
        M.Linear(2, 3).load_state_dict("model.pkl")  # type: ignore[arg-type]


def test_cli_run_of_a_pickle_says_to_use_compiler_load(tmp_path: Any) -> None:
    import subprocess
    import sys

    path = tmp_path / "model.pkl"
    path.write_bytes(pickle.dumps({"w": 1}))
    proc = subprocess.run(
        [sys.executable, "-m", "compiler.driver.cli", "run", str(path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "pickle" in proc.stderr and "compiler.load" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_short_integer_argument_is_a_corrupt_pickle() -> None:
    with pytest.raises(CorruptPickleError, match="unpack requires a buffer of 4 bytes"):
        xm.load(io.BytesIO(b"\x80\x04J\x01\x02"))  # BININT with 2 of its 4 bytes (found by fuzz_pickle)


def test_megengine_tm_declared_length_is_checked_before_allocating() -> None:
    huge_bytes8 = b"\x80\x04\x8e" + (2**56 - 1).to_bytes(8, "little") + b"abc."
    with pytest.raises(tm.TracedModuleError, match="expected 72057594037927935 bytes in a bytes8"):
        tm.load_megengine_tm(huge_bytes8)


def test_pickled_dtype_with_inconsistent_flags_is_refused() -> None:
    """Found by bench/fuzz_pickle.py: numpy accepted dtype state flagging float32 as holding objects,
    and the array built with it could not be freed (numpy's 'get_clear_loop not set' at exit)."""
    data = pickle.dumps(np.zeros(2, np.float32), protocol=2)
    flags = b"J\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00t"
    assert data.count(flags) == 1
    tampered = data.replace(flags, b"J\xff\xff\xff\xffJ\xff\xff\xff\xffK\x7ft")
    with pytest.raises(UnsafePickleError, match="float32 whose pickled state disagrees with its type"):
        xm.load(io.BytesIO(tampered))
    np.testing.assert_array_equal(xm.load(io.BytesIO(data)), np.zeros(2, np.float32))


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        (b"X\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", b"X\x04\x00\x00\x00\x00\x00\x00\x00",
         "with 4 bytes of data, not 8"),
        (b"K\x02\x85", b"J\xff\xff\xff\xff\x85", "whose shape is"),
    ],
)  # fmt: skip
def test_pickled_ndarray_state_is_checked_before_numpy_applies_it(old: bytes, new: bytes, why: str) -> None:
    data = pickle.dumps(np.zeros(2, np.float32), protocol=2)
    assert data.count(old) == 1
    with pytest.raises(UnsafePickleError, match=why):
        xm.load(io.BytesIO(data.replace(old, new)))


def test_pickled_dtype_state_one_item_short_is_refused_not_a_segfault() -> None:
    """Found by bench/fuzz_pickle.py: a POP inside the dtype's state tuple left 6 items, and numpy's
    dtype __setstate__ crashed the process (SIGSEGV). The state's form is checked first now."""
    data = pickle.dumps(np.zeros(2, np.float32), protocol=2)
    state = b"(K\x03X\x01\x00\x00\x00<q\x0fNNNJ"
    assert data.count(state) == 1
    tampered = data.replace(state, b"(K\x03X\x01\x00\x00\x00<q\x0fNN0J")  # N -> POP
    with pytest.raises(UnsafePickleError, match=r"not a tuple of 8 or 9 items \(6 items\)"):
        xm.load(io.BytesIO(tampered))


def test_tm_replay_of_a_tampered_graph_is_a_traced_module_error() -> None:
    """Found by bench/fuzz_pickle.py on xmge .tm files: a loaded graph whose module lost an attribute
    (or whose expression list holds a non-expression) failed with AttributeError deep in replay."""
    net = M.Sequential(M.Conv2d(1, 2, 3), M.ReLU())
    x = xm.tensor(np.zeros((1, 1, 5, 5), np.float32))
    traced = tm.trace_module(net, x)
    buf = io.BytesIO()
    xm.save(traced, buf)
    back = xm.load(io.BytesIO(buf.getvalue()))
    back.graph._exprs.insert(1, "not an expression")
    with pytest.raises(tm.TracedModuleError, match="replaying its expressions failed") as info:
        back(x)
    assert "\n" not in str(info.value)
    back = xm.load(io.BytesIO(buf.getvalue()))
    conv = next(iter(back.children()))
    del conv.__dict__["bias"]
    with pytest.raises(tm.TracedModuleError, match=r"replaying .* failed \(AttributeError"):
        back(x)


def test_megengine_tm_checks_numpy_states_before_numpy_applies_them() -> None:
    """Found by bench/fuzz_pickle.py: MegEngine's .tm loader used the C unpickler, which hands a
    malformed dtype state straight to numpy (SystemError; a state one item short crashes numpy)."""
    data = pickle.dumps(np.zeros(2, np.float32), protocol=2)
    state = b"(K\x03X\x01\x00\x00\x00<q\x0fNNNJ"
    tampered = data.replace(state, b"(K\x03X\x01\x00\x00\x00<q\x0fNN0J")
    with pytest.raises(tm.TracedModuleError, match=r"load_megengine_tm: refusing .*\(6 items\)"):
        tm.load_megengine_tm(tampered)


@pytest.mark.parametrize(("rng_seed", "case"), [(13, 8711), (13, 8794), (13, 19169), (19, 13)])
def test_fuzzed_pickles_found_by_the_campaign_are_documented_errors(rng_seed: int, case: int) -> None:
    """The campaign's own cases (bench/fuzz_pickle.py): a numpy segfault, numpy's SystemError under
    MegEngine's .tm loader, a StopIteration out of a tampered .tm's spec, and a tampered expression
    whose repr fails while the replay error names it (the error message itself raised)."""
    from bench.fuzz_pickle import campaign

    c = campaign(rng_seed=rng_seed, timeout_s=30.0, clock="cpu")
    c.prepare()
    assert c.run(case)[0] == "rejected"
