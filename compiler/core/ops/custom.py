"""MegEngine's ``megengine.core.ops.custom``: ``load`` / ``unload`` of a compiled custom-operator
library (``custom_op_tools.build_and_load`` builds one from C++ written against MegEngine's custom-op
API, ``CUSTOM_OP_REG``; loading it registers its operators as ``custom.<Name>`` op makers).

Loading a shared library runs its code (its static initialisers), so xmge does it only when the
caller opts in (``allow_code=True``, or ``XMGE_ALLOW_CUSTOM_OPS=1`` in the environment); otherwise
``load`` raises :class:`CustomOpError` before the file is opened. With the opt-in the library is
opened with every symbol resolved at once (``RTLD_NOW``), so one built against MegEngine's runtime
fails to load with its missing symbol named rather than failing later. xmge has no implementation
of MegEngine's C++ custom-op API, so no such library can register operators here: ``load`` says so
in one line and registers nothing. The opt-in is process-wide state only through the environment
variable; ``load`` itself keeps no state and is safe to call from several threads."""

from __future__ import annotations

import ctypes
import os

from dialects.errors import XmgeError

__all__ = ["load"]

ENV_OPT_IN = "XMGE_ALLOW_CUSTOM_OPS"

# MegEngine's custom-op API lives in namespace ``custom`` of libmegengine_shared: a library written
# against it references these mangled names (``custom::CustomOp``, ``custom::Param`` ...)
_MEGENGINE_API_MARKERS = (b"_ZN6custom", b"_ZNK6custom", b"CustomOpManager", b"custom_op_abi")


class CustomOpError(XmgeError, RuntimeError):
    """A custom-operator library xmge did not (or cannot) load."""


def _opted_in(allow_code: bool) -> bool:
    return allow_code or os.environ.get(ENV_OPT_IN, "") == "1"


def _uses_megengine_api(path: str) -> bool:
    """Whether the file references MegEngine's custom-op API (read as bytes, never run)."""
    with open(path, "rb") as f:
        data = f.read()
    return any(marker in data for marker in _MEGENGINE_API_MARKERS)


def load(lib_path: str, allow_code: bool = False) -> None:
    """Load the custom-operator library ``lib_path`` (MegEngine's ``custom.load``), which runs its
    code: only with ``allow_code=True`` or ``XMGE_ALLOW_CUSTOM_OPS=1``. A library is checked before
    it is opened; one written against MegEngine's C++ custom-op API is refused (xmge does not
    provide that API), as is one that registers no operator."""
    path = os.path.abspath(os.fspath(lib_path))
    if not _opted_in(allow_code):
        raise CustomOpError(
            f"custom.load({lib_path!r}): loading a compiled library runs its code; pass "
            f"allow_code=True (or set {ENV_OPT_IN}=1) to opt in"
        )
    if not os.path.isfile(path):
        raise CustomOpError(f"custom.load: no such library {path}")
    if _uses_megengine_api(path):
        raise CustomOpError(
            f"custom.load: {path} is written against MegEngine's C++ custom-op API (CUSTOM_OP_REG, "
            "libmegengine_shared), which xmge does not implement; run it with MegEngine, or express the "
            "operator with xmge's functional ops"
        )
    try:
        ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as exc:
        raise CustomOpError(f"custom.load: cannot load {path}: {exc}") from None
    raise CustomOpError(
        f"custom.load: {path} registers no custom operator xmge can run (only libraries built "
        "against MegEngine's custom-op API register operators, and xmge does not implement that API)"
    )
