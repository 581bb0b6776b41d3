"""GPT-2 (pre-LayerNorm decoder, learned positions, tanh GELU, tied output) with a KV cache; seeded random weights.

GPT2Config() is GPT-2 small (124M: 12 layers, 768 wide, 12 heads, vocab 50257, context 1024); GPT2_TINY keeps that
vocabulary and context at 2 layers, 64 wide, 4 heads, for the suite. Decoding: prefill at start_pos 0, then one-token
decode steps at start_pos = Variable("start_pos", 1, n_positions - 1) (the token id in a (1, 1) buffer), so every decode
step has the same kernel ASTs. `logits(tokens)` is the full forward of a prompt (every position's logits, the parity check).
Weight names and layouts follow Hugging Face's GPT2LMHeadModel (Conv1D weights are (in, out)), so the state dict loads
into transformers for the parity reference.
"""
from __future__ import annotations
from dataclasses import dataclass
from typing import Sequence
import numpy as np
from tinysched import Tensor, UOp, Variable
from tinysched.dtype import DType, dtypes
from tinysched.models.layers import cached_attention, embedding, new_cache, param, realize, token_ids, write_cache

@dataclass(frozen=True)
class GPT2Config:
  vocab_size: int = 50257
  n_positions: int = 1024
  n_embd: int = 768
  n_layer: int = 12
  n_head: int = 12
  layer_norm_epsilon: float = 1e-5

GPT2_TINY = GPT2Config(n_embd=64, n_layer=2, n_head=4)

def random_gpt2_weights(c: GPT2Config, seed: int = 0) -> dict[str, np.ndarray]:
  """Seeded normal weights: embeddings at GPT-2's std 0.02; projections at std gain/sqrt(n_embd) (at d=64: 0.2 for
  c_attn, 0.1 for the others), so attention is peaked rather than uniform at any width; random biases and LayerNorms
  so they matter too."""
  rng = np.random.default_rng(seed)
  def n(*shape: int, std: float = 0.02) -> np.ndarray: return rng.normal(0.0, std, shape).astype(np.float32)
  d = c.n_embd
  s = d ** -0.5
  sd = {"transformer.wte.weight": n(c.vocab_size, d), "transformer.wpe.weight": n(c.n_positions, d, std=0.01),
        "transformer.ln_f.weight": 1 + n(d, std=0.1), "transformer.ln_f.bias": n(d, std=0.1)}
  for i in range(c.n_layer):
    p = f"transformer.h.{i}."
    sd.update({p + "ln_1.weight": 1 + n(d, std=0.1), p + "ln_1.bias": n(d, std=0.1),
               p + "ln_2.weight": 1 + n(d, std=0.1), p + "ln_2.bias": n(d, std=0.1),
               p + "attn.c_attn.weight": n(d, 3 * d, std=1.6 * s), p + "attn.c_attn.bias": n(3 * d), p + "attn.c_proj.weight": n(d, d, std=0.8 * s),
               p + "attn.c_proj.bias": n(d), p + "mlp.c_fc.weight": n(d, 4 * d, std=0.8 * s), p + "mlp.c_fc.bias": n(4 * d),
               p + "mlp.c_proj.weight": n(4 * d, d, std=0.8 * s), p + "mlp.c_proj.bias": n(d)})
  return sd

