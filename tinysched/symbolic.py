"""The symbolic-integer simplifier, written as a PatternMatcher.

Index expressions are sums of `coefficient * term` plus a constant; the rules keep them in that
form (constants to the right, like terms combined, constants distributed over sums) and fold
division and modulo by constants using value ranges (vmin/vmax). The rules assume C semantics for
IDIV/MOD (truncation), so division rules only fire where the dividend is provably non-negative.
"""
from __future__ import annotations
import math
from tinysched.dtype import dtypes
from tinysched.ops import Ops, GroupOp
from tinysched.uop import UOp, exec_alu, _PY_ALU, REWRITES
from tinysched.rewrite import UPat, PatternMatcher, graph_rewrite

def decompose_sum(x: UOp) -> tuple[list[tuple[UOp, int]], int]:
  """x == sum(coeff*term) + const, flattening nested ADDs; terms keep first-appearance order."""
  terms: list[tuple[UOp, int]] = []
  const = 0
  stack = [x]
  while stack:
    u = stack.pop()
    if u.op is Ops.ADD: stack.extend(reversed(u.src))
    elif u.op is Ops.CONST: const += u.arg
    elif u.op is Ops.MUL and u.src[1].op is Ops.CONST: terms.append((u.src[0], u.src[1].arg))
    else: terms.append((u, 1))
  return terms, const

def no_wrap(terms: list[tuple[UOp, int]], const: int, dtype) -> bool:
  """const + sum(k*term) stays inside `dtype` for every value of the terms: then the sum is the integer sum, and
  splitting it by a divisor is exact (a sum that may wrap around is a different number; replay prove found
  ((i*3)//3 -> i) wrong for a uint32 i near 2**32)."""
  lo = const + sum(min(k*t.vmin, k*t.vmax) for t, k in terms)
  hi = const + sum(max(k*t.vmin, k*t.vmax) for t, k in terms)
  return dtypes.min(dtype) <= lo and hi <= dtypes.max(dtype)

def build_sum(dtype, terms: list[tuple[UOp, int]], const: int) -> UOp:
  ret: UOp | None = None
  for t, c in terms:
    if c == 0: continue
    tt = t if c == 1 else UOp(Ops.MUL, dtype, (t, UOp.const(dtype, c)))
    ret = tt if ret is None else UOp(Ops.ADD, dtype, (ret, tt))
  if ret is None: return UOp.const(dtype, const)
  return ret if const == 0 else UOp(Ops.ADD, dtype, (ret, UOp.const(dtype, const)))

def fold_constants(x: UOp) -> UOp | None:
  if x.op not in _PY_ALU: return None
  try: return UOp.const(x.dtype, exec_alu(x.op, x.dtype, [s.arg for s in x.src]))
  except (ZeroDivisionError, ValueError, OverflowError): return None

def fold_by_range(x: UOp) -> UOp | None:
  """An integer or bool expression whose range is a single value is that value."""
  if x.op is Ops.CONST or x.op not in GroupOp.ALU: return None
  if not (dtypes.is_int(x.dtype) or dtypes.is_bool(x.dtype)): return None
  return UOp.const(x.dtype, x.vmin) if x.vmin == x.vmax else None

def _merge_divmod(merged: dict[UOp, int]) -> dict[UOp, int] | None:
  """Fold pairs of terms that split one value by a constant c; for every integer x (C division too)
  c*(x//c) + x%c == x and c*((x//c)%e) + x%c == x%(c*e). None if no pair was found."""
  out, changed = merged, False
  work = [t for t in out if t.op is Ops.MOD and t.src[1].op is Ops.CONST and t.src[1].arg > 0]
  while work:
    t = work.pop()
    if (k := out.get(t, 0)) == 0: continue
    x, c = t.src
    div = UOp(Ops.IDIV, t.dtype, (x, c))
    partner: UOp | None = None
    if out.get(div) == k*c.arg: partner, new = div, x
    else:
      for u, ku in out.items():
        # (c*e must be a value of the dtype: x % (c*e) with a wrapped c*e is another number)
        if ku == k*c.arg and u.op is Ops.MOD and u.src[0] is div and u.src[1].op is Ops.CONST and u.src[1].arg > 0 \
           and c.arg*u.src[1].arg <= dtypes.max(t.dtype):
          partner, new = u, UOp(Ops.MOD, t.dtype, (x, UOp.const(t.dtype, c.arg*u.src[1].arg)))
          break
    if partner is None: continue
    # the merged term takes the partner's place (and merges with an equal term already there)
    nxt: dict[UOp, int] = {}
    for u, ku in out.items():
      if u is t: continue
      if u is partner: u, ku = new, k
      nxt[u] = nxt.get(u, 0) + ku
    out, changed = nxt, True
    if new.op is Ops.MOD: work.append(new)
  return out if changed else None

