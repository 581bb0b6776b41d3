import math
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck, event
from tinysched.dtype import dtypes
from tinysched.ops import Ops
from tinysched.uop import UOp, Variable, stable_repr, sym_infer
from tinysched.shape import View, ShapeTracker, strides_for_shape
from tinysched.symeval import eval_np
from tests.tinysched.movements import np_apply, reshape_target, movement_op

def c(x: int) -> UOp: return UOp.const(dtypes.int32, x)
def rng(n, i: int) -> UOp: return UOp(Ops.RANGE, dtypes.int32, (c(0), n if isinstance(n, UOp) else c(n)), i)

# *** reference: apply movement ops to numpy and evaluate trackers with eval_np ***

def st_apply(t: ShapeTracker, op: str, arg) -> ShapeTracker: return getattr(t, op)(arg)

def st_eval(t: ShapeTracker, buf: np.ndarray, var_vals: dict | None = None) -> np.ndarray:
  """What reading `buf` through `t` gives at every position (masked positions read 0); checks every valid index is in bounds."""
  shape = tuple(int(s) for s in t.shape)
  idxs = [rng(s, k) for k, s in enumerate(shape)]
  idx, valid = t.to_indexed_uops(idxs)
  grid = np.indices(shape)
  env = {r: grid[k] for k, r in enumerate(idxs)} | (var_vals or {})
  iv = np.broadcast_to(eval_np(idx, env), shape)
  vv = np.broadcast_to(eval_np(valid, env), shape).astype(bool)
  if vv.any():
    assert 0 <= iv[vv].min() and iv[vv].max() < len(buf), "a valid position reads outside the buffer"
    assert iv[vv].max() < t.real_size() <= len(buf), "real_size does not cover every valid index"
  return np.where(vv, buf[np.where(vv, iv, 0)], 0)


@st.composite
def chain(draw, shape: tuple[int, ...] | None = None, min_ops: int = 1, max_ops: int = 7):
  if shape is None: shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
  ops, a = [], np.zeros(shape, np.int8)
  for _ in range(draw(st.integers(min_ops, max_ops))):
    op = draw(movement_op(a.shape))
    ops.append(op)
    a = np_apply(a, *op)
  return shape, ops

def run_chain(shape, ops, base: ShapeTracker | None = None, arr: np.ndarray | None = None):
  t = ShapeTracker.from_shape(shape) if base is None else base
  a = (np.arange(math.prod(shape)) + 1).reshape(shape) if arr is None else arr  # +1: 0 means "masked"
  for op, arg in ops:
    t, a = st_apply(t, op, arg), np_apply(a, op, arg)
    assert t.shape == a.shape, (op, arg, t)
  return t, a

@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain())
def test_movement_chain_matches_numpy(c):
  shape, ops = c
  buf = np.arange(math.prod(shape)) + 1
  t, want = run_chain(shape, ops)
  event(f"views={len(t.views)} masked={any(v.mask is not None for v in t.views)}")
  np.testing.assert_array_equal(st_eval(t, buf), want)
  # merging views and merging dims keep the function
  s = t.simplify()
  assert len(s.views) <= len(t.views)
  np.testing.assert_array_equal(st_eval(s, buf), want)
  m = ShapeTracker(t.views[:-1] + (t.views[-1].minify(),))
  np.testing.assert_array_equal(st_eval(m, buf).reshape(-1), want.reshape(-1))
  # the default loop indices are RANGEs over the shape
  assert t.to_indexed_uops() == t.to_indexed_uops([rng(s, k) for k, s in enumerate(t.shape)])

