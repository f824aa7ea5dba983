"""Records what real MegEngine 1.13 computes for the names tests/test_mge_names_*.py check (run with
MegEngine's Python: ``/work/shared/tools/megengine-oracle/mgepy tests/data/mge_names/record.py``).
Writes one .npz per case group next to this file; the tests never need MegEngine.

``svd_xmge_dump_by_mge.npz`` and ``mha_xmge_dump_by_mge.npz`` go the other way: what MegEngine's Lite
runtime (``/work/shared/tools/megengine-oracle/run_mge.py``) computed on xmge's dumps, made exactly as
``test_xmge_dump_gives_what_megengine_computed`` (tests/test_mge_svd.py) and
``test_traced_attention_dump_runs_on_megengine`` (tests/test_mge_mha.py) make them."""

import os

import megengine as mge
import megengine.functional as F
import numpy as np
from megengine.autodiff import GradManager

HERE = os.path.dirname(os.path.abspath(__file__))
# MegEngine 1.13's CPU multi-head attention races with the boolean-mask conversion before it when
# execution is asynchronous (a mask is sometimes ignored, or NaN appears); synchronous execution
# gives stable values, the same as torch's
mge.config.async_level = 0


def grads(fn, *arrays):
    ts = [mge.tensor(a) for a in arrays]
    gm = GradManager().attach(ts)
    with gm:
        out = fn(*ts)
        gm.backward(out)
    return [t.grad.numpy() for t in ts]


def cross_entropy():
    rng = np.random.RandomState(3)
    logits = rng.randn(3, 5).astype("float32")
    label = np.array([1.7, 2.5, 0.2], "float32")  # float class indices, truncated toward zero
    out = {"logits": logits, "label": label}
    out["none"] = F.nn.cross_entropy(mge.tensor(logits), mge.tensor(label), reduction="none").numpy()
    out["smooth"] = F.nn.cross_entropy(
        mge.tensor(logits), mge.tensor(label), label_smooth=0.2, reduction="none"
    ).numpy()
    (out["grad"],) = grads(lambda x: F.nn.cross_entropy(x, mge.tensor(label)), logits)
    np.savez(os.path.join(HERE, "cross_entropy.npz"), **out)


def svd():
    rng = np.random.RandomState(0)
    out = {}
    for name, shape in (("tall", (2, 4, 3)), ("wide", (3, 5)), ("square", (1, 2, 3, 3))):
        x = rng.randn(*shape).astype("float32")
        u, s, vh = F.svd(mge.tensor(x))
        out[name] = x
        out[name + ":u"], out[name + ":s"], out[name + ":vh"] = u.numpy(), s.numpy(), vh.numpy()
        ramp = mge.tensor(np.arange(1, min(shape[-2:]) + 1, dtype="float32"))  # weighs each singular value
        (out[name + ":grad_s"],) = grads(lambda t, ramp=ramp: (F.svd(t)[1] * ramp).sum(), x)
        w = rng.randn(*u.shape).astype("float32"), rng.randn(*vh.shape).astype("float32")
        out[name + ":wu"], out[name + ":wv"] = w

        def loss(t, w=w):
            uu, ss, vv = F.svd(t)
            return (uu * mge.tensor(w[0])).sum() + (vv * mge.tensor(w[1])).sum() + ss.sum()

        (out[name + ":grad_all"],) = grads(loss, x)
    np.savez(os.path.join(HERE, "svd.npz"), **out)


