"""``F.nn.multi_head_attention`` and ``M.MultiHeadAttention`` against real MegEngine 1.13 (outputs,
attention weights and gradients for every mask form MegEngine's CPU kernel runs; recorded in
tests/data/mge_names/mha.npz by tests/data/mge_names/record.py) and against
``torch.nn.MultiheadAttention`` with the same weights, including what MegEngine 1.13 refuses
(bias_k/bias_v, add_zero_attn)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
import torch

import compiler as mge
import compiler.functional as F
import compiler.module as M
from compiler.autodiff import GradManager
from compiler.core import OpError
from compiler.jit import trace

DUMPS = os.path.join(os.path.dirname(__file__), "data", "mge_names")
DATA = dict(np.load(os.path.join(DUMPS, "mha.npz")))
RECORDED = dict(np.load(os.path.join(DUMPS, "mha_dumps.npz")))
E, H = 4, 2
AM = np.where(DATA["am"], -2.0, 0.0).astype(np.float32)
CASES: dict[str, dict[str, Any]] = {
    "base": {},
    "kpm_bool": {"key_padding_mask": DATA["kpm"]},
    "kpm_float": {"key_padding_mask": np.where(DATA["kpm"], -1.5, 0.0).astype(np.float32)},
    "am_bool": {"attn_mask": DATA["am"]},
    "am_kpm": {"attn_mask": DATA["am"], "key_padding_mask": DATA["kpm"]},
    "am3": {"attn_mask": DATA["am3"]},
    "causal_am": {"is_causal": True, "attn_mask": AM},
    "causal_kpm": {"is_causal": True, "key_padding_mask": DATA["kpm"]},
    "average": {"average_attn_weights": True},
    "nobias": {"bias": False},
}


def _mha(
    q: Any, k: Any, v: Any, w: Any, bias: bool = True, **kw: Any
) -> tuple[mge.Tensor, mge.Tensor | None]:
    kw = {key: mge.tensor(val) if isinstance(val, np.ndarray) else val for key, val in kw.items()}
    kw.setdefault("need_weights", True)
    kw.setdefault("training", False)
    q, k, v, w = (t if isinstance(t, mge.Tensor) else mge.tensor(t) for t in (q, k, v, w))
    drops = kw.pop("attn_drop", 0.0), kw.pop("out_drop", 0.0)
    return F.nn.multi_head_attention(
        q, k, v, E, H, *drops, w, qbias=bias, kbias=bias, vbias=bias, obias=bias, **kw
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_megengine(case: str) -> None:
    kw = dict(CASES[case])
    bias = kw.pop("bias", True)
    w = DATA["w"] if bias else DATA["w"][:, : 4 * E * E]
    out, weights = _mha(DATA["q"], DATA["k"], DATA["v"], w, bias, **kw)
    np.testing.assert_allclose(out.numpy(), DATA[case + ":out"], rtol=1e-5, atol=1e-6)
    assert weights is not None
    np.testing.assert_allclose(weights.numpy(), DATA[case + ":weights"], rtol=1e-5, atol=1e-6)


def test_gradients_match_megengine() -> None:
    ts = [mge.tensor(DATA[n]) for n in ("q", "k", "v", "w")]
    gm = GradManager().attach(ts)
    with gm:
        out, _ = _mha(*ts, attn_mask=DATA["am"], training=True, need_weights=False)
        gm.backward((out * out).sum())
    for t, name in zip(ts, "qkvw", strict=True):
        np.testing.assert_allclose(t.grad.numpy(), DATA["grad:" + name], rtol=1e-4, atol=1e-5, err_msg=name)


def test_module_with_kdim_vdim_matches_megengine() -> None:
    m = M.MultiHeadAttention(E, H, kdim=5, vdim=6)
    assert m.io_weight_bias.shape == DATA["w2"].shape
    m.io_weight_bias.set_value(DATA["w2"])
    m.eval()
    out, weights = m(mge.tensor(DATA["q"]), mge.tensor(DATA["k2"]), mge.tensor(DATA["v2"]), need_weights=True)
    np.testing.assert_allclose(out.numpy(), DATA["kvdim:out"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(weights.numpy(), DATA["kvdim:weights"], rtol=1e-5, atol=1e-6)
    assert m(mge.tensor(DATA["q"]), mge.tensor(DATA["k2"]), mge.tensor(DATA["v2"]))[1] is None


def _torch_mha(
    w: np.ndarray, add_bias_kv: bool = False, add_zero_attn: bool = False
) -> torch.nn.MultiheadAttention:
    """torch's module holding the same projections (torch stores W (out, in): the transposes)."""
    t = torch.nn.MultiheadAttention(
        E, H, batch_first=True, add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn
    )
    flat = w.reshape(-1).astype(np.float64)
    wq, wk, wv, wo = (flat[i * E * E : (i + 1) * E * E].reshape(E, E) for i in range(4))
    b = flat[4 * E * E :]
    with torch.no_grad():
        t.in_proj_weight.copy_(torch.tensor(np.concatenate([wq.T, wk.T, wv.T])))
        t.in_proj_bias.copy_(torch.tensor(b[: 3 * E]))
        t.out_proj.weight.copy_(torch.tensor(wo.T))
        t.out_proj.bias.copy_(torch.tensor(b[3 * E :]))
    return t.double()


