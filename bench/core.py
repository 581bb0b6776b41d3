"""Micro-benchmarks of the compiler core: the symbolic simplifier and ShapeTracker movement/composition.

Run `python bench/core.py`. Every workload is generated from a fixed seed, timed several times and
reported as the median (and min) in milliseconds, so later changes can see if they slowed the core.
"cold" rows clear the shape memo caches before each run (the first time a graph is scheduled);
"warm" rows repeat the same calls on full caches (what re-scheduling the same graph costs).
"""
from __future__ import annotations
import math, os, platform, random, statistics, sys, time
from typing import Callable
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np
from tinysched.dtype import dtypes
from tinysched.ops import Ops
from tinysched.uop import UOp, Variable
from tinysched.rewrite import graph_rewrite
from tinysched.symbolic import symbolic
from tinysched.shape import ShapeTracker, clear_caches

RUNS = 5

def bench(name: str, fn: Callable[[], object], setup: Callable[[], object] | None = None, runs: int = RUNS) -> tuple[str, float, float]:
  times = []
  for _ in range(runs):
    if setup is not None: setup()
    t = time.perf_counter()
    fn()
    times.append((time.perf_counter() - t) * 1e3)
  return name, statistics.median(times), min(times)

# *** workloads ***

def c(x: int) -> UOp: return UOp.const(dtypes.int32, x)

def random_index_exprs(n: int, seed: int = 0) -> list[UOp]:
  """Index-like expressions: sums of scaled loop indices and Variables, with // and % by constants."""
  rnd = random.Random(seed)
  leaves = [UOp(Ops.RANGE, dtypes.int32, (c(0), c(s)), i) for i, s in enumerate((4, 16, 3, 32, 7))] + \
           [Variable("n", 1, 64), Variable("m", 1, 8)]
  def gen(depth: int) -> UOp:
    if depth == 0 or rnd.random() < 0.2: return rnd.choice(leaves) if rnd.random() < 0.85 else c(rnd.randint(0, 9))
    op = rnd.choice(["add", "add", "mul", "div", "mod", "max", "lt"])
    a = gen(depth - 1)
    if op == "add": return a + gen(depth - 1)
    if op == "mul": return a * rnd.randint(1, 8)
    if op == "div": return a // rnd.randint(1, 12)
    if op == "mod": return a % rnd.randint(1, 12)
    if op == "max": return a.maximum(gen(depth - 1))
    return (a < rnd.randint(0, 40)).where(a, gen(depth - 1))
  return [gen(rnd.randint(2, 6)) for _ in range(n)]

