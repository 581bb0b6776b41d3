"""The NUMPY interpreter as an independent, memory-bounded oracle: view evaluation from the View fields
against numpy's own movement ops, independence from the compiler's index code (a planted bug in it must
not reach the interpreter, and must reach OpenCL), the closed form for masked-constant reduces against
chunked evaluation, chunk budgets and peak memory, int64 indexing past 2^31, reference accumulation."""
from __future__ import annotations
import ast as pyast, inspect, math, time, tracemalloc
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck, event
from tinysched import Tensor, dtypes, Variable
from tinysched.ops import Ops
from tinysched.uop import UOp
from tinysched.device import Device
from tinysched.shape import View, ShapeTracker, clear_caches
from tinysched.runtime import interpreter as I
from tinysched.runtime.interpreter import exec_ast, view_positions, resolve_views
from tests.tinysched import movements
from tests.tinysched.movements import movement_op, reshape_target

def _glob(i: int, dt) -> UOp: return UOp(Ops.DEFINE_GLOBAL, dt.ptr(), (), i)
def _kernels(t: Tensor) -> list:
  return [si for si in t.schedule() if si.ast.op is Ops.SINK]

@pytest.fixture(scope="module", autouse=True)
def _on_numpy():
  # these tests are about the NUMPY device, also when the suite runs with TINYSCHED_DEVICE=OPENCL
  old = Device.DEFAULT
  Device.DEFAULT = "NUMPY"
  yield
  Device.DEFAULT = old

def _numpy_run(t: Tensor) -> np.ndarray:
  """Realize t on NUMPY and read it back."""
  assert t.device == "NUMPY"
  return t.numpy()

@pytest.fixture
def stats():
  I.reset_stats()
  return I.STATS

# *** movement-op chains: ShapeTracker vs numpy on an arange ***

MAX_ELEMS = 800

def np_apply(a: np.ndarray, op: str, arg) -> np.ndarray: return movements.np_apply(a, op, arg, fill=-1)  # -1: must read as invalid

@st.composite
def chains(draw):
  shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
  t, a = ShapeTracker.from_shape(shape), np.arange(math.prod(shape)).reshape(shape)
  for _ in range(draw(st.integers(1, 7))):
    op, arg = draw(movement_op(a.shape, max_elems=MAX_ELEMS, min_dims=1))
    t, a = getattr(t, op)(arg), np_apply(a, op, arg)
    assert t.shape == a.shape
  return t, a

@st.composite
def multiview_chains(draw):
  # permute/pad/stride/shrink then a reshape: the reshapes one view often cannot express (a stack of views)
  shape = tuple(draw(st.lists(st.integers(2, 5), min_size=2, max_size=3)))
  t, a = ShapeTracker.from_shape(shape), np.arange(math.prod(shape)).reshape(shape)
  op, arg = draw(movement_op(a.shape, draw(st.sampled_from(["permute", "pad", "stride", "shrink"])), max_elems=MAX_ELEMS, min_dims=1))
  ops = [(op, arg)]
  ops.append(("reshape", draw(reshape_target(np_apply(a, op, arg).shape, min_dims=1))))
  for op, arg in ops:
    t, a = getattr(t, op)(arg), np_apply(a, op, arg)
  for _ in range(draw(st.integers(0, 4))):
    op, arg = draw(movement_op(a.shape, max_elems=MAX_ELEMS, min_dims=1))
    t, a = getattr(t, op)(arg), np_apply(a, op, arg)
  return t, a

any_chain = st.one_of(chains(), multiview_chains())

def _check_positions(views, want: np.ndarray, region=None) -> None:
  idx, valid = view_positions(views, region)
  shape = want.shape
  valid = np.broadcast_to(valid, shape)
  np.testing.assert_array_equal(valid, want != -1)
  np.testing.assert_array_equal(np.broadcast_to(idx, shape)[valid], want[valid])

@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_chain, st.data())
def test_view_positions_match_numpy_movement_ops(c, data):
  t, want = c
  event(f"views={len(t.views)}")
  views = resolve_views(t, {})
  _check_positions(views, want)
  # any sub-box of the positions (what one chunk sees) gives the same answer there
  region = []
  for s in want.shape:
    b = data.draw(st.integers(0, max(s - 1, 0)))
    region.append((b, data.draw(st.integers(min(b + 1, s), s))))
  if all(e > b for b, e in region):
    _check_positions(views, want[tuple(slice(b, e) for b, e in region)], tuple(region))

