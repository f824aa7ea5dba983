"""module.rnn (MegEngine 1.13): RNNCell/LSTMCell/RNN/LSTM against torch with the same weights
(MegDNN's flattened layout mapped to torch's per-layer parameters), gradients included."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compiler as mge
import compiler.functional as F
import compiler.module as M
from compiler.autodiff import GradManager

RNG = np.random.default_rng(4)


def _load_torch(tm: torch.nn.Module, mm: M.Module) -> None:
    flat = mm._flatten_weights.numpy().reshape(-1)
    at = 0
    for layer in range(mm.num_layers):
        for d in range(mm.num_directions):
            suffix = f"_l{layer}" + ("_reverse" if d else "")
            for name in ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if mm.bias else []):
                p = getattr(tm, name + suffix)
                p.data = torch.tensor(flat[at : at + p.numel()].reshape(p.shape))
                at += p.numel()
    assert at == flat.size  # every flattened weight is used, in MegDNN's order


@pytest.mark.parametrize("kind", ["RNN", "LSTM"])
@pytest.mark.parametrize(
    "bidirectional, batch_first, bias", [(False, False, True), (True, True, True), (True, False, False)]
)
def test_rnn_and_lstm_match_torch(kind, bidirectional, batch_first, bias):
    ours = getattr(M, kind)(
        5, 4, num_layers=2, bidirectional=bidirectional, batch_first=batch_first, bias=bias
    )
    theirs = getattr(torch.nn, kind)(
        5, 4, num_layers=2, bidirectional=bidirectional, batch_first=batch_first, bias=bias
    )
    _load_torch(theirs, ours)
    x = RNG.standard_normal((3, 6, 5)).astype(np.float32)
    gm = GradManager().attach([ours._flatten_weights])
    with gm:
        out, hidden = ours(mge.tensor(x))
        gm.backward(F.sum(out * out))
    t_out, t_hidden = theirs(torch.tensor(x))
    (t_out * t_out).sum().backward()
    np.testing.assert_allclose(out.numpy(), t_out.detach().numpy(), rtol=1e-5, atol=1e-6)
    hs = hidden if isinstance(hidden, tuple) else (hidden,)
    ths = t_hidden if isinstance(t_hidden, tuple) else (t_hidden,)
    for a, b in zip(hs, ths, strict=True):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)
    t_grads = np.concatenate(
        [p.grad.numpy().reshape(-1) for name, p in theirs.named_parameters()]
    )  # torch lists them layer by layer, direction by direction, ih/hh weights then biases: our order
    np.testing.assert_allclose(ours._flatten_weights.grad.numpy().reshape(-1), t_grads, rtol=1e-4, atol=1e-5)


def test_cells_match_torch():
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    h = RNG.standard_normal((3, 4)).astype(np.float32)
    c = RNG.standard_normal((3, 4)).astype(np.float32)
    for ours, theirs in ((M.RNNCell(5, 4, nonlinearity="relu"), torch.nn.RNNCell(5, 4, nonlinearity="relu")),
                         (M.LSTMCell(5, 4), torch.nn.LSTMCell(5, 4))):  # fmt: skip
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(theirs, name).data = torch.tensor(getattr(ours, name).numpy())
        if isinstance(ours, M.LSTMCell):
            h1, c1 = ours(mge.tensor(x), (mge.tensor(h), mge.tensor(c)))
            th, tc = theirs(torch.tensor(x), (torch.tensor(h), torch.tensor(c)))
            np.testing.assert_allclose(c1.numpy(), tc.detach().numpy(), rtol=1e-5, atol=1e-6)
            assert ours(mge.tensor(x))[0].shape == (3, 4)
        else:
            h1, th = ours(mge.tensor(x), mge.tensor(h)), theirs(torch.tensor(x), torch.tensor(h))
            assert ours(mge.tensor(x)).shape == (3, 4)
        np.testing.assert_allclose(h1.numpy(), th.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_bad_arguments():
    with pytest.raises(ValueError, match="Dropout"):
        M.RNN(3, 4, dropout=2)
    with pytest.raises(ValueError, match="nonlinearity"):
        M.RNNCell(3, 4, nonlinearity="gelu")
    with pytest.raises(ValueError, match="hidden state"):
        M.RNN(3, 4)(mge.tensor(np.zeros((2, 1, 3), np.float32)), mge.tensor(np.zeros((2, 1, 4), np.float32)))
