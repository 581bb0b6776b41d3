import itertools
import pytest
from hypothesis import given, settings, strategies as st
from tinysched.dtype import dtypes
from tinysched.ops import Ops
from tinysched.uop import UOp, Variable, sym_infer
from tinysched.helpers import cdiv, cmod

def ci(x) -> UOp: return UOp.const(dtypes.int32, x)
def raw(op: Ops, *src: UOp) -> UOp: return UOp(op, dtypes.int32 if op not in (Ops.CMPLT, Ops.CMPNE) else dtypes.bool, src)  # no eager folding

a, b, c = Variable("a", 0, 10), Variable("b", 0, 3), Variable("c", 0, 7)
n, r, g = Variable("n", -5, 5), Variable("r", 0, 15), Variable("g", 0, 63)

# (expression, its exact simplified form)
TABLE = [
  # constant folding (built without UOp.alu's eager folding); IDIV/MOD truncate like C
  (raw(Ops.ADD, ci(3), ci(4)), "7"),
  (raw(Ops.IDIV, ci(7), ci(-2)), "-3"),
  (raw(Ops.MOD, ci(-7), ci(3)), "-1"),
  (raw(Ops.MUL, raw(Ops.ADD, ci(2), ci(3)), a), "(a*5)"),
  # identities
  (a + 0, "a"), (0 + a, "a"), (a * 1, "a"), (1 * a, "a"), (a * 0, "0"), (a * b * 0, "0"),
  (a // 1, "a"), (a % 1, "0"), (-(-a), "a"), (a.maximum(a), "a"),
  # like terms and constants
  (a + a, "(a*2)"), (a * 2 + a * 3, "(a*5)"), ((a + 3) + 4, "(a+7)"), (3 + a, "(a+3)"), (a + 1 - 1, "a"),
  ((a + b) - b, "a"), (a * 3 - a * 3, "0"), (a * 2 * 3, "(a*6)"), ((a + b) + (b + a), "((a*2)+(b*2))"),
  # distribution of constants
  ((a + 2) * 3, "((a*3)+6)"), ((a + b) * 3, "((a*3)+(b*3))"), (2 * (a + b) + a, "((a*3)+(b*2))"),
  ((b + a) * 2 - a * 2, "(b*2)"),
  # division and modulo folded by ranges
  ((a * 4 + b) // 4, "a"), ((a * 4 + b) % 4, "b"),
  ((a * 8 + b * 2) // 4, "((a*2)+(b//2))"), ((a * 8 + b * 2) % 4, "((b*2)%4)"),
  ((a * 4 + b + 4) // 4, "(a+1)"), ((a * 6 + 3) // 3, "((a*2)+1)"), ((a * 2 + 1) % 2, "1"), ((a * 4) % 2, "0"),
  ((a + 4) // 4, "((a//4)+1)"), ((a + 4) % 4, "(a%4)"),
  ((a // 2) // 3, "(a//6)"), (a // 2 // 2 // 2, "(a//8)"),
  (b % 4, "b"), (b // 4, "0"), ((a % 8) % 4, "(a%4)"), ((a % 4) % 8, "(a%4)"), ((a % 12) % 4, "(a%4)"),
  ((g + b * 64) % 64, "g"), ((g + b * 64) // 64, "b"),
  (((a * 4 + b) // 4) * 4 + (a * 4 + b) % 4, "((a*4)+b)"),
  # a value split by a constant and put back together
  ((a // 4) * 4 + a % 4, "a"), (a % 4 + (a // 4) * 4, "a"),
  (((g // 4) % 4) * 4 + g % 4, "(g%16)"), (((g // 4) % 4) * 4 + g % 4 + (g // 16) * 16, "g"),
  ((r // 4) * 4 + r % 4 + a * 16, "(r+(a*16))"), (((a // 2) % 4) * 2 + a % 2 + 5, "((a%8)+5)"),
  ((n // 4) * 4 + n % 4, "n"),  # C division: n == (n/4)*4 + n%4 for negative n too
  # ... but only with the matching coefficient and divisors
  ((a // 4) * 2 + a % 4, "(((a//4)*2)+(a%4))"), ((a // 3) * 3 + a % 4, "(((a//3)*3)+(a%4))"),
  (((g // 4) % 4) * 2 + g % 4, "((((g//4)%4)*2)+(g%4))"), (((g // 4) % 4) * 4 + g % 8, "((((g//4)%4)*4)+(g%8))"),
  ((a % 6) % 4, "((a%6)%4)"), ((g % 12) % 8, "((g%12)%8)"), (((a + 2) % 6) % 3, "((a+2)%3)"),
  # non-negative dividends with negative coefficients
  ((10 - a) // 4, "(((a*-1)+10)//4)"), ((10 - a) % 4, "(((a*3)+2)%4)"), ((12 - a * 2) // 4, "(((a*-2)+12)//4)"),
  # negative dividends are left alone (truncation is not floor)
  (n // 2, "(n//2)"), (n % 3, "(n%3)"), ((n * 4 + b) // 4, "(((n*4)+b)//4)"), ((n * 4 + b) % 4, "(((n*4)+b)%4)"),
  # comparisons decided by ranges, and moving constants
  (b < 4, "True"), (b < 3, "(b<3)"), (b < 2, "(b<2)"), (a < 11, "True"), (a < 0, "False"), (a >= 0, "True"), (n < -5, "False"),
  ((a + 1) < 5, "(a<4)"), ((a - 1) < 5, "(a<6)"), ((b + 1) < 5, "True"), (a.ne(11), "True"), ((a * 2).ne(-1), "True"),
  # where with a constant condition
  ((b < 4).where(a, c), "a"), ((a < 0).where(a, c), "c"), ((b < 2).where(a, a), "a"), ((b < 2).where(a, c), "((b<2) ? a : c)"),
  # max (and min) decided by ranges
  (b.maximum(4), "4"), (a.maximum(b + 11), "(b+11)"), (a.maximum(0), "a"), (a.minimum(20), "a"), (n.maximum(0), "max(n, 0)"),
  (a.maximum(b), "max(a, b)"),
]

def _points(*es: UOp):
  vs = sorted({v for e in es for v in e.toposort() if v.op is Ops.DEFINE_VAR}, key=lambda v: v.arg)
  for vals in itertools.product(*[range(v.arg[1], v.arg[2] + 1) for v in vs]): yield dict(zip(vs, vals))

@pytest.mark.parametrize("e,want", TABLE, ids=[f"{i}:{w}" for i, (_, w) in enumerate(TABLE)])
def test_simplify_table(e: UOp, want: str):
  s = e.simplify()
  assert s.render_sym() == want
  assert s.simplify() is s  # a fixed point
  for p in _points(e):
    assert sym_infer(s, p) == sym_infer(e, p), p
    assert s.vmin <= sym_infer(s, p) <= s.vmax

def test_table_is_big_enough():
  assert len(TABLE) >= 30 and len({w for _, w in TABLE}) >= 30

def test_simplify_is_deterministic_and_shares():
  e = (a * 4 + b) // 4 + (a * 4 + b) % 4
  assert e.simplify() is e.simplify() is a + b
  assert ((c + a) * 2).simplify() is ((c + a) * 2).simplify()

def test_float_identities_and_no_int_rules_on_floats():
  x = UOp(Ops.DEFINE_VAR, dtypes.float32, (), ("x", 0, 1))
  assert (x + 0.0).simplify() is x and (x * 1.0).simplify() is x
  assert (x * 0.0).simplify() is x * 0.0  # x*0 is not 0 for x = inf or nan
  assert (x + x).simplify() is x + x
  assert ((x + 1.0) * 2.0).simplify() is (x + 1.0) * 2.0

def test_wraparound_not_assumed_away():
  x = Variable("x", 0, 127, dtypes.int8)
  e = (x + 1) < 0  # true for x = 127: 127 + 1 wraps to -128
  s = e.simplify()
  assert sym_infer(s, {x: 127}) is True and sym_infer(s, {x: 0}) is False
  y = Variable("y", -1, 5)
  e2 = y.cast(dtypes.uint8) < 10
  assert all(sym_infer(e2.simplify(), p) == sym_infer(e2, p) for p in _points(e2))

# *** property: simplify() preserves the value at every point ***

def _exprs():
  leaf = st.one_of(st.tuples(st.just("var"), st.integers(0, 2)), st.tuples(st.just("const"), st.integers(-6, 12)))
  def grow(kids):
    return st.one_of(
      st.tuples(st.sampled_from(("+", "-", "*", "max", "min")), kids, kids),
      st.tuples(st.sampled_from(("//", "%")), kids, st.sampled_from((1, 2, 3, 4, 6, 8, 16))),
      st.tuples(st.just("split"), kids, st.sampled_from((2, 3, 4)), st.sampled_from((2, 4, 0)), st.sampled_from((0, 0, 1, -1))),
      st.tuples(st.just("relu"), kids),
      st.tuples(st.just("where"), kids, st.integers(-3, 8), kids, kids),
    )
  return st.recursive(leaf, grow, max_leaves=16)

def _build(t, vs):
  """The UOp of tree t, and a python function computing its value with C division."""
  k = t[0]
  if k == "var": return vs[t[1] % len(vs)], (lambda env, i=t[1] % len(vs): env[i])
  if k == "const": return ci(t[1]), (lambda env, v=t[1]: v)
  if k in ("//", "%"):
    (x, fx), d = _build(t[1], vs), t[2]
    return (x // d, lambda env: cdiv(fx(env), d)) if k == "//" else (x % d, lambda env: cmod(fx(env), d))
  if k == "split":  # x split by d (and e) the way index expressions do: d*(x//d) + x%d, or d*((x//d)%e) + x%d
    (x, fx), d, e, m = _build(t[1], vs), t[2], t[3], t[2] + t[4]  # m: the coefficient, sometimes not d
    if e == 0: return (x // d) * m + x % d, lambda env: cdiv(fx(env), d) * m + cmod(fx(env), d)
    return ((x // d) % e) * m + x % d, lambda env: cmod(cdiv(fx(env), d), e) * m + cmod(fx(env), d)
  if k == "relu":
    x, fx = _build(t[1], vs)
    return x.maximum(0), lambda env: max(fx(env), 0)
  if k == "where":
    (cx, fc), (x, fx), (y, fy) = _build(t[1], vs), _build(t[3], vs), _build(t[4], vs)
    return (cx < t[2]).where(x, y), lambda env: fx(env) if fc(env) < t[2] else fy(env)
  (x, fx), (y, fy) = _build(t[1], vs), _build(t[2], vs)
  return {"+": (x + y, lambda env: fx(env) + fy(env)), "-": (x - y, lambda env: fx(env) - fy(env)),
          "*": (x * y, lambda env: fx(env) * fy(env)), "max": (x.maximum(y), lambda env: max(fx(env), fy(env))),
          "min": (x.minimum(y), lambda env: min(fx(env), fy(env)))}[k]

@settings(max_examples=500, deadline=None)
@given(_exprs(), st.lists(st.tuples(st.integers(-3, 4), st.integers(0, 6)), min_size=2, max_size=3))
def test_simplify_preserves_value(tree, ranges):
  vs = [Variable(name, lo, lo + w) for name, (lo, w) in zip("xyz", ranges)]
  e, f = _build(tree, vs)
  s = e.simplify()
  assert s.simplify() is s
  for vals in itertools.product(*[range(v.arg[1], v.arg[2] + 1) for v in vs]):
    env = dict(zip(vs, vals))
    want = f(vals)
    assert sym_infer(e, env) == want, (e.render_sym(), vals)
    got = sym_infer(s, env)
    assert got == want, (e.render_sym(), s.render_sym(), vals)
    assert s.vmin <= got <= s.vmax, (s.render_sym(), vals)
