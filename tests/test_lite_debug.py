"""megenginelite's debugging and global names on xmge: per-operator text and binary dumps, the
performance profile, the static memory plan, and LiteGlobal (its fast-run cache is the tuning file)."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import pytest

from compiler.driver.targets import host_target, runs_here
from compiler.lite import LiteDeviceType, LiteGlobal, LiteNetwork, NetworkError
from semantics import run_module
from tests.conftest import data_path

CONVNET = data_path("convnet", "plain.mge")  # written by MegEngine 1.13


def _run(network: LiteNetwork) -> tuple[np.ndarray, np.ndarray]:
    x = np.load(data_path("convnet", "inputs.npz"))["data"]
    network.get_io_tensor("data").set_data_by_copy(x)
    network.forward()
    return x, network.get_io_tensor(network.get_output_name(0)).to_numpy()


def test_txt_and_bin_dumps_hold_every_operator_in_order(tmp_path: Any) -> None:
    network = LiteNetwork()
    network.load(CONVNET)
    network.io_txt_dump(str(tmp_path / "io.txt"))
    network.io_bin_dump(str(tmp_path / "bin"))
    x, out = _run(network)
    module = network._require().module
    ops = [op for op in module.walk() if op.name.startswith("mgb.") and op.name != "mgb.const"]
    lines = (tmp_path / "io.txt").read_text().splitlines()
    assert len(lines) == sum(len(op.results) for op in ops)
    assert [line.split()[1] for line in lines] == [op.name for op in ops for _ in op.results]
    files = sorted(os.listdir(tmp_path / "bin"))
    assert len(files) == len(lines) and files[0].startswith("0000_")
    # the last operator's output is the network's output
    np.testing.assert_array_equal(np.load(tmp_path / "bin" / files[-1]), out)
    np.testing.assert_array_equal(out, run_module(module, [x])[0])


def test_profile_on_the_reference_names_every_operator(tmp_path: Any) -> None:
    network = LiteNetwork()
    network.load(CONVNET)
    network.enable_profile_performance(str(tmp_path / "profile.json"))
    _run(network)
    doc = json.loads((tmp_path / "profile.json").read_text())
    assert doc["engine"] == "reference interpreter"
    assert len(doc["oprs"]) > 3 and all(e["time_ms"] >= 0 for e in doc["oprs"])
    assert doc["total_ms"] == pytest.approx(sum(e["time_ms"] for e in doc["oprs"]))


@pytest.mark.skipif(not runs_here(host_target()), reason="this CPU runs no generated x86 code")
def test_profile_and_memory_plan_of_a_compiled_network(tmp_path: Any) -> None:
    network = LiteNetwork(target=str(host_target()))
    network.load(CONVNET)
    network.enable_profile_performance(str(tmp_path / "profile.json"))
    _run(network)
    doc = json.loads((tmp_path / "profile.json").read_text())
    assert doc["engine"].startswith("generated kernels for x86")
    assert doc["oprs"] and all(e["time_ms"] >= 0 for e in doc["oprs"])
    network.get_static_memory_alloc_info(str(tmp_path / "logs"))
    info = json.loads((tmp_path / "logs" / "static_memory_alloc_info.json").read_text())
    assert info["arena_bytes"] > 0 and info["workspace_bytes"] <= info["arena_bytes"]
    assert info["buffers"] and all(b["bytes"] >= 0 for b in info["buffers"])


def test_memory_plan_needs_a_compiled_network(tmp_path: Any) -> None:
    network = LiteNetwork()
    network.load(CONVNET)
    with pytest.raises(NetworkError, match="needs a compiled .mge network"):
        network.get_static_memory_alloc_info(str(tmp_path))


def test_lite_global(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert LiteGlobal.get_device_count(LiteDeviceType.LITE_CPU) == (os.cpu_count() or 1)
    assert LiteGlobal.get_device_count(LiteDeviceType.LITE_CUDA) == 0
    LiteGlobal.try_coalesce_all_free_memory()
    monkeypatch.setattr(LiteGlobal, "persistent_cache", None)
    with pytest.raises(NetworkError, match="set_persistent_cache"):
        LiteGlobal.dump_persistent_cache(str(tmp_path / "copy.json"))
    cache = tmp_path / "cache.json"
    cache.write_text('{"entries": []}')
    LiteGlobal.set_persistent_cache(str(cache))
    LiteGlobal.dump_persistent_cache(str(tmp_path / "copy.json"))
    assert (tmp_path / "copy.json").read_text() == cache.read_text()
    with pytest.raises(NetworkError, match="no TensorRT backend"):
        LiteGlobal.set_tensorrt_cache("x")
    with pytest.raises(NetworkError, match="unencrypted"):
        LiteGlobal.register_decryption_and_key("aes", None, b"k")


class _Payload:
    """Pickles as a call of os.system: what a hostile user_info would hold."""

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, ("echo hacked",))


def _dump_with_user_info(path: Any, user_info: Any) -> None:
    import compiler as xm
    import compiler.functional as F
    from compiler import jit

    @jit.trace(symbolic=True, capture_as_const=True)
    def f(x: Any) -> Any:
        return F.relu(x) * 2

    f(xm.tensor(np.zeros((1, 3), np.float32)))
    f.dump(str(path), arg_names=["data"], user_info=user_info)


def test_inspect_decodes_user_info_without_running_code(
    tmp_path: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    from compiler.driver.cli import main
    from compiler.lite import Network
    from compiler.serialization import UnsafePickleError

    good, bad = tmp_path / "good.mge", tmp_path / "bad.mge"
    _dump_with_user_info(good, {"author": "xmge", "version": [1, 2]})
    _dump_with_user_info(bad, _Payload())
    assert main(["inspect", str(good)]) == 0
    assert "user_info={'author': 'xmge', 'version': [1, 2]}" in capfd.readouterr().out
    assert main(["inspect", str(bad)]) == 0
    out = capfd.readouterr().out
    assert "not decoded" in out and "hacked" not in out
    assert Network(str(good)).user_info() == {"author": "xmge", "version": [1, 2]}
    with pytest.raises(UnsafePickleError):
        Network(str(bad)).user_info()