def combine_terms(x: UOp) -> UOp | None:
  """Flatten a sum, merge like terms and constants; fires only when that makes it shorter."""
  terms, const = decompose_sum(x)
  merged: dict[UOp, int] = {}
  for t, c in terms: merged[t] = merged.get(t, 0) + c
  if (dm := _merge_divmod(merged)) is not None: return build_sum(x.dtype, list(dm.items()), const)
  nconsts = sum(1 for u in _flat_adds(x) if u.op is Ops.CONST)
  if len(merged) == len(terms) and nconsts <= 1 and all(c != 0 for c in merged.values()):
    # already combined: only move a constant that is not last to the end
    if nconsts == 1 and x.src[1].op is not Ops.CONST: return build_sum(x.dtype, list(merged.items()), const)
    return None
  return build_sum(x.dtype, list(merged.items()), const)

def _flat_adds(x: UOp) -> list[UOp]:
  out, stack = [], [x]
  while stack:
    u = stack.pop()
    if u.op is Ops.ADD: stack.extend(u.src)
    else: out.append(u)
  return out

def distribute_mul(s: UOp, c: UOp) -> UOp | None:
  """(a + b) * c -> a*c + b*c for integer sums, so index expressions stay sums of products."""
  terms, const = decompose_sum(s)
  return build_sum(s.dtype, [(t, k*c.arg) for t, k in terms], const*c.arg)

