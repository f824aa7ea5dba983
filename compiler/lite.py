"""``compiler.lite.Network``: MegEngine Lite's ``LiteNetwork`` for ``.mge`` files, run by xmge.

    net = Network("model.mge")            # or Network(data_bytes) / Network(file_object)
    net.inputs    # [IOInfo(name, shape, dtype)]
    net.set_input("data", x); net.forward(); y = net.get_output("fc2.ADD")
    outs = net(data=x)                    # {output name: array}

Graphs run on the reference interpreter unless compiled: ``Network(path, target="x86-avx2-nchw88")``
or ``net.compile("x86-avx512", threads=2)`` runs ``forward()`` on native kernels
(:func:`compiler.compile.compile`). Files written with ``append=True`` hold several graphs; like
MegEngine, the first one is used unless ``graph=`` picks another.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, BytesAttr, ModuleOp, StringAttr, TensorType

from backends.mge.reader import ATTR_METADATA_VALID, ATTR_OPTIMIZE_OPTIONS, ATTR_USER_INFO, read_mge
from dialects.dtypes import dtype_name


@dataclass(frozen=True)
class IOInfo:
    name: str
    shape: tuple[int, ...]
    dtype: str  # MegEngine's dtype name, e.g. "float32", "qint8"


class NetworkError(ValueError):
    """Wrong use of a loaded network (unknown input name, wrong shape, missing input)."""


def _read_source(source: str | os.PathLike[str] | bytes | bytearray | memoryview | IO[bytes]) -> bytes:
    if isinstance(source, bytes | bytearray | memoryview):
        return bytes(source)
    if isinstance(source, str | os.PathLike):
        with open(source, "rb") as f:
            return f.read()
    if hasattr(source, "read"):
        return source.read()
    raise TypeError(f"Network: expected a path, bytes or a binary file object, got {type(source).__name__}")


def _names(fn: func.FuncOp, key: str) -> list[str]:
    a = fn.attributes.get(key)
    return [x.data for x in a.data] if isinstance(a, ArrayAttr) else []  # type: ignore[attr-defined]


def _info(name: str, t: Any) -> IOInfo:
    assert isinstance(t, TensorType)
    return IOInfo(name, tuple(t.get_shape()), dtype_name(t.element_type))


class Network:
    """A loaded ``.mge`` graph with named inputs and outputs."""

    def __init__(
        self,
        source: str | os.PathLike[str] | bytes | bytearray | memoryview | IO[bytes] | None = None,
        *,
        graph: int = 0,
        target: str | None = None,
        threads: int = 1,
    ) -> None:
        self.module: ModuleOp | None = None
        self.compiled: Any = None  # a compiler.compile.CompiledModel once compile() ran
        self._inputs: dict[str, np.ndarray] = {}
        self._outputs: dict[str, np.ndarray] = {}
        if source is not None:
            self.load(source, graph=graph)
            if target is not None:
                self.compile(target, threads=threads)

    # -- loading --------------------------------------------------------------------------------
    def load(
        self, source: str | os.PathLike[str] | bytes | bytearray | memoryview | IO[bytes], *, graph: int = 0
    ) -> Network:
        module = read_mge(_read_source(source))
        funcs = [op for op in module.ops if isinstance(op, func.FuncOp)]
        if not 0 <= graph < len(funcs):
            raise NetworkError(f"the file holds {len(funcs)} graph(s); graph {graph} does not exist")
        self.module = module
        self.graphs = funcs
        self.fn = funcs[graph]
        self.compiled = None
        self._inputs, self._outputs = {}, {}
        return self

    def compile(self, target: str | None = None, *, threads: int = 1) -> Network:
        """Compile the graph for ``target`` (default: this machine's best); ``forward()`` then runs
        the generated kernels instead of the reference interpreter."""
        from compiler.compile import compile

        fn = self._require()
        self.compiled = compile(ModuleOp([fn.clone()]), target, threads=threads)
        return self

    def _require(self) -> func.FuncOp:
        if self.module is None:
            raise NetworkError("no model loaded: call load() first")
        return self.fn

    # -- description ----------------------------------------------------------------------------
    @property
    def inputs(self) -> list[IOInfo]:
        fn = self._require()
        return [_info(n, a.type) for n, a in zip(_names(fn, "input_names"), fn.body.block.args, strict=True)]

    @property
    def outputs(self) -> list[IOInfo]:
        fn = self._require()
        return [
            _info(n, t)
            for n, t in zip(_names(fn, "output_names"), fn.function_type.outputs.data, strict=True)
        ]

    def get_all_input_name(self) -> list[str]:
        return [i.name for i in self.inputs]

    def get_all_output_name(self) -> list[str]:
        return [o.name for o in self.outputs]

    @property
    def metadata(self) -> dict[str, Any]:
        """What the file's metadata table says (user_info unpickled only on request, see below)."""
        fn = self._require()
        ui = fn.attributes.get(ATTR_USER_INFO)
        oo = fn.attributes.get(ATTR_OPTIMIZE_OPTIONS)
        valid = fn.attributes.get(ATTR_METADATA_VALID)
        options = int(oo.data) if isinstance(oo, StringAttr) else 0
        return {
            "is_valid": bool(valid.value.data) if valid is not None else False,  # type: ignore[attr-defined]
            "optimize_options": options,
            "optimized_for_inference": options != 0,
            "user_info_bytes": ui.data if isinstance(ui, BytesAttr) else b"",
        }

    def user_info(self) -> Any:
        """The ``user_info`` object stored by ``trace.dump``. Unpickling runs code from the file:
        only call this for files you trust."""
        import pickle

        raw = self.metadata["user_info_bytes"]
        return pickle.loads(raw) if raw else None

    # -- running --------------------------------------------------------------------------------
    def set_input(self, name: str, value: Any) -> None:
        infos = {i.name: i for i in self.inputs}
        if name not in infos:
            raise NetworkError(f"no input named {name!r}; inputs are {sorted(infos)}")
        arr = np.asarray(value)
        info = infos[name]
        if arr.shape != info.shape:
            if arr.size == int(np.prod(info.shape)) and arr.ndim == 0:
                arr = arr.reshape(info.shape)
            else:
                raise NetworkError(f"input {name!r} must have shape {info.shape}, got {arr.shape}")
        self._inputs[name] = arr

    def get_input(self, name: str) -> np.ndarray:
        if name not in self._inputs:
            raise NetworkError(f"input {name!r} has not been set")
        return self._inputs[name]

    def forward(self) -> None:
        from backends.reference.interpreter import run_function

        fn = self._require()
        names = _names(fn, "input_names")
        missing = [n for n in names if n not in self._inputs]
        if missing:
            raise NetworkError(f"inputs not set: {missing}")
        arrays = [self._inputs[n] for n in names]
        outs = self.compiled.run(arrays) if self.compiled is not None else run_function(fn, arrays)
        self._outputs = dict(zip(_names(fn, "output_names"), outs, strict=True))

    def wait(self) -> None:
        """Lite API compatibility: forward() is synchronous."""

    def get_output(self, name: str) -> np.ndarray:
        if name not in self._outputs:
            if name not in self.get_all_output_name():
                raise NetworkError(f"no output named {name!r}; outputs are {self.get_all_output_name()}")
            raise NetworkError("forward() has not run yet")
        return self._outputs[name]

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, np.ndarray]:
        names = self.get_all_input_name()
        if len(args) > len(names):
            raise NetworkError(f"{len(args)} positional inputs for {len(names)} inputs {names}")
        for name, value in zip(names, args, strict=False):
            self.set_input(name, value)
        for name, value in kwargs.items():
            self.set_input(name, value)
        self.forward()
        return dict(self._outputs)
