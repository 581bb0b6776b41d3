"""Proofs of the compiler's integer rewrite rules with z3, instance by instance.

A rule's function decides on a concrete node (its vmin/vmax, its constants), so it is proven where it runs: on every node
of a deterministic corpus of integer expressions (int32, int64, uint32) over Variables whose ranges and constants come
from an edge grid (0, 1, -1, d-1, d, d+1, 2d, negative ranges, ranges crossing 0, one-value ranges, values near the
dtype's bounds for wrap-around), each rule is matched and called exactly as its PatternMatcher would, and where it
returns a node, `node == result` is proven with `smt.prove_equal` for every value of the Variables in their ranges (C
division, a zero divisor gives 0, the dtype wraps around). A rule is `proven` (every instance), refuted with a
`counterexample` (Variable values, both sides, both values; confirmed by evaluating the two sides with exec_alu, which
shares nothing with the z3 encoding), `unknown` (the solver gave up), `unreached` (no corpus node makes it fire: extend
the corpus) or `listed` (LISTED says why it is not proven here). The corpus is closed under the live matcher: every
node it builds on the way to a fixed point of a corpus expression is an instance too.

Also proven on every corpus node: its value lies in [vmin, vmax] (`uop/vmin_vmax`: uop._range, the premise of every rule
that decides on a range). The closed-form reduces of codegen/folds.py (the lowerer's `reduce_folds`) are proven for
concrete loop lengths: both sides' sums are written out for every length of a small grid (a bounded proof: those
lengths, every value of the rest, integer loads as an array). Floats are out of scope (LISTED); the value identities of
codegen/rebuild.py are symbolic's own rules, proven here under symbolic's names.
"""
from __future__ import annotations
import random
from dataclasses import dataclass
from typing import Any, Callable, Iterable
from tinysched.dtype import DType, dtypes
from tinysched.ops import Ops, GroupOp
from tinysched.uop import UOp, Variable, sym_infer
from tinysched.rewrite import PatternMatcher, graph_rewrite
from tinysched import symbolic as SYM
from tinysched.codegen import folds as FOLDS, lowerer  # (reduce_folds: the lowerer's, which tests patch there)
from replay.prove import smt

@dataclass
class RuleProof:
  matcher: str
  rule: str
  status: str  # proven | counterexample | unknown | unreached | listed
  instances: int = 0
  proven: int = 0
  counterexample: dict | None = None
  reason: str | None = None
  unknown: int = 0  # instances the solver could not decide (the first one's reason in `reason`)
  refuted: int = 0  # instances with a counterexample (the first one in `counterexample`)

# rules not proven here, and why (a counterexample still shows if a corpus node reaches one)
LISTED: dict[tuple[str, str], str] = {
  ("symbolic", "add_zero_float"): "float rule: out of scope of the integer proofs. Not an identity in IEEE arithmetic: "
    "-0.0 + 0.0 is +0.0 (hence codegen/rebuild.VALUE_IDENTITIES leaves it out); symbolic applies it to index arithmetic only",
  ("symbolic", "mul_one_float"): "float rule: out of scope of the integer proofs (x * 1.0 is x bit for bit in IEEE arithmetic, "
    "-0.0, infinities and NaN included: checked concretely by tests/replay/test_prove_rules.py)",
}

class ProofUnavailable(RuntimeError):
  """z3 is not installed: nothing can be proven."""

# *** the corpus ***

SEED = 1729  # fixed: the corpus, hence the result, is the same in every run
DTYPES = (dtypes.int32, dtypes.int64, dtypes.uint32)
DIVISORS = (2, 3, 4, 8)
N_DIVMOD, N_NESTED, N_MISC, N_BIG = 260, 80, 90, 60  # random draws per dtype of each family (the run's size is about linear in them)

def _n(op: Ops, dt: DType, *src: UOp, arg: Any = None) -> UOp: return UOp(op, dt, tuple(src), arg)  # as is: no eager folding
def _c(dt: DType, v: Any) -> UOp: return UOp.const(dt, v)

