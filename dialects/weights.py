"""Weights held in memory as raw bytes, printed elided unless full data is asked for.

``#mgb.weight<"f3a9...">`` is the elided form: a content digest only. ``#mgb.weight<"f3a9...", "0x...">``
carries the bytes as hex. Parsing the elided form gives an attribute without data; running such IR
reports which constant lost its data instead of computing with garbage.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import numpy as np
import xxhash
from xdsl.dialects.builtin import BytesAttr, StringAttr
from xdsl.ir import Attribute, ParametrizedAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer

from dialects.errors import XmgeError

_print_state = threading.local()


@contextlib.contextmanager
def full_weights(enabled: bool = True) -> Iterator[None]:
    """Print weights in full (hex) inside this block instead of eliding them."""
    previous = getattr(_print_state, "full", False)
    _print_state.full = enabled
    try:
        yield
    finally:
        _print_state.full = previous


def printing_full_weights() -> bool:
    return getattr(_print_state, "full", False)


class ElidedWeightError(XmgeError, ValueError):
    """A constant whose data was elided in printed IR was needed for computation."""


@irdl_attr_definition
class WeightAttr(ParametrizedAttribute):
    name = "mgb.weight"
    digest: StringAttr
    data: BytesAttr
    elided: StringAttr  # "1" when parsed from elided text, "" otherwise

    def __init__(self, data: bytes, digest: str | None = None, elided: bool = False):
        super().__init__(
            StringAttr(digest if digest is not None else xxhash.xxh64_hexdigest(data)),
            BytesAttr(data),
            StringAttr("1" if elided else ""),
        )

    @staticmethod
    def from_numpy(array: np.ndarray) -> WeightAttr:
        return WeightAttr(np.ascontiguousarray(array).tobytes())

    @property
    def is_elided(self) -> bool:
        return self.elided.data == "1"

    def to_numpy(self, dtype: np.dtype, shape: tuple[int, ...], what: str = "constant") -> np.ndarray:
        """A read-only view of the bytes with the given dtype and shape."""
        if self.is_elided:
            raise ElidedWeightError(
                f"{what}: its data was elided when the IR was printed (digest {self.digest.data}); "
                "print the IR with full weights (xmge-opt --print-weights, or ir(full_weights=True))"
            )
        return np.frombuffer(self.data.data, dtype=dtype).reshape(shape)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            digest = parser.parse_str_literal("weight digest")
            if parser.parse_optional_punctuation(","):
                text = parser.parse_str_literal("weight data as a hex string")
                if not text.startswith("0x"):
                    parser.raise_error("weight data must be a hex string starting with 0x")
                try:
                    data = bytes.fromhex(text[2:])
                except ValueError:
                    parser.raise_error("weight data is not valid hex")
                if xxhash.xxh64_hexdigest(data) != digest:
                    parser.raise_error(f"weight data does not match its digest {digest}")
                return [StringAttr(digest), BytesAttr(data), StringAttr("")]
        return [StringAttr(digest), BytesAttr(b""), StringAttr("1")]

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string(f'"{self.digest.data}"')
            if printing_full_weights() and not self.is_elided:
                printer.print_string(f', "0x{self.data.data.hex()}"')
