"""MegEngine's ``module.rnn``: ``RNNCell``, ``LSTMCell``, ``RNN`` and ``LSTM``, composed of matrix
products and elementwise ops (so they are differentiated and traced like any functional code).

The cells compute ``act(x W_ih^T + b_ih + h W_hh^T + b_hh)``; an LSTM's gates are in the order
input, forget, cell, output, and ``c' = f * c + i * g``, ``h' = o * tanh(c')`` (MegDNN's order,
also torch's). ``RNN``/``LSTM`` keep all their weights in one parameter, ``_flatten_weights`` of
shape ``(gates * hidden, columns)``, laid out as MegDNN reads it: cell after cell (layer by layer,
forward direction before backward), each as ``W_ih`` (row-major), ``W_hh``, then ``b_ih`` and
``b_hh`` when there is a bias. A multi-layer network's inter-layer ``dropout`` is not applied
(MegEngine's CPU kernel does not apply it either).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import compiler.functional as F
from compiler.core import op_error
from compiler.module.init import uniform_
from compiler.module.module import Module
from compiler.tensor import Parameter, Tensor

__all__ = ["LSTM", "LSTMCell", "RNN", "RNNCell"]


def _gates(
    x: Tensor, h: Tensor, w_ih: Tensor, b_ih: Tensor | None, w_hh: Tensor, b_hh: Tensor | None
) -> Tensor:
    out = F.matmul(x, w_ih, transpose_b=True) + F.matmul(h, w_hh, transpose_b=True)
    if b_ih is not None:
        out = out + b_ih + b_hh
    return out


def _activation(label: str, mode: str) -> Any:
    acts = {"tanh": F.tanh, "relu": F.relu}
    key = str(getattr(mode, "name", mode)).lower()
    if key not in acts:
        raise op_error(label, f"nonlinearity must be 'tanh' or 'relu', got {mode!r}")
    return acts[key]


def _rnn_step(act: Any, x: Tensor, h: Tensor, w: tuple[Any, ...]) -> Tensor:
    return act(_gates(x, h, *w))


def _lstm_step(x: Tensor, state: tuple[Tensor, Tensor], w: tuple[Any, ...]) -> tuple[Tensor, Tensor]:
    h, c = state
    gates = _gates(x, h, *w)
    n = gates.shape[-1] // 4
    i, f = F.sigmoid(gates[:, :n]), F.sigmoid(gates[:, n : 2 * n])
    g, o = F.tanh(gates[:, 2 * n : 3 * n]), F.sigmoid(gates[:, 3 * n :])
    c_new = f * c + i * g
    return o * F.tanh(c_new), c_new


class RNNCellBase(Module):
    def __init__(self, input_size: int, hidden_size: int, bias: bool, num_chunks: int, **kwargs: Any) -> None:
        super().__init__(kwargs.get("name"))
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        self.gate_hidden_size = num_chunks * hidden_size
        self.weight_ih = Parameter(np.zeros((self.gate_hidden_size, input_size), np.float32))
        self.weight_hh = Parameter(np.zeros((self.gate_hidden_size, hidden_size), np.float32))
        if bias:
            self.bias_ih = Parameter(np.zeros(self.gate_hidden_size, np.float32))
            self.bias_hh = Parameter(np.zeros(self.gate_hidden_size, np.float32))
        else:
            self.bias_ih = self.bias_hh = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size)
        for weight in self.parameters():
            uniform_(weight, -stdv, stdv)

    def _weights(self) -> tuple[Any, ...]:
        return (self.weight_ih, self.bias_ih, self.weight_hh, self.bias_hh)

    def _check(self, label: str, x: Tensor) -> None:
        if x.ndim != 2 or x.shape[1] != self.input_size:
            raise op_error(label, f"input must be (batch, {self.input_size}), got shape {x.shape}")


class RNNCell(RNNCellBase):
    """One step of an Elman RNN: ``h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)``."""

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh", **kwargs: Any
    ) -> None:
        self.nonlinearity = nonlinearity
        self._act = _activation("RNNCell", nonlinearity)
        super().__init__(input_size, hidden_size, bias, 1, **kwargs)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:  # noqa: A002 - MegEngine's name
        self._check("RNNCell", input)
        h = F.zeros((input.shape[0], self.hidden_size)) if hx is None else hx
        return _rnn_step(self._act, input, h, self._weights())


class LSTMCell(RNNCellBase):
    """One LSTM step; ``hx`` is ``(h, c)``; returns ``(h', c')``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, **kwargs: Any) -> None:
        super().__init__(input_size, hidden_size, bias, 4, **kwargs)

    def forward(self, input: Tensor, hx: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:  # noqa: A002
        self._check("LSTMCell", input)
        if hx is None:
            zeros = F.zeros((input.shape[0], self.hidden_size))
            hx = (zeros, zeros)
        return _lstm_step(input, hx, self._weights())


class RNNBase(Module):
    _chunks = 1
    _label = "RNN"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0,
        bidirectional: bool = False,
        proj_size: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(kwargs.get("name"))
        if isinstance(dropout, bool) or not isinstance(dropout, int | float) or not 0 <= dropout <= 1:
            raise ValueError(
                "Dropout should be a float in [0, 1], which indicates the probability "
                "of an element to be zero"
            )
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        if proj_size:
            raise op_error(self._label, "proj_size (LSTM projections) is not supported")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size = bidirectional, proj_size
        self.num_directions = 2 if bidirectional else 1
        gate = self._chunks * hidden_size
        columns = 0
        for layer in range(num_layers):
            layer_in = input_size if layer == 0 else self.num_directions * hidden_size
            columns += self.num_directions * (layer_in + hidden_size + (2 if bias else 0))
        self._flatten_weights = Parameter(np.zeros((gate, columns), np.float32))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size)
        uniform_(self._flatten_weights, -stdv, stdv)

    def _cell_weights(self) -> list[tuple[Any, ...]]:
        """Views of ``_flatten_weights`` per cell, in MegDNN's order (differentiable slices)."""
        gate = self._chunks * self.hidden_size
        flat = F.reshape(self._flatten_weights, (-1,))
        cells, at = [], 0

        def take(shape: tuple[int, ...]) -> Tensor:
            nonlocal at
            size = int(np.prod(shape))
            out = F.reshape(flat[at : at + size], shape)
            at += size
            return out

        for layer in range(self.num_layers):
            layer_in = self.input_size if layer == 0 else self.num_directions * self.hidden_size
            for _ in range(self.num_directions):
                w_ih, w_hh = take((gate, layer_in)), take((gate, self.hidden_size))
                b_ih, b_hh = (take((gate,)), take((gate,))) if self.bias else (None, None)
                cells.append((w_ih, b_ih, w_hh, b_hh))
        return cells

    def _step(self, x: Tensor, state: Any, w: tuple[Any, ...]) -> Any:
        raise NotImplementedError

    def _output_of(self, state: Any) -> Tensor:
        return state

    def _run(self, seq: Tensor, states: list[Any]) -> tuple[Tensor, list[Any]]:
        cells = self._cell_weights()
        finals: list[Any] = []
        layer_input = seq
        for layer in range(self.num_layers):
            outs = []
            for d in range(self.num_directions):
                idx = layer * self.num_directions + d
                state = states[idx]
                steps = range(layer_input.shape[0])
                per_step: list[Tensor] = [None] * layer_input.shape[0]  # type: ignore[list-item]
                for t in reversed(steps) if d == 1 else steps:
                    state = self._step(layer_input[t], state, cells[idx])
                    per_step[t] = self._output_of(state)
                finals.append(state)
                outs.append(F.stack(per_step, 0))
            layer_input = outs[0] if len(outs) == 1 else F.concat(outs, axis=2)
        return layer_input, finals

    def _split_state(self, hx: Tensor) -> list[Tensor]:
        want = (self.num_directions * self.num_layers,)
        if hx.ndim != 3 or hx.shape[:1] != want or hx.shape[2] != self.hidden_size:
            raise op_error(
                self._label,
                f"hidden state must be ({want[0]}, batch, {self.hidden_size}), got shape {hx.shape}",
            )
        return [hx[i] for i in range(hx.shape[0])]

    def forward(self, input: Tensor, hx: Any = None) -> tuple[Tensor, Any]:  # noqa: A002 - MegEngine's name
        if input.ndim != 3 or input.shape[2] != self.input_size:
            raise op_error(
                self._label, f"input must be 3-D with {self.input_size} features, got {input.shape}"
            )
        seq = F.transpose(input, (1, 0, 2)) if self.batch_first else input
        output, hidden = self._forward_seq(seq, hx)
        if self.batch_first:
            output = F.transpose(output, (1, 0, 2))
        return output, hidden

    def _forward_seq(self, seq: Tensor, hx: Any) -> tuple[Tensor, Any]:
        raise NotImplementedError


