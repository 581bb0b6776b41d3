import gc, itertools, math, os, pickle, subprocess, sys, weakref
import pytest
from tinysched.dtype import dtypes
from tinysched.ops import Ops
from tinysched.uop import UOp, Variable, resolve, smax, smin, ssimplify, sym_infer, stable_repr, exec_alu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
def ci(x: int) -> UOp: return UOp.const(dtypes.int32, x)

# *** interning ***

def test_same_args_same_object():
  a, b = Variable("a", 0, 10), Variable("a", 0, 10)
  assert a is b
  assert (a + 1) * 3 is (a + 1) * 3
  assert UOp(Ops.SINK, dtypes.void, (a, ci(2))) is UOp(Ops.SINK, dtypes.void, (a, ci(2)))
  assert UOp(Ops.VIEW, dtypes.float32, (), ((1, 2), "x")) is UOp(Ops.VIEW, dtypes.float32, (), ((1, 2), "x"))

def test_make_uop_is_the_constructor():
  # the rewrite engine builds nodes through make_uop (the metaclass call without the class call's dispatch): the same
  # node as UOp(...), found or new, with every argument kind interned the same way
  from tinysched.uop import make_uop
  a = Variable("a", 0, 10)
  for args in [(Ops.ADD, dtypes.int32, (a, ci(1))), (Ops.CONST, dtypes.float32, (), -0.0), (Ops.CONST, dtypes.bool, (), True),
               (Ops.VIEW, dtypes.void, (), ((1, 2), "x")), (Ops.SINK,)]:
    new = make_uop(*args)
    assert new is UOp(*args) and make_uop(*args) is new and type(new) is UOp
  assert make_uop(Ops.CONST, dtypes.int32, (), 1) is not make_uop(Ops.CONST, dtypes.int32, (), True)

def test_different_content_different_object():
  a = Variable("a", 0, 10)
  assert Variable("a", 0, 11) is not a and Variable("b", 0, 10) is not a and Variable("a", 0, 10, dtypes.int64) is not a
  assert UOp(Ops.ADD, dtypes.int32, (a, ci(1))) is not UOp(Ops.ADD, dtypes.int32, (ci(1), a))  # source order matters
  assert UOp.const(dtypes.int32, 1) is not UOp.const(dtypes.int64, 1)

def test_float_consts_interned_by_bits():
  pz, nz = UOp(Ops.CONST, dtypes.float32, (), 0.0), UOp(Ops.CONST, dtypes.float32, (), -0.0)
  assert pz is not nz and math.copysign(1, nz.arg) < 0 and math.copysign(1, pz.arg) > 0
  assert UOp.const(dtypes.float32, -0.0) is nz
  n1, n2 = UOp.const(dtypes.float32, float("nan")), UOp.const(dtypes.float32, math.nan)
  assert n1 is n2 and math.isnan(n1.arg)  # nan != nan, but one node all the same
  assert UOp.const(dtypes.float32, math.inf) is UOp.const(dtypes.float32, float("inf"))
  assert UOp(Ops.VIEW, dtypes.float32, (), (0.0, 1)) is not UOp(Ops.VIEW, dtypes.float32, (), (-0.0, 1))
  assert UOp(Ops.VIEW, dtypes.float32, (), (math.nan,)) is UOp(Ops.VIEW, dtypes.float32, (), (float("nan"),))

def test_int_float_bool_args_distinct():
  # same dtype, args that compare equal in python: still three different nodes
  nodes = [UOp(Ops.CONST, dtypes.int32, (), v) for v in (1, 1.0, True)]
  assert len({id(n) for n in nodes}) == 3
  assert [type(n.arg) for n in nodes] == [int, float, bool]
  assert len({n.key for n in nodes}) == 3
  t = [UOp(Ops.VIEW, dtypes.int32, (), (v, 2)) for v in (1, 1.0, True)]
  assert len({id(n) for n in t}) == 3 and len({n.key for n in t}) == 3
  assert UOp(Ops.CONST, dtypes.int32, (), 0) is not UOp(Ops.CONST, dtypes.int32, (), False)

