"""``amp.GradScaler``: loss scaling for mixed-precision training (MegEngine's rules)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from compiler.tensor import Tensor


class GradScaler:
    """Multiplies the output gradient by ``scale_factor`` before backward, divides the parameters'
    gradients by it afterwards, and adapts it: after ``growth_interval`` steps without a non-finite
    gradient it grows by ``growth_factor``; a non-finite gradient drops that step's gradients and
    shrinks it by ``backoff_factor``. ``growth_interval=0`` keeps the scale fixed (and never drops
    gradients)."""

    def __init__(
        self,
        init_scale: float = 2.0**4,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
    ) -> None:
        self.scale_factor = float(init_scale)
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = growth_interval
        self._growth_tracker = 0
        self._found_non_finite = False

    def backward(
        self,
        gm: Any,
        y: Tensor | list[Tensor] | None = None,
        dy: Tensor | list[Tensor] | None = None,
        *,
        unscale_grad: bool = True,
        update_scale: bool | str = "if_unscale_grad",
    ) -> None:
        """``gm.backward`` with the output gradients scaled; then (``unscale_grad``) the attached
        tensors' gradients unscaled and (``update_scale``) the scale updated."""
        import compiler.functional as F

        ys = [] if y is None else list(y) if isinstance(y, tuple | list) else [y]
        if dy is None:
            dys = [F.full_like(t, self.scale_factor) for t in ys]
        elif isinstance(dy, tuple | list):
            dys = [d * self.scale_factor for d in dy]
        else:
            dys = [dy * self.scale_factor]
        gm.backward(y=ys, dy=dys)
        if unscale_grad:
            self.unscale(gm.attached_tensors())
            if update_scale:
                self.update()

    def unscale(self, grad_tensors: Iterable[Tensor]) -> GradScaler:
        """Divide the gradients of ``grad_tensors`` by the scale; if any is non-finite, drop them all
        (set to None) and remember it for :meth:`update`."""
        tensors = [t for t in grad_tensors if t is not None and getattr(t, "grad", None) is not None]
        inv = 1.0 / self.scale_factor
        if self.growth_interval == 0:
            for t in tensors:
                t.grad = t.grad * Tensor(inv)
            return self
        finite = True
        for t in tensors:
            g = t.grad
            scaled = Tensor._from_array(np.asarray(g._data * np.asarray(inv, np.float32), dtype=g.dtype))
            finite = finite and bool(np.isfinite(scaled._data).all())
            t.grad = scaled
        if not finite:
            self._found_non_finite = True
            for t in tensors:
                t.grad = None
        return self

    def update(self, new_scale: float | None = None) -> None:
        """Adapt the scale (or set it to ``new_scale``)."""
        if self.growth_interval == 0:
            return
        if new_scale is not None:
            self.scale_factor = float(new_scale)
        elif self._found_non_finite:
            self.scale_factor *= self.backoff_factor
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker >= self.growth_interval:
                self.scale_factor *= self.growth_factor
                self._growth_tracker = 0
        self._found_non_finite = False

    def state_dict(self) -> dict[str, Any]:
        return {
            "scale_factor": self.scale_factor,
            "growth_factor": self.growth_factor,
            "backoff_factor": self.backoff_factor,
            "growth_interval": self.growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scale_factor = state["scale_factor"]
        self.growth_factor = state["growth_factor"]
        self.backoff_factor = state["backoff_factor"]
        self.growth_interval = state["growth_interval"]
        self._growth_tracker = state["_growth_tracker"]
