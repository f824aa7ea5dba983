"""The table of every kernel unit of the code-generating backends (``xmge-opt --list-kernels``): backend,
family, ISA, priority, the ops it serves and the file that defines it. It is read off the registries,
so it is the one account of which family ``kernel-select`` tries first for an op (higher priority
first; families of different layouts or element types never accept the same op)."""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass

from passes.lowering.kernels import KernelRegistry

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class KernelRow:
    backend: str
    family: str
    isa: str
    priority: int
    ops: tuple[str, ...]
    file: str


def registries() -> dict[str, KernelRegistry]:
    from backends.c.kernels import KERNELS as C_KERNELS
    from backends.cuda.kernels import KERNELS as CUDA_KERNELS

    return {"c": C_KERNELS, "cuda": CUDA_KERNELS}


def _file(obj: object) -> str:
    path = inspect.getsourcefile(type(obj)) or "?"
    return os.path.relpath(path, _ROOT) if path.startswith(_ROOT) else path


def kernel_rows() -> list[KernelRow]:
    """Every unit, by backend, then priority (highest first), family and ISA."""
    rows = [
        KernelRow(backend, u.family, u.isa, u.priority, tuple(op.name for op in u.ops), _file(u))
        for backend, registry in registries().items()
        for u in registry.units()
    ]
    return sorted(rows, key=lambda r: (r.backend, -r.priority, r.family, r.isa))


def format_kernel_table(rows: list[KernelRow]) -> str:
    header = ("backend", "family", "isa", "priority", "file", "ops")
    cells = [header, *((r.backend, r.family, r.isa, str(r.priority), r.file, " ".join(r.ops)) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header) - 1)]
    lines = ["  ".join([*(c[i].ljust(widths[i]) for i in range(len(widths))), c[-1]]).rstrip() for c in cells]
    return "\n".join(lines) + "\n"