def test_cache_is_weak():
  u = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("weak_cache_probe", 0, 1234567))
  r = weakref.ref(u)
  del u
  gc.collect()
  assert r() is None

# *** immutability, pickling ***

def test_immutable():
  u = Variable("a", 0, 10) + 1
  for name, val in (("op", Ops.MUL), ("dtype", dtypes.int64), ("src", ()), ("arg", 3)):
    with pytest.raises(AttributeError, match="immutable"): setattr(u, name, val)
    with pytest.raises(AttributeError, match="immutable"): delattr(u, name)
  assert u.op is Ops.ADD and u.dtype is dtypes.int32 and len(u.src) == 2 and u.arg is None

def test_pickling_raises():
  u = Variable("a", 0, 10) * 2
  with pytest.raises(TypeError, match="not picklable"): pickle.dumps(u)
  with pytest.raises(TypeError): pickle.dumps([ci(1)])

def test_no_truth_value():
  with pytest.raises(TypeError, match="resolve"): bool(Variable("a", 0, 10) < 3)

# *** key: a process-independent content hash ***

_GRAPH_SCRIPT = r'''
import math
from tinysched.dtype import dtypes
from tinysched.ops import Ops
from tinysched.uop import UOp, Variable
f = dtypes.float32
a, n = Variable("a", 0, 10), Variable("n", -5, 5, dtypes.int64)
consts = [UOp.const(f, v) for v in (1.5, 0.1, -0.0, 0.0, math.inf, -math.inf, math.nan, 1e300, 2.5e-310)]
consts += [UOp(Ops.CONST, dtypes.int32, (), v) for v in (1, 1.0, True, -7)]
idx = ((a * 4 + 3) // 2) % 5
mixed = UOp(Ops.VIEW, f, (consts[0],), ((1, 2.0, -0.0, None, True), ("s", "t"), (a, n.bind(3)), Ops.ADD, dtypes.half, ()))
red = UOp(Ops.REDUCE_AXIS, f, (mixed,), (Ops.MAX, (0, 1)))
sink = UOp(Ops.SINK, dtypes.void, tuple(consts) + (idx, red, red.alu(Ops.ADD, consts[6]), n.bind(3), idx.cast(dtypes.int64)))
for u in sink.toposort(): print(u.key)
print(sink.pretty())
'''

def _run_graph_script(seed: str) -> bytes:
  env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
  return subprocess.run([sys.executable, "-c", _GRAPH_SCRIPT], env=env, capture_output=True, check=True, cwd=ROOT).stdout

def test_key_and_pretty_identical_across_processes():
  outs = [_run_graph_script(seed) for seed in ("0", "1", "4242")]
  assert outs[0] == outs[1] == outs[2]
  lines = outs[0].decode().splitlines()
  keys = [x for x in lines if len(x) == 64 and all(c in "0123456789abcdef" for c in x)]
  assert len(keys) > 20 and len(set(keys)) == len(keys)  # every distinct node gets a distinct key
  # and this process agrees
  ns: dict = {}
  import contextlib, io
  buf = io.StringIO()
  with contextlib.redirect_stdout(buf): exec(_GRAPH_SCRIPT, ns)
  assert buf.getvalue().encode() == outs[0]

def test_key_distinguishes_content():
  a = Variable("a", 0, 10)
  us = [ci(1), UOp.const(dtypes.int64, 1), UOp(Ops.CONST, dtypes.int32, (), True), UOp.const(dtypes.float32, 0.0),
        UOp.const(dtypes.float32, -0.0), a + 1, 1 + a, a * 1, Variable("a", 0, 11), a.bind(3), a.bind(4)]
  assert len({u.key for u in us}) == len(us)
  assert (a + 1).key == UOp(Ops.ADD, dtypes.int32, (a, ci(1))).key