@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_multiview_chain_matches_numpy(data):
  # a permute/pad/stride followed by a reshape: the reshapes one view often cannot express
  shape = tuple(data.draw(st.lists(st.integers(2, 5), min_size=2, max_size=3)))
  first = data.draw(st.sampled_from(["permute", "pad", "stride", "shrink"]))
  a = np.zeros(shape, np.int8)
  op1 = data.draw(movement_op(shape, first))
  a = np_apply(a, *op1)
  op2 = ("reshape", data.draw(reshape_target(a.shape)))
  _, rest = data.draw(chain(shape=np_apply(a, *op2).shape, min_ops=0, max_ops=4))
  t, want = run_chain(shape, [op1, op2] + rest)
  event(f"views={len(t.views)} simplified={len(t.simplify().views)}")
  buf = np.arange(math.prod(shape)) + 1
  np.testing.assert_array_equal(st_eval(t, buf), want)
  np.testing.assert_array_equal(st_eval(t.simplify(), buf), want)

@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_composition_matches_numpy(data):
  shape, ops1 = data.draw(chain(max_ops=5))
  t1, a1 = run_chain(shape, ops1)
  _, ops2 = data.draw(chain(shape=t1.shape, max_ops=5))
  t2, want = run_chain(shape, ops2, base=t1, arr=a1)
  tt2, _ = run_chain(t1.shape, ops2)
  composed = t1 + tt2
  assert composed.shape == t2.shape
  buf = np.arange(math.prod(shape)) + 1
  np.testing.assert_array_equal(st_eval(composed, buf), want)
  np.testing.assert_array_equal(st_eval(t2, buf), want)

@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_view_add_is_exact(data):
  # reading through vm2 then vm1 must give what vm1 reads from the elements vm2 reads: for the pair kept as two views
  # when vm2 + vm1 declines to merge, and for the one view it returns whenever it claims it can
  t1, _ = run_chain(*data.draw(chain(min_ops=2, max_ops=5)))
  vm2 = t1.views[-1]
  t2, _ = run_chain(*data.draw(chain(shape=vm2.shape, max_ops=4)))
  vm1 = t2.views[0]  # addresses vm2's shape
  merged = vm2 + vm1
  event(f"merged={merged is not None} vm2_masked={vm2.mask is not None} vm1_masked={vm1.mask is not None}")
  buf = np.arange(max(ShapeTracker((vm2,)).real_size(), 1)) + 1
  through_vm2 = st_eval(ShapeTracker((vm2,)), buf).reshape(-1)
  want = st_eval(ShapeTracker((vm1,)), through_vm2 if through_vm2.size else np.zeros(1, buf.dtype))
  np.testing.assert_array_equal(st_eval(ShapeTracker((vm2, vm1)), buf), want)
  composed = ShapeTracker((vm2,)) + ShapeTracker((vm1,))  # merges exactly when vm2 + vm1 does
  assert composed.views == ((vm2, vm1) if merged is None else (merged,))
  if merged is not None:
    assert merged.shape == vm1.shape
    np.testing.assert_array_equal(st_eval(ShapeTracker((merged,)), buf), want)

# *** symbolic shapes: one tracker over Variable n, checked at several values of n ***

N = Variable("n", 1, 6)

@st.composite
def sym_chain(draw):
  # ops whose arguments are symbolic where they touch dim 0 (size n); the rest are ints
  inner = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=2)))
  ops, nd, sym_axis = [], 1 + len(inner), 0
  for _ in range(draw(st.integers(1, 5))):
    kind = draw(st.sampled_from(["permute", "pad", "shrink", "flip", "reshape1", "expand", "flatten"]))
    if kind == "permute":
      order = tuple(draw(st.permutations(range(nd))))
      ops.append(("permute", order))
      sym_axis = order.index(sym_axis)
    elif kind == "pad": ops.append(("pad", tuple((draw(st.integers(0, 1)), draw(st.integers(0, 1))) for _ in range(nd))))
    elif kind == "shrink": ops.append(("shrink_sym", (sym_axis, draw(st.integers(0, 1)))))
    elif kind == "flip": ops.append(("flip", tuple(i for i in range(nd) if draw(st.booleans()))))
    elif kind == "reshape1":  # insert a size-1 dim: the reshape symbolic views must always handle
      at = draw(st.integers(0, nd))
      ops.append(("insert1", at))
      sym_axis += at <= sym_axis
      nd += 1
    elif kind == "flatten":  # merges the symbolic dim: one view when contiguous, else a second view
      ops.append(("flatten", None))
      nd, sym_axis = 1, 0
    else: ops.append(("expand1", None))
  return inner, ops

