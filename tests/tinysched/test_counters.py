"""GlobalCounters (tinysched/helpers.py, counted in tinysched/realize.py, cost model tinysched/cost.py): kernel count,
FLOPs, bytes and kernel time, from Tensor.realize and from TinyJit replays, on NUMPY and OPENCL."""
import numpy as np
import pytest
import tinysched
import tinysched.cost as C
from tinysched import Tensor, TinyJit, GlobalCounters
from tinysched.ops import Ops
from tinysched.helpers import GlobalCounters as GC2

def _opencl() -> bool:
  try:
    from tinysched.runtime.opencl import opencl_available
    return opencl_available()
  except ImportError: return False

DEVICES = ["NUMPY", pytest.param("OPENCL", marks=pytest.mark.skipif(not _opencl(), reason="no OpenCL platform"))]
RNG = np.random.default_rng(19)

def rand(*shape) -> np.ndarray: return RNG.standard_normal(shape).astype(np.float32)

def realized(a: np.ndarray, dev: str) -> Tensor: return Tensor(a, device=dev).realize()

def counters() -> tuple[int, int, int]: return GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem

def test_names():
  assert tinysched.GlobalCounters is GC2 and "GlobalCounters" in tinysched.__all__

@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("m,k,n", [(7, 3, 5), (16, 32, 8), (1, 64, 1)])
def test_matmul_flops(dev, m, k, n):
  """(M, K) @ (K, N): M*N*K multiplies and M*N*K reduce adds (cost.py's definition), one kernel, each buffer once."""
  a, b = realized(rand(m, k), dev), realized(rand(k, n), dev)
  GlobalCounters.reset()
  out = (a @ b).realize()
  assert counters() == (1, 2 * m * n * k, (m * k + k * n + m * n) * 4)
  np.testing.assert_allclose(out.numpy(), a.numpy() @ b.numpy(), rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("dev", DEVICES)
def test_elementwise_bytes(dev):
  """a + b of n float32: one kernel, n FLOPs, 3n*4 bytes (two inputs, one output); a half input counts 2 bytes/element."""
  n = 1000
  a, b = realized(rand(n), dev), realized(rand(n), dev)
  GlobalCounters.reset()
  (a + b).realize()
  assert counters() == (1, n, 3 * n * 4)
  h = realized(rand(n).astype(np.float16), dev)
  GlobalCounters.reset()
  (h.float() + a).realize()
  assert GlobalCounters.kernel_count == 1 and GlobalCounters.global_mem == n * 2 + n * 4 + n * 4
  GlobalCounters.reset()
  (a[:10] * 3).realize()  # a shrink of the input reaches 10 of its elements: those count (cost.py)
  assert counters() == (1, 2 * 10, 10 * 4 + 10 * 4)  # 10 MULs + the constant's WHERE(VALID, 3, 0) per element (cost.py)

GRAPHS = {
  "softmax": lambda t: t["x"].softmax(1),
  "matmul_relu_sum": lambda t: (t["x"] @ t["w"]).relu().sum(),
  "conv2d": lambda t: t["img"].conv2d(t["k"], padding=1).relu(),
  "mean_var": lambda t: t["x"] - t["x"].mean(0) + t["x"].var(1, keepdim=True),
  "cat_max": lambda t: t["x"].cat(t["x"] * 2, dim=0).max(0),
  "arange_gather": lambda t: t["x"][Tensor.arange(3, device=t["x"].device)] * 2,
}

@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_kernel_count_is_len_schedule(dev, name):
  t = {"x": realized(rand(6, 8), dev), "w": realized(rand(8, 4), dev), "img": realized(rand(1, 2, 5, 5), dev),
       "k": realized(rand(3, 2, 3, 3), dev)}
  sched = GRAPHS[name](t).schedule()
  assert sched and all(si.ast.op in (Ops.SINK, Ops.COPY) for si in sched)  # items that run work (EMPTY would not count)
  ops = sum(C.buffers_cost(si.ast, si.bufs)[0] for si in sched if si.ast.op is Ops.SINK)
  GlobalCounters.reset()
  GRAPHS[name](t).realize()
  assert GlobalCounters.kernel_count == len(sched)
  assert GlobalCounters.global_ops == ops > 0

@pytest.mark.parametrize("dev", DEVICES)
def test_jit_replays_count(dev):
  """A replay runs no schedule: its launches must count all the same, as many and as costly as the unjitted call's."""
  w, b = realized(rand(8, 16), dev), realized(rand(16), dev)
  def f(x: Tensor) -> Tensor: return ((x @ w + b).relu() * 2).sum(1)
  x0 = realized(rand(4, 8), dev)
  GlobalCounters.reset()
  f(x0).realize()
  plain = counters()
  assert plain[0] >= 1
  jf = TinyJit(f)
  for _ in range(2): jf(realized(rand(4, 8), dev))  # warm-up and recording run the function: they count as usual
  assert jf.recording is not None
  GlobalCounters.reset()
  for i in range(3):
    x = realized(rand(4, 8), dev)
    got = jf(x).numpy()
    np.testing.assert_allclose(got, f(x).numpy(), rtol=1e-5, atol=1e-5)
  assert counters() == tuple(6 * c for c in plain)  # 3 replays + 3 unjitted checks

@pytest.mark.parametrize("dev", DEVICES)
def test_reset_and_time(dev):
  a = realized(rand(64, 64), dev)
  GlobalCounters.reset()
  (a @ a).exp().realize()
  assert GlobalCounters.kernel_count >= 1 and GlobalCounters.global_ops > 0 and GlobalCounters.global_mem > 0
  assert GlobalCounters.time_sum_s > 0  # both devices report kernel time
  (a @ a).realize()  # launched, its time (OPENCL: a profiling event) not read yet: reset must drop it too
  GlobalCounters.reset()
  assert counters() == (0, 0, 0) and GlobalCounters.time_sum_s == 0.0
  (a + 1).realize()
  (a * 3).realize()
  assert GlobalCounters.kernel_count == 2  # counting starts again from 0, and adds up

@pytest.mark.parametrize("dev", DEVICES)
def test_no_work_no_count(dev):
  """Data loaded from the host and EMPTY items run no kernel."""
  GlobalCounters.reset()
  Tensor(rand(5), device=dev).realize()
  Tensor.empty(4, device=dev).realize()
  assert counters() == (0, 0, 0)

def test_the_execution_check_uses_the_one_cost_model():
  from replay.execute import timing
  assert timing.throughput_cost is C.throughput_cost and timing.ProgramCost is C.ProgramCost

@pytest.mark.parametrize("dev", DEVICES)
def test_symbolic_dims_count_at_the_bound_value(dev):
  """A kernel over a bound Variable's length counts its FLOPs at this run's value (n adds + n reduce adds), bytes too
  (the n elements of each input its views reach, and the output)."""
  from tinysched import Variable
  x, y = realized(np.arange(16, dtype=np.float32), dev), realized(np.ones(16, dtype=np.float32), dev)
  for n in (3, 7):
    v = Variable("n", 1, 16).bind(n)
    GlobalCounters.reset()
    out = (x[:v] + y[:v]).sum().realize()
    assert counters() == (1, 2 * n, n * 4 * 2 + 4)
    assert out.item() == sum(range(n)) + n

@pytest.mark.skipif(not _opencl(), reason="no OpenCL platform")
@pytest.mark.parametrize("src,dst", [("OPENCL", "NUMPY"), ("NUMPY", "OPENCL")])
def test_copy_counts_its_bytes(src, dst):
  """A COPY between devices is one item: no FLOPs, its destination's bytes."""
  a = realized(rand(10, 3), src)
  sched = a.to(dst).schedule()
  assert [si.ast.op for si in sched] == [Ops.COPY]
  GlobalCounters.reset()
  out = a.to(dst).realize()
  assert counters() == (1, 0, 30 * 4)
  np.testing.assert_array_equal(out.numpy(), a.numpy())

def test_bounded_pending_times_never_wait_for_the_newest_launches(monkeypatch):
  # past _Deferred.MAX, the older half of the pending device reports is read (bounded memory); the newest, which may
  # still be running, are not (reading one waits for its kernel). Planted: draining all of them calls the newest.
  from tinysched.helpers import GlobalCounters as GC, _Deferred
  GC.reset()
  called: list[int] = []
  n = _Deferred.MAX + 1
  for i in range(n): GC.count(0, 0, (lambda i=i: called.append(i) or 1e-6))
  assert called and max(called) < n - _Deferred.MAX // 2 and len(GC._time.pending) == _Deferred.MAX // 2
  assert abs(GC.time_sum_s - n * 1e-6) < 1e-9 and len(called) == n  # reading the total reads every report once
  GC.reset(); called.clear()
  monkeypatch.setattr(GC._time, "keep", 0)
  for i in range(n): GC.count(0, 0, (lambda i=i: called.append(i) or 1e-6))
  assert max(called) == n - 1  # the plant waited for the newest launch
  GC.reset()

def check_symbolic_flops(dev: str) -> None:
  """A jitted kernel over a Variable-sized view counts its FLOPs at each call's value (computed when global_ops is read)."""
  from tinysched import Variable
  a = realized(rand(32, 8), dev)
  v = Variable("n", 1, 32)
  jf = TinyJit(lambda x, n: (x[:n] * 2).sum(0).realize())
  for i in (5, 6): jf(a, v.bind(i))
  assert jf.recording is not None and any(ln.vars for ln in jf.recording.launches)
  want = 0
  GlobalCounters.reset()
  for i in (3, 17, 32, 9):
    got = jf(a, v.bind(i)).numpy()
    np.testing.assert_allclose(got, (a.numpy()[:i] * 2).sum(0), rtol=1e-5, atol=1e-5)
    want += sum(C.kernel_flops(ln.ast, {u: i for u in ln.vars}) for ln in jf.recording.launches if ln.ast.op is Ops.SINK)
  assert GlobalCounters.global_ops == want > 0

@pytest.mark.parametrize("dev", DEVICES)
def test_symbolic_flops_at_each_calls_values(dev): check_symbolic_flops(dev)

def test_plant_symbolic_flops_stale_values(monkeypatch):
  """The deferred FLOP count reads the Variable values of the first call it saw."""
  import tinysched.realize as R
  first: list = []
  real = R.kernel_flops
  def stale(ast, var_vals=None):
    if var_vals:
      if not first: first.append(dict(var_vals))
      var_vals = {k: first[0].get(k, v) for k, v in var_vals.items()}
    return real(ast, var_vals)
  monkeypatch.setattr(R, "kernel_flops", stale)
  with pytest.raises(AssertionError): check_symbolic_flops("NUMPY")