def mha():
    rng = np.random.RandomState(1)
    n, l, s, e, h = 2, 3, 4, 4, 2
    q, k, v = (rng.randn(n, m, e).astype("float32") for m in (l, s, s))
    w = (rng.randn(1, 4 * e * e + 4 * e) * 0.5).astype("float32")
    kpm = np.array([[False, False, True, True], [False, True, False, False]])
    am = np.triu(np.ones((l, s), bool), 1)
    am3 = rng.randn(n * h, l, s).astype("float32")
    cases = {
        "base": {},
        "kpm_bool": {"key_padding_mask": kpm},
        "kpm_float": {"key_padding_mask": np.where(kpm, -1.5, 0.0).astype("float32")},
        "am_bool": {"attn_mask": am},
        "am_kpm": {"attn_mask": am, "key_padding_mask": kpm},
        "am3": {"attn_mask": am3},
        "causal_am": {"is_causal": True, "attn_mask": np.where(am, -2.0, 0.0).astype("float32")},
        "causal_kpm": {"is_causal": True, "key_padding_mask": kpm},
        "average": {"average_attn_weights": True},
        "nobias": {"bias": False},
    }
    out = {"q": q, "k": k, "v": v, "w": w, "kpm": kpm, "am": am, "am3": am3}
    for name, kw in cases.items():
        kw = dict(kw)
        bias = kw.pop("bias", True)
        ww = w if bias else w[:, : 4 * e * e]
        kw = {key: mge.tensor(val) if isinstance(val, np.ndarray) else val for key, val in kw.items()}
        o, wt = F.nn.multi_head_attention(
            mge.tensor(q), mge.tensor(k), mge.tensor(v), e, h, 0.0, 0.0, mge.tensor(ww),
            qbias=bias, kbias=bias, vbias=bias, obias=bias, need_weights=True, training=False, **kw,
        )
        out[name + ":out"], out[name + ":weights"] = o.numpy(), wt.numpy()

    def loss(qt, kt, vt, wt):
        o, _ = F.nn.multi_head_attention(
            qt, kt, vt, e, h, 0.0, 0.0, wt, qbias=True, kbias=True, vbias=True, obias=True,
            attn_mask=mge.tensor(am), training=True,
        )
        return (o * o).sum()

    out["grad:q"], out["grad:k"], out["grad:v"], out["grad:w"] = grads(loss, q, k, v, w)
    # kdim/vdim differ from embed_dim (the module's weight layout)
    kd, vd = 5, 6
    k2, v2 = rng.randn(n, s, kd).astype("float32"), rng.randn(n, s, vd).astype("float32")
    w2 = (rng.randn(1, (2 * e + kd + vd) * e + 4 * e) * 0.5).astype("float32")
    import megengine.module as M

    m = M.MultiHeadAttention(e, h, kdim=kd, vdim=vd)
    m.io_weight_bias[...] = w2
    m.eval()
    o, wt = m(mge.tensor(q), mge.tensor(k2), mge.tensor(v2), need_weights=True)
    out.update({"k2": k2, "v2": v2, "w2": w2, "kvdim:out": o.numpy(), "kvdim:weights": wt.numpy()})
    np.savez(os.path.join(HERE, "mha.npz"), **out)



def svd_dump():
    """A MegEngine dump holding an SVD operator, and what MegEngine computes on it."""
    from megengine.jit import trace

    @trace(symbolic=True, capture_as_const=True)
    def fwd(data):
        u, s, vh = F.svd(data)
        return u, s, vh

    x = np.random.RandomState(5).randn(2, 4, 3).astype("float32")
    u, s, vh = fwd(mge.tensor(x))
    fwd.dump(os.path.join(HERE, "svd.mge"), arg_names=["data"], output_names=["u", "s", "vh"])
    np.savez(os.path.join(HERE, "svd_dump.npz"), data=x, u=u.numpy(), s=s.numpy(), vh=vh.numpy())


def qdtypes():
    """qint1's conversions (numpy helpers and Tensor.astype's TypeCvt) and is_dtype_equal."""
    from megengine.core.tensor import dtype as D

    data = (np.random.RandomState(4).random_sample((3, 5)).astype("float32") * 5 - 1) * 0.01
    dt = D.qint1(0.01)
    out = {"data": data, "to_qint1": D.convert_to_qint1(data, dt).astype("int8")}
    q = mge.tensor(data).astype(dt)
    out["astype_qint1"] = q.numpy().astype("int8")
    out["back_float"] = q.astype("float32").numpy()
    out["from_qint1"] = D.convert_from_qint1(D.convert_to_qint1(data, dt))
    pairs = [
        (D.qint8(0.1), D.qint8(0.1)), (D.qint8(0.1), D.qint8(0.2)), (D.qint8(0.1), np.dtype("int8")),
        (D.quint8(0.1, 3), D.quint8(0.1, 4)), (D.qint1(0.5), D.qint1(0.5)),
        (np.dtype("float32"), np.dtype("float32")),
    ]
    out["dtype_equal"] = np.array([D.is_dtype_equal(a, b) for a, b in pairs])
    two = D._builtin_quant_dtypes["qint2"]
    out["meta_qint2"] = np.array([two.np_dtype_str, two.qmin, two.qmax, two.is_unsigned], object).astype(str)
    np.savez(os.path.join(HERE, "qdtypes.npz"), **out)


