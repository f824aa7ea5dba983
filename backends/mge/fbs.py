"""Bounds-checked FlatBuffers table access for untrusted ``.mge`` files, plus Builder helpers.

The ``flatbuffers`` package's generated-style accessors trust the buffer: a corrupted offset raises
``IndexError``/``struct.error`` somewhere deep inside, and a corrupted vector length makes a loop run
for billions of iterations. Every read here checks its bounds first and raises
:class:`MgeFormatError` naming the problem and the file offset, so a hostile file costs at most
time and memory proportional to its own size. Writing uses ``flatbuffers.Builder`` directly.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

import flatbuffers
import numpy as np

from dialects.errors import XmgeError


class MgeFormatError(XmgeError, ValueError):
    """A ``.mge`` file that cannot be read; the message names the problem and the byte offset."""

    def __init__(self, message: str, offset: int | None = None):
        self.offset = offset
        super().__init__(message if offset is None else f"{message} (at byte offset {offset})")


_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")

SCALAR_FORMATS: dict[str, struct.Struct] = {
    k: struct.Struct("<" + k) for k in ("b", "B", "h", "H", "i", "I", "q", "Q", "f", "d", "?")
}


class Buffer:
    """One FlatBuffer inside a file: ``data`` plus where it starts in the file (for messages)."""

    def __init__(self, data: bytes | memoryview, file_offset: int = 0, what: str = "FlatBuffer"):
        self.data = memoryview(data).cast("B") if not isinstance(data, memoryview) else data
        self.size = len(self.data)
        self.file_offset = file_offset
        self.what = what

    def fail(self, message: str, pos: int) -> MgeFormatError:
        return MgeFormatError(f"{self.what}: {message}", self.file_offset + pos)

    def check(self, pos: int, n: int, what: str) -> None:
        if pos < 0 or n < 0 or pos + n > self.size:
            raise self.fail(
                f"{what} lies outside the buffer ({n} bytes at {pos}, buffer has {self.size})", pos
            )

    def unpack(self, fmt: struct.Struct, pos: int, what: str) -> Any:
        self.check(pos, fmt.size, what)
        return fmt.unpack_from(self.data, pos)[0]

    def root(self, identifier: bytes | None) -> Table:
        if self.size < 8:
            raise self.fail(f"too short ({self.size} bytes) to hold a root table", 0)
        if identifier is not None and bytes(self.data[4:8]) != identifier:
            raise self.fail(f"wrong file identifier {bytes(self.data[4:8])!r}, expected {identifier!r}", 4)
        return Table.at(self, self.unpack(_U32, 0, "root offset"), "root table")


class Table:
    """A table at absolute position ``pos`` of ``buf``, its vtable checked on construction."""

    __slots__ = ("buf", "pos", "vt", "vt_len", "obj_len", "what")

    def __init__(self, buf: Buffer, pos: int, what: str):
        self.buf, self.pos, self.what = buf, pos, what
        buf.check(pos, 4, f"{what} table")
        vt = pos - buf.unpack(_I32, pos, f"{what} vtable offset")
        buf.check(vt, 4, f"{what} vtable")
        self.vt = vt
        self.vt_len = buf.unpack(_U16, vt, f"{what} vtable size")
        self.obj_len = buf.unpack(_U16, vt + 2, f"{what} table size")
        if self.vt_len < 4 or self.vt_len % 2:
            raise buf.fail(f"{what}: invalid vtable size {self.vt_len}", vt)
        buf.check(vt, self.vt_len, f"{what} vtable")
        if self.obj_len < 4:
            raise buf.fail(f"{what}: invalid table size {self.obj_len}", vt + 2)
        buf.check(pos, self.obj_len, f"{what} table")

    @staticmethod
    def at(buf: Buffer, pos: int, what: str) -> Table:
        return Table(buf, pos, what)

    # -- fields -------------------------------------------------------------------------------
    def _field(self, slot: int, size: int) -> int:
        """Absolute position of field ``slot`` or 0 when absent."""
        entry = 4 + 2 * slot
        if entry + 2 > self.vt_len:
            return 0
        off = self.buf.unpack(_U16, self.vt + entry, f"{self.what} vtable entry")
        if off == 0:
            return 0
        if off + size > self.obj_len:
            raise self.buf.fail(f"{self.what}: field {slot} lies outside its table", self.vt + entry)
        return self.pos + off

    def has(self, slot: int) -> bool:
        return self._field(slot, 1) != 0

    def scalar(self, slot: int, fmt: str, default: Any = 0) -> Any:
        s = SCALAR_FORMATS[fmt]
        p = self._field(slot, s.size)
        return default if p == 0 else s.unpack_from(self.buf.data, p)[0]

    def _indirect(self, slot: int, what: str) -> int:
        p = self._field(slot, 4)
        if p == 0:
            return 0
        target = p + self.buf.unpack(_U32, p, what)
        self.buf.check(target, 4, what)
        return target

    def table(self, slot: int, what: str) -> Table | None:
        target = self._indirect(slot, f"{self.what}.{what}")
        return None if target == 0 else Table(self.buf, target, f"{self.what}.{what}")

    def _vector(self, slot: int, elem_size: int, what: str) -> tuple[int, int] | None:
        start = self._indirect(slot, f"{self.what}.{what}")
        if start == 0:
            return None
        n = self.buf.unpack(_U32, start, f"{what} length")
        # Checking the full extent up front is what keeps a corrupted length from costing time.
        self.buf.check(start + 4, n * elem_size, f"{self.what}.{what} ({n} elements)")
        return start + 4, n

    def string(self, slot: int, what: str) -> str | None:
        v = self._vector(slot, 1, what)
        if v is None:
            return None
        start, n = v
        try:
            return bytes(self.buf.data[start : start + n]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.buf.fail(f"{self.what}.{what} is not valid UTF-8", start) from exc

    def bytes_view(self, slot: int, what: str) -> tuple[memoryview, int] | None:
        """The raw bytes of a ``[ubyte]`` field and their absolute position (no copy)."""
        v = self._vector(slot, 1, what)
        if v is None:
            return None
        start, n = v
        return self.buf.data[start : start + n], start

    def scalars(self, slot: int, fmt: str, what: str) -> list[Any] | None:
        s = SCALAR_FORMATS[fmt]
        v = self._vector(slot, s.size, what)
        if v is None:
            return None
        start, n = v
        return list(np.frombuffer(self.buf.data, dtype=np.dtype("<" + fmt), count=n, offset=start).tolist())

    def _targets(self, slot: int, what: str) -> list[int] | None:
        """Where the offsets of a vector of tables or strings point."""
        v = self._vector(slot, 4, what)
        if v is None:
            return None
        start, n = v
        return [p + self.buf.unpack(_U32, p, what) for p in range(start, start + 4 * n, 4)]

    def tables(self, slot: int, what: str) -> list[Table] | None:
        targets = self._targets(slot, what)
        if targets is None:
            return None
        return [Table(self.buf, q, f"{self.what}.{what}[{i}]") for i, q in enumerate(targets)]

    def strings(self, slot: int, what: str) -> list[str] | None:
        targets = self._targets(slot, what)
        if targets is None:
            return None
        out = []
        for i, q in enumerate(targets):
            ln = self.buf.unpack(_U32, q, what)
            self.buf.check(q + 4, ln, f"{what}[{i}]")
            try:
                out.append(bytes(self.buf.data[q + 4 : q + 4 + ln]).decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise self.buf.fail(f"{self.what}.{what}[{i}] is not valid UTF-8", q) from exc
        return out

    def structs(self, slot: int, size: int, what: str) -> list[int] | None:
        """Absolute positions of the structs of a vector of ``size``-byte structs."""
        v = self._vector(slot, size, what)
        if v is None:
            return None
        start, n = v
        return [start + size * i for i in range(n)]

    def unpack_at(self, pos: int, fmt: str) -> Any:
        return self.buf.unpack(SCALAR_FORMATS[fmt], pos, self.what)


# ----------------------------------------------------------------------------------------------
# Writing


Field = tuple[int, Callable[[flatbuffers.Builder, int], None]]

_PREPEND: dict[str, str] = {
    "b": "PrependInt8Slot",
    "B": "PrependUint8Slot",
    "h": "PrependInt16Slot",
    "H": "PrependUint16Slot",
    "i": "PrependInt32Slot",
    "I": "PrependUint32Slot",
    "q": "PrependInt64Slot",
    "Q": "PrependUint64Slot",
    "f": "PrependFloat32Slot",
    "d": "PrependFloat64Slot",
    "?": "PrependBoolSlot",
}

_VEC_PREPEND: dict[str, str] = {
    "B": "PrependUint8",
    "b": "PrependInt8",
    "i": "PrependInt32",
    "I": "PrependUint32",
    "q": "PrependInt64",
    "Q": "PrependUint64",
}


class TableWriter:
    """Collects the fields of one table, then writes it; scalars are always stored (ForceDefaults
    semantics) because MegEngine's schema defaults differ from ours and from each other."""

    def __init__(self, builder: flatbuffers.Builder):
        self.b = builder
        self.items: list[tuple[int, str, Any]] = []

    def scalar(self, slot: int, fmt: str, value: Any) -> TableWriter:
        self.items.append((slot, fmt, value))
        return self

    def offset(self, slot: int, off: int | None) -> TableWriter:
        if off is not None:
            self.items.append((slot, "off", off))
        return self

    def finish(self) -> int:
        b = self.b
        nslots = max((s for s, _, _ in self.items), default=-1) + 1
        b.StartObject(nslots)
        # Largest first keeps alignment padding small; order does not matter for readers.
        order = {"Q": 0, "q": 0, "d": 0, "off": 1, "I": 1, "i": 1, "f": 1, "H": 2, "h": 2}
        for slot, fmt, value in sorted(self.items, key=lambda it: (order.get(it[1], 3), it[0])):
            if fmt == "off":
                b.PrependUOffsetTRelativeSlot(slot, value, 0)
            else:
                # default=None forces the value to be stored even when it equals a schema default
                getattr(b, _PREPEND[fmt])(slot, value, None)
        return b.EndObject()