@st.composite
def op_lists(draw):
  shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
  a, ops = np.zeros(shape, np.int8), []
  for _ in range(draw(st.integers(1, 5))):
    op, arg = draw(movement_op(a.shape, max_elems=MAX_ELEMS, min_dims=1))
    a = np_apply(a, op, arg)
    ops.append((op, arg))
  return shape, ops

def _tensor_apply(x: Tensor, op: str, arg) -> Tensor:
  if op == "stride": return x[tuple(slice(None, None, m) for m in arg)]
  if op == "flip": return x.flip(arg) if arg else x
  return getattr(x, op)(arg)

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(op_lists())
def test_kernels_through_the_tensor_api_match_numpy(c):
  # the same chains as real kernels: a realized buffer read through the scheduler's view stacks, on NUMPY
  shape, ops = c
  a = np.arange(1, 1 + math.prod(shape), dtype=np.int32).reshape(shape)
  x, want = Tensor(a).realize(), a
  for op, arg in ops:
    x, want = _tensor_apply(x, op, arg), np_apply(want, op, arg)
  np.testing.assert_array_equal(_numpy_run((x + 0).contiguous()), np.where(want == -1, 0, want))

def test_symbolic_views_resolve_with_var_vals():
  n = Variable("n", 1, 10)
  sym = ShapeTracker.from_shape((n, 4)).pad(((1, 2), (0, 1))).flip((0,)).reshape((n + 3, 5))
  for val in (1, 3, 10):
    num = ShapeTracker.from_shape((val, 4)).pad(((1, 2), (0, 1))).flip((0,)).reshape((val + 3, 5))
    a, b = view_positions(resolve_views(sym, {n: val})), view_positions(resolve_views(num, {}))
    va, vb = np.broadcast_to(a[1], (val + 3, 5)), np.broadcast_to(b[1], (val + 3, 5))
    np.testing.assert_array_equal(va, vb)
    np.testing.assert_array_equal(np.broadcast_to(a[0], va.shape)[va], np.broadcast_to(b[0], vb.shape)[vb])

def test_interpreter_imports_no_compiler_index_code():
  tree = pyast.parse(inspect.getsource(I))
  mods = {n.module for n in pyast.walk(tree) if isinstance(n, pyast.ImportFrom)} | \
         {a.name for n in pyast.walk(tree) if isinstance(n, pyast.Import) for a in n.names}
  assert not mods & {"tinysched.symeval", "tinysched.symbolic", "tinysched.shape", "tinysched.rewrite"}
  assert not any(m.startswith("tinysched.codegen") for m in mods if m)
  attrs = {n.attr for n in pyast.walk(tree) if isinstance(n, pyast.Attribute)}
  assert not attrs & {"to_indexed_uops", "simplify", "real_strides"}

# *** independence: a bug planted in the compiler's index code ***

@pytest.fixture
def planted_mask_bug(monkeypatch):
  """View.to_indexed_uops (what ShapeTracker.to_indexed_uops and so codegen use) with every mask's lower bound
  one too high: the first padded-in row/column reads as masked."""
  orig = View.to_indexed_uops
  def buggy(self, idxs, vexpr=None):
    if self.mask is not None and not self.all_masked:
      self = View(self.shape, self.strides, self.offset, tuple((b + 1 if type(b) is int and b > 0 else b, e) for b, e in self.mask))
    return orig(self, idxs, vexpr)
  clear_caches()
  monkeypatch.setattr(View, "to_indexed_uops", buggy)
  yield
  monkeypatch.undo()
  clear_caches()

A = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
PAD = ((1, 1), (2, 0))

def _pad_kernel():
  x = Tensor(A).realize()
  (si,) = _kernels(x.pad(PAD).contiguous())
  return si.ast, [np.zeros(5 * 6, np.float32), A.reshape(-1).copy()]

def test_planted_index_bug_does_not_reach_the_interpreter(planted_mask_bug):
  ast, bufs = _pad_kernel()
  # the bug is live: the compiler's index expression now says the first padded-in column is masked
  st = ShapeTracker.from_shape((3, 4)).pad(PAD)
  from tinysched.symeval import eval_np
  from tinysched.shape import _ranges
  _, valid = st.to_indexed_uops()
  rs = _ranges(st.shape)
  g = np.indices(st.shape)
  assert not np.broadcast_to(eval_np(valid, {r: g[k] for k, r in enumerate(rs)}), st.shape)[1, 2]
  exec_ast(ast, bufs, {})
  np.testing.assert_array_equal(bufs[0].reshape(5, 6), np.pad(A, PAD))

try:
  from tinysched.runtime.opencl import opencl_available, run_ast
  HAS_CL = opencl_available()
except ImportError: HAS_CL = False

