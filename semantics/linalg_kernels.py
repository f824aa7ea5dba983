"""Reference kernels of the linear-algebra ops (MegEngine's SVD) and the numpy backward that
``compiler.autodiff`` registers for them: the single source of truth of their numerics."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dialects import tensor as T
from dialects.errors import XmgeError
from semantics.kernels import ResultSpec, kernel


def _positive_largest(vectors: np.ndarray) -> np.ndarray:
    """+1 or -1 per column of ``vectors`` (..., M, K): the sign that makes the column's
    largest-magnitude entry (the first of equals) positive. LAPACK builds leave the sign of a
    singular vector to chance; this fixes it the same way on every machine."""
    pick = np.argmax(np.abs(vectors), axis=-2)[..., None, :]
    sign = np.sign(np.take_along_axis(vectors, pick, axis=-2))[..., 0, :]
    return np.where(sign == 0, 1.0, sign)


def svd_factors(x: np.ndarray, full_matrices: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(u, s, vh) of every trailing matrix of ``x``, in float64, with the sign convention of
    :class:`dialects.tensor.SVDOp`."""
    *lead, m, n = x.shape
    k = min(m, n)
    if x.size == 0:
        um, vn = (m, n) if full_matrices else (k, k)
        z = np.zeros
        eye_u = np.broadcast_to(np.eye(m, um), (*lead, m, um)).copy()
        return eye_u, z((*lead, k)), np.broadcast_to(np.eye(vn, n), (*lead, vn, n)).copy()
    x64 = x.astype(np.float64)
    # LAPACK never returns on an infinite entry (and MegEngine's naive kernel hangs on NaN): a
    # matrix holding a non-finite value gets NaN factors, the others their SVD
    bad = ~np.isfinite(x64).all(axis=(-2, -1))
    if bad.any():
        x64 = np.where(bad[..., None, None], 0.0, x64)
    u, s, vh = np.linalg.svd(x64, full_matrices=bool(full_matrices))
    sign = _positive_largest(u)
    u = u * sign[..., None, :]
    vh = vh.copy()
    vh[..., :k, :] *= sign[..., :k, None]
    if full_matrices and n > k:
        # rows of vh past K pair with no column of u: fix their sign on their own
        extra = vh[..., k:, :]
        vh[..., k:, :] = extra * _positive_largest(np.swapaxes(extra, -1, -2))[..., :, None]
    if bad.any():
        u[bad], s[bad], vh[bad] = np.nan, np.nan, np.nan
    return u, s, vh


@kernel(T.SVDOp)
def svd(args: Sequence[np.ndarray], results: Sequence[ResultSpec], *, full_matrices: int) -> list[np.ndarray]:
    """Computed in float64 (LAPACK's divide and conquer), rounded to float32 once."""
    u, s, vh = svd_factors(args[0], bool(full_matrices))
    return [u.astype(np.float32), s.astype(np.float32), vh.astype(np.float32)]


def svd_backward(
    x: np.ndarray,
    factors: Sequence[np.ndarray],
    grads: Sequence[np.ndarray | None],
    params: dict[str, Any],
) -> np.ndarray:
    """d x for the gradients of (u, s, vh) of the reduced SVD (float64): the real case of the
    standard derivation (Townsend, "Differentiating the Singular Value Decomposition"), with the
    projections onto the complements of u's and v's column spaces when the matrix is not square.
    Repeated singular values make the u/vh terms infinite, as in every SVD gradient."""
    if params.get("full_matrices"):
        raise XmgeError(
            "svd: no gradient for full_matrices=True (the extra singular vectors are not unique); "
            "use full_matrices=False"
        )
    u, s, vh = (np.asarray(f, np.float64) for f in factors)
    gu, gs, gvh = (None if g is None else np.asarray(g, np.float64) for g in grads)
    m, n = x.shape[-2:]
    k = min(m, n)
    v = np.swapaxes(vh, -1, -2)
    gv = None if gvh is None else np.swapaxes(gvh, -1, -2)
    core = np.zeros((*x.shape[:-2], k, k))
    if gu is not None or gv is not None:
        s2 = s * s
        e = s2[..., None, :] - s2[..., :, None]
        idx = np.arange(k)
        e[..., idx, idx] = 1.0
        if gu is not None:
            uhgu = np.swapaxes(u, -1, -2) @ gu
            core = core + (uhgu - np.swapaxes(uhgu, -1, -2)) * s[..., None, :] / e
        if gv is not None:
            vhgv = vh @ gv
            core = core + s[..., :, None] * (vhgv - np.swapaxes(vhgv, -1, -2)) / e
    if gs is not None:
        core = core + gs[..., :, None] * np.eye(k)
    gx = u @ core @ vh
    if m > k and gu is not None:
        gus = gu / s[..., None, :]
        gx = gx + (gus - u @ (np.swapaxes(u, -1, -2) @ gus)) @ vh
    if n > k and gv is not None:
        gvs = gv / s[..., None, :]
        gx = gx + u @ np.swapaxes(gvs - v @ (vh @ gvs), -1, -2)
    return gx
