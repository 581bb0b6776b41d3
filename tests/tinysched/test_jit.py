"""TinyJit (tinysched/jit.py): launch replay. Every property is a `check_*` function run on NUMPY and OPENCL; the
`test_plant_*` tests plant the bug each check exists for (stale inputs, stale Variable values, a jit that re-runs the
function, no shape check, a recording call that is not captured, fresh intermediates per call) and require the check
to go red."""
import numpy as np
import pytest
import tinysched.jit as J
import tinysched.lazy as L
import tinysched.schedule as S
from tinysched import Tensor, TinyJit, Variable, JitError, Device, capture_hook
from tinysched.device import Buffer
from tinysched.models.layers import write_cache, cached_attention

def _opencl() -> bool:
  try:
    from tinysched.runtime.opencl import opencl_available
    return opencl_available()
  except ImportError: return False

DEVICES = ["NUMPY", pytest.param("OPENCL", marks=pytest.mark.skipif(not _opencl(), reason="no OpenCL platform"))]
RNG = np.random.default_rng(20)

def rand(*shape) -> np.ndarray: return RNG.standard_normal(shape).astype(np.float32)

class Tracked:
  """A jitted MLP forward whose body counts its runs (the jit must stop running it after the recording)."""
  def __init__(self, dev: str):
    self.w1, self.b1, self.w2 = rand(8, 16), rand(16), rand(16, 4)
    self.t = [Tensor(a, device=dev) for a in (self.w1, self.b1, self.w2)]
    self.runs = 0
    self.jit = TinyJit(self.forward)
  def forward(self, x: Tensor) -> Tensor:
    self.runs += 1
    w1, b1, w2 = self.t
    return ((x @ w1 + b1).relu() @ w2).relu().sum(1)
  def numpy(self, x: np.ndarray) -> np.ndarray: return np.maximum(np.maximum(x @ self.w1 + self.b1, 0) @ self.w2, 0).sum(1)

# *** the checks ***

def check_numbers(dev: str) -> None:
  """Seven calls with new inputs: each output equals the unjitted call's and numpy's; outputs of replayed calls are
  the recorded output buffer (overwritten by the next call)."""
  m = Tracked(dev)
  w = Tensor(rand(8, 8), device=dev)
  mmr = TinyJit(lambda x, y: ((x @ w).relu() + y).sum())
  outs = []
  for i in range(7):
    xn, yn = rand(5, 8), rand(5, 8)
    got = m.jit(Tensor(xn, device=dev)).numpy()
    np.testing.assert_allclose(got, m.forward(Tensor(xn, device=dev)).numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, m.numpy(xn), rtol=1e-4, atol=1e-4)
    r = mmr(Tensor(xn, device=dev), y=Tensor(yn, device=dev))
    np.testing.assert_allclose(r.item(), float((np.maximum(xn @ w.numpy(), 0) + yn).sum()), rtol=1e-4)
    outs.append(r)
  assert m.runs == 2 + 7  # the jit ran the body twice (warm-up, record), the 7 unjitted references once each
  bufs = [o.lazydata.base.realized for o in outs[2:]]
  assert all(b is bufs[0] for b in bufs), "replayed calls return the recorded output buffer"

def check_no_scheduling(dev: str) -> None:
  """Replayed calls build no lazy graph, run no scheduler and do not run the function body."""
  m = Tracked(dev)
  xs = [rand(3, 8) for _ in range(6)]
  ts = [Tensor(x, device=dev) for x in xs]  # made before the patch: creating inputs is not the jit's work
  for t in ts[:2]: m.jit(t)
  class SchedulerCalled(AssertionError): pass
  def boom(*a, **k): raise SchedulerCalled("the scheduler or the lazy graph was used by a replayed call")
  for x, t in zip(xs[2:], ts[2:]):
    with pytest.MonkeyPatch.context() as mp:  # during the call only: reading the result back (numpy()) realizes
      for mod, name in ((S, "create_schedule_with_vars"), (S, "schedule_graph"), (S, "build_big_graph"), (L, "create_lazybuffer")):
        mp.setattr(mod, name, boom)
      out = m.jit(t)
    np.testing.assert_allclose(out.numpy(), m.numpy(x), rtol=1e-4, atol=1e-4)
  assert m.runs == 2

