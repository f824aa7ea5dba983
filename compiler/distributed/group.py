"""Process groups of ``megengine.distributed``, for one process.

xmge trains and runs in one process on the CPU: the world is that process (rank 0 of 1). Code
written for MegEngine's data-parallel training runs unchanged: ``get_rank()`` is 0,
``get_world_size()`` is 1, collectives return their input, and ``init_process_group`` accepts a
world of one. A world of more than one process is refused with an error naming the request.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from dialects.errors import XmgeError

_BACKENDS = ("nccl", "rccl", "cncl", "hccl", "auto", "gloo")


class DistributedError(XmgeError, RuntimeError):
    """A distributed setup xmge cannot provide (more than one process)."""


@dataclass
class StaticData:
    master_ip: str
    py_server_port: int
    world_size: int
    proc_rank: int
    device: int
    backend: str
    device_type: str


_sd: StaticData | None = None


class Group:
    """Ranks taking part in a collective; the first is the root. ``WORLD`` is every process."""

    def __init__(self, proc_ranks: list[int]) -> None:
        self.proc_ranks: list[int] | None = None
        if proc_ranks:
            self.reset(proc_ranks)

    def reset(self, proc_ranks: list[int]) -> None:
        self.check(proc_ranks)
        self.proc_ranks = list(proc_ranks)

    def check(self, proc_ranks: list[int]) -> None:
        world = get_world_size()
        for rank in proc_ranks:
            assert isinstance(rank, int), f"rank {rank!r} is not an int"
            assert 0 <= rank < world, f"rank {rank} is outside the world of {world} process(es)"
        assert get_rank() in proc_ranks, "the current process must be in the group"

    def _ranks(self) -> list[int]:
        return self.proc_ranks if self.proc_ranks else list(range(get_world_size()))

    @property
    def size(self) -> int:
        return len(self._ranks())

    @property
    def key(self) -> str:
        return ",".join(map(str, self._ranks()))

    @property
    def rank(self) -> int:
        return self._ranks().index(get_rank())

    @property
    def comp_node(self) -> str:
        return "cpu0"

    @property
    def is_single_machine(self) -> bool:
        return True


WORLD = Group([])


def init_process_group(
    master_ip: str,
    port: int,
    world_size: int,
    rank: int,
    device: int,
    backend: str | None = "auto",
    device_type: str = "xpu",
) -> None:
    """Join the process group. xmge has one process: ``world_size`` must be 1 (rank 0)."""
    for name, value, kind in (
        ("master_ip", master_ip, str),
        ("port", port, int),
        ("world_size", world_size, int),
        ("rank", rank, int),
        ("device", device, int),
    ):
        if not isinstance(value, kind):
            raise TypeError(f"Expect type {kind.__name__} but got {type(value).__name__} for {name}")
    if backend not in _BACKENDS:
        raise ValueError(f"backend should be one of {set(_BACKENDS)} but got {backend}")
    global _sd
    assert _sd is None, "init_process_group should be called only once"
    assert 0 <= rank < world_size, f"rank {rank} is outside the world of {world_size}"
    if world_size != 1:
        raise DistributedError(
            f"init_process_group(world_size={world_size}): xmge runs in one process on the CPU; "
            "only a world of one process is supported"
        )
    _sd = StaticData(master_ip, port, world_size, rank, device, backend or "auto", device_type)
    WORLD.reset([0])


def _reset() -> None:
    """Leave the process group (tests, and the launcher after its function returns)."""
    global _sd
    _sd = None
    WORLD.proc_ranks = None


@contextmanager
def override_backend(new_backend: str) -> Iterator[None]:
    assert _sd is not None, "please call init_process_group first"
    old, _sd.backend = _sd.backend, new_backend
    try:
        yield
    finally:
        _sd.backend = old


def is_distributed() -> bool:
    """Whether ``init_process_group`` has run."""
    return _sd is not None


def get_rank() -> int:
    return _sd.proc_rank if _sd is not None else 0


def get_local_device_id() -> int:
    return _sd.device if _sd is not None else 0


def get_world_size() -> int:
    return _sd.world_size if _sd is not None else 1


def get_backend() -> str:
    assert _sd is not None, "please call init_process_group first"
    return _sd.backend


def get_py_server_addr() -> tuple[str, int]:
    assert _sd is not None, "please call init_process_group first"
    return _sd.master_ip, _sd.py_server_port


def get_mm_server_addr() -> tuple[str, int]:
    assert _sd is not None, "please call init_process_group first"
    return _sd.master_ip, _sd.py_server_port


def new_group(proc_ranks: list[int]) -> Group:
    return Group(proc_ranks)


def group_barrier(group: Group = WORLD) -> None:
    """Wait for every rank of ``group``: with one process there is nobody to wait for."""
    assert isinstance(group, Group)
