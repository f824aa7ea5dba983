"""By hand, xmge side of the round trip (run from the repository root with the project venv):

    PYTHONPATH=. python tests/data/checkpoints/xmge_to_megengine_save.py OUT_DIR

trains a tiny net two steps and saves a checkpoint in protocols 2, 4 and 5 plus the expected values;
xmge_to_megengine_check.py then loads them in the real MegEngine 1.13.
"""

import sys

import numpy as np

import compiler as xm
import compiler.functional as F
import compiler.module as M
from compiler.autodiff import GradManager
from compiler.optimizer import SGD

OUT = sys.argv[1]
rng = np.random.default_rng(0)
net = M.Sequential(M.Linear(4, 3), M.ReLU(), M.Linear(3, 2))
opt = SGD(net.parameters(), lr=0.1, momentum=0.9)
gm = GradManager().attach(net.parameters())
x = xm.tensor(rng.standard_normal((5, 4)).astype("float32"))
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
    "model_keep_var": net.state_dict(keep_var=True),
    "tensors": {
        "t": xm.tensor(np.arange(6, dtype="float32").reshape(2, 3)),
        "int8": xm.tensor(np.array([-3, 0, 7], "int8"), dtype="int8"),
        "param": xm.Parameter(np.full((2, 2), 0.25, "float32")),
        "scalar": np.float32(2.5),
        "i64": np.arange(3, dtype=np.int64),
    },
}
for proto in (2, 4, 5):
    xm.save(ckpt, f"{OUT}/xmge_ckpt_p{proto}.pkl", pickle_protocol=proto)
expected = {f"state_dict.{k}": v for k, v in ckpt["state_dict"].items()}
for i, st in ckpt["opt"]["state"].items():
    expected[f"opt.{i}.momentum_buffer"] = st["momentum_buffer"]
for k in ("t", "int8", "param"):
    expected[f"tensors.{k}"] = ckpt["tensors"][k].numpy()
expected["probe"] = probe
net.eval()
expected["output"] = net(xm.tensor(probe)).numpy()
np.savez(f"{OUT}/xmge_expected.npz", **expected)
print("xmge numpy", np.__version__, "saved; loss", ckpt["loss"], "state keys", list(ckpt["state_dict"]))
