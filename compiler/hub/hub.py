"""``megengine.hub`` for xmge: entries from the zoo in this package or from a local ``hubconf.py``,
pretrained weights from a local cache directory. Nothing here touches the network.

* ``hub.load("megengine/models", "resnet18")`` builds an entry of the model zoo: the model files of
  ``compiler/hub`` (any ``owner/repo[:branch]`` spelled ``megengine/models``, in any case).
* ``hub.load("/path/to/repo", "entry", source="local")`` imports ``/path/to/repo/hubconf.py`` (code
  the caller chose to run) and calls its callable ``entry``.
* ``@hub.pretrained(url)`` on an entry function makes ``entry(pretrained=True)`` load the state dict
  named by the URL's file name from :func:`get_hub_dir` with the safe :func:`compiler.load`.
"""

from __future__ import annotations

import builtins
import functools
import importlib
import importlib.util
import inspect
import os
import pkgutil
import re
import sys
import types
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlparse

from dialects.errors import XmgeError

ENV_HUB_DIR = "XMGE_HUB_DIR"
ENV_XDG_CACHE_HOME = "XDG_CACHE_HOME"
HUBCONF = "hubconf.py"
HUBDEPENDENCY = "dependencies"
PROTOCOLS = ("HTTPS", "SSH")
SOURCES = ("github", "local")
ZOO_REPO = "megengine/models"
# the decorator marks the entry functions it wraps with the URL of their weights
PRETRAINED_URL_ATTR = "__xmge_pretrained_url__"
# modules of this package that are API, not model files
_NOT_MODEL_FILES = frozenset({"hub"})

_REPO_SPELLING = re.compile(r"^(?P<owner>[\w.-]+)/(?P<name>[\w.-]+)(?::(?P<branch>[\w./-]+))?$")


class HubError(XmgeError, RuntimeError):
    """A hub entry or its weights could not be found or loaded (MegEngine raises RuntimeError)."""


class PretrainedWeightsNotFound(HubError, FileNotFoundError):
    """``pretrained=True`` but the weights file is not in the local cache."""


def get_hub_dir() -> str:
    """Where pretrained weights are looked up: ``$XMGE_HUB_DIR``, else ``$XDG_CACHE_HOME/xmge/hub``,
    else ``~/.cache/xmge/hub``."""
    explicit = os.getenv(ENV_HUB_DIR)
    if explicit:
        return os.path.expanduser(explicit)
    cache = os.getenv(ENV_XDG_CACHE_HOME) or os.path.join("~", ".cache")
    return os.path.expanduser(os.path.join(cache, "xmge", "hub"))


# ----------------------------------------------------------------------------------------------
# weights


def _weights_path(url: str, model_dir: str | None) -> str:
    parts = urlparse(url)
    if parts.scheme in ("", "file"):
        return os.path.expanduser(unquote(parts.path) if parts.scheme == "file" else url)
    filename = os.path.basename(unquote(parts.path))
    if not filename:
        raise HubError(f"cannot tell the weights file name from the URL {url!r}")
    return os.path.join(model_dir if model_dir is not None else get_hub_dir(), filename)


def load_serialized_obj_from_url(url: str, model_dir: str | None = None) -> Any:
    """Load the object saved at ``url`` from the local cache: ``model_dir`` (default
    :func:`get_hub_dir`) joined with the URL's file name; a ``file://`` URL or plain path is read
    directly. Never downloads: a missing file is an error that says where to put it. The file is
    read with :func:`compiler.load` (no code from the pickle runs)."""
    return _load_weights(_weights_path(url, model_dir), url)


def _load_weights(path: str, origin: str) -> Any:
    from compiler.serialization import load

    if not os.path.isfile(path):
        raise PretrainedWeightsNotFound(
            f"pretrained weights not found: {path} does not exist. xmge never downloads; save "
            f"{origin} as {path} (the directory is ${ENV_HUB_DIR}, default ~/.cache/xmge/hub)"
        )
    return load(path)