def check_variable(dev: str) -> None:
  """A bound Variable is rebound on every call: passed as an argument (an int index and a symbolic-length slice) and
  bound in an input's view (a symbolic-length input)."""
  data = rand(12, 4)
  x = Tensor(data, device=dev)
  pos = Variable("pos", 0, 11)
  f = TinyJit(lambda x, p: (x[p] * 2 + x[0:p + 1].sum(0)).contiguous())
  for v in (3, 7, 0, 11, 5, 9, 1):
    got = f(x, pos.bind(v)).numpy()
    np.testing.assert_allclose(got, data[v] * 2 + data[:v + 1].sum(0), rtol=1e-5, atol=1e-5)
  assert f.recording is not None and any(pos in ln.vars for ln in f.recording.launches)
  n = Variable("n", 1, 12)  # bound in an input's view: the input has the symbolic shape (n, 4)
  g = TinyJit(lambda xv: xv.sum(0).contiguous())
  for v in (3, 7, 1, 12, 5):
    np.testing.assert_allclose(g(x[0:n.bind(v)]).numpy(), data[:v].sum(0), rtol=1e-5, atol=1e-5)
  with pytest.raises(JitError, match=r"has shape \(5, 4\), the recorded call's had \(n, 4\)"): g(x[0:5])

def check_kv_cache(dev: str) -> None:
  """A decode step with a KV cache: the cache is written in place at start_pos (a realize inside the function) and
  attention reads the symbolic length start_pos + 1; jitted and unjitted decoding agree at every position."""
  H, D, N = 2, 4, 8
  caches = [Tensor.zeros(2, 1, N, H, D, device=dev).contiguous().realize() for _ in range(2)]
  def step(cache, q, k, v, start_pos):
    write_cache(cache, k, v, start_pos)
    return cached_attention(q, cache, start_pos).realize()
  jitted = TinyJit(lambda q, k, v, start_pos: step(caches[0], q, k, v, start_pos))
  sp = Variable("start_pos", 0, N - 1)
  for i in range(6):
    q, k, v = (rand(1, 1, H, D) for _ in range(3))
    got = jitted(*(Tensor(a, device=dev) for a in (q, k, v)), start_pos=sp.bind(i)).numpy()
    ref = step(caches[1], *(Tensor(a, device=dev) for a in (q, k, v)), sp.bind(i)).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(caches[0].numpy(), caches[1].numpy())

def check_shape_change(dev: str) -> None:
  m = Tracked(dev)
  for _ in range(3): m.jit(Tensor(rand(3, 8), device=dev))
  with pytest.raises(JitError, match=r"argument 0 \('x'\) has shape \(4, 8\), the recorded call's had \(3, 8\)"):
    m.jit(Tensor(rand(4, 8), device=dev))
  with pytest.raises(ValueError, match="dtype"): m.jit(Tensor(rand(3, 8).astype(np.float16), device=dev))
  with pytest.raises(RuntimeError, match="layout"): m.jit(Tensor(rand(8, 3), device=dev).T)
  assert m.runs == 2

def check_captures(dev: str, tmp_path) -> None:
  """Captures see the recording call (its kernels, its schedule) and nothing of replayed calls."""
  import replay, sqlite3
  m = Tracked(dev)
  m.jit(Tensor(rand(3, 8), device=dev))  # warm-up, not captured
  rec, rep = tmp_path / "record.db", tmp_path / "replayed.db"
  with replay.capture(rec, label="record"): m.jit(Tensor(rand(3, 8), device=dev))
  with replay.capture(rep, label="replayed"):
    for _ in range(4): m.jit(Tensor(rand(3, 8), device=dev))
  def levels(db) -> dict:
    with sqlite3.connect(db) as c: return dict(c.execute("select level, count(*) from captures group by level order by level"))
  assert levels(rep) == {}, "a replayed call schedules nothing: nothing to capture"
  assert m.jit.recording is not None
  kernels = len({ln.ast.key for ln in m.jit.recording.launches})
  got = levels(rec)
  assert got.get("kernel") == kernels and got.get("schedule", 0) >= 1, got

def check_no_realloc(dev: str) -> None:
  """The recorded call allocates the intermediates; replayed calls allocate nothing and bind the same buffers."""
  m = Tracked(dev)
  backend = Device[dev]
  count = [0]
  alloc = backend.alloc
  def counting(*a, **k):
    count[0] += 1
    return alloc(*a, **k)
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(backend, "alloc", counting)
    _realloc_calls(m, dev, count)

