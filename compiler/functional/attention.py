"""``F.nn.multi_head_attention``: MegEngine 1.13's multi-head attention, composed of the tensor
dialect's ops (matmul, softmax, elementwise), so its gradient, tracing, ``.mge`` dumps and compiled
kernels follow from theirs and its numerics from their reference kernels.

MegEngine packs every projection in one ``io_weight_bias`` (1, len) tensor, in the order query,
key, value and output weights, then their biases, each weight stored (in_features, out_features)
so that a projection is ``x @ W + b``. Masks are MegEngine's: a bool mask marks positions to
ignore (-inf), a float mask is added to the scores; ``attn_mask`` is (L, S) or (N*num_heads, L, S),
``key_padding_mask`` (N, S). ``is_causal`` is, as in MegEngine, a hint that ``attn_mask`` is causal:
it builds the causal mask only when no mask is given.

MegEngine 1.13 refuses ``bias_k``/``bias_v``, ``add_zero_attn`` and ``reslink`` ("only a cuDNN
implementation"); xmge computes them as documented (``bias_k``/``bias_v`` (1, 1, E) appended to the
projected keys and values along the sequence, then a zero key and value with ``add_zero_attn``; the
masks gain a column of zeros for each; ``reslink`` adds ``query`` to the output). cuDNN-style
(start, end) index masks (``maybe_cudnn_style_mask``) are refused: MegEngine's CPU kernel ignores
them, so no result there could be checked."""

from __future__ import annotations

from typing import Any

import numpy as np

from compiler.core import op_error
from compiler.tensor import Tensor, as_tensor
from semantics.attention import io_weight_layout

__all__ = ["multi_head_attention"]

_LABEL = "multi_head_attention"


def _float_mask(mask: Tensor | None, name: str, dtype: Any) -> Tensor | None:
    """MegEngine's _canonical_mask: a bool mask becomes 0 / -inf of the query's dtype."""
    from compiler.functional.tensor import where

    if mask is None:
        return None
    mask = as_tensor(mask)
    if mask.dtype == np.bool_:
        return where(mask, Tensor(np.array(-np.inf, dtype)), Tensor(np.array(0.0, dtype)))
    if mask.dtype.kind != "f":
        raise op_error(_LABEL, f"only bool and floating types of {name} are supported, got {mask.dtype}")
    return mask


def _check_shapes(
    query: Tensor, key: Tensor, value: Tensor, kpm: Tensor | None, am: Tensor | None, num_heads: int
) -> None:
    """MegEngine's _mha_shape_check for batched (N, L, E) inputs."""
    (n, lq, _), (nk, s, _), (nv, sv, _) = query.shape, key.shape, value.shape
    if not n == nk == nv:
        raise op_error(
            _LABEL,
            f"query, key and value need one batch size, got {n}, {nk} and {nv} (shapes "
            f"{query.shape}, {key.shape}, {value.shape})",
        )
    if s != sv:
        raise op_error(_LABEL, f"key and value need one sequence length, got {s} and {sv}")
    if kpm is not None and kpm.shape != (n, s):
        raise op_error(_LABEL, f"key_padding_mask must be {(n, s)}, got shape {kpm.shape}")
    if am is not None and am.shape not in ((lq, s), (n * num_heads, lq, s)):
        raise op_error(
            _LABEL, f"attn_mask must be {(lq, s)} or {(n * num_heads, lq, s)}, got shape {am.shape}"
        )


def _split_weights(w: Tensor, sizes: list[tuple[str, tuple[int, ...]]]) -> dict[str, Tensor]:
    from compiler.functional.tensor import reshape

    total = sum(int(np.prod(shape)) for _, shape in sizes)
    if w.size != total:
        raise op_error(
            _LABEL,
            f"io_weight_bias has {w.size} values, the projections need {total} "
            f"({', '.join(f'{name} {shape}' for name, shape in sizes)})",
        )
    flat, out, at = reshape(w, (w.size,)), {}, 0
    for name, shape in sizes:
        n = int(np.prod(shape))
        out[name] = reshape(flat[at : at + n], shape)
        at += n
    return out


