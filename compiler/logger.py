"""MegEngine's ``megengine.logger``: the ``megengine`` family of Python loggers, with
``get_logger``, ``set_log_level``, ``set_log_file`` and ``enable_debug_log``."""

from __future__ import annotations

import logging
import sys
from typing import IO, Any

__all__ = ["enable_debug_log", "get_logger", "set_log_file", "set_log_level"]

_ROOT = "megengine"
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_handlers: list[logging.Handler] = []


def _root() -> logging.Logger:
    logger = logging.getLogger(_ROOT)
    if not _handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_FORMAT, "%m-%d %H:%M:%S"))
        logger.addHandler(handler)
        logger.propagate = False
        logger.setLevel(logging.INFO)
        _handlers.append(handler)
    return logger


def get_logger(name: str | None = None, formatter: Any = None) -> logging.Logger:
    """The logger ``name`` under MegEngine's root logger (the root itself for None)."""
    root = _root()
    if name is None or name == _ROOT:
        return root
    return root.getChild(name[len(_ROOT) + 1 :] if name.startswith(_ROOT + ".") else name)


def set_log_level(level: int | str, update_existing: bool = True) -> None:
    """Set the level of MegEngine's loggers (``logging.INFO``, ``"DEBUG"``, ...)."""
    if isinstance(level, str):
        level = logging.getLevelName(level.upper())
    if not isinstance(level, int):
        raise ValueError(f"unknown log level {level!r}")
    root = _root()
    root.setLevel(level)
    if update_existing:
        for name, logger in logging.Logger.manager.loggerDict.items():
            if isinstance(logger, logging.Logger) and name.startswith(_ROOT + "."):
                logger.setLevel(level)


def set_log_file(fout: str | IO[str], mode: str = "a") -> None:
    """Also write MegEngine's log records to ``fout`` (a path or an open text file)."""
    handler: logging.Handler
    handler = logging.FileHandler(fout, mode) if isinstance(fout, str) else logging.StreamHandler(fout)
    handler.setFormatter(logging.Formatter(_FORMAT, "%m-%d %H:%M:%S"))
    _root().addHandler(handler)


def enable_debug_log() -> None:
    set_log_level(logging.DEBUG)