@pytest.mark.skipif(not HAS_CL, reason="no OpenCL device (install pocl-opencl-icd)")
@pytest.mark.parametrize("bug", [False, True], ids=["control", "planted"])
def test_planted_index_bug_reaches_opencl_so_reference_disagrees(bug, request, monkeypatch):
  ast, bufs = _pad_kernel()
  if bug: request.getfixturevalue("planted_mask_bug")
  monkeypatch.setattr(Device["OPENCL"].dev, "programs", {})  # compile from the (patched) index code now
  got = [b.copy() for b in bufs]
  run_ast(ast, got)
  ref = [b.copy() for b in bufs]
  exec_ast(ast, ref, {})
  want = np.pad(A, PAD).reshape(-1)
  np.testing.assert_array_equal(ref[0], want)  # the reference is right either way
  assert np.array_equal(got[0], ref[0]) is (not bug)  # only the planted bug makes the device disagree with it

# *** closed form for masked-constant reduces ***

ARANGE_SIZES = [32767, 32769, 40000, 50257, 2**20, 2**24]

@pytest.mark.parametrize("n", ARANGE_SIZES)
def test_arange_exact_and_fast(n, stats):
  t0 = time.perf_counter()
  got = _numpy_run(Tensor.arange(n))
  dt = time.perf_counter() - t0
  np.testing.assert_array_equal(got, np.arange(n, dtype=np.int32))
  assert stats["closed_form"] >= 1 and stats["max_elements"] <= I.CHUNK_ELEMENTS
  assert dt < 10, f"arange({n}) took {dt:.1f}s"

def test_closed_form_is_taken_for_arange(stats, monkeypatch):
  calls = []
  orig = I._count_valid
  monkeypatch.setattr(I, "_count_valid", lambda *a: calls.append(1) or orig(*a))
  np.testing.assert_array_equal(_numpy_run(Tensor.arange(1000)), np.arange(1000))
  assert calls and stats["closed_form"] == len(calls)
  assert stats["max_elements"] < 1000 * 1000 // 10  # never the (n, n) grid

def _closed_vs_chunked(t_fn, monkeypatch) -> None:
  I.reset_stats()
  closed = _numpy_run(t_fn())
  assert I.STATS["closed_form"] >= 1
  monkeypatch.setattr(I, "CLOSED_FORM", False)
  I.reset_stats()
  chunked = _numpy_run(t_fn())
  monkeypatch.setattr(I, "CLOSED_FORM", True)
  assert I.STATS["closed_form"] == 0
  np.testing.assert_array_equal(closed, chunked)

@pytest.mark.parametrize("make", [
  lambda: Tensor.arange(2), lambda: Tensor.arange(7), lambda: Tensor.arange(300), lambda: Tensor.arange(5, 100, 3),
  lambda: Tensor.arange(10, -3, -2), lambda: Tensor.arange(0.5, 9.0, 0.25), lambda: Tensor.ones(3, 4).cumsum(0),
  lambda: Tensor.ones(3, 4).cumsum(1), lambda: Tensor.full((2, 3, 5), 2.5).cumsum(2), lambda: Tensor.ones(6, 7).cumsum(0)[::-1],
], ids=["arange2", "arange7", "arange300", "step3", "negstep", "float", "cumsum0", "cumsum1", "cumsum3d", "flipped"])
def test_closed_form_matches_chunked_evaluation(make, monkeypatch):
  _closed_vs_chunked(make, monkeypatch)

@st.composite
def masked_const_reduces(draw):
  t, _ = draw(any_chain)
  axes = tuple(sorted(draw(st.sets(st.integers(0, len(t.shape) - 1), min_size=1, max_size=2))))
  return t, axes, draw(st.sampled_from([1, 3, -2]))

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(masked_const_reduces())
def test_valid_counts_match_chunked_evaluation(c):
  # REDUCE_AXIS(ADD, WHERE(VALID(view), c, 0)) over random view stacks: closed form (where it applies) == evaluation
  t, axes, cval = c
  valid = UOp(Ops.VALID, dtypes.bool, (t.to_uop(),))
  red = valid.where(UOp.const(dtypes.int32, cval), UOp.const(dtypes.int32, 0)).r(Ops.ADD, axes)
  out_shape = tuple(1 if d in axes else s for d, s in enumerate(t.shape))
  ast = UOp.sink_of(UOp.store(_glob(0, dtypes.int32), ShapeTracker.from_shape(out_shape).to_uop(), red))
  n = max(math.prod(out_shape), 1)
  outs = []
  for closed in (True, False):
    I.CLOSED_FORM = closed
    I.reset_stats()
    try:
      b = np.full(n, -7, np.int32)
      exec_ast(ast, [b], {})
    finally: I.CLOSED_FORM = True
    outs.append(b)
    if closed: event(f"views={len(t.views)} closed={I.STATS['closed_form'] > 0}")
  np.testing.assert_array_equal(outs[0], outs[1])
  idx, v = view_positions(resolve_views(t, {}))
  want = (np.broadcast_to(v, t.shape).sum(axis=axes) * cval).reshape(-1) if math.prod(t.shape) else outs[1]
  np.testing.assert_array_equal(outs[0], want)

