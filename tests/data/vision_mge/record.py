"""Records what real MegEngine 1.13 computes on xmge's dumps of tests/vision_graphs.py (from the root):

    PYTHONPATH=$PWD .venv/bin/python tests/data/vision_mge/record.py dump /tmp/vis
    /work/shared/tools/megengine-oracle/mgepy tests/data/vision_mge/record.py run /tmp/vis
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def dump(folder: str) -> None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
    import compiler as xm
    from compiler import jit
    from tests.vision_graphs import GRAPHS

    rng = np.random.RandomState(0)
    img = rng.randn(1, 2, 8, 8).astype("float32")
    inputs = {
        "warp": (img, np.array([[[1.1, 0.1, 0.5], [0.05, 0.9, -0.3], [0.001, 0.002, 1.0]]], "float32")),
        "roi_align": (img, np.array([[0, 1.0, 1.5, 6.0, 7.0], [0, 0.0, 0.0, 3.3, 4.1]], "float32")),
        "conv3d": (rng.randn(1, 2, 5, 6, 7).astype("float32"), rng.randn(3, 2, 3, 3, 3).astype("float32")),
        "correlation": (img, rng.randn(1, 2, 8, 8).astype("float32")),
    }
    inputs["warp_const"] = inputs["warp"]
    inputs["roi_align_max"] = inputs["roi_pooling"] = inputs["roi_align"]
    os.makedirs(folder, exist_ok=True)
    for name, fn in GRAPHS.items():
        traced = jit.trace(fn, symbolic=True, capture_as_const=True)
        traced(*[xm.tensor(a) for a in inputs[name]])
        traced.dump(os.path.join(folder, name + ".mge"), arg_names=["a", "b"])
        np.savez(os.path.join(folder, name + "_in.npz"), a=inputs[name][0], b=inputs[name][1])


def run(folder: str) -> None:
    from megenginelite import LiteNetwork

    record = {}
    for name in sorted(f[: -len(".mge")] for f in os.listdir(folder) if f.endswith(".mge")):
        inputs = dict(np.load(os.path.join(folder, name + "_in.npz")))
        net = LiteNetwork()
        net.load(os.path.join(folder, name + ".mge"))
        for key in ("a", "b"):
            net.get_io_tensor(key).set_data_by_copy(inputs[key])
            record[f"{name}:{key}"] = inputs[key]
        net.forward()
        net.wait()
        (out,) = net.get_all_output_name()
        record[f"{name}:megengine"] = net.get_io_tensor(out).to_numpy().copy()
    np.savez_compressed(os.path.join(HERE, "megengine_outputs.npz"), **record)


if __name__ == "__main__":
    {"dump": dump, "run": run}[sys.argv[1]](sys.argv[2])
