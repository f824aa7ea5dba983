"""The zoo's dense-prediction models in ``compiler.hub`` (RetinaNet, FCOS, DeepLabV3+,
SimpleBaseline), small configs: eager == traced replay, dumps (plain, fused conv-bias, NCHW88)
read back by ``compiler.lite.Network`` within 1e-4 relative, and the hub finds every entry."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import compiler as xm
from compiler import hub, jit
from compiler.hub.hub import PRETRAINED_URL_ATTR
from tests.test_zoo_models import _check_dumps

TINY_BACKBONE = {"layers": [1, 1, 1, 1], "width": 8}


def _bgr_image(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(0).uniform(0, 255, shape).astype(np.float32)


def _normal_image(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(1).standard_normal(shape).astype(np.float32)


# entry -> (small-config kwargs, input, expected output shapes)
SMALL: dict[str, tuple[dict[str, Any], np.ndarray, list[tuple[int, ...]]]] = {
    # 64x64: P3..P7 = 8x8, 4x4, 2x2, 1x1, 1x1 -> 86 locations, 9 anchors each
    "retinanet_res18_coco_3x_800size": (
        {**TINY_BACKBONE, "fpn_channels": 16, "num_classes": 5, "num_convs": 2},
        _bgr_image((1, 3, 64, 64)),
        [(1, 774, 5), (1, 774, 4)],
    ),
    "retinanet_res50_coco_3x_800size": (
        {**TINY_BACKBONE, "fpn_channels": 16, "num_classes": 3, "num_convs": 1, "num_anchors": 2},
        _bgr_image((2, 3, 60, 50)),  # padded to 64x64 inside the model
        [(2, 172, 3), (2, 172, 4)],
    ),
    "fcos_res18_coco_3x_800size": (
        {**TINY_BACKBONE, "fpn_channels": 16, "num_classes": 5, "num_convs": 2, "num_groups": 4},
        _bgr_image((1, 3, 64, 64)),
        [(1, 86, 5), (1, 86, 4), (1, 86, 1)],
    ),
    "deeplabv3plus_res101_voc_512size": (
        {
            "depth": 50, **TINY_BACKBONE, "aspp_channels": 16, "decoder_channels": 16,
            "low_level_channels": 8, "num_classes": 5,
        },
        _normal_image((1, 3, 64, 64)),
        [(1, 5, 64, 64)],
    ),
    "deeplabv3plus_res101_cityscapes_768size": (
        {"depth": 50, **TINY_BACKBONE, "aspp_channels": 8, "decoder_channels": 8, "output_stride": 8},
        _normal_image((1, 3, 48, 48)),
        [(1, 19, 48, 48)],
    ),
    "simplebaseline_res50": (
        {**TINY_BACKBONE, "deconv_channels": (16, 16, 16), "keypoint_num": 5},
        _normal_image((1, 3, 64, 64)),
        [(1, 5, 16, 16)],
    ),
    "simplebaseline_res101": (
        {**TINY_BACKBONE, "deconv_channels": (8, 8, 8), "deconv_kernel_sizes": (2, 3, 4)},
        _normal_image((1, 3, 64, 32)),
        [(1, 17, 16, 8)],
    ),
}  # fmt: skip


@pytest.mark.parametrize("entry", sorted(SMALL))
def test_small_model_traces_dumps_and_reads_back(entry: str) -> None:
    kwargs, image, shapes = SMALL[entry]
    model = hub.load("megengine/models", entry, **kwargs)
    outs = _check_dumps(model, [image])
    assert [o.shape for o in outs] == shapes
    assert all(np.isfinite(o).all() for o in outs)


def test_fcos_box_distances_are_nonnegative_and_scaled_per_level() -> None:
    """relu(pred * scale_l) * stride_l: a learnt per-level scale of 0 zeroes that level only."""
    kwargs, image, _ = SMALL["fcos_res18_coco_3x_800size"]
    model = hub.load("megengine/models", "fcos_res18_coco_3x_800size", **kwargs)
    model.eval()
    model.head.scale_list._reset(np.array([1, 0, 1, 1, 1], np.float32))
    _, offsets, _ = model(xm.tensor(image))
    offsets = offsets.numpy()
    assert (offsets >= 0).all()
    # P3 has 8x8 = 64 locations, P4 the next 16
    assert np.abs(offsets[0, 64:80]).max() == 0 and np.abs(offsets[0, :64]).max() > 0


def test_deeplab_dilates_the_last_stage_instead_of_striding() -> None:
    """Output stride 16: res5 keeps res4's resolution (the zoo's replace_stride_with_dilation)."""
    kwargs, image, _ = SMALL["deeplabv3plus_res101_voc_512size"]
    model = hub.load("megengine/models", "deeplabv3plus_res101_voc_512size", **kwargs)
    model.eval()
    features = model.backbone.extract_features(xm.tensor(image))
    assert features["res4"].shape[2:] == features["res5"].shape[2:] == (4, 4)
    assert model.aspp.conv4[0].dilation == (18, 18)


def test_detector_state_dict_uses_the_zoo_parameter_names() -> None:
    kwargs, _, _ = SMALL["retinanet_res18_coco_3x_800size"]
    keys = set(hub.load("megengine/models", "retinanet_res18_coco_3x_800size", **kwargs).state_dict())
    expected = {
        "backbone.bottom_up.conv1.weight",
        "backbone.bottom_up.layer4.0.conv2.weight",
        "backbone.fpn_lateral3.weight",
        "backbone.fpn_output5.bias",
        "backbone.top_block.p7.weight",
        "head.cls_subnet.0.weight",
        "head.cls_score.bias",
        "head.bbox_pred.weight",
    }
    assert expected <= keys
    assert not any(k.startswith("backbone.bottom_up.fc") for k in keys)


def test_pretrained_weights_load_from_the_cache_named_by_the_zoo_url(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    kwargs, image, _ = SMALL["fcos_res18_coco_3x_800size"]
    entry: Callable[..., Any] = hub.import_module("megengine/models").fcos_res18_coco_3x_800size
    url = getattr(entry, PRETRAINED_URL_ATTR)
    assert url.endswith("fcos_res18_coco_3x_800size_37dot6_adab0136.pkl")
    trained = entry(**kwargs)
    trained.eval()
    monkeypatch.setenv(hub.ENV_HUB_DIR, str(tmp_path))
    xm.save(trained.state_dict(), str(tmp_path / url.rsplit("/", 1)[1]))
    loaded = hub.load("megengine/models", "fcos_res18_coco_3x_800size", pretrained=True, **kwargs)
    loaded.eval()
    for want, got in zip(trained(xm.tensor(image)), loaded(xm.tensor(image)), strict=True):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


ENTRIES = [
    "RetinaNet", "FCOS", "DeepLabV3Plus", "SimpleBaseline",
    *[f"retinanet_res{d}_coco_3x_800size" for d in (18, 34, 50, 101)],
    *[f"fcos_res{d}_coco_3x_800size" for d in (18, 34, 50, 101)],
    "deeplabv3plus_res101_voc_512size", "deeplabv3plus_res101_cityscapes_768size",
    "simplebaseline_res50", "simplebaseline_res101", "simplebaseline_res152",
]  # fmt: skip


def test_hub_lists_every_dense_prediction_entry() -> None:
    listed = set(hub.list("megengine/models"))
    assert set(ENTRIES) <= listed


@pytest.mark.slow
@pytest.mark.parametrize(
    ("entry", "shape"),
    [
        ("retinanet_res50_coco_3x_800size", (1, 3, 128, 128)),
        ("fcos_res50_coco_3x_800size", (1, 3, 128, 128)),
        ("deeplabv3plus_res101_voc_512size", (1, 3, 64, 64)),
        ("simplebaseline_res50", (1, 3, 128, 96)),
    ],
)
def test_default_config_traces_and_dumps(entry: str, shape: tuple[int, ...]) -> None:
    model = hub.load("megengine/models", entry)
    model.eval()
    x = _bgr_image(shape)
    eager = model(xm.tensor(x))
    eager_list = [eager] if isinstance(eager, xm.Tensor) else list(eager)
    traced = jit.trace(lambda t: model(t), symbolic=True, capture_as_const=True)
    traced(xm.tensor(x))
    buf = io.BytesIO()
    traced.dump(buf)
    outs = xm.lite.Network(buf.getvalue())(x)
    for got, want in zip(outs.values(), eager_list, strict=True):
        scale = max(float(np.abs(want.numpy()).max()), 1e-6)
        assert float(np.abs(got - want.numpy()).max()) / scale <= 1e-4
