"""``compiler.lite``: MegEngine Lite for ``.mge`` files, run by xmge.

Two faces over one engine:

* :class:`Network`, xmge's own small API::

      net = Network("model.mge")            # or Network(data_bytes) / Network(file_object)
      net.inputs    # [IOInfo(name, shape, dtype)] as stored in the file
      net.set_input("data", x); net.forward(); y = net.get_output("fc2.ADD")
      outs = net(data=x)                    # {output name: array}

* ``megenginelite``'s names (:class:`LiteNetwork`, :class:`LiteTensor`, :class:`LiteLayout`,
  :class:`LiteConfig`, :class:`LiteIO`, ...), so Lite scripts run with
  ``sys.modules["megenginelite"] = compiler.lite``; see the bottom half of this file.

Graphs run on the reference interpreter unless compiled: ``Network(path, target="x86-avx2-nchw88")``
or ``net.compile("x86-avx512", threads=2)`` runs ``forward()`` on native kernels
(:func:`compiler.driver.compile.compile`). Files written with ``append=True`` hold several graphs; like
MegEngine, the first one is used unless ``graph=`` picks another.

Input shapes may change between runs, as in MegEngine: the reader folds every shape computation
of the file (GetVarShape, Subtensor, Concat, Reshape) into static parameters, so a new input-shape
signature re-reads the file's graph with those input shapes (the folding then yields the new
shapes) and, with a target, compiles it again. Both are cached per signature.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import logging
import math
import os
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import IO, Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, BytesAttr, ModuleOp, StringAttr, TensorType
from xdsl.ir import Operation
from xdsl.utils.exceptions import VerifyException

from backends.mge.container import RawGraph, parse_file
from backends.mge.fbs import MgeFormatError
from backends.mge.reader import (
    ATTR_METADATA_VALID,
    ATTR_OPTIMIZE_OPTIONS,
    ATTR_USER_INFO,
    graph_to_func,
    read_mge,
)
from dialects.dtypes import dtype_name, element_type, numpy_dtype
from dialects.errors import XmgeError

logger = logging.getLogger("xmge.lite")

Source = str | os.PathLike[str] | bytes | bytearray | memoryview | IO[bytes]
Shapes = tuple[tuple[int, ...], ...]

# graphs kept per network for input-shape signatures other than the file's (each may hold a
# compiled library); beyond this the least recently used is dropped
MAX_SHAPE_VARIANTS = 8


@dataclass(frozen=True)
class IOInfo:
    name: str
    shape: tuple[int, ...]
    dtype: str  # MegEngine's dtype name, e.g. "float32", "qint8"


class NetworkError(XmgeError, ValueError, RuntimeError):
    """Wrong use of a loaded network (unknown input name, wrong shape, missing input). A
    RuntimeError as well, which is what MegEngine Lite raises for these."""


def _read_source(source: Source) -> bytes:
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


def _arg_shapes(fn: func.FuncOp) -> Shapes:
    return tuple(tuple(a.type.get_shape()) for a in fn.body.block.args)  # type: ignore[attr-defined]


def _with_input_shapes(graph: RawGraph, shapes: Shapes) -> RawGraph:
    """``graph`` whose Host2DeviceCopy operators (the inputs, in order) declare ``shapes``."""
    given = iter(shapes)
    oprs = []
    for op in graph.oprs:
        if op.kind == "Host2DeviceCopy":
            (t,) = op.tensors
            op = dataclasses.replace(op, tensors=[dataclasses.replace(t, shape=next(given))])
        oprs.append(op)
    return dataclasses.replace(graph, oprs=oprs)


@dataclass
class _Variant:
    """The graph for one input-shape signature and, once compiled, its native code."""

    fn: func.FuncOp
    compiled: Any = None  # compiler.driver.compile.CompiledModel


class Network:
    """A loaded ``.mge`` graph with named inputs and outputs."""

    def __init__(
        self,
        source: Source | None = None,
        *,
        graph: int = 0,
        target: str | None = None,
        threads: int = 1,
    ) -> None:
        self.module: ModuleOp | None = None
        self._target: Any = None  # the resolved compiler.driver.targets.Target once compile() ran
        self._threads = threads
        self._inputs: dict[str, np.ndarray] = {}
        self._outputs: dict[str, np.ndarray] = {}
        if source is not None:
            self.load(source, graph=graph)
            if target is not None:
                self.compile(target, threads=threads)

    # -- loading --------------------------------------------------------------------------------
    def load(self, source: Source, *, graph: int = 0) -> Network:
        data = _read_source(source)
        module = read_mge(data)
        funcs = [op for op in module.ops if isinstance(op, func.FuncOp)]
        if not 0 <= graph < len(funcs):
            raise NetworkError(f"the file holds {len(funcs)} graph(s); graph {graph} does not exist")
        self.module = module
        self.graphs = funcs
        self.fn = funcs[graph]
        self._data, self._graph_index = data, graph
        self._raw_graph: RawGraph | None = None
        self._variants: OrderedDict[Shapes, _Variant] = OrderedDict({_arg_shapes(self.fn): _Variant(self.fn)})
        self._target = None
        self._inputs, self._outputs = {}, {}
        return self

    def compile(
        self, target: str | None = None, *, threads: int = 1, shapes: Sequence[Shapes] = ()
    ) -> Network:
        """Compile the graph for ``target`` (default: this machine's best); ``forward()`` then runs
        the generated kernels instead of the reference interpreter. ``shapes`` (input-shape
        signatures known in advance, one shape per input each) are compiled into the same model as
        variants, so a forward on them runs at once; any other signature compiles again."""
        from compiler.driver.compile import compile

        fn = self._require()
        for v in self._variants.values():
            v.compiled = None
        own = _arg_shapes(fn)
        wanted = list(dict.fromkeys([own, *(tuple(tuple(int(d) for d in s) for s in sig) for sig in shapes)]))
        if len(wanted) == 1:
            compiled = compile(ModuleOp([fn.clone()]), target, threads=threads, tuning_file=_tuning_file())
        else:
            # the file itself, so that each variant's shapes are folded by the reader
            compiled = compile(
                self._data,
                target,
                threads=threads,
                graph=self._graph_index,
                shapes=wanted,
                tuning_file=_tuning_file(),
            )
        for sig in wanted:
            if sig not in self._variants:
                self._variants[sig] = _Variant(self._reinfer(sig))
            self._variants[sig].compiled = compiled
        self._target, self._threads = compiled.target, threads
        return self

    @property
    def compiled(self) -> Any:
        """The compiled model for the file's input shapes (None on the reference interpreter)."""
        return self._variants[_arg_shapes(self._require())].compiled if self.module is not None else None

    def shared(self) -> Network:
        """Another network on the same graph, weights and compiled code, with its own inputs and
        outputs (Lite's ``share_weights_with``)."""
        other = Network.__new__(Network)
        other.__dict__.update(self.__dict__)
        other._inputs, other._outputs = {}, {}
        return other

    def _require(self) -> func.FuncOp:
        if self.module is None:
            raise NetworkError("no model loaded: call load() first")
        return self.fn

    def _variant(self, shapes: Shapes) -> _Variant:
        """The graph (compiled when a target is set) for inputs of ``shapes``."""
        variant = self._variants.get(shapes)
        if variant is None:
            variant = _Variant(self._reinfer(shapes))
            self._variants[shapes] = variant
            if len(self._variants) > MAX_SHAPE_VARIANTS + 1:
                file_shapes = _arg_shapes(self.fn)
                oldest = next(k for k in self._variants if k != file_shapes and k != shapes)
                del self._variants[oldest]
        self._variants.move_to_end(shapes)
        if self._target is not None and variant.compiled is None:
            from compiler.driver.compile import compile

            logger.info("compiling %s for input shapes %s", self._target, shapes)
            variant.compiled = compile(ModuleOp([variant.fn.clone()]), self._target, threads=self._threads)
        return variant

    def _reinfer(self, shapes: Shapes) -> func.FuncOp:
        """Read the file's graph again with the inputs declared as ``shapes``: the reader's shape
        folding then computes every shape of the graph for them, as MegEngine does at run time."""
        names = self.get_all_input_name()
        described = ", ".join(f"{n}={list(s)}" for n, s in zip(names, shapes, strict=True))
        logger.info("re-inferring the graph for input shapes %s", described)
        if self._raw_graph is None:
            self._raw_graph = parse_file(self._data)[self._graph_index]
        try:
            fn = graph_to_func(_with_input_shapes(self._raw_graph, shapes), self.fn.sym_name.data)
            ModuleOp([fn]).verify()
        except (MgeFormatError, VerifyException) as exc:
            # the reader names the operator the new shapes do not fit; its traceback adds nothing
            raise NetworkError(f"the model cannot run with input shapes {described}: {exc}") from None
        return fn

    # -- description ----------------------------------------------------------------------------
    def input_types(self) -> dict[str, TensorType]:
        """Input name -> type, as the file declares them."""
        fn = self._require()
        return dict(zip(_names(fn, "input_names"), fn.function_type.inputs.data, strict=True))  # type: ignore[arg-type]

    def output_types(self) -> dict[str, TensorType]:
        """Output name -> type, for the file's input shapes."""
        fn = self._require()
        return dict(zip(_names(fn, "output_names"), fn.function_type.outputs.data, strict=True))  # type: ignore[arg-type]

    @property
    def inputs(self) -> list[IOInfo]:
        return [_info(n, t) for n, t in self.input_types().items()]

    @property
    def outputs(self) -> list[IOInfo]:
        return [_info(n, t) for n, t in self.output_types().items()]

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

    def user_info(self, *, trusted: bool = False) -> Any:
        """The ``user_info`` object stored by ``trace.dump``, rebuilt by xmge's safe unpickler (data
        only: anything else is an ``UnsafePickleError`` before it runs); ``trusted=True`` unpickles
        without restriction, for files you would run as code."""
        from compiler.serialization import loads

        raw = self.metadata["user_info_bytes"]
        return loads(raw, trusted=trusted) if raw else None

    # -- running --------------------------------------------------------------------------------
    def set_input(self, name: str, value: Any) -> None:
        """Set input ``name``. Its shape may differ from the file's (another batch or image size):
        the next ``forward()`` infers the graph's shapes again."""
        infos = {i.name: i for i in self.inputs}
        if name not in infos:
            raise NetworkError(f"no input named {name!r}; inputs are {sorted(infos)}")
        arr = np.asarray(value)
        info = infos[name]
        if arr.ndim == 0 and math.prod(info.shape) == 1:
            arr = arr.reshape(info.shape)
        self._inputs[name] = arr

    def get_input(self, name: str) -> np.ndarray:
        if name not in self._inputs:
            raise NetworkError(f"input {name!r} has not been set")
        return self._inputs[name]

    def forward(self) -> None:
        from semantics.interpreter import run_function

        fn = self._require()
        names = _names(fn, "input_names")
        missing = [n for n in names if n not in self._inputs]
        if missing:
            raise NetworkError(f"inputs not set: {missing}")
        arrays = [self._inputs[n] for n in names]
        variant = self._variant(tuple(a.shape for a in arrays))
        outs = (
            variant.compiled.run(arrays) if variant.compiled is not None else run_function(variant.fn, arrays)
        )
        self._outputs = dict(zip(_names(fn, "output_names"), outs, strict=True))

    def run_observed(self) -> list[tuple[Operation, list[np.ndarray], float]]:
        """Every operator of the current inputs' run on the reference interpreter, in order: (op, its
        result values, seconds). A compiled network fuses operators, so per-operator values come from
        the reference run of the same graph on the same inputs."""
        from semantics.interpreter import run_function

        fn = self._require()
        arrays = [self._inputs[n] for n in _names(fn, "input_names") if n in self._inputs]
        variant = self._variant(tuple(a.shape for a in arrays))
        seen: list[tuple[Operation, list[np.ndarray], float]] = []
        run_function(variant.fn, arrays, observe=lambda op, outs, sec: seen.append((op, outs, sec)))
        return seen

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


# ==============================================================================================
# megenginelite's names. Enum values are MegEngine Lite's numbering; tensors live in host memory
# (numpy arrays), so CPU is the one device.


class LiteBackend(IntEnum):
    LITE_DEFAULT = 0


class LiteDeviceType(IntEnum):
    LITE_CPU = 0
    LITE_CUDA = 1
    LITE_ATLAS = 3
    LITE_NPU = 4
    LITE_CAMBRICON = 5
    LITE_DEVICE_DEFAULT = 7


class LiteDataType(IntEnum):
    LITE_FLOAT = 0
    LITE_HALF = 1
    LITE_INT = 2
    LITE_INT16 = 3
    LITE_INT8 = 4
    LITE_UINT8 = 5
    LITE_UINT16 = 6


class LiteTensorPhase(IntEnum):
    LITE_IO = 0
    LITE_INPUT = 1
    LITE_OUTPUT = 2


class LiteIOType(IntEnum):
    LITE_IO_VALUE = 0
    LITE_IO_SHAPE = 1


class LiteAlgoSelectStrategy(IntEnum):
    LITE_ALGO_HEURISTIC = 1
    LITE_ALGO_PROFILE = 2
    LITE_ALGO_REPRODUCIBLE = 4
    LITE_ALGO_OPTIMIZED = 8


class LiteLogLevel(IntEnum):
    DEBUG = 0
    INFO = 1
    WARN = 2
    ERROR = 3


_LITE_TO_NUMPY: dict[LiteDataType, type[np.generic]] = {
    LiteDataType.LITE_FLOAT: np.float32,
    LiteDataType.LITE_HALF: np.float16,
    LiteDataType.LITE_INT: np.int32,
    LiteDataType.LITE_INT16: np.int16,
    LiteDataType.LITE_INT8: np.int8,
    LiteDataType.LITE_UINT8: np.uint8,
    LiteDataType.LITE_UINT16: np.uint16,
}
_NUMPY_TO_LITE = {np.dtype(t).str: k for k, t in _LITE_TO_NUMPY.items()}
_CPU_DEVICES = (LiteDeviceType.LITE_CPU, LiteDeviceType.LITE_DEVICE_DEFAULT)
_LOG_LEVELS = {
    LiteLogLevel.DEBUG: logging.DEBUG,
    LiteLogLevel.INFO: logging.INFO,
    LiteLogLevel.WARN: logging.WARNING,
    LiteLogLevel.ERROR: logging.ERROR,
}


def _lite_dtype(dtype: Any) -> LiteDataType:
    """LiteDataType of a LiteDataType, dtype name, numpy dtype or numpy scalar type."""
    if isinstance(dtype, LiteDataType):
        return dtype
    try:
        key = np.dtype(dtype).str  # quantized storage dtypes (qint8 -> int8) keep their base
    except TypeError:
        key = None
    if key not in _NUMPY_TO_LITE:
        names = ", ".join(np.dtype(t).name for t in _LITE_TO_NUMPY.values())
        raise NetworkError(f"MegEngine Lite has no data type for {dtype!r}; supported: {names}")
    return _NUMPY_TO_LITE[key]


def lite_dtype_2_numpy(dtype: LiteDataType) -> type[np.generic]:
    if not isinstance(dtype, LiteDataType):
        raise NetworkError(f"lite_dtype_2_numpy takes a LiteDataType, got {dtype!r}")
    return _LITE_TO_NUMPY[dtype]


def set_log_level(level: int) -> None:
    """Level of xmge's Lite log (``xmge.lite``: re-inference and compilation per input shape)."""
    logger.setLevel(_LOG_LEVELS[LiteLogLevel(level)])


def get_log_level() -> LiteLogLevel:
    return next((k for k, v in _LOG_LEVELS.items() if v == logger.getEffectiveLevel()), LiteLogLevel.WARN)


class LiteLayout:
    """Shape and data type of a :class:`LiteTensor`."""

    MAX_DIM = 7

    def __init__(self, shape: Iterable[int] | None = None, dtype: Any = None) -> None:
        self.shapes = list(shape) if shape else []
        self.data_type = _lite_dtype(dtype) if dtype is not None else LiteDataType.LITE_FLOAT

    @property
    def shapes(self) -> list[int]:
        return list(self._shapes)

    @shapes.setter
    def shapes(self, shape: Iterable[int]) -> None:
        dims = [int(d) for d in shape]
        if len(dims) > self.MAX_DIM:
            raise NetworkError(f"a Lite layout has at most {self.MAX_DIM} dimensions, got {dims}")
        if any(d < 0 for d in dims):
            raise NetworkError(f"negative dimension in the layout {dims}")
        self._shapes = dims

    @property
    def ndim(self) -> int:
        return len(self._shapes)

    @property
    def dtype(self) -> type[np.generic]:
        return _LITE_TO_NUMPY[self.data_type]

    @property
    def nbytes(self) -> int:
        return math.prod(self._shapes) * np.dtype(self.dtype).itemsize if self._shapes else 0

    def copy(self) -> LiteLayout:
        return LiteLayout(self._shapes, self.data_type)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LiteLayout) and (other.shapes, other.data_type) == (
            self.shapes,
            self.data_type,
        )

    def __hash__(self) -> int:
        return hash((tuple(self._shapes), self.data_type))

    def __repr__(self) -> str:
        return repr({"shapes": self.shapes, "ndim": self.ndim, "data_type": self.dtype})


