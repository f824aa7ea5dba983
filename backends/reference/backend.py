"""The reference backend: no code generation, the numpy interpreter runs the tensor dialect."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from passes.target import BackendError, KernelTime, Target, float16_options
from semantics.interpreter import run_module


class ReferenceBackend:
    name = "reference"
    options: tuple[str, ...] = ()
    kernels = None
    emulated = False

    def isas(self, features: Sequence[str], options: Sequence[str]) -> tuple[str, ...]:
        return ()

    def inference_options(self, features: Sequence[str], options: Sequence[str]) -> dict[str, bool]:
        return float16_options(features, options)

    def runs_here(self, target: Target) -> bool:
        return True

    def emit(self, target: Target, module: Any, *, profile: bool = False) -> tuple[str, tuple[str, ...]]:
        raise BackendError(f"target {target} generates no code")

    def build(self, target: Target, source: str, cflags: Sequence[str], *, sanitize: bool = False) -> Any:
        raise BackendError(f"target {target} builds nothing")

    def load(self, artifact: Any, weights: bytes, threads: int) -> Any:
        raise BackendError("the reference backend loads no library")

    def run(self, model: Any, inputs: Sequence[Any]) -> list[Any]:
        return [np.asarray(o) for o in run_module(model.final_module(), list(inputs))]

    def profile(self, model: Any, inputs: Sequence[Any], iters: int) -> list[KernelTime]:
        raise BackendError(f"target {model.target} has no kernels to profile")

    def save(self, model: Any, directory: str) -> dict[str, Any]:
        raise BackendError(f"target {model.target} produces no files to save")


REFERENCE = ReferenceBackend()
