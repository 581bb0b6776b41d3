"""A Llama-style decoder (SmolLM2-135M) from a GGUF file, with a KV cache and greedy generation.

Architecture: token embedding -> per layer: RMSNorm -> attention (grouped-query: n_kv_heads key/value heads shared
by n_heads / n_kv_heads query heads, RoPE on q and k) -> residual -> RMSNorm -> SwiGLU MLP (down(silu(gate(x)) * up(x)))
-> residual; final RMSNorm; output projection (tied to the embedding when the file has no output.weight).

RoPE and the GGUF row order: llama.cpp's converter permutes the rows of attn_q/attn_k so that RoPE rotates *adjacent*
pairs (x[2i], x[2i+1]) by theta_i = pos * base^(-2i/d) (the original Llama layout), where Hugging Face checkpoints
rotate the halves (x[i], x[i + d/2]). We keep the GGUF rows and rotate adjacent pairs, which gives the same attention
scores (q and k are permuted alike, and q.k is invariant to a common permutation) without un-permuting weights.

Decoding: the prompt is one prefill call at start_pos=0 (concrete shapes, causal mask); every later token is one call
at start_pos = Variable("start_pos", 1, max_context - 1) bound to the position (a one-token step at start_pos writes
cache row start_pos, so max_context - 1 is the last one that fits), with the token id in a (1, 1) buffer, so all
decode steps share one set of kernel ASTs (see layers.cached_attention). The KV cache is realized in place after every
layer's write, like tinygrad's llama example.
"""
from __future__ import annotations
import os
from dataclasses import dataclass
from typing import Sequence
import numpy as np
from tinysched import Tensor, UOp, Variable, nn
from tinysched.models.gguf import load_gguf
from tinysched.models.tokenizers import ByteBPETokenizer
from tinysched.models.layers import cached_attention, embedding, new_cache, param, realize, replace_weights, token_ids, write_cache

@dataclass(frozen=True)
class LlamaConfig:
  dim: int
  n_layers: int
  n_heads: int
  n_kv_heads: int
  hidden_dim: int
  vocab_size: int
  norm_eps: float
  rope_theta: float
  max_context: int = 128
  @property
  def head_dim(self) -> int: return self.dim // self.n_heads

def rope_tables(head_dim: int, max_context: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
  """cos/sin (max_context, head_dim/2) in float32, computed as Hugging Face does (float32 inv_freq, position * inv_freq)."""
  inv_freq = (1.0 / (np.float32(theta) ** (np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)))).astype(np.float32)
  freqs = np.arange(max_context, dtype=np.float32)[:, None] * inv_freq[None, :]
  return np.cos(freqs).astype(np.float32), np.sin(freqs).astype(np.float32)

