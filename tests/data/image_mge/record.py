"""Records what real MegEngine 1.13 computes, for tests/test_mge_image_ops.py (from the root):

    PYTHONPATH=$PWD .venv/bin/python tests/data/image_mge/record.py dump /tmp/img
    /work/shared/tools/megengine-oracle/mgepy tests/data/image_mge/record.py run /tmp/img
    /work/shared/tools/megengine-oracle/mgepy tests/data/image_mge/record.py eager -

``run``: MegEngine's Lite runtime on xmge's dumps of tests/image_graphs.py (megengine_outputs.npz).
``eager``: MegEngine's own F.vision warp_affine / remap / interpolate(bicubic) / cvt_color on fixed
inputs, every mode and border (eager_outputs.npz), and the deformable / region-restricted ops.
``mge_dumps``: MegEngine's own dumps of graphs with these operators, with inputs and outputs
(mge_dumps/NAME.mge, mge_dumps/NAME.npz), for xmge's reader:

    /work/shared/tools/megengine-oracle/mgepy tests/data/image_mge/record.py mge_dumps -
"""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
NAMES = "abcd"


def dump(folder: str) -> None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
    import compiler as xm
    from compiler import jit
    from tests.image_graphs import GRAPHS, inputs

    os.makedirs(folder, exist_ok=True)
    data = inputs()
    for name, fn in GRAPHS.items():
        args = data[name]
        traced = jit.trace(fn, symbolic=True, capture_as_const=True)
        traced(*[xm.tensor(a) for a in args])
        traced.dump(os.path.join(folder, name + ".mge"), arg_names=list(NAMES[: len(args)]))
        np.savez(os.path.join(folder, name + "_in.npz"), **{NAMES[i]: a for i, a in enumerate(args)})


def run(folder: str) -> None:
    from megenginelite import LiteNetwork

    record = {}
    for name in sorted(f[: -len(".mge")] for f in os.listdir(folder) if f.endswith(".mge")):
        inputs = dict(np.load(os.path.join(folder, name + "_in.npz")))
        net = LiteNetwork()
        net.load(os.path.join(folder, name + ".mge"))
        for key, value in inputs.items():
            net.get_io_tensor(key).set_data_by_copy(value)
            record[f"{name}:{key}"] = value
        net.forward()
        net.wait()
        (out,) = net.get_all_output_name()
        record[f"{name}:megengine"] = net.get_io_tensor(out).to_numpy().copy()
    np.savez_compressed(os.path.join(HERE, "megengine_outputs.npz"), **record)


BORDERS = ["replicate", "constant", "reflect", "reflect_101", "wrap"]
CVT_FLOAT = ["RGB2GRAY", "RGB2YUV", "YUV2RGB", "GRAY2RGB", "BGR2GRAY"]
CVT_U8 = [
    "RGB2GRAY",
    "RGB2YUV",
    "YUV2RGB",
    "GRAY2RGB",
    "RGBA2RGB",
    "RGBA2BGR",
    "RGBA2GRAY",
    "RGB2BGR",
    "BGR2GRAY",
    "BGR2RGB",
]
BICUBIC_SIZES = [(9, 7), (3, 2), (6, 5), (12, 10), (4, 8)]


def cvt_input(x: np.ndarray, mode: str) -> np.ndarray:
    """The channels mode ``mode`` takes, from a 4-channel image."""
    return np.ascontiguousarray(
        x if mode.startswith("RGBA") else x[..., :1] if mode == "GRAY2RGB" else x[..., :3]
    )