def _check_device(device_type: int) -> LiteDeviceType:
    device = LiteDeviceType(device_type)
    if device not in _CPU_DEVICES:
        raise NetworkError(f"xmge runs Lite networks on the CPU; device {device.name} is not supported")
    return device


def _reinterpret(memory: np.ndarray, layout: LiteLayout) -> np.ndarray:
    """The bytes of a C-contiguous ``memory`` viewed as ``layout`` (no copy)."""
    return memory.reshape(-1).view(np.uint8)[: layout.nbytes].view(layout.dtype).reshape(layout.shapes)


def _ctypes_view(data: Any, layout: LiteLayout) -> np.ndarray:
    """A numpy view of ctypes memory (an array object or a pointer) laid out as ``layout``."""
    if isinstance(data, ctypes.Array):
        if ctypes.sizeof(data) < layout.nbytes:
            raise NetworkError(
                f"the ctypes array has {ctypes.sizeof(data)} bytes, the layout {layout} needs {layout.nbytes}"
            )
        return _reinterpret(np.ctypeslib.as_array(data), layout)
    address = data.value if isinstance(data, ctypes.c_void_p) else ctypes.cast(data, ctypes.c_void_p).value
    if not address:
        raise NetworkError("set_data: the ctypes pointer is null")
    buffer = (ctypes.c_ubyte * layout.nbytes).from_address(address)
    return np.ctypeslib.as_array(buffer).view(layout.dtype).reshape(layout.shapes)


