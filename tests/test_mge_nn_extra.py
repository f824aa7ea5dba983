"""MegEngine 1.13's remaining nn/math/loss functionals (issue 32): values and gradients against torch
(or numpy where torch has no such op) and MegEngine's documented examples."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compiler as mge
import compiler.functional as F
from compiler.autodiff import GradManager
from dialects.errors import XmgeError

RNG = np.random.default_rng(7)


def _grad(fn, *arrays):
    xs = [mge.Parameter(a) for a in arrays]
    gm = GradManager().attach(xs)
    with gm:
        out = fn(*xs)
        gm.backward(
            F.sum(out * mge.tensor(np.linspace(0.5, 1.5, out.size, dtype=np.float32).reshape(out.shape)))
        )
    return out.numpy(), [x.grad.numpy() for x in xs]


def _torch_grad(fn, *arrays):
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*ts)
    w = torch.tensor(np.linspace(0.5, 1.5, out.numel(), dtype=np.float32).reshape(out.shape))
    (out * w).sum().backward()
    return out.detach().numpy(), [t.grad.numpy() for t in ts]


def _close(ours, theirs, tol=1e-5):
    (o, og), (t, tg) = ours, theirs
    np.testing.assert_allclose(o, t, rtol=tol, atol=tol)
    for a, b in zip(og, tg, strict=True):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


@pytest.mark.parametrize("geom", [((2, 3), 1, (2, 1), (1, 2)), (3, 0, 1, 1), ((1, 2), (0, 1), 2, 1)])
def test_sliding_window_matches_torch_unfold(geom):
    k, p, s, d = geom
    x = RNG.standard_normal((2, 3, 6, 7)).astype(np.float32)

    def ours(t):
        o = F.nn.sliding_window(t, k, p, s, d)
        n, c, oh, ow, kh, kw = o.shape
        return o.transpose(0, 1, 4, 5, 2, 3).reshape(n, c * kh * kw, oh * ow)

    _close(_grad(ours, x), _torch_grad(lambda t: torch.nn.functional.unfold(t, k, d, p, s), x))


def test_sliding_window_transpose_matches_torch_fold():
    cols = RNG.standard_normal((2, 3, 3, 4, 2, 3)).astype(np.float32)

    def ours(t):
        return F.nn.sliding_window_transpose(t, (5, 6), (2, 3), padding=1, stride=(2, 1), dilation=(1, 2))

    def theirs(t):
        flat = t.permute(0, 1, 4, 5, 2, 3).reshape(2, 18, 12)
        return torch.nn.functional.fold(flat, (5, 6), (2, 3), padding=1, stride=(2, 1), dilation=(1, 2))

    _close(_grad(ours, cols), _torch_grad(theirs, cols))
    with pytest.raises(XmgeError, match="does not match output_size"):
        F.nn.sliding_window_transpose(mge.tensor(cols), (9, 9), (2, 3))


def test_local_response_norm_megengine_example_and_torch():
    inp = mge.tensor(np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5))
    out = F.nn.local_response_norm(inp, kernel_size=3, k=1.0, alpha=1e-4, beta=0.75)
    gt_last = [19.420258, 20.331186, 21.233786, 22.127764, 23.012836]  # MegEngine's docstring
    np.testing.assert_allclose(out.numpy()[0, 0, -1], gt_last, rtol=1e-6)
    x = (RNG.standard_normal((2, 7, 3, 3)) * 3).astype(np.float32)
    # torch divides alpha by the window size; MegEngine does not
    _close(
        _grad(lambda t: F.nn.local_response_norm(t, 5, 2.0, 1e-2, 0.75), x),
        _torch_grad(lambda t: torch.nn.functional.local_response_norm(t, 5, alpha=5e-2, beta=0.75, k=2.0), x),
    )


def test_instance_and_general_norm_match_torch():
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    w, b = RNG.standard_normal(3).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
    _close(
        _grad(lambda t, w_, b_: F.nn.instance_norm(t, True, w_, b_), x, w, b),
        _torch_grad(lambda t, w_, b_: torch.nn.functional.instance_norm(t, weight=w_, bias=b_), x, w, b),
        1e-4,
    )
    gw, gb = RNG.standard_normal((4, 5)).astype(np.float32), RNG.standard_normal((4, 5)).astype(np.float32)
    _close(
        _grad(lambda t, w_, b_: F.nn.general_norm(t, (-2, -1), True, w_, b_), x, gw, gb),
        _torch_grad(lambda t, w_, b_: torch.nn.functional.layer_norm(t, (4, 5), w_, b_), x, gw, gb),
        1e-4,
    )
    # non-adjacent axes: weight has the shape of those axes
    nw = RNG.standard_normal((3, 5)).astype(np.float32)
    ours = F.nn.general_norm(
        mge.tensor(x), (1, 3), True, mge.tensor(nw), mge.tensor(np.zeros((3, 5), np.float32))
    )
    mu = x.mean((1, 3), keepdims=True)
    ref = (x - mu) / np.sqrt(x.var((1, 3), keepdims=True) + 1e-5) * nw[None, :, None, :]
    np.testing.assert_allclose(ours.numpy(), ref, rtol=1e-4, atol=1e-5)
    with pytest.raises(XmgeError, match="ascending"):
        F.nn.general_norm(mge.tensor(x), (3, 1), affine=False)


def test_sync_batch_norm_single_process():
    x = RNG.standard_normal((4, 3, 2, 2)).astype(np.float32)
    rm, rv = mge.tensor(np.zeros(3, np.float32)), mge.tensor(np.ones(3, np.float32))
    out = F.nn.sync_batch_norm(x, rm, rv, training=True, momentum=0.9)
    t_rm, t_rv = torch.zeros(3), torch.ones(3)
    ref = torch.nn.functional.batch_norm(torch.tensor(x), t_rm, t_rv, training=True, momentum=0.1)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(rm.numpy().ravel(), t_rm.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rv.numpy().ravel(), t_rv.numpy(), rtol=1e-5, atol=1e-6)
    # nearly constant channel: "max" divides by sqrt(eps) where "additive" would use sqrt(var + eps)
    near = np.array([0.5, 0.5001], np.float32).reshape(2, 1, 1, 1)
    zeros1, ones1 = mge.tensor(np.zeros(1, np.float32)), mge.tensor(np.ones(1, np.float32))
    z = F.nn.sync_batch_norm(near, zeros1, ones1, training=True, eps=1e-2, eps_mode="max")
    np.testing.assert_allclose(z.numpy().ravel(), [-5e-4, 5e-4], rtol=1e-3)


def test_local_conv2d_against_numpy_and_gradients():
    x = RNG.standard_normal((2, 4, 5, 5)).astype(np.float32)
    w = RNG.standard_normal((2, 3, 3, 2, 3, 3, 3)).astype(np.float32)  # groups 2, OH 3, OW 3
    out = F.nn.local_conv2d(mge.tensor(x), mge.tensor(w), stride=2, padding=1)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((2, 6, 3, 3), np.float32)
    for g in range(2):
        for i in range(3):
            for j in range(3):
                patch = xp[:, g * 2 : g * 2 + 2, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3]
                ref[:, g * 3 : g * 3 + 3, i, j] = np.einsum("ncab,cabo->no", patch, w[g, i, j])
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)
    # a locally connected layer with one position is a convolution: gradients as torch's conv2d
    w1 = RNG.standard_normal((1, 1, 4, 3, 3, 5)).astype(np.float32)
    x1 = RNG.standard_normal((2, 4, 3, 3)).astype(np.float32)
    _close(
        _grad(lambda t, k: F.nn.local_conv2d(t, k), x1, w1),
        _torch_grad(
            lambda t, k: torch.nn.functional.conv2d(t, k.reshape(4, 3, 3, 5).permute(3, 0, 1, 2)), x1, w1
        ),
        1e-4,
    )


def test_cross_matches_numpy_and_torch():
    assert F.cross(mge.tensor([1.0, 2.0, 3.0]), mge.tensor([4.0, 5.0, 6.0])).numpy().tolist() == [-3, 6, -3]
    a, b = RNG.standard_normal((3, 4)).astype(np.float32), RNG.standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(F.cross(mge.tensor(a), mge.tensor(b), axisa=0, axisc=0).numpy(),
                               np.cross(a, b, axisa=0, axisc=0), rtol=1e-6)  # fmt: skip
    np.testing.assert_allclose(F.cross(mge.tensor([1.0, 2.0]), mge.tensor([3.0, 4.0])).numpy(), [0, 0, -2])
    c = RNG.standard_normal((4, 3)).astype(np.float32)
    _close(_grad(F.cross, b, c), _torch_grad(lambda u, v: torch.linalg.cross(u, v), b, c))


def test_matinv_matches_torch_with_gradient():
    m = RNG.standard_normal((2, 3, 4, 4)).astype(np.float32) + 2 * np.eye(4, dtype=np.float32)
    _close(_grad(F.matinv, m), _torch_grad(torch.linalg.inv, m), 1e-4)
    perm = np.array([[0, 1.0, 0], [0, 0, 2.0], [3.0, 0, 0]], np.float32)  # needs pivoting
    np.testing.assert_allclose(F.matinv(mge.tensor(perm)).numpy(), np.linalg.inv(perm), rtol=1e-6)
    with pytest.raises(XmgeError, match="n, n"):
        F.matinv(mge.tensor(np.zeros((2, 3), np.float32)))


def test_hinge_loss_megengine_examples():
    pred = mge.tensor([[0.5, -0.5, 0.1], [-0.6, 0.7, 0.8]])
    label = mge.tensor([[1, -1, -1], [-1, 1, 1]])
    assert F.loss.hinge_loss(pred, label).item() == pytest.approx(1.5)
    np.testing.assert_allclose(F.nn.hinge_loss(pred, label, reduction="none").numpy(), [2.1, 0.9], rtol=1e-6)
    assert F.loss.hinge_loss(pred, label, reduction="sum").item() == pytest.approx(3.0)
    assert F.loss.hinge_loss(pred, label, "L2", "none").numpy()[0] == pytest.approx(0.25 + 0.25 + 1.21)


@pytest.mark.parametrize("concatenated", [False, True])
def test_ctc_loss_matches_torch(concatenated):
    pred = mge.tensor([[[0.0614, 0.9386], [0.8812, 0.1188]], [[0.699, 0.301], [0.2572, 0.7428]]])
    assert F.nn.ctc_loss(
        pred, mge.tensor([2, 2]), mge.tensor([1, 1]), mge.tensor([1, 1])
    ).item() == pytest.approx(0.1504417, rel=1e-5)  # MegEngine's docstring
    t, n, c = 6, 3, 4
    logits = RNG.standard_normal((t, n, c)).astype(np.float32)
    labels = np.array([[1, 1, 2], [3, 0, 0], [2, 3, 0]], np.int32)  # repeats need a blank between
    llen, plen = np.array([3, 1, 2], np.int32), np.array([6, 4, 5], np.int32)
    lab = np.concatenate([labels[i, : llen[i]] for i in range(n)]) if concatenated else labels
    # torch's CTC backward assumes log_softmax inputs, so both are differentiated w.r.t. logits
    for reduction in ("none", "mean", "sum"):
        ours = _grad(
            lambda x, reduction=reduction: F.nn.ctc_loss(
                F.softmax(x, -1), mge.tensor(plen), mge.tensor(lab), mge.tensor(llen), 0, reduction
            ),
            logits,
        )
        theirs = _torch_grad(
            lambda x, reduction=reduction: torch.nn.functional.ctc_loss(
                x.log_softmax(-1),
                torch.tensor(lab).long(),
                torch.tensor(plen).long(),
                torch.tensor(llen).long(),
                0,
                reduction,
            ),  # fmt: skip
            logits,
        )
        _close(ours, theirs, 1e-4)


def test_ctc_loss_long_sequences_below_the_float32_floor_match_torch():
    # log-probabilities far below log(tiny) ~ -87: neither the first states nor the final pick may
    # be floored there (MegEngine's own test reaches losses of ~400)
    rng = np.random.default_rng(5)
    t, n, c = 60, 4, 20
    logits = rng.standard_normal((t, n, c)).astype(np.float32)
    llen = np.array([5, 12, 20, 1], np.int32)
    lab = rng.integers(1, c, size=int(llen.sum())).astype(np.int32)
    plen = np.full(n, t, np.int32)
    probs = torch.softmax(torch.tensor(logits), -1)
    ours = F.nn.ctc_loss(
        mge.tensor(probs.numpy()), mge.tensor(plen), mge.tensor(lab), mge.tensor(llen), 0, "none"
    )
    theirs = torch.nn.functional.ctc_loss(
        probs.log(), torch.tensor(lab).long(), torch.tensor(plen).long(), torch.tensor(llen).long(), 0, "none"
    )
    assert theirs.min() > 100
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-4)


def test_sliding_window_transpose_sums_in_megengine_order_bit_exactly():
    x = RNG.standard_normal((2, 3, 4, 9, 3, 2)).astype(np.float32)
    (h, w), (ph, pw), (sh, sw), (dh, dw) = (7, 8), (1, 2), (2, 1), (1, 3)
    want = np.zeros((2, 3, h, w), np.float32)
    for oh in range(4):  # windows row-major, elements row-major within each, as MegEngine sums
        for ow in range(9):
            for i in range(3):
                for j in range(2):
                    y, z = oh * sh - ph + i * dh, ow * sw - pw + j * dw
                    if 0 <= y < h and 0 <= z < w:
                        want[:, :, y, z] += x[:, :, oh, ow, i, j]
    got = F.nn.sliding_window_transpose(mge.tensor(x), (h, w), (3, 2), (ph, pw), (sh, sw), (dh, dw))
    np.testing.assert_array_equal(got.numpy(), want)


def test_batch_norm_training_dtype_amp_and_returned_statistics():
    import compiler.amp as amp

    x = RNG.standard_normal((4, 3, 2, 2)).astype(np.float32)
    w, b = mge.tensor(np.ones((1, 3, 1, 1), np.float32)), mge.tensor(np.zeros((1, 3, 1, 1), np.float32))
    half = F.batch_norm(mge.tensor(x).astype("float16"), weight=w, bias=b, training=True)
    assert half.dtype == np.float16  # the result keeps the input's dtype
    amp.enabled = True
    try:
        auto = F.batch_norm(mge.tensor(x), weight=w, bias=b, training=True)
    finally:
        amp.enabled = False
    assert auto.dtype == np.float16
    np.testing.assert_array_equal(auto.numpy(), half.numpy())
    ref = torch.nn.functional.batch_norm(torch.tensor(x).half().float(), None, None, training=True)
    np.testing.assert_allclose(half.numpy(), ref.numpy(), rtol=1e-2, atol=1e-2)
    # inplace=False: the updated running statistics are returned, the given ones stay
    rm, rv = mge.tensor(np.zeros(3, np.float32)), mge.tensor(np.ones(3, np.float32))
    out, new_mean, new_var = F.batch_norm(mge.tensor(x), rm, rv, training=True, momentum=0.9, inplace=False)
    t_rm, t_rv = torch.zeros(3), torch.ones(3)
    torch.nn.functional.batch_norm(torch.tensor(x), t_rm, t_rv, training=True, momentum=0.1)
    np.testing.assert_allclose(new_mean.numpy(), t_rm.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(new_var.numpy(), t_rv.numpy(), rtol=1e-5, atol=1e-6)
    assert rm.numpy().tolist() == [0, 0, 0] and rv.numpy().tolist() == [1, 1, 1]
    assert isinstance(F.batch_norm(mge.tensor(x), training=True, inplace=False), mge.Tensor)


def test_graph_inference_takes_a_scalar_for_a_dumped_scalar_input():
    import io

    from compiler.jit import trace
    from compiler.utils.comp_graph_tools import GraphInference

    @trace(symbolic=True, capture_as_const=True)
    def pick(mask, x, y):
        return F.where(mask, x, y)

    args = [np.array(True), np.array(1.0, np.float32), np.array(0.0, np.float32)]
    pick(*[mge.tensor(a) for a in args])
    buf = io.BytesIO()
    info = pick.dump(buf)
    buf.seek(0)
    out = list(GraphInference(buf).run(inp_dict=dict(zip(sorted(info[4]), args, strict=True))).values())[0]
    np.testing.assert_array_equal(np.asarray(out).reshape(()), 1.0)


@pytest.mark.parametrize("name", ["Conv1d", "Conv2d", "ConvTranspose2d"])
def test_conv_promotes_mixed_float_operands_like_megengine(name):
    import compiler.module as M

    m = getattr(M, name)(4, 6, 3)
    shape = (2, 4, 7) if name == "Conv1d" else (2, 4, 7, 7)
    x = mge.tensor(RNG.random(shape).astype(np.float16))
    # a float16 input with float32 weights is computed in float32, as MegEngine promotes
    np.testing.assert_array_equal(m(x).numpy(), m(x.astype("float32")).numpy())
    assert m(x).dtype == np.float32
