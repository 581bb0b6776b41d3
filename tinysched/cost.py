"""The cost model of one kernel AST: FLOPs and bytes moved. The one home of this semantic: GlobalCounters
(tinysched/helpers.py, counted in tinysched/realize.py) and the execution check's timings (replay/execute/inputs.py)
both use it.

Definition (from the AST alone, before codegen):
- FLOPs: every ALU node (GroupOp.ALU: unary, binary, ternary; not CAST / BITCAST, LOAD, CONST) counts once per
  element of its shape, and a REDUCE_AXIS counts once per element of its *input* shape. Shapes come from the views:
  the full shape below a reduce, the reduced shape above it. So a matmul (M, K) @ (K, N) is M*N*K MULs plus M*N*K
  reduce ADDs = exactly 2*M*N*K; an elementwise `a + b` of n elements is n. A constant in the AST is
  WHERE(VALID(view), c, 0), and that WHERE is an ALU node: `a + 1` of n elements counts 2n (codegen folds the
  WHERE away; the model does not look that far).
- bytes: the full size of every buffer the kernel binds (DEFINE_GLOBAL), once, whether the kernel reads all of it
  or not (a shrink of a large buffer counts the whole buffer; a buffer read twice counts once).
- Symbolic dims take their value from `var_vals`; a dim whose Variables have no value counts at its maximum.
"""
from __future__ import annotations
import functools
from typing import Any
import numpy as np
from tinysched.ops import Ops, GroupOp
from tinysched.uop import UOp, sym_infer

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
  for u in ast.toposort():
    if u.op in (Ops.LOAD, Ops.STORE): shape[u] = sz(u.src[1].arg)
    elif u.op is Ops.VALID: shape[u] = sz(u.src[0].arg)
    elif u.op is Ops.REDUCE_AXIS:
      s = shape.get(u.src[0], ())
      shape[u] = tuple(1 if i in u.arg[1] else d for i, d in enumerate(s))
      flops += int(np.prod(s)) if s else 1
    elif u.src and (u.op in GroupOp.Elementwise):
      ss = [shape[x] for x in u.src if x in shape]
      shape[u] = tuple(max(d) for d in zip(*ss)) if ss and all(len(x) == len(ss[0]) for x in ss) else (ss[0] if ss else ())
      if u.op in GroupOp.ALU: flops += int(np.prod(shape[u])) if shape[u] else 1
  return flops

@functools.lru_cache(maxsize=4096)
def _globals(ast: UOp) -> tuple[int, ...]:
  """The DEFINE_GLOBAL numbers of a kernel AST, each once per node (toposort order)."""
  return tuple(u.arg for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL)

def kernel_bytes(ast: UOp, sizes: dict[int, int], itemsize: dict[int, int]) -> int:
  """Bytes moved by one kernel AST (module docstring): `sizes[i]` elements of `itemsize[i]` bytes for DEFINE_GLOBAL i
  (a missing number counts 0)."""
  return sum(sizes.get(g, 0) * itemsize.get(g, 0) for g in _globals(ast))

def kernel_cost(ast: UOp, sizes: dict[int, int], itemsize: dict[int, int], var_vals: dict[UOp, int] | None = None) -> tuple[int, int]:
  """(FLOPs, bytes moved) of one kernel AST, as the module docstring defines them."""
  return kernel_flops(ast, var_vals), kernel_bytes(ast, sizes, itemsize)

def buffers_bytes(ast: UOp, bufs) -> int:
  """kernel_bytes of a kernel bound to device Buffers `bufs` (DEFINE_GLOBAL order, as a ScheduleItem's)."""
  return sum(bufs[g].nbytes for g in _globals(ast) if g < len(bufs))

def buffers_cost(ast: UOp, bufs, var_vals: dict[UOp, int] | None = None) -> tuple[int, int]:
  """kernel_cost of a kernel bound to device Buffers `bufs` (DEFINE_GLOBAL order, as a ScheduleItem's)."""
  return kernel_flops(ast, var_vals), buffers_bytes(ast, bufs)

__all__ = ["kernel_flops", "kernel_bytes", "kernel_cost", "buffers_bytes", "buffers_cost"]
