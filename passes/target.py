"""The compilation target as the passes see it: a value (architecture, features, options, the ISA search
order, the activation layout, the ``optimize_for_inference`` options it implies) and the backend object
that compiles for it.

Targets are parsed and their backends defined in :mod:`backends.targets` (the layer above); passes
only read a :class:`Target`. A pass whose option is the textual form (``xmge-opt -p
kernel-select{target=x86-avx2}``) turns it into a :class:`Target` with :func:`resolve_target`, which
calls the one parser the backends layer installs (:func:`install_parser`), so nothing here imports a
backend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from dialects.errors import XmgeError

if TYPE_CHECKING:
    from passes.lowering.kernels import KernelRegistry

# features that name the activation layout (at most one per target)
LAYOUT_FEATURES = ("nchw88", "nchw44", "nchw4", "nchw32", "chwn4", "nchw64")


class TargetError(XmgeError, ValueError):
    """A target string that does not parse or names something unknown."""


class BackendError(XmgeError, ValueError):
    """What a backend cannot do (sanitize under an emulator, save a model it never built, ...)."""


class KernelTime(NamedTuple):
    """One kernel call of a profiled run: the model's name of the operator it computes (a call
    lowering added is named by its kernel family in parentheses), the kernel symbol and family, ms
    per run."""

    layer: str
    kernel: str
    family: str
    ms: float


class Backend(Protocol):
    """What compiles and runs code for a target. ``compile()`` calls these and nothing else.

    ``kernels`` is the backend's kernel registry (``None``: the backend runs the tensor dialect
    itself, no kernel passes). ``artifact`` below is the backend's own build result (``None`` where
    ``kernels`` is ``None``); ``model`` is the compiled model (stages, weights, I/O types)."""

    name: str
    options: tuple[str, ...]  # target options this backend implements
    kernels: KernelRegistry | None
    emulated: bool  # runs through an emulator: results exact, timings meaningless

    def isas(self, features: Sequence[str], options: Sequence[str]) -> tuple[str, ...]: ...

    def inference_options(self, features: Sequence[str], options: Sequence[str]) -> dict[str, bool]: ...

    def runs_here(self, target: Target) -> bool: ...

    def emit(self, target: Target, module: Any, *, profile: bool = False) -> tuple[str, tuple[str, ...]]: ...

    def build(self, target: Target, source: str, cflags: Sequence[str], *, sanitize: bool = False) -> Any: ...

    def load(self, artifact: Any, weights: bytes, threads: int) -> Any: ...

    def run(self, model: Any, inputs: Sequence[Any]) -> list[Any]: ...

    def profile(self, model: Any, inputs: Sequence[Any], iters: int) -> list[KernelTime]:
        """Every kernel call's time, in the order a run makes the calls."""
        ...

    def save(self, model: Any, directory: str) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Target:
    """``ARCH[-FEATURE...][+OPTION...]`` with everything derived from it. Two targets are equal when
    their strings are; ``backend`` is ``None`` for an architecture whose backend is not written yet."""

    arch: str
    features: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    isas: tuple[str, ...] = ()  # template ISAs in order of preference (empty: no code generation)
    dump_options: tuple[str, ...] = ()  # optimize_for_inference options (``enable_nchw88``, ...)
    backend: Backend | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return self.arch + "".join("-" + f for f in self.features) + "".join("+" + o for o in self.options)

    @property
    def layout(self) -> str:
        return next((f for f in self.features if f in LAYOUT_FEATURES), "nchw")

    def inference_options(self) -> dict[str, bool]:
        """MegEngine's ``optimize_for_inference`` options this target compiles with (layout and
        float16 mode)."""
        return dict.fromkeys(self.dump_options, True)

    @property
    def float16(self) -> bool:
        return bool({"enable_ioc16", "enable_io16xc32"} & set(self.dump_options))

    @property
    def kernels(self) -> KernelRegistry:
        """The kernel registry of the target's backend (a :class:`TargetError` if it has none)."""
        registry = self.backend.kernels if self.backend is not None else None
        if registry is None:
            raise TargetError(f"target {self} does not generate kernels")
        return registry


def float16_options(features: Sequence[str], options: Sequence[str]) -> dict[str, bool]:
    """The float16 mode a target's words ask for: ``+io16xc32`` stores float16 and computes in
    float32; ``+ioc16`` (or an ``fp16`` feature) stores and computes in float16."""
    if "io16xc32" in options:
        return {"enable_io16xc32": True}
    if "fp16" in features or "ioc16" in options:
        return {"enable_ioc16": True}
    return {}


_parser: Callable[[str], Target] | None = None


def install_parser(parse: Callable[[str], Target]) -> None:
    """Called by the backends layer with its target parser (the one place strings become targets)."""
    global _parser
    _parser = parse


def resolve_target(target: Target | str) -> Target:
    """A :class:`Target` from a pass option (an object already, or its textual form)."""
    if isinstance(target, Target):
        return target
    if _parser is None:
        raise TargetError(
            f"cannot parse target {target!r}: no backends are loaded (import backends.targets first)"
        )
    return _parser(target)


__all__ = [
    "LAYOUT_FEATURES",
    "Backend",
    "BackendError",
    "Target",
    "TargetError",
    "float16_options",
    "install_parser",
    "resolve_target",
]
