"""F.vision warp_affine, remap, cvt_color, bicubic interpolate (and rotate, resize, nvof) against
real MegEngine 1.13 and torch.

tests/data/image_mge/eager_outputs.npz is what MegEngine's own functions computed on fixed inputs,
every interpolation and border mode; megengine_outputs.npz what MegEngine's Lite runtime computed
on xmge's ``.mge`` dumps of tests/image_graphs.py (both made by tests/data/image_mge/record.py).
Exact unless noted: cubic warp_affine differs from MegEngine by a few float32 ulps (uint8: one
step on rare pixels), YUV2RGB's green by one ulp on a few pixels."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest

import compiler as xm
import compiler.functional as F
from compiler import jit
from compiler.lite import Network
from tests.image_graphs import GRAPHS

DATA = os.path.join(os.path.dirname(__file__), "data", "image_mge")
EAGER = np.load(os.path.join(DATA, "eager_outputs.npz"))
DEFORM = np.load(os.path.join(DATA, "deformable_outputs.npz"))
REGION = np.load(os.path.join(DATA, "region_outputs.npz"))
PSROI = np.load(os.path.join(DATA, "psroi_outputs.npz"))
DUMPED = np.load(os.path.join(DATA, "megengine_outputs.npz"))
BORDERS = ["replicate", "constant", "reflect", "reflect_101", "wrap"]
CUBIC_TOL = 3e-6  # a few ulps of values up to ~10


def t(a: np.ndarray) -> xm.Tensor:
    return xm.tensor(a)


@pytest.mark.parametrize("border", BORDERS)
@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
def test_warp_affine_nhwc_matches_megengine(mode: str, border: str) -> None:
    got = F.vision.warp_affine(
        t(EAGER["wa_x"]), t(EAGER["wa_m"]), (4, 7), border_mode=border, border_val=2.5, interp_mode=mode
    ).numpy()
    want = EAGER[f"wa_nhwc_{mode}_{border}"]
    tol = CUBIC_TOL if mode == "cubic" else 0
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)
    got8 = F.vision.warp_affine(
        t(EAGER["wa_xu"]), t(EAGER["wa_m"]), (4, 7), border_mode=border, border_val=7.0, interp_mode=mode
    ).numpy()
    want8 = EAGER[f"wa_u8_{mode}_{border}"]
    assert got8.dtype == np.uint8
    diff = np.abs(got8.astype(int) - want8)
    if mode == "cubic":
        assert diff.max() <= 1 and (diff > 0).mean() < 0.02
    else:
        assert diff.max() == 0


@pytest.mark.parametrize("border", BORDERS)
def test_warp_affine_nchw_matches_megengine(border: str) -> None:
    x = np.ascontiguousarray(EAGER["wa_x"].transpose(0, 3, 1, 2))
    got = F.vision.warp_affine(
        t(x), t(EAGER["wa_m"]), (4, 7), border_mode=border, border_val=2.5, format="NCHW"
    ).numpy()
    np.testing.assert_array_equal(got, EAGER[f"wa_nchw_linear_{border}"])


def test_warp_affine_nchw_is_warp_perspective_with_the_affine_matrix() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 7, 8)).astype(np.float32)
    m = EAGER["wa_m"]
    m3 = np.concatenate([m, np.tile(np.array([[[0, 0, 1]]], np.float32), (2, 1, 1))], 1)
    a = F.vision.warp_affine(t(x), t(m), (5, 6), format="NCHW", border_mode="wrap").numpy()
    b = F.vision.warp_perspective(t(x), t(m3), (5, 6), border_mode="wrap").numpy()
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("border", BORDERS)
@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_remap_matches_megengine(mode: str, border: str) -> None:
    got = F.vision.remap(
        t(EAGER["rm_x"]), t(EAGER["rm_map"]), border_mode=border, scalar=1.5, interp_mode=mode
    )
    np.testing.assert_array_equal(got.numpy(), EAGER[f"rm_{mode}_{border}"])


def test_remap_uint8_and_float16_match_megengine() -> None:
    got = F.vision.remap(t(EAGER["rm_xu"]), t(EAGER["rm_map"]))
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got.numpy(), EAGER["rm_u8_linear"])
    got16 = F.vision.remap(t(EAGER["rm_x"].astype(np.float16)), t(EAGER["rm_map"]))
    assert got16.dtype == np.float16
    np.testing.assert_allclose(
        got16.numpy().astype(np.float32), EAGER["rm_f16_linear"].astype(np.float32), atol=2e-3
    )


def test_remap_docstring_example() -> None:
    inp = t(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
    map_xy = t(np.array([[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [0.0, 1.0]]], np.float32).reshape(1, 2, 2, 2))
    np.testing.assert_array_equal(F.vision.remap(inp, map_xy).numpy(), [[[[1.0, 4.0], [4.0, 4.0]]]])


@pytest.mark.parametrize("border", ["replicate", "constant"])
def test_remap_matches_torch_grid_sample(border: str) -> None:
    torch = pytest.importorskip("torch")
    x, mp = EAGER["rm_x"], EAGER["rm_map"]
    h, w = x.shape[2:]
    grid = np.stack([mp[..., 0] * 2 / (w - 1) - 1, mp[..., 1] * 2 / (h - 1) - 1], -1)
    pad = {"replicate": "border", "constant": "zeros"}[border]
    want = torch.nn.functional.grid_sample(
        torch.from_numpy(x), torch.from_numpy(grid), mode="bilinear", padding_mode=pad, align_corners=True
    ).numpy()
    got = F.vision.remap(t(x), t(mp), border_mode=border, scalar=0.0).numpy()
    np.testing.assert_allclose(got, want, atol=2e-5)


@pytest.mark.parametrize("size", [(9, 7), (3, 2), (6, 5), (12, 10), (4, 8)])
def test_bicubic_matches_megengine(size: tuple[int, int]) -> None:
    got = F.vision.interpolate(t(EAGER["bc_x"]), size, mode="bicubic").numpy()
    np.testing.assert_array_equal(got, EAGER[f"bc_{size[0]}x{size[1]}"])
    got = F.nn.interpolate(t(EAGER["bc_x"]), scale_factor=1.7, mode="bicubic").numpy()
    np.testing.assert_array_equal(got, EAGER["bc_scale"])


@pytest.mark.parametrize("size", [(9, 7), (3, 2), (13, 4)])
def test_bicubic_matches_torch(size: tuple[int, int]) -> None:
    torch = pytest.importorskip("torch")
    x = EAGER["bc_x"]
    want = torch.nn.functional.interpolate(
        torch.from_numpy(x), size=size, mode="bicubic", align_corners=False
    ).numpy()
    np.testing.assert_allclose(F.vision.interpolate(t(x), size, mode="bicubic").numpy(), want, atol=1e-5)


def test_bicubic_refuses_align_corners() -> None:
    with pytest.raises(ValueError, match="align_corners"):
        F.vision.interpolate(t(EAGER["bc_x"]), (4, 4), mode="bicubic", align_corners=True)


@pytest.mark.parametrize("kind", ["f", "u"])
def test_cvt_color_matches_megengine(kind: str) -> None:
    src = EAGER["cc_x" if kind == "f" else "cc_xu"]
    for key in EAGER.files:
        if not key.startswith(f"cc_{kind}_"):
            continue
        mode = key[5:]
        x = np.ascontiguousarray(
            src if mode.startswith("RGBA") else src[..., :1] if mode == "GRAY2RGB" else src[..., :3]
        )
        got = F.vision.cvt_color(t(x), mode).numpy()
        assert got.dtype == EAGER[key].dtype, mode
        # YUV2RGB's green sums its two products in an order one ulp from MegEngine's on a few pixels
        np.testing.assert_allclose(
            got, EAGER[key], rtol=0, atol=1.2e-7 if mode == "YUV2RGB" else 0, err_msg=mode
        )


def test_cvt_color_docstring_example() -> None:
    x = t(np.array([[[[-0.58675045, 1.7526233, 0.10702174]]]], np.float32))
    np.testing.assert_allclose(F.vision.cvt_color(x, mode="RGB2GRAY").numpy(), [[[[0.86555195]]]], rtol=1e-7)


def test_rotate_and_resize() -> None:
    x = EAGER["bc_x"]
    same = F.vision.rotate(t(x), 0.0).numpy()
    np.testing.assert_array_equal(same, x)
    half = F.vision.rotate(t(x), 180.0).numpy()
    np.testing.assert_allclose(half, x[:, :, ::-1, ::-1], atol=1e-5)
    r = F.vision.resize(
        t(np.ascontiguousarray(x.transpose(0, 2, 3, 1))), (4, 3), format="NHWC", imode="bicubic"
    )
    want = F.vision.interpolate(t(x), (4, 3), mode="bicubic").numpy().transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(r.numpy(), want)
    doc = F.vision.resize(t(np.arange(0, 16, dtype=np.float32).reshape(1, 1, 4, 4)), xm.tensor([2, 2]))
    np.testing.assert_array_equal(doc.numpy(), [[[[2.5, 4.5], [10.5, 12.5]]]])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: F.vision.nvof(t(np.zeros((1, 2, 8, 8, 4), np.uint8))), "CUDA"),
        (
            lambda: F.vision.warp_affine(t(EAGER["wa_x"]), t(EAGER["wa_m"]), (4, 7), border_mode="isolated"),
            "isolated",
        ),
        (lambda: F.vision.warp_affine(t(EAGER["wa_x"]), t(EAGER["wa_m"][:1]), (4, 7)), "mat must be"),
        (
            lambda: F.vision.warp_affine(t(EAGER["wa_x"]), t(EAGER["wa_m"]), (4, 7), interp_mode="area"),
            "area",
        ),
        (
            lambda: F.vision.warp_affine(
                t(EAGER["rm_x"]), t(EAGER["wa_m"]), 4, format="NCHW", interp_mode="cubic"
            ),
            "linear",
        ),
        (lambda: F.vision.remap(t(EAGER["rm_x"]), t(EAGER["rm_map"][:1])), "map_xy must be"),
        (lambda: F.vision.cvt_color(t(EAGER["cc_x"]), "RGBA2RGB"), "RGBA2RGB"),
        (lambda: F.vision.cvt_color(t(EAGER["cc_x"]), "YUV2RGB_NV21"), "not supported"),
        (lambda: F.vision.cvt_color(t(EAGER["cc_x"]), "NOPE"), "unsupported mode"),
    ],
)
def test_bad_input_is_a_one_line_error(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        call()  # type: ignore[operator]
    assert "\n" not in str(info.value)


# ----------------------------------------------------------------------------------------------
# xmge's dumps, run by MegEngine


def _dump(name: str) -> tuple[bytes, dict[str, np.ndarray]]:
    inputs = {
        k.split(":")[1]: DUMPED[k]
        for k in DUMPED.files
        if k.startswith(name + ":") and not k.endswith(":megengine")
    }
    inputs = {k: inputs[k] for k in sorted(inputs)}
    traced = jit.trace(GRAPHS[name], symbolic=True, capture_as_const=True)
    traced(*[xm.tensor(v) for v in inputs.values()])
    buf = io.BytesIO()
    traced.dump(buf, arg_names=list(inputs))
    return buf.getvalue(), inputs


def _tol(name: str) -> float:
    return CUBIC_TOL if name == "warp_affine_cubic" else 1.2e-7 if name == "cvt_yuv2rgb" else 0.0


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_dump_computes_what_megengine_computed_on_it(name: str) -> None:
    data, inputs = _dump(name)
    (got,) = Network(data)(**inputs).values()
    want = DUMPED[f"{name}:megengine"]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=0, atol=_tol(name))


@pytest.mark.parametrize(
    "name", sorted(n for n in GRAPHS if n not in ("deformable_psroi_pooling", "region_restricted_conv"))
)
def test_compiled_image_kernels_match_megengine(name: str) -> None:
    from tests.codegen_util import require

    require("x86-avx2")
    data, inputs = _dump(name)
    out = xm.compile(data, target="x86-avx2")(*inputs.values())
    got = np.asarray(out[0] if isinstance(out, list | tuple) else out)
    want = DUMPED[f"{name}:megengine"]
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=0, atol=_tol(name))
    (ref,) = Network(data)(**inputs).values()
    np.testing.assert_array_equal(got, ref)  # the C kernels repeat the reference bit for bit


# ----------------------------------------------------------------------------------------------
# gradients


@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("border", ["replicate", "constant", "reflect"])
def test_remap_gradients_match_megengine(border: str, mode: str) -> None:
    from compiler.autodiff import GradManager

    x, mp = t(EAGER["rm_x"]), t(EAGER["rm_map"])
    gm = GradManager().attach([x, mp])
    with gm:
        y = F.vision.remap(x, mp, border_mode=border, scalar=1.5, interp_mode=mode)
        gm.backward((y * t(EAGER["g_w"])).sum())
    np.testing.assert_allclose(x.grad.numpy(), EAGER[f"g_{border}_{mode}_dx"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mp.grad.numpy(), EAGER[f"g_{border}_{mode}_dmap"], rtol=1e-5, atol=1e-5)


def test_warp_affine_nchw_gradients_match_megengine() -> None:
    from compiler.autodiff import GradManager

    # batch 1: MegEngine's own gradient rule fails for more images
    x, m = t(np.ascontiguousarray(EAGER["wa_x"][:1].transpose(0, 3, 1, 2))), t(EAGER["wa_m"][:1])
    gm = GradManager().attach([x, m])
    with gm:
        y = F.vision.warp_affine(x, m, (4, 7), border_mode="constant", border_val=0.5, format="NCHW")
        gm.backward((y * y).sum())
    np.testing.assert_allclose(x.grad.numpy(), EAGER["g_wa_dx"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(m.grad.numpy(), EAGER["g_wa_dmat"], rtol=1e-4, atol=1e-3)


def test_warp_affine_grad_equals_warp_perspective_grad() -> None:
    """MegEngine's own test_warp_affine_grad."""
    from compiler.autodiff import GradManager

    dy = np.arange(1, 10, dtype=np.float32).reshape(1, 1, 3, 3)
    xa, xp = t(dy.copy()), t(dy.copy())
    ma = t(np.array([[[0.5, 0, 0], [0, 0.5, 0]]], np.float32))
    mp = t(np.array([[[0.5, 0, 0], [0, 0.5, 0], [0, 0, 1]]], np.float32))
    gm = GradManager().attach([xa, ma, xp, mp])
    with gm:
        ya = F.warp_affine(xa, ma, xa.shape[2:], format="NCHW")
        yp = F.warp_perspective(xp, mp, xp.shape[2:])
        gm.backward([ya, yp], [t(dy), t(dy)])
    np.testing.assert_allclose(xa.grad.numpy(), xp.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ma.grad.numpy(), mp.grad.numpy()[0:1, 0:2, 0:3], rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="no gradient in NHWC"):
        x = t(EAGER["wa_x"])
        gm = GradManager().attach([x])
        with gm:
            gm.backward(F.vision.warp_affine(x, t(EAGER["wa_m"]), (4, 7)).sum())


