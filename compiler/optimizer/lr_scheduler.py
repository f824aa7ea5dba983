"""Learning-rate schedulers (MegEngine's ``LRScheduler`` and ``MultiStepLR``): each ``step()``
sets every parameter group's ``lr`` from the epoch count."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from typing import Any

from compiler.optimizer.optimizer import Optimizer


class LRScheduler:
    """The base: remembers each group's ``initial_lr`` and, at every ``step``, writes ``get_lr()``."""

    def __init__(self, optimizer: Optimizer, current_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError("optimizer argument given to the lr_scheduler should be Optimizer")
        self.optimizer = optimizer
        self.current_epoch = current_epoch
        if current_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(
                        f"param 'initial_lr' is not specified in param_groups[{i}] when resuming an optimizer"
                    )
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.step()

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        raise NotImplementedError

    def get_lr(self) -> list[float]:
        raise NotImplementedError

    def step(self, epoch: int | None = None) -> None:
        self.current_epoch = self.current_epoch + 1 if epoch is None else epoch
        for group, lr in zip(self.optimizer.param_groups, self.get_lr(), strict=False):
            group["lr"] = lr


class MultiStepLR(LRScheduler):
    """The learning rate times ``gamma`` once for each milestone epoch reached."""

    _KEYS = ("milestones", "gamma", "current_epoch")

    def __init__(
        self, optimizer: Optimizer, milestones: Iterable[int], gamma: float = 0.1, current_epoch: int = -1
    ) -> None:
        milestones = list(milestones)
        if milestones != sorted(milestones):
            raise ValueError(f"Milestones should be a list of increasing integers. Got {milestones}")
        self.milestones = milestones
        self.gamma = gamma
        super().__init__(optimizer, current_epoch)

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k in self._KEYS}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for key in self._KEYS:
            if key not in state_dict:
                raise KeyError(f"key '{key}'' is not specified in state_dict when loading state dict")
        self.__dict__.update({k: state_dict[k] for k in self._KEYS})

    def get_lr(self) -> list[float]:
        return [lr * self.gamma ** bisect_right(self.milestones, self.current_epoch) for lr in self.base_lrs]