def _realloc_calls(m: Tracked, dev: str, count: list) -> None:
  ts = [Tensor(rand(3, 8), device=dev) for _ in range(6)]
  m.forward(ts[0]).realize()
  assert count[0] > 1, "an unjitted call allocates its intermediates and output (the counter works)"
  m.jit(ts[0]); m.jit(ts[1])
  assert m.jit.recording is not None
  kept = m.jit.recording.intermediates()
  assert len(m.jit.recording.launches) >= 2 and len(kept) > len(m.t)  # weights, intermediates, output
  count[0] = 0
  for t in ts[2:]: m.jit(t)
  assert count[0] == 0, f"replayed calls allocated {count[0]} buffers"
  assert [id(b) for b in m.jit.recording.intermediates()] == [id(b) for b in kept]

def check_views_and_inplace(dev: str) -> None:
  """A BUFFER_VIEW of an input is re-made over each call's input (same byte offset); an in-place assign into an input
  writes this call's input, and the returned Tensor is this call's input."""
  from tinysched.lazy import LazyBuffer
  from tinysched.ops import Ops
  def window(x: Tensor) -> Tensor:
    return Tensor(LazyBuffer.metaop(Ops.BUFFER_VIEW, (4,), x.dtype, x.device, arg=(4, 2), src=(x.lazydata,)))
  f = TinyJit(lambda x: (window(x) * 2).contiguous())
  g = TinyJit(lambda x: x.assign(x * 2 + 1))
  for i in range(5):
    xn = rand(8)
    np.testing.assert_allclose(f(Tensor(xn, device=dev)).numpy(), xn[2:6] * 2, rtol=1e-6)
    t = Tensor(xn, device=dev)
    r = g(t)
    np.testing.assert_allclose(r.numpy(), xn * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(t.numpy(), xn * 2 + 1, rtol=1e-6)

def check_gpt2_decode(dev: str) -> None:
  """GPT-2 (the suite's tiny config) decoding with its KV cache: prefill unjitted, then jitted one-token steps at
  start_pos = Variable.bind(position) give the unjitted generate()'s tokens and logits."""
  import tinysched.models.gpt2 as G
  c, prompt, n = G.GPT2_TINY, [5, 17, 300, 42], 7
  sd = G.random_gpt2_weights(c)
  prev, Device.DEFAULT = Device.DEFAULT, dev
  try:
    ref_ids, ref_logits = G.GPT2(c, sd).generate(prompt, n)
    m = G.GPT2(c, sd)
    logits, tok = m.forward(prompt, 0)
    G.realize(logits, tok)
    ids = [int(tok.numpy()[0])]
    step = TinyJit(m.forward)
    for i in range(n - 1):
      logits, tok = step(Tensor(np.array([[ids[-1]]], np.int32), device=dev), m.start_pos_var.bind(len(prompt) + i))
      np.testing.assert_allclose(logits.numpy()[0], ref_logits[i + 1], rtol=1e-5, atol=1e-5)
      ids.append(int(tok.numpy()[0]))
    assert ids == ref_ids
    assert step.recording is not None and len(step.recording.launches) > 20
  finally: Device.DEFAULT = prev

def check_train_step(dev: str) -> None:
  """A jitted SGD step (forward, backward, in-place weight updates through assign) trains exactly like the unjitted one:
  the same losses per step and the same final weights."""
  from tinysched import nn
  from tinysched.nn.optim import SGD
  batches = [(rand(5, 8), RNG.integers(0, 4, 5).astype(np.int32)) for _ in range(6)]
  init = [rand(16, 8) * 0.3, rand(16) * 0.1, rand(4, 16) * 0.3, rand(4) * 0.1]
  losses, weights = {}, {}
  for mode in ("plain", "jit"):
    l1, l2 = nn.Linear(8, 16), nn.Linear(16, 4)
    params = [l1.weight, l1.bias, l2.weight, l2.bias]
    for p, a in zip(params, init): p.assign(Tensor(a, device=p.device)).realize()
    params = [p.to(dev).realize() for p in params]
    l1.weight, l1.bias, l2.weight, l2.bias = params
    opt = SGD(params, lr=0.1)
    def step(x, y):
      with Tensor.train():
        opt.zero_grad()
        loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y)
        loss.backward()
        opt.step()
      return loss.realize()
    f = TinyJit(step) if mode == "jit" else step
    losses[mode] = [f(Tensor(x, device=dev), Tensor(y, device=dev)).item() for x, y in batches]
    weights[mode] = [p.numpy() for p in params]
  np.testing.assert_allclose(losses["jit"], losses["plain"], rtol=1e-6)
  for a, b in zip(weights["jit"], weights["plain"]): np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)

