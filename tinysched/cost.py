"""The cost model of one kernel AST: FLOPs and bytes moved. The one home of this semantic: GlobalCounters
(tinysched/helpers.py, counted in tinysched/realize.py) and the execution check's timings (replay/execute/inputs.py)
both use it.

Definition (from the AST alone, before codegen): the work the AST describes. Code generation may do less (a one-hot
sum over a vocabulary becomes a gather), so throughput is measured in the executed cost below, not in this one.
- FLOPs: every ALU node (GroupOp.ALU: unary, binary, ternary; not CAST / BITCAST, LOAD, CONST) counts once per
  element of its shape, and a REDUCE_AXIS counts once per element of its *input* shape. Shapes come from the views:
  the full shape below a reduce, the reduced shape above it. So a matmul (M, K) @ (K, N) is M*N*K MULs plus M*N*K
  reduce ADDs = exactly 2*M*N*K; an elementwise `a + b` of n elements is n. A constant in the AST is
  WHERE(VALID(view), c, 0), and that WHERE is an ALU node: `a + 1` of n elements counts 2n (codegen folds the
  WHERE away; the model does not look that far). A reduce of values that load nothing (an arange is a masked sum of
  ones) is computed in closed form by codegen (tinysched/codegen/folds.py): it and the ALU nodes below it count once
  per element of its *output*, not n times over.
- bytes: per buffer the kernel binds (DEFINE_GLOBAL), the elements its views can reach, at most the whole buffer:
  a view reaches at most the product of its dims that move through memory (a nonzero stride; a masked dim only its
  valid range), and a stack of views at most the least of its views' products. A shrink of a large buffer counts the
  shrink, a broadcast its source once, a buffer read twice at most its size.
- Symbolic dims take their value from `var_vals`; a dim whose Variables have no value counts at its maximum.

The *executed* cost of a lowered kernel (`program_cost`, what code generation made of the AST: folds applied, a
gather reading the rows it needs rather than a whole table) is what throughput is measured in (replay/execute/timing.py):
- FLOPs: every floating-point ALU node of the linear program, times its vector width, times the trips of the loops
  open around it, times the work-items (a value only gated stores use: the share the gate lets through, or none where
  that is not known). Integer (index) arithmetic is not counted.
- accesses: per buffer, the elements its global LOADs and STOREs touch, counted the same way (each access once, reuse
  included: an upper bound on what it moves, the other one being the AST's reach above).
"""
from __future__ import annotations
import functools
from dataclasses import dataclass
from typing import Any, Sequence
import numpy as np
from tinysched.ops import Ops, GroupOp
from tinysched.dtype import dtypes
from tinysched.uop import UOp, sint, sym_infer

def kernel_flops(ast: UOp, var_vals: dict[UOp, int] | None = None) -> int:
  """FLOPs of one kernel AST (module docstring). Memoized per (ast, var_vals)."""
  return _flops(ast, frozenset((var_vals or {}).items()))

@functools.lru_cache(maxsize=4096)
def _flops(ast: UOp, vv: frozenset) -> int:
  var_vals = dict(vv)
  shape: dict[Any, tuple[int, ...]] = {}
  flops = 0
  def sz(st) -> tuple[int, ...]:
    try: return tuple(int(sym_infer(s, var_vals)) for s in st.shape)
    except Exception: return tuple(int(s.vmax) if not isinstance(s, int) else s for s in st.shape)
  loads: dict[Any, bool] = {}  # node -> a LOAD is below it (a reduce without one is folded to closed form)
  free: set[Any] = set()        # ALU nodes below such a reduce: counted with it, once per output element
  for u in ast.toposort():
    loads[u] = u.op is Ops.LOAD or any(loads[x] for x in u.src)
    if u.op in (Ops.LOAD, Ops.STORE): shape[u] = sz(u.src[1].arg)
    elif u.op is Ops.VALID: shape[u] = sz(u.src[0].arg)
    elif u.op is Ops.REDUCE_AXIS:
      s = shape.get(u.src[0], ())
      shape[u] = tuple(1 if i in u.arg[1] else d for i, d in enumerate(s))
      if loads[u]: flops += int(np.prod(s)) if s else 1
      else:
        below = [x for x in u.src[0].toposort() if x.op in GroupOp.ALU and x not in free]
        free.update(below)
        flops -= sum(int(np.prod(shape[x])) if shape[x] else 1 for x in below)  # counted above at the full shape
        flops += (len(below) + 1) * (int(np.prod(shape[u])) if shape[u] else 1)
    elif u.src and (u.op in GroupOp.Elementwise):
      ss = [shape[x] for x in u.src if x in shape]
      shape[u] = tuple(max(d) for d in zip(*ss)) if ss and all(len(x) == len(ss[0]) for x in ss) else (ss[0] if ss else ())
      if u.op in GroupOp.ALU: flops += int(np.prod(shape[u])) if shape[u] else 1
  return flops

