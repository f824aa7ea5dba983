"""Whether this process may use AMX tile data: Linux grants the XTILEDATA state component only to a
process that asks for it (``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``; without it the
first tile instruction is SIGILL). The generated kernels ask the same question in C
(``backends/c/templates/x86/x86_amx.py``: ``xm_amx_ready``); this is the compile side's copy, which
``backends/targets.py: host_target`` reads before it names the ``amx`` feature.

``XMGE_AMX=0`` in the environment answers no on both sides (the kernels then run their AVX512-VNNI
path): the switch for comparing the two paths, and for machines whose kernel misbehaves."""

from __future__ import annotations

import ctypes
import os
import platform
from functools import cache

AMX_ENV = "XMGE_AMX"
SYS_ARCH_PRCTL = 158  # x86-64
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18


def amx_disabled_by_environment() -> bool:
    return os.environ.get(AMX_ENV, "").strip().lower() in ("0", "off", "no", "false")


@cache
def _kernel_grants_tile_data() -> bool:
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        args = (SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
        request = libc.syscall(*(ctypes.c_long(a) for a in args))
    except (OSError, AttributeError):
        return False
    return request == 0


def amx_permitted() -> bool:
    """Whether the kernel grants this process AMX tile data (asked once) and ``XMGE_AMX`` allows it."""
    return not amx_disabled_by_environment() and _kernel_grants_tile_data()