@settings(max_examples=500, deadline=None)
@given(st.integers(0, 60), st.integers(1, 40), st.integers(-50, 50), st.lists(st.integers(-200, 200), min_size=1, max_size=5))
def test_floor_sum_and_ap_count(n, m, a, bs):
  b = np.array(bs, dtype=np.int64)
  want = np.array([sum((a * t + x) // m for t in range(n)) for x in bs])
  np.testing.assert_array_equal(I._floor_sum(n, m, a, b), want)
  lo, hi = -m, m + 7
  want = np.array([sum(1 for t in range(n) if lo <= x + a * t < hi) for x in bs])
  np.testing.assert_array_equal(I._ap_count(n, a, b, lo, hi), want)

def test_planted_closed_form_bug_is_caught(monkeypatch):
  # the closed-vs-chunked comparison has teeth: a floor-sum off by one on the last term goes red
  orig = I._floor_sum
  monkeypatch.setattr(I, "_floor_sum", lambda n, m, a, b: orig(np.maximum(np.asarray(n) - 1, 0), m, a, b))
  with pytest.raises(AssertionError):
    _closed_vs_chunked(lambda: Tensor.ones(3, 4).cumsum(1), monkeypatch)

# *** chunking and memory ***

@pytest.mark.parametrize("budget", [1, 7, 64, 1 << 22])
def test_small_chunk_budgets_give_the_same_numbers(budget, monkeypatch):
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((9, 13)).astype(np.float32), rng.standard_normal((13, 5)).astype(np.float32)
  c = rng.integers(-5, 5, (4, 6, 5)).astype(np.int32)
  cases = [
    (lambda: Tensor(a) @ Tensor(b), a @ b),
    (lambda: Tensor(a).sum(), a.sum()),
    (lambda: Tensor(a).max(1), a.max(1)),
    (lambda: Tensor(c).sum((0, 2)), c.sum((0, 2))),
    (lambda: Tensor(a).pad(((1, 2), (0, 3))).flip(1)[::2].sum(0), np.pad(a, ((1, 2), (0, 3)))[:, ::-1][::2].sum(0)),
    (lambda: (Tensor(a).exp() / Tensor(a).exp().sum(1, keepdim=True)), np.exp(a) / np.exp(a).sum(1, keepdims=True)),
    (lambda: Tensor(c).permute(2, 0, 1).reshape(5, 24)[:, 3:20].cumsum(1), c.transpose(2, 0, 1).reshape(5, 24)[:, 3:20].cumsum(1)),
    (lambda: Tensor.arange(50), np.arange(50)),
  ]
  monkeypatch.setattr(I, "CHUNK_ELEMENTS", budget)
  for k, (make, want) in enumerate(cases):
    I.reset_stats()
    got = _numpy_run(make())
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, err_msg=f"case {k}")
    assert I.STATS["max_elements"] <= max(budget, 32), f"case {k}: {I.STATS}"  # a few reduce results can't split below a row

def test_large_reduce_stays_within_the_chunk_budget(monkeypatch):
  # a (512, 512) @ (512, 512) matmul is a 2^27-element reduce input; the old interpreter built it whole (512 MiB)
  rng = np.random.default_rng(1)
  a, b = rng.standard_normal((512, 512)).astype(np.float32), rng.standard_normal((512, 512)).astype(np.float32)
  ta, tb = Tensor(a).realize(), Tensor(b).realize()
  for budget, bound in ((1 << 22, 96 << 20), (1 << 16, 8 << 20)):
    monkeypatch.setattr(I, "CHUNK_ELEMENTS", budget)
    out = ta @ tb
    sched = out.schedule()
    I.reset_stats()
    tracemalloc.start()
    from tinysched.realize import run_schedule
    run_schedule(sched)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert I.STATS["max_elements"] <= budget and I.STATS["chunks"] > 1
    assert peak < bound, f"peak {peak / 2**20:.1f} MiB with a budget of {budget} elements"
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-3)

def test_arange_peak_memory_is_linear():
  Tensor.arange(10).numpy()
  tracemalloc.start()
  np.testing.assert_array_equal(_numpy_run(Tensor.arange(2**20)), np.arange(2**20))
  peak = tracemalloc.get_traced_memory()[1]
  tracemalloc.stop()
  assert peak < 200 << 20, f"arange(2^20) peaked at {peak / 2**20:.0f} MiB"

def test_embedding_runs_chunked():
  from tinysched import nn
  e = nn.Embedding(5000, 64)
  toks = np.array([[3, 4999, 0, 17]], np.int32)
  I.reset_stats()
  got = _numpy_run(e(Tensor(toks)))
  np.testing.assert_allclose(got[0], e.weight.numpy()[toks[0]])
  assert I.STATS["max_elements"] <= I.CHUNK_ELEMENTS

def test_inputs_aliasing_outputs_are_read_before_any_chunk_writes(monkeypatch):
  # buf0 = flip(buf0) + 1 in small chunks: later chunks must still see the old values
  n = 40
  v = ShapeTracker.from_shape((n,))
  ld = UOp(Ops.LOAD, dtypes.int32, (_glob(0, dtypes.int32), v.flip((0,)).to_uop()))
  ast = UOp.sink_of(UOp.store(_glob(0, dtypes.int32), v.to_uop(), ld + UOp.const(dtypes.int32, 1)))
  monkeypatch.setattr(I, "CHUNK_ELEMENTS", 8)
  I.reset_stats()
  buf = np.arange(n, dtype=np.int32)
  exec_ast(ast, [buf], {})
  np.testing.assert_array_equal(buf, np.arange(n)[::-1] + 1)
  assert I.STATS["input_copies"] == 1 and I.STATS["chunks"] == 5
  # read exactly where written (an elementwise assign): no copy needed
  ast2 = UOp.sink_of(UOp.store(_glob(0, dtypes.int32), v.to_uop(), UOp(Ops.LOAD, dtypes.int32, (_glob(0, dtypes.int32), v.to_uop())) * 2))
  I.reset_stats()
  exec_ast(ast2, [buf], {})
  np.testing.assert_array_equal(buf, (np.arange(n)[::-1] + 1) * 2)
  assert I.STATS["input_copies"] == 0

def test_empty_reduce_gives_the_identity():
  np.testing.assert_array_equal(_numpy_run(Tensor.empty(0, 3).sum(0)), np.zeros(3))
  np.testing.assert_array_equal(_numpy_run(Tensor.empty(0, 3).max(0)), np.full(3, -np.inf))

def test_store_out_of_bounds_is_a_clear_error():
  ast = UOp.sink_of(UOp.store(_glob(0, dtypes.int32), ShapeTracker.from_shape((4,)).to_uop().replace(
    arg=ShapeTracker((View.create((4,), (1,), 3, ((0, 3),)),))), UOp.const(dtypes.int32, 1)))
  exec_ast(ast, [np.zeros(6, np.int32)], {})  # the masked-out last position would be index 6: not written
  with pytest.raises(I.InterpreterError, match="out of bounds"): exec_ast(ast, [np.zeros(5, np.int32)], {})

# *** int64 indexing past 2^31 ***

def _sparse_rows(rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
  buf = np.ones(rows * cols, np.int8)  # touched for real (not lazily zero pages): 2.7 GB resident
  want = np.full(rows, cols, np.int64)
  for r in range(rows):
    for k, c in enumerate((0, 1, cols // 2, cols - 2, cols - 1)):  # distinct values at each row's ends and middle
      buf[r * cols + c] = (r + 1) * (k + 1) % 100
      want[r] += (r + 1) * (k + 1) % 100 - 1
  return buf, want

def _run_on(t: Tensor, big: np.ndarray) -> np.ndarray:
  """Run t's kernels with exec_ast on numpy buffers, `big` standing for the one buffer of its size (no 2.7 GB copies)."""
  arrays: dict[int, np.ndarray] = {}
  kernels = _kernels(t)
  for si in kernels:
    bufs = [arrays.setdefault(id(b), big if b.size == big.size else np.zeros(b.size, b.dtype.np)) for b in si.bufs]
    exec_ast(si.ast, bufs, {})
  return arrays[id(kernels[-1].bufs[0])]

@pytest.mark.slow
def test_reduce_over_a_buffer_past_2_31_elements():
  rows, cols = 5, 2**29  # flat offsets of row 4 start at 2^31; 2.7 GB
  buf, want = _sparse_rows(rows, cols)
  t0 = time.perf_counter()
  out = _run_on(Tensor.empty(rows, cols, dtype=dtypes.int8).sum(1), buf)
  print(f"sum over (5, 2^29) int8: {time.perf_counter() - t0:.1f}s")
  np.testing.assert_array_equal(out, want)

@pytest.mark.slow
def test_gathered_reads_past_2_31_elements(monkeypatch):
  # the gather path (no numpy strided views) indexes with int64 too: the last row's tail, flipped
  rows, cols = 5, 2**29
  buf, _ = _sparse_rows(rows, cols)
  monkeypatch.setattr(I, "STRIDED_LOADS", False)
  out = _run_on(Tensor.empty(rows, cols, dtype=dtypes.int8)[3:, -2**20:].flip(1).cast(dtypes.int32).sum(1), buf)
  tail = buf.reshape(rows, cols)[3:, -2**20:].astype(np.int64).sum(1)
  np.testing.assert_array_equal(out, tail)
  assert (tail > 2**20).all()

def test_int64_positions_do_not_wrap():
  # positions computed in int64: a view whose offset is past 2^31 (no buffer needed to compute positions)
  st = ShapeTracker((View.create((3, 2**20), (2**31, 1), 2**32 + 5),))
  idx, valid = view_positions(resolve_views(st, {}), ((2, 3), (2**20 - 2, 2**20)))
  assert valid is True and np.asarray(idx).dtype == np.int64
  np.testing.assert_array_equal(np.asarray(idx).reshape(-1), [2**32 + 5 + 2 * 2**31 + 2**20 - 2, 2**32 + 5 + 2 * 2**31 + 2**20 - 1])

# *** accumulation ***

def _sum_ast(n: int, dt) -> UOp:
  ld = UOp(Ops.LOAD, dt, (_glob(1, dt), ShapeTracker.from_shape((n,)).to_uop()))
  return UOp.sink_of(UOp.store(_glob(0, dt), ShapeTracker.from_shape((1,)).to_uop(), ld.r(Ops.ADD, (0,))))

@pytest.mark.parametrize("budget", [1 << 22, 1000])
def test_reference_mode_accumulates_in_float64(budget, monkeypatch):
  monkeypatch.setattr(I, "CHUNK_ELEMENTS", budget)
  rng = np.random.default_rng(3)
  x = (rng.standard_normal(300_000) * 10 ** rng.uniform(-3, 4, 300_000)).astype(np.float32)
  exact = np.float32(np.sum(x.astype(np.float64)))  # float64 pairwise of float32 data: rounded once, it is exact here
  ref, normal = np.zeros(1, np.float32), np.zeros(1, np.float32)
  exec_ast(_sum_ast(x.size, dtypes.float32), [ref, x], {}, reference=True)
  exec_ast(_sum_ast(x.size, dtypes.float32), [normal, x], {})
  assert ref[0] == exact
  if budget >= x.size: assert normal[0] == np.add.reduce(x, dtype=np.float32)  # unchunked: numpy's float32 sum, as documented
  assert normal[0] != exact  # the data is chosen so float32 accumulation rounds differently
  monkeypatch.setattr(I, "REFERENCE", True)
  via_flag = np.zeros(1, np.float32)
  exec_ast(_sum_ast(x.size, dtypes.float32), [via_flag, x], {})
  assert via_flag[0] == exact

def test_float16_accumulates_in_float32_and_rounds_once():
  x = np.full(5000, 0.1, np.float16)
  out = np.zeros(1, np.float16)
  exec_ast(_sum_ast(x.size, dtypes.float16), [out, x], {})
  assert out[0] == np.float16(np.add.reduce(x, dtype=np.float32))
  assert abs(float(out[0]) - 500) < 1

def test_integer_reduces_wrap_in_their_dtype(monkeypatch):
  x = np.full(1000, 100, np.int8)
  for budget in (1 << 22, 7):
    monkeypatch.setattr(I, "CHUNK_ELEMENTS", budget)
    out = np.zeros(1, np.int8)
    exec_ast(_sum_ast(x.size, dtypes.int8), [out, x], {})
    assert out[0] == np.int8((100 * 1000) % 256 - 256 if (100 * 1000) % 256 > 127 else (100 * 1000) % 256)


def test_closed_form_sum_of_no_terms_is_positive_zero():
  # a masked-constant sum counted in closed form: a row with no valid element is the identity +0.0, as a summing loop
  # gives (and codegen's fold), not count * c = -0.0 for a negative c
  from tinysched.dtype import dtypes
  st = ShapeTracker((View.create((2, 3), (0, 0), 0, ((0, 1), (0, 3))),))
  val = UOp(Ops.VALID, dtypes.bool, (st.to_uop(),)).where(UOp.const(dtypes.float32, -1.0), UOp.const(dtypes.float32, 0.0))
  red = UOp(Ops.REDUCE_AXIS, dtypes.float32, (val,), (Ops.ADD, (1,)))
  ast = UOp.sink_of(UOp.store(UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 0), ShapeTracker.from_shape((2, 1)).to_uop(), red))
  out = np.full(2, 7.0, np.float32)
  exec_ast(ast, [out], {})
  assert out.tolist() == [-3.0, 0.0] and not np.signbit(out[1])

# *** reference mode: sums of products contracted without making the product ***

def _contraction_cases():
  from tinysched.nn import Embedding
  Tensor.manual_seed(5)
  emb = Embedding(50, 6)
  emb_w = np.random.default_rng(12).random((50, 6), dtype=np.float32)
  emb.weight = Tensor(emb_w)
  rng = np.random.default_rng(11)
  a, b = rng.random((6, 9), dtype=np.float32), rng.random((9, 5), dtype=np.float32)
  x, w = rng.random((2, 3, 7, 7), dtype=np.float32), rng.random((4, 3, 3, 3), dtype=np.float32)
  v, g16 = rng.random(7, dtype=np.float32), rng.random((16, 4), dtype=np.float32)
  A, B, X, W, V, G16 = (x.astype(np.float64) for x in (a, b, x, w, v, g16))
  return [
    ("matmul", lambda: Tensor(a) @ Tensor(b), A @ B),
    ("matmul_transposed", lambda: Tensor(b).T @ Tensor(a).T, (A @ B).T),
    ("padded_matmul", lambda: Tensor(a).pad(((0, 0), (0, 2))) @ Tensor(b).pad(((0, 2), (0, 0))), A @ B),
    ("batched", lambda: (Tensor(a).reshape(2, 3, 9) @ Tensor(b)), (A.reshape(2, 3, 9) @ B)),
    ("conv2d", lambda: Tensor(x).conv2d(Tensor(w), padding=1), None),
    # along the reduce dim only one operand varies; and one where neither does (each position still counts)
    ("one_sided", lambda: (Tensor(a)[:, :, None] * Tensor(b)[None, 0:1, :]).sum(1), A.sum(1)[:, None] * B[0][None, :]),
    # selects of a value or zero: a one-hot gather (sparse), a dense mask, the zero first, a non-finite value not selected
    ("one_hot_gather", lambda: emb(Tensor([[3, 7, 3, 49]], dtype=dtypes.int32)), emb_w.astype(np.float64)[[[3, 7, 3, 49]]]),
    ("dense_mask", lambda: (Tensor(a) > 0.3).where(Tensor(a), 0).sum(1), np.where(A > 0.3, A, 0).sum(1)),
    ("zero_first", lambda: (Tensor(a) > 0.3).where(0, Tensor(a)).sum(0), np.where(A > 0.3, 0, A).sum(0)),
    ("unselected_inf", lambda: (Tensor.arange(9).reshape(1, 9) == Tensor([[2], [5]], dtype=dtypes.int32)).where(
      Tensor(np.array([np.inf] * 2 + [1.5] + [np.inf] * 2 + [2.5] + [np.inf] * 3, np.float32)).reshape(1, 9), 0).sum(1), np.array([1.5, 2.5])),
    ("two_hot", lambda: _two_hot(g16), np.stack([G16[list(p)].sum(0) for p in TWO_HOT])),
    ("neither_varies", lambda: _broadcast_product_sum(v), V * V * 5),
  ]

def _two_hot(g: np.ndarray) -> Tensor:
  """Output row t sums rows TWO_HOT[t] of g (two of 16): outputs that receive more than one term."""
  r = Tensor.arange(16).reshape(1, 16, 1)
  i, j = (Tensor([[p[k]] for p in TWO_HOT], dtype=dtypes.int32).reshape(3, 1, 1) for k in (0, 1))
  return ((r == i) | (r == j)).where(Tensor(g).reshape(1, 16, 4), 0).sum(1)

TWO_HOT = [(1, 4), (2, 4), (3, 9)]

def _broadcast_product_sum(v: np.ndarray) -> np.ndarray:
  """sum over j < 5 of v[i] * v[i]: both loads broadcast along the reduce dim (the scheduler would fold this itself)."""
  st = ShapeTracker.from_shape((7,)).reshape((7, 1)).expand((7, 5)).to_uop()
  a, b = (UOp(Ops.LOAD, dtypes.float32, (_glob(i, dtypes.float32), st)) for i in (1, 2))
  ast = UOp.sink_of(UOp.store(_glob(0, dtypes.float32), ShapeTracker.from_shape((7, 1)).to_uop(), (a * b).r(Ops.ADD, (1,))))
  out = np.zeros(7, np.float32)
  exec_ast(ast, [out, v, v.copy()], {})
  return out

CONTRACTION_CASES = ["matmul", "matmul_transposed", "padded_matmul", "batched", "conv2d", "one_sided", "one_hot_gather",
                     "dense_mask", "zero_first", "unselected_inf", "two_hot", "neither_varies"]

@pytest.mark.parametrize("case_name", CONTRACTION_CASES)
@pytest.mark.parametrize("budget", [1 << 22, 40])
def test_reference_contraction_equals_the_elementwise_sum(case_name, budget, monkeypatch, stats):
  # the cases are made here, with the NUMPY device already the default (not at collection, where it may be OPENCL)
  cases = {c[0]: c for c in _contraction_cases()}
  assert list(cases) == CONTRACTION_CASES
  name, build, exact = cases[case_name]
  monkeypatch.setattr(I, "CHUNK_ELEMENTS", budget)
  monkeypatch.setattr(I, "REFERENCE", True)
  def run(contract: bool) -> np.ndarray:
    monkeypatch.setattr(I, "CONTRACT", contract)
    r = build()
    return r if isinstance(r, np.ndarray) else r.numpy()
  got, plain = run(True), run(False)
  assert stats["contracted"] >= 1
  np.testing.assert_allclose(got, plain, rtol=2e-7, atol=0)  # both float64 sums: the products' rounding differs only
  if exact is not None: np.testing.assert_allclose(got, exact.astype(np.float32), rtol=1e-6)
  if name in ("one_hot_gather", "unselected_inf", "two_hot"): assert stats["sparse"] >= 1
  if name == "one_hot_gather": np.testing.assert_array_equal(got, plain)  # one term per output: exact either way

def test_planted_contraction_that_counts_a_constant_product_once_is_caught(monkeypatch, stats):
  """The `reps` factor (a product neither operand varies along a reduce dim) matters: without it the sum is wrong."""
  real = I._contract
  def planted(a, b, region, axes):
    r = real(a, b, region, axes)
    nd, ext = len(region), [e - s for s, e in region]
    a, b = (np.asarray(x).reshape(x.shape if x.ndim == nd else (1,) * (nd - x.ndim) + x.shape) for x in (a, b))
    reps = math.prod(ext[d] for d in axes if a.shape[d] == 1 and b.shape[d] == 1)
    return r / reps
  monkeypatch.setattr(I, "_contract", planted)
  monkeypatch.setattr(I, "REFERENCE", True)
  name, build, exact = _contraction_cases()[-1]
  assert name == "neither_varies"
  got = build()
  assert not np.allclose(got, exact)

def test_planted_sparse_contraction_that_drops_repeated_outputs_is_caught(monkeypatch, stats):
  """An unbuffered add is needed: a fancy-index += keeps one of the terms that land on the same output."""
  monkeypatch.setattr(I, "_scatter_add", lambda out, idx, v: out.__setitem__(idx, out[idx] + v))
  monkeypatch.setattr(I, "REFERENCE", True)
  name, build, exact = next(c for c in _contraction_cases() if c[0] == "two_hot")
  got = build().numpy()
  assert stats["sparse"] >= 1 and not np.allclose(got, exact)

@pytest.mark.parametrize("dst_n,src_n", [(6, 6), (4, 6), (6, 4), (0, 3)])
def test_a_same_device_copy_moves_the_first_bytes(dst_n, src_n):
  """A COPY kernel on flat buffers and NumpyBackend.copy on Buffers: the first min(dst, src) bytes of src into dst,
  bit for bit (a float32 destination of int32 data keeps the bits), the rest of dst untouched."""
  src = np.arange(1, src_n + 1, dtype=np.int32)
  dst = np.full(dst_n, -7.0, dtype=np.float32)
  want = dst.copy()
  n = min(dst.nbytes, src.nbytes)
  want.view(np.uint8)[:n] = src.view(np.uint8)[:n]
  flat = dst.copy()
  exec_ast(UOp(Ops.COPY, dtypes.void, (), None), [flat, src.copy()], {})
  np.testing.assert_array_equal(flat.view(np.uint32), want.view(np.uint32))
  from tinysched.device import Buffer
  d, s = Buffer("NUMPY", dst_n, dtypes.float32).allocate(), Buffer("NUMPY", src_n, dtypes.int32).allocate()
  d.copyin(dst); s.copyin(src)
  Device["NUMPY"].copy(d, s)
  np.testing.assert_array_equal(d.numpy().view(np.uint32), want.view(np.uint32))
