"""The Winograd ``F(m, 3)`` transform matrices (one home for every Winograd template) and a planner
that turns a transform matrix into few vector operations.

``y = A^T [ (G g) . (B^T d) ]`` is the 1-D correlation ``y[i] = sum_k g[k] d[i + k]`` of an ``m``-output
tile; the 2-D transforms apply each matrix on both sides. ``F(2, 3)`` and ``F(4, 3)`` use the points
0, +-1, (+-2,) infinity (Lavin & Gray); ``F(6, 3)`` adds +-1/2 (the form ncnn and MegEngine use),
with ``B^T``'s row pairs scaled so that its coefficients stay small.

:func:`plan_rows` shares work between rows: two rows that agree on one set of columns and are
opposite on the rest are ``E + O`` and ``E - O`` (``B^T``'s +-point pairs); columns that appear
in every row as a +- pair are summed and subtracted once (``A^T``'s +-point pairs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

F = Fraction
Matrix = list[list[Fraction]]


def _m(rows: Sequence[Sequence[int | str]]) -> Matrix:
    return [[Fraction(v) for v in row] for row in rows]


# m -> (B^T, G, A^T), exact
TRANSFORMS: dict[int, tuple[Matrix, Matrix, Matrix]] = {
    2: (
        _m([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]),
        _m([[1, 0, 0], ["1/2", "1/2", "1/2"], ["1/2", "-1/2", "1/2"], [0, 0, 1]]),
        _m([[1, 1, 1, 0], [0, 1, -1, -1]]),
    ),
    4: (
        _m(
            [
                [4, 0, -5, 0, 1, 0],
                [0, -4, -4, 1, 1, 0],
                [0, 4, -4, -1, 1, 0],
                [0, -2, -1, 2, 1, 0],
                [0, 2, -1, -2, 1, 0],
                [0, 4, 0, -5, 0, 1],
            ]
        ),
        _m(
            [
                ["1/4", 0, 0],
                ["-1/6", "-1/6", "-1/6"],
                ["-1/6", "1/6", "-1/6"],
                ["1/24", "1/12", "1/6"],
                ["1/24", "-1/12", "1/6"],
                [0, 0, 1],
            ]
        ),
        _m([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]),
    ),
    6: (
        _m(
            [
                [1, 0, "-21/4", 0, "21/4", 0, -1, 0],
                [0, 1, 1, "-17/4", "-17/4", 1, 1, 0],
                [0, -1, 1, "17/4", "-17/4", -1, 1, 0],
                [0, "1/2", "1/4", "-5/2", "-5/4", 2, 1, 0],
                [0, "-1/2", "1/4", "5/2", "-5/4", -2, 1, 0],
                [0, 2, 4, "-5/2", -5, "1/2", 1, 0],
                [0, -2, 4, "5/2", -5, "-1/2", 1, 0],
                [0, -1, 0, "21/4", 0, "-21/4", 0, 1],
            ]
        ),
        _m(
            [
                [1, 0, 0],
                ["-2/9", "-2/9", "-2/9"],
                ["-2/9", "2/9", "-2/9"],
                ["1/90", "1/45", "2/45"],
                ["1/90", "-1/45", "2/45"],
                ["32/45", "16/45", "8/45"],
                ["32/45", "-16/45", "8/45"],
                [0, 0, 1],
            ]
        ),
        _m(
            [
                [1, 1, 1, 1, 1, 1, 1, 0],
                [0, 1, -1, 2, -2, "1/2", "-1/2", 0],
                [0, 1, 1, 4, 4, "1/4", "1/4", 0],
                [0, 1, -1, 8, -8, "1/8", "-1/8", 0],
                [0, 1, 1, 16, 16, "1/16", "1/16", 0],
                [0, 1, -1, 32, -32, "1/32", "-1/32", 1],
            ]
        ),
    ),
}

# m -> (B^T, G, A^T) of F(m, 2), the 2-tap correlation y[i] = g[0] d[i] + g[1] d[i + 1]: F(2, 2) as
# g0 (d0 - d1), (g0 + g1) d1, g1 (d2 - d1) (exact); F(4, 2) on the points 0, +-1, +-2 (Toom-Cook,
# B^T's rows scaled to small integers, their inverses in G)
TWO_TAP: dict[int, tuple[Matrix, Matrix, Matrix]] = {
    2: (
        _m([[1, -1, 0], [0, 1, 0], [0, -1, 1]]),
        _m([[1, 0], [1, 1], [0, 1]]),
        _m([[1, 1, 0], [0, 1, 1]]),
    ),
    4: (
        _m([[4, 0, -5, 0, 1], [0, 4, 4, -1, -1], [0, -4, 4, 1, -1], [0, -2, -1, 2, 1], [0, 2, -1, -2, 1]]),
        _m([["1/4", 0], ["1/6", "1/6"], ["1/6", "-1/6"], ["1/24", "1/12"], ["1/24", "-1/12"]]),
        _m([[1, 1, 1, 1, 1], [0, 1, -1, 2, -2], [0, 1, 1, 4, 4], [0, 1, -1, 8, -8]]),
    ),
}


def _stride2(bt: Matrix, g: Matrix, at: Matrix) -> tuple[Matrix, Matrix, Matrix]:
    """``(B^T, G, A^T)`` of the stride-2 3-tap correlation ``y[i] = sum_k g[k] d[2i + k]`` of an
    ``m``-output tile over its ``2m + 1`` inputs, from F(m, 2)'s: split by phase, the even inputs
    ``d[0], d[2], ...`` meet the taps ``(g[0], g[2])`` through F(m, 2) (``m + 1`` points), the odd
    ones ``g[1]`` alone (``m`` points, one per output): ``2m + 1`` points per axis where direct
    summation takes ``3m`` products (2-D: 25 per 2x2 outputs instead of 36, 81 per 4x4 instead of
    144)."""
    m, n = len(at), 2 * len(at) + 1
    zero = Fraction(0)
    bt2 = [[row[k // 2] if k % 2 == 0 else zero for k in range(n)] for row in bt]
    bt2 += [[Fraction(int(k == 2 * i + 1)) for k in range(n)] for i in range(m)]
    g2 = [[row[0], zero, row[1]] for row in g] + [[zero, Fraction(1), zero] for _ in range(m)]
    at2 = [row + [Fraction(int(k == i)) for k in range(m)] for i, row in enumerate(at)]
    return bt2, g2, at2


# m -> (B^T, G, A^T) of the stride-2 3-tap correlation (:func:`_stride2`)
STRIDE2_TRANSFORMS: dict[int, tuple[Matrix, Matrix, Matrix]] = {m: _stride2(*TWO_TAP[m]) for m in TWO_TAP}


def transforms(m: int, stride: int = 1) -> tuple[Matrix, Matrix, Matrix]:
    """``(B^T, G, A^T)`` of the 3-tap ``m``-output tile at ``stride`` (1: :data:`TRANSFORMS`, 2:
    :data:`STRIDE2_TRANSFORMS`); ``len(B^T)`` points per axis over ``len(B^T[0])`` inputs."""
    return (TRANSFORMS if stride == 1 else STRIDE2_TRANSFORMS)[m]


def transform_filter(g: np.ndarray, m: int, dtype: type = np.float32, stride: int = 1) -> np.ndarray:
    """``U = G g G^T`` of logical ``(K, C, 3, 3)`` filters: ``(K, C, A, A)``, computed in float64 and
    rounded once to ``dtype``."""
    G = np.array(transforms(m, stride)[1], np.float64)
    return np.einsum("ik,ockl,jl->ocij", G, np.asarray(g, np.float64), G).astype(dtype)


# -- planning ------------------------------------------------------------------------------------
Terms = tuple[tuple[Fraction, str], ...]  # sum coefficient * named value


@dataclass(frozen=True)
class Combo:
    """``dst = sum c * src`` over ``terms`` (sources: inputs or earlier combos)."""

    dst: str
    terms: Terms

    @property
    def ops(self) -> int:
        """Vector operations to evaluate it (a lone +1 term is free: a rename)."""
        if not self.terms:
            return 1
        return len(self.terms) - 1 + (0 if any(c == 1 for c, _ in self.terms) else 1)


def _terms(row: Sequence[Fraction], srcs: Sequence[str], cols: Sequence[int]) -> Terms:
    return tuple((row[k], srcs[k]) for k in cols if row[k] != 0)


def _row_pairs(mat: Sequence[Sequence[Fraction]], srcs: Sequence[str], dsts: Sequence[str]) -> list[Combo]:
    """Rows paired as ``E + O`` / ``E - O`` where they agree on some columns and are opposite on
    the rest; the others directly."""
    n = len(mat)
    done: set[int] = set()
    out: list[Combo] = []
    for a in range(n):
        if a in done:
            continue
        for b in range(a + 1, n):
            if b in done:
                continue
            cols = range(len(srcs))
            same = [k for k in cols if mat[a][k] != 0 and mat[b][k] == mat[a][k]]
            opp = [k for k in cols if mat[a][k] != 0 and mat[b][k] == -mat[a][k]]
            nonzero = [k for k in cols if mat[a][k] != 0 or mat[b][k] != 0]
            if same and opp and len(same) + len(opp) == len(nonzero):
                e, o = f"{dsts[a]}_e", f"{dsts[a]}_o"
                out += [Combo(e, _terms(mat[a], srcs, same)), Combo(o, _terms(mat[a], srcs, opp))]
                out += [Combo(dsts[a], ((F(1), e), (F(1), o))), Combo(dsts[b], ((F(1), e), (F(-1), o)))]
                done |= {a, b}
                break
        else:
            out.append(Combo(dsts[a], _terms(mat[a], srcs, range(len(srcs)))))
            done.add(a)
    return out


def _column_pairs(mat: Sequence[Sequence[Fraction]], srcs: Sequence[str], dsts: Sequence[str]) -> list[Combo]:
    """Columns ``k, l`` that every row uses as ``c (x_k + x_l)`` or ``c (x_k - x_l)``: their sum and
    difference once, then each row over those."""
    ncol = len(srcs)
    free = list(range(ncol))
    helpers: list[Combo] = []
    rows: list[list[tuple[Fraction, str]]] = [[] for _ in mat]
    while free:
        k = free.pop(0)
        partner = None
        for l_ in free:
            if all(r[l_] in (r[k], -r[k]) for r in mat) and any(r[k] != 0 for r in mat):
                partner = l_
                break
        if partner is None:
            for i, r in enumerate(mat):
                if r[k] != 0:
                    rows[i].append((r[k], srcs[k]))
            continue
        free.remove(partner)
        s, d = f"{srcs[k]}_p{partner}", f"{srcs[k]}_m{partner}"
        used_s = used_d = False
        for i, r in enumerate(mat):
            if r[k] == 0:
                continue
            if r[partner] == r[k]:
                rows[i].append((r[k], s))
                used_s = True
            else:
                rows[i].append((r[k], d))
                used_d = True
        if used_s:
            helpers.append(Combo(s, ((F(1), srcs[k]), (F(1), srcs[partner]))))
        if used_d:
            helpers.append(Combo(d, ((F(1), srcs[k]), (F(-1), srcs[partner]))))
    return helpers + [Combo(dsts[i], tuple(t)) for i, t in enumerate(rows)]


def plan_rows(mat: Sequence[Sequence[Fraction]], srcs: Sequence[str], dsts: Sequence[str]) -> list[Combo]:
    """Combos computing ``dsts[i] = sum_k mat[i][k] srcs[k]``, the cheaper of the two sharings
    (helper names derive from ``dsts`` / ``srcs``, so they are unique per call)."""
    plans = [_row_pairs(mat, srcs, dsts), _column_pairs(mat, srcs, dsts)]
    return min(plans, key=lambda p: sum(c.ops for c in p))


def plan_2d(mat: Sequence[Sequence[Fraction]], src: str, dst: str) -> list[Combo]:
    """``dst = mat . src . mat^T`` on values ``src{i}_{j}`` (``len(mat[0])`` square) into
    ``dst{i}_{j}`` (``len(mat)`` square), through ``{dst}t{i}_{j}``: columns first, then rows."""
    n_out, n_in = len(mat), len(mat[0])
    combos: list[Combo] = []
    for j in range(n_in):
        combos += plan_rows(
            mat, [f"{src}{k}_{j}" for k in range(n_in)], [f"{dst}t{i}_{j}" for i in range(n_out)]
        )
    for i in range(n_out):
        combos += plan_rows(
            mat, [f"{dst}t{i}_{k}" for k in range(n_in)], [f"{dst}{i}_{j}" for j in range(n_out)]
        )
    return combos


@dataclass(frozen=True)
class VectorOps:
    """How one vector type spells the planner's operations (``{a}``, ``{b}``: values; ``{c}``: a
    constant)."""

    vtype: str
    add: str
    sub: str
    mul_n: str
    fma_n: str  # a + b * c
    zero: str

    def expr(self, combo: Combo) -> str:
        terms = sorted(combo.terms, key=lambda t: t[0] != 1)  # a +1 term first saves a multiply
        if not terms:
            return self.zero
        c0, s0 = terms[0]
        e = s0 if c0 == 1 else self.mul_n.format(a=s0, c=_const(c0))
        for c, s in terms[1:]:
            if c == 1:
                e = self.add.format(a=e, b=s)
            elif c == -1:
                e = self.sub.format(a=e, b=s)
            else:
                e = self.fma_n.format(a=e, b=s, c=_const(c))
        return e

    def statements(self, combos: Sequence[Combo]) -> list[str]:
        return [f"const {self.vtype} {c.dst} = {self.expr(c)};" for c in combos]


def _const(c: Fraction) -> str:
    return f"{float(c)!r}f"


def plan_ops(mat: Sequence[Sequence[Fraction]]) -> int:
    """Vector operations of one 2-D transform with ``mat`` (the cost rule's transform term)."""
    return sum(c.ops for c in plan_2d(mat, "s", "d"))