# *** the tests, on both devices ***

@pytest.mark.parametrize("dev", DEVICES)
def test_numbers(dev): check_numbers(dev)
@pytest.mark.parametrize("dev", DEVICES)
def test_no_scheduling(dev): check_no_scheduling(dev)
@pytest.mark.parametrize("dev", DEVICES)
def test_variable_rebinds(dev): check_variable(dev)
@pytest.mark.parametrize("dev", DEVICES)
def test_kv_cache(dev): check_kv_cache(dev)
@pytest.mark.parametrize("dev", DEVICES)
def test_gpt2_decode(dev): check_gpt2_decode(dev)
@pytest.mark.parametrize("dev", DEVICES)
def test_train_step(dev): check_train_step(dev)
@pytest.mark.parametrize("dev", DEVICES)
def test_shape_change_raises(dev): check_shape_change(dev)
@pytest.mark.parametrize("dev", DEVICES)
def test_captures_on_recording_calls_only(dev, tmp_path): check_captures(dev, tmp_path)
@pytest.mark.parametrize("dev", DEVICES)
def test_intermediates_not_reallocated(dev): check_no_realloc(dev)

@pytest.mark.parametrize("dev", DEVICES)
def test_views_and_inplace(dev): check_views_and_inplace(dev)

@pytest.mark.parametrize("dev", DEVICES)
def test_semantics(dev):
  """tinygrad's counting (warm-up, record, replay), methods, reset, and the errors for what cannot replay."""
  class Model:
    def __init__(self): self.w = Tensor(rand(4, 4), device=dev)
    @TinyJit
    def __call__(self, x): return x @ self.w
  mdl = Model()
  xn = rand(2, 4)
  for i in range(4): np.testing.assert_allclose(mdl(Tensor(xn * i, device=dev)).numpy(), (xn * i) @ mdl.w.numpy(), rtol=1e-5, atol=1e-5)
  scale = TinyJit(lambda x, k: x * k)
  for _ in range(3): scale(Tensor(xn, device=dev), 2.0)
  with pytest.raises(JitError, match=r"argument 1 \('k'\) is 3.0, the recorded call's was 2.0"): scale(Tensor(xn, device=dev), 3.0)
  with pytest.raises(JitError, match=r"argument 1 \('k'\) is 2, the recorded call's was 2.0"): scale(Tensor(xn, device=dev), 2)
  np.testing.assert_allclose(scale(Tensor(xn, device=dev), 2.0).numpy(), xn * 2, rtol=1e-6)
  with pytest.raises(JitError, match="this call passes argument 0 \\('x'\\); the recorded call passed argument 0 \\('x'\\), argument 1"):
    scale(Tensor(xn, device=dev))
  with pytest.raises(JitError, match="holds Tensors inside a list"): scale([Tensor(xn, device=dev)], 2.0)
  scale.reset()
  assert scale.calls == 0 and scale.recording is None
  np.testing.assert_allclose(scale(Tensor(xn, device=dev), 3.0).numpy(), xn * 3, rtol=1e-6)
  add = TinyJit(lambda a, b: a + b)
  same = Tensor(xn, device=dev)
  add(same, same)  # the warm-up checks nothing; recording and replaying refuse one buffer as two inputs
  with pytest.raises(JitError, match=r"argument 0 \('a'\) and argument 1 \('b'\) are the same buffer"): add(same, same)
  for _ in range(3): add(Tensor(xn, device=dev), Tensor(xn, device=dev))
  with pytest.raises(JitError, match="same buffer"): add(same, same)
  with pytest.raises(JitError, match="constant Tensor"): add(Tensor(1.0, device=dev), same)
  inner = TinyJit(lambda x: x * 2)
  outer = TinyJit(lambda x: inner(x) + 1)
  outer(Tensor(xn, device=dev))
  with pytest.raises(JitError, match="nested"): outer(Tensor(xn, device=dev))
  baked = TinyJit(lambda x: x[Variable("i", 0, 1).bind(1)].contiguous())
  baked(Tensor(xn, device=dev))
  with pytest.raises(JitError, match="Variable 'i' .* no argument binds"): baked(Tensor(xn, device=dev))