class LiteTensor:
    """A block of host memory with a :class:`LiteLayout`. Memory is allocated on first use;
    ``set_data_by_share`` and ``share_memory_with`` make tensors use memory owned elsewhere, and
    writes (``set_data_by_copy``, a network's outputs) go into the current memory when it has the
    right size, as in MegEngine Lite."""

    def __init__(
        self,
        layout: LiteLayout | None = None,
        device_type: int = LiteDeviceType.LITE_CPU,
        device_id: int = 0,
        is_pinned_host: bool = False,
        shapes: Iterable[int] | None = None,
        dtype: Any = None,
        physic_construct: bool = True,
    ) -> None:
        self._device_type = _check_device(device_type)
        self._device_id = device_id
        self._is_pinned_host = bool(is_pinned_host)
        if layout is not None:
            self._layout = layout.copy()
        elif shapes is not None:
            self._layout = LiteLayout(shapes, dtype)
        else:
            self._layout = LiteLayout(dtype=dtype)
        self._array: np.ndarray | None = None  # the memory, viewed with the layout
        self._written = False  # whether anything put data into the memory (inputs need it)

    # -- memory -----------------------------------------------------------------------------
    def _memory(self) -> np.ndarray:
        layout = self._layout
        if self._array is None or self._array.nbytes != layout.nbytes:
            self._array = np.zeros(layout.shapes, layout.dtype)
        elif self._array.dtype != np.dtype(layout.dtype) or list(self._array.shape) != layout.shapes:
            self._array = _reinterpret(self._array, layout)
        return self._array

    def _adopt(self, array: np.ndarray) -> None:
        self._layout = LiteLayout(array.shape, array.dtype)
        self._array = array
        self._written = True

    def _write(self, data: np.ndarray) -> None:
        """Copy ``data`` in, taking its layout; into the present memory when it is the same size."""
        data = np.asarray(data)
        layout = LiteLayout(data.shape, data.dtype)
        if self._array is not None and self._array.flags.c_contiguous and self._array.nbytes == layout.nbytes:
            target = _reinterpret(self._array, layout)
            np.copyto(target, data.astype(layout.dtype, copy=False))
            self._adopt(target)
        else:
            self._adopt(np.array(data, dtype=layout.dtype, order="C"))

    @property
    def layout(self) -> LiteLayout:
        return self._layout

    @layout.setter
    def layout(self, layout: LiteLayout | Sequence[int]) -> None:
        if isinstance(layout, LiteLayout):
            self._layout = layout.copy()
        else:
            self._layout = LiteLayout(layout, self._layout.data_type)

    @property
    def nbytes(self) -> int:
        return self._layout.nbytes

    @property
    def device_type(self) -> LiteDeviceType:
        return self._device_type

    @property
    def device_id(self) -> int:
        return self._device_id

    @property
    def is_pinned_host(self) -> bool:
        return self._is_pinned_host

    @property
    def is_continue(self) -> bool:
        return self._array is None or bool(self._array.flags.c_contiguous)

    def fill_zero(self) -> None:
        self._memory()[...] = 0
        self._written = True

    def share_memory_with(self, src_tensor: LiteTensor) -> None:
        """Use ``src_tensor``'s memory (and layout) from now on."""
        if not isinstance(src_tensor, LiteTensor):
            raise NetworkError(f"share_memory_with takes a LiteTensor, got {type(src_tensor).__name__}")
        self._layout = src_tensor._layout.copy()
        self._array = src_tensor._memory()
        self._written = True

    def copy_from(self, src_tensor: LiteTensor) -> None:
        if not isinstance(src_tensor, LiteTensor):
            raise NetworkError(f"copy_from takes a LiteTensor, got {type(src_tensor).__name__}")
        self._write(src_tensor._memory())

    def reshape(self, shape: Iterable[int]) -> None:
        """Give the same data another shape (one dimension may be -1)."""
        dims = [int(d) for d in shape]
        total = math.prod(self._layout.shapes) if self._layout.shapes else 0
        if dims.count(-1) == 1:
            known = math.prod(d for d in dims if d != -1)
            if known == 0 or total % known:
                raise NetworkError(f"cannot reshape {self._layout.shapes} into {dims}")
            dims[dims.index(-1)] = total // known
        if math.prod(dims) != total:
            raise NetworkError(f"cannot reshape {self._layout.shapes} into {dims}: element counts differ")
        memory = self._memory() if self._array is not None else None
        self._layout = LiteLayout(dims, self._layout.data_type)
        if memory is not None:
            self._array = memory.reshape(dims)

    def slice(
        self, start: Sequence[int], end: Sequence[int], step: Sequence[int] | None = None
    ) -> LiteTensor:
        """A tensor viewing part of this one's memory (per dimension ``start:end:step``)."""
        if len(start) != len(end) or (step is not None and len(step) != len(start)):
            raise NetworkError("slice: start, end and step must have one value per sliced dimension")
        steps = list(step) if step is not None else [1] * len(start)
        view = self._memory()[tuple(slice(b, e, s) for b, e, s in zip(start, end, steps, strict=True))]
        out = LiteTensor(device_type=self._device_type, device_id=self._device_id)
        out._adopt(view)
        out._written = self._written
        return out

    def get_ctypes_memory(self) -> ctypes.c_void_p:
        """The address of the memory (allocated if needed); writes through it are the tensor's data."""
        if not self.is_continue:
            raise NetworkError("get_ctypes_memory: the tensor is a non-contiguous slice")
        self._written = True
        return ctypes.c_void_p(self._memory().ctypes.data)

    def set_data_by_share(self, data: Any, length: int = 0, layout: LiteLayout | None = None) -> None:
        """Use ``data``'s memory as this tensor's, without a copy: later changes to ``data`` are
        what the network reads. ``data`` is a C-contiguous numpy array or ctypes memory (then with
        ``layout``, or this tensor's layout)."""
        if isinstance(data, np.ndarray):
            if not data.flags.c_contiguous:
                raise NetworkError(
                    "set_data_by_share needs a C-contiguous array: call np.ascontiguousarray(data) first"
                )
            _lite_dtype(data.dtype)
            if layout is not None and layout.nbytes != data.nbytes:
                raise NetworkError(
                    f"set_data_by_share: {data.nbytes} bytes given, the layout {layout} needs {layout.nbytes}"
                )
            self._adopt(data if layout is None else _reinterpret(data, layout))
            return
        want = layout.copy() if layout is not None else self._layout
        if length and length != want.nbytes:
            raise NetworkError(
                f"set_data_by_share: {length} bytes given, the layout {want} needs {want.nbytes}"
            )
        self._adopt(_ctypes_view(data, want))

    def set_data_by_copy(self, data: Any, data_length: int = 0, layout: LiteLayout | None = None) -> None:
        """Copy ``data`` in: a numpy array (the tensor takes its shape and dtype), a list of numbers
        (written from the start of the memory, in the tensor's dtype) or ctypes memory."""
        if layout is not None:
            self.layout = layout
        if not self.is_continue:
            raise NetworkError("set_data_by_copy can only apply to a contiguous tensor")
        if isinstance(data, np.ndarray):
            _lite_dtype(data.dtype)
            self._write(data)
        elif isinstance(data, list | tuple):
            values = np.asarray(data, dtype=self._layout.dtype).reshape(-1)
            memory = self._memory().reshape(-1)
            if values.size > memory.size:
                raise NetworkError(
                    f"the length of input data ({values.size}) is larger than the tensor ({memory.size})"
                )
            memory[: values.size] = values
            self._written = True
        else:
            if data_length != self.nbytes and layout is None:
                raise NetworkError("set_data_by_copy from ctypes memory needs data_length or a layout")
            self._write(_ctypes_view(data, self._layout).copy())

    def get_data_by_share(self) -> np.ndarray:
        """The memory as a numpy array, without a copy (a network overwrites it on its next forward)."""
        return self._memory()

    def to_numpy(self) -> np.ndarray:
        """A copy of the data."""
        if self.nbytes == 0:
            return np.array([], dtype=self._layout.dtype)
        return np.array(self._memory(), copy=True)

    def __repr__(self) -> str:
        return repr(
            {
                "layout": self._layout,
                "device_type": self._device_type,
                "device_id": self._device_id,
                "is_pinned_host": self._is_pinned_host,
            }
        )


