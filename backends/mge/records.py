"""Records shared by the ``.mge`` reader, lowering and serialisation (no behaviour of their own)."""

from __future__ import annotations

# Func attributes the reader sets so that a later write reproduces the file (see writer).
ATTR_USER_INFO = "mge.user_info"
ATTR_OPTIMIZE_OPTIONS = "mge.optimize_options"
ATTR_METADATA_VALID = "mge.metadata_valid"
ATTR_FORMAT = "mge.format"
