"""Pieces the suite's models share: realization with a kernel log, embeddings, erf GELU, KV-cache attention.

Token embeddings are nn.Embedding over the whole vocabulary and greedy decoding uses Tensor.argmax, so the models' kernels
include a vocabulary-size Tensor.arange (both). cached_attention works around a current Tensor limitation and says which.
"""
from __future__ import annotations
import contextlib, math
from typing import Iterator, Sequence
import numpy as np
from tinysched import Tensor, UOp, nn
from tinysched.dtype import dtypes
from tinysched.realize import run_schedule

# *** realization with a kernel log ***

_LOGS: list[list[tuple[str, list[UOp]]]] = []

@contextlib.contextmanager
def kernel_log() -> Iterator[list[tuple[str, list[UOp]]]]:
  """Collect (label, [kernel AST, ...]) for every `realize(...)` below, e.g. to check that decode steps reuse kernels."""
  log: list[tuple[str, list[UOp]]] = []
  _LOGS.append(log)
  try: yield log
  finally: _LOGS.remove(log)

def realize(*ts: Tensor, label: str = "") -> None:
  """Tensor.realize(*ts), recording the schedule's ASTs in any open kernel_log (scheduling is what realize does too)."""
  sched, var_vals = ts[0].schedule_with_vars(*ts[1:])
  for log in _LOGS: log.append((label, [si.ast for si in sched]))
  run_schedule(sched, var_vals)

# *** weights ***

def param(arr: np.ndarray, dtype=dtypes.float32) -> Tensor:
  """A realized, non-trainable weight from a host array (its own buffer), in `dtype`."""
  return Tensor(np.ascontiguousarray(arr), dtype=dtype, requires_grad=False).realize()

def replace_weights(obj, dtype=dtypes.float32, **tensors: np.ndarray | None) -> None:
  """Set obj.<name> to realized weights in `dtype` from arrays (shapes checked against what the layer made), None clears it."""
  for name, arr in tensors.items():
    old = getattr(obj, name, None)
    if arr is None:
      setattr(obj, name, None); continue
    if old is not None and tuple(old.shape) != tuple(arr.shape):
      raise ValueError(f"{type(obj).__name__}.{name}: weight of shape {arr.shape} does not fit the layer's {tuple(old.shape)}")
    setattr(obj, name, param(arr, dtype))

# *** embeddings ***

def embedding(weight: np.ndarray, dtype=dtypes.float32) -> nn.Embedding:
  """nn.Embedding holding `weight` (vocab, dim), all rows, in `dtype`."""
  emb = nn.Embedding(*weight.shape)
  replace_weights(emb, dtype, weight=weight)
  return emb

def token_ids(ids: Sequence[Sequence[int]], vocab: int) -> Tensor:
  """(B, T) int32 index buffer for nn.Embedding. A decode step's one token is a (1, 1) buffer too, so every decode step
  has the same kernel ASTs. Checked here: nn.Embedding gives a zero row, not an error, for an id outside the vocabulary."""
  if len({len(seq) for seq in ids}) != 1: raise ValueError(f"token id rows must have one length, got {[len(seq) for seq in ids]}")
  for seq in ids:
    for i in seq:
      if not 0 <= i < vocab: raise IndexError(f"token id {i} is outside the vocabulary of {vocab}")
  return Tensor(np.asarray(ids, dtype=np.int32), requires_grad=False)

# *** activations ***

def erf(x: Tensor) -> Tensor:
  """erf by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): Tensor has no erf, and BERT's GELU is the exact erf form."""
  a1, a2, a3, a4, a5, p = 0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429, 0.3275911
  ax = x.abs()
  t = (1.0 + p * ax).reciprocal()
  y = 1.0 - ((((a5 * t + a4) * t + a3) * t + a2) * t + a1) * t * (-(ax * ax)).exp()
  return (x < 0).where(-y, y)

def gelu_erf(x: Tensor) -> Tensor: return 0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))

# *** attention with a KV cache ***

def causal_mask(t: int, start_pos: int, dtype=dtypes.float32) -> Tensor | None:
  """(1, 1, t, start_pos + t) additive mask in `dtype` for a prefill of t tokens after start_pos cached ones (None for t == 1)."""
  if t == 1: return None
  return Tensor.full((1, 1, t, start_pos + t), float("-inf"), dtype=dtype).triu(start_pos + 1)