def LiteTensorConcat(  # noqa: N802 - megenginelite's name
    tensors: Sequence[LiteTensor],
    dim: int,
    device_type: int = LiteDeviceType.LITE_DEVICE_DEFAULT,
    device_id: int = -1,
) -> LiteTensor:
    """A new tensor holding ``tensors`` joined along ``dim``."""
    out = LiteTensor(device_type=device_type, device_id=max(device_id, 0))
    out._adopt(np.concatenate([t._memory() for t in tensors], axis=dim))
    return out


# ----------------------------------------------------------------------------------------------
# configuration


@dataclass(repr=False, eq=False)
class LiteOptions:
    """MegEngine Lite's inference options. xmge records them; the compilation target (``target=``
    of :class:`LiteNetwork`) decides layouts and kernels instead, so they do not change a run."""

    weight_preprocess: bool = False
    fuse_preprocess: bool = False
    fake_next_exec: bool = False
    var_sanity_check_first_run: bool = True
    const_shape: bool = False
    force_dynamic_alloc: bool = False
    force_output_dynamic_alloc: bool = False
    force_output_use_user_specified_memory: bool = False
    no_profiling_on_shape_change: bool = False
    jit_level: int = 0
    comp_node_seq_record_level: int = 0
    graph_opt_level: int = 2
    async_exec_level: int = 1
    enable_nchw44: bool = False
    enable_nchw44_dot: bool = False
    enable_nchw88: bool = False
    enable_nhwcd4: bool = False
    enable_nchw4: bool = False
    enable_nchw32: bool = False
    enable_nchw64: bool = False

    def __repr__(self) -> str:
        return repr(dict(vars(self)))


