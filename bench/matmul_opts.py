"""Opt sets tried side by side on the matmul shapes real models have (GPT-2 small at 1 x 64: qkv, attention proj, MLP
up/down, the 50257-wide tied head) and on ResNet-18's 3x3 convolutions (conv64 .. conv512: one image, padding 1),
each checked against numpy and timed: what the GPU heuristic should choose.

  TINYSCHED_DEVICE=OPENCL python bench/matmul_opts.py [--shapes qkv,head,conv256] [--top 5] [--runs 5]

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
# name: (channels in = out, image side) of a 3x3 convolution, stride 1, padding 1
CONVS = {"conv64": (64, 56), "conv128": (128, 28), "conv256": (256, 14), "conv512": (512, 7)}

def conv_candidates(k) -> list[list]:
  """Register tiles over output channels (co) and image columns (ow), threads over co / oh / ow, the channel reduce
  split over the work-group (GROUP), the 3x3 window unrolled."""
  from tinysched.codegen.kernel import Opt, OptOps as O
  from tinysched.codegen.heuristic import _inner_loads, _strides
  loads = _inner_loads(k)
  w = next(ld for ld in loads if all(_strides(k, ld.src[1])[a] == 0 for a in range(1, k.n_out)))
  co = next(a for a in range(k.n_out) if _strides(k, w.src[1])[a] != 0)
  sp = [a for a in range(k.n_out) if a != co]
  ci = max(range(k.n_red), key=lambda i: k.full_shape[k.n_out + i])
  win = [i for i in range(k.n_red) if i != ci and k.full_shape[k.n_out + i] <= 7]
  out = []
  for uc, lc, lw, lh, g, unw in itertools.product((1, 2, 4, 8), (1, 4, 16, 64), (1, 2, 7, 14), (1, 2, 7), (1, 4, 16, 32), (0, 1)):
    if not 32 <= lc * lw * lh * g <= 256: continue
    c = [Opt(O.UPCAST, co, uc), Opt(O.LOCAL, co, lc), Opt(O.LOCAL, sp[-1], lw)] + ([Opt(O.LOCAL, sp[0], lh)] if len(sp) > 1 else []) + \
        [Opt(O.GROUP, ci, g)] + ([Opt(O.UNROLL, i, 0) for i in sorted(win, reverse=True)] if unw else [])
    out.append([o for o in c if o.amount != 1 or o.op is O.UNROLL])
  return out

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
    out.append([Opt(O.UPCAST, m_ax, um)] + ([Opt(O.LOCAL, m_ax, lm)] if lm > 1 else []) + [Opt(O.GROUP, 0, g)]
               + ([Opt(O.UNROLL, 0, ur)] if ur > 1 else []))
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
    if name in CONVS:
      _conv(name, dev, rng, a)
      continue
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
    stage = _stage(la, lb)
    cands = [list(default_opts(si.ast, dev.target))] + candidates(m_ax, n_ax, stage)
    _search(f"{name}: M={M} K={K} N={N}{' (B stored N x K)' if bt else ''}", dev, si, cands, ref.reshape(-1), 2 * M * N * K, 1e-3 * np.sqrt(K), a)

def _conv(name: str, dev, rng, a) -> None:
  from tinysched import Tensor
  from tinysched.ops import Ops
  from tinysched.realize import run_schedule
  from tinysched.codegen.heuristic import default_opts
  from tinysched.codegen.kernel import Kernel
  C, S = CONVS[name]
  xn, wn = rng.standard_normal((1, C, S, S), dtype=np.float32), rng.standard_normal((C, C, 3, 3), dtype=np.float32)
  sched = Tensor(xn).realize().conv2d(Tensor(wn).realize(), padding=1).schedule()
  run_schedule(sched, plan_memory=False)
  (si,) = [s for s in sched if s.ast.op is Ops.SINK]
  dev.run(si.ast, list(si.bufs), {}, [])
  ref = si.bufs[0].numpy().copy()  # the unoptimized kernel's result (the convolution's numbers are the tests' business)
  cands = [list(default_opts(si.ast, dev.target))] + conv_candidates(Kernel(si.ast))
  _search(f"{name}: {C} -> {C} channels at {S}x{S}, 3x3", dev, si, cands, ref, 2 * C * C * 9 * S * S, 1e-3 * np.sqrt(C * 9), a)

def _search(title: str, dev, si, cands: list, ref: np.ndarray, flops: int, atol: float, a) -> None:
  """Run every candidate (the first is the heuristic's choice) on the kernel's buffers, check the result against `ref`,
  time the ones that are right and print the heuristic's line and the --top fastest."""
  if a.limit: cands = cands[:a.limit]
  res = []
  for i, opts in enumerate(cands):
    try:
      dev.run(si.ast, list(si.bufs), {}, opts)
      if not np.allclose(si.bufs[0].numpy(), ref, rtol=1e-3, atol=atol):
        print(f"{title}: WRONG result with {opts}")
        continue
      t = statistics.median(dev.run(si.ast, list(si.bufs), {}, opts) for _ in range(a.runs))
    except Exception as e:  # an opt set that does not apply, compile or fit the device: not a result
      if i == 0: print(f"{title}: heuristic's opts failed: {type(e).__name__}: {str(e)[:100]}")
      continue
    res.append((t, i, opts))
  print(f"## {title}; {len(res)} of {len(cands)} candidates ran")
  if (base := next((r for r in res if r[1] == 0), None)):
    print(f"heuristic: {base[0] * 1e6:8.1f} us {flops / base[0] / 1e12:6.2f} TFLOPS  {' '.join(map(str, base[2]))}")
  for t, i, opts in sorted(res)[:a.top]:
    print(f"cand {i:4d}: {t * 1e6:8.1f} us {flops / t / 1e12:6.2f} TFLOPS  {' '.join(map(str, opts))}")

def _stage(la, lb) -> list:
  from tinysched.codegen.kernel import Opt, OptOps as O
  return [Opt(O.STAGE, la.src[0].arg, 0)] + ([Opt(O.STAGE, lb.src[0].arg, 0)] if lb.src[0].arg != la.src[0].arg else [])

if __name__ == "__main__":
  main()