@pytest.mark.skipif(not _opencl(), reason="no OpenCL platform")
def test_copies_are_recorded():
  """A function that copies between devices (COPY items) replays its copies."""
  f = TinyJit(lambda x: (x.to("NUMPY") * 2).to("OPENCL") + 1)
  for _ in range(5):
    xn = rand(6)
    np.testing.assert_allclose(f(Tensor(xn, device="OPENCL")).numpy(), xn * 2 + 1, rtol=1e-6)
  assert f.recording is not None
  from tinysched.ops import Ops
  assert sum(ln.ast.op is Ops.COPY for ln in f.recording.launches) == 2

# *** the plants: each check goes red on the bug it is for ***

def red(check, *args) -> None:
  try: check(*args)
  except (Exception, pytest.fail.Exception) as e:
    print(f"{check.__name__}: red: {type(e).__name__}: {next((ln for ln in str(e).splitlines() if ln.strip()), '')}")  # -s shows why
    return
  raise AssertionError(f"{check.__name__} passed with the bug planted")

def test_plant_stale_inputs(monkeypatch):
  """Replay binds the first replayed call's inputs on every later call."""
  first: dict = {}
  real = J.Launch.buffers
  monkeypatch.setattr(J.Launch, "buffers", lambda self, inputs: first.setdefault(id(self), real(self, inputs)))
  red(check_numbers, "NUMPY")
  first.clear()
  red(check_train_step, "NUMPY")

def test_plant_stale_variable(monkeypatch):
  """Replay takes the Variable values of the first call instead of the current one."""
  first: dict = {}
  real = J.TinyJit._inputs
  def stale(self, named):
    tensors, vv = real(self, named)
    return tensors, first.setdefault(id(self), vv)
  monkeypatch.setattr(J.TinyJit, "_inputs", stale)
  red(check_variable, "NUMPY")
  red(check_kv_cache, "NUMPY")
  red(check_gpt2_decode, "NUMPY")

def _rerun_every_call(monkeypatch) -> None:
  """A jit that never keeps its recording: every call runs the function (and the scheduler) again."""
  real = J.TinyJit._record
  monkeypatch.setattr(J.TinyJit, "_record", lambda self, *a: (real(self, *a)[0], None))

def test_plant_rerun(monkeypatch, tmp_path):
  _rerun_every_call(monkeypatch)
  red(check_no_scheduling, "NUMPY")
  red(check_captures, "NUMPY", tmp_path)

def test_plant_no_shape_check(monkeypatch):
  """Replay checks nothing about its arguments."""
  monkeypatch.setattr(J.TinyJit, "_check", lambda self, named, tensors: None)
  red(check_shape_change, "NUMPY")
  red(test_semantics, "NUMPY")

@pytest.mark.skipif(not _opencl(), reason="no OpenCL platform")
def test_plant_copies_dropped(monkeypatch):
  """The recording leaves COPY items out (a jit that records kernels only)."""
  from tinysched.ops import Ops
  real = J.TinyJit._record
  def kernels_only(self, *a):
    ret, c = real(self, *a)
    c.launches = [ln for ln in c.launches if ln.ast.op is not Ops.COPY]
    return ret, c
  monkeypatch.setattr(J.TinyJit, "_record", kernels_only)
  red(test_copies_are_recorded)

def test_plant_uncaptured_recording(monkeypatch, tmp_path):
  """The recording call runs with the capture hook switched off."""
  real = J.TinyJit._record
  def hidden(self, *a):
    hook, capture_hook.HOOK = capture_hook.HOOK, None
    try: return real(self, *a)
    finally: capture_hook.HOOK = hook
  monkeypatch.setattr(J.TinyJit, "_record", hidden)
  red(check_captures, "NUMPY", tmp_path)

def test_plant_fresh_intermediates(monkeypatch):
  """Replay allocates a new buffer for every intermediate (and keeps it, as a naive jit would)."""
  real = J.Launch.buffers
  fresh: dict = {}
  def realloc(self, inputs):
    out = []
    for b in real(self, inputs):
      if b.is_allocated and b in self.bufs and b.nbytes:
        nb = fresh.setdefault(id(b), Buffer(b.device, b.size, b.dtype).allocate())
        nb.copyin(b.numpy())
        b = nb
      out.append(b)
    fresh.clear()
    return tuple(out)
  monkeypatch.setattr(J.Launch, "buffers", realloc)
  red(check_no_realloc, "NUMPY")

def test_plant_view_offset_dropped(monkeypatch):
  """A view of an input is re-made at the input's start, not at its offset."""
  real = J.Launch.buffers
  monkeypatch.setattr(J.Launch, "buffers", lambda self, inputs: real(J.Launch(self.ast, self.backend, self.bufs,
    tuple((p, i, v and (v[0], v[1], 0)) for p, i, v in self.binds), self.vars), inputs))
  red(check_views_and_inplace, "NUMPY")