@functools.lru_cache(maxsize=4096)
def _globals(ast: UOp) -> tuple[int, ...]:
  """The DEFINE_GLOBAL numbers of a kernel AST, each once per node (toposort order)."""
  return tuple(u.arg for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL)

def _value(x: Any, var_vals: dict) -> int:
  if isinstance(x, int): return x
  try: return int(sym_infer(x, var_vals))
  except Exception: return int(x.vmax)

def _reach(st: Any, var_vals: dict) -> int:
  """At most how many elements of its buffer a ShapeTracker reaches (module docstring)."""
  best = None
  for v in st.views:
    n = 1
    for i, (d, stride) in enumerate(zip(v.shape, v.strides)):
      if isinstance(stride, int) and stride == 0: continue
      n *= max(0, _value(v.mask[i][1], var_vals) - _value(v.mask[i][0], var_vals)) if v.mask is not None else _value(d, var_vals)
    best = n if best is None else min(best, n)
  return best or 0

@functools.lru_cache(maxsize=4096)
def _reached(ast: UOp, vv: frozenset) -> tuple[tuple[int, int], ...]:
  """(buffer number, elements its views reach, not capped), per DEFINE_GLOBAL, in first-use order."""
  var_vals, out = dict(vv), dict[int, int]()
  for u in ast.toposort():
    if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.DEFINE_GLOBAL:
      out[u.src[0].arg] = out.get(u.src[0].arg, 0) + _reach(u.src[1].arg, var_vals)
  for g in _globals(ast): out.setdefault(g, 0)
  return tuple(out.items())

def kernel_bytes(ast: UOp, sizes: dict[int, int], itemsize: dict[int, int], var_vals: dict[UOp, int] | None = None) -> int:
  """Bytes moved by one kernel AST (module docstring): of `sizes[i]` elements of `itemsize[i]` bytes for DEFINE_GLOBAL i,
  those its views reach (a missing number counts 0)."""
  return sum(min(n, sizes.get(g, 0)) * itemsize.get(g, 0) for g, n in _reached(ast, frozenset((var_vals or {}).items())))

@dataclass(frozen=True)
class ProgramCost:
  """The executed cost of one lowered kernel (module docstring): sints in the kernel's Variables."""
  flops: sint
  accesses: tuple[sint, ...]  # per buffer (DEFINE_GLOBAL number), elements loaded or stored
  def at(self, var_vals: dict[UOp, int] | None = None) -> tuple[int, tuple[int, ...]]:
    """(FLOPs, accesses) at the Variables' values (unvalued: at their maximum)."""
    vv = var_vals or {}
    return _value(self.flops, vv), tuple(_value(a, vv) for a in self.accesses)

def _trips(rng: UOp) -> sint:
  lo, hi = (x.arg if x.op is Ops.CONST else x for x in rng.src[:2])
  return hi - lo

def _share(gate: UOp) -> tuple[int, int]:
  """The share (numerator, denominator) of work-items a store's gate lets through: `id < c` of a thread id of size n
  lets c of n through; a gate of another form counts as letting none through (the count stays a lower bound)."""
  if gate.op is Ops.CMPLT and gate.src[0].op is Ops.SPECIAL and gate.src[1].op is Ops.CONST and isinstance(n := gate.src[0].arg[1], int) and n > 0:
    return max(0, min(int(gate.src[1].arg), n)), n
  return 0, 1