def test_remap_gradient_by_finite_differences() -> None:
    from compiler.autodiff import GradManager

    rng = np.random.default_rng(3)
    x0 = rng.standard_normal((1, 2, 5, 6)).astype(np.float32)
    m0 = rng.uniform(0.2, 4.6, (1, 3, 4, 2)).astype(np.float32)  # away from pixel boundaries' kinks
    m0 = np.floor(m0) + np.clip(m0 - np.floor(m0), 0.1, 0.9)
    w = rng.standard_normal((1, 2, 3, 4))
    x, mp = t(x0), t(m0.astype(np.float32))
    gm = GradManager().attach([x, mp])
    with gm:
        gm.backward((F.vision.remap(x, mp, border_mode="wrap") * t(w.astype(np.float32))).sum())

    def f(xv: np.ndarray, mv: np.ndarray) -> float:
        return float((F.vision.remap(t(xv), t(mv), border_mode="wrap").numpy().astype(np.float64) * w).sum())

    eps = 1e-2
    for idx in [(0, 1, 2, 0), (0, 2, 3, 1), (0, 0, 1, 1)]:  # map entries
        d = np.zeros_like(m0)
        d[idx] = eps
        num = (f(x0, m0 + d) - f(x0, m0 - d)) / (2 * eps)
        assert abs(num - mp.grad.numpy()[idx]) < 1e-2
    for idx in [(0, 0, 1, 2), (0, 1, 3, 4), (0, 1, 0, 0)]:  # pixels
        d = np.zeros_like(x0)
        d[idx] = eps
        num = (f(x0 + d, m0) - f(x0 - d, m0)) / (2 * eps)
        assert abs(num - x.grad.numpy()[idx]) < 1e-3


