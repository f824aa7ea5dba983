"""BERT (Devlin et al., 2018) as in the zoo's ``official/nlp/bert``: embeddings (word + position +
token type, LayerNorm), a post-LN Transformer encoder (multi-head self-attention with an additive
padding mask, GELU feed-forward) and a pooler (tanh dense layer on the first token). Parameter
names follow the zoo (``embeddings.LayerNorm``, ``encoder.layer.0.attention.self.query``, ...).

``hidden_act="gelu"`` is the zoo's tanh approximation of GELU; ``"gelu_erf"`` is the exact one
(``F.gelu``), ``"relu"`` plain ReLU.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

import compiler.functional as F
import compiler.module as M
from compiler import hub
from compiler.tensor import Tensor

__all__ = [
    "BertConfig",
    "BertModel",
    "BertForSequenceClassification",
    "uncased_L_12_H_768_A_12",
    "cased_L_12_H_768_A_12",
    "uncased_L_24_H_1024_A_16",
    "cased_L_24_H_1024_A_16",
    "chinese_L_12_H_768_A_12",
    "multi_cased_L_12_H_768_A_12",
    "wwm_uncased_L_24_H_1024_A_16",
    "wwm_cased_L_24_H_1024_A_16",
]

_WEIGHTS = "https://data.megengine.org.cn/models/weights/bert/"
# added to the attention scores of padding positions before the softmax
MASKED_SCORE = -10000.0


def gelu_tanh(x: Tensor) -> Tensor:
    return x * 0.5 * (1.0 + F.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * (x * x * x))))


ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"gelu": gelu_tanh, "gelu_erf": F.gelu, "relu": F.relu}


@dataclass(frozen=True)
class BertConfig:
    """The sizes of a BERT model (defaults: BERT-Base with the uncased English vocabulary): vocabulary,
    hidden width, layers, attention heads (hidden_size must divide by them), feed-forward width,
    activation (gelu, gelu_erf or relu), dropout rates, the longest sequence, token types, the
    weights' initial standard deviation and LayerNorm's epsilon. The zoo's BERT entries take any
    field as a keyword."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads "
                f"{self.num_attention_heads}"
            )
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act must be one of {sorted(ACTIVATIONS)}, got {self.hidden_act!r}")


class BertEmbeddings(M.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = M.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = M.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = M.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = M.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)  # noqa: N815 - zoo name
        self.dropout = M.Dropout(config.hidden_dropout_prob)
        self.max_positions = config.max_position_embeddings

    def forward(self, input_ids: Tensor, token_type_ids: Tensor) -> Tensor:
        seq_length = input_ids.shape[1]
        if seq_length > self.max_positions:
            raise ValueError(f"sequence length {seq_length} > max_position_embeddings {self.max_positions}")
        position_ids = F.linspace(0, seq_length - 1, seq_length).astype(np.int32)
        position_ids = F.broadcast_to(F.expand_dims(position_ids, 0), input_ids.shape)
        embeddings = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(position_ids)
            + self.token_type_embeddings(token_type_ids)
        )
        return self.dropout(self.LayerNorm(embeddings))


class BertSelfAttention(M.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.query = M.Linear(config.hidden_size, config.hidden_size)
        self.key = M.Linear(config.hidden_size, config.hidden_size)
        self.value = M.Linear(config.hidden_size, config.hidden_size)
        self.dropout = M.Dropout(config.attention_probs_dropout_prob)

    def _split_heads(self, x: Tensor) -> Tensor:
        """(N, L, H*D) -> (N, H, L, D)."""
        n, length, _ = x.shape
        return x.reshape(n, length, self.num_attention_heads, self.attention_head_size).transpose(0, 2, 1, 3)

    def forward(self, hidden_states: Tensor, attention_mask: Tensor) -> Tensor:
        query = self._split_heads(self.query(hidden_states))
        key = self._split_heads(self.key(hidden_states))
        value = self._split_heads(self.value(hidden_states))
        scores = F.matmul(query, key.transpose(0, 1, 3, 2)) / math.sqrt(self.attention_head_size)
        probs = self.dropout(F.softmax(scores + attention_mask, axis=-1))
        context = F.matmul(probs, value).transpose(0, 2, 1, 3)
        n, length = context.shape[:2]
        return context.reshape(n, length, self.num_attention_heads * self.attention_head_size)


class BertSelfOutput(M.Module):
    """Projection, dropout and the post-LN residual: LayerNorm(dense(h) + input)."""

    def __init__(self, config: BertConfig, in_features: int) -> None:
        super().__init__()
        self.dense = M.Linear(in_features, config.hidden_size)
        self.LayerNorm = M.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)  # noqa: N815 - zoo name
        self.dropout = M.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: Tensor, input_tensor: Tensor) -> Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertAttention(M.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config, config.hidden_size)

    def forward(self, input_tensor: Tensor, attention_mask: Tensor) -> Tensor:
        return self.output(self.self(input_tensor, attention_mask), input_tensor)


