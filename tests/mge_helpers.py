"""Shared helpers of the .mge tests: golden models traced with xmge's own API."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import numpy as np

import compiler as xm
from backends.mge.container import parse_file
from compiler import jit
from compiler.hub.convnet import ConvNet
from compiler.hub.mini_resnet import MiniResNet
from compiler.hub.multi_io import MultiIO
from tests.conftest import data_path

MODELS: dict[str, type] = {"convnet": ConvNet, "mini_resnet": MiniResNet, "multi_io": MultiIO}


def golden_listing(case: str, variant: str) -> list[str]:
    with open(data_path(case, "oprs.json")) as f:
        return json.load(f)[variant]["types"]


def file_types(data: bytes, graph: int = 0) -> list[str]:
    return [o.kind or o.type_name for o in parse_file(data)[graph].oprs]


def inputs(case: str) -> dict[str, np.ndarray]:
    return dict(np.load(data_path(case, "inputs.npz")))


def traced(case: str) -> Any:
    """A ``trace(capture_as_const=True)`` of the golden model, called once on the golden inputs."""
    net = MODELS[case]()
    w = np.load(data_path(case, "weights.npz"))
    net.load_state_dict({k: w[k] for k in w})
    net.eval()
    ins = inputs(case)
    if case == "multi_io":

        @jit.trace(symbolic=True, capture_as_const=True)
        def f2(image: Any, scale: Any) -> Any:
            return net(image, scale)

        f2(xm.tensor(ins["image"]), xm.tensor(ins["scale"]))
        return f2

    @jit.trace(symbolic=True, capture_as_const=True)
    def f(data: Any) -> Any:
        return net(data)

    f(xm.tensor(ins["data"]))
    return f


def dump_bytes(tr: Any, **kwargs: Any) -> bytes:
    buf = io.BytesIO()
    tr.dump(buf, **kwargs)
    return buf.getvalue()


Runner = Callable[[bytes], dict[str, np.ndarray]]