def test_bicubic_gradient_matches_megengine_and_torch() -> None:
    from compiler.autodiff import GradManager

    x = t(EAGER["bc_x"])
    gm = GradManager().attach([x])
    with gm:
        gm.backward((F.vision.interpolate(x, (9, 7), mode="bicubic") ** 2).sum())
    np.testing.assert_allclose(x.grad.numpy(), EAGER["g_bicubic_dx"], rtol=1e-5, atol=1e-5)
    torch = pytest.importorskip("torch")
    xt = torch.from_numpy(EAGER["bc_x"]).requires_grad_()
    (
        torch.nn.functional.interpolate(xt, size=(9, 7), mode="bicubic", align_corners=False) ** 2
    ).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------------------------
# deformable_conv2d


def test_deformable_conv2d_matches_megengine() -> None:
    d = DEFORM
    got = F.deformable_conv2d(t(d["dc_x"]), t(d["dc_w"]), t(d["dc_off"]), t(d["dc_mask"]), t(d["dc_b"]))
    np.testing.assert_array_equal(got.numpy(), d["dc_out"])
    got = F.deformable_conv2d(t(d["dc_x"]), t(d["dcg_w"]), t(d["dcg_off"]), t(d["dcg_mask"]), stride=(2, 2),
                              padding=(1, 2), dilation=(1, 2), groups=2)  # fmt: skip
    np.testing.assert_array_equal(got.numpy(), d["dcg_out"])