def write_vector(builder: flatbuffers.Builder, fmt: str, values: Sequence[Any]) -> int:
    size = SCALAR_FORMATS[fmt].size
    builder.StartVector(size, len(values), size)
    prepend = getattr(builder, _VEC_PREPEND[fmt])
    for v in reversed(values):
        prepend(v)
    return builder.EndVector()


def write_offsets(builder: flatbuffers.Builder, offsets: Sequence[int]) -> int:
    builder.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        builder.PrependUOffsetTRelative(off)
    return builder.EndVector()


def write_structs(builder: flatbuffers.Builder, size: int, align: int, packed: Sequence[bytes]) -> int:
    """A vector of structs, each given as its packed little-endian bytes."""
    builder.StartVector(size, len(packed), align)
    for raw in reversed(packed):
        builder.Prep(align, size)
        builder.head -= size
        builder.Bytes[builder.head : builder.head + size] = raw
    return builder.EndVector()


def write_bytes(builder: flatbuffers.Builder, data: bytes | memoryview, align: int = 16) -> int:
    """A ``[ubyte]`` vector; ``align`` lets a loader map weights without copying."""
    n = len(data)
    builder.StartVector(1, n, align)
    builder.head -= n
    builder.Bytes[builder.head : builder.head + n] = bytes(data)
    return builder.EndVector()
