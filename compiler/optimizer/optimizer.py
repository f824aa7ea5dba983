"""``Optimizer``: parameter groups, per-parameter state and MegEngine's ``state_dict`` layout.

Updates run in numpy on float32 arrays, outside ``apply``: an optimizer step is not part of the
model's computation, so no recorder (tracer or gradient tape) should see it. Every scalar is made a
float32 before it meets an array so that each update is one fixed sequence of float32 operations;
that is what makes a resumed run reproduce an uninterrupted one bit for bit.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar

import numpy as np

from compiler.tensor import Parameter, Tensor


class _Required:
    def __repr__(self) -> str:
        return "<required parameter>"


required = _Required()


class Optimizer:
    """Base class: ``params`` is an iterable of Parameters or of dicts (parameter groups) with a
    ``"params"`` entry and per-group overrides of ``defaults``."""

    def __init__(
        self, params: Iterable[Parameter] | Iterable[dict[str, Any]], defaults: dict[str, Any]
    ) -> None:
        self._state: dict[Parameter, dict[str, Tensor]] = {}
        self._defaults = defaults
        self.param_groups: list[dict[str, Any]] = []
        if isinstance(params, Tensor | dict):
            params = [params]  # type: ignore[list-item]
        items = list(params)
        if not items:
            raise ValueError("optimizer got an empty parameter list")
        groups = items if isinstance(items[0], dict) else [{"params": items}]
        for group in groups:
            self.add_param_group(group)  # type: ignore[arg-type]

    # -- groups and state ---------------------------------------------------------------------------
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if not isinstance(param_group, dict):
            raise TypeError(f"a parameter group must be a dict, got {type(param_group).__name__}")
        params = param_group["params"]
        if isinstance(params, Parameter):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("parameters must be given in a fixed order (a list), not a set")
        params = list(params)
        for p in params:
            if not isinstance(p, Parameter):
                raise TypeError(f"an optimizer can only optimize Parameters, got {type(p).__name__}")
        group = dict(param_group)
        group["params"] = params
        for name, default in self._defaults.items():
            if default is required and name not in group:
                raise ValueError(f"parameter group needs {name!r}, which has no default")
            group.setdefault(name, default)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)
        self._create_state(group)

    # the per-parameter state a subclass keeps (float32 zeros like the parameter), and whether it
    # counts its steps (a scalar ``step`` state advanced before each update)
    state_names: ClassVar[tuple[str, ...]] = ()
    counts_steps: ClassVar[bool] = False

    def _create_state(self, param_group: dict[str, Any]) -> None:
        """Create the per-parameter state a subclass needs: ``state_names`` and ``step``."""
        for param in param_group["params"]:
            for name in self.state_names:
                self._add_state(param, name)
            if self.counts_steps:
                self._add_state(param, "step", initializer=0.0)

    def _each_gradient(
        self, param_group: dict[str, Any], *, l2: bool = True
    ) -> Iterator[tuple[Parameter, np.ndarray, np.ndarray, dict[str, Tensor]]]:
        """(parameter, its data, its float32 gradient, its state) for every parameter of the group
        that has a gradient, the state's ``step`` advanced first; ``l2``: the group's weight decay
        added to the gradient (``grad + p * weight_decay``)."""
        wd = f32(param_group.get("weight_decay", 0.0))
        for param in param_group["params"]:
            grad = grad_of(param)
            if grad is None:
                continue
            state = self._state.get(param, {})
            if "step" in state:
                state["step"]._data = state["step"]._data + np.float32(1.0)
            p = param._data
            if l2 and wd != 0:
                grad = grad + p * wd
            yield param, p, grad, state

    def _add_state(self, param: Parameter, name: str, initializer: Any = None) -> None:
        value = (
            np.zeros(param.shape, np.float32) if initializer is None else np.asarray(initializer, np.float32)
        )
        state = self._state.setdefault(param, {})
        if name in state:
            raise KeyError(f"optimizer state {name!r} already exists for this parameter")
        state[name] = Tensor(value)

    def _updates(self, param_group: dict[str, Any]) -> None:
        raise NotImplementedError

    # -- training loop API ----------------------------------------------------------------------
    def step(self) -> Optimizer:
        """Update every parameter that has a gradient; returns self (``opt.step().clear_grad()``)."""
        for group in self.param_groups:
            self._updates(group)
        return self

    def clear_grad(self) -> Optimizer:
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None
        return self

    zero_grad = clear_grad  # MegEngine's deprecated name

    # -- checkpoints ------------------------------------------------------------------------------
    def state_dict(self, keep_var: bool = False) -> dict[str, Any]:
        """``{"param_groups": [...], "state": {index: {name: array}}}`` with parameters numbered in
        group order, exactly as MegEngine lays it out (so its checkpoints load here and back)."""
        ids: dict[int, int] = {}
        for group in self.param_groups:
            for p in group["params"]:
                ids.setdefault(id(p), len(ids))
        state: dict[int, dict[str, Any]] = {}
        for p, st in self._state.items():
            state[ids[id(p)]] = {k: (v if keep_var else v.numpy()) for k, v in st.items()}
        groups = []
        for group in self.param_groups:
            saved = {k: copy.deepcopy(v) for k, v in group.items() if k != "params"}
            saved["params"] = [ids[id(p)] for p in group["params"]]
            groups.append(saved)
        return {"param_groups": groups, "state": state}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        saved_groups = state["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(
                f"loaded state has {len(saved_groups)} parameter groups, "
                f"this optimizer has {len(self.param_groups)}"
            )
        for i, (group, saved) in enumerate(zip(self.param_groups, saved_groups, strict=True)):
            if len(group["params"]) != len(saved["params"]):
                raise ValueError(
                    f"parameter group {i} has {len(group['params'])} parameters, "
                    f"the loaded state has {len(saved['params'])}"
                )
            if set(group) != set(saved):
                raise ValueError(
                    f"parameter group {i} has keys {sorted(group)}, the loaded state has {sorted(saved)}"
                )
        for group, saved in zip(self.param_groups, saved_groups, strict=True):
            for p, index in zip(group["params"], saved["params"], strict=True):
                entries = state["state"].get(index)
                if entries is None:
                    continue
                restored = {}
                for k, v in entries.items():
                    arr = v.numpy() if isinstance(v, Tensor) else np.asarray(v)
                    have = self._state.get(p, {}).get(k)
                    if have is not None and have.shape != arr.shape:
                        raise ValueError(
                            f"state {k!r} of parameter {index} has shape {arr.shape}, expected {have.shape}"
                        )
                    restored[k] = Tensor(np.array(arr, dtype=np.float32))
                self._state[p] = restored
            for k in group:
                if k != "params":
                    group[k] = copy.deepcopy(saved[k])


# each hyper-parameter as MegEngine's "invalid ...: value" errors name it
_HYPERPARAMETER_NAMES = {
    "lr": "learning rate",
    "lr_decay": "learning rate decay",
    "momentum": "momentum value",
    "eps": "epsilon value",
    "weight_decay": "weight_decay value",
}


def check_non_negative(**hyperparameters: float) -> None:
    """MegEngine's constructor checks: each hyper-parameter given must be >= 0 (checked in order)."""
    for key, value in hyperparameters.items():
        if value < 0.0:
            raise ValueError(f"invalid {_HYPERPARAMETER_NAMES[key]}: {value}")


def f32(value: float) -> np.float32:
    return np.float32(value)


def grad_of(param: Parameter) -> np.ndarray | None:
    return None if param.grad is None else param.grad._data.astype(np.float32, copy=False)