def sym_apply(t: ShapeTracker, a: np.ndarray, op: str, arg):
  if op == "shrink_sym":  # drop `arg[1]` leading elements of the symbolic dim, keep the others whole
    ax, k = arg
    sarg = tuple((k, s) if i == ax else (0, s) for i, s in enumerate(t.shape))
    return t.shrink(sarg), a[tuple(slice(k, None) if i == ax else slice(None) for i in range(a.ndim))]
  if op == "insert1":
    return t.reshape(t.shape[:arg] + (1,) + t.shape[arg:]), a.reshape(a.shape[:arg] + (1,) + a.shape[arg:])
  if op == "flatten": return t.reshape((t.size,)), a.reshape(-1)
  if op == "expand1":
    grow = [type(s) is int and s == 1 for s in t.shape]
    return t.expand(tuple(3 if g else s for g, s in zip(grow, t.shape))), np.broadcast_to(a, tuple(3 if g else s for g, s in zip(grow, a.shape)))
  return getattr(t, op)(arg), np_apply(a, op, arg)

@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sym_chain())
def test_symbolic_chain_matches_numpy(c):
  inner, ops = c
  for nv in (2, 3, 6):
    t, a = ShapeTracker.from_shape((N,) + inner), (np.arange(nv*math.prod(inner)) + 1).reshape((nv,) + inner)
    for op, arg in ops:
      if op == "shrink_sym" and a.shape[arg[0]] < arg[1] + 1: continue  # keep the symbolic dim >= 1 at this n
      t, a = sym_apply(t, a, op, arg)
    shape = tuple(sym_infer(s, {N: nv}) for s in t.shape)
    assert shape == a.shape
    idxs = [rng(s, k) for k, s in enumerate(t.shape)]
    idx, valid = t.to_indexed_uops(idxs)
    grid = np.indices(shape)
    env = {r: grid[k] for k, r in enumerate(idxs)} | {N: nv}
    iv, vv = np.broadcast_to(eval_np(idx, env), shape), np.broadcast_to(eval_np(valid, env), shape).astype(bool)
    buf = np.arange(nv*math.prod(inner)) + 1
    if vv.any(): assert 0 <= iv[vv].min() and iv[vv].max() < len(buf) and iv[vv].max() < t.real_size()
    np.testing.assert_array_equal(np.where(vv, buf[np.where(vv, iv, 0)], 0), a)
    event(f"views={len(t.views)}")
    # binding n gives the same index function
    bt = ShapeTracker.from_shape((N.bind(nv),) + inner)
    assert bt.unbind() == (ShapeTracker.from_shape((N,) + inner), {N: nv})

# *** exact forms ***

def test_contiguous_index_is_short():
  i, j = rng(4, 0), rng(3, 1)
  idx, valid = ShapeTracker.from_shape((4, 3)).to_indexed_uops([i, j])
  assert idx is UOp(Ops.ADD, dtypes.int32, (UOp(Ops.MUL, dtypes.int32, (i, c(3))), j))
  assert valid is UOp.const(dtypes.bool, True)

def test_permuted_view():
  t = ShapeTracker.from_shape((4, 3)).permute((1, 0))
  assert t.views == (View.create((3, 4), (1, 3)),) and not t.contiguous
  i, j = rng(3, 0), rng(4, 1)
  assert t.to_indexed_uops([i, j])[0] is i + j*3
  assert t.real_strides() == (1, 3) and t.unit_stride_axes() == [0]

