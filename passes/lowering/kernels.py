"""Kernel units and the registry that ``kernel-select`` queries.

A :class:`KernelUnit` is one kernel family on one ISA, and everything about it in one place: the ops it
matches (``ops``), its explicit ``priority`` among the families that serve the same op, the
availability rule (:meth:`KernelUnit.match`: the kernel's parameters for an op, or ``None`` when it
cannot run it), its workspace, its ahead-of-time packing of constant operands, and (in the backend's
subclass) the code it renders. MegCC keeps availability beside the kernel body the same way.

A backend hands a :class:`KernelRegistry` of its units to the passes through ``Target.backend.kernels``;
passes never import a backend. For an op, the families that match its type are tried in order of
decreasing priority; each family is represented by its unit on the first of the target's ISAs it has
(``("avx512", "avx2", "generic")`` for ``x86-avx512``), so a portable ``generic`` unit serves every
target until an ISA-specific one overrides it. The first unit that accepts the op wins. An op no unit
accepts is a :class:`LoweringError` naming the op, its scope and every family tried, with why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation, SSAValue

from dialects import kernel as K
from dialects import tensor as T
from dialects.errors import XmgeError
from passes.values import shape as shape


class LoweringError(XmgeError, ValueError):
    """No kernel can run an op on the chosen target."""


class KernelRegistryError(XmgeError, LookupError):
    """Two units that cannot coexist: the same family and ISA, or two families with one priority."""


@dataclass
class Lowered:
    """What a unit's rule makes of an op: the kernel's parameters and its operands in the kernel's
    order (numpy arrays become new constants, e.g. a true convolution's flipped filter)."""

    params: dict[str, Any]
    operands: list[SSAValue | np.ndarray]


# the activations a fused epilogue may apply (the ``act`` parameter of conv / matmul kernels)
ACTIVATIONS = ("identity", "relu", "relu6", "sigmoid", "hswish")


@dataclass(frozen=True)
class EpilogueSupport:
    """What a kernel applies to its result before the store, for one element type, in this order: a
    bias (``"channels"``: per output channel, axis 1 of an NCHW or blocked result; ``"columns"``: per
    column of a 2-D matrix product; ``None``: no bias can be fused), a residual of the result's
    shape, then one of ``activations``. ``kernel-fuse-epilogue`` fuses exactly what this says."""

    bias: str | None = None
    residual: bool = False
    activations: frozenset[str] = field(default_factory=lambda: frozenset({"identity"}))

    def __post_init__(self) -> None:
        unknown = sorted(set(self.activations) - set(ACTIVATIONS))
        if unknown or "identity" not in self.activations:
            raise KernelRegistryError(
                f"an epilogue's activations must include 'identity' and come from {', '.join(ACTIVATIONS)}; "
                f"got {', '.join(sorted(self.activations))}"
            )
        if self.bias not in (None, "channels", "columns"):
            raise KernelRegistryError(
                f"an epilogue's bias runs along 'channels' or 'columns', not {self.bias!r}"
            )


# the whole float32 epilogue (bias along the channels, residual, every activation)
FULL_EPILOGUE = EpilogueSupport(bias="channels", residual=True, activations=frozenset(ACTIVATIONS))


@dataclass(frozen=True)
class Example:
    """A small op a kernel unit must accept (XNNPACK's tester pattern): ``build(rng)`` returns a
    one-function tensor-dialect module and its inputs. The conformance harness
    (``tests/test_kernel_conformance.py``) compiles every unit's examples on a target that reaches the
    unit, runs them and compares with ``semantics``; ``name`` says which example failed."""

    name: str
    build: Callable[[np.random.Generator], tuple[ModuleOp, list[np.ndarray]]]


class KernelUnit:
    """One kernel family on one ISA. Subclasses set ``family``, ``ops`` and ``priority`` and implement
    :meth:`match` and :meth:`symbol` (and the backend's rendering). A unit whose kernel fuses an
    epilogue declares it in ``epilogues``; an elementwise unit whose calls may be fused into their
    producer declares ``epilogue_consumer``."""

    family: ClassVar[str]
    isa: str = "generic"
    ops: ClassVar[tuple[type[Operation], ...]] = ()
    priority: ClassVar[int] = 0  # higher is tried first among the families of one op
    # operand index -> True when the kernel may write its result over that operand (same bytes)
    in_place_operand: ClassVar[int | None] = None
    # result element type (``dialects.dtypes`` name: "float32", "float16") -> what its epilogue fuses;
    # an element type not listed fuses nothing
    epilogues: ClassVar[Mapping[str, EpilogueSupport]] = {}
    # True for an elementwise unit (its params carry the elementwise ``mode``) whose calls
    # ``kernel-fuse-epilogue`` may fold into the kernel producing their operand
    epilogue_consumer: ClassVar[bool] = False
    # the ops the conformance harness runs this unit on (kernel-select must pick the unit for at
    # least one of them); a unit without examples says why in ``examples_reason``
    examples: ClassVar[tuple[Example, ...]] = ()
    examples_reason: ClassVar[str | None] = None

    def epilogue(self, element: str) -> EpilogueSupport | None:
        """What this unit's kernel can fuse into a result of element type ``element``, or None."""
        return self.epilogues.get(element)

    def match(self, op: Operation) -> Lowered | None:
        """The kernel's parameters and operands for ``op``, or None when this unit cannot run it."""
        raise NotImplementedError

    def symbol(self, params: dict[str, Any]) -> str:
        """The specialisation's symbol, named after what it is specialised on."""
        raise NotImplementedError

    def workspace(self, params: dict[str, Any]) -> int:
        """Scratch bytes the kernel needs while it runs (shared by all calls)."""
        return 0

    def pack(self, operand: int, array: np.ndarray, params: dict[str, Any]) -> tuple[np.ndarray, str] | None:
        """Repack the constant ``operand`` ahead of time: (packed array, packing name), or None."""
        return None


class KernelRegistry:
    """Every kernel unit of one backend. With ``examples_from`` (the backend's example builders, a
    module path named in the error), every unit must declare ``examples`` or an ``examples_reason``."""

    def __init__(self, units: Iterable[KernelUnit], *, examples_from: str | None = None) -> None:
        self._units: dict[tuple[str, str], KernelUnit] = {}
        families: dict[str, KernelUnit] = {}
        for u in units:
            key = (u.family, u.isa)
            if key in self._units:
                raise KernelRegistryError(f"two kernel units for family {u.family!r} on ISA {u.isa!r}")
            if examples_from is not None and not u.examples and not u.examples_reason:
                raise KernelRegistryError(missing_examples(u, examples_from))
            self._units[key] = u
            first = families.setdefault(u.family, u)
            if (first.ops, first.priority) != (u.ops, u.priority):
                raise KernelRegistryError(f"the units of family {u.family!r} disagree on ops or priority")
        self._families: dict[type[Operation], list[str]] = {}
        for family, u in families.items():
            for op_cls in u.ops:
                self._families.setdefault(op_cls, []).append(family)
        for op_cls, names in self._families.items():
            names.sort(key=lambda f: -families[f].priority)
            for a, b in zip(names, names[1:], strict=False):
                if families[a].priority == families[b].priority:
                    raise KernelRegistryError(
                        f"kernel families {a!r} and {b!r} both serve {op_cls.__name__} at priority "
                        f"{families[a].priority}: give them distinct priorities"
                    )

    def unit(self, family: str, isa: str) -> KernelUnit | None:
        return self._units.get((family, isa))

    def units(self) -> list[KernelUnit]:
        return [self._units[k] for k in sorted(self._units)]

    def families(self, op_cls: type[Operation]) -> list[str]:
        """The families serving ``op_cls``, highest priority first."""
        return list(self._families.get(op_cls, ()))

    def first(self, family: str, isas: Sequence[str]) -> KernelUnit | None:
        """The unit of ``family`` on the first of ``isas`` that has one."""
        return next((u for isa in isas if (u := self._units.get((family, isa))) is not None), None)

    def choose(
        self, op: Operation, isas: Sequence[str], prefer: str | None = None
    ) -> tuple[KernelUnit, Lowered]:
        """The highest-priority family with a unit on ``isas`` whose rule accepts ``op``; a
        ``prefer``red family (a tuning result) is tried first, falling back to priority order when
        it does not accept ``op`` so a stale tuning file can never make an op unlowerable."""
        tried = []
        order = self.families(type(op))
        if prefer is not None and prefer in order:
            order = [prefer, *(f for f in order if f != prefer)]
        for family in order:
            unit = self.first(family, isas)
            if unit is None:
                tried.append(f"{family} (no template for ISAs {', '.join(isas)})")
                continue
            lowered = unit.match(op)
            if lowered is None:
                tried.append(f"{family} (does not accept these shapes, dtypes or parameters)")
                continue
            return unit, lowered
        scope = op.attributes.get("scope")
        where = f" in {scope.data}" if isinstance(scope, StringAttr) else ""
        types = ", ".join(str(t) for t in op.operand_types)
        raise LoweringError(
            f"{op_title(op)}{where} ({types}): no kernel on ISAs {', '.join(isas)}; "
            + (f"tried {'; '.join(tried)}" if tried else "no kernel family is registered for this op")
        )

    def of(self, d: K.KernelDefOp) -> KernelUnit:
        """The unit a ``kernel.def`` was made from."""
        u = self._units.get((d.family.data, d.isa.data))
        if u is None:
            raise LoweringError(f"no kernel unit for family {d.family.data!r} on ISA {d.isa.data!r}")
        return u


def missing_examples(u: KernelUnit, examples_from: str) -> str:
    """What a unit without examples must add, in one line."""
    cls = type(u)
    return (
        f"kernel unit {u.family!r} on ISA {u.isa!r} ({cls.__module__}.{cls.__qualname__}) declares no "
        f"examples: add a class attribute `examples = (E.<builder>(...),)` with `import {examples_from} "
        f"as E` (a few small, odd-shaped ops its match() accepts; the conformance harness "
        f"tests/test_kernel_conformance.py runs them against semantics/), or `examples_reason = "
        f'"why it cannot have any"`'
    )


# ----------------------------------------------------------------------------------------------
# IR facts every rule and lowering pass reads


def op_title(op: Operation) -> str:
    """The op's name with its mode where it has one (``mgb.elemwise shl``): errors name both."""
    keyword = getattr(op, "KEYWORD", None)
    if keyword and isinstance(op, T.MgbOp):
        value = op.params().get(keyword)
        if value is not None:
            return f"{op.name} {getattr(value, 'value', value)}"
    return op.name


# ops that become a kernel.view (same bytes, new shape)
VIEW_OPS: tuple[type[Operation], ...] = (T.ReshapeOp, T.AxisAddRemoveOp)


def const_array(v: SSAValue) -> np.ndarray | None:
    """The value of a constant (``mgb.const`` or ``kernel.weight``) with its bytes, else None."""
    op = v.owner
    if isinstance(op, T.ConstOp | K.WeightOp) and not op.value.is_elided:
        return op.numpy()
    return None


def collapse(
    shape: Sequence[int], strides: Sequence[Sequence[int]]
) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Merge adjacent dimensions that every operand walks contiguously (or all broadcast), and drop
    size-1 dimensions: fewer, longer loops. ``strides`` are in elements, one row per operand."""
    dims = [(d, [s[i] for s in strides]) for i, d in enumerate(shape) if d != 1]
    if not dims:
        return (1,), tuple((0,) for _ in strides)
    out: list[tuple[int, list[int]]] = [dims[0]]
    for d, st in dims[1:]:
        pd, pst = out[-1]
        if all(ps == s * d for ps, s in zip(pst, st, strict=True)):
            out[-1] = (pd * d, st)
        else:
            out.append((d, st))
    return tuple(d for d, _ in out), tuple(tuple(st[i] for _, st in out) for i in range(len(strides)))


def broadcast_strides(in_shape: Sequence[int], out_shape: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a row-major ``in_shape`` read at each index of ``out_shape`` (0: broadcast)."""
    nd = len(out_shape)
    shape = (1,) * (nd - len(in_shape)) + tuple(in_shape)
    strides = [0] * nd
    acc = 1
    for i in range(nd - 1, -1, -1):
        strides[i] = 0 if shape[i] == 1 and out_shape[i] != 1 else acc
        acc *= shape[i]
    return tuple(strides)


__all__ = [
    "ACTIVATIONS",
    "FULL_EPILOGUE",
    "VIEW_OPS",
    "EpilogueSupport",
    "KernelRegistry",
    "KernelRegistryError",
    "KernelUnit",
    "Lowered",
    "LoweringError",
    "broadcast_strides",
    "collapse",
    "const_array",
    "op_title",
    "shape",
]