class _Grid:
  """The edge values of one dtype and divisor d: ranges, constants and coefficients."""
  def __init__(self, dt: DType, d: int):
    lo, hi, sg = lo_of(dt), hi_of(dt), not dtypes.is_unsigned(dt)
    self.ranges = [(0, d-1), (0, d), (0, d+1), (0, 2*d), (1, d), (d, 3*d+1), (0, 0), (d, d), (0, 1000), (d-1, d+1)]
    if sg: self.ranges += [(-d, d), (-1, 0), (-d-1, -1), (-2*d, 0), (-1, -1), (-d, d-1), (-3*d, -d)]
    self.big = [(hi - 2*d, hi), (hi // 2 - d, hi // 2 + d), (0, hi), (hi - d, hi)] + ([(lo, lo + 2*d), (lo, hi), (lo, lo + d)] if sg else [])
    self.consts = [0, 1, d-1, d, d+1, 2*d, 3*d-1] + ([-1, -d, -(d-1), -(d+1), -2*d] if sg else [hi, hi - d + 1])
    self.edge_consts = [0, 1, hi, hi - 1] + ([-1, lo, lo + 1] if sg else [hi // 2 + 1])
    self.coeffs = [1, d, 2*d, d-1, d+1] + ([-1, -d] if sg else [])

class _Builder:
  """Random draws from the grammar, seeded: a sum of coefficient*term plus a constant, the terms Variables or small
  sub-expressions (//, % by constants, MAX, WHERE), and what is built over sums (//, %, comparisons, products)."""
  def __init__(self, rng: random.Random, dt: DType):
    self.rng, self.dt = rng, dt
    self.grids = {d: _Grid(dt, d) for d in DIVISORS}

  def var(self, name: str, g: _Grid, big: bool = False) -> UOp:
    lo, hi = self.rng.choice(g.big if big else g.ranges)
    return Variable(name, lo, hi, self.dt)

  def term(self, name: str, g: _Grid, d: int) -> UOp:
    v, r, dt = self.var(name, g, big=self.rng.random() < 0.08), self.rng.random(), self.dt
    if r < 0.6: return v
    if r < 0.7: return _n(Ops.IDIV, dt, v, _c(dt, self.rng.choice((d, 2, d+1))))
    if r < 0.8: return _n(Ops.MOD, dt, v, _c(dt, self.rng.choice((d, 2*d, d+1))))
    if r < 0.87: return _n(Ops.MAX, dt, v, _c(dt, self.rng.choice(g.consts)))
    if r < 0.94: return _n(Ops.MUL, dt, v, self.var(name + "2", g))  # a product of two Variables
    w = self.var(name + "2", g)
    return _n(Ops.WHERE, dt, _n(Ops.CMPLT, dtypes.bool, v, _c(dt, self.rng.choice(g.consts))), v, w)

  def sum(self, g: _Grid, d: int, nterms: int | None = None) -> UOp:
    rng, dt = self.rng, self.dt
    nterms = nterms if nterms is not None else rng.choice((1, 1, 2, 2, 3))
    terms = [(self.term("ijk"[t], g, d), rng.choice(g.coeffs)) for t in range(nterms)]
    const = rng.choice(g.consts)
    form = rng.random()
    out: UOp | None = None
    for t, k in terms:
      tk = t if k == 1 else _n(Ops.MUL, dt, *((_c(dt, k), t) if form < 0.1 else (t, _c(dt, k))))  # constant on either side
      out = tk if out is None else _n(Ops.ADD, dt, out, tk)
    assert out is not None
    if const != 0 or form > 0.9: out = _n(Ops.ADD, dt, *((_c(dt, const), out) if form < 0.15 else (out, _c(dt, const))))
    return out

  def divmod_expr(self) -> UOp:
    rng, dt = self.rng, self.dt
    d = rng.choice(DIVISORS)
    g = self.grids[d]
    x = self.sum(g, d)
    r = rng.random()
    div = d if r < 0.8 else rng.choice((1, 0, -d, -1)) if not dtypes.is_unsigned(dt) else rng.choice((1, 0))
    return _n(rng.choice((Ops.IDIV, Ops.MOD)), dt, x, _c(dt, div))

  def nested_expr(self) -> UOp:
    """(x//a)//b, (y%(k*d))%d, the split pairs c*(x//c) + x%c and c*((x//c)%e) + x%c that combine_terms merges."""
    rng, dt = self.rng, self.dt
    d = rng.choice(DIVISORS)
    g = self.grids[d]
    x = self.sum(g, d, rng.choice((1, 1, 2)))
    r = rng.random()
    if r < 0.25: return _n(Ops.IDIV, dt, _n(Ops.IDIV, dt, x, _c(dt, rng.choice((d, 2, 3) if dtypes.is_unsigned(dt) else (d, 2, -d)))), _c(dt, d))
    if r < 0.5: return _n(Ops.MOD, dt, _n(Ops.MOD, dt, x, _c(dt, rng.choice((2*d, 3*d, d+1, d)))), _c(dt, d))
    div, mod = _n(Ops.IDIV, dt, x, _c(dt, d)), _n(Ops.MOD, dt, x, _c(dt, d))
    k = rng.choice((1, 1, 2, -1)) if not dtypes.is_unsigned(dt) else rng.choice((1, 2))
    if r < 0.75:
      return _n(Ops.ADD, dt, _n(Ops.MUL, dt, div, _c(dt, k*d)), _n(Ops.MUL, dt, mod, _c(dt, k)) if k != 1 else mod)
    e = rng.choice((2, 3, d))
    return _n(Ops.ADD, dt, _n(Ops.MUL, dt, _n(Ops.MOD, dt, div, _c(dt, e)), _c(dt, k*d)), _n(Ops.MUL, dt, mod, _c(dt, k)) if k != 1 else mod)

  def misc_expr(self) -> UOp:
    """Comparisons x + c1 < c2 (wrap-around at the dtype's bounds), products over sums, MAX, WHERE, NEG, booleans."""
    rng, dt = self.rng, self.dt
    d = rng.choice(DIVISORS)
    g = self.grids[d]
    big = rng.random() < 0.4
    x = self.var("i", g, big) if rng.random() < 0.5 else self.sum(g, d, 1)
    y = self.var("j", g, rng.random() < 0.3)
    k = rng.choice(g.coeffs + [0, -1] if not dtypes.is_unsigned(dt) else g.coeffs + [0])
    r = rng.randrange(12)
    if r == 0:
      c1, c2 = rng.choice(g.edge_consts + g.consts), rng.choice(g.edge_consts + g.consts)
      return _n(Ops.CMPLT, dtypes.bool, _n(Ops.ADD, dt, x, _c(dt, c1)), _c(dt, c2))
    if r == 1: return _n(Ops.MUL, dt, *((self.sum(g, d), _c(dt, k)) if rng.random() < 0.7 else (_c(dt, k), self.sum(g, d))))
    if r == 2: return _n(Ops.MUL, dt, _n(Ops.MUL, dt, x, _c(dt, k)), _c(dt, rng.choice(g.coeffs + [hi_of(dt)])))
    if r == 3: return _n(Ops.MAX, dt, x, y)
    if r == 4: return _n(Ops.MAX, dt, *((x, _c(dt, rng.choice(g.consts))) if rng.random() < 0.5 else (_c(dt, rng.choice(g.consts)), x)))
    if r == 5: return _n(Ops.NEG, dt, _n(Ops.NEG, dt, x)) if rng.random() < 0.5 else _n(Ops.NEG, dt, x)
    cmp = _n(rng.choice((Ops.CMPLT, Ops.CMPNE)), dtypes.bool, *((x, y) if rng.random() < 0.6 else (x, _c(dt, rng.choice(g.consts)))))
    if r == 6: return _n(Ops.WHERE, dt, cmp, x, y if rng.random() < 0.7 else x)
    if r == 7:
      cmp2 = _n(Ops.CMPLT, dtypes.bool, y, _c(dt, rng.choice(g.consts)))
      return _n(rng.choice((Ops.AND, Ops.OR)), dtypes.bool, cmp, rng.choice((cmp2, cmp, _c(dtypes.bool, True), _c(dtypes.bool, False))))
    if r == 8: return _n(Ops.CMPLT, dtypes.bool, *((x, _c(dt, rng.choice(g.consts))) if rng.random() < 0.5 else (_c(dt, rng.choice(g.consts)), x)))
    if r == 9: return _n(Ops.CMPNE, dtypes.bool, _n(Ops.CMPLT, dtypes.bool, x, y), _c(dtypes.bool, True))
    if r == 10: return _n(Ops.ADD, dt, x, _n(Ops.MUL, dt, x, _c(dt, -1 if not dtypes.is_unsigned(dt) else hi_of(dt))))  # x - x
    return _n(Ops.ADD, dt, _n(Ops.ADD, dt, x, _c(dt, rng.choice(g.consts))), _n(Ops.ADD, dt, y, _c(dt, rng.choice(g.consts))))

  def big_expr(self) -> UOp:
    """Constants near the dtype's bounds: products of divisors that wrap around, sums over wide ranges, x + c1 < c2."""
    rng, dt = self.rng, self.dt
    g = self.grids[rng.choice(DIVISORS)]
    B = _BIG[dt]
    x = Variable("i", *rng.choice(g.big + [(0, 1000), (0, 2**20)]), dt)
    a, b = rng.choice(B), rng.choice(B + list(DIVISORS))
    r = rng.randrange(8)
    if r >= 6:  # d*i - k*j + c >= 0 over wide ranges: dropping multiples of d leaves a remainder sum that wraps around
      d, k, J = rng.choice(DIVISORS), rng.choice((1, 3, 5)), rng.choice((hi_of(dt) // 2, hi_of(dt) // 8, 2**20))
      J = min(J, hi_of(dt) // k - d)  # so that d*i can outweigh k*j
      i = Variable("i", -(-k*J // d), min(hi_of(dt) // d, -(-k*J // d) + rng.choice((0, 3, 1000))), dt)
      j = Variable("j", 0, J, dt)
      sm = _n(Ops.ADD, dt, _n(Ops.ADD, dt, _n(Ops.MUL, dt, i, _c(dt, d)), _n(Ops.MUL, dt, j, _c(dt, -k))), _c(dt, rng.choice(g.consts[:4])))
      return _n(rng.choice((Ops.IDIV, Ops.MOD)), dt, sm, _c(dt, d))
    if r == 0:
      return _n(Ops.ADD, dt, _n(Ops.MUL, dt, _n(Ops.MOD, dt, _n(Ops.IDIV, dt, x, _c(dt, a)), _c(dt, b)), _c(dt, a)), _n(Ops.MOD, dt, x, _c(dt, a)))
    if r == 1: return _n(Ops.IDIV, dt, _n(Ops.IDIV, dt, x, _c(dt, b)), _c(dt, a))
    if r == 2:
      sm = _n(Ops.ADD, dt, _n(Ops.MUL, dt, x, _c(dt, rng.choice(g.coeffs))), _c(dt, rng.choice(g.edge_consts + B)))
      return _n(rng.choice((Ops.IDIV, Ops.MOD)), dt, sm, _c(dt, rng.choice(B + list(DIVISORS))))
    if r == 3: return _n(Ops.MUL, dt, _n(Ops.ADD, dt, x, _c(dt, rng.choice(g.edge_consts + B))), _c(dt, rng.choice(B + g.coeffs)))
    c1, c2 = rng.choice(g.edge_consts + B + g.consts), rng.choice(g.edge_consts + B + g.consts)
    return _n(Ops.CMPLT, dtypes.bool, _n(Ops.ADD, dt, x if r == 4 else self.sum(g, 4, 1), _c(dt, c1)), _c(dt, c2))

def hi_of(dt: DType) -> int: return int(dtypes.max(dt))
def lo_of(dt: DType) -> int: return int(dtypes.min(dt))

# divisors and coefficients whose products leave the dtype (2**16 * (2**16 + 1) > 2**31; about sqrt(max))
_BIG: dict[DType, list[int]] = {dtypes.int32: [65536, 65537, 46341, 2**30, 2**31 - 1], dtypes.int64: [2**32, 2**32 + 1, 3037000500, 2**62, 2**63 - 1],
        dtypes.uint32: [65536, 65537, 2**31, 2**32 - 1]}

def _fixed(dt: DType) -> list[UOp]:
  """Shapes every rule's pattern needs at least once, and constant operations on edge values."""
  out: list[UOp] = []
  g = _Grid(dt, 4)
  lo, hi = lo_of(dt), hi_of(dt)
  T, F = _c(dtypes.bool, True), _c(dtypes.bool, False)
  pairs = [((0, 10), (3, 7)), ((hi - 2, hi), (0, 1))] + ([((-5, 5), (-1, -1)), ((lo, lo + 2), (lo, hi))] if lo < 0 else [((7, 7), (0, hi))])
  for (xr, yr) in pairs:
    x, y = Variable("i", *xr, dt), Variable("j", *yr, dt)
    out += _identities(dt, x, y, T, F)
    out += [_n(Ops.MUL, dt, _n(Ops.MUL, dt, x, _c(dt, c1)), _c(dt, c2)) for c1 in (2, -1, 65536, hi) for c2 in (3, -1, 65537, hi)]
  # constants: every binary op on pairs of edge values (a zero divisor, min // -1, overflow)
  vals = sorted(set(g.edge_consts + [0, 1, 2, 3, -3, 7] if not dtypes.is_unsigned(dt) else g.edge_consts + [0, 1, 2, 3, 7]))
  for op in (Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR):
    for a in vals:
      for bb in vals:
        if op in (Ops.SHL, Ops.SHR) and not 0 <= bb < 40: continue
        out.append(_n(op, dtypes.bool if op in GroupOp.Comparison else dt, _c(dt, a), _c(dt, bb)))
  out += [_n(Ops.NEG, dt, _c(dt, a)) for a in vals] + [_n(Ops.WHERE, dt, c, _c(dt, 1), _c(dt, 2)) for c in (T, F)]
  out += [_n(Ops.MULACC, dt, _c(dt, a), _c(dt, 3), _c(dt, 1)) for a in vals]
  out += [_n(op, dtypes.bool, T, F) for op in (Ops.AND, Ops.OR, Ops.XOR, Ops.CMPLT, Ops.CMPNE, Ops.MAX)] + [_n(Ops.NEG, dtypes.bool, T)]
  return out

def _identities(dt: DType, x: UOp, y: UOp, T: UOp, F: UOp) -> list[UOp]:
  """Each identity's pattern, with the constant on either side where the op is commutative."""
  b, b2 = _n(Ops.CMPLT, dtypes.bool, x, y), _n(Ops.CMPNE, dtypes.bool, y, _c(dt, 1))
  return [_n(Ops.ADD, dt, x, _c(dt, 0)), _n(Ops.ADD, dt, _c(dt, 0), x), _n(Ops.MUL, dt, x, _c(dt, 1)), _n(Ops.MUL, dt, _c(dt, 1), x),
          _n(Ops.MUL, dt, x, _c(dt, 0)), _n(Ops.MUL, dt, _c(dt, 0), x), _n(Ops.IDIV, dt, x, _c(dt, 1)), _n(Ops.MOD, dt, x, _c(dt, 1)),
          _n(Ops.AND, dtypes.bool, b, T), _n(Ops.AND, dtypes.bool, F, b), _n(Ops.OR, dtypes.bool, b, F), _n(Ops.OR, dtypes.bool, T, b),
          _n(Ops.AND, dtypes.bool, b, b), _n(Ops.OR, dtypes.bool, b, b), _n(Ops.MAX, dt, x, x), _n(Ops.AND, dt, x, x), _n(Ops.OR, dt, x, x),
          _n(Ops.CMPLT, dtypes.bool, x, x), _n(Ops.CMPNE, dtypes.bool, x, x), _n(Ops.CMPNE, dtypes.bool, b, b),
          _n(Ops.WHERE, dt, T, x, y), _n(Ops.WHERE, dt, F, x, y), _n(Ops.WHERE, dt, b, x, x), _n(Ops.NEG, dt, _n(Ops.NEG, dt, x)),
          _n(Ops.NEG, dtypes.bool, _n(Ops.NEG, dtypes.bool, b)), _n(Ops.XOR, dt, x, x), _n(Ops.MULACC, dt, x, y, x),
          _n(Ops.SHL, dt, x, _c(dt, 2)), _n(Ops.SHR, dt, x, _c(dt, 1)),
          _n(Ops.AND, dtypes.bool, T, b2), _n(Ops.OR, dtypes.bool, b2, T), _n(Ops.OR, dtypes.bool, F, b2), _n(Ops.AND, dtypes.bool, b2, F),
          _n(Ops.WHERE, dt, b2, y, y), _n(Ops.WHERE, dtypes.bool, b, b2, b2), _n(Ops.NEG, dt, _n(Ops.NEG, dt, y)),
          _n(Ops.NEG, dt, _n(Ops.NEG, dt, _n(Ops.ADD, dt, x, y)))]

def _compare_grid(dt: DType) -> list[UOp]:
  """x + c1 < c2 for every pair of edge constants and x near the dtype's bounds: where x + c1, or c2 - c1, wraps around."""
  lo, hi, sg = lo_of(dt), hi_of(dt), not dtypes.is_unsigned(dt)
  xs = [(hi - 2, hi), (0, hi), (0, 10), (hi // 2, hi // 2 + 3)] + ([(lo, lo + 2), (lo, hi), (-10, 0)] if sg else [])
  cs = [0, 1, 2, hi, hi - 1] + ([-1, -2, lo, lo + 1] if sg else [hi // 2 + 1])
  return [_n(Ops.CMPLT, dtypes.bool, _n(Ops.ADD, dt, Variable("i", *x, dt), _c(dt, c1)), _c(dt, c2)) for x in xs for c1 in cs for c2 in cs]

def corpus(matcher: PatternMatcher | None = None) -> list[UOp]:
  """The corpus's nodes (each once, in a deterministic order): the grammar's draws and the fixed shapes of every dtype,
  their sub-expressions, and (given `matcher`) every node the matcher builds on the way to their fixed points."""
  rng = random.Random(SEED)
  roots: list[UOp] = []
  for dt in DTYPES:
    b = _Builder(rng, dt)
    roots += _fixed(dt) + _compare_grid(dt)
    roots += [b.divmod_expr() for _ in range(N_DIVMOD)] + [b.nested_expr() for _ in range(N_NESTED)] + [b.misc_expr() for _ in range(N_MISC)] + \
      [b.big_expr() for _ in range(N_BIG)]
  nodes: dict[UOp, None] = {}
  for r in roots: nodes.update(r.toposort())
  if matcher is not None:
    for r in roots:
      track: list[tuple[str, UOp, UOp]] = []
      try: graph_rewrite(r, matcher, track=track)
      except Exception: pass  # a planted rule that loops or raises: the nodes built before it still count
      for _, before, after in track:
        for u in (before, after):
          if u not in nodes: nodes.update(u.toposort())
  return [u for u in nodes if u.op not in (Ops.CONST, Ops.DEFINE_VAR)]

# *** proving ***

def _fire(pat, fn, has_ctx: bool, u: UOp) -> UOp | None:
  """What the rule makes of u, as PatternMatcher.rewrite_named calls it: the first binding whose function returns a node."""
  for bound in pat.match(u, {}):
    ret = fn(ctx=None, **bound) if has_ctx else fn(**bound)
    if ret is not None and ret is not u: return ret
  return None

def _evaluate(u: UOp, values: dict[str, Any]) -> Any:
  """u at the counterexample's Variable values, by exec_alu (tinysched's constant folding), not by z3."""
  var_vals = {v: values[v.arg[0]] for v in u.toposort() if v.op is Ops.DEFINE_VAR and v.arg[0] in values}
  return sym_infer(u, var_vals)

CHUNK = 24  # claims per solver call: one call proves them all, or each is proven alone to find the false ones

def _claims(items: list[tuple[UOp, Any]]) -> tuple[smt.IntEncoding, list[Any], list[int]]:
  """The items' claims in one integer form, and which items it states. An item is (node, the node it must equal) or
  (node, (lo, hi)): its value in range."""
  enc, claims, idx = smt.IntEncoding(), [], []
  for n, (u, other) in enumerate(items):
    try:
      t = enc.add(u)
      if isinstance(other, UOp): claims.append(t == enc.add(other))
      elif u.dtype == dtypes.bool: claims.append(t == bool(other[0]) if bool(other[0]) == bool(other[1]) else smt.z3.BoolVal(True))
      else: claims.append(smt.z3.And(other[0] <= t, t <= other[1]))
      idx.append(n)
    except smt.Unsupported: continue
  return enc, claims, idx

def _one(u: UOp, other: Any, timeout_ms: int) -> smt.Verdict:
  if isinstance(other, UOp): return smt.prove_equal(u, other, timeout_ms, encoding="auto")
  return smt.prove_bounds(u, other[0], other[1], timeout_ms, encoding="auto")

def _prove_items(items: list[tuple[UOp, Any]], timeout_ms: int) -> list[smt.Verdict]:
  """A verdict per item, in order. CHUNK claims go to one solver call (its set-up, not the search, is most of a small
  proof's time); a chunk with a false claim, and an item the integer form cannot state, get one call per item (cheaper
  than halving: a satisfiable search over many claims is the slow kind)."""
  out: list[smt.Verdict] = []
  for k in range(0, len(items), CHUNK):
    chunk = items[k:k + CHUNK]
    enc, claims, idx = _claims(chunk)
    ok = set(idx) if claims and smt.prove(smt.z3.And(*claims), enc, timeout_ms).status == "proven" else set()
    out += [smt.Verdict("proven") if n in ok else _one(u, other, timeout_ms) for n, (u, other) in enumerate(chunk)]
  return out

def _canonical(u: UOp, other: Any, timeout_ms: int, enc: smt.IntEncoding | None = None) -> smt.Verdict | None:
  """The counterexample nearest 0: each free variable (by name, then the loaded values) as small in magnitude as the ones
  before allow, then the non-negative one. Unique, so every run (and z3 version) shows the same values; small values read
  best. None when the integer form cannot state it or the optimizer gives up (the solver's own model is shown then)."""
  z3 = smt.z3
  enc = enc if enc is not None else smt.IntEncoding()
  try:
    t = enc.add(u)
    if isinstance(other, UOp): claim = t == enc.add(other)
    elif u.dtype == dtypes.bool: claim = t == bool(other[0])
    else: claim = z3.And(other[0] <= t, t <= other[1])
  except smt.Unsupported: return None
  opt = z3.Optimize()
  opt.set("timeout", timeout_ms)
  opt.add(*enc.facts)
  opt.add(z3.Not(claim))
  loads = getattr(enc, "loads", {})
  for x in [enc.free[n] for n in sorted(enc.free)] + list(loads.values()):
    if z3.is_int(x): opt.minimize(z3.If(x >= 0, x, -x)); opt.minimize(-x)
  if opt.check() != z3.sat: return None
  m = opt.model()
  val = lambda e: smt._value(m, e)  # noqa: E731
  values = {n: val(x) for n, x in sorted(enc.free.items())}
  for (buf, idx), x in loads.items(): values[f"buf{buf}[{val(idx)}]"] = val(x)
  return smt.Verdict("counterexample", values, val(t), val(enc.terms[other]) if isinstance(other, UOp) else None)

_DTYPE_RANK = {dtypes.bool: 0, dtypes.int32: 0, dtypes.int64: 1}

def _size(u: UOp) -> tuple[int, int, int]:
  """How simple an instance reads: one over Variables before one of constants alone (which fold_constants would take
  first), int32 before int64 before unsigned, then fewer nodes."""
  topo = u.toposort()
  return (0 if any(x.op is Ops.DEFINE_VAR for x in topo) else 1, max(_DTYPE_RANK.get(x.dtype, 2) for x in topo), len(topo))

def _tally(p: RuleProof, items: list[tuple[UOp, Any]], errors: list[tuple[UOp, str]], timeout_ms: int) -> None:
  """Prove the items, count, and keep the simplest failure as the counterexample (its values the canonical ones)."""
  fails: list[tuple[tuple[int, int, int], int, UOp, Any, smt.Verdict | str]] = []
  for n, ((u, other), v) in enumerate(zip(items, _prove_items(items, timeout_ms))):
    if v.status == "proven": p.proven += 1
    elif v.status == "counterexample": fails.append((_size(u), n, u, other, v))
    else:
      p.unknown += 1
      if p.reason is None: p.reason = f"{v.reason} (on {u.render_sym()}" + (f" -> {other.render_sym()})" if isinstance(other, UOp) else ")")
  fails += [(_size(u), len(items) + n, u, None, err) for n, (u, err) in enumerate(errors)]
  p.refuted = len(fails)
  # the simplest failure whose counterexample exec_alu reproduces (a few tried): z3's word alone could be an encoding slip
  for _, _, u, other, fv in sorted(fails, key=lambda f: (f[0], f[1]))[:5]:
    if isinstance(fv, str):
      p.counterexample = {"matcher": p.matcher, "rule": p.rule, "dtype": _dtname(u.dtype), "before": u.render_sym(), "values": {}, "error": fv}
      return
    ce = _describe(p, u, other, _canonical(u, other, timeout_ms) or fv)
    if ce.get("confirmed") is not False:
      p.counterexample = ce
      return
  if fails:  # z3 and exec_alu disagree on every one tried: not a refutation, and not a proof
    p.unknown += p.refuted
    p.refuted = 0
    p.reason = f"z3 finds counterexamples that exec_alu does not reproduce (the encoding and exec_alu disagree), e.g. {ce}"

def _describe(p: RuleProof, u: UOp, other: Any, v: smt.Verdict) -> dict:
  """A counterexample as RuleProof keeps it, both sides evaluated again by exec_alu (`confirmed`: they differ there too)."""
  vars_ = {x.arg[0]: (x.arg[1], x.arg[2]) for x in list(u.toposort()) + (list(other.toposort()) if isinstance(other, UOp) else [])
           if x.op is Ops.DEFINE_VAR}
  ce: dict[str, Any] = {"matcher": p.matcher, "rule": p.rule, "dtype": _dtname(u.dtype), "values": dict(v.values), "ranges": vars_,
                        "before": u.render_sym(), "before_value": v.lhs}
  if isinstance(other, UOp): ce.update(after=other.render_sym(), after_value=v.rhs)
  else: ce.update(after=f"a value in [vmin, vmax] = [{other[0]}, {other[1]}]", after_value=f"[{other[0]}, {other[1]}]")
  if v.reason: ce["reason"] = v.reason
  try:
    ce["before_exec"] = _evaluate(u, v.values)
    if isinstance(other, UOp):
      ce["after_exec"] = _evaluate(other, v.values)
      ce["confirmed"] = ce["before_exec"] != ce["after_exec"]
    else: ce["confirmed"] = not (other[0] <= ce["before_exec"] <= other[1])
  except Exception as e: ce.update(confirmed=None, exec_error=f"{type(e).__name__}: {e}")
  return ce

def _dtname(dt: DType) -> str:
  return dt.name if not dtypes.is_int(dt) else f"{'u' if dtypes.is_unsigned(dt) else ''}int{8 * dt.itemsize}"

def _status(p: RuleProof, progress: Callable[[str], None] | None) -> None:
  p.status = "counterexample" if p.counterexample is not None else "unknown" if p.unknown else "proven" if p.instances else "unreached"
  if progress is not None: progress(f"{p.matcher}/{p.rule}: {p.status} ({p.proven}/{p.instances} instances)")

def _ill_formed(u: UOp, ret: UOp) -> str | None:
  """What makes a rule's result wrong whatever the values: another dtype, or a constant outside its dtype (its vmin/vmax
  would then be wrong for every rule after it)."""
  if ret.dtype != u.dtype: return f"the rule changed the dtype from {u.dtype} to {ret.dtype}"
  for x in ret.toposort():
    if x.op is Ops.CONST and (dtypes.is_int(x.dtype) or x.dtype == dtypes.bool) and \
       (type(x.arg) is not type(c := dtypes.as_const(x.arg, x.dtype)) or x.arg != c):
      return f"the rule built the constant {x.arg!r}, not a value of {x.dtype} (that is {c!r})"
  return None

# the rule functions as the modules defined them (at this import), to tell a replaced module attribute from a rule
_ORIGINAL: dict[tuple[str, str], Callable] = {(m.__name__, n): f for m in (SYM, FOLDS) for n, f in vars(m).items() if callable(f)}

def _current(fn: Callable, module: Any) -> Callable:
  """The rule function to prove: the matcher's own, unless the matcher still holds the module's original function and
  the module attribute of that name has been replaced since (a monkeypatched `symbolic.fold_mod`, which the matcher,
  holding the function object, would not see). A matcher rebuilt with another function keeps that one."""
  name = getattr(fn, "__name__", "")
  if _ORIGINAL.get((module.__name__, name)) is fn and callable(now := getattr(module, name, fn)): return now
  return fn

def _prove_matcher(pm: PatternMatcher, label: str, module: Any, nodes: list[UOp], timeout_ms: int, only: set[str] | None,
                   progress: Callable[[str], None] | None) -> list[RuleProof]:
  by_op: dict[Ops, list[UOp]] = {}
  for u in nodes: by_op.setdefault(u.op, []).append(u)
  out: dict[str, RuleProof] = {}
  for pat, fn, name, has_ctx in pm.rules:
    p = out.setdefault(name, RuleProof(label, name, "unreached"))
    if only is not None and name not in only: continue
    fn = _current(fn, module)
    items: list[tuple[UOp, Any]] = []
    errors: list[tuple[UOp, str]] = []
    for op in (pat.op if pat.op is not None else tuple(by_op)):
      for u in by_op.get(op, ()):
        try: ret: UOp | Exception | None = _fire(pat, fn, has_ctx, u)
        except Exception as e:  # the compiler would crash here: as bad as a wrong result
          ret = e
        if ret is None: continue
        p.instances += 1
        if isinstance(ret, UOp) and (bad := _ill_formed(u, ret)) is None: items.append((u, ret))
        elif isinstance(ret, UOp): errors.append((u, f"{bad}: {ret.render_sym()}"))
        else: errors.append((u, f"the rule raised {type(ret).__name__}: {ret}" if isinstance(ret, Exception) else
                                f"the rule returned a {type(ret).__name__}, not a UOp"))
    _tally(p, items, errors, timeout_ms)
    _status(p, progress)
  return list(out.values())

def _prove_ranges(nodes: list[UOp], timeout_ms: int, progress: Callable[[str], None] | None) -> RuleProof:
  """Every node's value lies in [vmin, vmax] (uop._range): the premise of every rule that decides on a range. Nodes whose
  range is their whole dtype (or a bool's False..True) claim nothing."""
  p = RuleProof("uop", "vmin_vmax", "unreached")
  items = [(u, (u.vmin, u.vmax)) for u in nodes if u.op in GroupOp.ALU and
           (dtypes.is_int(u.dtype) and (u.vmin, u.vmax) != (dtypes.min(u.dtype), dtypes.max(u.dtype)) or u.dtype == dtypes.bool and u.vmin == u.vmax)]
  p.instances = len(items)
  _tally(p, items, [], timeout_ms)
  _status(p, progress)
  return p

# *** closed-form reduces (codegen/folds.py) ***

FOLD_SIZES = (1, 2, 3, 5)  # the loop lengths the closed forms are proven for (both sides' sums written out)

class _MemEncoding(smt.IntEncoding):
  """The integer form with memory: an integer load of buffer b at index i is b's array at i (so loads of one address are
  one value, any value of the dtype), and a masked load is 0 where its mask is false, as the lowerer's loads are."""
  def __init__(self) -> None:
    super().__init__()
    self.arrays: dict[Any, Any] = {}
    self.loads: dict[tuple[Any, Any], Any] = {}  # (buffer, index term): the loaded value (a counterexample shows them)

  def _one(self, u: UOp) -> Any:
    if u.op in (Ops.DEFINE_GLOBAL, Ops.INDEX): return smt.z3.IntVal(0)  # an address: only a load's own form reads it
    if u.op is Ops.LOAD and dtypes.is_int(u.dtype) and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.DEFINE_GLOBAL:
      z3, (buf, idx) = smt.z3, u.src[0].src
      if (a := self.arrays.get(buf.arg)) is None: a = self.arrays[buf.arg] = z3.Array(f"buf{buf.arg}", z3.IntSort(), z3.IntSort())
      v = self.loads.setdefault((buf.arg, self.terms[idx]), z3.Select(a, self.terms[idx]))
      self.facts += [dtypes.min(u.dtype) <= v, v <= dtypes.max(u.dtype)]
      self.iv[u] = (lo_of(u.dtype), hi_of(u.dtype))
      return z3.If(self.terms[u.src[1]], v, 0) if len(u.src) > 1 else v
    return super()._one(u)

class _NotUnrollable(Exception): pass

def _unroll(u: UOp) -> UOp:
  """u with every sum over loops written out: REDUCE_AXIS(body, R...) of op ADD is body summed over every value of the
  Rs (in its dtype, from 0), for loops of constant bounds."""
  while reds := [x for x in u.toposort() if x.op is Ops.REDUCE_AXIS]:
    red = reds[-1]  # one no other reduce here is inside (its body may hold reduces over its own loops)
    if red.arg[0] is not Ops.ADD: raise _NotUnrollable(f"a reduce of {red.arg[0]}")
    vals: list[dict[UOp, UOp]] = [{}]
    for r in red.src[1:]:
      if r.op is not Ops.RANGE or r.src[0].op is not Ops.CONST or r.src[1].op is not Ops.CONST: raise _NotUnrollable("a loop of symbolic length")
      vals = [{**m, r: UOp.const(r.dtype, i)} for m in vals for i in range(r.src[0].arg, r.src[1].arg)]
    total = UOp.const(red.dtype, 0)
    for m in vals: total = _n(Ops.ADD, red.dtype, total, _unroll(red.src[0].substitute(m) if m else red.src[0]))
    u = u.substitute({red: total})
  return u

def _fold_corpus() -> list[UOp]:
  """Sums over loops as the lowerer writes them (folds.py): REDUCE_AXIS(body, R0[, R1]) with arg (ADD, "loops"), R a
  RANGE of each length in FOLD_SIZES, over a thread id, a Variable and integer loads; bodies invariant in R, masked
  constants (arange, cumsum: clauses r < g + 1, r > g, r == g, a*r + b < c*g, negated, conjoined) and one-point masks
  over loads (a gather). Accumulators int32 and int64 (bool and float sums: LISTED)."""
  IDX, i32, B = dtypes.int64, dtypes.int32, dtypes.bool
  g = UOp(Ops.SPECIAL, IDX, (), ("gidx0", 6, "global"))
  v = Variable("n", 0, 4, IDX)
  W = UOp(Ops.DEFINE_GLOBAL, i32.ptr(), (), 1)
  T = _c(B, True)
  def ld(idx: UOp, valid: UOp | None = None) -> UOp: return _n(Ops.LOAD, i32, _n(Ops.INDEX, W.dtype, W, idx), *(() if valid is None else (valid,)))
  def lt(a: UOp, b: UOp) -> UOp: return _n(Ops.CMPLT, B, a, b)
  def nt(c: UOp) -> UOp: return _n(Ops.CMPNE, B, c, T)
  def eq(a: UOp, b: UOp) -> UOp: return nt(_n(Ops.CMPNE, B, a, b))
  def cast(x: UOp, dt: DType) -> UOp: return x if x.dtype == dt else _n(Ops.CAST, dt, x)
  out: list[UOp] = []
  for n in FOLD_SIZES:
    r, r2 = UOp(Ops.RANGE, IDX, (_c(IDX, 0), _c(IDX, n)), ("fold", 0)), UOp(Ops.RANGE, IDX, (_c(IDX, 0), _c(IDX, 2)), ("fold", 1))
    c1 = lambda k: _c(IDX, k)  # noqa: E731
    on_r = [lt(r, g + c1(1)), lt(g, r), nt(lt(r, g)), eq(r, g), eq(r + c1(1), g), lt(r * c1(2) + c1(1), g * c1(3)), lt(g - c1(2), r * c1(3)),
            nt(lt(r * c1(-2), g - c1(3))), eq(r * c1(2), g), lt(r, v), lt(cast(r, i32), _c(i32, 3)), lt(r, c1(n - 1)), lt(c1(1), r)]
    free = [lt(g, c1(4)), lt(v, g)]
    for acc in (i32, IDX):
      consts = [_c(acc, 1), _c(acc, 3), _c(acc, -2), cast(g, acc), cast(ld(g), acc), cast(v * c1(2), acc)]
      for k, cl in enumerate(on_r):
        c = consts[k % len(consts)]
        out.append(UOp(Ops.REDUCE_AXIS, acc, (_n(Ops.WHERE, acc, cl, c, _c(acc, 0)), r), (Ops.ADD, FOLDS.LOOPS)))
        cl2 = _n(Ops.AND, B, cl, on_r[(k + 3) % len(on_r)] if k % 2 else free[k % 2])
        out.append(UOp(Ops.REDUCE_AXIS, acc, (_n(Ops.WHERE, acc, cl2, consts[(k + 1) % len(consts)], _c(acc, 0)), r), (Ops.ADD, FOLDS.LOOPS)))
        out.append(UOp(Ops.REDUCE_AXIS, acc, (_n(Ops.WHERE, acc, cl, cast(ld(r * c1(3) + g), acc), _c(acc, 0)), r), (Ops.ADD, FOLDS.LOOPS)))
        out.append(UOp(Ops.REDUCE_AXIS, acc, (cast(ld(r + g, cl), acc), r), (Ops.ADD, FOLDS.LOOPS)))
      for c in consts:
        out.append(UOp(Ops.REDUCE_AXIS, acc, (c, r), (Ops.ADD, FOLDS.LOOPS)))
        out.append(UOp(Ops.REDUCE_AXIS, acc, (_n(Ops.WHERE, acc, lt(r2, g), c, _c(acc, 0)), r, r2), (Ops.ADD, FOLDS.LOOPS)))
      out.append(UOp(Ops.REDUCE_AXIS, acc, (_n(Ops.WHERE, acc, eq(r, g), cast(ld(r * c1(4) + r2), acc), _c(acc, 0)), r, r2), (Ops.ADD, FOLDS.LOOPS)))
      out.append(UOp(Ops.REDUCE_AXIS, acc, (cast(ld(g),  acc),), (Ops.ADD, FOLDS.LOOPS)))
  return out

def _prove_folds(pm: PatternMatcher, timeout_ms: int, only: set[str] | None, progress: Callable[[str], None] | None) -> list[RuleProof]:
  """reduce_folds' rules on the fold corpus (closed under the matcher), each result against the written-out sums."""
  roots = _fold_corpus()
  nodes: dict[UOp, None] = {r: None for r in roots}
  for r in roots:
    track: list[tuple[str, UOp, UOp]] = []
    try: graph_rewrite(r, pm, track=track)
    except Exception: pass
    for _, before, after in track:
      for x in (before, after):
        if x.op is Ops.REDUCE_AXIS: nodes.setdefault(x, None)
  out: dict[str, RuleProof] = {}
  for pat, fn, name, has_ctx in pm.rules:
    p = out.setdefault(name, RuleProof("reduce_folds", name, "unreached"))
    if only is not None and name not in only: continue
    fn = _current(fn, FOLDS)
    fails: list[tuple[tuple[int, int, int], int, dict]] = []
    for k, u in enumerate(nodes):
      try: ret: UOp | Exception | None = _fire(pat, fn, has_ctx, u)
      except Exception as e: ret = e
      if ret is None: continue
      p.instances += 1
      if not isinstance(ret, UOp) or ret.dtype != u.dtype:
        what = f"raised {type(ret).__name__}: {ret}" if isinstance(ret, Exception) else "returned no node of the reduce's dtype"
        fails.append((_size(u), k, {"u": u, "error": f"the rule {what}"}))
        continue
      try: a, b = _unroll(u), _unroll(ret)
      except _NotUnrollable as e:
        p.unknown += 1
        p.reason = p.reason or f"{e} (on {_show(u)})"
        continue
      enc = _MemEncoding()
      try: v = smt.prove(enc.add(a) == enc.add(b), enc, timeout_ms)
      except smt.Unsupported as e: v = smt.Verdict("unknown", reason=str(e))
      if v.status == "proven": p.proven += 1
      elif v.status == "counterexample": fails.append((_size(u), k, {"u": u, "ret": ret, "a": a, "b": b}))
      else:
        p.unknown += 1
        p.reason = p.reason or f"{v.reason} (on {_show(u)})"
    p.refuted = len(fails)
    if fails:
      f = min(fails, key=lambda f: (f[0], f[1]))[2]
      ce = p.counterexample = {"matcher": "reduce_folds", "rule": name, "dtype": _dtname(f["u"].dtype), "before": _show(f["u"]), "values": {}}
      if "error" in f: ce["error"] = f["error"]
      else:
        cv = _canonical(f["a"], f["b"], timeout_ms, _MemEncoding())
        ce.update(after=_show(f["ret"]), loop_lengths=[x.src[1].arg for x in f["u"].src[1:]])
        if cv is not None: ce.update(values=cv.values, before_value=cv.lhs, after_value=cv.rhs)
    _status(p, progress)
    if p.status == "proven":
      p.reason = f"bounded: proven for loop lengths {', '.join(map(str, FOLD_SIZES))} (and 2 for a second loop), every value of the rest"
  return list(out.values())

def _show(u: UOp) -> str:
  """A reduce, readable: REDUCE_AXIS isn't infix text, so its body and loops are written out."""
  if u.op is Ops.REDUCE_AXIS:
    if len(u.src) == 1: return f"sum({_show(u.src[0])})"
    return f"sum({_show(u.src[0])} for " + ", ".join(f"{_show(r)} in [{_show(r.src[0])}, {_show(r.src[1])})" for r in u.src[1:]) + ")"
  if u.op is Ops.LOAD:
    return f"buf{u.src[0].src[0].arg}[{_show(u.src[0].src[1])}]" + (f" if {_show(u.src[1])} else 0" if len(u.src) > 1 else "")
  if u.op is Ops.CAST: return f"({u.dtype.name}){_show(u.src[0])}"
  if u.op is Ops.RANGE: return f"r{u.arg[1]}" if isinstance(u.arg, tuple) and len(u.arg) > 1 else u.render_sym()
  if u.op in (Ops.SPECIAL, Ops.CONST, Ops.DEFINE_VAR): return u.render_sym()
  ops = {Ops.ADD: "+", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.AND: "&", Ops.OR: "|"}
  if u.op in ops and len(u.src) == 2: return f"({_show(u.src[0])}{ops[u.op]}{_show(u.src[1])})"
  if u.op is Ops.WHERE: return f"({_show(u.src[0])} ? {_show(u.src[1])} : {_show(u.src[2])})"
  if u.op is Ops.MAX: return f"max({_show(u.src[0])}, {_show(u.src[1])})"
  return f"{u.op.name}({', '.join(_show(x) for x in u.src)})"

def _finish(ps: list[RuleProof], only: set[str] | None) -> list[RuleProof]:
  for p in ps:
    if (p.matcher, p.rule) in LISTED and p.status in ("unreached", "proven", "unknown"):
      p.status, p.reason = "listed", LISTED[(p.matcher, p.rule)]
    elif p.status == "unreached" and p.reason is None:
      p.reason = "no corpus node makes this rule fire" if only is None or p.rule in only else "not selected"
  return sorted(ps, key=lambda p: (p.matcher, p.rule))

def prove_rules(timeout_ms: int = 5000, progress: Callable[[str], None] | None = None, only: Iterable[str] | None = None) -> list[RuleProof]:
  """Prove every rule of the symbolic simplifier (tinysched.symbolic.symbolic, read now: a planted rule is seen), the value
  ranges (uop/vmin_vmax) and the closed-form reduces (the lowerer's reduce_folds) on the corpus. `only`: the rule names to
  prove (the rest are reported `unreached`, reason "not selected"). Sorted by (matcher, rule); the same in every run."""
  if not smt.available(): raise ProofUnavailable("proving rules needs z3: pip install z3-solver (the `proofs` extra)")
  sel = set(only) if only is not None else None
  pm = SYM.symbolic
  nodes = corpus(pm)
  if progress is not None: progress(f"corpus: {len(nodes)} nodes")
  out = _prove_matcher(pm, "symbolic", SYM, nodes, timeout_ms, sel, progress)
  if sel is None or "vmin_vmax" in sel: out.append(_prove_ranges(nodes, timeout_ms, progress))
  if sel is None or sel & set(lowerer.reduce_folds.rule_names()): out += _prove_folds(lowerer.reduce_folds, timeout_ms, sel, progress)
  else: out += [RuleProof("reduce_folds", n, "unreached") for n in dict.fromkeys(lowerer.reduce_folds.rule_names())]
  return _finish(out, sel)

def prove_instances(nodes: Iterable[UOp], rule: str, timeout_ms: int = 5000) -> RuleProof:
  """One rule of the symbolic simplifier (the matcher tinysched.symbolic holds now) on the given nodes only: what it makes
  of each, proven or refuted as prove_rules does. For a shape the corpus may not hold."""
  if not smt.available(): raise ProofUnavailable("proving rules needs z3: pip install z3-solver (the `proofs` extra)")
  if rule not in SYM.symbolic.rule_names(): raise KeyError(f"symbolic has no rule {rule!r}")
  ps = _prove_matcher(SYM.symbolic, "symbolic", SYM, [u for n in nodes for u in n.toposort()], timeout_ms, {rule}, None)
  return _finish([p for p in ps if p.rule == rule], {rule})[0]

def format_counterexample(p: RuleProof) -> str:
  """The counterexample of a refuted rule, readable: Variable values (with ranges), both sides and their values."""
  ce = p.counterexample
  if ce is None: return f"{p.matcher}/{p.rule}: {p.status}" + (f" ({p.reason})" if p.reason else "")
  lines = [f"{p.matcher}/{p.rule}: counterexample ({ce.get('dtype', '?')})"]
  if "error" in ce: return "\n".join(lines + [f"  on {ce.get('before')}: {ce['error']}"])
  rng = ce.get("ranges", {})
  vals = ", ".join(f"{k}={v}" + (f" (in [{rng[k][0]}, {rng[k][1]}])" if k in rng else "") for k, v in ce["values"].items())
  lines.append(f"  with {vals or 'any values'}")
  bv, av = ce.get("before_exec", ce.get("before_value")), ce.get("after_exec", ce.get("after_value"))
  lines += [f"  before: {ce['before']} = {bv}", f"  after:  {ce['after']} = {av}"]
  if ce.get("confirmed") is False: lines.append("  (exec_alu evaluates both sides equal: the z3 encoding and exec_alu disagree)")
  elif ce.get("reason"): lines.append(f"  ({ce['reason']})")
  return "\n".join(lines)

__all__ = ["RuleProof", "LISTED", "prove_rules", "prove_instances", "format_counterexample", "corpus", "ProofUnavailable"]