def eager(_: str) -> None:
    import megengine as mge
    import megengine.functional as F

    rng = np.random.RandomState(0)
    rec = {}
    x = rng.randn(2, 5, 6, 3).astype(np.float32) * 3
    m = np.array([[[1.1, 0.2, 0.3], [0.1, 0.9, -0.4]], [[0.8, -0.3, 2.0], [0.35, 1.2, -1.7]]], np.float32)
    xu = rng.randint(0, 256, (2, 5, 6, 3)).astype(np.uint8)
    rec.update(wa_x=x, wa_m=m, wa_xu=xu)
    for im in ["linear", "nearest", "cubic"]:
        for bm in BORDERS:
            rec[f"wa_nhwc_{im}_{bm}"] = F.vision.warp_affine(
                mge.tensor(x),
                mge.tensor(m),
                (4, 7),
                border_mode=bm,
                border_val=2.5,
                format="NHWC",
                interp_mode=im,
            ).numpy()
            rec[f"wa_u8_{im}_{bm}"] = F.vision.warp_affine(
                mge.tensor(xu),
                mge.tensor(m),
                (4, 7),
                border_mode=bm,
                border_val=7.0,
                format="NHWC",
                interp_mode=im,
            ).numpy()
    for bm in BORDERS:
        rec[f"wa_nchw_linear_{bm}"] = F.vision.warp_affine(
            mge.tensor(x.transpose(0, 3, 1, 2)),
            mge.tensor(m),
            (4, 7),
            border_mode=bm,
            border_val=2.5,
            format="NCHW",
        ).numpy()
    xi = rng.randn(2, 3, 5, 6).astype(np.float32)
    mp = rng.uniform(-3, 8, (2, 4, 5, 2)).astype(np.float32)
    mp[0, 0, 0], mp[0, 0, 1], mp[0, 0, 2] = [2.0, 3.0], [2.5, 1.5], [-0.5, 3.5]  # ties of nearest rounding
    rec.update(rm_x=xi, rm_map=mp)
    for im in ["linear", "nearest"]:
        for bm in BORDERS:
            rec[f"rm_{im}_{bm}"] = F.vision.remap(
                mge.tensor(xi), mge.tensor(mp), border_mode=bm, scalar=1.5, interp_mode=im
            ).numpy()
    xu8 = rng.randint(0, 256, (2, 3, 5, 6)).astype(np.uint8)
    rec["rm_xu"] = xu8
    rec["rm_u8_linear"] = F.vision.remap(mge.tensor(xu8), mge.tensor(mp)).numpy()
    rec["rm_f16_linear"] = F.vision.remap(mge.tensor(xi.astype(np.float16)), mge.tensor(mp)).numpy()
    xr = rng.randn(2, 3, 6, 5).astype(np.float32)
    rec["bc_x"] = xr
    for sz in BICUBIC_SIZES:
        rec[f"bc_{sz[0]}x{sz[1]}"] = F.vision.interpolate(mge.tensor(xr), sz, mode="bicubic").numpy()
    rec["bc_scale"] = F.vision.interpolate(mge.tensor(xr), scale_factor=1.7, mode="bicubic").numpy()
    c = rng.rand(2, 4, 5, 3).astype(np.float32) * 2 - 0.5
    cu = rng.randint(0, 256, (2, 4, 6, 4)).astype(np.uint8)
    rec.update(cc_x=c, cc_xu=cu)
    for md in CVT_FLOAT:
        rec[f"cc_f_{md}"] = F.vision.cvt_color(mge.tensor(cvt_input(c, md)), md).numpy()
    for md in CVT_U8:
        rec[f"cc_u_{md}"] = F.vision.cvt_color(mge.tensor(cvt_input(cu, md)), md).numpy()
    from megengine.autodiff import GradManager

    rec["g_w"] = w = rng.randn(2, 3, 4, 5).astype(np.float32)
    for bm in ["replicate", "constant", "reflect"]:
        for im in ["linear", "nearest"]:
            xt, mt = mge.tensor(xi), mge.tensor(mp)
            gm = GradManager().attach([xt, mt])
            with gm:
                y = F.vision.remap(xt, mt, border_mode=bm, scalar=1.5, interp_mode=im)
                gm.backward((y * mge.tensor(w)).sum())
            rec[f"g_{bm}_{im}_dx"], rec[f"g_{bm}_{im}_dmap"] = xt.grad.numpy(), mt.grad.numpy()
    # batch 1: MegEngine 1.13's WarpAffine gradient rule builds its (N, 3, 3) matrix for N = 1 only
    xt, mt = mge.tensor(x[:1].transpose(0, 3, 1, 2)), mge.tensor(m[:1])
    gm = GradManager().attach([xt, mt])
    with gm:
        y = F.vision.warp_affine(xt, mt, (4, 7), border_mode="constant", border_val=0.5, format="NCHW")
        gm.backward((y * y).sum())
    rec["g_wa_dx"], rec["g_wa_dmat"] = xt.grad.numpy(), mt.grad.numpy()
    xt = mge.tensor(xr)
    gm = GradManager().attach([xt])
    with gm:
        gm.backward((F.vision.interpolate(xt, (9, 7), mode="bicubic") ** 2).sum())
    rec["g_bicubic_dx"] = xt.grad.numpy()
    np.savez_compressed(os.path.join(HERE, "eager_outputs.npz"), **rec)
    deformable(rng)
    region(rng)
    psroi(rng)
    u8_borders()


