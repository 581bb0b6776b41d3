"""Closed forms of reduces: a sum over a reduce axis that needs no loop (arange, cumsum of a constant, a one-hot gather).

A reduce is first written symbolically: REDUCE_AXIS(body, R0, R1, ...) with arg (op, "loops"), where each R is one whole
reduce axis as a RANGE symbol (0 .. its size, in the index dtype) and the body is the lowered reduce input (thread ids
for the output axes). The named rules of `reduce_folds` remove the Rs one at a time; the lowerer's closed_form_reduces
pass folds a reduce only when none is left (else it gets its loop). Floats fold only where the result is bit-exact.
The index dtype is the symbols' own: these rules never pick one.
"""
from __future__ import annotations
import math
from tinysched.dtype import DType, dtypes
from tinysched.ops import Ops
from tinysched.symbolic import decompose_sum, build_sum
from tinysched.uop import UOp, sint
from tinysched.rewrite import UPat, PatternMatcher, ANY
from tinysched.codegen.rebuild import contains, alu

def _clauses(cond: UOp) -> list[UOp]:
  """The conjuncts of a bool AND tree, in order."""
  out, stack = [], [cond]
  while stack:
    u = stack.pop()
    if u.op is Ops.AND and u.dtype == dtypes.bool: stack.extend(reversed(u.src))
    else: out.append(u)
  return out

