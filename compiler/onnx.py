"""``compiler.onnx.load``: an ONNX model as xmge's ``mgb`` tensor IR (the tracer's conventions).

    module = compiler.onnx.load("resnet.onnx")                       # func.func @main
    module = compiler.onnx.load(data, input_shapes={"x": (1, 3, 224, 224)})
    module = compiler.onnx.load(data, input_values={"axes": np.array([1], np.int64)})
    outs = semantics.run_module(module, [x])

The result is what ``jit.trace`` would record for the same network, so everything that works on a
traced model (``compile``, ``dump`` to ``.mge``, the passes) works on it. The importer itself is
``backends.onnx.reader.read_onnx``; unsupported models raise :class:`OnnxImportError`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from xdsl.dialects.builtin import ModuleOp

from backends.onnx.reader import MAX_OPSET, MIN_OPSET, OnnxImportError, read_onnx

__all__ = ["MAX_OPSET", "MIN_OPSET", "OnnxImportError", "load"]


def load(
    source: str | os.PathLike[str] | bytes | Any,
    input_shapes: dict[str, Sequence[int]] | None = None,
    input_values: dict[str, Any] | None = None,
) -> ModuleOp:
    """Import an ONNX model (a path, the file's bytes or an ``onnx.ModelProto``); ``input_shapes``
    fixes inputs whose shapes the model leaves dynamic, ``input_values`` the value of inputs that
    must be known when compiling (a shape, axes, sizes, repeats given as a graph input)."""
    return read_onnx(source, input_shapes=input_shapes, input_values=input_values)
