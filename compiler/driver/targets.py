"""Compilation targets for the user API: ``ARCH[-FEATURE...][+OPTION...]`` strings (see
:mod:`backends.targets` for the grammar, the architectures and their backends; :class:`Target` itself
lives in :mod:`passes.target`, below the passes that read it)."""

from __future__ import annotations

from backends.targets import ARCHES, OPTIONS, cpu_flags, host_target, parse_target, runs_here
from passes.target import LAYOUT_FEATURES, Target, TargetError

__all__ = [
    "ARCHES",
    "LAYOUT_FEATURES",
    "OPTIONS",
    "Target",
    "TargetError",
    "cpu_flags",
    "host_target",
    "parse_target",
    "runs_here",
]