@pytest.mark.parametrize("masks", ["none", "kpm", "am", "both"])
def test_against_torch(masks: str) -> None:
    q, k, v, w = DATA["q"], DATA["k"], DATA["v"], DATA["w"]
    kw: dict[str, Any] = {}
    if masks in ("kpm", "both"):
        kw["key_padding_mask"] = DATA["kpm"]
    if masks in ("am", "both"):
        kw["attn_mask"] = DATA["am"]
    out, weights = _mha(q, k, v, w, **kw)
    tq, tk, tv = (torch.tensor(a.astype(np.float64), requires_grad=True) for a in (q, k, v))
    tkw = {key: torch.tensor(val) for key, val in kw.items()}
    tout, tweights = _torch_mha(w)(tq, tk, tv, need_weights=True, average_attn_weights=False, **tkw)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        weights.numpy(), tweights.detach().numpy().reshape(-1, 3, 4), rtol=1e-5, atol=1e-6
    )
    # gradients with respect to the inputs
    (tout * tout).sum().backward()
    xs = [mge.tensor(a) for a in (q, k, v)]
    gm = GradManager().attach(xs)
    with gm:
        o, _ = _mha(*xs, w, **kw)
        gm.backward((o * o).sum())
    for x, t in zip(xs, (tq, tk, tv), strict=True):
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("add_bias_kv,add_zero_attn", [(True, False), (False, True), (True, True)])
def test_bias_kv_and_zero_attn_against_torch(add_bias_kv: bool, add_zero_attn: bool) -> None:
    """MegEngine 1.13 refuses these (cuDNN only); xmge computes them as documented, as torch does."""
    q, k, v, w = DATA["q"], DATA["k"], DATA["v"], DATA["w"]
    t = _torch_mha(w, add_bias_kv, add_zero_attn)
    m = M.MultiHeadAttention(E, H, add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn)
    m.io_weight_bias.set_value(w)
    if add_bias_kv:
        m.bias_k.set_value(t.bias_k.detach().numpy().astype(np.float32))
        m.bias_v.set_value(t.bias_v.detach().numpy().astype(np.float32))
    m.eval()
    out, weights = m(
        mge.tensor(q),
        mge.tensor(k),
        mge.tensor(v),
        key_padding_mask=mge.tensor(DATA["kpm"]),
        need_weights=True,
    )
    tq, tk, tv = (torch.tensor(a.astype(np.float64)) for a in (q, k, v))
    tout, tweights = t(
        tq, tk, tv, key_padding_mask=torch.tensor(DATA["kpm"]), need_weights=True, average_attn_weights=False
    )
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
    extra = int(add_bias_kv) + int(add_zero_attn)
    np.testing.assert_allclose(
        weights.numpy(), tweights.detach().numpy().reshape(-1, 3, 4 + extra), rtol=1e-5, atol=1e-6
    )