def complex_numbers():
    """F.complex/real/imag/polar, the arithmetic MegEngine's complex tensors support, reprs and
    the gradients that flow through real and imaginary parts."""
    rng = np.random.RandomState(6)
    re, im = rng.randn(2, 3).astype("float32"), rng.randn(2, 3).astype("float32")
    r, theta = rng.rand(2, 3).astype("float32") + 0.5, rng.randn(2, 3).astype("float32")
    z, w = F.complex(mge.tensor(re), mge.tensor(im)), F.complex(mge.tensor(im), mge.tensor(r))
    out = {"re": re, "im": im, "r": r, "theta": theta}
    out["z"], out["polar"] = z.numpy(), F.polar(mge.tensor(r), mge.tensor(theta)).numpy()
    out["add"], out["sub"] = (z + w).numpy(), (z - w).numpy()
    out["mul"], out["neg"] = (z * w).numpy(), (-z).numpy()
    out["real"], out["imag"] = F.real(z * w).numpy(), F.imag(z * w).numpy()
    out["reshape"] = z.reshape(3, 2).numpy()
    out["repr"] = np.array(repr(F.complex(mge.tensor([1.0, 2.0]), mge.tensor([3.0, 4.0]))))
    angles = mge.tensor([np.pi / 2, 5 * np.pi / 4])
    out["repr_polar"] = np.array(repr(F.polar(mge.tensor([1.0, 2.0]), angles)))

    def loss(a, b, c, d):
        p = F.complex(a, b) * F.polar(c, d)
        return (F.real(p) * 2 + F.imag(p) * 3).sum()

    out["grad_re"], out["grad_im"], out["grad_r"], out["grad_theta"] = grads(loss, re, im, r, theta)
    np.savez(os.path.join(HERE, "complex.npz"), **out)


def mha_dumps():
    """MegEngine dumps holding a MultiHeadAttn operator (inference mode) and their outputs."""
    import megengine.module as M
    from megengine.jit import trace

    rng = np.random.RandomState(8)
    n, l, s, e = 2, 3, 5, 8
    q = rng.randn(n, l, e).astype("float32")
    kv = rng.randn(n, s, e).astype("float32")
    k2, v2 = rng.randn(n, s, 6).astype("float32"), rng.randn(n, s, 7).astype("float32")
    am = np.where(rng.rand(l, s) < 0.3, -1e4, 0.0).astype("float32")
    kpm = np.zeros((n, s), "float32")
    kpm[1, 3:] = -1e4

    self_attn = M.MultiHeadAttention(e, 2)
    cross = M.MultiHeadAttention(e, 4, kdim=6, vdim=7, bias=False)
    for m in (self_attn, cross):
        m.io_weight_bias[...] = rng.randn(*m.io_weight_bias.shape).astype("float32") * 0.3
        m.eval()

    @trace(symbolic=True, capture_as_const=True)
    def plain(x):
        return self_attn(x, x, x)[0]

    @trace(symbolic=True, capture_as_const=True)
    def masked(x, y, a, p):
        return self_attn(x, y, y, attn_mask=a, key_padding_mask=p, need_weights=True)

    @trace(symbolic=True, capture_as_const=True)
    def kvdim(x, k, v):
        return cross(x, k, v, need_weights=True, average_attn_weights=True)

    out = {"q": q, "kv": kv, "k2": k2, "v2": v2, "am": am, "kpm": kpm}
    out["plain"] = plain(mge.tensor(q)).numpy()
    plain.dump(os.path.join(HERE, "mha_plain.mge"), arg_names=["q"], output_names=["out"])
    o, wt = masked(mge.tensor(q), mge.tensor(kv), mge.tensor(am), mge.tensor(kpm))
    out["masked"], out["masked_weights"] = o.numpy(), wt.numpy()
    masked.dump(
        os.path.join(HERE, "mha_masked.mge"),
        arg_names=["q", "kv", "am", "kpm"],
        output_names=["out", "weights"],
    )
    o, wt = kvdim(mge.tensor(q), mge.tensor(k2), mge.tensor(v2))
    out["kvdim"], out["kvdim_weights"] = o.numpy(), wt.numpy()
    kvdim.dump(
        os.path.join(HERE, "mha_kvdim.mge"), arg_names=["q", "k", "v"], output_names=["out", "weights"]
    )
    np.savez(os.path.join(HERE, "mha_dumps.npz"), **out)


if __name__ == "__main__":
    cross_entropy()
    svd()
    mha()
    svd_dump()
    qdtypes()
    complex_numbers()
    mha_dumps()