class LiteConfig:
    """How a network is loaded: device (CPU only), backend and options."""

    def __init__(self, device_type: int = LiteDeviceType.LITE_CPU, option: LiteOptions | None = None) -> None:
        self.device_type = device_type
        self.device_id = 0
        self.options = option if option is not None else LiteOptions()
        self.has_compression = False
        self.backend = LiteBackend.LITE_DEFAULT
        self.auto_optimize_inference = False
        self.discrete_input_name = ""
        self._bare_model_cryption_name = b""

    @property
    def bare_model_cryption_name(self) -> str:
        return self._bare_model_cryption_name.decode("utf-8")

    @bare_model_cryption_name.setter
    def bare_model_cryption_name(self, name: str | bytes) -> None:
        self._bare_model_cryption_name = name.encode("utf-8") if isinstance(name, str) else bytes(name)

    def __repr__(self) -> str:
        return repr(
            {
                "has_compression": bool(self.has_compression),
                "device_id": self.device_id,
                "device_type": LiteDeviceType(self.device_type),
                "backend": LiteBackend(self.backend),
                "bare_model_cryption_name": self.bare_model_cryption_name,
                "options": self.options,
                "auto_optimize_inference": self.auto_optimize_inference,
                "discrete_input_name": self.discrete_input_name,
            }
        )


class LiteExtraConfig:
    def __init__(self, disable_model_config: bool = False) -> None:
        self.disable_configure_by_model_info = disable_model_config


class LiteIO:
    """One input or output of a network as the user configures it: ``config_layout`` sets an
    input's layout until data is given, and is checked against an output's computed layout."""

    def __init__(
        self,
        name: str | bytes,
        is_host: bool = True,
        io_type: int = LiteIOType.LITE_IO_VALUE,
        layout: LiteLayout | None = None,
    ) -> None:
        self.name = name  # type: ignore[assignment]
        self.is_host = is_host
        self.io_type = LiteIOType(io_type)
        self.config_layout = layout if layout is not None else LiteLayout()

    @property
    def name(self) -> str:
        return self._name

    @name.setter
    def name(self, name: str | bytes) -> None:
        self._name = name.decode("utf-8") if isinstance(name, bytes) else str(name)

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return repr(
            {
                "name": self.name,
                "is_host": bool(self.is_host),
                "io_type": self.io_type,
                "config_layout": self.config_layout,
            }
        )


def _io_adder(side: str) -> Callable[..., None]:
    """``add_input`` / ``add_output``: append a LiteIO, or one built from the arguments."""

    def add(
        self: LiteNetworkIO,
        obj: LiteIO | str,
        is_host: bool = True,
        io_type: int = LiteIOType.LITE_IO_VALUE,
        layout: LiteLayout | None = None,
    ) -> None:
        io = obj if isinstance(obj, LiteIO) else LiteIO(obj, is_host, io_type, layout)
        getattr(self, f"{side}s").append(io)

    add.__name__ = f"add_{side}"
    add.__qualname__ = f"LiteNetworkIO.add_{side}"
    return add


class LiteNetworkIO:
    """The inputs and outputs configured for a :class:`LiteNetwork`."""

    def __init__(self, inputs: Iterable[Any] | None = None, outputs: Iterable[Any] | None = None) -> None:
        self.inputs: list[LiteIO] = [self._io(i) for i in inputs or ()]
        self.outputs: list[LiteIO] = [self._io(o) for o in outputs or ()]

    @staticmethod
    def _io(item: Any) -> LiteIO:
        if isinstance(item, LiteIO):
            return item
        if isinstance(item, list | tuple):
            return LiteIO(*item)
        raise NetworkError(f"LiteNetworkIO takes LiteIO items or [name, ...] lists, got {item!r}")

    add_input = _io_adder("input")
    add_output = _io_adder("output")

    def __repr__(self) -> str:
        return repr({"inputs": self.inputs, "outputs": self.outputs})


# ----------------------------------------------------------------------------------------------
# the network


def _check_config(config: LiteConfig) -> None:
    _check_device(config.device_type)
    if config.bare_model_cryption_name:
        raise NetworkError(
            f"encrypted models ({config.bare_model_cryption_name}) are not supported: load the plain .mge"
        )
    if config.has_compression:
        raise NetworkError("compressed models are not supported: load the plain .mge")


def _load_time_setting(name: str, attribute: str, minimum: int | None = None) -> property:
    """An integer setting that, as in megenginelite, can only change before the model loads."""

    def get(self: LiteNetwork) -> int:
        return getattr(self, attribute)

    def set_(self: LiteNetwork, value: int) -> None:
        self._before_load(name)
        if minimum is not None and value < minimum:
            raise NetworkError(f"{name} must be >= {minimum}, got {value}")
        setattr(self, attribute, int(value))

    return property(get, set_)