def cached_attention(q: Tensor, cache_kv: Tensor, start_pos: int | UOp) -> Tensor:
  """softmax(q k^T / sqrt(d) + causal) v over the cache positions [0, start_pos + T).

  q: (B, T, H, D); cache_kv: (2, B, max_context, H, D), already holding this step's keys/values.
  Keys are read at the symbolic length start_pos + T, so every decode step has the same kernels. Three detours around
  a current Tensor limitation (a binary op between two tensors that share a symbolic dim, or an expand of a tensor
  with a symbolic dim, raises: the broadcast check cannot prove s == s):
  - the product with the values runs over the whole max_context with the probabilities zero-padded (attn @ v would
    multiply two tensors of symbolic length);
  - softmax is written as `+ (-max)` and `* reciprocal(sum)` (Tensor's sub/div broadcast twice);
  - write_cache stores grouped-query keys/values already repeated per query head (repeating after the symbolic read
    would be an expand; a matmul whose left side has more than one row expands the right side too).
  Once that check resolves s == s, values can be read at the symbolic length and the cache can hold the KV heads only.
  """
  bsz, seqlen, n_heads, head_dim = q.shape
  max_context = cache_kv.shape[2]
  if seqlen > 1 and not isinstance(start_pos, int): raise ValueError("a symbolic start_pos is for one-token decode steps (no causal mask)")
  end = start_pos + seqlen
  keys = cache_kv[0].shrink((None, (0, end), None, None)).transpose(1, 2)  # (B, H, S, D)
  values = cache_kv[1].transpose(1, 2)                                     # (B, H, max_context, D)
  scores = q.transpose(1, 2).matmul(keys.transpose(2, 3)) * (1.0 / math.sqrt(head_dim))  # type: ignore[arg-type]  # a concrete head dim
  # (an int start_pos comes with a concrete seqlen)
  if isinstance(start_pos, int) and (mask := causal_mask(seqlen, start_pos, scores.dtype)) is not None: scores = scores + mask  # type: ignore[arg-type]
  e = (scores + scores.max(-1, keepdim=True).neg()).exp()
  probs = e * e.sum(-1, keepdim=True).reciprocal()
  probs = probs.pad((None, None, None, (0, max_context - end)))
  return probs.matmul(values).transpose(1, 2).reshape(bsz, seqlen, n_heads * head_dim)

def write_cache(cache_kv: Tensor, k: Tensor, v: Tensor, start_pos: int | UOp) -> None:
  """Store this step's keys/values (B, T, KV, D) at [start_pos, start_pos + T) in place, now (later reads must see them).

  With fewer KV heads than the cache's H query heads, each KV head is stored repeated for its H/KV query heads."""
  bsz, seqlen, n_kv, head_dim = k.shape
  n_heads = cache_kv.shape[3]
  if n_heads % n_kv: raise ValueError(f"{n_heads} query heads do not divide into {n_kv} key/value heads")
  if n_heads != n_kv:
    rep = n_heads // n_kv
    k, v = (x.reshape(bsz, seqlen, n_kv, 1, head_dim).expand(bsz, seqlen, n_kv, rep, head_dim).reshape(bsz, seqlen, n_heads, head_dim)
            for x in (k, v))
  realize(cache_kv.shrink((None, None, (start_pos, start_pos + seqlen), None, None)).assign(Tensor.stack(k, v)), label="kv_cache")

def new_cache(n_layers: int, bsz: int, max_context: int, n_heads: int, head_dim: int, dtype=dtypes.float32) -> list[Tensor]:
  """One realized (2, B, max_context, H, D) zero buffer per layer, each its own allocation (host zeros, so no aliasing)."""
  return [param(np.zeros((2, bsz, max_context, n_heads, head_dim), np.float32), dtype) for _ in range(n_layers)]

__all__ = ["kernel_log", "realize", "param", "replace_weights", "embedding", "token_ids", "erf", "gelu_erf", "causal_mask",
           "cached_attention", "write_cache", "new_cache"]
