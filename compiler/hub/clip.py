"""CLIP (Radford et al., 2021) as in the zoo's ``official/multimodal/clip``: an image tower (a Vision
Transformer, or the ModifiedResNet with a 3-conv stem, anti-aliased strided blocks and attention
pooling), a causal text Transformer, and cosine-similarity logits. Parameter names follow the zoo
(``visual.conv1``, ``visual.transformer.resblocks.0.attn.in_proj``, ``visual.attnpool.q_proj``,
``token_embedding``, ``text_projection``, ...). Sequences run sequence-first ``(L, N, D)`` inside
the Transformers, as in the zoo.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

import compiler.functional as F
import compiler.module as M
import compiler.random as R
from compiler import hub
from compiler.tensor import Parameter, Tensor

__all__ = [
    "CLIPConfig",
    "CLIP",
    "VisionTransformer",
    "ModifiedResNet",
    "rn50",
    "rn101",
    "rn50x4",
    "rn50x16",
    "rn50x64",
    "vit_b_32",
    "vit_b_16",
    "vit_l_14",
    "vit_l_14_336px",
]

_WEIGHTS = "https://data.megengine.org.cn/research/multimodality/"
QUICK_GELU_ALPHA = 1.702
HEAD_DIM = 64  # the zoo derives the image towers' head counts from 64-wide heads


def multi_head_attention(
    query: Tensor,
    key_value: Tensor,
    num_heads: int,
    q_proj: M.Linear,
    k_proj: M.Linear,
    v_proj: M.Linear,
    out_proj: M.Linear,
    attn_mask: np.ndarray | None = None,
) -> Tensor:
    """Scaled dot-product attention over sequence-first inputs: query (Lq, N, D), keys/values
    (Lk, N, D) -> (Lq, N, D); ``attn_mask`` (Lq, Lk) is added to the scores."""
    lq, n, d = query.shape
    lk = key_value.shape[0]
    head_dim = d // num_heads

    def heads(x: Tensor, length: int) -> Tensor:  # (L, N, D) -> (N, H, L, hd)
        return x.reshape(length, n, num_heads, head_dim).transpose(1, 2, 0, 3)

    q = heads(q_proj(query), lq) * (head_dim**-0.5)
    k = heads(k_proj(key_value), lk)
    v = heads(v_proj(key_value), lk)
    scores = F.matmul(q, k.transpose(0, 1, 3, 2))
    if attn_mask is not None:
        scores = scores + attn_mask
    context = F.matmul(F.softmax(scores, axis=-1), v)  # (N, H, Lq, hd)
    return out_proj(context.transpose(2, 0, 1, 3).reshape(lq, n, d))


class _Projection(M.Module):
    """One third of a packed in-projection: rows ``[index * d, (index + 1) * d)`` of ``packed``."""

    def __init__(self, packed: M.Linear, index: int, width: int) -> None:
        super().__init__()
        self._packed = [packed]  # a list: not a submodule, the weights stay owned by ``packed``
        self.rows = slice(index * width, (index + 1) * width)

    def forward(self, x: Tensor) -> Tensor:
        packed = self._packed[0]
        bias = packed.bias[self.rows] if packed.bias is not None else None
        return F.linear(x, packed.weight[self.rows], bias)


class MultiheadAttention(M.Module):
    """Self-attention with one packed ``in_proj`` (D -> 3D: query, key, value) and ``out_proj``."""

    def __init__(self, embed_dim: int, num_heads: int) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not a multiple of num_heads {num_heads}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.in_proj = M.Linear(embed_dim, 3 * embed_dim)
        self.out_proj = M.Linear(embed_dim, embed_dim)
        M.init.xavier_uniform_(self.in_proj.weight)
        M.init.zeros_(self.in_proj.bias)
        M.init.zeros_(self.out_proj.bias)
        self._qkv = [_Projection(self.in_proj, i, embed_dim) for i in range(3)]

    def forward(self, x: Tensor, attn_mask: np.ndarray | None = None) -> Tensor:
        q, k, v = self._qkv
        return multi_head_attention(x, x, self.num_heads, q, k, v, self.out_proj, attn_mask)


class QuickGELU(M.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x * F.sigmoid(QUICK_GELU_ALPHA * x)


class ResidualAttentionBlock(M.Module):
    """Pre-LN Transformer block: x + attn(ln_1(x)), then x + mlp(ln_2(x)) with QuickGELU."""

    def __init__(self, width: int, heads: int, attn_mask: np.ndarray | None = None) -> None:
        super().__init__()
        self.attn = MultiheadAttention(width, heads)
        self.ln_1 = M.LayerNorm(width)
        self.mlp = M.Sequential(
            OrderedDict(c_fc=M.Linear(width, width * 4), gelu=QuickGELU(), c_proj=M.Linear(width * 4, width))
        )
        self.ln_2 = M.LayerNorm(width)
        self.attn_mask = attn_mask

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x), self.attn_mask)
        return x + self.mlp(self.ln_2(x))


class Transformer(M.Module):
    def __init__(self, width: int, layers: int, heads: int, attn_mask: np.ndarray | None = None) -> None:
        super().__init__()
        self.width, self.layers = width, layers
        self.resblocks = M.Sequential(
            *[ResidualAttentionBlock(width, heads, attn_mask) for _ in range(layers)]
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.resblocks(x)


class VisionTransformer(M.Module):
    """CLIP's ViT image tower: a strided convolution cuts the (N, 3, R, R) image into patches, a class
    token and learned positions are added, a pre-LN Transformer runs over them and the class token's
    output, normalized, is projected to (N, output_dim)."""

    def __init__(
        self, input_resolution: int, patch_size: int, width: int, layers: int, heads: int, output_dim: int
    ) -> None:
        super().__init__()
        if input_resolution % patch_size:
            raise ValueError(
                f"input_resolution {input_resolution} is not a multiple of patch_size {patch_size}"
            )
        self.input_resolution = input_resolution
        self.conv1 = M.Conv2d(3, width, patch_size, patch_size, bias=False)
        scale = width**-0.5
        self.class_embedding = Parameter(scale * R.normal(size=(width,)).numpy())
        grid = input_resolution // patch_size
        self.positional_embedding = Parameter(scale * R.normal(size=(grid * grid + 1, width)).numpy())
        self.ln_pre = M.LayerNorm(width)
        self.transformer = Transformer(width, layers, heads)
        self.ln_post = M.LayerNorm(width)
        self.proj = Parameter(scale * R.normal(size=(width, output_dim)).numpy())

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[2:] != (self.input_resolution, self.input_resolution):
            raise ValueError(
                f"expected {self.input_resolution}x{self.input_resolution} images, got {x.shape}"
            )
        x = self.conv1(x)  # (N, width, grid, grid): one token per patch
        n, width = x.shape[:2]
        x = x.reshape(n, width, -1).transpose(0, 2, 1)
        class_token = self.class_embedding + F.zeros((n, 1, width))
        x = F.concat([class_token, x], axis=1) + self.positional_embedding
        x = self.transformer(self.ln_pre(x).transpose(1, 0, 2)).transpose(1, 0, 2)
        return F.matmul(self.ln_post(x[:, 0, :]), self.proj)


class Bottleneck(M.Module):
    """ResNet bottleneck whose stride is an average pool after the 3x3 conv (anti-aliasing); the
    shortcut pools first too."""

    expansion = 4

    def __init__(self, in_channels: int, channels: int, stride: int = 1) -> None:
        super().__init__()
        out_channels = channels * self.expansion
        self.conv1 = M.Conv2d(in_channels, channels, 1, bias=False)
        self.bn1 = M.BatchNorm2d(channels)
        self.conv2 = M.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = M.BatchNorm2d(channels)
        self.avgpool = M.AvgPool2d(stride) if stride > 1 else M.Identity()
        self.conv3 = M.Conv2d(channels, out_channels, 1, bias=False)
        self.bn3 = M.BatchNorm2d(out_channels)
        self.downsample: M.Module = M.Identity()
        if stride > 1 or in_channels != out_channels:
            # the zoo's keys: downsample.-1 (pool), downsample.0 (conv), downsample.1 (bn)
            self.downsample = M.Sequential(
                OrderedDict(
                    [
                        ("-1", M.AvgPool2d(stride)),
                        ("0", M.Conv2d(in_channels, out_channels, 1, bias=False)),
                        ("1", M.BatchNorm2d(out_channels)),
                    ]
                )
            )

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.avgpool(F.relu(self.bn2(self.conv2(out))))
        out = self.bn3(self.conv3(out))
        return F.relu(out + self.downsample(x))


class AttentionPool2d(M.Module):
    """Replaces global average pooling: the mean token (plus position embeddings) attends over
    all spatial tokens."""

    def __init__(
        self, spacial_dim: int, embed_dim: int, num_heads: int, output_dim: int | None = None
    ) -> None:
        super().__init__()
        self.positional_embedding = Parameter(
            R.normal(size=(spacial_dim**2 + 1, embed_dim)).numpy() / embed_dim**0.5
        )
        self.k_proj = M.Linear(embed_dim, embed_dim)
        self.q_proj = M.Linear(embed_dim, embed_dim)
        self.v_proj = M.Linear(embed_dim, embed_dim)
        self.c_proj = M.Linear(embed_dim, output_dim or embed_dim)
        self.num_heads = num_heads

    def forward(self, x: Tensor) -> Tensor:
        x = F.flatten(x, 2).transpose(2, 0, 1)  # (N, C, H, W) -> (HW, N, C)
        if x.shape[0] + 1 != self.positional_embedding.shape[0]:
            raise ValueError(f"attention pool expects {self.positional_embedding.shape[0] - 1} positions")
        x = F.concat([F.mean(x, axis=0, keepdims=True), x], axis=0)
        x = x + F.expand_dims(self.positional_embedding, 1)
        pooled = multi_head_attention(
            x[:1], x, self.num_heads, self.q_proj, self.k_proj, self.v_proj, self.c_proj
        )
        return pooled[0]


class ModifiedResNet(M.Module):
    """CLIP's ResNet image tower: a three-convolution stem with average pooling, four stages of
    bottleneck blocks whose stride is an average pool after the 3x3 convolution (anti-aliasing), and
    attention pooling (multi-head attention of the mean feature over all positions) giving (N,
    output_dim)."""

    def __init__(
        self,
        layers: Sequence[int],
        output_dim: int,
        heads: int,
        input_resolution: int = 224,
        width: int = 64,
    ) -> None:
        super().__init__()
        if input_resolution % 32:
            raise ValueError(f"input_resolution must be a multiple of 32, got {input_resolution}")
        self.input_resolution = input_resolution
        self.conv1 = M.Conv2d(3, width // 2, 3, stride=2, padding=1, bias=False)
        self.bn1 = M.BatchNorm2d(width // 2)
        self.conv2 = M.Conv2d(width // 2, width // 2, 3, padding=1, bias=False)
        self.bn2 = M.BatchNorm2d(width // 2)
        self.conv3 = M.Conv2d(width // 2, width, 3, padding=1, bias=False)
        self.bn3 = M.BatchNorm2d(width)
        self.avgpool = M.AvgPool2d(2)
        self._in_channels = width
        self.layer1 = self._make_layer(width, layers[0])
        self.layer2 = self._make_layer(width * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(width * 4, layers[2], stride=2)
        self.layer4 = self._make_layer(width * 8, layers[3], stride=2)
        self.attnpool = AttentionPool2d(input_resolution // 32, width * 32, heads, output_dim)

    def _make_layer(self, channels: int, blocks: int, stride: int = 1) -> M.Sequential:
        stage = [Bottleneck(self._in_channels, channels, stride)]
        self._in_channels = channels * Bottleneck.expansion
        stage += [Bottleneck(self._in_channels, channels) for _ in range(1, blocks)]
        return M.Sequential(*stage)

    def stem(self, x: Tensor) -> Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.relu(self.bn3(self.conv3(x)))
        return self.avgpool(x)

    def forward(self, x: Tensor) -> Tensor:
        x = self.stem(x)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.attnpool(x)


@dataclass(frozen=True)
class CLIPConfig:
    """The sizes of a CLIP model: embedding width, image resolution, the image tower (vision_layers:
    four stage depths for a ModifiedResNet, one int for a ViT's depth; its width and, for a ViT,
    patch size), the text context length and vocabulary, the text Transformer's width, heads and
    layers, and the image tower's heads (default: width / 64, times 32 for the ResNet)."""

    embed_dim: int
    image_resolution: int
    vision_layers: tuple[int, int, int, int] | int  # 4 stages: ModifiedResNet; an int: ViT depth
    vision_width: int
    vision_patch_size: int | None
    context_length: int = 77
    vocab_size: int = 49408
    transformer_width: int = 512
    transformer_heads: int = 8
    transformer_layers: int = 12
    vision_heads: int | None = None  # default: vision_width * 32 // 64 (ResNet), vision_width // 64 (ViT)