def test_deformable_conv2d_gradients_match_megengine() -> None:
    from compiler.autodiff import GradManager

    d = DEFORM
    args = [t(d[k]) for k in ("dc_x", "dc_w", "dc_off", "dc_mask")]
    gm = GradManager().attach(args)
    with gm:
        gm.backward((F.deformable_conv2d(*args) * t(d["dc_gy"])).sum())
    for a, k in zip(args, ("dx", "dw", "doff", "dmask"), strict=True):
        np.testing.assert_allclose(a.grad.numpy(), d[f"dc_{k}"], rtol=1e-5, atol=1e-5, err_msg=k)


def test_deformable_conv2d_with_zero_offsets_and_unit_mask_is_conv2d() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 4, 6, 7)).astype(np.float32)
    w = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    off = np.zeros((1, 2 * 9, 3, 4), np.float32)
    mask = np.ones((1, 9, 3, 4), np.float32)
    got = F.deformable_conv2d(t(x), t(w), t(off), t(mask), stride=2, padding=1, groups=2).numpy()
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=2, padding=1, groups=2)
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5)


def test_deformable_conv2d_module() -> None:
    import compiler.module as M

    d = DEFORM
    m = M.DeformableConv2d(4, 6, 3)
    assert m.weight.shape == (6, 4, 3, 3) and m.bias.shape == (1, 6, 1, 1)
    m.weight = xm.Parameter(d["dc_w"])
    np.testing.assert_allclose(m(t(d["dc_x"]), t(d["dc_off"]), t(d["dc_mask"])).numpy(),
                                  d["dc_out"] - d["dc_b"], atol=1e-6)  # fmt: skip
    assert M.DeformableConv2d(4, 6, (3, 2), groups=2).weight.shape == (2, 3, 2, 3, 2)