class GPT2:
  def __init__(self, c: GPT2Config, sd: dict[str, np.ndarray], dtype: DType = dtypes.float32):
    self.c, self.sd, self.dtype = c, sd, dtype
    self.wte = embedding(sd["transformer.wte.weight"], dtype)
    self.wpe = param(sd["transformer.wpe.weight"], dtype)
    w = lambda k: param(sd[k], dtype)
    self.blocks = [{k: w(f"transformer.h.{i}.{k}") for k in ("ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias", "attn.c_attn.weight",
                   "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias", "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight",
                   "mlp.c_proj.bias")}
                   for i in range(c.n_layer)]
    self.ln_f_w, self.ln_f_b = w("transformer.ln_f.weight"), w("transformer.ln_f.bias")
    self.cache: list[Tensor] = []
    self.start_pos_var = Variable("start_pos", 1, c.n_positions - 1)

  def _ln(self, x: Tensor, w: Tensor, b: Tensor) -> Tensor: return x.layernorm(eps=self.c.layer_norm_epsilon) * w + b

  def _hidden(self, tokens: Sequence[int] | Tensor, start_pos: int | UOp) -> Tensor:
    """Residual stream (1, T, n_embd) after the last block, lazy; the KV caches are written now. `tokens`: ids, or a
    (1, T) int32 Tensor of them (what a jitted decode step takes: its input is then a buffer, not baked-in data)."""
    c = self.c
    if not self.cache: self.cache = new_cache(c.n_layer, 1, c.n_positions, c.n_head, c.n_embd // c.n_head, self.dtype)
    t = tokens.shape[1] if isinstance(tokens, Tensor) else len(tokens)
    x = self.wte(tokens if isinstance(tokens, Tensor) else token_ids([list(tokens)], c.vocab_size))
    x = x + self.wpe[start_pos:start_pos + t].reshape(1, t, c.n_embd)
    hd = c.n_embd // c.n_head
    for blk, cache_kv in zip(self.blocks, self.cache):
      qkv = self._ln(x, blk["ln_1.weight"], blk["ln_1.bias"]).linear(blk["attn.c_attn.weight"], blk["attn.c_attn.bias"])
      q, k, v = (qkv[:, :, i * c.n_embd:(i + 1) * c.n_embd].reshape(1, t, c.n_head, hd) for i in range(3))
      write_cache(cache_kv, k, v, start_pos)
      x = x + cached_attention(q, cache_kv, start_pos).linear(blk["attn.c_proj.weight"], blk["attn.c_proj.bias"])
      h = self._ln(x, blk["ln_2.weight"], blk["ln_2.bias"]).linear(blk["mlp.c_fc.weight"], blk["mlp.c_fc.bias"]).gelu()
      x = x + h.linear(blk["mlp.c_proj.weight"], blk["mlp.c_proj.bias"])
    return x

  def _head(self, x: Tensor) -> Tensor: return self._ln(x, self.ln_f_w, self.ln_f_b).matmul(self.wte.weight.transpose())

  def forward(self, tokens: Sequence[int] | Tensor, start_pos: int | UOp) -> tuple[Tensor, Tensor]:
    """(logits (1, vocab) of the last position, greedy next token (1,)), lazy; the KV caches are written now.
    `tokens` may be a (1, T) int32 Tensor (a TinyJit decode step: tests/tinysched/test_jit.py)."""
    x = self._hidden(tokens, start_pos)
    logits = self._head(x[:, x.shape[1] - 1:, :]).reshape(1, self.c.vocab_size)  # one row through the vocab x dim head, not T
    return logits, logits.argmax(-1)

  def logits(self, tokens: Sequence[int]) -> np.ndarray:
    """(T, vocab) logits of every position of `tokens` from position 0 (fresh caches)."""
    if not 0 < len(tokens) <= self.c.n_positions: raise ValueError(f"{len(tokens)} tokens do not fit {self.c.n_positions} positions")
    self.cache = []
    out = self._head(self._hidden(list(tokens), 0))
    realize(out, label="logits")
    return out.numpy()[0]

  def generate(self, prompt: Sequence[int], n_new: int) -> tuple[list[int], list[np.ndarray]]:
    """Greedy: prefill at 0, then n_new - 1 symbolic decode steps; (new ids, the logits that chose each)."""
    if len(prompt) + n_new > self.c.n_positions: raise ValueError(f"{len(prompt)} + {n_new} tokens exceed {self.c.n_positions} positions")
    self.cache = []
    logits, tok = self.forward(list(prompt), 0)
    realize(logits, tok, label="logits")
    ids, all_logits = [int(tok.numpy()[0])], [logits.numpy()[0]]
    for i in range(n_new - 1):
      logits, tok = self.forward([ids[-1]], self.start_pos_var.bind(len(prompt) + i))
      realize(logits, tok, label="logits")
      ids.append(int(tok.numpy()[0])); all_logits.append(logits.numpy()[0])
    return ids, all_logits

__all__ = ["GPT2Config", "GPT2_TINY", "GPT2", "random_gpt2_weights"]
