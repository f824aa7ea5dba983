"""Records what real MegEngine 1.13 computes for traces with symbolic shapes and CondTake (run from
the repository root):

    /work/shared/tools/megengine-oracle/mgepy tests/data/symbolic_shape/record.py mge
    PYTHONPATH=$PWD .venv/bin/python tests/data/symbolic_shape/record.py dump /tmp/symshape
    /work/shared/tools/megengine-oracle/mgepy tests/data/symbolic_shape/record.py run /tmp/symshape

``mge`` traces each case of :data:`CASES` with MegEngine and dumps it here as ``<case>.mge``;
``dump`` dumps the same cases with xmge into a folder; ``run`` runs every file (MegEngine's here
and xmge's in the folder) with megenginelite, MegEngine's deployment runtime, on each input set of
the case (each at another input shape or with other data) and writes ``<case>.npz`` (MegEngine's
dump) and ``<case>.xmge.npz`` (xmge's): inputs as ``<set>/in:<name>``, outputs as ``<set>/<i>``
in output order. The cases are written once, for either package (``megengine`` or ``compiler``)."""
import os
import sys
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
RNG = np.random.default_rng(32)
W_CONV = (RNG.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
W_FC = (RNG.standard_normal((5, 4 * 3 * 3)) * 0.3).astype(np.float32)


def _shape_ops(mge: Any, F: Any, x: Any) -> Any:
    s = x.shape
    y = x.reshape(s[0], -1) * 2
    z = F.zeros((s[0], 2)) + F.full((1, s[1]), 3.0).sum()
    b = F.broadcast_to(F.ones((1,)), (s[0] * 2, s[1]))
    return y, z, b


def _net(mge: Any, F: Any, x: Any) -> Any:
    y = F.relu(F.conv2d(x, mge.tensor(W_CONV), stride=2))
    return F.matmul(y.reshape(y.shape[0], -1), mge.tensor(W_FC), transpose_b=True)


def _cond_take(mge: Any, F: Any, x: Any, t: Any) -> Any:
    v, i = F.cond_take(x > t, x)
    return v * 2, i


def _cond_take_reshape(mge: Any, F: Any, x: Any, t: Any) -> Any:
    v, i = F.cond_take(x > t, x)
    return F.sum(v) + F.max(i).astype("float32"), v.reshape(1, -1)


X = np.array([[0.5, -1, 2, 3], [-4, 5, 0.25, -7], [8, -9, 10, 1]], np.float32)
# name -> (function, input names, input sets: each a dict of arrays; the first is the traced one)
CASES = {
    "shape_ops": (_shape_ops, ["x"], [
        {"x": np.arange(24, dtype=np.float32).reshape(2, 3, 4)},
        {"x": np.arange(105, dtype=np.float32).reshape(5, 3, 7)},
    ]),
    "net": (_net, ["x"], [
        {"x": RNG.standard_normal((1, 3, 7, 7)).astype(np.float32)},
        {"x": RNG.standard_normal((3, 3, 7, 7)).astype(np.float32)},
    ]),
    "cond_take": (_cond_take, ["x", "t"], [
        {"x": X, "t": np.array([0.3], np.float32)},
        {"x": X, "t": np.array([2.5], np.float32)},
        {"x": np.arange(10, dtype=np.float32).reshape(2, 5) - 4, "t": np.array([0.0], np.float32)},
    ]),
    "cond_take_reshape": (_cond_take_reshape, ["x", "t"], [
        {"x": X, "t": np.array([0.3], np.float32)},
        {"x": X, "t": np.array([2.5], np.float32)},
        {"x": np.arange(10, dtype=np.float32).reshape(2, 5) - 4, "t": np.array([0.0], np.float32)},
    ]),
}  # fmt: skip


def traced(package: Any, name: str) -> Any:
    """Case ``name`` traced (symbolic, capture_as_const, symbolic shapes: trace's default) on its
    first input set, with ``package`` (megengine or compiler)."""
    fn, names, sets = CASES[name]
    F = package.functional

    @package.jit.trace(symbolic=True, capture_as_const=True)
    def f(*args: Any) -> Any:
        return fn(package, F, *args)

    f(*[package.tensor(sets[0][n]) for n in names])
    return f


def dump_all(package: Any, folder: str) -> None:
    os.makedirs(folder, exist_ok=True)
    for name, (_, names, _) in CASES.items():
        traced(package, name).dump(os.path.join(folder, name + ".mge"), arg_names=names)


def run(folder: str) -> None:
    from megenginelite import LiteNetwork

    for name, (_, names, sets) in CASES.items():
        files = ((os.path.join(HERE, name + ".mge"), ""), (os.path.join(folder, name + ".mge"), ".xmge"))
        for path, suffix in files:
            record = {}
            for k, inputs in enumerate(sets):
                net = LiteNetwork()
                net.load(path)
                for n in names:
                    net.get_io_tensor(n).set_data_by_copy(inputs[n])
                    record[f"{k}/in:{n}"] = inputs[n]
                net.forward()
                net.wait()
                for i, out in enumerate(net.get_all_output_name()):
                    record[f"{k}/{i}"] = net.get_io_tensor(out).to_numpy().copy()
            np.savez(os.path.join(HERE, name + suffix + ".npz"), **record)
            print(name + suffix, {k: v.shape for k, v in record.items() if "in:" not in k})


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "mge":
        import megengine

        dump_all(megengine, HERE)
    elif mode == "dump":
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
        import compiler

        dump_all(compiler, sys.argv[2])
    else:
        run(sys.argv[2])