class pretrained:  # noqa: N801 - MegEngine's name for the decorator
    """``@hub.pretrained(url)`` on an entry function ``def resnet18(**kwargs)``: calling it with
    ``pretrained=True`` fills the model with the state dict from ``url``'s file in the local cache
    (see :func:`load_serialized_obj_from_url`)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        url = self.url

        @functools.wraps(func)
        def pretrained_model_func(pretrained: bool = False, **kwargs: Any) -> Any:
            model = func(**kwargs)
            if pretrained:
                model.load_state_dict(load_serialized_obj_from_url(url))
            return model

        setattr(pretrained_model_func, PRETRAINED_URL_ATTR, url)
        return pretrained_model_func


# ----------------------------------------------------------------------------------------------
# repositories


def _is_zoo(repo_info: str) -> bool:
    m = _REPO_SPELLING.match(repo_info.strip())
    return m is not None and f"{m['owner']}/{m['name']}".lower() == ZOO_REPO


def _model_file_entries(module: types.ModuleType) -> dict[str, Any]:
    names = getattr(module, "__all__", None)
    if names is not None:
        return {n: getattr(module, n) for n in names if callable(getattr(module, n, None))}
    return {
        n: obj
        for n, obj in vars(module).items()
        if not n.startswith("_")
        and (inspect.isfunction(obj) or inspect.isclass(obj))
        and getattr(obj, "__module__", None) == module.__name__
    }


@functools.cache
def _zoo() -> types.ModuleType:
    """The zoo as a hubconf-like module: every entry of every model file of this package (its
    ``__all__``, else its public functions and classes). A name two files define (``BasicBlock``)
    is only reachable qualified by the file (``resnet.BasicBlock``)."""
    package = importlib.import_module("compiler.hub")
    by_name: dict[str, list[tuple[str, Any]]] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name.startswith("_") or info.name in _NOT_MODEL_FILES or info.ispkg:
            continue
        module = importlib.import_module(f"compiler.hub.{info.name}")
        for name, obj in _model_file_entries(module).items():
            by_name.setdefault(name, []).append((info.name, obj))
    zoo = types.ModuleType("compiler.hub.zoo", f"the model zoo behind {ZOO_REPO!r}")
    for name, found in by_name.items():
        if len(found) == 1:
            setattr(zoo, name, found[0][1])
            continue
        for file, obj in found:
            setattr(zoo, f"{file}.{name}", obj)
    return zoo


def _import_hubconf(repo_dir: str) -> types.ModuleType:
    path = os.path.join(os.path.abspath(os.path.expanduser(repo_dir)), HUBCONF)
    if not os.path.isfile(path):
        raise HubError(f"{repo_dir!r} has no {HUBCONF}: a local hub repository needs one at {path}")
    name = f"xmge_hubconf_{abs(hash(path)):x}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # hubconf.py imports its sibling modules, as with MegEngine
    sys.path.insert(0, os.path.dirname(path))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(os.path.dirname(path))
    return module


def import_module(
    repo_info: str,
    git_host: str = "github.com",
    use_cache: bool = True,
    commit: str | None = None,
    protocol: str = "HTTPS",
    *,
    source: str = "github",
) -> types.ModuleType:
    """The hub module of ``repo_info``: the zoo for ``megengine/models``, or the ``hubconf.py`` of a
    local directory with ``source="local"``. ``git_host``, ``use_cache`` and ``commit`` exist for
    MegEngine compatibility; as nothing is fetched they select nothing."""
    if source not in SOURCES:
        raise HubError(f"unknown source {source!r}; expected one of {', '.join(SOURCES)}")
    if protocol not in PROTOCOLS:
        raise HubError(f"Invalid protocol, the value should be one of {', '.join(PROTOCOLS)}.")
    if source == "local":
        return _import_hubconf(repo_info)
    if _is_zoo(repo_info):
        return _zoo()
    is_dir = os.path.isdir(os.path.expanduser(repo_info))
    hint = "; it is a local directory: use source='local'" if is_dir else ""
    raise HubError(
        f"xmge does not fetch repositories: {repo_info!r} is not the built-in zoo ({ZOO_REPO!r}). "
        f"Clone it and call hub.load(path, entry, source='local'){hint}"
    )


def _entry(hubmodule: types.ModuleType, entry: str) -> Any:
    fn = getattr(hubmodule, entry, None)
    if fn is not None and callable(fn):
        return fn
    qualified = sorted(n for n in vars(hubmodule) if n.endswith(f".{entry}"))
    if qualified:
        raise HubError(f"entry {entry!r} is ambiguous: use one of {', '.join(qualified)}")
    raise HubError(
        f"Cannot find callable {entry} in hubconf.py; entries are: {', '.join(_entries(hubmodule))}"
    )


def _entries(hubmodule: types.ModuleType) -> builtins.list[str]:
    return sorted(n for n, obj in vars(hubmodule).items() if not n.startswith("__") and callable(obj))


def _check_dependencies(module: types.ModuleType) -> None:
    missing = [m for m in getattr(module, HUBDEPENDENCY, None) or () if importlib.util.find_spec(m) is None]
    if missing:
        raise HubError(f"Missing dependencies: {', '.join(missing)}")


def list(  # noqa: A001 - MegEngine's hub.list
    repo_info: str,
    git_host: str = "github.com",
    use_cache: bool = True,
    commit: str | None = None,
    protocol: str = "HTTPS",
    *,
    source: str = "github",
) -> builtins.list[str]:
    """Every entry (callable) of the repository's hub module, sorted."""
    return _entries(import_module(repo_info, git_host, use_cache, commit, protocol, source=source))