def test_plant_output_of_recorded_input(monkeypatch):
  """An output that is an input's memory is returned as the recorded call's buffer, not this call's input."""
  monkeypatch.setattr(J, "_out_spec", lambda t, own: J._Out(t.lazydata))
  red(check_views_and_inplace, "NUMPY")

def check_output_fed_back(dev: str) -> None:
  """A replayed call's output passed back as the next call's input (y = f(f(x))): the input's memory is the buffer the
  kernel writes, and a kernel whose threads read other elements than they write (a flip, a matmul) must still see the
  input as it was before the call."""
  w = Tensor(rand(16, 16), device=dev).realize()
  f = TinyJit(lambda x: (x.flip(0) * 2 + x @ w).realize())
  def want(a: np.ndarray) -> np.ndarray: return a[::-1] * 2 + a @ w.numpy()
  for _ in range(3):
    xn = rand(16, 16)
    y = f(Tensor(xn, device=dev).realize())
    np.testing.assert_allclose(y.numpy(), want(xn), rtol=1e-4, atol=1e-4)
  for _ in range(2):
    before = y.numpy().copy()
    y = f(y)
    np.testing.assert_allclose(y.numpy(), want(before), rtol=1e-4, atol=1e-4)
  # two kernels: the first overwrites the fed-back output before the second reads it
  g = TinyJit(lambda x: ((x * 2).realize(), (x.flip(0) + 1).realize()))
  for _ in range(3):
    xn = rand(8)
    a, b = g(Tensor(xn, device=dev).realize())
  before = a.numpy().copy()
  a, b = g(a)
  np.testing.assert_allclose(a.numpy(), before * 2, rtol=1e-6)
  np.testing.assert_allclose(b.numpy(), before[::-1] + 1, rtol=1e-6)

@pytest.mark.parametrize("dev", DEVICES)
def test_output_fed_back(dev): check_output_fed_back(dev)

# *** OpenCL's prepared launches (Backend.prepare): a replay sets only a launch's inputs and Variables ***

needs_opencl = pytest.mark.skipif(not _opencl(), reason="no OpenCL platform")

@needs_opencl
def test_opencl_replay_uses_prepared_launches(monkeypatch):
  """Every kernel of an OpenCL replay runs through its prepared launch: exec_ast (the per-launch program lookup and
  argument setting) is not called; and the numbers stay right (check_numbers)."""
  from tinysched.runtime.opencl import OpenCLBackend
  calls = []
  real = OpenCLBackend.exec_ast
  t = Tracked("OPENCL")
  x = [Tensor(rand(3, 8), device="OPENCL") for _ in range(4)]
  for xi in x[:2]: t.jit(xi)
  monkeypatch.setattr(OpenCLBackend, "exec_ast", lambda self, *a: calls.append(1) or real(self, *a))
  for xi in x[2:]: np.testing.assert_allclose(t.jit(xi).numpy(), t.numpy(xi.numpy()), rtol=1e-5, atol=1e-5)
  assert not calls and all(ln.prepared is not None for ln in t.jit.recording.launches)
  check_numbers("OPENCL")

@needs_opencl
def test_plant_no_prepared_launches(monkeypatch):
  """A backend that prepares nothing (every replayed launch through exec_ast) turns the test above red."""
  from tinysched.runtime.opencl import OpenCLBackend
  monkeypatch.setattr(OpenCLBackend, "prepare", lambda self, ast, bufs, var_list: None)
  with pytest.raises(AssertionError): test_opencl_replay_uses_prepared_launches(monkeypatch)

def _plant_prepared(monkeypatch, bug: str) -> None:
  """OpenCLBackend.prepare with a bug in the run it returns: 'inputs' keeps the first replay's input buffers bound,
  'vars' keeps the first replay's Variable values."""
  from tinysched.runtime.opencl import OpenCLBackend
  real = OpenCLBackend.prepare
  def prepare(self, ast, bufs, var_list):
    run = real(self, ast, bufs, var_list)
    if run is None: return None
    first: list = []
    def stale(call_bufs, var_vals):
      if not first: first.append((call_bufs, var_vals))
      b, v = first[0]
      return run(b if bug == "inputs" else call_bufs, v if bug == "vars" else var_vals)
    return stale
  monkeypatch.setattr(OpenCLBackend, "prepare", prepare)

