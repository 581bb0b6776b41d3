"""GPT-2 small (12 x 768, vocab 50257, random weights), one 1 x 64 forward with full logits: unjitted vs TinyJit on the
current device, and torch eager on CUDA when torch with CUDA is installed (the same architecture, its own random
weights: a timing reference, not a numerical one; tests/tinysched/test_models.py holds the parity test).

  TINYSCHED_DEVICE=OPENCL python bench/gpt2_jit.py [--runs 10]

Per call: median of --runs after warm-up, each call synchronized. The jitted output is checked against the unjitted
one (max abs difference) every call.
"""
from __future__ import annotations
import argparse, os, statistics, sys, time
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np
from bench.jit_timing import unjitted_vs_jit  # noqa: E402

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--runs", type=int, default=10)
  a = ap.parse_args()
  from tinysched import Tensor, TinyJit, Device, dtypes
  from tinysched.models.gpt2 import GPT2, GPT2Config, random_gpt2_weights
  c = GPT2Config()
  model = GPT2(c, random_gpt2_weights(c, seed=0))
  dev = Device[Device.DEFAULT]
  def fwd(tok: Tensor) -> Tensor:
    model.cache = []  # fresh KV caches: every call is the same full forward from position 0
    return model._head(model._hidden(tok, 0)).realize()
  jit = TinyJit(fwd)
  rng = np.random.default_rng(7)
  def tokens() -> Tensor: return Tensor(rng.integers(0, c.vocab_size, (1, 64)).astype(np.int32), dtype=dtypes.int32).realize()
  unjitted_vs_jit(dev, fwd, jit, tokens, a.runs, f"GPT-2 small 1 x 64 forward, full logits, device {Device.DEFAULT}")
  try:
    import torch
    if not torch.cuda.is_available(): raise ImportError("no CUDA")
    from transformers import GPT2Config as HFConfig, GPT2LMHeadModel
    m = GPT2LMHeadModel(HFConfig()).cuda().eval()
    ids = torch.randint(0, c.vocab_size, (1, 64), device="cuda")
    with torch.no_grad():
      for _ in range(3): m(ids).logits
      ts = []
      for _ in range(a.runs):
        torch.cuda.synchronize(); t0 = time.perf_counter(); m(ids).logits; torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
    print(f"torch {torch.__version__} CUDA eager: median {statistics.median(ts) * 1e3:.2f} ms")
  except Exception as e: print(f"torch CUDA: not measured ({type(e).__name__}: {str(e)[:80]})")

if __name__ == "__main__": main()