def deformable(rng: np.random.RandomState) -> None:
    """MegEngine's deformable_conv2d (two deformable groups; grouped, strided, padded, dilated)
    and its gradients (deformable_outputs.npz)."""
    import megengine as mge
    import megengine.functional as F
    from megengine.autodiff import GradManager

    rec = {}
    x = rng.randn(2, 4, 7, 8).astype(np.float32)
    w = rng.randn(6, 4, 3, 3).astype(np.float32) * 0.3
    off = (rng.randn(2, 2 * 2 * 9, 5, 6) * 1.5).astype(np.float32)
    mask = rng.rand(2, 2 * 9, 5, 6).astype(np.float32)
    b = rng.randn(1, 6, 1, 1).astype(np.float32)
    args = [mge.tensor(a) for a in (x, w, off, mask)]
    rec.update(dc_x=x, dc_w=w, dc_off=off, dc_mask=mask, dc_b=b)
    rec["dc_out"] = F.deformable_conv2d(*args, mge.tensor(b)).numpy()
    wg = rng.randn(2, 3, 2, 3, 2).astype(np.float32) * 0.3
    offg = (rng.randn(2, 2 * 6, 4, 5) * 1.2).astype(np.float32)
    maskg = rng.rand(2, 6, 4, 5).astype(np.float32)
    rec.update(dcg_w=wg, dcg_off=offg, dcg_mask=maskg)
    rec["dcg_out"] = F.deformable_conv2d(
        mge.tensor(x),
        mge.tensor(wg),
        mge.tensor(offg),
        mge.tensor(maskg),
        stride=(2, 2),
        padding=(1, 2),
        dilation=(1, 2),
        groups=2,
    ).numpy()
    gm = GradManager().attach(args)
    rec["dc_gy"] = gy = rng.randn(2, 6, 5, 6).astype(np.float32)
    with gm:
        gm.backward((F.deformable_conv2d(*args) * mge.tensor(gy)).sum())
    for name, t in zip(("dx", "dw", "doff", "dmask"), args):  # noqa: B905  (run on Python 3.9)
        rec[f"dc_{name}"] = t.grad.numpy()
    np.savez_compressed(os.path.join(HERE, "deformable_outputs.npz"), **rec)