def test_unbatched_inputs() -> None:
    out, weights = _mha(DATA["q"][1], DATA["k"][1], DATA["v"][1], DATA["w"])
    batched, bw = _mha(DATA["q"][1:], DATA["k"][1:], DATA["v"][1:], DATA["w"])
    assert out.shape == (3, E) and weights.shape == (H, 3, 4)
    np.testing.assert_allclose(out.numpy(), batched.numpy()[0], rtol=1e-6)
    np.testing.assert_allclose(weights.numpy(), bw.numpy(), rtol=1e-6)
    _, avg = _mha(DATA["q"][1], DATA["k"][1], DATA["v"][1], DATA["w"], average_attn_weights=True)
    assert avg.shape == (3, 4)


def test_dropout_in_training() -> None:
    """MegEngine drops attention weights (the returned weights are the dropped ones) and outputs,
    scaling the kept ones by 1 / (1 - p); out of training, or at p = 0, nothing changes."""
    args = (DATA["q"], DATA["k"], DATA["v"], DATA["w"])
    ref_out, ref_w = (t.numpy() for t in _mha(*args))
    np.testing.assert_array_equal(_mha(*args, training=True)[0].numpy(), ref_out)
    np.testing.assert_array_equal(_mha(*args, out_drop=0.5)[0].numpy(), ref_out)  # training=False
    mge.random.seed(3)
    out, _ = _mha(*args, out_drop=0.5, training=True)
    ratio = out.numpy() / ref_out
    assert np.all(np.isclose(ratio, 0) | np.isclose(ratio, 2, rtol=1e-5))
    assert 0 < np.isclose(ratio, 0).sum() < ratio.size
    _, weights = _mha(*args, attn_drop=0.25, training=True)
    wr = weights.numpy() / ref_w
    assert np.all(np.isclose(wr, 0) | np.isclose(wr, 1 / 0.75, rtol=1e-5))
    assert 0 < np.isclose(wr, 0).sum() < wr.size


def test_module_parameters_and_megengines_dropout_reset() -> None:
    m = M.MultiHeadAttention(8, 2, attn_dropout=0.3, out_dropout=0.2)
    n = (2 * 8 + 8 + 8) * 8
    w = m.io_weight_bias.numpy()
    assert w.shape == (1, n + 4 * 8) and not w[0, n:].any()
    bound = np.sqrt(6.0 / (w.size + 1))  # Xavier on MegEngine's (1, len) parameter
    assert np.abs(w[0, :n]).max() <= bound and np.abs(w[0, :n]).max() > bound / 2
    assert m.attn_dropout == 0.0 and m.out_dropout == 0.0  # MegEngine's reset_parameters zeroes them
    assert M.MultiHeadAttention(8, 2, bias=False).io_weight_bias.shape == (1, n)
    assert "MultiHeadAttention(embed_dim=8, num_heads=2" in repr(m)
    with pytest.raises(OpError, match="divisible"):
        M.MultiHeadAttention(6, 4)


def test_traced_attention_dump_runs_on_megengine(tmp_path: str) -> None:
    """xmge dumps attention as matmul/softmax/elementwise ops; MegEngine's Lite runtime ran this
    dump (made the same way) when the data was recorded, and its outputs are stored."""
    from compiler.lite import Network

    m = M.MultiHeadAttention(E, H)
    m.io_weight_bias.set_value(DATA["w"])
    m.eval()

    @trace(symbolic=True, capture_as_const=True)
    def fwd(q: mge.Tensor, kv: mge.Tensor) -> tuple[mge.Tensor, mge.Tensor | None]:
        return m(q, kv, kv, attn_mask=mge.tensor(DATA["am"]), need_weights=True)

    q, kv = DATA["q"], DATA["k"]
    out, weights = fwd(mge.tensor(q), mge.tensor(kv))
    path = os.path.join(tmp_path, "mha.mge")
    fwd.dump(path, arg_names=["q", "kv"], output_names=["out", "weights"])
    got = Network(path)(q=q, kv=kv)
    by_megengine = dict(np.load(os.path.join(DUMPS, "mha_xmge_dump_by_mge.npz")))
    for name, eager in (("out", out), ("weights", weights)):
        np.testing.assert_allclose(got[name], eager.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[name], by_megengine[name], rtol=1e-5, atol=1e-6)


