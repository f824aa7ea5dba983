"""The common form of a MegEngine operator, stated once in its row and read and written generically.

Most operators are regular: their inputs are the ``mgb`` op's operands in order, their outputs its
results, and the fields of their one param table are the op's properties (ints, floats, bools,
enums by MegEngine number; an axis may be negative in a file). A row says so with a
:class:`ParamMap`, and :func:`read_mapped` / :func:`lower_mapped` do the rest: the row needs no
read or lower function of its own. Operators with folded inputs, extra tables, layouts or output
dtypes keep their own functions in :mod:`backends.mge.read_ops` / :mod:`backends.mge.lower_ops`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xdsl.dialects.utils import EnumAttribute
from xdsl.irdl import BaseAttr, OperandDef

import backends.mge.schema as S
from backends.mge.read_context import define, emit_values, enum_of, fail, input_var, shape_of, unsupported
from backends.mge.records import WOpr
from dialects import enums
from dialects import tensor as T

if TYPE_CHECKING:
    from backends.mge.container import RawOpr
    from backends.mge.lowering import Lowering
    from backends.mge.read_context import ReadContext


@dataclass(frozen=True)
class ParamMap:
    """One param table whose fields are an op's properties.

    ``table`` names a table of :data:`backends.mge.schema.PARAMS`, or is the :class:`ParamDef`
    itself for a table only this operator uses (it is added to ``schema.PARAMS`` by
    :mod:`backends.mge.oprs`). ``fields`` maps MegEngine field names to property names; a field not
    mapped is written with MegEngine's default and refused when a file holds another value.
    Properties named in ``axes`` are axes of input 0: a negative value in a file counts from the end.
    """

    table: str | S.ParamDef
    fields: Mapping[str, str] = field(default_factory=dict)
    axes: tuple[str, ...] = ("axis",)

    @property
    def name(self) -> str:
        return self.table if isinstance(self.table, str) else self.table.name

    @property
    def pdef(self) -> S.ParamDef:
        return S.PARAMS[self.table] if isinstance(self.table, str) else self.table

    def check(self, kind: str, cls: type[T.MgbOp]) -> None:
        """The map fits ``cls``: every field is in the table, every property on the op, and every
        operand a single value (so the operator's inputs are the operands, in order)."""
        names = {n for n, _, _ in self.pdef.fields}
        props = cls.get_irdl_definition().properties
        for f, prop in self.fields.items():
            if f not in names:
                raise TypeError(f"{kind}: param.{self.name} has no field {f!r}")
            if prop not in props:
                raise TypeError(f"{kind}: {cls.name} has no property {prop!r}")
        for name, odef in cls.get_irdl_definition().operands:
            if type(odef) is not OperandDef:
                raise TypeError(f"{kind}: operand {name!r} of {cls.name} is not a single value")

    # -- the values of one operator --------------------------------------------------------
    def from_file(self, op: RawOpr, cls: type[T.MgbOp], ndim: int) -> dict[str, Any]:
        """The op's parameters from the operator's raw param table (input 0 has rank ``ndim``)."""
        raw = op.param(self.name)
        mapped = {f: prop for f, prop in self.fields.items()}
        params: dict[str, Any] = {}
        for f, fmt, default in self.pdef.fields:
            value = raw[f]
            prop = mapped.get(f)
            if prop is None:
                if value != default:
                    raise unsupported(op, f"param.{self.name}.{f} = {value} (xmge reads only {default})")
                continue
            enum = _enum_type(cls, prop)
            if enum is not None:
                params[prop] = enum_of(op, enum, value, f)
            elif fmt == "?":
                params[prop] = bool(value)
            elif fmt in ("f", "d"):
                params[prop] = float(value)
            else:
                params[prop] = int(value)
                if prop in self.axes and params[prop] < 0:
                    params[prop] += ndim
        return params

    def to_file(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The raw param table of an op with these parameters."""
        values: dict[str, Any] = {f: default for f, _, default in self.pdef.fields}
        for f, prop in self.fields.items():
            v = params[prop]
            values[f] = enums.number(v) if isinstance(v, enum.Enum) else v
        return values


def _enum_type(cls: type[T.MgbOp], prop: str) -> Any:
    """The enum class of an enum-valued property (None for other properties)."""
    constr = cls.get_irdl_definition().properties[prop].constr
    attr = constr.attr if isinstance(constr, BaseAttr) else None
    return attr.enum_type if isinstance(attr, type) and issubclass(attr, EnumAttribute) else None


def read_mapped(pmap: ParamMap, cls: type[T.MgbOp], ctx: ReadContext, op: RawOpr) -> None:
    """An operator of the common form: its inputs in order, its params by the map."""
    n = len(cls.get_irdl_definition().operands)
    if len(op.inputs) != n:
        raise fail(op, f"takes {n} input{'s' if n != 1 else ''}, has {len(op.inputs)}")
    ins = [input_var(ctx, op, k) for k in range(n)]
    params = pmap.from_file(op, cls, len(shape_of(op, ins[0], "input 0")))
    for i, var in enumerate(emit_values(ctx, op, cls, ins, **params)):
        define(ctx, op, i, var)


def lower_mapped(pmap: ParamMap, kind: str, lw: Lowering, op: T.MgbOp, p: dict[str, Any]) -> None:
    """The operator records of an op of the common form (outputs ``name``, ``name:1``, ...)."""
    tables = [(pmap.name, pmap.to_file(p))]
    if len(op.results) == 1:
        lw.simple(op, kind, tables)
        return
    from backends.mge.lower_ops import attr_str

    name = lw.var_name(op, kind)
    ins = [lw.ids[v] for v in op.operands]
    wopr = WOpr(kind, ins, len(op.results), tables, name=attr_str(op, "opr_name"))
    vids = lw.add(wopr, [name] + [f"{name}:{i}" for i in range(1, len(op.results))])
    for res, vid in zip(op.results, vids, strict=True):
        lw.ids[res] = vid
