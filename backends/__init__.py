"""Backends: ``reference`` (numpy interpreter), ``mge`` (.mge reader and writer), ``c``, ``cuda``."""
