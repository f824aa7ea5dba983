"""MegEngine's ``megengine.device``: which devices exist and which one tensors default to.

xmge computes eagerly on the host CPU (the reference kernels); generated CUDA code runs only through
``compile(target="cuda...")``. So the one device family here is the CPU: ``cpu0``, ``cpux``,
``xpux`` (MegEngine's "any device", which is the CPU when no GPU is used) and ``multithreadN``.
Asking for a GPU device as the default is an error naming the device, as on a MegEngine build
without CUDA. Memory statistics report the process's host memory.
"""

from __future__ import annotations

import os
import re
import threading

from dialects.errors import XmgeError

__all__ = [
    "coalesce_free_memory",
    "get_allocated_memory",
    "get_cuda_compute_capability",
    "get_cuda_device_property",
    "get_cuda_driver_version",
    "get_cuda_version",
    "get_cudnn_version",
    "get_default_device",
    "get_device_count",
    "get_max_allocated_memory",
    "get_max_reserved_memory",
    "get_mem_status_bytes",
    "get_reserved_memory",
    "get_tensorrt_version",
    "is_atlas_available",
    "is_cambricon_available",
    "is_cuda_available",
    "is_rocm_available",
    "reset_max_memory_stats",
    "set_default_device",
    "set_prealloc_config",
    "what_is_xpu",
]

_DEVICE = re.compile(r"^([cxg]pu|rocm|multithread|cambricon|atlas)(x|\d+)(:\d+)?$")
_DEVICE_TYPES = ("cpu", "gpu", "xpu", "rocm", "cambricon", "atlas")
_lock = threading.Lock()
_default_device = os.environ.get("MGE_DEFAULT_DEVICE", "xpux")


class DeviceError(XmgeError, RuntimeError, ValueError):
    """A device name xmge cannot use (MegEngine raises RuntimeError/AssertionError here too)."""


def _valid_device(name: object) -> bool:
    return isinstance(name, str) and _DEVICE.match(name) is not None


def _device_type(name: str) -> str:
    m = _DEVICE.match(name)
    assert m is not None
    return m.group(1)


def _logical(name: str) -> str:
    return name if ":" in name else name + ":0"


class CompNode:
    """A tensor's device, as MegEngine's ``CompNode``: ``str()`` is the logical name (``xpux:0``,
    ``cpu0:0``), and it equals a device name that has that logical name, with or without ``:0``.
    Every device here is the host CPU (``physical_name`` says which)."""

    __slots__ = ("logical_name",)

    def __init__(self, name: str | CompNode = "xpux") -> None:
        self.logical_name = name.logical_name if isinstance(name, CompNode) else _logical(device_name(name))

    @property
    def physical_name(self) -> str:
        kind, rest = _DEVICE.match(self.logical_name).group(1, 2)  # type: ignore[union-attr]
        index = "0" if rest == "x" else rest
        return f"cpu{index}:0" if kind in ("xpu", "cpu") else self.logical_name

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CompNode):
            return self.logical_name == other.logical_name
        if isinstance(other, str) and _valid_device(other):
            return self.logical_name == _logical(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.logical_name)

    def __str__(self) -> str:
        return self.logical_name

    def __repr__(self) -> str:
        return f'CompNode("{self.physical_name}" from "{self.logical_name}")'


# MegEngine's short forms: "cpu:1" is device 0 with stream 1 ("cpu0:1"); a bare "xpu" is "xpux"
_NO_NUMBER = re.compile(r"^([cxg]pu|rocm|multithread|cambricon|atlas)(:\d+)$")


def device_name(device: object) -> str:
    """``device`` (a name or a CompNode) as a checked device name; MegEngine raises ValueError here."""
    if isinstance(device, CompNode):
        return device.logical_name
    if device == "xpu":
        device = "xpux"
    elif isinstance(device, str) and (short := _NO_NUMBER.match(device)):
        device = f"{short.group(1)}0{short.group(2)}"
    if not _valid_device(device):
        raise DeviceError(
            f"invalid device name {device!r}: expected a name such as 'xpux', 'cpu0' or 'cpu0:0' "
            "(see megengine.device.set_default_device)"
        )
    return str(device)


