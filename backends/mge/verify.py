"""A FlatBuffers structure verifier for ``.mge`` graphs, as strict as MegEngine's loaders.

MegEngine 1.13 runs ``flatbuffers::Verifier`` over every graph before it reads anything
(``VerifySizePrefixedGraphBuffer`` for FBS v1, ``VerifySizePrefixedModelBuffer`` for v2) and
refuses the whole file with "model verification failed (invalid or corrupted model?)" when one
check fails. xmge's own reader is more forgiving (it only checks bounds), so a file it reads back
can still be one MegEngine refuses. This module repeats the verifier's checks against the schemas
of spec A.4 (:mod:`backends.mge.fbs_schema`) so that tests catch such files without MegEngine:

* the buffer is size-prefixed and **alignment is relative to the size word** (the verifier's
  ``buf_`` points at it): every scalar field is aligned to its size (8-byte ``hash``,
  ``type_id``, ``optimize_options``, ``workspace_limit``, BN ``epsilon``...), every table and
  vector (length word) to 4, vtables to 2;
* the size word equals the buffer's length minus 4, the identifier is ``mgb1``/``mgv2``;
* every offset is non-zero, non-negative and lands inside the buffer; vtables have an even size
  of at least 4 bytes and lie inside the buffer; fields lie inside their table;
* strings end with a NUL inside the buffer; vectors fit in the buffer;
* a vector of unions has its type vector, with the same length (both present or both absent);
* nesting depth at most 64 and at most 1,000,000 tables (the verifier's defaults).

Beyond flatbuffers (what its builders always do, checked so that our writer keeps doing it):
vector elements are aligned to the element's alignment.

:func:`verify_file` checks a whole file (every graph, and for v1 the ``MGBC`` header and the
tensor-data area); it raises :class:`FbsVerifyError` naming the table path and buffer offset, or
returns a :class:`Census` of which fields each table kind holds (to compare with MegEngine's files).
"""

from __future__ import annotations

import struct
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import backends.mge.fbs_schema as F
from backends.mge.fbs_schema import Kind
from dialects.errors import XmgeError

MAX_DEPTH = 64
MAX_TABLES = 1_000_000
MAX_BUFFER_SIZE = 2**31 - 1

_SCALAR_SIZE = {"b": 1, "B": 1, "?": 1, "h": 2, "H": 2, "i": 4, "I": 4, "f": 4, "q": 8, "Q": 8, "d": 8}


class FbsVerifyError(XmgeError, ValueError):
    """The buffer would fail MegEngine's FlatBuffers verification (or a v1 container check)."""


@dataclass
class Census:
    """Which slots each table kind holds over a whole buffer, and how many tables there are."""

    slots: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    tables: int = 0
    unknown_union_tags: set[tuple[str, int]] = field(default_factory=set)