def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
  """Rotate adjacent pairs of x (B, T, H, D) by the angles of cos/sin (T, D/2)."""
  b, t, h, d = x.shape
  xp = x.reshape(b, t, h, d // 2, 2)
  x0, x1 = xp[..., 0], xp[..., 1]
  c, s = cos.reshape(1, t, 1, d // 2), sin.reshape(1, t, 1, d // 2)
  return Tensor.stack(x0 * c - x1 * s, x0 * s + x1 * c, dim=-1).reshape(b, t, h, d)

class Attention:
  def __init__(self, c: LlamaConfig):
    self.c = c
    self.wq, self.wo = nn.Linear(c.dim, c.n_heads * c.head_dim, bias=False), nn.Linear(c.n_heads * c.head_dim, c.dim, bias=False)
    self.wk, self.wv = (nn.Linear(c.dim, c.n_kv_heads * c.head_dim, bias=False) for _ in range(2))
  def __call__(self, x: Tensor, cache_kv: Tensor, start_pos: int | UOp, cos: Tensor, sin: Tensor) -> Tensor:
    b, t, _ = x.shape
    c = self.c
    q = apply_rope(self.wq(x).reshape(b, t, c.n_heads, c.head_dim), cos, sin)
    k = apply_rope(self.wk(x).reshape(b, t, c.n_kv_heads, c.head_dim), cos, sin)
    v = self.wv(x).reshape(b, t, c.n_kv_heads, c.head_dim)
    write_cache(cache_kv, k, v, start_pos)
    return self.wo(cached_attention(q, cache_kv, start_pos))

class FeedForward:
  def __init__(self, dim: int, hidden: int):
    self.gate, self.up, self.down = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False), nn.Linear(hidden, dim, bias=False)
  def __call__(self, x: Tensor) -> Tensor: return self.down(self.gate(x).silu() * self.up(x))

class Block:
  def __init__(self, c: LlamaConfig):
    self.attention, self.feed_forward = Attention(c), FeedForward(c.dim, c.hidden_dim)
    self.attention_norm, self.ffn_norm = nn.RMSNorm(c.dim, c.norm_eps), nn.RMSNorm(c.dim, c.norm_eps)
  def __call__(self, x: Tensor, cache_kv: Tensor, start_pos: int | UOp, cos: Tensor, sin: Tensor) -> Tensor:
    h = x + self.attention(self.attention_norm(x), cache_kv, start_pos, cos, sin)
    return h + self.feed_forward(self.ffn_norm(h))

class Llama:
  def __init__(self, c: LlamaConfig):
    self.c = c
    self.tok_embeddings: nn.Embedding | None = None
    self.output: Tensor | None = None  # (vocab, dim)
    self.layers = [Block(c) for _ in range(c.n_layers)]
    self.norm = nn.RMSNorm(c.dim, c.norm_eps)
    cos, sin = rope_tables(c.head_dim, c.max_context, c.rope_theta)
    self.rope_cos, self.rope_sin = param(cos), param(sin)
    self.cache: list[Tensor] = []
    self.start_pos_var = Variable("start_pos", 1, c.max_context - 1)

  def reset(self) -> None:
    """Fresh (zero) KV caches, batch 1."""
    self.cache = new_cache(self.c.n_layers, 1, self.c.max_context, self.c.n_heads, self.c.head_dim)

  def forward(self, tokens: Sequence[int], start_pos: int | UOp) -> tuple[Tensor, Tensor]:
    """(logits (1, vocab) of the last position, greedy next token (1,)), both lazy; the KV caches are updated now."""
    if not self.cache: self.reset()
    if self.tok_embeddings is None or self.output is None: raise RuntimeError("Llama: load weights first")
    t = len(tokens)
    x = self.tok_embeddings(token_ids([list(tokens)], self.c.vocab_size))
    cos, sin = self.rope_cos[start_pos:start_pos + t], self.rope_sin[start_pos:start_pos + t]
    for layer, cache_kv in zip(self.layers, self.cache): x = layer(x, cache_kv, start_pos, cos, sin)
    # only the last position's logits are needed: project one row, not t (the output matrix is vocab x dim)
    h = self.norm(x[:, t - 1:t, :]).reshape(1, self.c.dim)
    logits = h.matmul(self.output.transpose())
    return logits, logits.argmax(-1)

  def prefill(self, tokens: Sequence[int]) -> tuple[np.ndarray, int]:
    """Run the prompt from position 0; (last logits, greedy next token)."""
    if len(tokens) >= self.c.max_context: raise ValueError(f"prompt of {len(tokens)} tokens does not fit max_context {self.c.max_context}")
    self.reset()
    logits, tok = self.forward(list(tokens), 0)
    realize(logits, tok, label="logits")
    return logits.numpy()[0], int(tok.numpy()[0])

  def decode(self, token: int, pos: int) -> tuple[np.ndarray, int]:
    """Feed one token at position pos (>= 1), with a symbolic start_pos; (logits, greedy next token)."""
    if not 1 <= pos < self.c.max_context: raise ValueError(f"position {pos} is outside [1, {self.c.max_context - 1}]")
    logits, tok = self.forward([int(token)], self.start_pos_var.bind(pos))
    realize(logits, tok, label="logits")
    return logits.numpy()[0], int(tok.numpy()[0])

  def generate(self, prompt: Sequence[int], n_new: int) -> tuple[list[int], list[np.ndarray]]:
    """Greedy decoding of n_new tokens (EOS is not special: exactly n_new tokens); (new ids, logits that chose each)."""
    logits, tok = self.prefill(prompt)
    ids, all_logits = [tok], [logits]
    for i in range(n_new - 1):
      logits, tok = self.decode(tok, len(prompt) + i)
      ids.append(tok); all_logits.append(logits)
    return ids, all_logits

def config_from_gguf(md: dict, max_context: int = 128, n_layers: int | None = None) -> LlamaConfig:
  arch = md.get("general.architecture")
  if arch != "llama": raise ValueError(f"GGUF architecture {arch!r} is not 'llama'")
  n = md["llama.block_count"] if n_layers is None else n_layers
  if not 0 < n <= md["llama.block_count"]: raise ValueError(f"n_layers must be in [1, {md['llama.block_count']}], got {n_layers}")
  return LlamaConfig(dim=md["llama.embedding_length"], n_layers=n, n_heads=md["llama.attention.head_count"],
                     n_kv_heads=md.get("llama.attention.head_count_kv", md["llama.attention.head_count"]),
                     hidden_dim=md["llama.feed_forward_length"], vocab_size=len(md["tokenizer.ggml.tokens"]),
                     norm_eps=md["llama.attention.layer_norm_rms_epsilon"], rope_theta=md.get("llama.rope.freq_base", 10000.0),
                     max_context=max_context)

def load_llama_gguf(path: str | os.PathLike, max_context: int = 128, n_layers: int | None = None):
  """(model, tokenizer, gguf file) from a llama GGUF; n_layers keeps the first layers only (the quick suite)."""
  g = load_gguf(path)
  c = config_from_gguf(g.metadata, max_context, n_layers)
  m = Llama(c)
  m.tok_embeddings = embedding(g.tensor("token_embd.weight"))
  m.output = param(g.tensor("output.weight")) if "output.weight" in g.tensors else m.tok_embeddings.weight  # tied embeddings
  replace_weights(m.norm, weight=g.tensor("output_norm.weight"))
  for i, layer in enumerate(m.layers):
    p = f"blk.{i}."
    replace_weights(layer.attention.wq, weight=g.tensor(p + "attn_q.weight"))
    replace_weights(layer.attention.wk, weight=g.tensor(p + "attn_k.weight"))
    replace_weights(layer.attention.wv, weight=g.tensor(p + "attn_v.weight"))
    replace_weights(layer.attention.wo, weight=g.tensor(p + "attn_output.weight"))
    replace_weights(layer.feed_forward.gate, weight=g.tensor(p + "ffn_gate.weight"))
    replace_weights(layer.feed_forward.up, weight=g.tensor(p + "ffn_up.weight"))
    replace_weights(layer.feed_forward.down, weight=g.tensor(p + "ffn_down.weight"))
    replace_weights(layer.attention_norm, weight=g.tensor(p + "attn_norm.weight"))
    replace_weights(layer.ffn_norm, weight=g.tensor(p + "ffn_norm.weight"))
  return m, ByteBPETokenizer.from_gguf_metadata(g.metadata), g

__all__ = ["LlamaConfig", "Llama", "load_llama_gguf", "config_from_gguf", "rope_tables", "apply_rope"]
