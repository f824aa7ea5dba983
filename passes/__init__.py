"""Rewrite patterns and module passes over the xmge dialects, the pass registry and plugin discovery."""

from passes.registry import (
    BUILTIN_PASSES,
    ENTRY_POINT_GROUP,
    PassTable,
    PluginError,
    builtin_passes,
    describe,
    describe_options,
    entry_point_passes,
    load_plugin,
)

__all__ = [
    "BUILTIN_PASSES",
    "ENTRY_POINT_GROUP",
    "PassTable",
    "PluginError",
    "builtin_passes",
    "describe",
    "describe_options",
    "entry_point_passes",
    "load_plugin",
]
