"""Small graph builders the lowering modules share: plain rebuilds, cheaper than a rewrite pass."""
from __future__ import annotations
from typing import Any
from tinysched.dtype import DType, dtypes
from tinysched.ops import Ops, GroupOp
from tinysched.uop import UOp

def substitute(x: UOp, m: dict[UOp, UOp]) -> UOp:
  """x with the nodes in m replaced, simplified (a plain rebuild: cheaper than a rewrite pass)."""
  if not m: return x
  topo = x.toposort()
  if not any(u in m for u in topo): return x
  new: dict[UOp, UOp] = {}
  for u in topo:
    if u in m: new[u] = m[u]
    elif u.src:
      src = tuple(new[s] for s in u.src)
      new[u] = u if all(a is b for a, b in zip(src, u.src)) else UOp(u.op, u.dtype, src, u.arg)
    else: new[u] = u
  return new[x].simplify()

def contains(x: UOp, targets: frozenset[UOp] | set[UOp]) -> bool: return any(u in targets for u in x.toposort())

def alu(op: Ops, dtype: DType, srcs: tuple[UOp, ...], arg: Any = None) -> UOp:
  """Build an ALU node; fold a WHERE on a constant condition and integer/bool ops on constants."""
  if op is Ops.WHERE and srcs[0].op is Ops.CONST: return srcs[1] if srcs[0].arg else srcs[2]
  if op in GroupOp.ALU and all(s.op is Ops.CONST for s in srcs) and not dtypes.is_float(dtype) and \
      not any(dtypes.is_float(s.dtype) for s in srcs):
    return UOp(op, dtype, srcs, arg).simplify()
  return UOp(op, dtype, srcs, arg)

__all__ = ["substitute", "contains", "alu"]
