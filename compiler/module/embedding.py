"""MegEngine's ``module.embedding``: a lookup table of ``num_embeddings`` vectors."""

from __future__ import annotations

from typing import Any

import numpy as np

import compiler.functional as F
from compiler.core import op_error
from compiler.module.module import Module
from compiler.tensor import Parameter, Tensor


class Embedding(Module):
    """``weight`` (num_embeddings, embedding_dim) drawn from N(0, 1) as in MegEngine, or taken from
    ``initial_weight``; ``forward(ids)`` gives ids.shape + (embedding_dim,)."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float | None = None,
        initial_weight: Any = None,
        freeze: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(kwargs.get("name"))
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx, self.max_norm, self.norm_type, self.freeze = (
            padding_idx,
            max_norm,
            norm_type,
            freeze,
        )
        if initial_weight is None:
            from compiler.random import generator

            w = generator().normal(0.0, 1.0, (num_embeddings, embedding_dim)).astype(np.float32)
        else:
            w = np.asarray(initial_weight.numpy() if isinstance(initial_weight, Tensor) else initial_weight)
            if w.shape != (num_embeddings, embedding_dim):
                raise op_error(
                    "Embedding",
                    f"initial_weight has shape {w.shape}, expected ({num_embeddings}, {embedding_dim})",
                )
        self.weight = Parameter(w.astype(np.float32))

    def forward(self, inputs: Tensor) -> Tensor:
        weight = self.weight.detach() if self.freeze else self.weight
        return F.nn.embedding(inputs, weight, self.padding_idx, self.max_norm, self.norm_type)

    @classmethod
    def from_pretrained(
        cls,
        embeddings: Any,
        freeze: bool = True,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float | None = None,
    ) -> Embedding:
        w = embeddings.numpy() if isinstance(embeddings, Tensor) else np.asarray(embeddings)
        if w.ndim != 2:
            raise op_error("Embedding.from_pretrained", f"embeddings must be 2-D, got shape {w.shape}")
        return cls(w.shape[0], w.shape[1], padding_idx, max_norm, norm_type, initial_weight=w, freeze=freeze)


__all__ = ["Embedding"]
