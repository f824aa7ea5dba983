"""save/load: MegEngine's files load, malicious pickles are refused, interrupted saves are harmless."""

from __future__ import annotations

import io
import os
import pickle
import signal
import stat
import subprocess
import sys
import time
import types
from collections import OrderedDict
from typing import Any

import numpy as np
import pytest

import compiler as xm
import compiler.functional as F
import compiler.module as M
from compiler import serialization
from compiler.hub.convnet import ConvNet
from compiler.optimizer import SGD
from compiler.serialization import UnsafePickleError
from tests.conftest import data_path


def _inputs() -> np.ndarray:
    return np.load(data_path("convnet", "inputs.npz"))["data"]


# ----------------------------------------------------------------------------------------------
# MegEngine interop


def test_megengine_state_dict_pkl_reproduces_megengine_output() -> None:
    sd = xm.load(data_path("convnet", "state_dict.pkl"))  # the default, restricted loader
    assert isinstance(sd, OrderedDict) and all(isinstance(v, np.ndarray) for v in sd.values())
    net = ConvNet()
    net.load_state_dict(sd)
    out = net.eval()(xm.tensor(_inputs())).numpy()
    expected = np.load(data_path("convnet", "expected_plain.npz"))["fc2.ADD"]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_megengine_checkpoint_pkl_resumes_model_and_optimizer() -> None:
    ckpt = xm.load(data_path("convnet", "checkpoint.pkl"))
    assert ckpt["epoch"] == 3 and isinstance(ckpt["loss"], float)
    net = ConvNet()
    net.load_state_dict(ckpt["state_dict"])
    opt = SGD(net.parameters(), lr=0.1, momentum=0.9)
    opt.load_state_dict(ckpt["opt"])
    assert opt.param_groups[0]["lr"] == 0.01
    out = net.eval()(xm.tensor(_inputs())).numpy()
    expected = np.load(data_path("convnet", "checkpoint_expected.npz"))["output"]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    plain = np.load(data_path("convnet", "expected_plain.npz"))["fc2.ADD"]
    assert not np.allclose(out, plain, atol=1e-3)  # the checkpoint's weights are its own