def region(rng: np.random.RandomState) -> None:
    """MegEngine's region_restricted_conv (depthwise, multiplier 2, grouped; int32 and uint8 ids)
    and its gradients (region_outputs.npz)."""
    import megengine as mge
    import megengine.functional as F
    from megengine.autodiff import GradManager

    x = rng.randn(2, 4, 7, 8).astype(np.float32)
    rin = rng.randint(0, 3, (2, 7, 8)).astype(np.int32)
    rout = rng.randint(0, 3, (2, 7, 8)).astype(np.int32)
    rec = {"x": x, "rin": rin, "rout": rout}
    cases = {"dw": (4, 1, 1), "dw2": (4, 2, 1), "g2": (2, 3, 2)}
    for name, (g, ocpg, icpg) in cases.items():
        rec[f"w_{name}"] = w = rng.randn(g, ocpg, icpg, 3, 3).astype(np.float32)
        args = (mge.tensor(x), mge.tensor(w))
        rec[f"out_{name}"] = F.nn.region_restricted_conv(*args, mge.tensor(rin), mge.tensor(rout), padding=1,
                                                         groups=g).numpy()  # fmt: skip
    u8 = (mge.tensor(rin.astype(np.uint8)), mge.tensor(rout.astype(np.uint8)))
    rec["out_dw_u8"] = F.nn.region_restricted_conv(mge.tensor(x), mge.tensor(rec["w_dw"]), *u8, padding=1,
                                                   groups=4).numpy()  # fmt: skip
    xt, wt = mge.tensor(x), mge.tensor(rec["w_dw"])
    gm = GradManager().attach([xt, wt])
    rec["gy"] = gy = rng.randn(2, 4, 7, 8).astype(np.float32)
    with gm:
        y = F.nn.region_restricted_conv(xt, wt, mge.tensor(rin), mge.tensor(rout), padding=1, groups=4)
        gm.backward((y * mge.tensor(gy)).sum())
    rec["dx"], rec["dw"] = xt.grad.numpy(), wt.grad.numpy()
    np.savez_compressed(os.path.join(HERE, "region_outputs.npz"), **rec)


# name: (trans rows, no_trans, part_size, pooled_h, pooled_w, sample_per_part, spatial_scale, trans_std)
PSROI = {
    "a": (4, False, 3, 3, 3, 2, 0.8, 0.1),
    "b": (5, False, 2, 3, 3, 3, 0.5, 0.3),
    "c": (4, True, 3, 3, 3, 2, 1.0, 0.1),
    "d": (4, False, 3, 3, 4, 1, 1.0, 0.2),
    "e": (6, False, 2, 2, 4, 2, 0.7, 0.1),
}


def psroi(rng: np.random.RandomState) -> None:
    """MegEngine's deformable_psroi_pooling (PSROI configurations; rois partly outside the map)
    and its gradients for "a" (psroi_outputs.npz)."""
    import megengine as mge
    import megengine.functional as F
    from megengine.autodiff import GradManager

    x = rng.randn(2, 6, 9, 10).astype(np.float32)
    rois = np.array(
        [[0, 1.2, 2.0, 7.5, 6.3], [1, 0, 0, 9, 8], [0, 3, 1, 4, 2], [1, -2, 5, 12, 11]], np.float32
    )
    rec = {"x": x, "rois": rois}
    for k, (rows, nt, part, ph, pw, spp, ss, ts) in PSROI.items():
        rec[f"trans_{k}"] = trans = (rng.randn(rows, 2, ph, pw) * 0.5).astype(np.float32)
        rec[f"out_{k}"] = F.deformable_psroi_pooling(
            mge.tensor(x), mge.tensor(rois), mge.tensor(trans), nt, part, ph, pw, spp, ss, ts
        ).numpy()
    xt, tt = mge.tensor(x), mge.tensor(rec["trans_a"])
    gm = GradManager().attach([xt, tt])
    rec["gy"] = gy = rng.randn(4, 6, 3, 3).astype(np.float32)
    with gm:
        out = F.deformable_psroi_pooling(xt, mge.tensor(rois), tt, False, 3, 3, 3, 2, 0.8, 0.1)
        gm.backward((out * mge.tensor(gy)).sum())
    rec["dx"], rec["dtrans"] = xt.grad.numpy(), tt.grad.numpy()
    np.savez_compressed(os.path.join(HERE, "psroi_outputs.npz"), **rec)


