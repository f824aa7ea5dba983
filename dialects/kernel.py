"""The ``kernel`` dialect: specialised kernels called over statically planned buffers.

This is the last IR before code generation, shared by every backend (C for x86/ARM, CUDA):

* ``kernel.def`` names one specialisation of a kernel family for one ISA: the family, the ISA, the
  parameters the template is instantiated with (shapes, strides, padding, epilogue, ...) and the bytes
  of scratch memory it needs (``workspace``). The symbol is named after the specialisation (MegCC's
  convention), so a def is emitted once however many calls use it.
* ``kernel.call`` runs a def on SSA tensor values. Values keep their tensor types, so the IR still reads
  as a dataflow graph and the reference semantics stay checkable. A call keeps the model's name of the
  operator it computes (the discardable ``name`` / ``scope`` of the ``mgb`` op it lowers; a fused call
  its producer's) for profiles and pictures; code generation never reads it.
* ``kernel.weight`` is a constant, possibly already repacked for its kernel (``packing`` names the
  packed form, so a pass never packs twice); its bytes go into one weights blob.
* ``kernel.view`` reinterprets a value with another shape (a reshape): no kernel, no copy.

After memory planning each value-producing op carries ``place`` / ``places``: ``#kernel.place<arena,
4096>`` (an offset into the one activation arena), ``<weights, 128>`` (an offset into the weights
blob) or ``<output, 0>`` (written straight into the caller's output buffer); function arguments are read
in place from the caller's input buffers. The function carries ``kernel.plan = #kernel.plan<...>`` with
the arena size (activations plus the shared workspace at its end), the weights size and the thread
count. :func:`check_plan` verifies that no two simultaneously live values overlap.

Textual form::

    kernel.def @conv2d_gemm_3x3_s1x1_p1x1_... = "conv2d_gemm" ["avx2"] {oc = 64 : i64, ...} workspace(4096)
    %w = kernel.weight #mgb.weight<"9f0c..."> {packing = "gemm_a6"} : tensor<11x576x6xf32>
    %y = kernel.call @conv2d_gemm_3x3_...(%x, %w, %b) : (tensor<...>, ...) -> tensor<1x64x56x56xf32>
    %z = kernel.view %y : tensor<1x64x56x56xf32> -> tensor<1x200704xf32>
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from xdsl.dialects import func
from xdsl.dialects.builtin import (
    I64,
    ArrayAttr,
    BFloat16Type,
    DictionaryAttr,
    FlatSymbolRefAttr,
    IntAttr,
    IntegerAttr,
    StringAttr,
    SymbolRefAttr,
    TensorType,
    i64,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import (
    Attribute,
    Dialect,
    Operation,
    ParametrizedAttribute,
    SpacedOpaqueSyntaxAttribute,
    SSAValue,
)
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import ConstantLike, Pure, SymbolOpInterface, SymbolTable
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

from dialects.dtypes import numpy_dtype
from dialects.syntax import attach_attrs, parse_unary, print_attr_dict, print_unary
from dialects.values import scalar_attr, scalar_value
from dialects.weights import WeightAttr

ALIGN = 64  # bytes: every planned buffer starts on a cache line (and a full AVX-512 vector)


class Space(StrEnum):
    ARENA = "arena"
    WEIGHTS = "weights"
    INPUT = "input"
    OUTPUT = "output"


@irdl_attr_definition
class SpaceAttr(EnumAttribute[Space], SpacedOpaqueSyntaxAttribute):
    name = "kernel.space"


@irdl_attr_definition
class PlaceAttr(ParametrizedAttribute):
    """Where a value lives: ``#kernel.place<arena, 4096>`` (byte offset, or index for input/output)."""

    name = "kernel.place"
    space: SpaceAttr
    offset: IntAttr

    def __init__(self, space: Space | str, offset: int):
        super().__init__(SpaceAttr(Space(space)), IntAttr(offset))

    @property
    def where(self) -> Space:
        return self.space.data

    @property
    def at(self) -> int:
        return self.offset.data

    def verify(self) -> None:
        if self.offset.data < 0:
            raise VerifyException(f"kernel.place: negative offset {self.offset.data}")
        if self.space.data in (Space.ARENA, Space.WEIGHTS) and self.offset.data % ALIGN:
            raise VerifyException(
                f"kernel.place: {self.space.data} offset {self.offset.data} is not {ALIGN}-aligned"
            )

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            space = parser.parse_str_enum(Space)
            parser.parse_punctuation(",")
            offset = parser.parse_integer(allow_boolean=False, allow_negative=False)
        return [SpaceAttr(space), IntAttr(offset)]

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.space.data.value}, {self.offset.data}>")


