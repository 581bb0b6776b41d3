"""A BERT encoder (all-MiniLM-L6-v2) and sentence embeddings: mean pooling over the attention mask, L2-normalized.

Post-LayerNorm BERT: embeddings (word + position + token type 0) -> LayerNorm; per layer: self-attention with an
additive padding mask -> dense -> residual + LayerNorm -> dense + GELU (erf form) -> dense -> residual + LayerNorm.
Weights load by the Hugging Face names of model.safetensors ("embeddings.word_embeddings.weight",
"encoder.layer.0.attention.self.query.weight", ...).
"""
from __future__ import annotations
import json, os
from dataclasses import dataclass
from typing import Mapping, Sequence
import numpy as np
from tinysched import Tensor, nn
from tinysched.models.layers import embedding, gelu_erf, param, replace_weights, token_ids
from tinysched.models.weights import load_safetensors

@dataclass(frozen=True)
class BertConfig:
  vocab_size: int = 30522
  hidden_size: int = 384
  num_hidden_layers: int = 6
  num_attention_heads: int = 12
  intermediate_size: int = 1536
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  layer_norm_eps: float = 1e-12
  @staticmethod
  def from_json(path: str | os.PathLike) -> BertConfig:
    with open(path) as f: j = json.load(f)
    if j.get("hidden_act", "gelu") != "gelu": raise ValueError(f"{path}: hidden_act {j['hidden_act']!r} is not supported (only 'gelu')")
    return BertConfig(**{k: j[k] for k in BertConfig.__dataclass_fields__ if k in j})

class BertLayer:
  def __init__(self, c: BertConfig):
    d, self.n_heads = c.hidden_size, c.num_attention_heads
    self.query, self.key, self.value, self.attn_out = (nn.Linear(d, d) for _ in range(4))
    self.attn_norm = nn.LayerNorm(d, eps=c.layer_norm_eps)
    self.intermediate, self.output = nn.Linear(d, c.intermediate_size), nn.Linear(c.intermediate_size, d)
    self.out_norm = nn.LayerNorm(d, eps=c.layer_norm_eps)
  def __call__(self, x: Tensor, mask: Tensor) -> Tensor:
    b, t, d = x.shape
    hd = d // self.n_heads
    q, k, v = (lin(x).reshape(b, t, self.n_heads, hd).transpose(1, 2) for lin in (self.query, self.key, self.value))
    attn = q.scaled_dot_product_attention(k, v, attn_mask=mask).transpose(1, 2).reshape(b, t, d)
    x = self.attn_norm(x + self.attn_out(attn))
    return self.out_norm(x + self.output(gelu_erf(self.intermediate(x))))

class Bert:
  """`n_layers` keeps the first layers only (the quick suite); 0 < n_layers <= num_hidden_layers."""
  def __init__(self, c: BertConfig, n_layers: int | None = None):
    self.config = c
    self.n_layers = c.num_hidden_layers if n_layers is None else n_layers
    if not 0 < self.n_layers <= c.num_hidden_layers: raise ValueError(f"n_layers must be in [1, {c.num_hidden_layers}], got {n_layers}")
    self.word_embeddings: nn.Embedding | None = None  # set by load
    self.position_embeddings: Tensor | None = None
    self.token_type_embeddings: Tensor | None = None
    self.emb_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
    self.layers = [BertLayer(c) for _ in range(self.n_layers)]

  def load(self, sd: Mapping[str, Tensor | np.ndarray]) -> None:
    """Take Hugging Face BertModel weights (Tensors or arrays; an optional "bert."/"0." prefix is dropped)."""
    def get(name: str) -> np.ndarray:
      for k in (name, "bert." + name):
        if k in sd: v = sd[k]; return v.numpy() if isinstance(v, Tensor) else np.asarray(v)
      raise KeyError(f"BERT weights have no {name!r} (e.g. {list(sd)[:3]})")
    self.word_embeddings = embedding(get("embeddings.word_embeddings.weight"))
    self.position_embeddings = param(get("embeddings.position_embeddings.weight"))
    self.token_type_embeddings = param(get("embeddings.token_type_embeddings.weight"))
    replace_weights(self.emb_norm, weight=get("embeddings.LayerNorm.weight"), bias=get("embeddings.LayerNorm.bias"))
    for i, layer in enumerate(self.layers):
      p = f"encoder.layer.{i}."
      for lin, name in ((layer.query, "attention.self.query"), (layer.key, "attention.self.key"), (layer.value, "attention.self.value"),
                        (layer.attn_out, "attention.output.dense"), (layer.intermediate, "intermediate.dense"), (layer.output, "output.dense")):
        replace_weights(lin, weight=get(p + name + ".weight"), bias=get(p + name + ".bias"))
      for norm, name in ((layer.attn_norm, "attention.output.LayerNorm"), (layer.out_norm, "output.LayerNorm")):
        replace_weights(norm, weight=get(p + name + ".weight"), bias=get(p + name + ".bias"))

  def __call__(self, ids: Sequence[Sequence[int]], attention_mask: Sequence[Sequence[int]]) -> Tensor:
    """Token ids (B, T) and 0/1 mask (B, T), host lists -> hidden states (B, T, hidden)."""
    if self.word_embeddings is None or self.position_embeddings is None or self.token_type_embeddings is None:
      raise RuntimeError("Bert: call load() with the weights first")
    b, t = len(ids), len(ids[0])
    if t > self.config.max_position_embeddings:
      raise ValueError(f"sequence of {t} tokens is longer than {self.config.max_position_embeddings} positions")
    x = self.word_embeddings(token_ids(ids, self.word_embeddings.vocab_sz))
    x = x + self.position_embeddings[0:t].reshape(1, t, -1) + self.token_type_embeddings[0].reshape(1, 1, -1)
    x = self.emb_norm(x)
    # padding keys get -inf before the softmax (bool mask: True = attend), every query row keeps at least [CLS]
    mask = Tensor(np.asarray(attention_mask, dtype=bool).reshape(b, 1, 1, t), requires_grad=False)
    for layer in self.layers: x = layer(x, mask)
    return x

def sentence_embeddings(hidden: Tensor, attention_mask: Sequence[Sequence[int]]) -> Tensor:
  """sentence-transformers' Pooling(mean) + Normalize: masked mean over tokens, then x / max(||x||, 1e-12)."""
  m = Tensor(np.asarray(attention_mask, dtype=np.float32)[..., None], requires_grad=False)
  pooled = (hidden * m).sum(1) / m.sum(1).maximum(1e-9)
  return pooled / (pooled * pooled).sum(-1, keepdim=True).sqrt().maximum(1e-12)

def load_minilm(model_dir: str | os.PathLike, n_layers: int | None = None) -> Bert:
  """all-MiniLM-L6-v2 from its directory (config.json + model.safetensors)."""
  model = Bert(BertConfig.from_json(os.path.join(model_dir, "config.json")), n_layers)
  model.load(load_safetensors(os.path.join(model_dir, "model.safetensors")))
  return model

__all__ = ["BertConfig", "Bert", "sentence_embeddings", "load_minilm"]