def test_shrunk_view_offset():
  t = ShapeTracker.from_shape((4, 3)).shrink(((1, 3), (1, 2)))
  assert t.views == (View.create((2, 1), (3, 0), 4),)
  assert t.views[0].offset == 4 and t.real_size() == 8
  i, j = rng(2, 0), rng(1, 1)
  assert t.to_indexed_uops([i, j])[0] is i*3 + 4
  assert t.consecutive is False and ShapeTracker.from_shape((4, 3)).shrink(((1, 3), (0, 3))).consecutive

def test_padded_view_valid():
  t = ShapeTracker.from_shape((4,)).pad(((1, 1),))
  assert t.views == (View.create((6,), (1,), -1, ((1, 5),)),)
  i = rng(6, 0)
  idx, valid = t.to_indexed_uops([i])
  assert idx is i + -1
  assert valid is (c(0) < i) & (i < 5)
  assert valid.render_sym() == "((0<r0)&(r0<5))"
  assert t.axis_is_masked(0) and t.real_strides() == (None,) and t.real_strides(ignore_valid=True) == (1,)
  assert t.real_size() == 4

def test_reshape_needs_second_view():
  t = ShapeTracker.from_shape((3, 4)).permute((1, 0)).reshape((12,))
  assert len(t.views) == 2 and t.shape == (12,)
  i = rng(12, 0)
  assert t.to_indexed_uops([i])[0] is i//3 + (i % 3)*4
  assert t.real_strides() == (None,)
  # a reshape that only splits/merges compatible dims stays one view
  assert len(ShapeTracker.from_shape((3, 4)).permute((1, 0)).reshape((2, 2, 3)).views) == 1
  assert len(ShapeTracker.from_shape((4, 6)).shrink(((0, 4), (0, 3))).reshape((2, 2, 3)).views) == 1

def test_real_strides_multiview():
  t = ShapeTracker.from_shape((2, 3, 4)).permute((0, 2, 1)).reshape((2, 12))
  assert len(t.views) == 2
  assert t.real_strides() == (12, None) and t.unit_stride_axes() == []
  p = ShapeTracker.from_shape((2, 3, 4)).permute((0, 2, 1)).reshape((2, 12)).pad(((0, 0), (1, 0)))
  assert p.real_strides() == (12, None) and p.axis_is_masked(1) and not p.axis_is_masked(0)
  e = ShapeTracker.from_shape((3, 1)).expand((3, 5))
  assert e.real_strides() == (1, 0) and e.unit_stride_axes() == [0]

def test_masked_reshape():
  # padding a row dim then merging it with a full inner dim is one view with a merged mask
  v = View.create((2, 3)).pad(((1, 1), (0, 0)))
  r = v.reshape((12,))
  assert r == View.create((12,), (1,), -3, ((3, 9),))
  assert v.reshape((4, 3, 1)) == View.create((4, 3, 1), (3, 1, 0), -3, ((1, 3), (0, 3), (0, 1)))
  assert View.create((2, 3)).pad(((0, 0), (1, 0))).reshape((8,)) is None  # a mask per row is no single range

def test_canonical_forms():
  assert View.create((4, 1, 3)).strides == (3, 0, 1)
  assert View.create((4, 1, 3), (3, 7, 1)) == View.create((4, 1, 3))
  assert View.create((4, 3), mask=((0, 4), (0, 3))).mask is None
  empty = View.create((4, 3), (3, 1), 5, ((1, 3), (2, 2)))
  assert empty == View.create((4, 3), (1, 1), 0, ((0, 0), (0, 0))) and empty.strides == (0, 0)
  assert View.create((4, 3)).contiguous and not View.create((4, 3), offset=1).contiguous
  assert View.create([4, 3]) is View.create((np.int64(4), True*3))  # ints normalized, memoized
  assert hash(View.create((4, 3))) == hash(View.create((4, 3), (3, 1), 0, None))
  assert strides_for_shape((2, 1, 3, 4)) == (12, 0, 4, 1) and strides_for_shape(()) == ()
  assert ShapeTracker.from_shape((2, 3)) == ShapeTracker((View.create((2, 3)),))
  assert ShapeTracker.from_shape((2, 3)).reduce((1,)) == (2, 1)

