"""``megengine.distributed`` for one process: MegEngine's data-parallel code imports and runs with a
world of one (rank 0 of 1, collectives return their input, ``launcher`` runs the function here).
Several processes are refused with :class:`DistributedError`; see ``group.py``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from compiler.distributed import functional, group
from compiler.distributed.group import (
    WORLD,
    DistributedError,
    Group,
    get_backend,
    get_local_device_id,
    get_mm_server_addr,
    get_py_server_addr,
    get_rank,
    get_world_size,
    group_barrier,
    init_process_group,
    is_distributed,
    new_group,
    override_backend,
)

__all__ = [
    "WORLD",
    "DistributedError",
    "Group",
    "bcast_list_",
    "functional",
    "get_backend",
    "get_local_device_id",
    "get_mm_server_addr",
    "get_py_server_addr",
    "get_rank",
    "get_world_size",
    "group",
    "group_barrier",
    "init_process_group",
    "is_distributed",
    "launcher",
    "make_allreduce_cb",
    "new_group",
    "override_backend",
    "synchronized",
]


def synchronized(func: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``func`` and then wait for every rank (with one process: just run it)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ret = func(*args, **kwargs)
        if is_distributed():
            group_barrier()
        return ret

    return wrapper


def bcast_list_(inps: list[Any], group: Group = WORLD) -> None:
    """Broadcast tensors from the root in place: with one rank they already hold the root's values."""
    assert group.size == 1


class AllreduceCallback:
    """A GradManager callback summing (or averaging) each gradient over the group's ranks."""

    def __init__(self, reduce_method: str, group: Group = WORLD, backend: str | None = None) -> None:
        method = reduce_method.lower()
        assert method in ("sum", "mean"), "reduce_method should be sum or mean"
        self._reduce_method = method
        self._group = group

    def __call__(self, param: Any, grad: Any) -> Any:
        out = functional.all_reduce_sum(grad, self._group)
        return out / self._group.size if self._reduce_method == "mean" else out


make_allreduce_cb = AllreduceCallback


class launcher:  # noqa: N801 - MegEngine's name
    """Run ``func`` on every device of the world: here, once, in this process as rank 0 of 1
    (``n_gpus``/``world_size`` above 1 are refused). Returns the function's result in a list, one
    entry per rank, like MegEngine's."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if not args:
            return functools.partial(cls, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        func: Callable[..., Any],
        n_gpus: int | None = None,
        world_size: int | None = None,
        rank_start: int = 0,
        master_ip: str = "localhost",
        port: int = 0,
        device_type: str = "xpu",
        backend: str = "auto",
    ) -> None:
        self.func = func
        self.n_gpus = 1 if n_gpus is None else n_gpus
        self.world_size = self.n_gpus if world_size is None else world_size
        if self.n_gpus != 1 or self.world_size != 1 or rank_start != 0:
            raise DistributedError(
                f"launcher(n_gpus={n_gpus}, world_size={world_size}, rank_start={rank_start}): xmge runs one "
                "process on the CPU"
            )
        self.master_ip, self.port, self.device_type, self.backend = master_ip, port, device_type, backend
        functools.update_wrapper(self, func)

    def __call__(self, *args: Any, **kwargs: Any) -> list[Any]:
        started = not is_distributed()
        if started:
            init_process_group(self.master_ip, self.port, 1, 0, 0, self.backend, self.device_type)
        try:
            return [self.func(*args, **kwargs)]
        finally:
            if started:
                group._reset()
