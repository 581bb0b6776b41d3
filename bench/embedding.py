"""Kernel time of a vocabulary-size embedding lookup and argmax, FUSE_ARANGE off vs on, side by side in one run.

  python bench/embedding.py            # on the default device (TINYSCHED_DEVICE); OpenCL times come from profiling events

GPT-2's token embedding (50257 x 768) over 64 token ids, and argmax over 50257 logits. Each schedule is run once (to
compile and check the numbers against numpy), then its kernels are timed: median of the later runs.
"""
from __future__ import annotations
import os, statistics, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np
from tinysched import Tensor, nn, Device
from tinysched.helpers import Context
from tinysched.ops import Ops
from tinysched.realize import run_schedule

def kernel_ms(out: Tensor, runs: int) -> tuple[int, float, np.ndarray]:
  sched = out.schedule()
  run_schedule(list(sched), plan_memory=False)
  ks = [si for si in sched if si.ast.op is Ops.SINK]
  be = Device[Device.DEFAULT]
  ts = [sum(be.run(si.ast, list(si.bufs), {}) for si in ks) for _ in range(runs + 1)]
  return len(ks), statistics.median(ts[1:]) * 1e3, out.numpy()

def main() -> None:
  rng = np.random.default_rng(0)
  emb = nn.Embedding(50257, 768)
  emb.weight.realize()
  ids = rng.integers(0, 50257, size=(1, 64)).astype(np.int32)
  ids[0, :3] = [0, 50256, 12345]
  idx, w = Tensor(ids).realize(), emb.weight.numpy()
  logits = Tensor(rng.standard_normal((1, 50257)).astype(np.float32)).realize()
  print(f"device {Device.DEFAULT}")
  for flag in (0, 1):
    with Context(FUSE_ARANGE=flag):
      n, ms, got = kernel_ms(emb(idx), 3 if flag == 0 else 20)
      print(f"embedding 50257x768, 64 ids, FUSE_ARANGE={flag}: {n} kernels, {ms:.3f} ms, exact {np.array_equal(got, w[ids])}")
      n, ms, got = kernel_ms(logits.argmax(-1), 5)
      print(f"argmax over 50257,        FUSE_ARANGE={flag}: {n} kernels, {ms:.3f} ms, exact {int(got[0]) == int(np.argmax(logits.numpy()))}")

if __name__ == "__main__": main()