class CLIP(M.Module):
    """CLIP of ``config``: ``model(image, text)`` returns cosine-similarity logits per image (N_img,
    N_text) and per text (N_text, N_img), scaled by the learned temperature; ``encode_image`` and
    ``encode_text`` (token ids, (N, context_length)) give the features alone."""

    def __init__(self, config: CLIPConfig) -> None:
        super().__init__()
        self.config = config
        if isinstance(config.vision_layers, Sequence):
            heads = config.vision_heads or config.vision_width * 32 // HEAD_DIM
            self.visual: M.Module = ModifiedResNet(
                config.vision_layers, config.embed_dim, heads, config.image_resolution, config.vision_width
            )
        else:
            if config.vision_patch_size is None:
                raise ValueError("a ViT image tower needs vision_patch_size")
            heads = config.vision_heads or config.vision_width // HEAD_DIM
            self.visual = VisionTransformer(
                config.image_resolution, config.vision_patch_size, config.vision_width,
                config.vision_layers, heads, config.embed_dim,
            )  # fmt: skip
        # causal mask: token i attends to tokens <= i
        causal = np.triu(np.full((config.context_length,) * 2, -np.inf, np.float32), k=1)
        self.transformer = Transformer(
            config.transformer_width, config.transformer_layers, config.transformer_heads, causal
        )
        self.token_embedding = M.Embedding(config.vocab_size, config.transformer_width)
        self.positional_embedding = Parameter(
            R.normal(0.0, 0.01, size=(config.context_length, config.transformer_width)).numpy()
        )
        self.ln_final = M.LayerNorm(config.transformer_width)
        self.text_projection = Parameter(
            R.normal(size=(config.transformer_width, config.embed_dim)).numpy()
            * config.transformer_width**-0.5
        )
        self.logit_scale = Parameter(np.full((1,), np.log(1 / 0.07), np.float32))
        M.init.normal_(self.token_embedding.weight, std=0.02)

    def encode_image(self, image: Tensor) -> Tensor:
        return self.visual(image)

    def encode_text(self, text: Tensor) -> Tensor:
        """``text``: (N, context_length) token ids; the feature of each sequence is taken at its
        end-of-text token (the largest id)."""
        if text.shape[1] != self.config.context_length:
            raise ValueError(f"text must have {self.config.context_length} tokens, got shape {text.shape}")
        x = self.token_embedding(text) + self.positional_embedding
        x = self.ln_final(self.transformer(x.transpose(1, 0, 2)).transpose(1, 0, 2))
        # the zoo indexes x[arange(N), argmax(text)], which needs IndexingMultiAxisVec; picking
        # with a one-hot along the sequence axis is the same value and traces with existing ops
        eot = F.broadcast_to(F.expand_dims(F.argmax(text, axis=-1), 1), (x.shape[0], x.shape[2]))
        return F.matmul(F.nn.indexing_one_hot(x, eot, axis=1), self.text_projection)

    def forward(self, image: Tensor, text: Tensor) -> tuple[Tensor, Tensor]:
        """(logits per image (N_img, N_text), logits per text (N_text, N_img))."""
        image_features = self.encode_image(image)
        text_features = self.encode_text(text)
        image_features = image_features / F.norm(image_features, axis=1, keepdims=True)
        text_features = text_features / F.norm(text_features, axis=1, keepdims=True)
        logits_per_image = F.matmul(F.exp(self.logit_scale) * image_features, text_features.transpose(1, 0))
        return logits_per_image, logits_per_image.transpose(1, 0)