def random_chains(n: int, seed: int = 1) -> list[tuple[tuple[int, ...], list[tuple[str, tuple]]]]:
  """Movement-op chains like the scheduler sees: permutes, reshapes (some need a second view), pads, shrinks, expands, flips."""
  rnd = random.Random(seed)
  out = []
  for _ in range(n):
    shape = tuple(rnd.choice([1, 2, 3, 4, 8, 16]) for _ in range(rnd.randint(2, 4)))
    ops, cur = [], shape
    for _ in range(rnd.randint(3, 8)):
      kind = rnd.choice(["permute", "reshape", "pad", "shrink", "expand", "flip"])
      if kind == "permute":
        order = list(range(len(cur))); rnd.shuffle(order)  # noqa: E702
        ops.append(("permute", tuple(order))); cur = tuple(cur[i] for i in order)  # noqa: E702
      elif kind == "reshape":
        sz = math.prod(cur)
        if sz == 0: continue
        new, rem = [], sz
        for _ in range(rnd.randint(0, 3)):
          d = rnd.choice([x for x in range(1, rem + 1) if rem % x == 0])
          new.append(d); rem //= d  # noqa: E702
        new.append(rem); rnd.shuffle(new)  # noqa: E702
        ops.append(("reshape", tuple(new))); cur = tuple(new)  # noqa: E702
      elif kind == "pad":
        arg = tuple((rnd.randint(0, 2), rnd.randint(0, 2)) for _ in cur)
        ops.append(("pad", arg)); cur = tuple(s + b + e for s, (b, e) in zip(cur, arg))  # noqa: E702
      elif kind == "shrink":
        arg = []
        for s in cur:
          b = rnd.randint(0, s // 2)
          arg.append((b, rnd.randint(max(b, s - s // 2), s)))
        ops.append(("shrink", tuple(arg))); cur = tuple(e - b for b, e in arg)  # noqa: E702
      elif kind == "expand":
        if 1 not in cur: continue
        new = tuple(rnd.choice([2, 4]) if s == 1 else s for s in cur)
        ops.append(("expand", new)); cur = new  # noqa: E702
      else:
        ops.append(("flip", tuple(i for i in range(len(cur)) if rnd.random() < 0.5)))
    out.append((shape, ops))
  return out

def run_chain(shape, ops) -> ShapeTracker:
  t = ShapeTracker.from_shape(shape)
  for op, arg in ops: t = getattr(t, op)(arg)
  return t

def main() -> None:
  print("tinysched core micro-benchmarks")
  print(f"  platform : {platform.platform()}")
  print(f"  machine  : {platform.machine()} ({os.cpu_count()} cpus) {platform.processor() or ''}".rstrip())
  print(f"  python   : {platform.python_implementation()} {platform.python_version()}")
  print(f"  numpy    : {np.__version__}")
  print(f"  runs     : median/min of {RUNS}")
  print()

  exprs = random_index_exprs(3000)
  nodes = sum(len(e.toposort()) for e in exprs)
  chains = random_chains(2000)
  trackers = [run_chain(*ch) for ch in chains]
  multi = [t for t in trackers if len(t.views) > 1]
  some = trackers[:1000]
  # composition: a tracker on top of another starts from the bottom one's shape, so re-target chains to it
  rnd = random.Random(2)
  tops = [(a, _fit(rnd.choice(chains)[1], a.shape)) for a in trackers if 0 not in a.shape][:1500]

  rows = [
    bench(f"graph_rewrite(symbolic) x{len(exprs)} exprs ({nodes} nodes)", lambda: [graph_rewrite(e, symbolic) for e in exprs]),
    bench(f"movement chains x{len(chains)} (cold)", lambda: [run_chain(*ch) for ch in chains], clear_caches),
    bench(f"movement chains x{len(chains)} (warm)", lambda: [run_chain(*ch) for ch in chains]),
    bench(f"ShapeTracker.simplify x{len(multi)} multi-view (cold)", lambda: [t.simplify() for t in multi], clear_caches),
    bench(f"st1 + st2 composition x{len(tops)} (cold)", lambda: [a + run_chain(a.shape, ops) for a, ops in tops], clear_caches),
    bench(f"to_indexed_uops x{len(some)} (cold)", lambda: [t.to_indexed_uops() for t in some], clear_caches),
    bench(f"real_size x{len(some)} (cold)", lambda: [t.real_size() for t in some], clear_caches),
  ]
  w = max(len(r[0]) for r in rows)
  print(f"{'benchmark':<{w}}  {'median ms':>10}  {'min ms':>9}")
  print("-" * (w + 23))
  for name, med, mn in rows: print(f"{name:<{w}}  {med:>10.2f}  {mn:>9.2f}")

def _fit(ops: list[tuple[str, tuple]], shape: tuple[int, ...]) -> list[tuple[str, tuple]]:
  """A deterministic chain for `shape`: the permute/flip/reshape kinds of `ops` re-targeted to its rank and size."""
  out, cur = [], shape
  for kind, _ in ops:
    n = len(cur)
    if kind == "permute": order = tuple(reversed(range(n))); out.append(("permute", order)); cur = tuple(cur[i] for i in order)  # noqa: E702
    elif kind == "flip": out.append(("flip", (0,)))
    elif kind == "reshape" and n >= 2: new = (cur[0] * cur[1],) + cur[2:]; out.append(("reshape", new)); cur = new  # noqa: E702
    elif kind == "pad": out.append(("pad", tuple((1, 0) for _ in cur))); cur = tuple(s + 1 for s in cur)  # noqa: E702
  return out

if __name__ == "__main__":
  main()
