"""The zoo's Transformer models in ``compiler.hub`` (BERT, CLIP with ViT and ModifiedResNet image
towers), small configs: traced dumps (three variants) read back within 1e-4 relative; a BERT
encoder layer and a CLIP ViT block match torch re-implementations with the same weights."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import compiler as xm
import compiler.module as M
from compiler import hub
from tests.test_zoo_models import _check_dumps

BERT_SMALL = {
    "vocab_size": 50,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 16,
}
TEXT_SMALL = {
    "context_length": 8,
    "vocab_size": 40,
    "transformer_width": 32,
    "transformer_heads": 2,
    "transformer_layers": 1,
    "embed_dim": 16,
}
CLIP_SMALL: dict[str, dict[str, Any]] = {
    "vit_b_32": {
        "image_resolution": 64, "vision_width": 32, "vision_layers": 2, "vision_patch_size": 16,
        "vision_heads": 2, **TEXT_SMALL,
    },
    "rn50": {
        "image_resolution": 64, "vision_width": 8, "vision_layers": (1, 1, 1, 1), "vision_heads": 2,
        **TEXT_SMALL,
    },
}  # fmt: skip


def _t(x: Any) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x.numpy()))


def _bert_inputs(batch: int = 2, length: int = 8) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    ids = rng.integers(0, BERT_SMALL["vocab_size"], (batch, length)).astype(np.int32)
    token_types = rng.integers(0, 2, (batch, length)).astype(np.int32)
    mask = np.ones((batch, length), np.int32)
    mask[-1, 5:] = 0  # the last sequence is padded
    return [ids, token_types, mask]


class _LastLayerAndPooled(M.Module):
    def __init__(self, bert: M.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, ids: xm.Tensor, token_types: xm.Tensor, mask: xm.Tensor) -> tuple[xm.Tensor, xm.Tensor]:
        return self.bert(ids, token_types, mask, output_all_encoded_layers=False)


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_erf"])
def test_bert_traces_dumps_and_reads_back(hidden_act: str) -> None:
    bert = hub.load("megengine/models", "uncased_L_12_H_768_A_12", hidden_act=hidden_act, **BERT_SMALL)
    sequence, pooled = _check_dumps(_LastLayerAndPooled(bert), _bert_inputs())
    assert sequence.shape == (2, 8, 32) and pooled.shape == (2, 32)
    assert np.abs(pooled).max() <= 1.0


def test_bert_padding_does_not_change_the_unpadded_tokens() -> None:
    """The additive mask hides padded keys: changing padded ids leaves real positions alone."""
    bert = hub.load("megengine/models", "uncased_L_12_H_768_A_12", **BERT_SMALL)
    bert.eval()
    ids, token_types, mask = _bert_inputs()
    changed = ids.copy()
    changed[1, 5:] = (changed[1, 5:] + 1) % BERT_SMALL["vocab_size"]
    a, _ = bert(xm.tensor(ids), xm.tensor(token_types), xm.tensor(mask), output_all_encoded_layers=False)
    b, _ = bert(xm.tensor(changed), xm.tensor(token_types), xm.tensor(mask), output_all_encoded_layers=False)
    np.testing.assert_allclose(a.numpy()[1, :5], b.numpy()[1, :5], rtol=1e-5, atol=1e-6)
    assert np.abs(a.numpy()[1, 5:] - b.numpy()[1, 5:]).max() > 1e-3


def _torch_linear(x: torch.Tensor, linear: M.Linear) -> torch.Tensor:
    return TF.linear(x, _t(linear.weight), _t(linear.bias))


def _torch_layer_norm(x: torch.Tensor, ln: M.LayerNorm) -> torch.Tensor:
    return TF.layer_norm(x, ln.normalized_shape, _t(ln.weight), _t(ln.bias), ln.eps)


def test_bert_encoder_layer_matches_torch() -> None:
    bert = hub.load("megengine/models", "uncased_L_12_H_768_A_12", **BERT_SMALL)
    bert.eval()
    layer = bert.encoder.layer[0]
    rng = np.random.default_rng(3)
    hidden = rng.standard_normal((2, 8, 32)).astype(np.float32)
    additive_mask = np.zeros((2, 1, 1, 8), np.float32)
    additive_mask[1, ..., 5:] = -10000.0
    got = layer(xm.tensor(hidden), xm.tensor(additive_mask)).numpy()

    x, heads = torch.from_numpy(hidden), 4
    attention = layer.attention

    def split(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(2, 8, heads, 8).transpose(1, 2)

    projections = (attention.self.query, attention.self.key, attention.self.value)
    q, k, v = (split(_torch_linear(x, p)) for p in projections)
    context = TF.scaled_dot_product_attention(q, k, v, attn_mask=torch.from_numpy(additive_mask))
    context = context.transpose(1, 2).reshape(2, 8, 32)
    attended = _torch_linear(context, attention.output.dense) + x
    attended = _torch_layer_norm(attended, attention.output.LayerNorm)
    inner = TF.gelu(_torch_linear(attended, layer.intermediate.dense), approximate="tanh")
    want = _torch_layer_norm(_torch_linear(inner, layer.output.dense) + attended, layer.output.LayerNorm)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)


def _clip_inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    image = rng.standard_normal((2, 3, 64, 64)).astype(np.float32)
    text = rng.integers(1, TEXT_SMALL["vocab_size"] - 1, (3, 8)).astype(np.int32)
    text[:, 5] = TEXT_SMALL["vocab_size"] - 1  # end-of-text: the largest id
    return [image, text]


class _ImageTower(M.Module):
    def __init__(self, clip: M.Module) -> None:
        super().__init__()
        self.visual = clip.visual

    def forward(self, image: xm.Tensor) -> xm.Tensor:
        return self.visual(image)


@pytest.mark.parametrize("entry", sorted(CLIP_SMALL))
def test_clip_traces_dumps_and_reads_back(entry: str) -> None:
    clip = hub.load("megengine/models", entry, **CLIP_SMALL[entry])
    image, text = _clip_inputs()
    per_image, per_text = _check_dumps(clip, [image, text])
    assert per_image.shape == (2, 3) and per_text.shape == (3, 2)
    np.testing.assert_array_equal(per_text, per_image.T)
    (features,) = _check_dumps(_ImageTower(clip), [image])
    assert features.shape == (2, TEXT_SMALL["embed_dim"])


def test_clip_text_feature_is_taken_at_the_end_of_text_token() -> None:
    """Causal attention: tokens after the end-of-text position cannot change the feature."""
    clip = hub.load("megengine/models", "vit_b_32", **CLIP_SMALL["vit_b_32"])
    clip.eval()
    _, text = _clip_inputs()
    changed = text.copy()
    changed[:, 6:] = 1
    a = clip.encode_text(xm.tensor(text)).numpy()
    b = clip.encode_text(xm.tensor(changed)).numpy()
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_clip_vit_block_matches_torch() -> None:
    clip = hub.load("megengine/models", "vit_b_32", **CLIP_SMALL["vit_b_32"])
    clip.eval()
    block = clip.visual.transformer.resblocks[0]
    x = np.random.default_rng(4).standard_normal((17, 2, 32)).astype(np.float32)  # (L, N, D)
    got = block(xm.tensor(x)).numpy()

    tx = torch.from_numpy(x)
    attn = block.attn
    h = _torch_layer_norm(tx, block.ln_1)
    attended, _ = TF.multi_head_attention_forward(
        h, h, h, 32, 2, _t(attn.in_proj.weight), _t(attn.in_proj.bias), None, None, False, 0.0,
        _t(attn.out_proj.weight), _t(attn.out_proj.bias), training=False, need_weights=False,
    )  # fmt: skip
    tx = tx + attended
    inner = _torch_linear(_torch_layer_norm(tx, block.ln_2), block.mlp.c_fc)
    inner = inner * torch.sigmoid(1.702 * inner)  # QuickGELU
    want = tx + _torch_linear(inner, block.mlp.c_proj)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)


def test_transformer_state_dicts_use_the_zoo_parameter_names() -> None:
    bert_keys = set(hub.load("megengine/models", "uncased_L_12_H_768_A_12", **BERT_SMALL).state_dict())
    assert {
        "embeddings.word_embeddings.weight",
        "embeddings.LayerNorm.weight",
        "encoder.layer.1.attention.self.query.weight",
        "encoder.layer.0.attention.output.LayerNorm.bias",
        "encoder.layer.0.output.dense.weight",
        "pooler.dense.bias",
    } <= bert_keys
    rn_keys = set(hub.load("megengine/models", "rn50", **CLIP_SMALL["rn50"]).state_dict())
    assert {
        "visual.layer2.0.downsample.0.weight",
        "visual.attnpool.q_proj.weight",
        "visual.attnpool.positional_embedding",
        "transformer.resblocks.0.attn.in_proj.weight",
        "transformer.resblocks.0.mlp.c_fc.weight",
        "text_projection",
        "logit_scale",
    } <= rn_keys
    vit_keys = set(hub.load("megengine/models", "vit_b_32", **CLIP_SMALL["vit_b_32"]).state_dict())
    assert {"visual.class_embedding", "visual.proj", "visual.ln_pre.weight"} <= vit_keys


ENTRIES = [
    "BertModel", "BertForSequenceClassification",
    "uncased_L_12_H_768_A_12", "cased_L_12_H_768_A_12", "uncased_L_24_H_1024_A_16",
    "cased_L_24_H_1024_A_16", "chinese_L_12_H_768_A_12", "multi_cased_L_12_H_768_A_12",
    "wwm_uncased_L_24_H_1024_A_16", "wwm_cased_L_24_H_1024_A_16",
    "CLIP", "rn50", "rn101", "rn50x4", "rn50x16", "rn50x64",
    "vit_b_32", "vit_b_16", "vit_l_14", "vit_l_14_336px",
]  # fmt: skip


def test_hub_lists_every_transformer_entry() -> None:
    assert set(ENTRIES) <= set(hub.list("megengine/models"))


def test_bad_transformer_config_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not a multiple of num_attention_heads"):
        hub.load("megengine/models", "uncased_L_12_H_768_A_12", hidden_size=30, num_attention_heads=4)
    with pytest.raises(ValueError, match="hidden_act"):
        hub.load("megengine/models", "uncased_L_12_H_768_A_12", hidden_act="swish")
    clip = hub.load("megengine/models", "vit_b_32", **CLIP_SMALL["vit_b_32"])
    with pytest.raises(ValueError, match="64x64 images"):
        clip.encode_image(xm.tensor(np.zeros((1, 3, 32, 32), np.float32)))


@pytest.mark.slow
def test_bert_base_traces_and_dumps() -> None:
    bert = hub.load("megengine/models", "uncased_L_12_H_768_A_12")
    ids, token_types, mask = _bert_inputs(1, 16)
    _check_dumps(_LastLayerAndPooled(bert), [ids, token_types, mask])


@pytest.mark.slow
def test_clip_vit_b_32_image_tower_traces_and_dumps() -> None:
    clip = hub.load("megengine/models", "vit_b_32")
    image = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    _check_dumps(_ImageTower(clip), [image])


def test_zoo_style_symbolic_shape_reshape_traces() -> None:
    """The zoo's BERT splits heads with ``x.reshape(F.concat([tensor(x.shape)[:-1], (H, D)]))``:
    a reshape to a 1-D shape Tensor (MegEngine's Tensor.reshape accepts one)."""
    import io

    import compiler.functional as F
    from compiler import jit
    from compiler.lite import Network

    def split_heads(x: xm.Tensor) -> xm.Tensor:
        shape = xm.tensor(x.shape)
        return x.reshape(F.concat([shape[:-1], (2, 4)])).transpose(0, 2, 1, 3)

    x = np.random.default_rng(5).standard_normal((2, 5, 8)).astype(np.float32)
    want = x.reshape(2, 5, 2, 4).transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(split_heads(xm.tensor(x)).numpy(), want)
    traced = jit.trace(split_heads, symbolic=True, capture_as_const=True)
    traced(xm.tensor(x))
    buf = io.BytesIO()
    traced.dump(buf)
    (got,) = Network(buf.getvalue())(x).values()
    np.testing.assert_array_equal(got, want)