@needs_opencl
def test_plant_prepared_stale_inputs(monkeypatch):
  _plant_prepared(monkeypatch, "inputs")
  red(check_numbers, "OPENCL")

@needs_opencl
def test_plant_prepared_stale_variable(monkeypatch):
  _plant_prepared(monkeypatch, "vars")
  red(check_variable, "OPENCL")
  red(check_kv_cache, "OPENCL")

@needs_opencl
def test_unprofiled_queue_replays_and_refuses_timing():
  """TINYSCHED_PROFILE=0 (a queue without profiling: cheaper launches): a jitted call gives the unjitted numbers, kernels
  report no time, and the explicit timing call says why it cannot time (run in a fresh process: the switch is read
  when the device opens)."""
  import subprocess, sys, os
  code = """
import numpy as np
from tinysched import Tensor, TinyJit, Device, GlobalCounters
from tinysched.device import DeviceError
Device.DEFAULT = "OPENCL"
w = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
f = TinyJit(lambda x: (x @ w).relu().realize())
for i in range(4):
  x = np.full((2, 3), i - 1.5, np.float32)
  np.testing.assert_allclose(f(Tensor(x)).numpy(), np.maximum(x @ w.numpy(), 0))
GlobalCounters.reset(); f(Tensor(np.ones((2, 3), np.float32))); Device["OPENCL"].synchronize()
assert GlobalCounters.kernel_count > 0 and GlobalCounters.time_sum_s == 0
si = [s for s in (Tensor(np.ones(4, np.float32)) + 1).schedule() if s.ast.op.name == "SINK"][0]
try: Device["OPENCL"].run(si.ast, list(si.bufs))
except DeviceError as e: assert "TINYSCHED_PROFILE=0" in str(e), e
else: raise AssertionError("run() timed a kernel on a queue without profiling")
print("ok")
"""
  r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TINYSCHED_PROFILE": "0"}, capture_output=True, text=True, timeout=120)
  assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]

@pytest.mark.parametrize("dev", DEVICES)
def test_a_fed_back_input_is_copied_on_the_device(monkeypatch, dev):
  """The copy of a fed-back input never goes through the host (no Buffer.numpy / copyin: on a GPU those wait for the
  queue); planted: the backend's copy replaced by Backend's host default."""
  def check():
    g = TinyJit(lambda x: ((x * 2).realize(), (x.flip(0) + 1).realize()))
    for _ in range(3): a, _b = g(Tensor(rand(8), device=dev).realize())
    before = a.numpy().copy()
    with monkeypatch.context() as m:
      m.setattr(Buffer, "numpy", lambda self: (_ for _ in ()).throw(AssertionError("through the host")))
      a, b = g(a)
    np.testing.assert_allclose(b.numpy(), before[::-1] + 1, rtol=1e-6)
  check()
  from tinysched.device import Backend
  monkeypatch.setattr(type(Device[dev]), "copy", Backend.copy)
  red(check)

