"""xmge: MegEngine's Python API on an MLIR-style compiler built with xDSL.

``import compiler as xm`` gives the names MegEngine users know: ``Tensor``, ``tensor``,
``functional``, ``module``, ``jit``, ``autodiff`` (``GradManager``), ``optimizer``, ``save``/``load``,
``compile`` and ``load_compiled`` (a saved compiled package).
"""

from compiler import autodiff, config, distributed, functional, hub, jit, module, optimizer, random
from compiler.core import OpError, XmgeError
from compiler.device import *  # noqa: F403 - MegEngine's top level has every name of megengine.device
from compiler.device import __all__ as _device_names
from compiler.driver.compile import compile  # noqa: A004 - the issue's xm.compile(...)
from compiler.driver.package import PackageError, load_compiled
from compiler.logger import enable_debug_log, get_logger, set_log_file, set_log_level
from compiler.serialization import load, save
from compiler.tensor import Parameter, Tensor, tensor

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # compiler.onnx (the documented compiler.onnx.load) without importing the ONNX reader for
    # every ``import compiler``
    if name == "onnx":
        import importlib

        return importlib.import_module("compiler.onnx")
    raise AttributeError(f"module 'compiler' has no attribute {name!r}")


__all__ = [
    *_device_names,
    "OpError",
    "PackageError",
    "Parameter",
    "Tensor",
    "XmgeError",
    "autodiff",
    "compile",
    "config",
    "distributed",
    "enable_debug_log",
    "get_logger",
    "functional",
    "hub",
    "jit",
    "load",
    "load_compiled",
    "module",
    "onnx",  # noqa: F405 - a lazy attribute (__getattr__ above)
    "optimizer",
    "random",
    "save",
    "set_log_file",
    "set_log_level",
    "tensor",
]



import sys as _sys  # noqa: E402
import types as _types  # noqa: E402


class _PackageModule(_types.ModuleType):
    """``compiler`` itself: keeps ``compiler.tensor`` the Tensor class, as ``megengine.tensor`` is.

    Python's import system sets a package attribute to each submodule it loads; MegEngine's package
    rebinds ``tensor`` to the class afterwards, so ``import megengine.tensor as T`` and
    ``mge.tensor(...)`` reach the class. A later first import of the submodule under another name
    (an alias package serving ``compiler.tensor``) would put the module back; this refuses that."""

    def __setattr__(self, name: str, value: object) -> None:
        if name == "tensor" and isinstance(value, _types.ModuleType):
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _PackageModule