def fold_div(x: UOp, c: UOp) -> UOp | None:
  """x // c for a constant c > 0 and x >= 0: split x = c*A + R, then x//c = A + R//c."""
  d = c.arg
  if d <= 0 or x.vmin < 0: return None
  if x.vmax < d: return UOp.const(x.dtype, 0)
  terms, const = decompose_sum(x)
  if not no_wrap(terms, const, x.dtype): return None
  if any(t.vmin < 0 for t, _ in terms): return None
  g = math.gcd(d, const, *(k for _, k in terms))
  if g > 1 and all(k > 0 for _, k in terms) and const >= 0:
    return UOp(Ops.IDIV, x.dtype, (build_sum(x.dtype, [(t, k//g) for t, k in terms], const//g), UOp.const(x.dtype, d//g)))
  quo = [(t, k//d) for t, k in terms if k//d != 0] if all(k >= 0 for _, k in terms) else []
  if not quo and const < d:
    # (x // a) // b -> x // (a*b)
    if x.op is Ops.IDIV and x.src[1].op is Ops.CONST and x.src[1].arg > 0:
      return UOp(Ops.IDIV, x.dtype, (x.src[0], UOp.const(x.dtype, x.src[1].arg*d)))
    return None
  rem_terms = [(t, k % d) for t, k in terms] if quo else terms
  rem = build_sum(x.dtype, rem_terms, const % d)
  if rem.vmin < 0: return None
  q = build_sum(x.dtype, quo, const//d)
  return q if rem.vmax < d else q + UOp(Ops.IDIV, x.dtype, (rem, c))

def fold_mod(x: UOp, c: UOp) -> UOp | None:
  """x % c for a constant c > 0 and x >= 0: drop the terms that are multiples of c."""
  d = c.arg
  if d <= 0 or x.vmin < 0: return None
  if x.vmax < d: return x
  if d == 1: return UOp.const(x.dtype, 0)
  # (y % (k*d)) % d -> y % d
  if x.op is Ops.MOD and x.src[1].op is Ops.CONST and x.src[1].arg % d == 0: return UOp(Ops.MOD, x.dtype, (x.src[0], c))
  terms, const = decompose_sum(x)
  if not no_wrap(terms, const, x.dtype) or any(t.vmin < 0 for t, _ in terms): return None
  new_terms = [(t, k % d) for t, k in terms]
  if all(k == nk for (_, k), (_, nk) in zip(terms, new_terms)) and const == const % d: return None
  rem = build_sum(x.dtype, new_terms, const % d)
  if rem.vmin < 0: return None
  return rem if rem.vmax < d else UOp(Ops.MOD, x.dtype, (rem, c))

def lt_move_const(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  """x + c1 < c2 -> x < c2 - c1 for integers, unless x + c1 may wrap around (then the two differ)."""
  if not dtypes.is_int(x.dtype): return None
  lo, hi, d = x.vmin + c1.arg, x.vmax + c1.arg, x.dtype
  if not (dtypes.min(d) <= lo and hi <= dtypes.max(d) and dtypes.min(d) <= c2.arg - c1.arg <= dtypes.max(d)): return None
  return UOp(Ops.CMPLT, dtypes.bool, (x, UOp.const(x.dtype, c2.arg - c1.arg)))

INTS = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)

symbolic = PatternMatcher([
  # constants
  (UPat(GroupOp.ALU, src=UPat(Ops.CONST), name="x"), fold_constants),
  # identities (the any-order match puts the constant on either side)
  (UPat(Ops.ADD, src=(UPat.var("x"), UPat.const(None, 0))), lambda x: x, "add_zero"),
  (UPat(Ops.ADD, src=(UPat.var("x"), UPat.const(None, 0.0))), lambda x: x, "add_zero_float"),
  (UPat(Ops.MUL, src=(UPat.var("x"), UPat.const(None, 1))), lambda x: x, "mul_one"),
  (UPat(Ops.MUL, src=(UPat.var("x"), UPat.const(None, 1.0))), lambda x: x, "mul_one_float"),
  (UPat(Ops.MUL, INTS, src=(UPat.var("x"), UPat.const(None, 0))), lambda x: UOp.const(x.dtype, 0), "mul_zero"),
  (UPat(Ops.IDIV, src=(UPat.var("x"), UPat.const(None, 1))), lambda x: x, "div_one"),
  (UPat(Ops.MOD, src=(UPat.var("x"), UPat.const(None, 1))), lambda x: UOp.const(x.dtype, 0), "mod_one"),
  (UPat(Ops.AND, dtypes.bool, src=(UPat.var("x"), UPat.const(dtypes.bool, True))), lambda x: x, "and_true"),
  (UPat(Ops.AND, dtypes.bool, src=(UPat.var("x"), UPat.const(dtypes.bool, False))), lambda x: x.const_like(False), "and_false"),
  (UPat(Ops.OR, dtypes.bool, src=(UPat.var("x"), UPat.const(dtypes.bool, False))), lambda x: x, "or_false"),
  (UPat(Ops.OR, dtypes.bool, src=(UPat.var("x"), UPat.const(dtypes.bool, True))), lambda x: x.const_like(True), "or_true"),
  (UPat((Ops.AND, Ops.OR, Ops.MAX), src=(UPat.var("x"), UPat.var("x"))), lambda x: x, "idempotent"),
  (UPat((Ops.CMPNE, Ops.CMPLT), src=(UPat.var("x"), UPat.var("x"))),
   lambda x: None if dtypes.is_float(x.dtype) else UOp.const(dtypes.bool, False), "compare_self"),
  (UPat(Ops.WHERE, src=(UPat.const(dtypes.bool, True), UPat.var("a"), UPat.var())), lambda a: a, "where_true"),
  (UPat(Ops.WHERE, src=(UPat.const(dtypes.bool, False), UPat.var(), UPat.var("b"))), lambda b: b, "where_false"),
  (UPat(Ops.WHERE, src=(UPat.var(), UPat.var("a"), UPat.var("a"))), lambda a: a, "where_same"),
  (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(UPat.var("x"),)),)), lambda x: x, "double_neg"),
  # ranges decide it
  (UPat(GroupOp.ALU, name="x"), fold_by_range),
  (UPat(Ops.MAX, src=(UPat.var("a"), UPat.var("b"))), lambda a, b: a if a.vmin >= b.vmax else (b if b.vmin >= a.vmax else None),
   "max_by_range"),
  # integer sums of products
  (UPat(Ops.MUL, INTS, src=(UPat(Ops.ADD, name="s"), UPat.cvar("c"))), distribute_mul),
  (UPat(Ops.MUL, INTS, src=(UPat(Ops.MUL, src=(UPat.var("x"), UPat.cvar("c1"))), UPat.cvar("c2"))),
   lambda x, c1, c2: UOp(Ops.MUL, x.dtype, (x, UOp.const(x.dtype, c1.arg*c2.arg))), "mul_mul_const"),
  (UPat(Ops.MUL, INTS, src=(UPat.cvar("c"), UPat.var("x"))), lambda c, x: None if x.op is Ops.CONST else UOp(Ops.MUL, x.dtype, (x, c)),
   "const_right_mul"),
  (UPat(Ops.ADD, INTS, name="x"), combine_terms),
  # division and modulo by constants
  (UPat(Ops.IDIV, INTS, src=(UPat.var("x"), UPat.cvar("c"))), fold_div),
  (UPat(Ops.MOD, INTS, src=(UPat.var("x"), UPat.cvar("c"))), fold_mod),
  # comparisons against constants: move constant terms across
  (UPat(Ops.CMPLT, src=(UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c1"))), UPat.cvar("c2"))), lt_move_const),
], name="symbolic")

# UOp.simplify (uop.py cannot import this module, which builds on it); `symbolic` is read at each call, so a patch of it is seen
def simplify(u: UOp) -> UOp: return graph_rewrite(u, symbolic)
REWRITES.simplify = simplify
