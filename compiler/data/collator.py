"""``Collator``: merges the samples of one batch into batched numpy arrays."""

from __future__ import annotations

import collections.abc
from typing import Any

import numpy as np

__all__ = ["Collator"]


def _refuse(what: object) -> TypeError:
    return TypeError(
        "Collator: a sample field must be a numpy array or scalar, a number, a str/bytes, a dict, a "
        f"namedtuple or a sequence; got {what}"
    )


class Collator:
    """Stacks a list of samples field by field: arrays and numpy scalars along a new first axis,
    Python floats into float64 and ints into int64 arrays, strings into a list; dicts, namedtuples
    and sequences are collated per key or position (the structure of the first sample is kept)."""

    def apply(self, inputs: list[Any]) -> Any:
        if len(inputs) == 0:
            raise ValueError("Collator.apply: the batch is empty")
        first = inputs[0]
        if isinstance(first, np.ndarray):
            if first.dtype.kind in "OUSV":
                raise _refuse(f"an array of dtype {first.dtype}")
            return np.ascontiguousarray(np.stack(inputs))
        if isinstance(first, np.generic) and not isinstance(first, (np.str_, np.bytes_)):
            return np.array(inputs)
        if isinstance(first, bool) or isinstance(first, int):
            return np.array(inputs)
        if isinstance(first, float):
            return np.array(inputs, dtype=np.float64)
        if isinstance(first, (str, bytes)):
            return inputs
        if isinstance(first, collections.abc.Mapping):
            return {key: self.apply([sample[key] for sample in inputs]) for key in first}
        if isinstance(first, tuple) and hasattr(first, "_fields"):
            return type(first)(*(self.apply(list(field)) for field in zip(*inputs, strict=True)))
        if isinstance(first, collections.abc.Sequence):
            return [self.apply(list(field)) for field in zip(*inputs, strict=True)]
        raise _refuse(type(first).__name__)
