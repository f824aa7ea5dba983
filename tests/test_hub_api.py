"""``compiler.hub`` as ``megengine.hub``: the zoo behind ``megengine/models``, pretrained weights from
the local cache only (``XMGE_HUB_DIR``), the ``@hub.pretrained`` decorator, local ``hubconf.py``
directories, ``list``/``help``, and the errors that say what to do."""

from __future__ import annotations

import collections
import pickle
import socket
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import compiler as xm
from compiler import hub
from compiler.hub.convnet import ConvNet
from compiler.hub.resnet import ResNet, resnet18
from compiler.serialization import UnsafePickleError

ZOO = "megengine/models"
WEIGHTS_URL = "https://data.megengine.org.cn/models/weights/convnet_7f5a2c.pkl"


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to open a connection fails the test: the hub never downloads."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture
def hub_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "hub-cache"
    d.mkdir()
    monkeypatch.setenv(hub.ENV_HUB_DIR, str(d))
    return d


def _randomised(net: Any, seed: int) -> Any:
    rng = np.random.default_rng(seed)
    for name, t in net.named_tensors():
        if "running_var" in name:
            t._reset(rng.uniform(0.5, 2.0, t.shape).astype(np.float32))
        else:
            t._reset(rng.standard_normal(t.shape).astype(np.float32) * 0.1)
    net.eval()
    return net


def _same_outputs(a: Any, b: Any, x: np.ndarray) -> None:
    a.eval()
    b.eval()
    np.testing.assert_allclose(a(xm.tensor(x)).numpy(), b(xm.tensor(x)).numpy(), rtol=1e-6, atol=1e-6)


# -- the zoo ---------------------------------------------------------------------------------------
def test_list_discovers_the_model_files_entries() -> None:
    entries = hub.list(ZOO)
    for name in ("resnet18", "resnet50", "mobilenet_v2", "shufflenet_v2_x1_0", "ConvNet", "ResNet"):
        assert name in entries
    assert entries == sorted(entries)
    assert not any(n.startswith("_") or n == "pretrained" for n in entries)
    # any owner/repo[:branch] spelled megengine/models, in any case
    assert hub.list("MegEngine/Models:master") == entries
    assert xm.hub is hub


def test_load_builds_a_zoo_entry_with_its_arguments() -> None:
    net = hub.load(ZOO, "resnet18", num_classes=10)
    assert isinstance(net, ResNet)
    assert net.fc.weight.shape == (10, 512)
    assert list(net.state_dict()) == list(resnet18(num_classes=10).state_dict())
    assert isinstance(hub.load("MEGENGINE/MODELS", "ConvNet"), ConvNet)


def test_help_returns_the_entry_docstring() -> None:
    assert hub.help(ZOO, "ConvNet") == ConvNet.__doc__


def test_names_two_model_files_define_need_the_file_name() -> None:
    with pytest.raises(hub.HubError, match=r"'BasicBlock' is ambiguous: use one of .*resnet\.BasicBlock"):
        hub.load(ZOO, "BasicBlock")
    block = hub.load(ZOO, "resnet.BasicBlock", 4, 4)
    assert type(block).__module__ == "compiler.hub.resnet"


def test_unknown_entry_lists_the_entries() -> None:
    with pytest.raises(
        RuntimeError, match=r"Cannot find callable resnet7 in hubconf.py; entries are: .*resnet18"
    ):
        hub.load(ZOO, "resnet7")


def test_other_repositories_are_not_fetched(tmp_path: Path) -> None:
    with pytest.raises(hub.HubError, match=r"does not fetch repositories: 'someone/models'.*source='local'"):
        hub.load("someone/models", "resnet18")
    with pytest.raises(hub.HubError, match=r"it is a local directory: use source='local'"):
        hub.list(str(tmp_path))
    with pytest.raises(hub.HubError, match="Invalid protocol"):
        hub.list(ZOO, protocol="FTP")


# -- pretrained weights from the local cache ------------------------------------------------------
def test_pretrained_zoo_entry_loads_weights_from_the_cache_dir(hub_dir: Path) -> None:
    trained = _randomised(resnet18(num_classes=10), seed=3)
    xm.save(trained.state_dict(), str(hub_dir / "resnet18.pkl"))
    net = hub.load(ZOO, "resnet18", pretrained=True, num_classes=10)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    _same_outputs(net, trained, x)
    untrained = hub.load(ZOO, "resnet18", num_classes=10)
    assert not np.allclose(untrained.fc.weight.numpy(), trained.fc.weight.numpy())


