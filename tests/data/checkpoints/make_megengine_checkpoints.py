"""Writes this folder's MegEngine files with the real MegEngine 1.13 (numpy 1.23), not with xmge:

    cd tests/data/checkpoints && /work/shared/tools/megengine-oracle/mgepy make_megengine_checkpoints.py

* ``tensors_p{2,4}.pkl``: ``{"t": Tensor(arange(3)), "p": Parameter(ones(2))}``, which xmge's
  ``save`` must reproduce byte for byte.
* ``checkpoint_p{2,4}.pkl``: a training checkpoint after two SGD steps: the model's state dict
  (arrays), the optimizer's (arrays, and with ``keep_var`` Tensors), loose tensors on the default
  device and on ``cpu0``, an int8 tensor; ``checkpoint_expected.npz``: its values, and the model's
  output on ``checkpoint_input``.
"""

from __future__ import annotations

import io

import megengine as mge
import megengine.autodiff as ad
import megengine.functional as F
import megengine.module as M
import megengine.optimizer as optim
import numpy as np


def main() -> None:
    t = mge.Tensor(np.arange(3, dtype="float32"))
    p = mge.Parameter(np.ones((2,), "float32"))
    for proto in (2, 4):
        buf = io.BytesIO()
        mge.save({"t": t, "p": p}, buf, pickle_protocol=proto)
        with open(f"tensors_p{proto}.pkl", "wb") as f:
            f.write(buf.getvalue())

    rng = np.random.default_rng(0)
    net = M.Sequential(M.Linear(4, 3), M.ReLU(), M.Linear(3, 2))
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    gm = ad.GradManager().attach(net.parameters())
    x = mge.Tensor(rng.standard_normal((5, 4)).astype("float32"))
    for _ in range(2):
        with gm:
            loss = F.mean(net(x) ** 2)
            gm.backward(loss)
        opt.step().clear_grad()
    probe = rng.standard_normal((2, 4)).astype("float32")
    ckpt = {
        "epoch": 2,
        "loss": float(loss.item()),
        "state_dict": net.state_dict(),
        "opt": opt.state_dict(),
        "opt_keep_var": opt.state_dict(keep_var=True),
        "tensors": {
            "default": mge.Tensor(np.arange(6, dtype="float32").reshape(2, 3)),
            "cpu0": mge.Tensor(np.array([1.5, -2.0], "float32"), device="cpu0"),
            "int8": mge.Tensor(np.array([-3, 0, 7], "int8"), dtype="int8"),
            "param": mge.Parameter(np.full((2, 2), 0.25, "float32")),
        },
    }
    for proto in (2, 4):
        mge.save(ckpt, f"checkpoint_p{proto}.pkl", pickle_protocol=proto)
    expected = {f"state_dict.{k}": v for k, v in ckpt["state_dict"].items()}
    for index, state in ckpt["opt"]["state"].items():
        expected[f"opt.{index}.momentum_buffer"] = state["momentum_buffer"]
    for name, value in ckpt["tensors"].items():
        expected[f"tensors.{name}"] = value.numpy()
    expected["checkpoint_input"] = probe
    net.eval()
    expected["checkpoint_output"] = net(mge.Tensor(probe)).numpy()
    np.savez("checkpoint_expected.npz", **expected)


if __name__ == "__main__":
    main()

# megengine_whole_sequential.pkl (made separately, MegEngine 1.13 on the same machine):
#   net = M.Sequential(M.Conv2d(3, 4, 3), M.BatchNorm2d(4), M.Linear(4, 2)); mge.save(net, path)
# a whole Module pickled by MegEngine: xmge refuses it in one line, opted in or not