def _floordiv(p: UOp, d: int) -> UOp:
  """floor(p / d) for d > 0 with the truncating IDIV: shift p to non-negative by a multiple of d first."""
  if d == 1: return p
  if p.vmin >= 0: return (p // d).simplify()
  m = -(p.vmin // d)  # ceil(-vmin / d): p + m*d >= 0
  return ((p + m*d) // d - m).simplify()

def _linear(e: UOp, r: UOp) -> tuple[int, UOp] | None:
  """e == a*r + rest with rest free of r, or None (r inside a product, a division...)."""
  terms, const = decompose_sum(e)
  a, rest = 0, []
  for t, k in terms:
    if t is r: a += k
    elif contains(t, {r}): return None
    else: rest.append((t, k))
  return a, build_sum(r.dtype, rest, const)

def _fits(w: UOp, dt: DType) -> bool: return dtypes.min(dt) <= w.vmin and w.vmax <= dtypes.max(dt)

def _widen(x: UOp, idx: DType) -> UOp | None:
  """The exact value of an integer expression in the index dtype, or None where a narrower dtype may wrap around. A
  folded arange is int (CAST of an index count, plus the start): `v == id` with v and id int32 becomes an index compare."""
  if x.dtype == idx: return x
  if not dtypes.is_int(x.dtype) or x.dtype.itemsize > idx.itemsize or (x.dtype.itemsize == idx.itemsize and dtypes.min(x.dtype) == 0):
    return None
  if x.op is Ops.CONST: return UOp.const(idx, x.arg)
  if x.op is Ops.CAST and dtypes.is_int(x.src[0].dtype):
    return w if (w := _widen(x.src[0], idx)) is not None and _fits(w, x.dtype) else None
  if x.op in (Ops.ADD, Ops.MUL):
    ws = [_widen(s, idx) for s in x.src]
    if any(w is None for w in ws): return None
    return w if _fits(w := UOp(x.op, idx, tuple(ws)).simplify(), x.dtype) else None  # type: ignore[arg-type]
  return UOp(Ops.CAST, idx, (x,))  # a load, a variable: its value, extended

def _bounds(clause: UOp, r: UOp) -> tuple[UOp | None, UOp | None] | None:
  """A clause on r as lo <= r < hi (None: no bound on that side), or None if it is not an interval in r."""
  neg, c = False, clause
  while c.op is Ops.CMPNE and c.src[1].op is Ops.CONST and c.src[1].dtype == dtypes.bool and c.src[1].arg is True:
    neg, c = not neg, c.src[0]  # x != True is not x
  if c.op not in (Ops.CMPLT, Ops.CMPNE): return None
  if not all(x.dtype == r.dtype for x in c.src):
    if (w := [_widen(x, r.dtype) for x in c.src])[0] is None or w[1] is None: return None
    c = UOp(c.op, c.dtype, (w[0], w[1]))
  x, y = c.src
  if c.op is Ops.CMPNE:
    if not neg or (lin := _linear((x - y).simplify(), r)) is None or abs(lin[0]) != 1: return None
    p = (-lin[1] if lin[0] == 1 else lin[1]).simplify()  # x == y: r is one point
    return p, (p + 1).simplify()
  if neg: x, y = y, x + 1  # not (x < y) is y < x + 1 for integers
  if (lin := _linear((x - y).simplify(), r)) is None or lin[0] == 0: return None
  a, rest = lin  # a*r + rest < 0
  if a > 0: return None, (-_floordiv(rest, a)).simplify()  # r < ceil(-rest/a)
  return (_floordiv(rest, -a) + 1).simplify(), None         # r > rest/|a|

def _exact_float_multiple(c: UOp, n: sint, dt: DType) -> bool:
  """Every partial sum k*c (k <= n) of a float constant is exact, so summing it in any order gives n*c exactly."""
  if not math.isfinite(c.arg) or type(n) is not int: return False
  m = abs(c.arg)
  if m == 0: return True
  mant, _ = math.frexp(m)
  odd = int(mant * 2**53)
  while odd % 2 == 0: odd //= 2
  bits = 24 if dt == dtypes.float32 else 53 if dt == dtypes.float64 else 11
  return n * odd <= 2**bits

def _scaled(c: UOp, count: UOp, n: sint, dt: DType) -> UOp | None:
  """The sum of `count` copies of c in dtype dt (as the accumulator would compute it), or None if not exact."""
  if dt == dtypes.bool: return UOp(Ops.WHERE, dt, (UOp(Ops.CMPLT, dtypes.bool, (UOp.const(count.dtype, 0), count)), c, UOp.const(dt, False)))
  if dtypes.is_int(dt):  # wrap-around of repeated addition is the wrap-around of the product
    cnt = count.cast(dt)
    return cnt if c.op is Ops.CONST and c.arg == 1 else alu(Ops.MUL, dt, (cnt, c))
  if c.op is not Ops.CONST or not _exact_float_multiple(c, n, dt): return None
  if c.arg == 0: return UOp.const(dt, 0.0)
  # no terms is +0.0 (0 * a negative c would be -0.0)
  return UOp(Ops.WHERE, dt, (UOp(Ops.CMPLT, dtypes.bool, (UOp.const(count.dtype, 0), count)),
                             alu(Ops.MUL, dt, (count.cast(dt), c)), UOp.const(dt, 0.0)))

def _is_zero(z: UOp) -> bool: return z.op is Ops.CONST and z.arg == 0 and not (type(z.arg) is float and math.copysign(1, z.arg) < 0)

def _rsize(r: UOp) -> sint: return r.src[1].arg if r.src[1].op is Ops.CONST else r.src[1]

def _drop(red: UOp, r: UOp, body: UOp) -> UOp:
  return UOp(Ops.REDUCE_AXIS, red.dtype, (body,) + tuple(x for x in red.src[1:] if x is not r), red.arg)

def fold_invariant(red: UOp, x: UOp) -> UOp | None:
  """sum over r of x, x free of r: |r| copies of x."""
  if red.arg[0] is not Ops.ADD: return None
  for r in red.src[1:]:
    if contains(x, {r}): continue
    if (v := _scaled(x, r.src[1], _rsize(r), red.dtype)) is not None: return _drop(red, r, v)
  return None

def fold_masked_const(red: UOp, cond: UOp, c: UOp, z: UOp) -> UOp | None:
  """sum over r of (cond ? c : 0), c free of r and cond's clauses on r intervals: c times the interval's length."""
  if red.arg[0] is not Ops.ADD or not _is_zero(z): return None
  for r in red.src[1:]:
    if contains(c, {r}): continue
    clauses = _clauses(cond)
    on_r = [cl for cl in clauses if contains(cl, {r})]
    if not on_r: continue
    lo, hi = r.src[0], r.src[1]
    for cl in on_r:
      if (b := _bounds(cl, r)) is None: break
      if b[0] is not None: lo = lo.maximum(b[0])
      if b[1] is not None: hi = hi.minimum(b[1])
    else:
      count = (hi - lo).maximum(0).simplify()
      if (v := _scaled(c, count, _rsize(r), red.dtype)) is None: continue
      rest = [cl for cl in clauses if not contains(cl, {r})]
      body = v
      if rest:
        rc = rest[0]
        for cl in rest[1:]: rc = UOp(Ops.AND, dtypes.bool, (rc, cl))
        body = UOp(Ops.WHERE, red.dtype, (rc, v, UOp.const(red.dtype, 0)))
      return _drop(red, r, body)
  return None

def _guard_loads(x: UOp, r: UOp, p: UOp, guard: UOp) -> UOp:
  """x with r := p; every load that reads through r also requires `guard` (its address at p may be out of range)."""
  new: dict[UOp, UOp] = {}
  for u in x.toposort():
    if u.op is Ops.LOAD and contains(u, {r}):
      # from the rebuilt graph: a load inside this load's index (a gather W[ids[r]]) is guarded too
      idx = new[u.src[0].src[1]]
      valid = new[u.src[1]] if len(u.src) > 1 else UOp.const(dtypes.bool, True)
      valid = UOp(Ops.AND, dtypes.bool, (valid, guard)).simplify()
      if valid.op is Ops.CONST: new[u] = UOp(Ops.LOAD, u.dtype, (UOp(Ops.INDEX, u.src[0].dtype, (u.src[0].src[0], idx)),)) \
        if valid.arg else UOp.const(u.dtype, 0)
      else: new[u] = UOp(Ops.LOAD, u.dtype, (UOp(Ops.INDEX, u.src[0].dtype, (u.src[0].src[0], idx)), valid))
    elif u is r: new[u] = p
    elif u.src: new[u] = UOp(u.op, u.dtype, tuple(new[s] for s in u.src), u.arg)
    else: new[u] = u
  return new[x]

def fold_masked_point(red: UOp, x: UOp) -> UOp | None:
  """sum over r of a body that is 0 outside an interval of r holding at most one point: the body at that point,
  its loads guarded (one load instead of a loop). The body is 0 outside the interval when it is WHERE(cond, y, 0) with
  the interval in cond, or a masked load (or a cast of one) with the interval in the load's validity."""
  if red.arg[0] is not Ops.ADD: return None
  if x.op is Ops.WHERE and _is_zero(x.src[2]): clauses, y = _clauses(x.src[0]), x.src[1]
  else: clauses, y = [], x
  ld = y.src[0] if y.op is Ops.CAST and dtypes.is_int(y.src[0].dtype) == dtypes.is_int(y.dtype) else y
  load_clauses = _clauses(ld.src[1]) if ld.op is Ops.LOAD and len(ld.src) > 1 else []
  for r in red.src[1:]:
    on_r = [cl for cl in clauses + load_clauses if contains(cl, {r})]
    if not on_r: continue
    bs = [_bounds(cl, r) for cl in on_r]
    if any(b is None for b in bs): continue
    los = [r.src[0]] + [b[0] for b in bs if b[0] is not None]  # type: ignore[index]  # no None in bs: checked above
    his = [r.src[1]] + [b[1] for b in bs if b[1] is not None]  # type: ignore[index]
    # at most one point: some pair of bounds is at most 1 apart
    if not any((h - l).simplify().vmax <= 1 for l in los for h in his): continue
    lo, hi = los[0], his[0]
    for l in los[1:]: lo = lo.maximum(l)
    for h in his[1:]: hi = hi.minimum(h)
    lo, guard = lo.simplify(), (lo < hi).simplify()
    rest = [cl for cl in clauses if not contains(cl, {r})]
    cond = guard
    for cl in rest: cond = UOp(Ops.AND, dtypes.bool, (cond, cl))
    body = _guard_loads(y, r, lo, guard)
    body = body if cond.op is Ops.CONST and cond.arg else UOp(Ops.WHERE, y.dtype, (cond, body, UOp.const(y.dtype, 0)))
    # floats: the loop's sum is 0.0 + ... + y, which turns a -0.0 into +0.0
    if dtypes.is_float(body.dtype): body = UOp(Ops.ADD, body.dtype, (body, UOp.const(body.dtype, 0.0)))
    return _drop(red, r, body)
  return None

LOOPS = "loops"  # the arg tag of a reduce written with symbols, on its way to a closed form
# named so replay reports can say which closed form replaced a loop
reduce_folds = PatternMatcher([
  (UPat(Ops.REDUCE_AXIS, src=(UPat.var("x"),), arg=(Ops.ADD, LOOPS)), lambda x: x, "reduce_no_loops_left"),
  (UPat(Ops.REDUCE_AXIS, src=(UPat(Ops.WHERE, src=(UPat.var("cond"), UPat.var("c"), UPat.cvar("z"))),), arg=ANY, name="red",
        allow_any_len=True), fold_masked_const, "reduce_masked_const_to_count"),
  (UPat(Ops.REDUCE_AXIS, src=(UPat.var("x"),), name="red", allow_any_len=True), fold_masked_point, "reduce_masked_point_to_load"),
  (UPat(Ops.REDUCE_AXIS, src=(UPat.var("x"),), name="red", allow_any_len=True), fold_invariant, "reduce_invariant_to_product"),
], name="reduce_folds")

__all__ = ["reduce_folds", "fold_invariant", "fold_masked_const", "fold_masked_point", "LOOPS"]
