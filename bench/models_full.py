"""Wall-clock time of the full-size decoders on the current device (TINYSCHED_DEVICE=OPENCL or NUMPY).

  python bench/models_full.py smollm2 [--tokens 20]   SmolLM2-135M, 30 layers, vocab 49152: prefill, then per decode token
  python bench/models_full.py gpt2                    GPT-2 small (random weights), one 1 x 64 forward, twice

Decode times are reported for the first step (it schedules and compiles the decode kernels) and for the later steps
(the same kernel ASTs again: median and min), so compile and run cost can be told apart.
"""
from __future__ import annotations
import argparse, os, statistics, sys, time
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np
from tinysched import Device

def smollm2(n_tokens: int) -> None:
  from tinysched.models import assets
  from tinysched.models.llama import load_llama_gguf
  from tinysched.models.suite import SMOLLM2_PROMPT
  t = time.perf_counter()
  model, tok, _ = load_llama_gguf(assets.smollm2_gguf(), max_context=64)
  print(f"load: {time.perf_counter() - t:.2f} s ({model.c.n_layers} layers, vocab {model.c.vocab_size})")
  ids = tok.encode(SMOLLM2_PROMPT)
  t = time.perf_counter()
  _, nxt = model.prefill(ids)
  print(f"prefill ({len(ids)} tokens): {time.perf_counter() - t:.2f} s")
  out, steps = [nxt], []
  for i in range(n_tokens - 1):
    t = time.perf_counter()
    _, nxt = model.decode(nxt, len(ids) + i)
    steps.append(time.perf_counter() - t)
    out.append(nxt)
  if steps: print(f"decode first step: {steps[0]:.3f} s")
  if len(steps) > 1: print(f"decode later steps ({len(steps) - 1}): median {statistics.median(steps[1:]):.3f} s/token, min {min(steps[1:]):.3f} s")
  print(f"{n_tokens} tokens: {out}\ntext: {tok.decode(out)!r}")

def gpt2() -> None:
  from tinysched.models.gpt2 import GPT2, GPT2Config, random_gpt2_weights
  c = GPT2Config()
  model = GPT2(c, random_gpt2_weights(c, seed=0))
  tokens = [int(i) for i in np.random.default_rng(7).integers(0, c.vocab_size, 64)]
  for run in ("first (schedules, compiles)", "second"):
    t = time.perf_counter()
    model.logits(tokens)
    print(f"GPT-2 small 1 x 64 forward, {run}: {time.perf_counter() - t:.2f} s")

if __name__ == "__main__":
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("model", choices=["smollm2", "gpt2"])
  ap.add_argument("--tokens", type=int, default=20)
  args = ap.parse_args()
  print(f"device {Device.DEFAULT}")
  smollm2(args.tokens) if args.model == "smollm2" else gpt2()