def _clip(config: CLIPConfig, kwargs: dict[str, Any]) -> CLIP:
    return CLIP(replace(config, **kwargs))


def _resnet_config(
    embed: int, resolution: int, layers: tuple[int, int, int, int], width: int, text: int
) -> CLIPConfig:
    return CLIPConfig(
        embed, resolution, layers, width, None, transformer_width=text, transformer_heads=text // 64
    )


def _vit_config(embed: int, resolution: int, layers: int, width: int, patch: int, text: int) -> CLIPConfig:
    return CLIPConfig(
        embed, resolution, layers, width, patch, transformer_width=text, transformer_heads=text // 64
    )


@hub.pretrained(_WEIGHTS + "clip_rn50.pkl")
def rn50(**kwargs: Any) -> CLIP:
    """CLIP with a ModifiedResNet image tower (RN50: stages (3, 4, 6, 3), width 64) on 224x224 images, a
    512-wide 12-layer text Transformer and 1024-dimensional embeddings. ``pretrained=True`` loads the
    zoo's weights from the local hub cache; other keywords override CLIPConfig fields."""
    return _clip(_resnet_config(1024, 224, (3, 4, 6, 3), 64, 512), kwargs)


@hub.pretrained(_WEIGHTS + "clip_rn101.pkl")
def rn101(**kwargs: Any) -> CLIP:
    """CLIP with a ModifiedResNet image tower (RN101: stages (3, 4, 23, 3), width 64) on 224x224 images,
    a 512-wide 12-layer text Transformer and 512-dimensional embeddings. ``pretrained=True`` loads
    the zoo's weights from the local hub cache; other keywords override CLIPConfig fields."""
    return _clip(_resnet_config(512, 224, (3, 4, 23, 3), 64, 512), kwargs)