class PackageNetwork:
    """A saved compiled package (``compiler.load_compiled``) behind the part of :class:`Network`
    that :class:`LiteNetwork` drives: named inputs and outputs, ``forward`` on the package's library
    (the variant of the inputs' shapes; a shape it does not hold is a one-line error)."""

    def __init__(self, directory: str | os.PathLike[str], *, threads: int | None = None) -> None:
        from compiler.driver.package import load_compiled

        self.model = load_compiled(directory, threads=threads)
        first = self.model.variants[0]
        self._in = {n: TensorType(element_type(dt), shape) for n, shape, dt in first.inputs}
        self._out = {n: TensorType(element_type(dt), shape) for n, shape, dt in first.outputs}
        self._inputs: dict[str, np.ndarray] = {}
        self._outputs: dict[str, np.ndarray] = {}

    def input_types(self) -> dict[str, TensorType]:
        return dict(self._in)

    def output_types(self) -> dict[str, TensorType]:
        return dict(self._out)

    def set_input(self, name: str, value: Any) -> None:
        if name not in self._in:
            raise NetworkError(f"no input named {name!r}; inputs are {sorted(self._in)}")
        self._inputs[name] = np.asarray(value)

    def forward(self) -> None:
        missing = [n for n in self._in if n not in self._inputs]
        if missing:
            raise NetworkError(f"inputs not set: {missing}")
        outs = self.model.run([self._inputs[n] for n in self._in])
        self._outputs = dict(zip(self._out, outs, strict=True))

    def get_output(self, name: str) -> np.ndarray:
        if name not in self._outputs:
            raise NetworkError(f"no output {name!r} yet; outputs are {list(self._out)}")
        return self._outputs[name]

    def shared(self) -> PackageNetwork:
        other = PackageNetwork.__new__(PackageNetwork)
        other.__dict__.update(self.__dict__)
        other._inputs, other._outputs = {}, {}
        return other