def mge_dumps(_: str) -> None:
    import megengine as mge
    import megengine.functional as F
    from megengine.jit import trace

    rng = np.random.RandomState(7)
    folder = os.path.join(HERE, "mge_dumps")
    os.makedirs(folder, exist_ok=True)
    img = rng.randn(1, 6, 7, 3).astype(np.float32)
    img_u8 = rng.randint(0, 256, (1, 6, 7, 3)).astype(np.uint8)
    nchw = rng.randn(1, 2, 6, 7).astype(np.float32)
    mat = np.array([[[1.05, 0.15, -0.5], [-0.1, 0.95, 0.4]]], np.float32)
    graphs = {
        "warp_affine": (
            lambda x: F.vision.warp_affine(x, mge.tensor(mat), (5, 6), border_mode="reflect"),
            img,
        ),
        "warp_affine_u8": (
            lambda x: F.vision.warp_affine(x, mge.tensor(mat), (5, 6), interp_mode="cubic"),
            img_u8,
        ),
        "remap": (
            lambda x: F.vision.remap(x, mge.tensor(rng.uniform(-2, 8, (1, 4, 5, 2)).astype(np.float32))),
            nchw,
        ),
        "cvt_color": (lambda x: F.vision.cvt_color(x, "RGB2YUV"), img_u8),
        "bicubic": (lambda x: F.vision.interpolate(x, (9, 4), mode="bicubic"), nchw),
        "deformable_conv": (
            lambda x: F.deformable_conv2d(
                x,
                mge.tensor(rng.randn(3, 2, 3, 3).astype(np.float32)),
                mge.tensor(rng.randn(1, 18, 4, 5).astype(np.float32)),
                mge.tensor(rng.rand(1, 9, 4, 5).astype(np.float32)),
            ),
            nchw,
        ),
        "region_restricted_conv": (
            lambda x: F.nn.region_restricted_conv(
                x,
                mge.tensor(rng.randn(2, 1, 1, 3, 3).astype(np.float32)),
                mge.tensor(rng.randint(0, 2, (1, 6, 7)).astype(np.int32)),
                mge.tensor(rng.randint(0, 2, (1, 6, 7)).astype(np.int32)),
                padding=1,
                groups=2,
            ),
            nchw,
        ),
        "deformable_psroi_pooling": (
            lambda x: F.deformable_psroi_pooling(
                x,
                mge.tensor(np.array([[0, 1, 1, 5, 4]], np.float32)),
                mge.tensor(rng.randn(1, 2, 2, 2).astype(np.float32)),
                False,
                2,
                2,
                2,
                2,
                1.0,
                0.1,
            ),
            nchw,
        ),
    }
    for name, (fn, x) in graphs.items():
        traced = trace(fn, symbolic=True, capture_as_const=True)
        out = traced(mge.tensor(x)).numpy()
        traced.dump(os.path.join(folder, name + ".mge"), arg_names=["x"])
        np.savez(os.path.join(folder, name + ".npz"), x=x, out=out)


def u8_borders() -> None:
    """How MegEngine turns a float border value into uint8: warp_affine's border_val and remap's
    scalar, out of range and fractional (u8_borders.npz)."""
    import megengine as mge
    import megengine.functional as F

    rng = np.random.RandomState(3)
    x = rng.randint(0, 256, (1, 1, 4, 5)).astype(np.uint8)
    mp = np.array([[[[-3.0, -3.0], [1.5, -0.5], [0.3, 0.7], [100, 1]]]], np.float32)
    img = rng.randint(0, 256, (1, 5, 6, 3)).astype(np.uint8)
    far = np.array([[[1, 0, 100.0], [0, 1, 100.0]]], np.float32)
    rec = {"x": x, "mp": mp, "img": img, "far": far}
    for v in (300.0, -4.0, 2.5, 3.7):
        for im in ("nearest", "linear"):
            rec[f"remap_{im}_{v}"] = F.vision.remap(
                mge.tensor(x), mge.tensor(mp), border_mode="constant", scalar=v, interp_mode=im
            ).numpy()
        rec[f"warp_affine_{v}"] = F.vision.warp_affine(
            mge.tensor(img), mge.tensor(far), (2, 3), border_mode="constant", border_val=v
        ).numpy()
    np.savez_compressed(os.path.join(HERE, "u8_borders.npz"), **rec)


if __name__ == "__main__":
    {"dump": dump, "run": run, "eager": eager, "mge_dumps": mge_dumps}[sys.argv[1]](sys.argv[2])