_PLAN_FIELDS = ("arena", "workspace", "weights", "threads")


@irdl_attr_definition
class PlanAttr(ParametrizedAttribute):
    """The static memory plan of a function: ``#kernel.plan<arena = 8192, workspace = 1024,
    weights = 4096, threads = 2>``. The workspace (shared by all calls, which run one after the
    other) is the last ``workspace`` bytes of the arena."""

    name = "kernel.plan"
    arena: IntAttr
    workspace: IntAttr
    weights: IntAttr
    threads: IntAttr

    def __init__(self, arena: int, workspace: int, weights: int, threads: int):
        super().__init__(IntAttr(arena), IntAttr(workspace), IntAttr(weights), IntAttr(threads))

    def verify(self) -> None:
        if min(self.arena.data, self.workspace.data, self.weights.data) < 0 or self.threads.data < 1:
            raise VerifyException(f"kernel.plan: invalid sizes {self}")
        if self.workspace.data > self.arena.data:
            raise VerifyException("kernel.plan: the workspace must lie inside the arena")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        values: dict[str, int] = {}
        with parser.in_angle_brackets():
            for i, field in enumerate(_PLAN_FIELDS):
                if i:
                    parser.parse_punctuation(",")
                parser.parse_keyword(field)
                parser.parse_punctuation("=")
                values[field] = parser.parse_integer(allow_boolean=False, allow_negative=False)
        return [IntAttr(values[f]) for f in _PLAN_FIELDS]

    def print_parameters(self, printer: Printer) -> None:
        body = ", ".join(f"{f} = {getattr(self, f).data}" for f in _PLAN_FIELDS)
        printer.print_string(f"<{body}>")


# ----------------------------------------------------------------------------------------------
# Parameters: Python values <-> a DictionaryAttr


def params_attr(params: dict[str, Any]) -> DictionaryAttr:
    """A kernel's parameters as a dictionary attribute (ints, floats, strings, bools, int tuples)."""

    def conv(v: Any) -> Attribute:
        scalar = scalar_attr(v, i64)
        if scalar is not None:
            return scalar
        if isinstance(v, tuple | list):
            return ArrayAttr([conv(x) for x in v])
        raise TypeError(f"kernel parameter value {v!r} has no attribute form")

    return DictionaryAttr({k: conv(v) for k, v in params.items()})


def params_value(attr: DictionaryAttr) -> dict[str, Any]:
    """Inverse of :func:`params_attr` (bools come back as ints)."""

    def conv(a: Attribute) -> Any:
        scalar = scalar_value(a)
        if scalar is not None:
            return scalar
        if isinstance(a, ArrayAttr):
            return tuple(conv(x) for x in a.data)
        raise TypeError(f"unexpected kernel parameter attribute {a}")

    return {k: conv(v) for k, v in attr.data.items()}


# ----------------------------------------------------------------------------------------------
# Ops


@irdl_op_definition
class KernelDefOp(IRDLOperation):
    name = "kernel.def"
    sym_name = prop_def(StringAttr)
    family = prop_def(StringAttr)
    isa = prop_def(StringAttr)
    params = prop_def(DictionaryAttr)
    workspace = prop_def(IntegerAttr[I64], default_value=IntegerAttr(0, i64))
    traits = traits_def(SymbolOpInterface())

    def __init__(self, sym: str, family: str, isa: str, params: dict[str, Any], workspace: int = 0):
        super().__init__(
            properties={
                "sym_name": StringAttr(sym),
                "family": StringAttr(family),
                "isa": StringAttr(isa),
                "params": params_attr(params),
                "workspace": IntegerAttr(workspace, i64),
            }
        )

    @property
    def sym(self) -> str:
        return self.sym_name.data

    def param_values(self) -> dict[str, Any]:
        return params_value(self.params)

    def verify_(self) -> None:
        sym = self.sym_name.data
        if not sym or not all(c.isalnum() or c == "_" for c in sym) or sym[0].isdigit():
            raise VerifyException(f"kernel.def: symbol {sym!r} is not a valid C identifier")
        if self.workspace.value.data < 0:
            raise VerifyException(f"kernel.def @{sym}: negative workspace {self.workspace.value.data}")
        if not self.family.data or not self.isa.data:
            raise VerifyException(f"kernel.def @{sym}: family and isa must be non-empty")

    def print(self, printer: Printer) -> None:
        printer.print_string(f' @{self.sym_name.data} = "{self.family.data}" ["{self.isa.data}"] ')
        printer.print_attribute(self.params)
        if self.workspace.value.data:
            printer.print_string(f" workspace({self.workspace.value.data})")

    @classmethod
    def parse(cls, parser: Parser) -> KernelDefOp:
        sym = parser.parse_symbol_name().data
        parser.parse_punctuation("=")
        family = parser.parse_str_literal("kernel family")
        parser.parse_punctuation("[")
        isa = parser.parse_str_literal("isa")
        parser.parse_punctuation("]")
        params = parser.parse_attribute()
        if not isinstance(params, DictionaryAttr):
            parser.raise_error("kernel.def expects a dictionary of parameters")
        workspace = 0
        if parser.parse_optional_keyword("workspace"):
            with parser.in_parens():
                workspace = parser.parse_integer(allow_boolean=False, allow_negative=False)
        op = cls(sym, family, isa, {}, workspace)
        op.properties["params"] = params
        return op