def test_stable_repr():
  assert stable_repr((1, 2.0, -0.0, math.nan, math.inf, None, True, "x", (3,))) == "(1, 2.0, -0.0, nan, inf, None, True, 'x', (3,))"
  assert stable_repr(Ops.ADD) == "Ops.ADD" and stable_repr(dtypes.float32) == "dtypes.float"
  assert stable_repr(Variable("a", 0, 5) + 1) == "(a+1)"
  with pytest.raises(TypeError, match="no stable representation"): stable_repr({1, 2})

# *** graph walking and printing ***

def test_toposort_order():
  a, b = Variable("a", 0, 10), Variable("b", 0, 10)
  x = UOp(Ops.ADD, dtypes.int32, (a, b))
  y = UOp(Ops.MUL, dtypes.int32, (x, a))
  z = UOp(Ops.ADD, dtypes.int32, (y, x))
  assert list(z.toposort()) == [a, b, x, y, z]
  w = UOp(Ops.SINK, dtypes.void, (b, z, a))
  assert list(w.toposort()) == [b, a, x, y, z, w]  # first visit of the sources decides
  assert list(z.parents) == [a, b, x, y] and list(z.sparents) == [a, b, x, y, z]

def test_toposort_children_before_parents_dense_dag():
  vs = [Variable(f"v{i}", 0, 3) for i in range(4)]
  nodes = list(vs)
  for i in range(40): nodes.append(UOp(Ops.ADD, dtypes.int32, (nodes[(i * 7) % len(nodes)], nodes[(i * 3 + 1) % len(nodes)])))
  root = UOp(Ops.SINK, dtypes.void, tuple(nodes[-6:]))
  order = list(root.toposort())
  pos = {u: i for i, u in enumerate(order)}
  assert len(order) == len(pos) and order[-1] is root
  assert all(pos[s] < pos[u] for u in order for s in u.src)
  assert order == list(root.toposort())

def test_pretty_shared_node_printed_once():
  a, b = Variable("a", 0, 10), Variable("b", -3, 4)
  s = a + b
  assert (s * s).pretty() == "\n".join([
    "MUL dtypes.int",
    "  %0 = ADD dtypes.int",
    "    DEFINE_VAR dtypes.int ('a', 0, 10)",
    "    DEFINE_VAR dtypes.int ('b', -3, 4)",
    "  ^%0"])
  # two shared nodes, numbered in print order; a node used once gets no label
  root = UOp(Ops.SINK, dtypes.void, (s * 2, b, s))
  assert root.pretty() == "\n".join([
    "SINK dtypes.void",
    "  MUL dtypes.int",
    "    %0 = ADD dtypes.int",
    "      DEFINE_VAR dtypes.int ('a', 0, 10)",
    "      %1 = DEFINE_VAR dtypes.int ('b', -3, 4)",
    "    CONST dtypes.int 2",
    "  ^%1",
    "  ^%0"])