class LiteNetwork:
    """MegEngine Lite's network on xmge: ``load``, fill the tensors of ``get_io_tensor``,
    ``forward``, ``wait``, read the output tensors. ``target=`` (e.g. ``"x86-avx2-nchw88"``) runs
    compiled kernels instead of the reference interpreter; input shapes may change between
    forwards either way. With a target, the input shapes known before ``load`` (the layouts the
    :class:`LiteIO` inputs configure, and ``shapes=``: one list of input shapes each) are compiled
    as variants of one model, so forwards on them never compile again. ``load`` of a folder that
    ``CompiledModel.save`` / ``xmge compile -o`` wrote runs that package's library, compiling
    nothing."""

    def __init__(
        self,
        config: LiteConfig | None = None,
        io: LiteNetworkIO | None = None,
        *,
        target: str | None = None,
        shapes: Sequence[Sequence[Sequence[int]]] = (),
    ) -> None:
        self.config = config if config is not None else LiteConfig()
        self.network_io = io if io is not None else LiteNetworkIO()
        _check_config(self.config)
        self.target = target
        self.shapes = [tuple(tuple(int(d) for d in s) for s in sig) for sig in shapes]
        self._threads = 1
        self._device_id = self.config.device_id
        self._stream_id = 0
        self._inplace = False
        self._network: Network | PackageNetwork | None = None
        self._inputs: dict[str, tuple[LiteIO, LiteTensor]] = {}
        self._outputs: dict[str, tuple[LiteIO, LiteTensor]] = {}
        self._start_callback: Callable[[dict[LiteIO, LiteTensor]], Any] | None = None
        self._finish_callback: Callable[[dict[LiteIO, LiteTensor]], Any] | None = None
        self._async_callback: Callable[[], Any] | None = None
        self.extra_config = LiteExtraConfig()
        self._profile_file: str | None = None
        self._txt_dump: str | None = None
        self._bin_dump: str | None = None

    def __repr__(self) -> str:
        return repr({"config": self.config, "IOs": self.network_io})

    # -- loading ----------------------------------------------------------------------------
    def load(self, file: Source) -> None:
        """Load a model from a path, a binary file object or bytes, or a saved package folder."""
        _check_config(self.config)
        if isinstance(file, str | os.PathLike) and os.path.isdir(file):
            package = PackageNetwork(file, threads=self._threads if self._threads != 1 else None)
            if self.target is not None and str(package.model.target) != str(self.target):
                raise NetworkError(
                    f"{os.fspath(file)} is compiled for {package.model.target}, not the target {self.target}"
                )
            self._attach(package)
            return
        network = Network(_read_source(file))
        if self.target is not None:
            network.compile(self.target, threads=self._threads, shapes=self._known_shapes(network))
        self._attach(network)

    def _known_shapes(self, network: Network) -> list[Shapes]:
        """Input-shape signatures known before the first forward: ``shapes=`` and the layouts the
        configured inputs give (the file's own shape for an input left unconfigured)."""
        configured = {
            io.name: tuple(io.config_layout.shapes) for io in self.network_io.inputs if io.config_layout.ndim
        }
        own = [tuple(t.get_shape()) for t in network.input_types().values()]
        names = list(network.input_types())
        known = list(self.shapes)
        if configured:
            known.append(tuple(configured.get(n, s) for n, s in zip(names, own, strict=True)))
        return known

    def _attach(self, network: Network | PackageNetwork) -> None:
        inputs = network.input_types()
        outputs = network.output_types()
        io_in = {io.name: io for io in self.network_io.inputs}
        io_out = {io.name: io for io in self.network_io.outputs}
        unknown = sorted(set(io_in) - set(inputs))
        if unknown:
            raise NetworkError(
                f"LiteNetworkIO names inputs {unknown} the model lacks; inputs are {sorted(inputs)}"
            )
        unknown = sorted(set(io_out) - set(outputs))
        if unknown:
            raise NetworkError(
                f"LiteNetworkIO names outputs {unknown}; xmge exposes the model's outputs only: "
                f"{sorted(outputs)}"
            )
        self._network = network
        self._inputs = {n: self._make_tensor(io_in.get(n) or LiteIO(n), t) for n, t in inputs.items()}
        # registered outputs, if any, are the only ones (as in MegEngine Lite)
        chosen = [n for n in outputs if n in io_out] if io_out else list(outputs)
        self._outputs = {n: self._make_tensor(io_out.get(n) or LiteIO(n), outputs[n]) for n in chosen}

    @staticmethod
    def _make_tensor(io: LiteIO, t: TensorType) -> tuple[LiteIO, LiteTensor]:
        return io, LiteTensor(io.config_layout if io.config_layout.ndim else _lite_layout(t))

    def _require(self) -> Network | PackageNetwork:
        if self._network is None:
            raise NetworkError("no model loaded: call load() first")
        return self._network

    def _before_load(self, what: str) -> None:
        if self._network is not None:
            raise NetworkError(f"{what} must be set before the network is loaded")

    # -- settings ---------------------------------------------------------------------------
    threads_number = _load_time_setting("threads_number", "_threads", minimum=1)
    device_id = _load_time_setting("device_id", "_device_id")
    stream_id = _load_time_setting("stream_id", "_stream_id")

    def enable_cpu_inplace_mode(self) -> None:
        """Run on the calling thread (xmge always does; the flag is kept for the query)."""
        self._before_load("cpu inplace mode")
        self._inplace = True

    def is_cpu_inplace_mode(self) -> bool:
        return self._inplace

    def extra_configure(self, extra_config: LiteExtraConfig) -> None:
        self.extra_config = extra_config

    def share_weights_with(self, src_network: LiteNetwork) -> None:
        """Use ``src_network``'s loaded model (graph, weights, compiled code) with tensors of our own."""
        if not isinstance(src_network, LiteNetwork):
            raise NetworkError(f"share_weights_with takes a LiteNetwork, got {type(src_network).__name__}")
        self._attach(src_network._require().shared())

    def set_start_callback(self, start_callback: Callable[[dict[LiteIO, LiteTensor]], Any]) -> None:
        """``start_callback({LiteIO: LiteTensor})`` with the inputs, before each forward."""
        self._start_callback = start_callback

    def set_finish_callback(self, finish_callback: Callable[[dict[LiteIO, LiteTensor]], Any]) -> None:
        """``finish_callback({LiteIO: LiteTensor})`` with the outputs, after each forward."""
        self._finish_callback = finish_callback

    def async_with_callback(self, async_callback: Callable[[], Any]) -> None:
        """``async_callback()`` once a forward has finished (forward itself runs synchronously)."""
        self._async_callback = async_callback

    # -- names and tensors ------------------------------------------------------------------
    # -- debugging and profiling (megenginelite's names) -------------------------------------------
    def enable_profile_performance(self, profile_file: str) -> None:
        """After each forward, write the run's per-operator times to ``profile_file`` (JSON): each
        generated kernel call's time with the model's operator name and the kernel symbol for a
        compiled network (in run order), the reference interpreter's otherwise."""
        self._profile_file = os.fspath(profile_file)

    def io_txt_dump(self, txt_file: str) -> None:
        """After each forward, write every operator's outputs (shape, dtype, statistics, first
        values) to ``txt_file``, in graph order, to find where a computation goes wrong."""
        self._txt_dump = os.fspath(txt_file)

    def io_bin_dump(self, bin_dir: str) -> None:
        """After each forward, write every operator's outputs as ``.npy`` files into ``bin_dir``
        (``<index>_<operator name>_<output>.npy``, in graph order)."""
        self._bin_dump = os.fspath(bin_dir)

    def get_static_memory_alloc_info(self, log_dir: str = "logs/test") -> None:
        """Write the compiled network's static memory plan (arena, workspace, weights, and each
        buffer's bytes and live range) to ``log_dir/static_memory_alloc_info.json``."""
        network = self._require()
        compiled = getattr(network, "compiled", None)
        if not isinstance(network, Network) or compiled is None:
            raise NetworkError(
                "get_static_memory_alloc_info needs a compiled .mge network (LiteNetwork(target=...)): "
                "the reference interpreter and a loaded package have no plan to show"
            )
        from dialects.kernel import live_ranges
        from passes.lowering.plan import shape_bytes

        fn = next(f for f in compiled.final_module().ops if isinstance(f, func.FuncOp))
        plan = compiled.plan()
        ops = list(fn.body.block.ops)
        buffers = [
            {
                "value": v.name_hint or f"%{i}",
                "defined_by": ops[start].name if start >= 0 else "input",
                "bytes": shape_bytes(v),
                "live": [start, end],
            }
            for i, (v, (start, end)) in enumerate(live_ranges(fn).items())
        ]
        info = {
            "arena_bytes": plan.arena.data if plan is not None else 0,
            "workspace_bytes": plan.workspace.data if plan is not None else 0,
            "weights_bytes": plan.weights.data if plan is not None else 0,
            "threads": plan.threads.data if plan is not None else 1,
            "buffers": buffers,
        }
        os.makedirs(log_dir, exist_ok=True)
        _write_atomic(os.path.join(log_dir, "static_memory_alloc_info.json"), json.dumps(info, indent=1))

    def _debug_outputs(self, network: Network | PackageNetwork) -> None:
        if not isinstance(network, Network):
            raise NetworkError(
                "per-operator dumps and profiles need a .mge network: a loaded package holds no graph"
            )
        seen = network.run_observed()
        rows = [(k, op, outs, sec) for k, (op, outs, sec) in enumerate(seen)]
        if self._txt_dump:
            lines = []
            for k, op, outs, _ in rows:
                for j, v in enumerate(outs):
                    flat = np.asarray(v).ravel()
                    stats = (
                        f"min {flat.min():.6g} max {flat.max():.6g} mean {flat.astype(np.float64).mean():.6g}"
                        if flat.size and flat.dtype.kind in "biuf"
                        else "empty"
                    )
                    head = (
                        " ".join(f"{x:.6g}" for x in flat[:8].astype(np.float64))
                        if flat.dtype.kind in "biuf"
                        else ""
                    )
                    lines.append(
                        f"{k} {op.name} {_op_label(op)} output {j}: shape {list(v.shape)} {v.dtype.name} "
                        f"{stats} [{head}{' ...' if flat.size > 8 else ''}]"
                    )
            _write_atomic(self._txt_dump, "\n".join(lines) + "\n")
        if self._bin_dump:
            os.makedirs(self._bin_dump, exist_ok=True)
            for k, op, outs, _ in rows:
                for j, v in enumerate(outs):
                    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in _op_label(op))[:80]
                    _save_npy_atomic(os.path.join(self._bin_dump, f"{k:04d}_{name}_{j}.npy"), v)
        if self._profile_file:
            compiled = network.compiled
            if compiled is not None and not compiled.emulated:
                arrays = [network._inputs[n] for n in network.get_all_input_name()]
                calls = compiled.backend.profile(compiled, arrays, 1)
                entries = [{"name": c.layer, "kernel": c.kernel, "time_ms": c.ms} for c in calls]
                engine = f"generated kernels for {compiled.target}"
            else:
                entries = [
                    {"id": k, "type": op.name, "name": _op_label(op), "time_ms": sec * 1e3}
                    for k, op, _, sec in rows
                ]
                engine = "reference interpreter"
            doc = {"engine": engine, "total_ms": sum(e["time_ms"] for e in entries), "oprs": entries}
            _write_atomic(self._profile_file, json.dumps(doc, indent=1))

    def get_all_input_name(self) -> list[str]:
        self._require()
        return list(self._inputs)

    def get_all_output_name(self) -> list[str]:
        self._require()
        return list(self._outputs)

    def get_input_name(self, index: int) -> str:
        return _nth_name("input", self.get_all_input_name(), index)

    def get_output_name(self, index: int) -> str:
        return _nth_name("output", self.get_all_output_name(), index)

    def get_io_tensor(self, name: str | bytes, phase: int = LiteTensorPhase.LITE_IO) -> LiteTensor:
        """The tensor of input or output ``name`` (``phase`` picks one when both share a name)."""
        self._require()
        key = name.decode("utf-8") if isinstance(name, bytes) else name
        phase = LiteTensorPhase(phase)
        if phase != LiteTensorPhase.LITE_OUTPUT and key in self._inputs:
            return self._inputs[key][1]
        if phase != LiteTensorPhase.LITE_INPUT and key in self._outputs:
            return self._outputs[key][1]
        kinds = {LiteTensorPhase.LITE_IO: "input or output", LiteTensorPhase.LITE_INPUT: "input"}
        raise NetworkError(
            f"no {kinds.get(phase, 'output')} tensor named {key!r}; inputs are {list(self._inputs)}, "
            f"outputs are {list(self._outputs)}"
        )

    # -- running ----------------------------------------------------------------------------
    def forward(self) -> None:
        """Run the model on the input tensors' data (their current shapes) and fill the outputs."""
        network = self._require()
        declared = network.input_types()
        for name, (_, tensor) in self._inputs.items():
            if not tensor._written:
                raise NetworkError(
                    f"input {name!r} has no data: call set_data_by_copy or set_data_by_share on "
                    f"get_io_tensor({name!r}) before forward()"
                )
            data = tensor._memory()
            want = _lite_layout(declared[name]).dtype
            if data.dtype != want:
                raise NetworkError(
                    f"input {name!r} is {np.dtype(want).name} in the model, got {data.dtype.name} data"
                )
            network.set_input(name, data)
        if self._start_callback is not None:
            self._start_callback({io: t for io, t in self._inputs.values()})
        network.forward()
        for name, (io, tensor) in self._outputs.items():
            value = network.get_output(name)
            configured = io.config_layout
            if configured.ndim and configured.shapes != list(value.shape):
                raise NetworkError(
                    f"output {name!r} has shape {list(value.shape)}, not the configured {configured.shapes}"
                )
            tensor._write(value)
        if self._profile_file or self._txt_dump or self._bin_dump:
            self._debug_outputs(network)
        if self._finish_callback is not None:
            self._finish_callback({io: t for io, t in self._outputs.values()})
        if self._async_callback is not None:
            self._async_callback()

    def wait(self) -> None:
        """Wait for the forward to finish: it already has, forward() is synchronous."""


