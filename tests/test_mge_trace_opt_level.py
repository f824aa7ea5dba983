"""trace(opt_level=...): MegEngine simplifies log(exp(x)), log(exp(a)+exp(b)) and y/y in graphs
compiled at opt_level >= 1 (its default is 2), so those dumps carry fewer operators and the fused
log_sum_exp stays finite where exp overflows; opt_level=0 keeps the graph as written."""

from __future__ import annotations

import io

import numpy as np

import compiler as mge
import compiler.functional as F
from compiler.jit import trace
from compiler.utils import comp_graph_tools as cgtools


def _dump(fn, *args, **kwargs):
    fn(*[mge.tensor(a) for a in args])
    buf = io.BytesIO()
    fn.dump(buf, **kwargs)
    buf.seek(0)
    return buf


def _oprs(buf) -> list[str]:
    from compiler.core.tensor import megbrain_graph as G

    buf.seek(0)
    return [type(o).__name__ + ":" + str(o) for o in cgtools.get_oprs_seq(G.load_graph(buf).output_vars_list)]


def test_log_exp_is_removed_at_opt_level_1_even_without_optimize_for_inference():
    kept = _dump(trace(symbolic=True, opt_level=0, capture_as_const=True)(lambda x: F.log(F.exp(x))), 1.0,
                 optimize_for_inference=False)  # fmt: skip
    gone = _dump(trace(symbolic=True, opt_level=1, capture_as_const=True)(lambda x: F.log(F.exp(x))), 1.0,
                 optimize_for_inference=False)  # fmt: skip
    assert len(_oprs(kept)) - len(_oprs(gone)) == 2


def test_log_sum_exp_fused_stays_finite():
    def f(x, y):
        return F.log(F.exp(x) + F.exp(y))

    plain = _dump(trace(symbolic=True, opt_level=0, capture_as_const=True)(f), 1.0e4, 0.0)
    fused = _dump(trace(symbolic=True, capture_as_const=True)(f), 1.0e4, 0.0)
    inputs = {"arg_0": np.array([1.0e4], np.float32), "arg_1": np.array([0.0], np.float32)}
    (big,) = cgtools.GraphInference(plain).run(inp_dict=inputs).values()
    (good,) = cgtools.GraphInference(fused).run(inp_dict=inputs).values()
    assert not np.isfinite(big).all()
    np.testing.assert_allclose(good, [1.0e4])


def test_divide_by_self_is_one_at_opt_level_1():
    def f(x):
        y = 2.0 * x
        return y / y

    plain = _dump(trace(symbolic=True, opt_level=0, capture_as_const=True)(f), 0.0)
    simple = _dump(trace(symbolic=True, opt_level=1, capture_as_const=True)(f), 0.0)
    inputs = {"arg_0": np.array([0.0], np.float32)}
    assert np.isnan(list(cgtools.GraphInference(plain).run(inp_dict=inputs).values())[0]).all()
    # the result no longer depends on the input, so the simplified graph has none
    np.testing.assert_array_equal(list(cgtools.GraphInference(simple).run().values())[0], [1.0])