class BertIntermediate(M.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = M.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = ACTIVATIONS[config.hidden_act]

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.intermediate_act_fn(self.dense(hidden_states))


class BertLayer(M.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertSelfOutput(config, config.intermediate_size)

    def forward(self, hidden_states: Tensor, attention_mask: Tensor) -> Tensor:
        attended = self.attention(hidden_states, attention_mask)
        return self.output(self.intermediate(attended), attended)


class BertEncoder(M.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.layer = M.Sequential(*[BertLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, hidden_states: Tensor, attention_mask: Tensor) -> list[Tensor]:
        """Every layer's output."""
        outputs = []
        for layer in self.layer:
            hidden_states = layer(hidden_states, attention_mask)
            outputs.append(hidden_states)
        return outputs


class BertPooler(M.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = M.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states: Tensor) -> Tensor:
        return F.tanh(self.dense(hidden_states[:, 0]))


class BertModel(M.Module):
    """The BERT encoder of ``config``: ``model(input_ids, token_type_ids=None, attention_mask=None,
    output_all_encoded_layers=True)`` on (N, L) integer tensors returns every layer's (N, L, hidden)
    output (the last only with ``output_all_encoded_layers=False``) and the pooled (N, hidden) first
    token. Token types default to 0; without a mask every position is attended."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config)
        for module in self.modules():
            if isinstance(module, M.Linear | M.Embedding):
                M.init.normal_(module.weight, 0.0, config.initializer_range)

    def forward(
        self,
        input_ids: Tensor,
        token_type_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        output_all_encoded_layers: bool = True,
    ) -> tuple[list[Tensor] | Tensor, Tensor]:
        """``input_ids``, ``token_type_ids``, ``attention_mask``: (N, L) integers (mask 1 = attend).
        Returns (every layer's (N, L, hidden) output, or the last one, and the pooled (N, hidden))."""
        if token_type_ids is None:
            token_type_ids = F.zeros_like(input_ids)
        if attention_mask is None:
            attention_mask = F.ones_like(input_ids)
        # (N, 1, 1, L): 0 where attended, MASKED_SCORE at padding, broadcast over heads and queries
        additive_mask = (1.0 - F.expand_dims(attention_mask, (1, 2)).astype("float32")) * MASKED_SCORE
        encoded = self.encoder(self.embeddings(input_ids, token_type_ids), additive_mask)
        pooled = self.pooler(encoded[-1])
        return (encoded if output_all_encoded_layers else encoded[-1]), pooled


class BertForSequenceClassification(M.Module):
    """A classifier on BERT: dropout and a linear layer over the pooled first token give (N, num_labels)
    logits; ``bert`` reuses an existing (e.g. pretrained) BertModel."""

    def __init__(self, config: BertConfig, num_labels: int, bert: BertModel | None = None) -> None:
        super().__init__()
        self.bert = bert if bert is not None else BertModel(config)
        self.num_labels = num_labels
        self.dropout = M.Dropout(config.hidden_dropout_prob)
        self.classifier = M.Linear(config.hidden_size, num_labels)

    def forward(
        self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None
    ) -> Tensor:
        _, pooled = self.bert(input_ids, token_type_ids, attention_mask, output_all_encoded_layers=False)
        return self.classifier(self.dropout(pooled))


def _bert(base: BertConfig, kwargs: dict[str, Any]) -> BertModel:
    return BertModel(replace(base, **kwargs))


_BASE = BertConfig()
_LARGE = BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
CASED_VOCAB, CHINESE_VOCAB, MULTILINGUAL_VOCAB = 28996, 21128, 119547


@hub.pretrained(_WEIGHTS + "uncased_L-12_H-768_A-12/bert_4f2157f7_uncased_L-12_H-768_A-12.pkl")
def uncased_L_12_H_768_A_12(**kwargs: Any) -> BertModel:  # noqa: N802 - the zoo's entry name
    """BERT-Base, uncased English: 12 layers, hidden 768, 12 heads, vocabulary 30522.
    ``pretrained=True`` loads the zoo's weights from the local hub cache; other keywords override
    BertConfig fields."""
    return _bert(_BASE, kwargs)


@hub.pretrained(_WEIGHTS + "cased_L-12_H-768_A-12/bert_b9727c2f_cased_L-12_H-768_A-12.pkl")
def cased_L_12_H_768_A_12(**kwargs: Any) -> BertModel:  # noqa: N802
    """BERT-Base, cased English: 12 layers, hidden 768, 12 heads, vocabulary 28996. ``pretrained=True``
    loads the zoo's weights from the local hub cache; other keywords override BertConfig fields."""
    return _bert(replace(_BASE, vocab_size=CASED_VOCAB), kwargs)


@hub.pretrained(_WEIGHTS + "uncased_L-24_H-1024_A-16/bert_222f5012_uncased_L-24_H-1024_A-16.pkl")
def uncased_L_24_H_1024_A_16(**kwargs: Any) -> BertModel:  # noqa: N802
    """BERT-Large, uncased English: 24 layers, hidden 1024, 16 heads, vocabulary 30522.
    ``pretrained=True`` loads the zoo's weights from the local hub cache; other keywords override
    BertConfig fields."""
    return _bert(_LARGE, kwargs)


@hub.pretrained(_WEIGHTS + "cased_L-24_H-1024_A-16/bert_01f2a65f_cased_L-24_H-1024_A-16.pkl")
def cased_L_24_H_1024_A_16(**kwargs: Any) -> BertModel:  # noqa: N802
    """BERT-Large, cased English: 24 layers, hidden 1024, 16 heads, vocabulary 28996.
    ``pretrained=True`` loads the zoo's weights from the local hub cache; other keywords override
    BertConfig fields."""
    return _bert(replace(_LARGE, vocab_size=CASED_VOCAB), kwargs)


@hub.pretrained(_WEIGHTS + "chinese_L-12_H-768_A-12/bert_ee91be1a_chinese_L-12_H-768_A-12.pkl")
def chinese_L_12_H_768_A_12(**kwargs: Any) -> BertModel:  # noqa: N802
    """BERT-Base, Chinese: 12 layers, hidden 768, 12 heads, vocabulary 21128. ``pretrained=True`` loads
    the zoo's weights from the local hub cache; other keywords override BertConfig fields."""
    return _bert(replace(_BASE, vocab_size=CHINESE_VOCAB), kwargs)


@hub.pretrained(_WEIGHTS + "multi_cased_L-12_H-768_A-12/bert_283ceec5_multi_cased_L-12_H-768_A-12.pkl")
def multi_cased_L_12_H_768_A_12(**kwargs: Any) -> BertModel:  # noqa: N802
    """BERT-Base, multilingual cased: 12 layers, hidden 768, 12 heads, vocabulary 119547.
    ``pretrained=True`` loads the zoo's weights from the local hub cache; other keywords override
    BertConfig fields."""
    return _bert(replace(_BASE, vocab_size=MULTILINGUAL_VOCAB), kwargs)


@hub.pretrained(_WEIGHTS + "wwm_uncased_L-24_H-1024_A-16/bert_e2780a6a_wwm_uncased_L-24_H-1024_A-16.pkl")
def wwm_uncased_L_24_H_1024_A_16(**kwargs: Any) -> BertModel:  # noqa: N802
    """BERT-Large trained with whole-word masking, uncased English: 24 layers, hidden 1024, 16 heads,
    vocabulary 30522. ``pretrained=True`` loads the zoo's weights from the local hub cache; other
    keywords override BertConfig fields."""
    return _bert(_LARGE, kwargs)


@hub.pretrained(_WEIGHTS + "wwm_cased_L-24_H-1024_A-16/bert_0a8f1389_wwm_cased_L-24_H-1024_A-16.pkl")
def wwm_cased_L_24_H_1024_A_16(**kwargs: Any) -> BertModel:  # noqa: N802
    """BERT-Large trained with whole-word masking, cased English: 24 layers, hidden 1024, 16 heads,
    vocabulary 28996. ``pretrained=True`` loads the zoo's weights from the local hub cache; other
    keywords override BertConfig fields."""
    return _bert(replace(_LARGE, vocab_size=CASED_VOCAB), kwargs)