@hub.pretrained(_WEIGHTS + "clip_rn50x4.pkl")
def rn50x4(**kwargs: Any) -> CLIP:
    """CLIP with a ModifiedResNet image tower (RN50x4: stages (4, 6, 10, 6), width 80) on 288x288
    images, a 640-wide 12-layer text Transformer and 640-dimensional embeddings. ``pretrained=True``
    loads the zoo's weights from the local hub cache; other keywords override CLIPConfig fields."""
    return _clip(_resnet_config(640, 288, (4, 6, 10, 6), 80, 640), kwargs)


@hub.pretrained(_WEIGHTS + "clip_rn50x16.pkl")
def rn50x16(**kwargs: Any) -> CLIP:
    """CLIP with a ModifiedResNet image tower (RN50x16: stages (6, 8, 18, 8), width 96) on 384x384
    images, a 768-wide 12-layer text Transformer and 768-dimensional embeddings. ``pretrained=True``
    loads the zoo's weights from the local hub cache; other keywords override CLIPConfig fields."""
    return _clip(_resnet_config(768, 384, (6, 8, 18, 8), 96, 768), kwargs)


@hub.pretrained(_WEIGHTS + "clip_rn50x64.pkl")
def rn50x64(**kwargs: Any) -> CLIP:
    """CLIP with a ModifiedResNet image tower (RN50x64: stages (3, 15, 36, 10), width 128) on 448x448
    images, a 1024-wide 12-layer text Transformer and 1024-dimensional embeddings.
    ``pretrained=True`` loads the zoo's weights from the local hub cache; other keywords override
    CLIPConfig fields."""
    return _clip(_resnet_config(1024, 448, (3, 15, 36, 10), 128, 1024), kwargs)