def test_deformable_conv2d_refuses_mismatched_offsets() -> None:
    d = DEFORM
    with pytest.raises(ValueError, match="offset must be") as info:
        F.deformable_conv2d(t(d["dc_x"]), t(d["dc_w"]), t(d["dc_off"][:, :7]), t(d["dc_mask"]))
    assert "\n" not in str(info.value)


# ----------------------------------------------------------------------------------------------
# region_restricted_conv


@pytest.mark.parametrize(("case", "groups"), [("dw", 4), ("dw2", 4), ("g2", 2), ("dw_u8", 4)])
def test_region_restricted_conv_matches_megengine(case: str, groups: int) -> None:
    r = REGION
    rin, rout = r["rin"], r["rout"]
    if case.endswith("_u8"):
        rin, rout = rin.astype(np.uint8), rout.astype(np.uint8)
    w = r["w_" + case.removesuffix("_u8")]
    got = F.nn.region_restricted_conv(t(r["x"]), t(w), t(rin), t(rout), padding=1, groups=groups)
    np.testing.assert_array_equal(got.numpy(), r[f"out_{case}"])


def test_region_restricted_conv_gradients_match_megengine() -> None:
    from compiler.autodiff import GradManager

    r = REGION
    x, w = t(r["x"]), t(r["w_dw"])
    gm = GradManager().attach([x, w])
    with gm:
        y = F.nn.region_restricted_conv(x, w, t(r["rin"]), t(r["rout"]), padding=1, groups=4)
        gm.backward((y * t(r["gy"])).sum())
    np.testing.assert_allclose(x.grad.numpy(), r["dx"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), r["dw"], rtol=1e-5, atol=1e-5)