def multi_head_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    embed_dim: int,
    num_heads: int,
    attn_drop: float,
    out_drop: float,
    io_weight_bias: Tensor | None,
    qproj_size: int | None = None,
    kproj_size: int | None = None,
    vproj_size: int | None = None,
    oproj_size: int | None = None,
    qbias: bool = False,
    kbias: bool = False,
    vbias: bool = False,
    obias: bool = False,
    bias_k: Tensor | None = None,
    bias_v: Tensor | None = None,
    add_zero_attn: bool = False,
    key_padding_mask: Tensor | None = None,
    attn_mask: Tensor | None = None,
    need_weights: bool = False,
    average_attn_weights: bool = False,
    is_causal: bool = False,
    maybe_cudnn_style_mask: bool = False,
    reslink: bool = False,
    training: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """Multi-head attention of ``query`` (N, L, E) over ``key`` (N, S, kdim) / ``value`` (N, S,
    vdim) (or unbatched (L, E) / (S, kdim) / (S, vdim)), with MegEngine's packed ``io_weight_bias``.
    Returns ``(attn_output, attn_weights)``: the output (N, L, oproj_size or the value width) and,
    with ``need_weights``, the softmax weights after attention dropout, (N*num_heads, L, S) or,
    with ``average_attn_weights``, averaged over the heads to (N, L, S); else None."""
    from compiler.functional.math import batch_matmul, matmul, mean
    from compiler.functional.nn import dropout, softmax
    from compiler.functional.tensor import (
        broadcast_to,
        concat,
        expand_dims,
        reshape,
        squeeze,
        transpose,
        zeros,
    )

    query, key, value = as_tensor(query), as_tensor(key), as_tensor(value)
    sizes = [embed_dim if p is None else int(p) for p in (qproj_size, kproj_size, vproj_size, oproj_size)]
    qp, kp, vp, op = sizes
    for flag, size, what in (
        (qbias, qp, "query"),
        (kbias, kp, "key"),
        (vbias, vp, "value"),
        (obias, op, "output"),
    ):
        if flag and size <= 0:
            raise op_error(
                _LABEL, f"when {what} projection bias is true, {what} projection weight must be given"
            )
    if maybe_cudnn_style_mask:
        raise op_error(
            _LABEL,
            "cuDNN-style (start, end) masks are not supported (MegEngine runs them only with cuDNN); "
            "pass (L, S) / (N*num_heads, L, S) attn_mask and (N, S) key_padding_mask instead",
        )
    if num_heads < 1:
        raise op_error(_LABEL, f"num_heads must be positive, got {num_heads}")
    if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
        raise op_error(
            _LABEL,
            "query, key and value must be all batched (3-D) or all unbatched (2-D), got shapes "
            f"{query.shape}, {key.shape}, {value.shape}",
        )
    batched = query.ndim == 3
    if not batched:
        query, key, value = (expand_dims(t, 0) for t in (query, key, value))
        if key_padding_mask is not None:
            key_padding_mask = expand_dims(as_tensor(key_padding_mask), 0)
    kpm = _float_mask(key_padding_mask, "key_padding_mask", query.dtype)
    am = _float_mask(attn_mask, "attn_mask", query.dtype)
    _check_shapes(query, key, value, kpm, am, num_heads)
    n, lq, eq = query.shape
    s, ek, ev = key.shape[1], key.shape[2], value.shape[2]

    # the weights, in MegEngine's packing order
    layout = io_weight_layout(sizes, (qbias, kbias, vbias, obias), (eq, ek, ev))
    w = _split_weights(as_tensor(io_weight_bias), layout) if layout else {}

    def project(x: Tensor, wname: str, bname: str) -> Tensor:
        if wname not in w:
            return x
        y = matmul(x, w[wname])
        return y + w[bname] if bname in w else y

    q, k, v = project(query, "wq", "bq"), project(key, "wk", "bk"), project(value, "wv", "bv")
    if q.shape[-1] != k.shape[-1]:
        raise op_error(_LABEL, f"projected query and key widths differ: {q.shape[-1]} and {k.shape[-1]}")
    if q.shape[-1] % num_heads or v.shape[-1] % num_heads:
        raise op_error(
            _LABEL,
            f"num_heads {num_heads} must divide the projected query/key width {q.shape[-1]} and value "
            f"width {v.shape[-1]}",
        )

    # bias_k / bias_v and a zero key/value extend the source sequence (and the masks with it)
    extra = 0
    if (bias_k is None) != (bias_v is None):
        raise op_error(_LABEL, "bias_k and bias_v must be given together")
    if bias_k is not None and bias_v is not None:
        k = concat([k, broadcast_to(reshape(as_tensor(bias_k), (1, 1, k.shape[-1])), (n, 1, k.shape[-1]))], 1)
        v = concat([v, broadcast_to(reshape(as_tensor(bias_v), (1, 1, v.shape[-1])), (n, 1, v.shape[-1]))], 1)
        extra += 1
    if add_zero_attn:
        k = concat([k, zeros((n, 1, k.shape[-1]), dtype=k.dtype)], 1)
        v = concat([v, zeros((n, 1, v.shape[-1]), dtype=v.dtype)], 1)
        extra += 1
    if extra:
        pad = lambda m: concat([m, zeros((*m.shape[:-1], extra), dtype=m.dtype)], -1)  # noqa: E731
        kpm = None if kpm is None else pad(kpm)
        am = None if am is None else pad(am)
    sk = s + extra

    # MegEngine's _merge_masks: one additive (L, S) or (N*H, L, S) mask
    h = num_heads
    if is_causal and am is None and kpm is None:
        causal = np.triu(np.ones((lq, sk), bool), 1)
        mask: Tensor | None = Tensor(np.where(causal, -np.inf, 0.0).astype(query.dtype))
    elif is_causal and kpm is None:
        mask = am
    elif kpm is None:
        mask = am
    elif am is None:
        mask = reshape(broadcast_to(reshape(kpm, (n, 1, 1, sk)), (n, h, lq, sk)), (n * h, lq, sk))
    elif am.ndim == 2:
        merged = reshape(am + reshape(kpm, (n, 1, sk)), (n, 1, lq, sk))
        mask = reshape(broadcast_to(merged, (n, h, lq, sk)), (n * h, lq, sk))
    else:
        merged = reshape(am, (n, h, lq, sk)) + reshape(kpm, (n, 1, 1, sk))
        mask = reshape(merged, (n * h, lq, sk))

    def heads(x: Tensor, length: int) -> Tensor:
        d = x.shape[-1] // h
        return reshape(transpose(reshape(x, (n, length, h, d)), (0, 2, 1, 3)), (n * h, length, d))

    head_dim = embed_dim if qp == 0 else embed_dim // h
    scale = float(head_dim) ** -0.5
    qh, kh, vh = heads(q, lq), heads(k, sk), heads(v, sk)
    scores = batch_matmul(qh, kh, transpose_b=True) * scale
    if mask is not None:
        scores = scores + mask
    weights = dropout(softmax(scores, axis=-1), attn_drop, training=training)
    ctx = batch_matmul(weights, vh)  # (N*H, L, dv)
    dv = ctx.shape[-1]
    ctx = reshape(transpose(reshape(ctx, (n, h, lq, dv)), (0, 2, 1, 3)), (n, lq, h * dv))
    out = project(ctx, "wo", "bo")
    out = dropout(out, out_drop, training=training)
    if reslink:
        if out.shape != query.shape:
            raise op_error(
                _LABEL, f"reslink needs the output shape {out.shape} to equal the query's {query.shape}"
            )
        out = out + query
    if not need_weights:
        return (out if batched else squeeze(out, 0)), None
    if average_attn_weights:
        weights = mean(reshape(weights, (n, h, lq, sk)), axis=1)
    if not batched:
        out = squeeze(out, 0)
        if average_attn_weights:
            weights = squeeze(weights, 0)
    return out, weights