@hub.pretrained(_WEIGHTS + "clip_vit_b32.pkl")
def vit_b_32(**kwargs: Any) -> CLIP:
    """CLIP with a Vision Transformer image tower (ViT-B/32: 12 layers, width 768, 32x32 patches) on
    224x224 images, a 512-wide 12-layer text Transformer and 512-dimensional embeddings.
    ``pretrained=True`` loads the zoo's weights from the local hub cache; other keywords override
    CLIPConfig fields."""
    return _clip(_vit_config(512, 224, 12, 768, 32, 512), kwargs)


@hub.pretrained(_WEIGHTS + "clip_vit_b16.pkl")
def vit_b_16(**kwargs: Any) -> CLIP:
    """CLIP with a Vision Transformer image tower (ViT-B/16: 12 layers, width 768, 16x16 patches) on
    224x224 images, a 512-wide 12-layer text Transformer and 512-dimensional embeddings.
    ``pretrained=True`` loads the zoo's weights from the local hub cache; other keywords override
    CLIPConfig fields."""
    return _clip(_vit_config(512, 224, 12, 768, 16, 512), kwargs)


@hub.pretrained(_WEIGHTS + "clip_vit_l14.pkl")
def vit_l_14(**kwargs: Any) -> CLIP:
    """CLIP with a Vision Transformer image tower (ViT-L/14: 24 layers, width 1024, 14x14 patches) on
    224x224 images, a 768-wide 12-layer text Transformer and 768-dimensional embeddings.
    ``pretrained=True`` loads the zoo's weights from the local hub cache; other keywords override
    CLIPConfig fields."""
    return _clip(_vit_config(768, 224, 24, 1024, 14, 768), kwargs)


@hub.pretrained(_WEIGHTS + "clip_vit_l14_336px.pkl")
def vit_l_14_336px(**kwargs: Any) -> CLIP:
    """CLIP with a Vision Transformer image tower (ViT-L/14: 24 layers, width 1024, 14x14 patches) on
    336x336 images, a 768-wide 12-layer text Transformer and 768-dimensional embeddings.
    ``pretrained=True`` loads the zoo's weights from the local hub cache; other keywords override
    CLIPConfig fields."""
    return _clip(_vit_config(768, 336, 24, 1024, 14, 768), kwargs)