def test_repr_and_render():
  a = Variable("a", 0, 10)
  assert repr((a + 2) // 3) == "<((a+2)//3)>"
  assert repr(a.bind(3)) == "<a=3>"
  assert a.maximum(2).render_sym() == "max(a, 2)" and (a < 3).where(a, 0).render_sym() == "((a<3) ? a : 0)"
  s = repr(UOp(Ops.SINK, dtypes.void, (a,)))
  assert s.startswith("UOp(Ops.SINK, dtypes.void, arg=None, src=<1>, key=")

def test_deep_graph_no_recursion_limit():
  a = Variable("a", 0, 10)
  x = a
  for i in range(5000): x = UOp(Ops.ADD, dtypes.int32, (x, UOp.const(dtypes.int32, i % 3)))
  assert len(x.toposort()) == 5000 + 4
  assert len(x.key) == 64
  assert (x.vmin, x.vmax) == (sum(i % 3 for i in range(5000)), 10 + sum(i % 3 for i in range(5000)))
  assert x.render_sym().startswith("(" * 5000 + "a+0)")
  assert sym_infer(x, {a: 2}) == 2 + sum(i % 3 for i in range(5000))
  assert x.pretty().count("\n") == 2 * 5000
  assert len(repr(x)) > 5000

# *** constants, folding, casts ***

def test_alu_folds_constants():
  assert ci(3) + 4 is ci(7)
  assert ci(7) // 2 is ci(3) and ci(-7) // 2 is ci(-3) and ci(-7) % 2 is ci(-1)  # C semantics
  assert (ci(3) < 4) is UOp.const(dtypes.bool, True)
  i8 = UOp.const(dtypes.int8, 100)
  assert (i8 + i8).arg == -56 and (i8 + i8).dtype is dtypes.int8
  assert exec_alu(Ops.ADD, dtypes.uint8, [250, 10]) == 4
  assert ci(5).cast(dtypes.float32) is UOp.const(dtypes.float32, 5.0)
  a = Variable("a", 0, 10)
  assert a.cast(dtypes.int32) is a and a.cast(dtypes.int64).op is Ops.CAST

def test_negation_and_subtraction_forms():
  a = Variable("a", 0, 10)
  assert (-a) is a * -1 and (a - 2) is a + -2
  f = UOp(Ops.DEFINE_VAR, dtypes.float32, (), ("f", 0, 1))
  assert (-f).op is Ops.NEG

# *** Variables and binding ***

@pytest.mark.parametrize("args", [("", 0, 1), (None, 0, 1), (3, 0, 1), ("a", 2, 1), ("a", 0.0, 1), ("a", 0, 1.5), ("a", None, 1)])
def test_variable_bad_bounds(args):
  with pytest.raises(ValueError): Variable(*args)

def test_bind():
  a = Variable("a", 1, 10)
  b = a.bind(4)
  assert b.op is Ops.BIND and b.unbind() == (a, 4) and b.val == 4 and a.expr == "a"
  assert (b.vmin, b.vmax) == (1, 10)  # a bound variable keeps its range: one kernel serves every value
  assert a.bind(1).val == 1 and a.bind(10).val == 10
  for bad in (0, 11, -1, 4.0, "4"):
    with pytest.raises(ValueError, match="range"): a.bind(bad)
  with pytest.raises(ValueError): ci(3).bind(1)
  with pytest.raises(ValueError): a.unbind()
  assert (b * 2 + a).vars() == [a, b]
  assert sym_infer(b * 2 + 1, {}) == 9
  assert UOp.const(dtypes.int32, b) is a

# *** value ranges ***

A, B, N = Variable("a", 0, 10), Variable("b", 2, 5), Variable("n", -4, 6)
VMINMAX = [
  (ci(7), 7, 7), (A, 0, 10), (A + B, 2, 15), (A * B, 0, 50), (N * -2, -12, 8), (N * B, -20, 30), (A - B, -5, 8),
  (A // 3, 0, 3), (N // 3, -1, 2), (A // -3, -3, 0), (N % 4, -3, 3), (A % 4, 0, 3), (B % 8, 2, 5), (A % 11, 0, 10),
  (A.maximum(B), 2, 10), (N.maximum(0), 0, 6), (A.minimum(B), 0, 5),
  (A < 11, True, True), (A < 10, False, True), (A < 0, False, False), (A < 1, False, True), (A < B, False, True),
  (B.ne(0), True, True), (A.ne(3), False, True),
  ((A < 3).where(B, N), -4, 6), ((B < 9).where(B, N), 2, 5),
  (UOp(Ops.RANGE, dtypes.int32, (ci(0), ci(8)), 0), 0, 7), (A.cast(dtypes.int64), 0, 10),
  (UOp(Ops.CONST, dtypes.float32, (), 2.5), 2.5, 2.5),
]

@pytest.mark.parametrize("e,lo,hi", VMINMAX, ids=[str(i) for i in range(len(VMINMAX))])
def test_vmin_vmax(e, lo, hi):
  assert (e.vmin, e.vmax) == (lo, hi) and type(e.vmin) is type(lo)
  if e.op is Ops.RANGE: return
  vs = [v for v in (A, B, N) if v in e.toposort()]
  vals = [sym_infer(e, dict(zip(vs, p))) for p in itertools.product(*[range(v.vmin, v.vmax + 1) for v in vs])]
  assert lo <= min(vals) and max(vals) <= hi  # sound

def test_ranges_sound_under_wraparound():
  # a value that can leave the dtype's range wraps around, so the range is the whole dtype
  x = Variable("x", -1, 5)
  c = x.cast(dtypes.uint8)
  assert sym_infer(c, {x: -1}) == 255 and (c.vmin, c.vmax) == (0, 255)
  assert (Variable("y", 0, 5).cast(dtypes.uint8).vmin, Variable("y", 0, 5).cast(dtypes.uint8).vmax) == (0, 5)
  b = Variable("b", 0, 127, dtypes.int8)
  assert sym_infer(b + 1, {b: 127}) == -128 and ((b + 1).vmin, (b + 1).vmax) == (-128, 127)
  assert sym_infer(b * 2, {b: 100}) == -56 and (b * 2).vmin == -128
  assert ((b + 0).vmin, (b // 2 + 1).vmax) == (0, 64)
  assert resolve((c < 10).simplify(), None) is None and sym_infer((c < 10).simplify(), {x: -1}) is False

def test_resolve_and_helpers():
  a = Variable("a", 0, 10)
  assert resolve(a < 11) is True and resolve(a < 0) is False
  assert resolve(a < 5) is True and resolve(a < 5, False) is False
  assert resolve(3 < 4) is True
  with pytest.raises(ValueError): resolve(a + 1)
  assert smax(3, 5, 1) == 5 and smin([3, 5, 1]) == 1
  assert smax(a, 11) == 11 and smax(a, 0) is a and smin(a, 10) is a and smin(a + 1, 0) == 0
  assert ssimplify(a * 0 + 3) == 3 and ssimplify(7) == 7
  assert ssimplify(a + 0) is a

def test_substitute():
  a, b = Variable("a", 0, 10), Variable("b", 0, 10)
  e = (a + 1) * a
  assert e.substitute({a: b}) is (b + 1) * b
  assert e.substitute({a: ci(2)}).simplify() is ci(6)
  assert e.substitute({}) is e

def test_substitute_builds_its_matcher_once(monkeypatch):
  """Each call used to build a PatternMatcher of its own (~0.15 ms: 67 of them in a process's first schedule-level
  replay). One matcher now serves every call, each with its own mapping (the results above stay right)."""
  from tinysched import rewrite
  a, b = Variable("a", 0, 10), Variable("b", 0, 10)
  (a + 1).substitute({a: b})  # (the first call may build it)
  built = []
  real = rewrite.PatternMatcher.__init__
  monkeypatch.setattr(rewrite.PatternMatcher, "__init__", lambda self, *x, **k: built.append(1) or real(self, *x, **k))
  assert (a * 3).substitute({a: b}) is b * 3 and (a * 3).substitute({a: ci(4)}).simplify() is ci(12)
  assert built == []

def test_sym_infer():
  a, b = Variable("a", -10, 10), Variable("b", 1, 4)
  assert sym_infer((a * 3 + 2) // b % 3, {a: -7, b: 4}) == -1  # C semantics: -19 / 4 -> -4, -4 % 3 -> -1 (python: 1)
  assert sym_infer(7, {}) == 7
  with pytest.raises(KeyError, match="'b'"): sym_infer(a + b, {a: 1})
  with pytest.raises(KeyError, match="'a'"): sym_infer(a, {})
  assert sym_infer(a.bind(3) + b, {b: 1}) == 4  # the Variable under a BIND needs no value
