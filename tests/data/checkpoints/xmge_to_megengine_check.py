"""By hand, MegEngine side: `mgepy tests/data/checkpoints/xmge_to_megengine_check.py OUT_DIR` loads the
checkpoints xmge_to_megengine_save.py wrote, under every map_location form, and compares every value
and the restored model's output with xmge's.
"""

import sys

import megengine as mge
import megengine.module as M
import megengine.optimizer as optim
import numpy as np

exp = np.load(f"{sys.argv[1]}/xmge_expected.npz")
for proto in (2, 4, 5):
    for ml in (None, "cpu0", {"xpux": "cpu0"}, lambda dev: "cpu0"):
        c = mge.load(f"{sys.argv[1]}/xmge_ckpt_p{proto}.pkl", map_location=ml)
    worst = 0.0
    for k, v in c["state_dict"].items():
        assert type(v) is np.ndarray and v.dtype == exp[f"state_dict.{k}"].dtype
        worst = max(worst, float(np.abs(v - exp[f"state_dict.{k}"]).max()))
    for i, st in c["opt"]["state"].items():
        worst = max(worst, float(np.abs(st["momentum_buffer"] - exp[f"opt.{i}.momentum_buffer"]).max()))
        kv = c["opt_keep_var"]["state"][i]["momentum_buffer"]
        assert type(kv) is mge.Tensor, type(kv)
        worst = max(worst, float(np.abs(kv.numpy() - exp[f"opt.{i}.momentum_buffer"]).max()))
    for k in ("t", "int8", "param"):
        v = c["tensors"][k]
        assert isinstance(v, mge.Tensor) and (type(v) is mge.Parameter) == (k == "param"), (k, type(v))
        assert v.dtype == exp[f"tensors.{k}"].dtype, (k, v.dtype)
        worst = max(worst, float(np.abs(v.numpy() - exp[f"tensors.{k}"]).max()))
    assert all(type(v) is mge.Parameter for v in c["model_keep_var"].values())
    assert c["tensors"]["scalar"] == np.float32(2.5) and c["tensors"]["i64"].dtype == np.int64
    net = M.Sequential(M.Linear(4, 3), M.ReLU(), M.Linear(3, 2))
    net.load_state_dict(c["state_dict"])
    opt = optim.SGD(net.parameters(), lr=0.5, momentum=0.0)
    opt.load_state_dict(c["opt"])
    assert opt.param_groups[0]["lr"] == 0.1 and opt.param_groups[0]["momentum"] == 0.9
    net.eval()
    out = net(mge.Tensor(exp["probe"])).numpy()
    print(
        f"protocol {proto}: epoch {c['epoch']}, max |diff| {worst:.3g}, "
        f"forward max |diff| {float(np.abs(out - exp['output']).max()):.3g}, on {c['tensors']['t'].device}"
    )
print("MegEngine", mge.__version__, "numpy", np.__version__, ": all xmge checkpoints loaded")