def test_region_restricted_conv_with_one_region_is_a_grouped_conv() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 4, 6, 7)).astype(np.float32)
    w = rng.standard_normal((2, 3, 2, 3, 3)).astype(np.float32)
    ones_in, ones_out = np.ones((1, 6, 7), np.int32), np.ones((1, 3, 4), np.int32)
    got = F.nn.region_restricted_conv(t(x), t(w), t(ones_in), t(ones_out), stride=2, padding=1, groups=2)
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w.reshape(6, 2, 3, 3)), stride=2,
                                      padding=1, groups=2)  # fmt: skip
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5)


def test_region_restricted_conv_module_and_errors() -> None:
    import compiler.module as M

    r = REGION
    m = M.RegionRestrictedConv(4, 4, 3, groups=4, padding=1)
    assert m.weight.shape == (4, 1, 1, 3, 3) and m.bias.shape == (1, 4, 1, 1)
    m.weight = xm.Parameter(r["w_dw"])
    m.bias = None
    np.testing.assert_array_equal(m(t(r["x"]), t(r["rin"]), t(r["rout"])).numpy(), r["out_dw"])
    with pytest.raises(ValueError, match="rin and rout must both be int32"):
        F.nn.region_restricted_conv(t(r["x"]), t(r["w_dw"]), t(r["rin"]), t(r["rout"].astype(np.uint8)),
                                    padding=1, groups=4)  # fmt: skip
    with pytest.raises(ValueError, match="rout"):
        F.nn.region_restricted_conv(
            t(r["x"]), t(r["w_dw"]), t(r["rin"]), t(r["rout"][:, :3]), padding=1, groups=4
        )


# ----------------------------------------------------------------------------------------------
# deformable_psroi_pooling

# name: (trans rows, no_trans, part_size, pooled_h, pooled_w, sample_per_part, spatial_scale, trans_std)
PSROI_CASES = {
    "a": (4, False, 3, 3, 3, 2, 0.8, 0.1),
    "b": (5, False, 2, 3, 3, 3, 0.5, 0.3),
    "c": (4, True, 3, 3, 3, 2, 1.0, 0.1),
    "d": (4, False, 3, 3, 4, 1, 1.0, 0.2),
    "e": (6, False, 2, 2, 4, 2, 0.7, 0.1),
}


@pytest.mark.parametrize("case", sorted(PSROI_CASES))
def test_deformable_psroi_pooling_matches_megengine(case: str) -> None:
    _, *args = PSROI_CASES[case]
    r = PSROI
    got = F.deformable_psroi_pooling(t(r["x"]), t(r["rois"]), t(r[f"trans_{case}"]), *args)
    np.testing.assert_array_equal(got.numpy(), r[f"out_{case}"])


