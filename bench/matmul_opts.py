"""Opt sets tried side by side on the matmul shapes real models have (GPT-2 small at 1 x 64: qkv, attention proj, MLP
up/down, the 50257-wide tied head), each checked against numpy and timed: what the GPU heuristic should choose.

  TINYSCHED_DEVICE=OPENCL python bench/matmul_opts.py [--shapes qkv,head] [--top 5] [--runs 5]

Per shape: the heuristic's own choice first, then the --top fastest candidates (kernel time, median of --runs, TFLOPS
as 2*M*N*K). A candidate that does not apply, compile or fit the device is skipped; a wrong result is reported.
"""
from __future__ import annotations
import argparse, itertools, os, statistics, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np

# name: (M, K, N, B transposed: the weight is stored (N, K) as a tied embedding is)
SHAPES = {"qkv": (64, 768, 2304, False), "proj": (64, 768, 768, False), "up": (64, 768, 3072, False),
          "down": (64, 3072, 768, False), "head": (64, 768, 50257, True), "sq1024": (1024, 1024, 1024, False)}

def candidates(m_ax: int, n_ax: int, stage: list) -> list[list]:
  from tinysched.codegen.kernel import Opt, OptOps as O
  out = []
  # register tiles staged through local memory (the square-matmul shape, smaller)
  for um, lm, un, ln, bk in itertools.product((1, 2, 4), (4, 8, 16), (1, 2, 4), (8, 16, 32), (4, 8, 16)):
    if not 32 <= lm * ln <= 256: continue
    out.append([Opt(O.UPCAST, m_ax, um), Opt(O.LOCAL, m_ax, lm), Opt(O.UPCAST, n_ax, un), Opt(O.LOCAL, n_ax, ln), Opt(O.UNROLL, 0, bk)] + stage)
  # the reduce split over a work-group (GROUP), small register tiles
  for um, un, ln, g, ur in itertools.product((1, 2, 4), (1, 2, 4), (1, 4, 16, 32), (4, 8, 16, 32), (1, 4)):
    if not 32 <= ln * g <= 256: continue
    out.append([Opt(O.UPCAST, m_ax, um), Opt(O.UPCAST, n_ax, un)] + ([Opt(O.LOCAL, n_ax, ln)] if ln > 1 else []) +
               [Opt(O.GROUP, 0, g)] + ([Opt(O.UNROLL, 0, ur)] if ur > 1 else []))
  # plain: register tiles, no local memory
  for um, un, lm, ln, ur in itertools.product((2, 4, 8, 16), (1, 2, 4), (1, 4), (16, 32, 64), (4, 8)):
    out.append([Opt(O.UPCAST, m_ax, um), Opt(O.UPCAST, n_ax, un)] + ([Opt(O.LOCAL, m_ax, lm)] if lm > 1 else []) +
               [Opt(O.LOCAL, n_ax, ln), Opt(O.UNROLL, 0, ur)])
  # an n axis nothing divides (the 50257-wide head): tiles along m only, the reduce split over the work-group
  for um, lm, g, ur in itertools.product((4, 8, 16), (1, 2, 4), (16, 32, 64), (1, 4)):
    out.append([Opt(O.UPCAST, m_ax, um)] + ([Opt(O.LOCAL, m_ax, lm)] if lm > 1 else []) + [Opt(O.GROUP, 0, g)] + ([Opt(O.UNROLL, 0, ur)] if ur > 1 else []))
  return [[o for o in c if o.amount != 1] for c in out]

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--shapes", default=",".join(SHAPES))
  ap.add_argument("--top", type=int, default=5)
  ap.add_argument("--runs", type=int, default=5)
  ap.add_argument("--limit", type=int, default=0, help="try at most this many candidates per shape (0: all)")
  a = ap.parse_args()
  from tinysched import Tensor, Device
  from tinysched.ops import Ops
  from tinysched.realize import run_schedule
  from tinysched.codegen.heuristic import _matmul_axes, default_opts
  from tinysched.codegen.kernel import Kernel
  dev = Device[Device.DEFAULT]
  rng = np.random.default_rng(0)
  print(f"# matmul opt candidates on {Device.DEFAULT} ({dev.target.name})")
  for name in a.shapes.split(","):
    M, K, N, bt = SHAPES[name]
    an = rng.standard_normal((M, K), dtype=np.float32)
    bn = rng.standard_normal((N, K) if bt else (K, N), dtype=np.float32)
    A, B = Tensor(an).realize(), Tensor(bn).realize()
    out = A @ (B.T if bt else B)
    sched = out.schedule()
    run_schedule(sched, plan_memory=False)
    (si,) = [s for s in sched if s.ast.op is Ops.SINK]
    ref = an @ (bn.T if bt else bn)
    k = Kernel(si.ast)
    mm = _matmul_axes(k)
    if mm is None:
      print(f"{name}: not matmul-shaped to the heuristic")
      continue
    m_ax, n_ax, la, lb = mm
    stage = [Opt_ for Opt_ in _stage(la, lb)]
    cands = [list(default_opts(si.ast, dev.target))] + candidates(m_ax, n_ax, stage)
    if a.limit: cands = cands[:a.limit]
    flops = 2 * M * N * K
    res = []
    for i, opts in enumerate(cands):
      try:
        dev.run(si.ast, list(si.bufs), {}, opts)
        got = si.bufs[0].numpy().reshape(M, N)
        if not np.allclose(got, ref, rtol=1e-3, atol=1e-3 * np.sqrt(K)):
          print(f"{name}: WRONG result with {opts}")
          continue
        t = statistics.median(dev.run(si.ast, list(si.bufs), {}, opts) for _ in range(a.runs))
      except Exception as e:  # an opt set that does not apply or does not fit: not a result
        if i == 0: print(f"{name}: heuristic's opts failed: {type(e).__name__}: {str(e)[:100]}")
        continue
      res.append((t, i, opts))
    base = next((r for r in res if r[1] == 0), None)
    print(f"## {name}: M={M} K={K} N={N}{' (B stored N x K)' if bt else ''}; {len(res)} of {len(cands)} candidates ran")
    if base: print(f"heuristic: {base[0] * 1e6:8.1f} us {flops / base[0] / 1e12:6.2f} TFLOPS  {' '.join(map(str, base[2]))}")
    for t, i, opts in sorted(res)[:a.top]:
      print(f"cand {i:4d}: {t * 1e6:8.1f} us {flops / t / 1e12:6.2f} TFLOPS  {' '.join(map(str, opts))}")

def _stage(la, lb) -> list:
  from tinysched.codegen.kernel import Opt, OptOps as O
  return [Opt(O.STAGE, la.src[0].arg, 0)] + ([Opt(O.STAGE, lb.src[0].arg, 0)] if lb.src[0].arg != la.src[0].arg else [])

if __name__ == "__main__":
  main()
