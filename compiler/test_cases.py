"""MegEngine's ``dump(input_data=...)``: load_and_run test cases after the graph.

The file is ``b"mgbtest0"``, the number of cases (uint32), the model graph, then one graph per
case whose outputs are SharedDeviceTensor values, one per model input in input-name order (what
MegEngine 1.13's ``trace.dump`` writes). Only ``no_assert=True`` is written: the default also
inserts AssertEqual checker operators fed by ``NAME:expect`` inputs, which xmge does not emit.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import TensorType

from backends.mge.dtypes import from_element
from backends.mge.records import LoweredGraph, Metadata, WOpr, WTensor
from backends.mge.serialize import Naming, serialize_v1, serialize_v2
from dialects.dtypes import numpy_dtype
from dialects.errors import XmgeError

MAGIC = b"mgbtest0"
_RAND = re.compile(r"^#rand\(([-0-9.]*)\s*,\s*([-0-9.]*)\s*(,[^\)]+)?\)$")


class InputDataError(XmgeError, ValueError):
    """A bad or unsupported ``input_data`` item (one line, naming the item)."""


def _rand(spec: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    m = _RAND.match(spec)
    if not m:
        raise InputDataError(f"input_data: bad spec {spec!r} (expected #rand(min,max[,shape...]))")
    lo, hi = float(m.group(1)), float(m.group(2))
    data_shape = shape
    if m.group(3):
        dims = [d.strip() for d in m.group(3)[1:].split(",")]
        if dims[-1] == "...":
            dims = dims[:-1] + [str(d) for d in shape[len(dims) - 1 :]]
        try:
            data_shape = tuple(int(d) for d in dims)
        except ValueError as e:
            raise InputDataError(f"input_data: bad spec {spec!r}: {e}") from None
    return np.random.uniform(lo, hi, data_shape).astype(dtype)


def _read(
    path: str, shape: tuple[int, ...], dtype: np.dtype, repeat: int, transform: str | None
) -> np.ndarray:
    if path.startswith("#"):
        if transform:
            raise InputDataError(f"input_data: input_transform does not apply to random data {path!r}")
        return _rand(path, shape, dtype)
    try:
        data = np.load(path, allow_pickle=False)  # never runs code from the file
    except (OSError, ValueError) as e:
        raise InputDataError(
            f"input_data: cannot read {path!r} as a .npy array ({e}); image files (OpenCV) are not supported"
        ) from None
    data = np.repeat(data, repeat, axis=0)
    if len(shape) and data.ndim != len(shape):
        raise InputDataError(f"input_data: input/data shapes mismatch for {path!r}: {shape} vs {data.shape}")
    if transform:
        data = eval(transform, {"data": data, "np": np})  # noqa: S307 - the caller's own expression
    return np.asarray(data)


def make_cases(
    fn: func.FuncOp,
    names: Sequence[str],
    input_data: str | Sequence[str],
    *,
    repeat: int = 1,
    resize_input: bool = False,
    input_transform: str | None = None,
) -> list[dict[str, np.ndarray]]:
    """One ``{input name: value}`` per ``input_data`` item, read as MegEngine reads them."""
    if resize_input:
        raise InputDataError("input_data: resize_input (OpenCV image resizing) is not supported by xmge")
    specs: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    for name, t in zip(names, fn.function_type.inputs.data, strict=True):
        assert isinstance(t, TensorType)
        specs[name] = (tuple(t.get_shape()), numpy_dtype(t.element_type))
    items: list[str] = []
    for item in [input_data] if isinstance(input_data, str) else list(input_data):
        if item.startswith("@"):
            with open(item[1:]) as f:
                items.extend(line.rstrip() for line in f if line.rstrip())
        else:
            items.append(item)
    cases = []
    for item in items:
        paths = item.split(";")
        if len(paths) != len(specs) and len(paths) == 1 and paths[0].startswith("#"):
            paths = [f"{n}:{paths[0]}" for n in specs]
        if len(paths) != len(specs):
            raise InputDataError(f"input_data: required inputs {sorted(specs)}; data paths: {paths}")
        if len(paths) == 1 and ":" not in paths[0]:
            paths[0] = f"{next(iter(specs))}:{paths[0]}"
        case = {}
        for p in paths:
            var, _, path = p.partition(":")
            if var not in specs:
                raise InputDataError(f"input_data: no input named {var!r} (inputs: {sorted(specs)})")
            shape, dtype = specs[var]
            case[var] = _read(path, shape, dtype, repeat, input_transform).astype(dtype, copy=False)
        cases.append(case)
    if not cases:
        raise InputDataError("input_data: testcases can not be empty")
    return cases


def case_graph(case: dict[str, np.ndarray], dump_format: str) -> bytes:
    """One test case as a graph of SharedDeviceTensor outputs, in input-name order."""
    from dialects.dtypes import element_type

    oprs = []
    for i, name in enumerate(sorted(case)):
        a = np.ascontiguousarray(case[name])
        t = WTensor(None, tuple(a.shape) or (1,), from_element(element_type(a.dtype)), a.tobytes())
        oprs.append(WOpr("SharedDeviceTensor", [], tensors=[t], outputs=[i], priority=i + 1))
    g = LoweredGraph(oprs, [f"case{i}" for i in range(len(oprs))], list(range(len(oprs))))
    naming = Naming(0, False, False)
    if dump_format == "FBS_V2":
        return serialize_v2(g, Metadata(is_valid=False), naming, model_version=2)
    return serialize_v1(g, Metadata(is_valid=False), naming)


def wrap(model: bytes, cases: list[dict[str, np.ndarray]], dump_format: str) -> bytes:
    return MAGIC + struct.pack("<I", len(cases)) + model + b"".join(case_graph(c, dump_format) for c in cases)


def read_cases(data: bytes) -> tuple[bytes, list[list[np.ndarray]]]:
    """A test-case file's model graph bytes and each case's input values (input-name order)."""
    from backends.mge.container import parse_file
    from backends.mge.dtypes import to_element

    if not data.startswith(MAGIC) or len(data) < 12:
        raise InputDataError("not a load_and_run test-case file (no mgbtest0 header)")
    (n,) = struct.unpack_from("<I", data, 8)
    graphs = parse_file(data[12:])
    if len(graphs) != n + 1:
        raise InputDataError(f"test-case file: header says {n} cases, found {len(graphs) - 1}")
    model = data[12 + graphs[0].offset : 12 + graphs[0].offset + graphs[0].size]
    cases: list[list[Any]] = []
    for g in graphs[1:]:
        cases.append(
            [
                np.frombuffer(bytes(t.data), numpy_dtype(to_element(t.dtype))).reshape(t.shape)
                for o in g.oprs
                for t in o.tensors
            ]
        )
    return model, cases