class _Verifier:
    def __init__(
        self, buf: bytes, schema: dict[str, dict[int, Kind]], unions: dict[str, dict[int, str]], what: str
    ):
        self.buf = buf
        self.size = len(buf)
        self.schema = schema
        self.unions = unions
        self.what = what
        self.depth = 0
        self.census = Census()

    def fail(self, msg: str, pos: int) -> FbsVerifyError:
        return FbsVerifyError(f"{self.what}: {msg} (at buffer offset {pos})")

    def check(self, pos: int, n: int, what: str) -> None:
        if pos < 0 or n < 0 or pos + n > self.size:
            raise self.fail(f"{what}: {n} bytes at {pos} run past the buffer's {self.size} bytes", pos)

    def align(self, pos: int, a: int, what: str) -> None:
        if pos % a:
            raise self.fail(f"{what} is not {a}-byte aligned (offset {pos} from the size word)", pos)

    def scalar(self, fmt: str, pos: int, what: str) -> Any:
        n = _SCALAR_SIZE[fmt]
        self.align(pos, n, what)
        self.check(pos, n, what)
        return struct.unpack_from("<" + fmt, self.buf, pos)[0]

    def offset(self, pos: int, what: str) -> int:
        """VerifyOffset: the position the uoffset at ``pos`` points to."""
        o = self.scalar("I", pos, what + " offset")
        if o == 0:
            raise self.fail(f"{what}: zero offset", pos)
        if o >= 2**31:
            raise self.fail(f"{what}: negative offset {o - 2**32}", pos)
        self.check(pos + o, 1, what)
        return pos + o

    def vector(self, pos: int, elem: int, align: int, what: str) -> tuple[int, int]:
        n = self.scalar("I", pos, what + " length")
        if n >= MAX_BUFFER_SIZE // max(elem, 1):
            raise self.fail(f"{what}: absurd length {n}", pos)
        self.check(pos, 4 + elem * n, f"{what} ({n} elements)")
        if n and align > 1:
            self.align(pos + 4, align, what + " elements")
        return pos + 4, n

    def string(self, pos: int, what: str) -> None:
        start, n = self.vector(pos, 1, 1, what)
        self.check(start + n, 1, what + " terminator")
        if self.buf[start + n] != 0:
            raise self.fail(f"{what}: string lacks its terminating NUL", start + n)

    def table(self, pos: int, kind: str, what: str) -> None:
        self.depth += 1
        self.census.tables += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"{what}: tables nested deeper than {MAX_DEPTH}", pos)
        if self.census.tables > MAX_TABLES:
            raise self.fail(f"more than {MAX_TABLES} tables", pos)
        vt, vt_len = self._vtable(pos, what)
        obj_len = struct.unpack_from("<H", self.buf, vt + 2)[0]
        if obj_len < 4:
            raise self.fail(f"{what}: invalid table size {obj_len}", vt + 2)
        self.check(pos, obj_len, what + " table")
        fields = self.schema[kind]
        present: dict[int, int] = {}
        for slot in range((vt_len - 4) // 2):
            off = struct.unpack_from("<H", self.buf, vt + 4 + 2 * slot)[0]
            if off:
                if off < 4:
                    raise self.fail(f"{what}: field {slot} overlaps the vtable offset", vt + 4 + 2 * slot)
                present[slot] = pos + off
        self.census.slots[kind].update(present)
        for slot, fpos in present.items():
            spec = fields.get(slot)
            fwhat = f"{what}.{slot}"
            if spec is None:
                raise self.fail(f"{what}: slot {slot} is not in the {kind} schema", fpos)
            k = spec[0]
            size = _SCALAR_SIZE[spec[1]] if k == "s" else (1 if k == "ut" else 4)
            if fpos + size > pos + obj_len:
                raise self.fail(f"{fwhat} lies outside its {obj_len}-byte table", fpos)
            if k == "s":
                self.scalar(spec[1], fpos, fwhat)
            elif k == "ut":
                self.scalar("B", fpos, fwhat)
            elif k == "t":
                self.table(self.offset(fpos, fwhat), spec[1], fwhat)
            elif k == "str":
                self.string(self.offset(fpos, fwhat), fwhat)
            elif k in ("vs", "vut"):
                fmt = spec[1] if k == "vs" else "B"
                n = _SCALAR_SIZE[fmt]
                self.vector(self.offset(fpos, fwhat), n, n, fwhat)
            elif k == "vstruct":
                self.vector(self.offset(fpos, fwhat), spec[1], spec[2], fwhat)
            elif k in ("vt", "vstr"):
                start, n = self.vector(self.offset(fpos, fwhat), 4, 4, fwhat)
                for i in range(n):
                    target = self.offset(start + 4 * i, f"{fwhat}[{i}]")
                    if k == "vt":
                        self.table(target, spec[1], f"{fwhat}[{i}]")
                    else:
                        self.string(target, f"{fwhat}[{i}]")
            elif k == "u":
                tag = self.scalar("B", present[spec[2]], fwhat + " type") if spec[2] in present else 0
                target = self.offset(fpos, fwhat)
                self.union(spec[1], tag, target, fwhat)
            elif k == "vu":
                if spec[2] not in present:
                    raise self.fail(f"{fwhat}: union values without their type vector", fpos)
                tstart, tn = self.vector(self.offset(present[spec[2]], fwhat + " types"), 1, 1, fwhat)
                start, n = self.vector(self.offset(fpos, fwhat), 4, 4, fwhat)
                if n != tn:
                    raise self.fail(f"{fwhat}: {n} union values but {tn} types", fpos)
                for i in range(n):
                    target = self.offset(start + 4 * i, f"{fwhat}[{i}]")
                    self.union(spec[1], self.buf[tstart + i], target, f"{fwhat}[{i}]")
        for slot, spec in fields.items():
            if (
                spec[0] == "vut"
                and slot in present
                and not any(s[0] == "vu" and s[2] == slot and q in present for q, s in fields.items())
            ):
                raise self.fail(f"{what}.{slot}: union types without their values", present[slot])
        self.depth -= 1

    def union(self, union: str, tag: int, target: int, what: str) -> None:
        if tag == 0:
            raise self.fail(f"{what}: union value with type NONE", target)
        kind = self.unions[union].get(tag)
        if kind is None:
            # MegEngine knows more params than xmge; check the table's frame only
            self.census.unknown_union_tags.add((union, tag))
            self._vtable(target, what)
            return
        self.table(target, kind, f"{what}<{kind}>")

    def _vtable(self, pos: int, what: str) -> tuple[int, int]:
        """The position and size of the vtable of the table at ``pos``, checked: a table's frame
        (all that is checked of a table of a kind xmge does not know)."""
        soff = self.scalar("i", pos, what + " (table start)")
        vt = pos - soff
        vt_len = self.scalar("H", vt, what + " vtable size")
        if vt_len % 2 or vt_len < 4:
            raise self.fail(f"{what}: invalid vtable size {vt_len}", vt)
        self.check(vt, vt_len, what + " vtable")
        return vt, vt_len


def verify_buffer(buf: bytes, identifier: bytes) -> Census:
    """Verify one size-prefixed graph buffer (size word included), like MegEngine's loaders."""
    root_kind, schema, unions = F.verifier_schema(identifier)
    what = f"{identifier.decode()} graph"
    buf = bytes(buf)
    if len(buf) < 12:
        raise FbsVerifyError(f"{what}: {len(buf)} bytes is too short for a size-prefixed buffer")
    if len(buf) > MAX_BUFFER_SIZE:
        raise FbsVerifyError(f"{what}: larger than 2 GiB")
    size = struct.unpack_from("<I", buf, 0)[0]
    if size != len(buf) - 4:
        raise FbsVerifyError(f"{what}: size word {size} but {len(buf) - 4} bytes follow it")
    if buf[8:12] != identifier:
        raise FbsVerifyError(f"{what}: identifier {buf[8:12]!r}, expected {identifier!r}")
    v = _Verifier(buf, schema, unions, what)
    v.table(v.offset(4, "root"), root_kind, root_kind)
    return v.census


@dataclass
class GraphReport:
    format: str  # "FBS" or "FBS_V2"
    offset: int  # where the graph starts in the file
    size: int
    census: Census
    blob_bytes: int = 0  # v1: bytes of tensor data between the header and the FlatBuffer


def _v1_blob_sizes(buf: bytes) -> list[int]:
    """data_size of every tensor of a verified v1 graph buffer, in operator/tensor order."""
    from backends.mge.fbs import Buffer

    root = Buffer(buf[4:], 0, "FBS v1 graph").root(b"mgb1")
    out = []
    for ot in root.tables(F.V1.Graph.oprs, "oprs") or []:
        for tt in ot.tables(F.V1.Operator.tensors, "tensors") or []:
            if tt.scalar(F.V1.Tensor.offset, "I", 0) != 0:
                raise FbsVerifyError(
                    "FBS v1 tensor with a non-zero offset (MegEngine's dumper never skips bytes)"
                )
            out.append(tt.scalar(F.V1.Tensor.data_size, "I", 0))
    return out


def verify_file(data: bytes) -> list[GraphReport]:
    """Verify every graph of a ``.mge`` file; v1 graphs also get their ``MGBC`` header checked."""
    data = bytes(data)
    reports = []
    pos = 0
    while pos < len(data):
        if data[pos : pos + 4] == b"MGBC":
            if len(data) - pos < 28:
                raise FbsVerifyError(f"FBS v1 graph at {pos}: truncated header")
            _magic, feat, reserved, blob = struct.unpack_from("<I8sIQ", data, pos)
            if feat[:4] != b"\0\0\0\0":
                raise FbsVerifyError(f"FBS v1 graph at {pos}: bytes 4..7 must be zero (uint64 magic)")
            if feat != b"\0" * 8 or reserved:
                raise FbsVerifyError(f"FBS v1 graph at {pos}: feature bits / reserved word not zero")
            fbs = pos + 24 + blob
            if fbs + 4 > len(data):
                raise FbsVerifyError(f"FBS v1 graph at {pos}: offset_to_fbs {blob} runs past the file")
            size = struct.unpack_from("<I", data, fbs)[0]
            end = fbs + 4 + size
            if end > len(data):
                raise FbsVerifyError(f"FBS v1 graph at {pos}: FlatBuffer of {size} bytes runs past the file")
            census = verify_buffer(data[fbs:end], b"mgb1")
            total = sum(_v1_blob_sizes(data[fbs:end]))
            if total != blob:
                raise FbsVerifyError(
                    f"FBS v1 graph at {pos}: tensors hold {total} bytes of data, offset_to_fbs says {blob}"
                )
            reports.append(GraphReport("FBS", pos, end - pos, census, blob))
            pos = end
        elif data[pos + 8 : pos + 12] == b"mgv2":
            size = struct.unpack_from("<I", data, pos)[0]
            end = pos + 4 + size
            if end > len(data):
                raise FbsVerifyError(f"FBS v2 graph at {pos}: FlatBuffer of {size} bytes runs past the file")
            reports.append(GraphReport("FBS_V2", pos, end - pos, verify_buffer(data[pos:end], b"mgv2")))
            pos = end
        else:
            raise FbsVerifyError(f"no .mge graph at byte {pos} (neither MGBC nor mgv2)")
    if not reports:
        raise FbsVerifyError("empty file")
    return reports