@irdl_op_definition
class WeightOp(IRDLOperation):
    """A constant (weights), possibly packed for its kernel; ``packing`` names the packed form."""

    name = "kernel.weight"
    value = prop_def(WeightAttr)
    packing = prop_def(StringAttr, default_value=StringAttr(""))
    place = opt_prop_def(PlaceAttr)
    output = result_def(TensorType)
    traits = traits_def(Pure(), ConstantLike())

    def __init__(self, value: WeightAttr, result_type: TensorType, packing: str = ""):
        super().__init__(
            result_types=[result_type], properties={"value": value, "packing": StringAttr(packing)}
        )

    @staticmethod
    def from_numpy(array: Any, element_type: Attribute, packing: str = "") -> WeightOp:
        import numpy as np

        data = np.ascontiguousarray(array, dtype=numpy_dtype(element_type))
        return WeightOp(WeightAttr.from_numpy(data), TensorType(element_type, list(data.shape)), packing)

    def numpy(self) -> Any:
        t = self.output.type
        assert isinstance(t, TensorType)
        return self.value.to_numpy(numpy_dtype(t.element_type), tuple(t.get_shape()), "kernel.weight")

    def verify_(self) -> None:
        t = self.output.type
        assert isinstance(t, TensorType)
        if not self.value.is_elided and len(self.value.data.data) != nbytes(t):
            raise VerifyException(
                f"kernel.weight: {t} needs {nbytes(t)} bytes, the weight holds {len(self.value.data.data)}"
            )
        if self.place is not None and self.place.where != Space.WEIGHTS:
            raise VerifyException(f"kernel.weight must be placed in the weights blob, not {self.place.where}")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_attribute(self.value)
        packing = self.packing if self.packing.data else None
        print_attr_dict(printer, self.attributes, {"packing": packing, "place": self.place})
        printer.print_string(" : ")
        printer.print_attribute(self.output.type)

    @classmethod
    def parse(cls, parser: Parser) -> WeightOp:
        value = parser.parse_attribute()
        if not isinstance(value, WeightAttr):
            parser.raise_error("kernel.weight expects a #mgb.weight<...> value")
        attrs = dict(parser.parse_optional_attr_dict())
        parser.parse_punctuation(":")
        t = parser.parse_type()
        if not isinstance(t, TensorType):
            parser.raise_error("kernel.weight must produce a tensor")
        return attach_attrs(cls(value, t), attrs, "packing", "place")