def help(  # noqa: A001 - MegEngine's hub.help
    repo_info: str,
    entry: str,
    git_host: str = "github.com",
    use_cache: bool = True,
    commit: str | None = None,
    protocol: str = "HTTPS",
    *,
    source: str = "github",
) -> str | None:
    """The docstring of ``entry``."""
    hubmodule = import_module(repo_info, git_host, use_cache, commit, protocol, source=source)
    return _entry(hubmodule, entry).__doc__


def load(
    repo_info: str,
    entry: str,
    *args: Any,
    git_host: str = "github.com",
    use_cache: bool = True,
    commit: str | None = None,
    protocol: str = "HTTPS",
    source: str = "github",
    **kwargs: Any,
) -> Any:
    """Call ``entry`` of the repository's hub module with ``args`` and ``kwargs``.

    ``pretrained=True`` reaches entries decorated with :class:`pretrained` (and any local hubconf
    entry) unchanged. A zoo entry without the decorator is built without weights and then given
    the state dict ``<hub dir>/<entry>.pkl``."""
    hubmodule = import_module(repo_info, git_host, use_cache, commit, protocol, source=source)
    fn = _entry(hubmodule, entry)
    _check_dependencies(hubmodule)
    weights_here = (
        hubmodule is _zoo() and bool(kwargs.get("pretrained")) and not hasattr(fn, PRETRAINED_URL_ATTR)
    )
    if not weights_here:
        return fn(*args, **kwargs)
    kwargs.pop("pretrained")
    model = fn(*args, **kwargs)
    filename = f"{entry.rpartition('.')[2]}.pkl"
    model.load_state_dict(_load_weights(os.path.join(get_hub_dir(), filename), f"the state dict of {entry}"))
    return model


__all__ = [
    "ENV_HUB_DIR",
    "HubError",
    "PretrainedWeightsNotFound",
    "get_hub_dir",
    "help",
    "import_module",
    "list",
    "load",
    "load_serialized_obj_from_url",
    "pretrained",
]