def test_stable_repr():
  v = View.create((4, 3))
  assert v.stable_repr() == "View(shape=(4, 3), strides=(3, 1), offset=0, mask=None)"
  t = ShapeTracker.from_shape((4,)).pad(((1, 0),))
  assert stable_repr(t) == "ShapeTracker(views=(View(shape=(5,), strides=(1,), offset=-1, mask=((1, 5),)),))"
  assert stable_repr(ShapeTracker.from_shape((Variable("n", 1, 10), 2))) == \
    "ShapeTracker(views=(View(shape=(n, 2), strides=(2, 1), offset=0, mask=None),))"
  u = t.to_uop()
  # equal, not necessarily the same object: interning hands back an equal VIEW node that is still alive (another test's,
  # made before a clear_caches() gave this tracker a new object)
  assert u.op is Ops.VIEW and u.arg == t and u.st == t and u.dtype == dtypes.void and not u.src

def test_symbolic_shape():
  n = Variable("n", 1, 10)
  t = ShapeTracker.from_shape((n, 4))
  assert t.views[0].strides == (4, 1) and t.contiguous and t.size is n*4
  r = t.reshape((n*4,))
  assert r.views == (View.create((n*4,)),) and r.contiguous
  r2 = t.reshape((n, 2, 2))
  assert r2.views[0].strides == (4, 2, 1) and r2.vars() == [n]
  s = t.shrink(((1, n), (0, 2)))
  assert s.shape[1] == 2 and s.views[0].offset == 4 and s.views[0].mask is None
  i, j = rng(s.shape[0], 0), rng(2, 1)
  assert s.to_indexed_uops([i, j])[0] is i*4 + j + 4
  # evaluate at a value of n against numpy
  buf = np.arange(7*4) + 1
  np.testing.assert_array_equal(st_eval(ShapeTracker.from_shape((7, 4)).permute((1, 0)), buf), buf.reshape(7, 4).T)
  p = t.permute((1, 0)).pad(((0, 0), (1, 0))).expand((4, n + 1))
  assert p.shape == (4, (n + 1).simplify())
  idxs = [rng(sh, k) for k, sh in enumerate(p.shape)]
  assert p.to_indexed_uops() == p.to_indexed_uops(idxs)
  idx, valid = p.to_indexed_uops(idxs)
  g = np.indices((4, 8))
  env = {idxs[0]: g[0], idxs[1]: g[1], n: 7}
  vv = eval_np(valid, env)
  got = np.where(vv, buf[np.where(vv, eval_np(idx, env), 0)], 0)
  np.testing.assert_array_equal(got, np.pad(buf.reshape(7, 4).T, ((0, 0), (1, 0))))

def test_symbolic_flip_and_transposed_reshape():
  n = Variable("n", 2, 10)
  t = ShapeTracker.from_shape((n, 3)).flip((0,))
  assert t.views[0].strides == (-3, 1)
  tp = ShapeTracker.from_shape((n, 3)).permute((1, 0)).reshape((3, n, 1))
  assert len(tp.views) == 1 and tp.views[0].strides == (1, 3, 0)

def test_unbind():
  n = Variable("n", 1, 10)
  bt = ShapeTracker.from_shape((n.bind(3), 4))
  ut, vals = bt.unbind()
  assert ut == ShapeTracker.from_shape((n, 4)) and vals == {n: 3}
  assert bt.var_vals == {n: 3} and bt.vars() == [n] and ut.var_vals == {}
  v, vv = bt.views[0].unbind()
  assert v == View.create((n, 4)) and vv == {n: 3}
  assert ShapeTracker.from_shape((2, 3)).unbind() == (ShapeTracker.from_shape((2, 3)), {})