def test_backend_copy_between_views(monkeypatch):
  """Backend.copy on every device: whole buffers, views of one base, and (OpenCL) an offset the device cannot address."""
  from tinysched.dtype import dtypes
  for dev in ["NUMPY"] + (["OPENCL"] if _opencl() else []):
    base = Buffer(dev, 64, dtypes.float32).allocate()
    base.copyin(np.arange(64, dtype=np.float32))
    other = Buffer(dev, 64, dtypes.float32).allocate()
    other.copyin(np.zeros(64, np.float32))
    Device[dev].copy(other, base)
    np.testing.assert_array_equal(other.numpy(), np.arange(64, dtype=np.float32))
    for off in (32 * 4, 4):  # (4 bytes: no sub-buffer on OpenCL, the host path)
      dst, src = Buffer(dev, 8, dtypes.float32, base=other, offset=off), Buffer(dev, 16, dtypes.float32, base=base, offset=0)
      Device[dev].copy(dst, src)  # the first min(dst, src) bytes
      want = np.arange(64, dtype=np.float32)
      want[off // 4:off // 4 + 8] = np.arange(8)
      np.testing.assert_array_equal(other.numpy(), want, err_msg=f"{dev} at byte {off}")
      other.copyin(np.arange(64, dtype=np.float32))

@pytest.mark.parametrize("dev", DEVICES)
def test_a_fed_back_input_assigned_in_place_is_refused(dev):
  """The output's memory passed back as an input the function assigns in place: no order of the output kernel and the
  assign gives the unjitted numbers, so the replay says so instead of returning wrong ones."""
  def body(x):
    out = (x * 2).contiguous().realize()
    x.assign(x + 1).realize()
    return out
  f = TinyJit(body)
  for _ in range(3): o = f(Tensor(rand(4), device=dev).realize())
  with pytest.raises(JitError, match="is assigned in place by the function and is the memory of one of this jit's own outputs"): f(o)
  xn = rand(4)
  np.testing.assert_allclose(f(Tensor(xn, device=dev).realize()).numpy(), xn * 2, rtol=1e-6)  # a plain call still replays

@pytest.mark.parametrize("dev", DEVICES)
def test_plant_fed_back_input_not_copied(monkeypatch, dev):
  """The replay binds a fed-back output itself, not a copy: the second kernel reads what the first wrote."""
  monkeypatch.setattr(J, "_copy", lambda b: b)
  red(check_output_fed_back, dev)

def _flip_prepared():
  """A prepared OpenCL launch of a flip kernel with its output bound once and its input per call, and that output."""
  from tinysched.dtype import dtypes
  x = Tensor(np.zeros(64, np.float32), device="OPENCL")
  si = [s for s in x.flip(0).contiguous().schedule() if s.ast.op.name == "SINK"][0]
  out = Buffer("OPENCL", 64, dtypes.float32).allocate()
  run = Device["OPENCL"].prepare(si.ast, [out, None], ())
  assert run is not None
  return run, out

@needs_opencl
def test_prepared_launch_copies_an_input_that_is_its_output():
  """A per-call input in the memory the prepared launch writes (a caller that binds the output as the input: the jit
  copies such inputs itself, this is the launch's own guard) is read as it was before the launch."""
  run, out = _flip_prepared()
  start = np.arange(64, dtype=np.float32)
  out.copyin(start)
  run([out, out], {})
  np.testing.assert_array_equal(out.numpy(), start[::-1])

def _runs_work_items_in_order() -> bool:
  """PoCL on a CPU runs a work-group's items one after another, so a kernel that reads memory it writes reads what it
  already overwrote every time; a GPU runs them at once and may read everything first: the plants below need the former
  to be red whatever the timing."""
  if not _opencl(): return False
  import pyopencl as cl
  d = Device["OPENCL"].dev.device
  return "Portable Computing Language" in d.platform.name and bool(d.type & cl.device_type.CPU)

in_order = pytest.mark.skipif(not _runs_work_items_in_order(), reason="needs OpenCL on PoCL's CPU device (work-items in order)")

@in_order
def test_plant_prepared_ignores_aliasing(monkeypatch):
  """The prepared run without its check that a per-call input reaches into memory the kernel writes: on PoCL the
  work-items of a flip run in order, so the second half reads elements the first half already overwrote."""
  import tinysched.runtime.opencl as O
  monkeypatch.setattr(O, "_overlaps", lambda span, spans: False)
  red(test_prepared_launch_copies_an_input_that_is_its_output)

@needs_opencl
def test_launch_copies_a_written_view_that_overlaps_an_input():
  """exec_ast on OpenCL with the output and the input views of one base buffer whose bytes overlap (distinct
  sub-regions: distinct cl.Buffer objects): the kernel reads the input as it was before the launch."""
  from tinysched.dtype import dtypes
  dev = Device["OPENCL"]
  align = dev.dev.base_align // 4  # in float32 elements: a sub-region OpenCL can address
  n = 2 * align
  x = Tensor(np.zeros(n, np.float32), device="OPENCL")
  si = [s for s in x.flip(0).contiguous().schedule() if s.ast.op.name == "SINK"][0]
  base = Buffer("OPENCL", 3 * align, dtypes.float32)
  start = np.arange(3 * align, dtype=np.float32)
  base.allocate().copyin(start)
  out, inp = Buffer("OPENCL", n, dtypes.float32, base=base, offset=0), Buffer("OPENCL", n, dtypes.float32, base=base, offset=align * 4)
  dev.exec_ast(si.ast, [out, inp], {})
  got = base.numpy()
  np.testing.assert_array_equal(got[:n], start[align:align + n][::-1])

@in_order
def test_plant_launch_ignores_overlapping_views(monkeypatch):
  import tinysched.runtime.opencl as O
  monkeypatch.setattr(O, "_aliased", lambda bufs, outs: set())
  red(test_launch_copies_a_written_view_that_overlaps_an_input)
