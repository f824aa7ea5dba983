"""``save``/``load`` with MegEngine's signature; paths are written atomically."""

from __future__ import annotations

import os
import pickle
import tempfile
from typing import IO, Any

DEFAULT_PROTOCOL = pickle.DEFAULT_PROTOCOL


def atomic_write(path: str | os.PathLike[str], write: Any, mode: str = "wb") -> None:
    """Call ``write(file)`` on a temporary file beside ``path`` and rename it over ``path`` only
    when ``write`` succeeded, so a failure leaves any earlier file intact."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".xmge-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def save(obj: Any, f: str | os.PathLike[str] | IO[bytes], pickle_module: Any = pickle, pickle_protocol: int = DEFAULT_PROTOCOL) -> None:
    """Pickle ``obj`` to a path (atomically) or a binary file object."""
    if isinstance(f, str | os.PathLike):
        atomic_write(f, lambda fh: pickle_module.dump(obj, fh, protocol=pickle_protocol))
    else:
        pickle_module.dump(obj, f, protocol=pickle_protocol)


def load(f: str | os.PathLike[str] | IO[bytes], map_location: Any = None, pickle_module: Any = pickle) -> Any:
    """Unpickle an object saved by :func:`save` (or by MegEngine)."""
    if isinstance(f, str | os.PathLike):
        with open(f, "rb") as fh:
            return pickle_module.load(fh)
    return pickle_module.load(f)
