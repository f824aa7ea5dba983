"""MegEngine 1.13's ``functional`` API."""

from compiler.functional import loss, nn  # noqa: F401
from compiler.functional.elemwise import *  # noqa: F403
from compiler.functional.elemwise import abs, add, div, pow, round  # noqa: A004
from compiler.functional.math import batch_matmul, matmul, max, mean, min, norm, prod, sum  # noqa: A004
from compiler.functional.nn import (
    adaptive_avg_pool2d,
    adaptive_max_pool2d,
    avg_pool2d,
    batch_norm,
    conv2d,
    dropout,
    leaky_relu,
    linear,
    log_softmax,
    logsumexp,
    max_pool2d,
    pad,
    softmax,
    softplus,
)
from compiler.functional.tensor import (
    arange,
    astype,
    broadcast_to,
    concat,
    dimshuffle,
    expand_dims,
    flatten,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    reshape,
    split,
    squeeze,
    stack,
    transpose,
    where,
    zeros,
    zeros_like,
)

__all__ = [name for name in dir() if not name.startswith("_")]
