"""MegEngine behaviours of issue 32 (7: advanced indexing, broadcast/reshape targets, empty
reductions, repeat, pad; 8: an invalid negative axis) and F.cond_take / F.gather / F.scatter /
F.pixel_shuffle, checked against numpy and torch, with gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compiler as mge
import compiler.functional as F
import compiler.module as M
from compiler.autodiff import GradManager
from dialects.errors import XmgeError

X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


def test_boolean_masks_index_like_numpy() -> None:
    x = mge.tensor(X)
    np.testing.assert_array_equal(x[x > 10].numpy(), X[X > 10])
    rows = np.array([True, False])
    np.testing.assert_array_equal(x[mge.tensor(rows)].numpy(), X[rows])
    np.testing.assert_array_equal(x[:, np.array([True, False, True])].numpy(), X[:, [True, False, True]])


def test_empty_lists_tuples_and_ints_beside_tensors() -> None:
    x = mge.tensor(X)
    assert x[[]].shape == X[[]].shape == (0, 3, 4)
    np.testing.assert_array_equal(x[(1, 2)].numpy(), X[(1, 2)])
    np.testing.assert_array_equal(x[1, mge.tensor([0, 2])].numpy(), X[1, [0, 2]])
    np.testing.assert_array_equal(x[[1, 0], 2].numpy(), X[[1, 0], 2])
    np.testing.assert_array_equal(x[1, [2, 0], 3].numpy(), X[1, [2, 0], 3])


def test_mask_index_gradient() -> None:
    p = mge.Parameter(X)
    gm = GradManager().attach([p])
    with gm:
        gm.backward((p[p > 10] * 2.0).sum())
    np.testing.assert_array_equal(p.grad.numpy(), np.where(X > 10, 2.0, 0.0))


def test_broadcast_to_none_and_shape_tensor() -> None:
    v = mge.tensor(np.arange(4, dtype=np.float32))
    assert F.broadcast_to(v, (3, None)).shape == (3, 4)
    assert F.broadcast_to(v, mge.tensor(np.array([2, 4], np.int32))).shape == (2, 4)
    assert F.reshape(mge.tensor(X), mge.tensor(np.array([4, 6], np.int32))).shape == (4, 6)
    with pytest.raises(XmgeError, match="broadcast_to"):
        F.broadcast_to(v, (None, 4))


def test_reductions_of_empty_tensors() -> None:
    e = mge.tensor(np.zeros((0, 3), np.float32))
    assert F.sum(e).item() == 0.0
    assert np.isnan(F.mean(e).item())
    assert F.prod(e).item() == 1.0
    with pytest.raises(XmgeError, match="max"):
        F.max(e)


def test_invalid_negative_axis_raises() -> None:
    with pytest.raises(XmgeError, match="axis -4"):
        F.sum(mge.tensor(X), axis=-4)
    with pytest.raises(RuntimeError):
        F.sum(mge.tensor(X), axis=-4)


def test_repeat_with_tensor_repeats_and_uppercase_pad_mode() -> None:
    x = mge.tensor(X[0])
    np.testing.assert_array_equal(F.repeat(x, mge.tensor(2), axis=1).numpy(), np.repeat(X[0], 2, 1))
    got = F.nn.pad(x, ((1, 0), (0, 2)), mode="CONSTANT", constant_value=-1.0).numpy()
    np.testing.assert_array_equal(got, np.pad(X[0], ((1, 0), (0, 2)), constant_values=-1.0))


def test_concat_takes_device() -> None:
    x = mge.tensor(X)
    np.testing.assert_array_equal(F.concat([x, x], axis=1, device="cpu0").numpy(), np.concatenate([X, X], 1))
    # MegEngine 1.13: the result is on the named device; a device compares equal to its logical name
    assert F.concat([x, x], device=x.device).device == "xpux:0" == x.device
    assert str(F.concat([x, x], device="cpu0").device) == "cpu0:0"
    assert F.stack([x, x], device="cpu1").device == "cpu1"
    for bad in ("gpu0", "nodevice"):
        with pytest.raises(XmgeError, match="concat"):
            F.concat([x, x], device=bad)
    with pytest.raises(RuntimeError, match="stack"):
        F.stack([x, x], device="gpu1")


def test_cond_take() -> None:
    x = mge.tensor(X)
    v, i = F.cond_take(x > 7, x)
    np.testing.assert_array_equal(v.numpy(), X[X > 7])
    np.testing.assert_array_equal(i.numpy(), np.flatnonzero(X > 7))
    assert i.dtype == np.int32
    with pytest.raises(XmgeError, match="cond_take"):
        F.cond_take(x[0] > 1, x)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_gather_and_scatter_match_torch(axis: int) -> None:
    rng = np.random.RandomState(0)
    shape = list(X.shape)
    shape[axis] = 2
    index = rng.randint(0, X.shape[axis], shape).astype(np.int32)  # repeats: gradients accumulate
    src = rng.randn(*shape).astype(np.float32)
    p = mge.Parameter(X)
    gm = GradManager().attach([p])
    with gm:
        g = F.gather(p, axis, mge.tensor(index))
        gm.backward((g * mge.tensor(src)).sum())
    t = torch.tensor(X, requires_grad=True)
    tg = torch.gather(t, axis, torch.tensor(index, dtype=torch.int64))
    (tg * torch.tensor(src)).sum().backward()
    np.testing.assert_array_equal(g.numpy(), tg.detach().numpy())
    np.testing.assert_array_equal(p.grad.numpy(), t.grad.numpy())
    # scatter with indices distinct along the axis, so the result is defined
    perm = np.argsort(rng.rand(*X.shape), axis=axis).astype(np.int32)
    sl = [slice(None)] * 3
    sl[axis] = slice(0, 2)
    uniq = perm[tuple(sl)]
    got = F.scatter(mge.tensor(X), axis, mge.tensor(uniq), mge.tensor(src)).numpy()
    want = torch.tensor(X).scatter(axis, torch.tensor(uniq, dtype=torch.int64), torch.tensor(src)).numpy()
    np.testing.assert_array_equal(got, want)


def test_pixel_shuffle_matches_torch_with_gradient() -> None:
    x = np.random.RandomState(1).randn(2, 1, 8, 3, 2).astype(np.float32)
    p = mge.Parameter(x)
    gm = GradManager().attach([p])
    w = np.random.RandomState(2).randn(2, 1, 2, 6, 4).astype(np.float32)
    with gm:
        y = F.pixel_shuffle(p, 2)
        gm.backward((y * mge.tensor(w)).sum())
    t = torch.tensor(x, requires_grad=True)
    ty = torch.nn.functional.pixel_shuffle(t, 2)
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    np.testing.assert_array_equal(p.grad.numpy(), t.grad.numpy())
    with pytest.raises(XmgeError, match="pixel_shuffle"):
        F.pixel_shuffle(mge.tensor(X), 2)


def test_non_zero_and_topk_accuracy() -> None:
    c = np.array([[0, 1, 0], [2, 0, 3]], np.int32)
    np.testing.assert_array_equal(F.non_zero(mge.tensor(c)).numpy(), np.argwhere(c))
    rows, cols = F.non_zero(mge.tensor(c), as_tuple=True)
    np.testing.assert_array_equal(rows.numpy(), np.nonzero(c)[0])
    np.testing.assert_array_equal(cols.numpy(), np.nonzero(c)[1])
    logits = np.random.RandomState(3).randn(16, 5).astype(np.float32)
    target = np.random.RandomState(4).randint(0, 5, 16).astype(np.int32)
    top1, top3 = F.topk_accuracy(mge.tensor(logits), mge.tensor(target), (1, 3))
    order = np.argsort(-logits, 1)
    assert top1.item() == pytest.approx(np.mean(order[:, 0] == target))
    assert top3.item() == pytest.approx(np.mean((order[:, :3] == target[:, None]).any(1)))
    assert F.metric.topk_accuracy is F.utils.topk_accuracy is F.topk_accuracy


@pytest.mark.parametrize("clockwise", [True, False])
def test_vision_flip_and_rot90(clockwise: bool) -> None:
    img = np.arange(2 * 3 * 5 * 2, dtype=np.float32).reshape(2, 3, 5, 2)
    x = mge.tensor(img)
    np.testing.assert_array_equal(F.vision.flip(x).numpy(), img[:, ::-1, ::-1])
    np.testing.assert_array_equal(F.vision.flip(x, vertical=False).numpy(), img[:, :, ::-1])
    np.testing.assert_array_equal(
        F.vision.rot90(x, clockwise=clockwise).numpy(), np.rot90(img, -1 if clockwise else 1, axes=(1, 2))
    )
    with pytest.raises(XmgeError, match="rot90"):
        F.vision.rot90(mge.tensor(img[0]))


def test_device_is_a_comp_node_named_as_megengine_names_it() -> None:
    """Checked on MegEngine 1.13: ``str`` is the logical name, equality is by logical name."""
    x = mge.tensor([1.0])
    assert str(x.device) == "xpux:0" and x.device == "xpux" and x.device != "cpu0"
    assert repr(x.device) == 'CompNode("cpu0:0" from "xpux:0")'
    y = x.to("cpu1")
    assert str(y.device) == "cpu1:0" and y.device != x.device and np.array_equal(y.numpy(), x.numpy())
    with pytest.raises(ValueError, match="invalid device name"):
        x.to("tpu0")
    assert str(F.zeros((2,), device="cpu0").device) == "cpu0:0"
    assert str(F.copy(x, "cpu2").device) == "cpu2:0"


def test_module_forward_pre_hook_and_handlers() -> None:
    lin = M.Linear(2, 2)
    calls = []
    pre = lin.register_forward_pre_hook(lambda m, inputs: (inputs[0] * 0,))
    post = lin.register_forward_hook(lambda m, inputs, out: calls.append(out.shape))
    out = lin(mge.tensor(np.ones((1, 2), np.float32)))
    np.testing.assert_allclose(out.numpy(), lin.bias.numpy()[None], rtol=1e-6)
    pre.remove()
    post.remove()
    assert calls == [(1, 2)]
    out = lin(mge.tensor(np.ones((1, 2), np.float32)))
    assert calls == [(1, 2)] and not np.allclose(out.numpy(), lin.bias.numpy()[None])


def test_tensor_qparams_reset_zero_requires_grad() -> None:
    x = mge.tensor([1.0, 2.0])
    assert x.qparams.scale is None
    x.reset_zero()
    assert x.numpy().tolist() == [0.0, 0.0]
    with pytest.raises(AttributeError, match="reserved"):
        _ = x.requires_grad


def test_arange_and_linspace_compute_as_megengine() -> None:
    """float32 bounds, the last arange value ``start + step * (num - 1)`` in float32 (values from
    MegEngine 1.13)."""
    arange = [0.0, 0.30000001192092896, 0.6000000238418579, 0.9000000357627869]
    assert F.arange(0.0, 1.0, 0.3).numpy().tolist() == arange
    linspace = [0.10000000149011612, 0.30000001192092896, 0.5, 0.699999988079071]
    assert F.linspace(0.1, 0.7, 4).numpy().tolist() == linspace
    assert F.arange(10, 0, -3).numpy().tolist() == [10.0, 7.0, 4.0, 1.0]


def test_max_min_of_an_empty_axis_are_errors() -> None:
    z = mge.tensor(np.zeros((0, 3), np.float32))
    for f in (F.max, F.min):
        with pytest.raises(RuntimeError, match="empty"):
            f(z, axis=0)
    assert F.sum(z, axis=0).numpy().tolist() == [0.0, 0.0, 0.0]