def test_real_size_and_zero_sizes():
  assert ShapeTracker.from_shape((4, 3)).real_size() == 12
  assert ShapeTracker.from_shape((4, 3)).shrink(((0, 0), (0, 3))).real_size() == 0
  assert ShapeTracker.from_shape((4, 1)).expand((4, 5)).real_size() == 4
  assert ShapeTracker.from_shape((4, 3)).flip((0, 1)).real_size() == 12
  assert ShapeTracker.from_shape((3,)).pad(((2, 2),)).shrink(((0, 2),)).real_size() == 0  # only padding left
  z = ShapeTracker.from_shape((0, 3)).reshape((3, 0))
  assert z.shape == (3, 0) and z.real_size() == 0

def test_composition_drops_views():
  a = ShapeTracker.from_shape((3, 4)).permute((1, 0))
  b = ShapeTracker.from_shape((4, 3)).permute((1, 0))
  assert (a + b) == ShapeTracker.from_shape((3, 4))
  two = ShapeTracker.from_shape((3, 4)).permute((1, 0)).reshape((12,))
  assert len(two.views) == 2 and len((two + ShapeTracker.from_shape((12,)).reshape((4, 3))).views) == 1

# *** bad input ***

@pytest.mark.parametrize("fn, arg_text", [
  (lambda t: t.reshape((5, 3)), "(5, 3)"),
  (lambda t: t.reshape((-1, 12)), "(-1, 12)"),
  (lambda t: t.pad(((0, 0), (-1, 0))), "((0, 0), (-1, 0))"),
  (lambda t: t.shrink(((-1, 2), (0, 3))), "((-1, 2), (0, 3))"),
  (lambda t: t.shrink(((0, 5), (0, 3))), "((0, 5), (0, 3))"),
  (lambda t: t.shrink(((3, 2), (0, 3))), "((3, 2), (0, 3))"),
  (lambda t: t.permute((1, 1)), "(1, 1)"),
  (lambda t: t.permute((0,)), "(0,)"),
  (lambda t: t.permute((0, 2)), "(0, 2)"),
  (lambda t: t.expand((8, 3)), "(8, 3)"),
  (lambda t: t.expand((4, 3, 1)), "(4, 3, 1)"),
  (lambda t: t.pad(((1, 1),)), "((1, 1),)"),
  (lambda t: t.shrink(((0, 1),)), "((0, 1),)"),
  (lambda t: t.stride((1,)), "(1,)"),
  (lambda t: t.stride((0, 1)), "(0, 1)"),
  (lambda t: t.flip((2,)), "(2,)"),
])
def test_bad_input_names_shape_and_argument(fn, arg_text):
  for t in (ShapeTracker.from_shape((4, 3)), ShapeTracker.from_shape((3, 4)).permute((1, 0))):
    with pytest.raises(ValueError) as e:
      fn(t)
    assert "(4, 3)" in str(e.value) and arg_text in str(e.value), str(e.value)

def test_bad_symbolic_reshape():
  n = Variable("n", 1, 10)
  with pytest.raises(ValueError, match=r"\(n, 4\).*\(n, 5\)"):
    ShapeTracker.from_shape((n, 4)).reshape((n, 5))

# *** determinism ***

def test_same_text_in_every_process():
  import os, subprocess, sys
  code = ("from tinysched.shape import ShapeTracker\nfrom tinysched.uop import Variable, stable_repr\n"
          "n = Variable('n', 1, 9)\n"
          "t = ShapeTracker.from_shape((3, 4)).permute((1, 0)).reshape((12,)).pad(((2, 1),)).shrink(((1, 14),))\n"
          "u = ShapeTracker.from_shape((n.bind(3), 4)).permute((1, 0)).pad(((0, 0), (1, 0)))\n"
          "print(stable_repr(t), stable_repr(u), t.to_indexed_uops()[0].render_sym(), u.to_uop().key)")
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root,
                         env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
  assert len(outs) == 1