# ----------------------------------------------------------------------------------------------
# Round trips


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_round_trip_of_data_and_tensors(tmp_path: Any, protocol: int) -> None:
    p = xm.Parameter(np.arange(6, dtype=np.float32).reshape(2, 3))
    obj = {
        "param": p,
        "tensor": xm.tensor([1, 2, 3]),
        "arrays": [np.ones((2, 2), np.float16), np.arange(5)[::2], np.array([True, False])],
        "scalars": (np.float32(1.5), np.int64(7), 3, 2.5, "s", b"b", None, True),
        "dtype": np.dtype("int8"),
        "ordered": OrderedDict(b=1, a=2),
        "set": {1, 2},
    }
    path = tmp_path / "obj.pkl"
    xm.save(obj, path, pickle_protocol=protocol)
    with open(path, "rb") as f:
        head = f.read(2)
    assert head == (b"\x80" + bytes([protocol]) if protocol >= 2 else head)
    back = xm.load(path)
    assert type(back["param"]) is xm.Parameter and np.array_equal(back["param"].numpy(), p.numpy())
    assert type(back["tensor"]) is xm.Tensor and back["tensor"].dtype == np.int32
    for a, b in zip(back["arrays"], obj["arrays"], strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert back["scalars"] == obj["scalars"] and type(back["scalars"][0]) is np.float32
    assert back["dtype"] == np.dtype("int8") and list(back["ordered"]) == ["b", "a"] and back["set"] == {1, 2}


def test_save_and_load_use_the_given_pickle_module() -> None:
    calls: list[str] = []

    def dump(obj: Any, f: Any, protocol: int) -> None:
        calls.append(f"dump{protocol}")
        pickle.dump(obj, f, protocol=protocol)

    module = types.SimpleNamespace(dump=dump, load=pickle.load, Unpickler=pickle.Unpickler)
    buf = io.BytesIO()
    xm.save({"a": np.ones(2)}, buf, pickle_module=module, pickle_protocol=3)
    buf.seek(0)
    assert calls == ["dump3"] and xm.load(buf, pickle_module=module)["a"].shape == (2,)
    # a module the restricted loader cannot wrap is only usable on trusted files
    plain = types.SimpleNamespace(load=pickle.load)
    buf.seek(0)
    with pytest.raises(xm.XmgeError, match="trusted=True"):
        xm.load(buf, pickle_module=plain)
    buf.seek(0)
    assert xm.load(buf, pickle_module=plain, trusted=True)["a"].shape == (2,)


# ----------------------------------------------------------------------------------------------
# Malicious pickles


class _Payload:
    """Unpickling this runs ``func(*args)``: what an attacker puts in a .pkl file."""

    def __init__(self, func: Any, *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.func, self.args


def _protocol0_system(command: str) -> bytes:
    # hand-written, as an attacker would: GLOBAL 'os system', then call it with a string
    return b"cos\nsystem\n(V" + command.encode() + b"\ntR."


@pytest.mark.parametrize(
    "make",
    [
        lambda cmd: pickle.dumps(_Payload(os.system, cmd)),
        lambda cmd: pickle.dumps({"state_dict": OrderedDict(w=np.ones(2)), "x": [_Payload(os.system, cmd)]}),
        lambda cmd: _protocol0_system(cmd),
        lambda cmd: pickle.dumps(_Payload(eval, f"__import__('os').system({cmd!r})")),
        lambda cmd: pickle.dumps(
            _Payload(subprocess.call, cmd, -1, None, None, None, None, None, True, True)
        ),
    ],
    ids=["os.system", "nested_in_state_dict", "protocol0_handwritten", "builtins.eval", "subprocess.call"],
)
def test_malicious_pickle_is_refused_and_nothing_runs(tmp_path: Any, make: Any) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pkl"
    path.write_bytes(make(f"touch {marker}"))
    with pytest.raises(UnsafePickleError) as info:
        xm.load(path)
    message = str(info.value)
    assert "refusing to load" in message and "allowed_classes" in message and "trusted=True" in message
    assert any(name in message for name in ("system", "eval", "subprocess.call"))
    assert not marker.exists()
    # the control: the same file does run its payload when the caller trusts it
    xm.load(path, trusted=True)
    assert marker.exists()


def test_non_latin1_codec_and_unlisted_numpy_functions_are_refused() -> None:
    class Codec:
        def __reduce__(self) -> Any:
            import _codecs

            return _codecs.encode, ("x", "rot13")

    with pytest.raises(UnsafePickleError, match="rot13"):
        xm.serialization.loads(pickle.dumps(Codec(), protocol=2))
    with pytest.raises(UnsafePickleError, match="numpy.load"):
        xm.serialization.loads(pickle.dumps(_Payload(np.load, "/etc/passwd")))


# ----------------------------------------------------------------------------------------------
# Whole modules need an opt-in


class UserNet(M.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = M.Conv2d(1, 2, 3)
        self.fc = M.Linear(8, 3)

    def forward(self, x: xm.Tensor) -> xm.Tensor:
        return self.fc(F.flatten(F.nn.max_pool2d(self.conv(x), 2), 1))


def test_pickled_user_module_needs_an_opt_in(tmp_path: Any) -> None:
    net = UserNet()
    x = xm.tensor(np.random.default_rng(0).standard_normal((2, 1, 6, 6)).astype(np.float32))
    path = tmp_path / "model.pkl"
    xm.save(net, path)
    with pytest.raises(UnsafePickleError, match=r"refusing to load 'tests\.test_serialization\.UserNet'"):
        xm.load(path)
    for opt_in in (
        {"allowed_classes": [UserNet]},
        {"allowed_classes": ["tests.test_serialization.UserNet"]},
        {"trusted": True},
    ):
        back = xm.load(path, **opt_in)
        assert type(back) is UserNet and type(back.conv) is M.Conv2d
        np.testing.assert_array_equal(back(x).numpy(), net(x).numpy())


def test_xmge_layers_alone_are_not_loadable_by_default() -> None:
    with pytest.raises(UnsafePickleError, match="compiler.module.layers.Linear"):
        xm.serialization.loads(pickle.dumps(M.Linear(2, 2)))


# ----------------------------------------------------------------------------------------------
# Atomic writes


class _Bomb:
    def __reduce__(self) -> Any:
        raise RuntimeError("interrupted mid-write")


def test_interrupted_save_leaves_the_earlier_file_intact(tmp_path: Any) -> None:
    path = tmp_path / "checkpoint.pkl"
    xm.save({"epoch": 1, "w": np.ones(4, np.float32)}, path)
    before = path.read_bytes()
    # a large array is written to the file before the bomb goes off
    with pytest.raises(RuntimeError, match="interrupted"):
        xm.save({"epoch": 2, "w": np.zeros(1 << 20, np.float32), "bomb": _Bomb()}, path)
    assert path.read_bytes() == before
    assert xm.load(path)["epoch"] == 1
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.pkl"]  # no temporary file left behind


@pytest.fixture
def umask() -> Any:
    """Sets the process umask for one test (returns a setter), restoring it afterwards."""
    original = os.umask(0o022)
    os.umask(original)
    yield os.umask
    os.umask(original)


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_new_file_mode_follows_the_umask(tmp_path: Any, umask: Any, mask: int, mode: int) -> None:
    umask(mask)
    path = tmp_path / "new.pkl"
    xm.save({"w": np.ones(2)}, path)
    assert stat.S_IMODE(os.stat(path).st_mode) == mode


@pytest.mark.parametrize("mode", [0o644, 0o600, 0o664, 0o755])
def test_replacing_a_file_keeps_its_mode(tmp_path: Any, umask: Any, mode: int) -> None:
    umask(0o077)
    path = tmp_path / "ckpt.pkl"
    path.write_bytes(b"old")
    os.chmod(path, mode)
    xm.save({"w": np.ones(2)}, path)
    assert stat.S_IMODE(os.stat(path).st_mode) == mode and xm.load(path)["w"].shape == (2,)


def _age(path: Any, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_stale_temporaries_of_killed_writers_are_removed_by_the_next_write(tmp_path: Any) -> None:
    # a writer killed mid-save (SIGKILL: no cleanup runs) leaves its temporary file behind
    script = (
        "import os, signal, numpy as np, compiler as xm\n"
        "class Kill:\n"
        "    def __reduce__(self):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        f"xm.save({{'w': np.zeros(1 << 16), 'k': Kill()}}, {str(tmp_path / 'ckpt.pkl')!r})\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    child = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
    orphans = [n for n in os.listdir(tmp_path) if n.startswith(".xmge-") and n.endswith(".tmp")]
    assert len(orphans) == 1 and not (tmp_path / "ckpt.pkl").exists()
    # files that are not ours, or not stale, stay: other names, a recent temporary, a link
    recent = tmp_path / ".xmge-0123456789abcdef.tmp"
    recent.write_bytes(b"a save in progress")
    lookalikes = [
        tmp_path / ".xmge-notes.txt",
        tmp_path / "xmge-0123456789abcdef.tmp",
        tmp_path / ".xmge-ab.tmp",
    ]
    for p in lookalikes:
        p.write_bytes(b"user data")
        _age(p, 86400)
    link = tmp_path / ".xmge-fedcba9876543210.tmp"
    os.symlink(tmp_path / ".xmge-notes.txt", link)
    os.utime(link, (0, 0), follow_symlinks=False)
    _age(tmp_path / orphans[0], serialization.STALE_TMP_SECONDS + 60)
    xm.save({"epoch": 1}, tmp_path / "other.pkl")  # any write into the directory
    assert not (tmp_path / orphans[0]).exists()
    assert recent.exists() and link.is_symlink() and all(p.exists() for p in lookalikes)


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to own a file as another user"
)
def test_stale_temporaries_of_other_users_stay(tmp_path: Any) -> None:
    theirs = tmp_path / ".xmge-0123456789abcdef.tmp"
    theirs.write_bytes(b"x")
    os.chown(theirs, 12345, -1)
    _age(theirs, 86400)
    xm.save({"epoch": 1}, tmp_path / "ckpt.pkl")
    assert theirs.exists()


def test_saving_into_a_missing_directory_names_the_users_path(tmp_path: Any) -> None:
    path = tmp_path / "no" / "such" / "dir" / "ckpt.pkl"
    with pytest.raises(FileNotFoundError) as info:
        xm.save({"epoch": 1}, path)
    assert (
        info.value.filename == str(path) and str(path) in str(info.value) and ".xmge-" not in str(info.value)
    )
    with pytest.raises(IsADirectoryError) as info_dir:
        xm.save({"epoch": 1}, tmp_path)
    assert str(tmp_path) in str(info_dir.value) and ".xmge-" not in str(info_dir.value)
    assert [n for n in os.listdir(tmp_path) if n.startswith(".xmge-")] == []


def test_atomic_write_is_the_projects_writer(tmp_path: Any) -> None:
    path = tmp_path / "notes.txt"
    serialization.atomic_write(path, lambda f: f.write("text mode too\n"), mode="w")
    assert path.read_text() == "text mode too\n"
    with pytest.raises(ValueError, match="half-written"):
        serialization.atomic_write(path, lambda f: (f.write("partial"), _raise("half-written")), mode="w")
    assert path.read_text() == "text mode too\n"


def _raise(message: str) -> None:
    raise ValueError(message)
