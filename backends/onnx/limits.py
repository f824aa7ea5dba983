"""The budget of ONNX import: what evaluating a file's constant subgraphs may cost.

The importer folds every node whose inputs are known (``reader._Importer._fold``), so a hostile or
broken file could ask it for a huge constant (``ConstantOfShape`` of 10^10 elements, an ``Expand``
or a ``MatMul`` of outer products) or an endless computation (a ``Loop`` of 10^12 iterations). Each
limit is checked *before* the work where the output size can be predicted, and after every folded
node otherwise; a refusal is an ``OnnxImportError`` naming the limit, its environment variable,
the file and the node.

The limits, their variables and defaults are the shared loader budget of :mod:`dialects.limits`
(one budget for every loader); this module names the ones ONNX import uses.
"""

from __future__ import annotations

from dialects.limits import (
    MAX_DEPTH_ENV,
    MAX_FOLD_SECONDS_ENV,
    MAX_FOLDED_BYTES_ENV,
    MAX_LOOP_ITERATIONS_ENV,
    MAX_TENSOR_BYTES_ENV,
    MAX_TOTAL_BYTES_ENV,
    LimitError,
    max_depth,
    max_fold_seconds,
    max_folded_bytes,
    max_loop_iterations,
    max_tensor_bytes,
    max_total_bytes,
)

__all__ = [
    "MAX_DEPTH_ENV",
    "MAX_TOTAL_BYTES_ENV",
    "MAX_FOLDED_BYTES_ENV",
    "MAX_FOLD_SECONDS_ENV",
    "MAX_LOOP_ITERATIONS_ENV",
    "MAX_TENSOR_BYTES_ENV",
    "LimitError",
    "max_depth",
    "max_fold_seconds",
    "max_total_bytes",
    "max_folded_bytes",
    "max_loop_iterations",
    "max_tensor_bytes",
]
