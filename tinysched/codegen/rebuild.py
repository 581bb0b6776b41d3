"""Small graph builders the lowering modules share: plain rebuilds, cheaper than a rewrite pass."""
from __future__ import annotations
from typing import Any
from tinysched.dtype import DType, dtypes
from tinysched.ops import Ops, GroupOp
from tinysched.uop import UOp
from tinysched.rewrite import PatternMatcher
from tinysched import symbolic as SYM

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

# the identities of the symbolic simplifier that hold exactly for kernel values too (floats included: x*1.0, max(x,x),
# -(-x), where(c,a,a) give back x bit for bit). Not add_zero_float: -0.0 + 0.0 is +0.0, so x + 0.0 -> x would change the
# sign of a zero. One home: the rules are symbolic's own (its names, its functions), only selected here.
VALUE_IDENTITIES = ("add_zero", "mul_one", "mul_one_float", "mul_zero", "div_one", "mod_one", "and_true", "and_false", "or_false",
                    "or_true", "idempotent", "compare_self", "where_true", "where_false", "where_same", "double_neg")
# (symbolic's matcher, its value subset): rebuilt when symbolic's matcher is replaced (a test planting a rule change);
# not a module-level matcher, so coverage lists the rules once, under symbolic
_value_cache: list[tuple[PatternMatcher, PatternMatcher]] = []

def value_rules() -> PatternMatcher:
  """symbolic's VALUE_IDENTITIES rules as a matcher (built on first use, from the matcher symbolic holds then)."""
  if not _value_cache or _value_cache[0][0] is not SYM.symbolic:
    _value_cache[:] = [(SYM.symbolic, PatternMatcher([(p, f, n) for p, f, n, _ in SYM.symbolic.rules if n in VALUE_IDENTITIES],
                                                      name="value_identities"))]
  return _value_cache[0][1]

def alu(op: Ops, dtype: DType, srcs: tuple[UOp, ...], arg: Any = None) -> UOp:
  """Build an ALU node of a kernel value: ops on integer/bool constants fold, and symbolic's exact identities apply
  (a WHERE on a constant condition, max(x,x), x*1, ...), so the program holds no work whose result is known."""
  u = UOp(op, dtype, srcs, arg)
  if op in GroupOp.ALU and all(s.op is Ops.CONST for s in srcs) and not dtypes.is_float(dtype) and \
      not any(dtypes.is_float(s.dtype) for s in srcs):
    return u.simplify()
  # sources are already simplified and an identity gives back an operand or a constant: one application is the fixed point
  return r if (r := value_rules().rewrite(u)) is not None else u

__all__ = ["substitute", "contains", "alu", "value_rules", "VALUE_IDENTITIES"]