def test_missing_pretrained_weights_say_where_to_put_them(hub_dir: Path) -> None:
    want = str(hub_dir / "resnet18.pkl")
    with pytest.raises(hub.PretrainedWeightsNotFound, match=f"{want} does not exist.*never downloads"):
        hub.load(ZOO, "resnet18", pretrained=True)
    with pytest.raises(FileNotFoundError):  # also a FileNotFoundError (and a RuntimeError)
        hub.load(ZOO, "resnet18", pretrained=True)


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(hub.ENV_HUB_DIR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub.get_hub_dir() == str(tmp_path / "xdg" / "xmge" / "hub")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hub.get_hub_dir() == str(tmp_path / ".cache" / "xmge" / "hub")


def test_weights_load_with_the_safe_loader(hub_dir: Path) -> None:
    # a pickle naming a class outside the safe set is refused before anything in it runs
    (hub_dir / "resnet18.pkl").write_bytes(pickle.dumps(collections.Counter(a=1)))
    with pytest.raises(UnsafePickleError):
        hub.load(ZOO, "resnet18", pretrained=True)


# -- @hub.pretrained --------------------------------------------------------------------------------
@hub.pretrained(WEIGHTS_URL)
def convnet(**kwargs: Any) -> ConvNet:
    """The seed ConvNet (MNIST)."""
    return ConvNet(**kwargs)


def test_pretrained_decorator_loads_the_url_file_from_the_cache(hub_dir: Path) -> None:
    assert convnet.__name__ == "convnet" and convnet.__doc__ == "The seed ConvNet (MNIST)."
    with pytest.raises(hub.PretrainedWeightsNotFound, match=str(hub_dir / "convnet_7f5a2c.pkl")):
        convnet(pretrained=True)
    trained = _randomised(ConvNet(), seed=5)
    xm.save(trained.state_dict(), str(hub_dir / "convnet_7f5a2c.pkl"))
    x = np.random.default_rng(1).standard_normal((2, 1, 28, 28)).astype(np.float32)
    _same_outputs(convnet(pretrained=True), trained, x)
    fresh = convnet()
    assert not np.allclose(fresh.fc2.weight.numpy(), trained.fc2.weight.numpy())


def test_load_serialized_obj_from_url_and_local_paths(hub_dir: Path, tmp_path: Path) -> None:
    state = {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}
    xm.save(state, str(hub_dir / "w.pkl"))
    got = hub.load_serialized_obj_from_url("https://example.com/some/dir/w.pkl?x=1")
    np.testing.assert_array_equal(got["w"], state["w"])
    other = tmp_path / "elsewhere"
    other.mkdir()
    xm.save(state, str(other / "w.pkl"))
    np.testing.assert_array_equal(
        hub.load_serialized_obj_from_url("https://e.com/w.pkl", str(other))["w"], state["w"]
    )
    np.testing.assert_array_equal(hub.load_serialized_obj_from_url(str(other / "w.pkl"))["w"], state["w"])
    np.testing.assert_array_equal(
        hub.load_serialized_obj_from_url((other / "w.pkl").as_uri())["w"], state["w"]
    )


# -- local hubconf directories ----------------------------------------------------------------------
def _local_repo(root: Path, dependencies: list[str]) -> Path:
    repo = root / "my_models"
    repo.mkdir()
    (repo / "tiny_model.py").write_text(
        textwrap.dedent(
            """
            import compiler.module as M

            class Tiny(M.Module):
                def __init__(self, width=4):
                    super().__init__()
                    self.fc = M.Linear(3, width)

                def forward(self, x):
                    return self.fc(x)
            """
        )
    )
    (repo / "hubconf.py").write_text(
        textwrap.dedent(
            f"""
            from compiler import hub
            from tiny_model import Tiny

            dependencies = {dependencies!r}

            @hub.pretrained("https://example.com/weights/tiny_v1.pkl")
            def tiny(**kwargs):
                '''A one-layer network.'''
                return Tiny(**kwargs)

            _private = 1
            """
        )
    )
    return repo


def test_local_hubconf_entries(tmp_path: Path, hub_dir: Path) -> None:
    repo = _local_repo(tmp_path, ["numpy"])
    assert hub.list(str(repo), source="local") == ["Tiny", "tiny"]
    assert hub.help(str(repo), "tiny", source="local") == "A one-layer network."
    net = hub.load(str(repo), "tiny", source="local", width=5)
    assert net.fc.weight.shape == (5, 3)
    assert str(repo) not in sys.path  # the directory is on sys.path only while importing
    trained = _randomised(hub.load(str(repo), "Tiny", source="local", width=5), seed=7)
    xm.save(trained.state_dict(), str(hub_dir / "tiny_v1.pkl"))
    x = np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)
    _same_outputs(hub.load(str(repo), "tiny", source="local", pretrained=True, width=5), trained, x)


def test_local_hubconf_errors(tmp_path: Path) -> None:
    repo = _local_repo(tmp_path, ["numpy", "no_such_module_xyz"])
    with pytest.raises(RuntimeError, match="Missing dependencies: no_such_module_xyz"):
        hub.load(str(repo), "tiny", source="local")
    with pytest.raises(hub.HubError, match=f"has no hubconf.py: .* at {tmp_path / 'hubconf.py'}"):
        hub.list(str(tmp_path), source="local")
    with pytest.raises(hub.HubError, match="unknown source 'gitlab'"):
        hub.list(str(repo), source="gitlab")