def test_deformable_psroi_pooling_gradients_match_megengine() -> None:
    from compiler.autodiff import GradManager

    r = PSROI
    x, trans = t(r["x"]), t(r["trans_a"])
    gm = GradManager().attach([x, trans])
    with gm:
        out = F.deformable_psroi_pooling(x, t(r["rois"]), trans, False, 3, 3, 3, 2, 0.8, 0.1)
        gm.backward((out * t(r["gy"])).sum())
    np.testing.assert_allclose(x.grad.numpy(), r["dx"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(trans.grad.numpy(), r["dtrans"], rtol=1e-5, atol=1e-5)


def test_deformable_psroi_pooling_module_and_errors() -> None:
    import compiler.module as M

    r = PSROI
    m = M.DeformablePSROIPooling(False, 3, 3, 3, 2, 0.8, 0.1)
    np.testing.assert_array_equal(m(t(r["x"]), t(r["rois"]), t(r["trans_a"])).numpy(), r["out_a"])
    with pytest.raises(ValueError, match="one per roi"):
        F.deformable_psroi_pooling(t(r["x"]), t(r["rois"]), t(r["trans_a"][:2]), False, 3, 3, 3, 2, 0.8)
    with pytest.raises(ValueError, match="part_size"):
        F.deformable_psroi_pooling(t(r["x"]), t(r["rois"]), t(r["trans_a"]), False, 4, 3, 3, 2, 0.8)
    with pytest.raises(ValueError, match="trans must be"):
        F.deformable_psroi_pooling(t(r["x"]), t(r["rois"]), t(r["trans_d"]), False, 3, 3, 3, 2, 0.8)


# ----------------------------------------------------------------------------------------------
# MegEngine's own dumps, read by xmge

DUMPS = os.path.join(DATA, "mge_dumps")
DUMP_TOL = {"warp_affine_u8": 1}  # cubic uint8: one step on rare pixels


@pytest.mark.parametrize("name", sorted(f[:-4] for f in os.listdir(DUMPS) if f.endswith(".mge")))
def test_megengine_dump_reads_and_computes_the_same(name: str) -> None:
    with open(os.path.join(DUMPS, name + ".mge"), "rb") as f:
        data = f.read()
    ref = np.load(os.path.join(DUMPS, name + ".npz"))
    (got,) = Network(data)(x=ref["x"]).values()
    assert got.dtype == ref["out"].dtype and got.shape == ref["out"].shape
    np.testing.assert_allclose(got.astype(np.float64), ref["out"], rtol=0, atol=DUMP_TOL.get(name, 0))


U8_BORDERS = np.load(os.path.join(DATA, "u8_borders.npz"))


@pytest.mark.parametrize("value", [300.0, -4.0, 2.5, 3.7])
def test_uint8_border_values_convert_as_megengine(value: float) -> None:
    """warp_affine's border_val: truncated and wrapped to 8 bits; remap's scalar: rounded half
    away from zero and saturated before the blend."""
    b = U8_BORDERS
    got = F.vision.warp_affine(t(b["img"]), t(b["far"]), (2, 3), border_mode="constant", border_val=value)
    np.testing.assert_array_equal(got.numpy(), b[f"warp_affine_{value}"])
    for mode in ("nearest", "linear"):
        got = F.vision.remap(t(b["x"]), t(b["mp"]), border_mode="constant", scalar=value, interp_mode=mode)
        np.testing.assert_array_equal(got.numpy(), b[f"remap_{mode}_{value}"])


def test_warp_affine_uint8_border_value_as_megengine_converts_it() -> None:
    """What MegEngine 1.13 gives on this CPU: the value truncated and wrapped to 8 bits."""
    x = t(EAGER["wa_xu"])
    far = t(np.array([[[1, 0, 100.0], [0, 1, 100.0]]] * 2, np.float32))  # every tap outside
    for bv, want in ((300.0, 44), (-4.0, 252), (2.5, 2), (3.5, 3), (float("nan"), 0)):
        got = F.vision.warp_affine(x, far, (2, 3), border_mode="constant", border_val=bv).numpy()
        assert (got == want).all(), (bv, got)
