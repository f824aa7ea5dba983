"""MegEngine's ``module.multiheadattn``: :class:`MultiHeadAttention`, the module form of
:func:`compiler.functional.nn.multi_head_attention` with MegEngine's packed ``io_weight_bias``."""

from __future__ import annotations

from typing import Any

import numpy as np

from compiler.core import op_error
from compiler.functional.attention import multi_head_attention
from compiler.module.init import xavier_uniform_
from compiler.module.module import Module
from compiler.tensor import Parameter, Tensor

__all__ = ["MultiHeadAttention"]


class MultiHeadAttention(Module):
    """Multi-head attention over ``embed_dim`` split across ``num_heads`` heads. One parameter,
    ``io_weight_bias`` (1, (2 * embed_dim + kdim + vdim) * embed_dim [+ 4 * embed_dim with
    ``bias``]), holds the query, key, value and output projections (``x @ W``, W (in, out)) then
    their biases; it starts Xavier-uniform with zero biases, as MegEngine's. ``add_bias_kv`` adds
    the ``bias_k``/``bias_v`` parameters (1, 1, embed_dim). As in MegEngine 1.13,
    ``reset_parameters`` (run by the constructor) sets ``attn_dropout`` and ``out_dropout`` to 0;
    assign them afterwards to train with dropout."""

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        attn_dropout: float = 0.0,
        out_dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(kwargs.get("name"))
        if num_heads < 1 or embed_dim % num_heads:
            raise op_error(
                "MultiHeadAttention",
                f"embed_dim must be divisible by num_heads, got {embed_dim} and {num_heads}",
            )
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self.add_bias_kv = add_bias_kv
        self.add_zero_attn = add_zero_attn
        self.num_heads = num_heads
        self.attn_dropout = attn_dropout
        self.out_dropout = out_dropout
        self.head_dim = embed_dim // num_heads
        self.bias = bias
        self.weight_bias_len = (2 * embed_dim + self.kdim + self.vdim) * embed_dim + (
            4 * embed_dim if bias else 0
        )
        self.io_weight_bias = Parameter(np.zeros((1, self.weight_bias_len), np.float32))
        self.bias_k: Parameter | None = None
        self.bias_v: Parameter | None = None
        if add_bias_kv:
            self.bias_k = Parameter(np.zeros((1, 1, embed_dim), np.float32))
            self.bias_v = Parameter(np.zeros((1, 1, embed_dim), np.float32))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.attn_dropout = 0.0
        self.out_dropout = 0.0
        xavier_uniform_(self.io_weight_bias)
        if self.bias:
            weights = (2 * self.embed_dim + self.kdim + self.vdim) * self.embed_dim
            values = self.io_weight_bias.numpy().copy()
            values[0, weights:] = 0
            self.io_weight_bias.set_value(values)
        if self.bias_k is not None and self.bias_v is not None:
            xavier_uniform_(self.bias_k)
            xavier_uniform_(self.bias_v)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        need_weights: bool = False,
        average_attn_weights: bool = False,
        is_causal: bool = False,
        maybe_cudnn_style_mask: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        e = self.embed_dim
        return multi_head_attention(
            query,
            key,
            value,
            e,
            self.num_heads,
            self.attn_dropout,
            self.out_dropout,
            self.io_weight_bias,
            qproj_size=e,
            kproj_size=e,
            vproj_size=e,
            oproj_size=e,
            qbias=self.bias,
            kbias=self.bias,
            vbias=self.bias,
            obias=self.bias,
            bias_k=self.bias_k,
            bias_v=self.bias_v,
            add_zero_attn=self.add_zero_attn,
            training=self.training,
            key_padding_mask=key_padding_mask,
            need_weights=need_weights,
            attn_mask=attn_mask,
            average_attn_weights=average_attn_weights,
            is_causal=is_causal,
            maybe_cudnn_style_mask=maybe_cudnn_style_mask,
        )

    def _module_info_string(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, dropout={self.attn_dropout}, "
            f"bias={self.bias}, kdim={self.kdim}, vdim={self.vdim}"
        )
