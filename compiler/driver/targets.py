"""Compilation targets for the user API: ``ARCH[-FEATURE...][+OPTION...]`` strings (see
:mod:`backends.targets` for the grammar, the architectures and their backends; :class:`Target` itself
lives in :mod:`passes.target`, below the passes that read it)."""

from __future__ import annotations

# this module re-exports backends.targets' public names (its __all__ is the one list of them)
from backends.targets import *  # noqa: F403
from backends.targets import __all__ as _backend_names
from passes.target import LAYOUT_FEATURES as LAYOUT_FEATURES

__all__ = [*_backend_names, "LAYOUT_FEATURES"]