@irdl_op_definition
class CallOp(IRDLOperation):
    """Run the kernel ``callee`` (a ``kernel.def``) on ``args``, producing ``outputs``."""

    name = "kernel.call"
    callee = prop_def(SymbolRefAttr)
    args = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)
    places = opt_prop_def(ArrayAttr[PlaceAttr])

    def __init__(self, callee: str, args: Sequence[SSAValue], result_types: Sequence[Attribute]):
        super().__init__(
            operands=[list(args)],
            result_types=[list(result_types)],
            properties={"callee": FlatSymbolRefAttr(callee)},
        )

    def definition(self) -> KernelDefOp:
        found = SymbolTable.lookup_symbol(self, self.callee)
        if not isinstance(found, KernelDefOp):
            raise VerifyException(f"kernel.call: @{self.callee.string_value()} is not a kernel.def")
        return found

    def layer_name(self) -> str | None:
        """The model's name of the operator this call computes: its ``name`` (the operator name a
        .mge or ONNX file gives, e.g. ``layer1.0.conv1.Convolution``), else its ``scope`` (the module
        path of a traced op, e.g. ``layer1.0.conv1``); ``None`` for calls lowering added (relayouts,
        output copies)."""
        for key in ("name", "scope"):
            attr = self.attributes.get(key)
            if isinstance(attr, StringAttr) and attr.data:
                return attr.data
        return None

    def verify_(self) -> None:
        # the module may be mid-construction (no enclosing symbol table yet): check what we can
        if _symbol_table_of(self) is not None:
            _check_bf16(self, self.definition())
        if self.places is not None and len(self.places.data) != len(self.outputs):
            raise VerifyException(
                f"kernel.call: {len(self.places.data)} places for {len(self.outputs)} results"
            )

    def print(self, printer: Printer) -> None:
        printer.print_string(f" @{self.callee.string_value()}(")
        printer.print_list(self.args, printer.print_operand)
        printer.print_string(")")
        print_attr_dict(printer, self.attributes, {"places": self.places})
        printer.print_string(" : ")
        printer.print_function_type(self.args.types, self.outputs.types)

    @classmethod
    def parse(cls, parser: Parser) -> CallOp:
        callee = parser.parse_symbol_name().data
        pos = parser.pos
        unresolved = parser.parse_comma_separated_list(
            parser.Delimiter.PAREN, parser.parse_unresolved_operand
        )
        attrs = dict(parser.parse_optional_attr_dict())
        parser.parse_punctuation(":")
        fty = parser.parse_function_type()
        args = parser.resolve_operands(unresolved, fty.inputs.data, pos)
        return attach_attrs(cls(callee, args, fty.outputs.data), attrs, "places")


def _check_bf16(call: CallOp, d: KernelDefOp) -> None:
    """bfloat16 tensors pass exactly where the definition says it reads (``bf16_args``) or stores
    (``bf16_outs``) bfloat16: any other kernel reads its operands as their own dtype."""
    declared = d.param_values()
    for what, values, key in (("argument", call.args, "bf16_args"), ("result", call.outputs, "bf16_outs")):
        chosen = set(declared.get(key, ()))
        for i, v in enumerate(values):
            t = v.type
            is_b16 = isinstance(t, TensorType) and isinstance(t.element_type, BFloat16Type)
            if is_b16 != (i in chosen):
                raise VerifyException(
                    f"kernel.call @{d.sym}: {what} {i} is {t}, but the kernel "
                    f"{'takes' if i in chosen else 'does not take'} it as bfloat16 ({key})"
                )


def _symbol_table_of(op: Operation) -> Operation | None:
    parent = op.parent_op()
    while parent is not None:
        if parent.has_trait(SymbolTable):
            return parent
        parent = parent.parent_op()
    return None


@irdl_op_definition
class ViewOp(IRDLOperation):
    """The same bytes under another shape (a reshape): it aliases its source, nothing runs."""

    name = "kernel.view"
    src = operand_def(TensorType)
    output = result_def(TensorType)
    place = opt_prop_def(PlaceAttr)
    traits = traits_def(Pure())

    def __init__(self, src: SSAValue, result_type: TensorType):
        super().__init__(operands=[src], result_types=[result_type])

    def verify_(self) -> None:
        s, o = self.src.type, self.output.type
        assert isinstance(s, TensorType) and isinstance(o, TensorType)
        if s.element_type != o.element_type or math.prod(s.get_shape()) != math.prod(o.get_shape()):
            raise VerifyException(f"kernel.view: {s} and {o} do not hold the same elements")

    def print(self, printer: Printer) -> None:
        print_unary(printer, self, {"place": self.place})

    @classmethod
    def parse(cls, parser: Parser) -> ViewOp:
        src, ot, attrs = parse_unary(parser)
        if not isinstance(ot, TensorType):
            parser.raise_error("kernel.view must produce a tensor")
        return attach_attrs(cls(src, ot), attrs, "place")


Kernel = Dialect("kernel", [KernelDefOp, WeightOp, CallOp, ViewOp], [SpaceAttr, PlaceAttr, PlanAttr])


# ----------------------------------------------------------------------------------------------
# Sizes and plan checking


def nbytes(t: Attribute) -> int:
    assert isinstance(t, TensorType)
    return math.prod(t.get_shape()) * numpy_dtype(t.element_type).itemsize


def aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def places_of(op: Operation) -> list[PlaceAttr | None]:
    """The planned place of each result of ``op`` (None where not planned)."""
    if isinstance(op, CallOp):
        return list(op.places.data) if op.places is not None else [None] * len(op.outputs)
    if isinstance(op, WeightOp | ViewOp):
        return [op.place]
    return [None] * len(op.results)


def plan_of(fn: func.FuncOp) -> PlanAttr | None:
    plan = fn.attributes.get("kernel.plan")
    return plan if isinstance(plan, PlanAttr) else None


def live_ranges(fn: func.FuncOp) -> dict[SSAValue, tuple[int, int]]:
    """Per value: (index of the defining op, index of the last op that reads it or a view of it).
    Arguments are defined at -1; returned values live to the end."""
    ops = list(fn.body.block.ops)
    index = {op: i for i, op in enumerate(ops)}
    root: dict[SSAValue, SSAValue] = {}
    rng: dict[SSAValue, list[int]] = {}
    for a in fn.body.block.args:
        root[a] = a
        rng[a] = [-1, -1]
    for op in ops:
        i = index[op]
        for r in op.results:
            base = root[op.operands[0]] if isinstance(op, ViewOp) else r
            root[r] = base
            rng.setdefault(base, [i, i])
        for v in op.operands:
            base = root[v]
            end = len(ops) if isinstance(op, func.ReturnOp) else i
            rng[base][1] = max(rng[base][1], end)
    return {v: (rng[root[v]][0], rng[root[v]][1]) for v in root}


def check_plan(fn: func.FuncOp) -> None:
    """Raise ``VerifyException`` unless every value is placed, inside its space, and no two values
    that are live at the same time share arena bytes (views share their source's bytes by design)."""
    plan = plan_of(fn)
    if plan is None:
        raise VerifyException(f"@{fn.sym_name.data} has no kernel.plan")
    ranges = live_ranges(fn)
    arena_end = plan.arena.data - plan.workspace.data
    blocks: list[tuple[int, int, int, int, SSAValue]] = []
    for op in fn.body.block.ops:
        for r, place in zip(op.results, places_of(op), strict=True):
            if place is None:
                raise VerifyException(f"{op.name} result {r.name_hint or ''} has no place")
            size = nbytes(r.type)
            if place.where == Space.ARENA:
                if place.at + size > arena_end:
                    raise VerifyException(
                        f"{op.name}: {size} bytes at {place.at} overrun the arena ({arena_end})"
                    )
                if isinstance(op, ViewOp):
                    continue
                blocks.append((place.at, place.at + size, *ranges[r], r))
            elif place.where == Space.WEIGHTS and place.at + size > plan.weights.data:
                raise VerifyException(
                    f"{op.name}: weight at {place.at} overruns the blob ({plan.weights.data})"
                )
    blocks.sort(key=lambda b: b[0])
    for i, (s0, e0, d0, l0, v0) in enumerate(blocks):
        for s1, e1, d1, l1, v1 in blocks[i + 1 :]:
            if s1 >= e0:
                break
            # disjoint in time if one dies before the other is written; dying at the very op that
            if l0 < d1 or l1 < d0:
                continue
            # writes the other is fine only for an in-place kernel reading exactly those bytes
            if s0 == s1 and ((l0 == d1 and _in_place(v1)) or (l1 == d0 and _in_place(v0))):
                continue
            raise VerifyException(
                f"values {v0.name_hint or '?'} [{s0}, {e0}) and {v1.name_hint or '?'} [{s1}, {e1}) "
                "are live together and overlap in the arena"
            )


def _in_place(v: SSAValue) -> bool:
    op = v.owner
    return isinstance(op, CallOp) and bool(op.definition().param_values().get("inplace", 0))


def defs_of(module: Operation) -> dict[str, KernelDefOp]:
    return {op.sym: op for op in module.walk() if isinstance(op, KernelDefOp)}


def calls_in(ops: Iterable[Operation]) -> list[CallOp]:
    return [op for op in ops if isinstance(op, CallOp)]


__all__ = [
    "ALIGN",
    "CallOp",
    "Kernel",
    "KernelDefOp",
    "PlaceAttr",
    "PlanAttr",
    "Space",
    "SpaceAttr",
    "ViewOp",
    "WeightOp",
    "aligned",
    "check_plan",
    "live_ranges",
    "nbytes",
    "params_attr",
    "params_value",
    "places_of",
    "plan_of",
]