def get_device_count(device_type: str) -> int:
    """Number of devices of ``device_type`` ('cpu', 'gpu', 'xpu', ...) on this system: the CPUs
    for 'cpu' and 'xpu', none of the accelerator kinds (xmge runs eagerly on the host)."""
    assert device_type in _DEVICE_TYPES, f"device must be one of {set(_DEVICE_TYPES)}"
    if device_type in ("cpu", "xpu"):
        return os.cpu_count() or 1
    return 0


def is_cuda_available() -> bool:
    """Whether tensors can live on a CUDA device: never in xmge (CUDA is a compile target)."""
    return False


def is_cambricon_available() -> bool:
    return False


def is_atlas_available() -> bool:
    return False


def is_rocm_available() -> bool:
    return False


def what_is_xpu() -> str:
    """The device type 'xpu' stands for here: 'cpu'."""
    return "cpu"


def set_default_device(device: str = "xpux") -> None:
    """Set the default device (``cpu0``, ``cpux``, ``xpux``, ``multithread4``, ...; also read from
    ``MGE_DEFAULT_DEVICE``). A GPU or other accelerator is refused: there is none to compute on."""
    assert _valid_device(device), f"Invalid device name {device}"
    kind = _device_type(device)
    if kind not in ("cpu", "xpu", "multithread"):
        raise DeviceError(
            f"set_default_device({device!r}): xmge computes on the CPU only ({kind} is not available)"
        )
    global _default_device
    with _lock:
        _default_device = device


def get_default_device() -> str:
    """The device set by :func:`set_default_device` (default ``xpux``)."""
    return _default_device


def _check(device: str | None) -> str:
    name = get_default_device() if device is None else device
    if not _valid_device(name):
        raise DeviceError(f"Invalid device name {name}")
    if _device_type(name) not in ("cpu", "xpu", "multithread"):
        raise DeviceError(f"device {name} is not available: xmge computes on the CPU only")
    return name


def get_mem_status_bytes(device: str | None = None) -> tuple[int, int]:
    """(total, free) host memory in bytes."""
    _check(device)
    pages = os.sysconf("SC_PHYS_PAGES")
    size = os.sysconf("SC_PAGE_SIZE")
    avail = os.sysconf("SC_AVPHYS_PAGES")
    return pages * size, avail * size


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _peak_rss_bytes() -> int:
    import resource

    # the kernel updates ru_maxrss lazily: never report a peak below what is held now
    return max(int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, _rss_bytes())


def get_allocated_memory(device: str | None = None) -> int:
    """Bytes the process holds now (resident set)."""
    _check(device)
    return _rss_bytes()


def get_reserved_memory(device: str | None = None) -> int:
    _check(device)
    return _rss_bytes()


def get_max_allocated_memory(device: str | None = None) -> int:
    """The most bytes the process has held (peak resident set)."""
    _check(device)
    return _peak_rss_bytes()


def get_max_reserved_memory(device: str | None = None) -> int:
    _check(device)
    return _peak_rss_bytes()


def reset_max_memory_stats(device: str | None = None) -> None:
    """The peak is the kernel's figure for the process; it cannot be reset (a no-op, as documented)."""
    _check(device)


def set_prealloc_config(
    alignment: int = 1,
    min_req: int = 32 * 1024 * 1024,
    max_overhead: int = 0,
    growth_factor: float = 2.0,
    device_type: str = "gpu",
) -> None:
    """MegEngine's allocator tuning for accelerators; xmge allocates host memory with numpy, so the
    values are only checked."""
    assert alignment > 0 and min_req > 0 and max_overhead >= 0 and growth_factor >= 1


def coalesce_free_memory() -> None:
    """Return cached free blocks to the system: numpy returns memory as arrays die, so nothing to do."""


def _no_cuda(what: str) -> DeviceError:
    return DeviceError(f"{what}: no CUDA device (xmge computes on the CPU; CUDA is a compile target)")


def get_cuda_compute_capability(device: int, device_type: str = "gpu") -> int:
    raise _no_cuda("get_cuda_compute_capability")


def get_cuda_device_property(device: int, device_type: str = "gpu") -> object:
    raise _no_cuda("get_cuda_device_property")


def get_cuda_version() -> int:
    raise _no_cuda("get_cuda_version")


def get_cudnn_version() -> int:
    raise _no_cuda("get_cudnn_version")


def get_tensorrt_version() -> int:
    raise _no_cuda("get_tensorrt_version")


def get_cuda_driver_version() -> int:
    raise _no_cuda("get_cuda_driver_version")