def test_bad_arguments_name_the_problem() -> None:
    args = (DATA["q"], DATA["k"], DATA["v"], DATA["w"])
    with pytest.raises(OpError, match="cuDNN-style"):
        _mha(*args, attn_mask=np.zeros((2, 3), np.int32), key_padding_mask=np.zeros((2, 2), np.int32),
             maybe_cudnn_style_mask=True)  # fmt: skip
    with pytest.raises(OpError, match="only bool and floating types of attn_mask"):
        _mha(*args, attn_mask=np.zeros((3, 4), np.int32))
    with pytest.raises(OpError, match=r"key_padding_mask must be \(2, 4\)"):
        _mha(*args, key_padding_mask=np.zeros((2, 3), bool))
    with pytest.raises(OpError, match="io_weight_bias has 64 values"):
        _mha(*args[:3], DATA["w"][:, :64])
    with pytest.raises(OpError, match="query projection bias is true"):
        F.nn.multi_head_attention(*(mge.tensor(a) for a in args[:3]), E, H, 0.0, 0.0, mge.tensor(DATA["w"]),
                                  qproj_size=0, qbias=True)  # fmt: skip


@pytest.mark.parametrize(
    "name,inputs,outputs",
    [
        ("plain", ("q",), ("out",)),
        ("masked", ("q", "kv", "am", "kpm"), ("out", "weights")),
        ("kvdim", ("q", "k2", "v2"), ("out", "weights")),
    ],
)
def test_reads_megengines_multi_head_attn_dumps(
    name: str, inputs: tuple[str, ...], outputs: tuple[str, ...]
) -> None:
    """MegEngine dumps attention as one MultiHeadAttnForward operator; xmge reads it as the same
    matmul/softmax/elementwise composition and computes what MegEngine computed."""
    from compiler.lite import Network

    net = Network(os.path.join(DUMPS, f"mha_{name}.mge"))
    names = {"k2": "k", "v2": "v"}
    got = net(**{names.get(i, i): RECORDED[i] for i in inputs})
    for out in outputs:
        key = name if out == "out" else f"{name}_weights"
        np.testing.assert_allclose(got[out], RECORDED[key], rtol=1e-5, atol=1e-6, err_msg=out)


def test_compiled_multi_head_attn_dump_matches_megengine() -> None:
    from tests.codegen_util import require

    require("x86-avx2")
    with open(os.path.join(DUMPS, "mha_masked.mge"), "rb") as f:
        model = mge.compile(f.read(), target="x86-avx2")
    out, weights = model(*(RECORDED[k] for k in ("q", "kv", "am", "kpm")))
    np.testing.assert_allclose(np.asarray(out), RECORDED["masked"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(weights), RECORDED["masked_weights"], rtol=1e-5, atol=1e-6)


def test_is_causal_without_masks_is_the_causal_mask() -> None:
    """MegEngine documents ``is_causal`` as applying a causal mask (its CPU kernel cannot build
    one); with no mask given xmge builds it, which is torch's causal attention."""
    q, k, v, w = DATA["q"], DATA["k"], DATA["v"], DATA["w"]
    causal, cw = _mha(q, k, v, w, is_causal=True)
    explicit, ew = _mha(q, k, v, w, attn_mask=np.triu(np.ones((3, 4), bool), 1))
    np.testing.assert_array_equal(causal.numpy(), explicit.numpy())
    np.testing.assert_array_equal(cw.numpy(), ew.numpy())
    tq, tk, tv = (torch.tensor(a.astype(np.float64)) for a in (q, k, v))
    mask = torch.tensor(np.triu(np.ones((3, 4), bool), 1))
    tout, _ = _torch_mha(w)(tq, tk, tv, attn_mask=mask, need_weights=False)
    np.testing.assert_allclose(causal.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