def _tuning_file() -> str | None:
    """The tuning file ``LiteGlobal.set_persistent_cache`` named, if it exists yet."""
    path = LiteGlobal.persistent_cache
    return path if path is not None and os.path.exists(path) else None


def _op_label(op: Operation) -> str:
    """An operator's name in the model (its ``name`` attribute) or its kind."""
    name = op.attributes.get("name")
    return name.data if isinstance(name, StringAttr) else op.name


def _write_atomic(path: str, text: str) -> None:
    from compiler.serialization import atomic_write

    atomic_write(path, lambda f: f.write(text), "w")


def _save_npy_atomic(path: str, value: np.ndarray) -> None:
    from compiler.serialization import atomic_write

    atomic_write(path, lambda f: np.save(f, value))


def _nth_name(kind: str, names: list[str], index: int) -> str:
    if not 0 <= index < len(names):
        raise NetworkError(f"{kind} index {index} out of range: the model has {len(names)} {kind}(s) {names}")
    return names[index]


def _lite_layout(t: Any) -> LiteLayout:
    """The Lite layout of a value of tensor type ``t`` (a quantized type: its storage type)."""
    assert isinstance(t, TensorType)
    return LiteLayout(t.get_shape(), np.dtype(numpy_dtype(t.element_type)).str)


class LiteGlobal:
    """Process-wide Lite settings (megenginelite's ``LiteGlobal``). The algo-policy cache MegEngine's
    fast-run keeps is xmge's tuning file (:mod:`compiler.tuning`): ``set_persistent_cache`` names it
    and every LiteNetwork compiled afterwards takes its kernel choices from it."""

    persistent_cache: str | None = None

    @staticmethod
    def get_device_count(device_type: int) -> int:
        """Devices of ``device_type`` here: the CPUs for LITE_CPU, none of the accelerators (a
        compiled CUDA model runs through its own runner, not through Lite)."""
        from compiler.device import get_device_count

        kind = LiteDeviceType(device_type)
        return get_device_count("cpu") if kind == LiteDeviceType.LITE_CPU else 0

    @staticmethod
    def try_coalesce_all_free_memory() -> None:
        """Nothing to coalesce: xmge returns a network's memory when the network goes."""

    @staticmethod
    def set_persistent_cache(path: str, always_sync: bool = False) -> None:
        """Use the tuning file ``path`` for the kernel choices of networks compiled from now on."""
        LiteGlobal.persistent_cache = os.fspath(path)

    @staticmethod
    def dump_persistent_cache(path: str) -> None:
        """Copy the tuning file set by :meth:`set_persistent_cache` to ``path`` (atomically)."""
        source = LiteGlobal.persistent_cache
        if source is None or not os.path.exists(source):
            raise NetworkError(
                "no persistent cache to dump: call LiteGlobal.set_persistent_cache(path) first"
            )
        with open(source) as f:
            _write_atomic(os.fspath(path), f.read())

    @staticmethod
    def _unsupported(what: str) -> None:
        raise NetworkError(f"LiteGlobal.{what} is not supported by xmge: {_UNSUPPORTED[what]}")

    @staticmethod
    def register_decryption_and_key(decryption_name: str, decryption_func: Any, key: Any) -> None:
        LiteGlobal._unsupported("register_decryption_and_key")

    @staticmethod
    def update_decryption_key(decryption_name: str, key: Any) -> None:
        LiteGlobal._unsupported("update_decryption_key")

    @staticmethod
    def set_loader_lib_path(path: str) -> None:
        LiteGlobal._unsupported("set_loader_lib_path")

    @staticmethod
    def set_tensorrt_cache(path: str) -> None:
        LiteGlobal._unsupported("set_tensorrt_cache")

    @staticmethod
    def dump_tensorrt_cache() -> None:
        LiteGlobal._unsupported("dump_tensorrt_cache")


_UNSUPPORTED = {
    "register_decryption_and_key": "models are loaded unencrypted (decrypt the .mge before loading)",
    "update_decryption_key": "models are loaded unencrypted (decrypt the .mge before loading)",
    "set_loader_lib_path": "there are no custom operator libraries to load",
    "set_tensorrt_cache": "there is no TensorRT backend (CUDA is a compile target)",
    "dump_tensorrt_cache": "there is no TensorRT backend (CUDA is a compile target)",
}


def get_model_io_info(model_path: Source, config: LiteConfig | None = None) -> LiteNetworkIO:
    """The inputs and outputs of a model file, with the layouts it declares."""
    _check_config(config if config is not None else LiteConfig())
    network = Network(model_path)
    return LiteNetworkIO(
        [LiteIO(n, layout=_lite_layout(t)) for n, t in network.input_types().items()],
        [LiteIO(n, layout=_lite_layout(t)) for n, t in network.output_types().items()],
    )


__all__ = [
    "IOInfo",
    "LiteAlgoSelectStrategy",
    "LiteBackend",
    "LiteConfig",
    "LiteDataType",
    "LiteDeviceType",
    "LiteExtraConfig",
    "LiteGlobal",
    "LiteIO",
    "LiteIOType",
    "LiteLayout",
    "LiteLogLevel",
    "LiteNetwork",
    "LiteNetworkIO",
    "LiteOptions",
    "LiteTensor",
    "LiteTensorConcat",
    "LiteTensorPhase",
    "Network",
    "NetworkError",
    "PackageNetwork",
    "get_log_level",
    "get_model_io_info",
    "lite_dtype_2_numpy",
    "set_log_level",
]
