import time
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from tinysched.dtype import dtypes
from tinysched.ops import Ops
from tinysched.uop import UOp, Variable, sym_infer
from tinysched.symeval import eval_np

A, B = Variable("a", -12, 12), Variable("b", -7, 7)
AV = np.arange(-12, 13)
GA, GB = np.meshgrid(AV, np.arange(-7, 8), indexing="ij")  # every (a, b) pair

def c(x: int) -> UOp: return UOp.const(dtypes.int32, x)
def rng(n: int, i: int) -> UOp: return UOp(Ops.RANGE, dtypes.int32, (c(0), c(n)), i)

def test_c_division_and_modulo():
  # truncation toward zero; the remainder takes the dividend's sign
  for op, ref in ((Ops.IDIV, lambda x, y: int(x / y)), (Ops.MOD, lambda x, y: x - y*int(x / y))):
    e = UOp(op, dtypes.int32, (A, B))
    got = eval_np(e, {A: GA, B: GB})
    want = np.array([[ref(x, y) if y != 0 else 0 for y in range(-7, 8)] for x in range(-12, 13)])
    np.testing.assert_array_equal(got, want)
    assert eval_np(e, {A: -7, B: 2}) == ref(-7, 2)
  assert eval_np(UOp(Ops.IDIV, dtypes.int32, (A, c(-3))), {A: np.array([7, -7, 6])}).tolist() == [-2, 2, -2]
  assert eval_np(UOp(Ops.MOD, dtypes.int32, (A, c(-3))), {A: np.array([7, -7, 6])}).tolist() == [1, -1, 0]

def test_leaves_and_misc_ops():
  n = Variable("n", 1, 10)
  assert eval_np(n.bind(4) * 3, {}) == 12  # a BIND evaluates to its value
  r = rng(5, 0)
  e = (r < 3).where(r * 2, r.maximum(n))
  np.testing.assert_array_equal(eval_np(e, {r: np.arange(5), n: 4}), [0, 2, 4, 4, 4])
  assert eval_np(UOp(Ops.NEG, dtypes.int32, (r,)), {r: 3}) == -3
  assert eval_np(r.ne(2) & (r < 4), {r: np.arange(5)}).tolist() == [True, True, False, True, False]
  assert eval_np(r.ne(2) | (r < 1), {r: np.arange(3)}).tolist() == [True, True, False]
  assert eval_np(r ^ c(1), {r: np.arange(3)}).tolist() == [1, 0, 3]
  assert eval_np((r < 2).cast(dtypes.int32) + 1, {r: np.arange(3)}).tolist() == [2, 2, 1]
  assert eval_np(r.cast(dtypes.bool), {r: np.arange(3)}).tolist() == [False, True, True]
  # int64 arithmetic: no int32 wrap-around
  assert eval_np(r * UOp.const(dtypes.int64, 3_000_000_000), {r: np.array([2])}).tolist() == [6_000_000_000]

def test_missing_variable_is_a_clear_keyerror():
  with pytest.raises(KeyError, match="'n'"):
    eval_np(Variable("n", 1, 10) + 1, {})
  with pytest.raises(KeyError, match="RANGE"):
    eval_np(rng(4, 7) + 1, {})

def test_scalar_results_are_python_scalars():
  r = rng(4, 0)
  v = eval_np(r * 2 + 1, {r: np.int64(3)})
  assert v == 7 and type(v) is int

def _exprs():
  leaves = st.sampled_from([A, B, c(0), c(1), c(-1), c(2), c(3), c(-5)])
  def ext(children):
    bin_ops = st.sampled_from([Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX])
    return st.one_of(
      st.builds(lambda op, x, y: UOp(op, dtypes.int32, (x, y)), bin_ops, children, children),
      st.builds(lambda x: UOp(Ops.NEG, dtypes.int32, (x,)), children),
      st.builds(lambda x, y, a, b: (x < y).where(a, b), children, children, children, children))
  return st.recursive(leaves, ext, max_leaves=8)

@settings(max_examples=150, deadline=None)
@given(_exprs())
def test_matches_scalar_evaluation(e):
  got = np.broadcast_to(eval_np(e, {A: GA, B: GB}), GA.shape)
  for i in range(0, GA.shape[0], 3):
    for j in range(0, GA.shape[1], 2):
      assert got[i, j] == sym_infer(e, {A: int(GA[i, j]), B: int(GB[i, j])}), (e.render_sym(), GA[i, j], GB[i, j])

def test_fast_on_large_arrays():
  r0, r1 = rng(1000, 0), rng(1000, 1)
  e = ((r0 * 1000 + r1) // 7 % 13 + (r1 < 500).where(r0, r1)).simplify()
  g0, g1 = np.indices((1000, 1000))
  t = time.perf_counter()
  out = eval_np(e, {r0: g0, r1: g1})
  assert time.perf_counter() - t < 2.0
  assert out.shape == (1000, 1000) and out[3, 999] == (3*1000 + 999) // 7 % 13 + 999