def program_cost(uops: Sequence[UOp], global_size: Sequence[sint], nbufs: int) -> ProgramCost:
  """The executed cost (module docstring) of a linear program: `uops` in program order (RANGE .. ENDRANGE around a
  loop's body), run by prod(global_size) work-items, binding `nbufs` buffers. A value used only by gated stores (the
  renderer puts it inside their `if`) counts for the share of work-items the gate lets through (`_share`)."""
  users: dict[UOp, list[UOp]] = {}
  for u in uops:
    for x in u.src: users.setdefault(x, []).append(u)
  share: dict[UOp, tuple[int, int]] = {}  # node -> the share of work-items that compute it, where not all do
  for u in reversed(uops):
    if u.op is Ops.STORE and len(u.src) > 2: share[u] = _share(u.src[2])
    elif u.op in GroupOp.ALU and (us := users.get(u)) and all(x in share and (x.op is not Ops.STORE or x.src[1] is u) for x in us):
      share[u] = max(share[x] for x in us if x in share)  # (the most any user computes; one fraction of n per gate form)
  threads: sint = 1
  for g in global_size: threads = threads * g
  open_: list[UOp] = []
  mult: sint = threads
  flops: sint = 0
  acc: list[sint] = [0] * nbufs
  def scaled(u: UOp, n: sint) -> sint:
    if u not in share: return n
    num, den = share[u]
    return n * num // den if isinstance(n, int) else (n * num) // den
  for u in uops:
    if u.op is Ops.RANGE:
      open_.append(u)
      mult = mult * _trips(u)
    elif u.op is Ops.ENDRANGE:
      open_.pop()
      mult = threads
      for r in open_: mult = mult * _trips(r)
    elif u.op in GroupOp.ALU and dtypes.is_float(u.dtype.scalar()):
      flops = flops + scaled(u, mult * u.dtype.count)
    elif u.op in (Ops.LOAD, Ops.STORE) and u.src and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.DEFINE_GLOBAL:
      g = u.src[0].src[0].arg
      width = (u.dtype if u.op is Ops.LOAD else u.src[1].dtype).count
      if 0 <= g < nbufs: acc[g] = acc[g] + scaled(u, mult * width)
  return ProgramCost(flops, tuple(acc))

def throughput_cost(ast: UOp, cost: ProgramCost, sizes: dict[int, int], itemsize: dict[int, int],
                    var_vals: dict[UOp, int] | None = None) -> tuple[int, int]:
  """(FLOPs, bytes) a launch of a lowered kernel did, for GFLOP/s and GB/s: the executed FLOPs, and per buffer the
  least of its size, the elements the AST's views reach and the elements the program touches."""
  flops, accesses = cost.at(var_vals)
  reach = dict(_reached(ast, frozenset((var_vals or {}).items())))
  return flops, sum(min(sizes.get(g, 0), reach.get(g, 0), accesses[g] if g < len(accesses) else 0) * itemsize.get(g, 0)
                    for g in sorted(set(reach) | set(range(len(accesses)))))

def kernel_cost(ast: UOp, sizes: dict[int, int], itemsize: dict[int, int], var_vals: dict[UOp, int] | None = None) -> tuple[int, int]:
  """(FLOPs, bytes moved) of one kernel AST, as the module docstring defines them."""
  return kernel_flops(ast, var_vals), kernel_bytes(ast, sizes, itemsize, var_vals)

def buffers_bytes(ast: UOp, bufs, var_vals: dict[UOp, int] | None = None) -> int:
  """kernel_bytes of a kernel bound to device Buffers `bufs` (DEFINE_GLOBAL order, as a ScheduleItem's)."""
  return sum(min(n, bufs[g].size) * bufs[g].nbytes // max(bufs[g].size, 1) for g, n in _reached(ast, frozenset((var_vals or {}).items()))
             if g < len(bufs))

def buffers_cost(ast: UOp, bufs, var_vals: dict[UOp, int] | None = None) -> tuple[int, int]:
  """kernel_cost of a kernel bound to device Buffers `bufs` (DEFINE_GLOBAL order, as a ScheduleItem's)."""
  return kernel_flops(ast, var_vals), buffers_bytes(ast, bufs, var_vals)

__all__ = ["kernel_flops", "kernel_bytes", "kernel_cost", "buffers_bytes", "buffers_cost", "ProgramCost", "program_cost", "throughput_cost"]
