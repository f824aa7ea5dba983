"""MegEngine's ``megengine.core.ops``: ``builtin`` holds the operator descriptions (OpDefs)."""