class RNN(RNNBase):
    """A multi-layer Elman RNN over (seq, batch, feature) input (``batch_first``: batch leading);
    ``hx`` is (layers * directions, batch, hidden); returns ``(output, h_n)``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.nonlinearity = kwargs.pop("nonlinearity", "tanh")
        self._act = _activation("RNN", self.nonlinearity)
        super().__init__(*args, **kwargs)

    def _step(self, x: Tensor, state: Any, w: tuple[Any, ...]) -> Any:
        return _rnn_step(self._act, x, state, w)

    def _forward_seq(self, seq: Tensor, hx: Any) -> tuple[Tensor, Any]:
        n = self.num_directions * self.num_layers
        if hx is None:
            hx = F.zeros((n, seq.shape[1], self.hidden_size))
        output, finals = self._run(seq, self._split_state(hx))
        return output, F.stack(finals, 0)


class LSTM(RNNBase):
    """A multi-layer LSTM; ``hx`` is ``(h_0, c_0)``, each (layers * directions, batch, hidden);
    returns ``(output, (h_n, c_n))``."""

    _chunks = 4
    _label = "LSTM"

    def _step(self, x: Tensor, state: Any, w: tuple[Any, ...]) -> Any:
        return _lstm_step(x, state, w)

    def _output_of(self, state: Any) -> Tensor:
        return state[0]

    def _forward_seq(self, seq: Tensor, hx: Any) -> tuple[Tensor, Any]:
        n = self.num_directions * self.num_layers
        if hx is None:
            zeros = F.zeros((n, seq.shape[1], self.hidden_size))
            hx = (zeros, zeros)
        h0, c0 = hx
        states = list(zip(self._split_state(h0), self._split_state(c0), strict=True))
        output, finals = self._run(seq, states)
        return output, (F.stack([s[0] for s in finals], 0), F.stack([s[1] for s in finals], 0))
