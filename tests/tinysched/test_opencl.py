"""The OPENCL device: every ALU op and dtype against the NUMPY interpreter, masked/flipped/symbolic/
multi-output/reduce kernels, device selection and limits, the allocator, the program caches, build
errors, kernel timing and the memory planner. Skipped where no OpenCL platform exists."""
from __future__ import annotations
import numpy as np
import pytest
from tinysched import Tensor, dtypes, Variable
from tinysched.dtype import DType
from tinysched.ops import Ops
from tinysched.uop import UOp
from tinysched.device import Device, Buffer, DeviceError
from tinysched.realize import run_schedule
from tinysched.memory import plan_memory
from tinysched.codegen import Opt, OptOps, to_program
from tests.tinysched.kernels import HAS_CL, _elementwise_ast, _random_inputs, _run_both

pytestmark = pytest.mark.skipif(not HAS_CL, reason="no OpenCL device (install pocl-opencl-icd)")

if HAS_CL:
  from tinysched.runtime import opencl as clrt
  from tinysched.runtime.opencl import run_ast, CompileError, list_devices, select_device, OpenCLBackend
  DEV = Device["OPENCL"]
  TARGET = DEV.target  # type: ignore[attr-defined]
else: TARGET = None

def _supported(dt: DType) -> bool:
  return dt != dtypes.float64 or TARGET.has_fp64  # half runs everywhere: native with cl_khr_fp16, else as storage

def _skip_unsupported(dt: DType) -> None:
  if not _supported(dt):
    pytest.skip(f"OpenCL device {TARGET.name!r} lacks cl_khr_fp64: {dt.name} kernels cannot run there")

ALL = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64,
       dtypes.float16, dtypes.float32, dtypes.float64]

# *** every ALU op, every dtype ***

def _vals(d: DType, n: int, rng) -> np.ndarray:
  """Finite floats; ints anywhere in their range."""
  if d == dtypes.bool: return rng.random(n) > 0.5
  if dtypes.is_float(d): return rng.standard_normal(n).astype(d.np)
  return rng.integers(dtypes.min(d), dtypes.max(d), n, endpoint=True, dtype=d.np)

def _alu_values(dt: DType, loads: list[UOp]) -> list[UOp]:
  a, b, c, sh = loads
  out = [a.alu(Ops.CMPLT, b), a.alu(Ops.CMPNE, b), a.alu(Ops.MAX, b), c.alu(Ops.WHERE, a, b), a.alu(Ops.ADD, b), a.alu(Ops.MUL, b)]
  if dt == dtypes.bool: return out + [a.alu(Ops.NEG), a.alu(Ops.AND, b), a.alu(Ops.OR, b), a.alu(Ops.XOR, b)]
  out += [a.alu(Ops.NEG), a.alu(Ops.IDIV, b), a.alu(Ops.MOD, b), a.alu(Ops.RECIP), a.alu(Ops.MULACC, b, a)]
  if dtypes.is_float(dt): return out + [a.alu(op) for op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT)]
  return out + [a.alu(Ops.AND, b), a.alu(Ops.OR, b), a.alu(Ops.XOR, b), a.alu(Ops.SHL, sh), a.alu(Ops.SHR, sh)]

@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.name)
def test_every_alu_op(dt):
  _skip_unsupported(dt)
  n = 64
  ast = _elementwise_ast(n, [dt, dt, dtypes.bool, dt], lambda ls: _alu_values(dt, ls))
  arrays = _random_inputs(ast, [n] * 20, seed=1, special=True)
  k = sum(1 for s in ast.src)
  if not dtypes.is_float(dt) and dt != dtypes.bool:
    arrays[k + 3] = (np.arange(n) % min(dt.itemsize * 8 - 1, 7)).astype(dt.np)  # shift amounts inside the type
  _run_both(ast, arrays)

@pytest.mark.parametrize("src", ALL, ids=lambda d: d.name)
def test_every_cast(src):
  _skip_unsupported(src)
  dsts = [d for d in ALL if d != src and _supported(d)]
  n = 64
  ast = _elementwise_ast(n, [src], lambda ls: [ls[0].cast(d) for d in dsts])
  rng = np.random.default_rng(2)
  # in-range values: float->int conversions outside the target range are undefined in C and in numpy
  vals = rng.integers(0, 2, n).astype(bool) if src == dtypes.bool else (rng.uniform(0, 100, n) if dtypes.is_float(src) else
                                                                          rng.integers(0, 100, n)).astype(src.np)
  _run_both(ast, [np.zeros(n, d.np) for d in dsts] + [vals])

@pytest.mark.parametrize("a,b", [(dtypes.float32, dtypes.int32), (dtypes.float32, dtypes.uint32), (dtypes.int32, dtypes.uint32),
                                 (dtypes.float64, dtypes.int64), (dtypes.int16, dtypes.uint16), (dtypes.int8, dtypes.uint8),
                                 (dtypes.float16, dtypes.int16)], ids=lambda d: d.name)
def test_bitcast(a, b):
  _skip_unsupported(a)
  n = 32
  ast = _elementwise_ast(n, [a, b], lambda ls: [ls[0].bitcast(b), ls[1].bitcast(a)])
  rng = np.random.default_rng(4)
  _run_both(ast, [np.zeros(n, b.np), np.zeros(n, a.np), _vals(a, n, rng), _vals(b, n, rng)])

# *** kernels from the front end, on the OPENCL device ***

def _np(*shape, seed=0):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

def test_masked_loads_and_flips():
  a = _np(5, 7)
  t = Tensor(a, device="OPENCL")
  got = (t.pad(((2, 1), (0, 3))).flip(0).flip(1) * 2 + 1).numpy()
  want = np.flip(np.pad(a, ((2, 1), (0, 3))), (0, 1)) * 2 + 1
  np.testing.assert_allclose(got, want, rtol=1e-6)
  got = t.pad(((1, 1), (1, 1))).exp().sum(0).numpy()  # exp(0)=1 must appear where padded: the pad is realized first
  np.testing.assert_allclose(got, np.exp(np.pad(a, 1)).sum(0), rtol=1e-5)
  got = t[::-1, 1::2].contiguous().numpy()
  np.testing.assert_allclose(got, a[::-1, 1::2])

def test_symbolic_kernel_runs_at_two_values():
  a = _np(16, 8)
  t = Tensor(a, device="OPENCL").realize()
  v = Variable("n", 1, 16)
  asts = []
  for val in (3, 11):
    out = (t.shrink(((0, v.bind(val)), None)) * 2).sum(0)
    sched, var_vals = out.schedule_with_vars()
    asts.append([si.ast for si in sched if si.ast.op is Ops.SINK])
    run_schedule(sched, var_vals)
    np.testing.assert_allclose(out.numpy(), (a[:val] * 2).sum(0), rtol=1e-5)
  assert asts[0] == asts[1]  # one kernel (one compile) serves every value of n

def test_multi_output_kernel():
  # a hand-built AST with outputs of different dtypes (a scheduled multi-output kernel: tests/tinysched/test_schedule.py,
  # which CI runs on OpenCL too)
  ast = _elementwise_ast(16, [dtypes.float32], lambda ls: [ls[0] * ls[0], ls[0].cast(dtypes.int32), ls[0].alu(Ops.CMPLT, ls[0] * 0.5)])
  _run_both(ast, [np.zeros(16, np.float32), np.zeros(16, np.int32), np.zeros(16, bool), _np(16)], opts=(Opt(OptOps.UPCAST, 0, 4),))

@pytest.mark.parametrize("shape,axis", [((1,), None), ((7,), 0), ((3, 5), 1), ((64, 33), 0), ((64, 33), 1), ((2, 3, 4, 5), (1, 3)),
                                        ((2, 3, 4, 5), (0, 2)), ((1 << 17,), None), ((300, 7), None)])
@pytest.mark.parametrize("op", ["sum", "max", "prod"])
def test_reductions(shape, axis, op):
  a = _np(*shape) * (0.05 if op == "prod" else 1) + (1 if op == "prod" else 0)
  got = getattr(Tensor(a, device="OPENCL"), op)(axis).numpy()
  want = getattr(np, op)(a, axis=axis)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.uint8, dtypes.int64, dtypes.bool, dtypes.float16, dtypes.float64], ids=lambda d: d.name)
def test_reductions_of_other_dtypes(dt):
  a = (np.random.default_rng(5).integers(0, 3, (9, 70))).astype(dt.np)
  t = Tensor(a, device="OPENCL")
  np.testing.assert_allclose(t.max(1).numpy(), a.max(1))
  if dt != dtypes.bool:
    s = t.sum(0).numpy()
    np.testing.assert_allclose(s.astype(np.float64), a.sum(0).astype(np.float64), rtol=1e-3)

def test_matmul_and_softmax_match_numpy():
  a, b = _np(33, 64), _np(64, 17, seed=1)
  ta, tb = Tensor(a, device="OPENCL"), Tensor(b, device="OPENCL")
  np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-4, atol=1e-4)
  e = np.exp(a - a.max(1, keepdims=True))
  np.testing.assert_allclose(ta.softmax(1).numpy(), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)

def test_half_runs_on_the_device_with_or_without_the_extension():
  a = _np(32).astype(np.float16)
  si = [s for s in (Tensor(a, device="OPENCL") * 2).schedule() if s.ast.op is Ops.SINK][0]
  src = to_program(si.ast, (), TARGET).src
  # without cl_khr_fp16 half is storage (vload_half / vstore_half_rte, float arithmetic), never the interpreter
  assert ("cl_khr_fp16" in src) == TARGET.has_fp16 and ("vstore_half_rte" in src) != TARGET.has_fp16
  out = np.zeros(32, np.float16)
  run_ast(si.ast, [out, a])
  np.testing.assert_array_equal(out, a * 2)
  np.testing.assert_array_equal((Tensor(a, device="OPENCL") * 2).numpy(), a * 2)

# *** device selection and errors ***

def test_device_names():
  devs = list_devices()
  assert devs and all(n == f"OPENCL:{i}" for i, (n, _, _) in enumerate(devs))
  assert Device["OPENCL:0"].target.name == devs[0][1]
  with pytest.raises(DeviceError, match=r"OPENCL:99.*there are \d+ OpenCL devices.*OPENCL:0 = "): select_device("OPENCL:99")
  with pytest.raises(DeviceError, match="must be a number"): Device["OPENCL:gpu"]
  with pytest.raises(DeviceError, match="unknown device 'CUDA'"): Device["CUDA"]

def test_pyopencl_ctx_is_honoured(monkeypatch):
  monkeypatch.setenv("PYOPENCL_CTX", "0")
  import pyopencl as cl
  assert select_device("OPENCL") == cl.get_platforms()[0].get_devices()[0]
  monkeypatch.setenv("PYOPENCL_CTX", "0:0")
  assert select_device("OPENCL") == cl.get_platforms()[0].get_devices()[0]
  monkeypatch.setenv("PYOPENCL_CTX", "no-such-platform-name")
  with pytest.raises(DeviceError, match="no platform matching"): select_device("OPENCL")
  monkeypatch.delenv("PYOPENCL_CTX")
  assert select_device("OPENCL:0") is not None

def test_buffer_over_max_alloc_names_device_and_limit():
  limit = TARGET.max_alloc
  with pytest.raises(DeviceError, match=f"exceeds the device's maximum allocation of {limit} bytes") as e:
    Buffer("OPENCL", limit // 4 + 1, dtypes.float32).allocate()
  assert TARGET.name in str(e.value)

def test_allocator_reuses_freed_buffers():
  alloc = DEV.dev.allocator
  h = alloc.alloc(1000)
  raw = h.buf
  alloc.free(h)
  h2 = alloc.alloc(1010)  # same size bucket
  assert h2.buf is raw and h2.nbytes == 1010
  alloc.free(h2)
  # Buffers return their memory when they die
  b = Buffer("OPENCL", 5000, dtypes.float32).allocate()
  raw = b._handle.buf
  del b
  assert Buffer("OPENCL", 5000, dtypes.float32).allocate()._handle.buf is raw

@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.name)
def test_copy_round_trip(dt):
  a = _vals(dt, 37, np.random.default_rng(9))
  b = Buffer("OPENCL", 37, dt).allocate().copyin(a)
  np.testing.assert_array_equal(b.numpy(), a)

def test_build_error_carries_log_and_source():
  src = "__kernel void broken(__global float* data0) { data0[0] = undefined_name; }\n"
  with pytest.raises(CompileError) as e: DEV.dev.kernel("broken", src)
  assert "undefined_name" in e.value.log and e.value.src == src and "broken" in str(e.value) and TARGET.name in str(e.value)

def test_program_cache_on_disk(tmp_path, monkeypatch):
  monkeypatch.setenv("TINYSCHED_CACHE", str(tmp_path))
  src = "__kernel void cached_k(__global float* data0) { data0[get_global_id(0)] = 41.0f + 1.0f; }\n"
  dev = DEV.dev
  dev.kernels.pop(("cached_k", src), None)
  dev.kernel("cached_k", src)
  files = list((tmp_path / "opencl").glob("*.bin"))
  assert len(files) == 1 and files[0].read_bytes().startswith(clrt._MAGIC)
  assert dev.kernel("cached_k", src) is dev.kernel("cached_k", src)  # in memory
  # a corrupted cache entry is ignored: rebuilt from source and rewritten
  files[0].write_bytes(clrt._MAGIC + b"\0" * 40 + b"garbage")
  dev.kernels.pop(("cached_k", src), None)
  k = dev.kernel("cached_k", src)
  out = Buffer("OPENCL", 4, dtypes.float32).allocate()
  import pyopencl as cl
  k.set_args(out._handle.buf)
  cl.enqueue_nd_range_kernel(dev.queue, k, (4,), None)
  np.testing.assert_array_equal(out.numpy(), [42.0] * 4)
  assert clrt._disk_load(files[0], clrt._BIN, dev.kernel_key(src)) is not None  # rewritten with a valid checksum

def test_run_ast_returns_kernel_time_and_writes_outputs():
  ast = _elementwise_ast(4096, [dtypes.float32], lambda ls: [ls[0] * 3])
  x = _np(4096)
  out = np.zeros(4096, np.float32)
  t = run_ast(ast, [out, x], opts=(Opt(OptOps.UPCAST, 0, 4),))
  assert 0 < t < 1.0
  np.testing.assert_allclose(out, x * 3)
  # with device Buffers
  bo, bx = Buffer("OPENCL", 4096, dtypes.float32), Buffer("OPENCL", 4096, dtypes.float32).allocate().copyin(x)
  assert run_ast(ast, [bo, bx]) > 0
  np.testing.assert_allclose(bo.numpy(), x * 3)

@pytest.mark.parametrize("offset_elems", [1, 32])
def test_buffer_views_at_aligned_and_unaligned_offsets(offset_elems):
  base = Buffer("OPENCL", 128, dtypes.float32).allocate().copyin(np.arange(128, dtype=np.float32))
  ast = _elementwise_ast(16, [dtypes.float32], lambda ls: [ls[0] + 1])
  out_view = Buffer("OPENCL", 16, dtypes.float32, base=base, offset=offset_elems * 4)
  in_view = Buffer("OPENCL", 16, dtypes.float32, base=base, offset=(offset_elems + 64) * 4)
  run_ast(ast, [out_view, in_view])
  want = np.arange(128, dtype=np.float32)
  want[offset_elems:offset_elems + 16] = np.arange(offset_elems + 64, offset_elems + 80) + 1
  np.testing.assert_array_equal(base.numpy(), want)

# *** memory planner ***

def _program(x: Tensor) -> Tensor:
  h = (x @ x.T).relu()
  h = (h - h.max(1, keepdim=True)).exp()
  h = h / h.sum(1, keepdim=True)
  return ((h @ x) * x).sum(1).softmax(0)

@pytest.mark.parametrize("device", ["NUMPY", "OPENCL"])
def test_memory_planner_gives_identical_results(device):
  a = _np(24, 16)
  results, plans = [], []
  for plan in (False, True):
    x = Tensor(a, device=device).realize()
    out = _program(x)
    sched, var_vals = out.schedule_with_vars()
    if plan:
      # planning happens inside run_schedule; check on a fresh identical schedule what it would share
      out2 = _program(Tensor(a, device=device).realize())
      s2, _ = out2.schedule_with_vars()
      plans.append(plan_memory(s2))
      run_schedule(s2)
      del out2, s2
    run_schedule(sched, var_vals, plan_memory=plan)
    results.append(out.numpy())
  np.testing.assert_array_equal(results[0], results[1])
  assert plans[0].buffers >= 2 and plans[0].bytes_after < plans[0].bytes_before

def test_memory_planner_leaves_referenced_buffers_alone():
  a = _np(8, 8)
  x = Tensor(a, device="OPENCL").realize()
  kept = x.sum(1, keepdim=True)  # the user holds this intermediate: it must keep its own memory
  out = ((x - kept).exp().sum(1, keepdim=True) * kept).sum()
  sched, _ = out.schedule_with_vars()
  kept_buf = kept.lazydata.base.buffer
  plan_memory(sched)
  assert kept_buf._base is None
  run_schedule(sched)
  np.testing.assert_allclose(kept.numpy(), a.sum(1, keepdims=True), rtol=1e-5)
  ks = a.sum(1, keepdims=True)
  np.testing.assert_allclose(out.numpy(), (np.exp(a - ks).sum(1, keepdims=True) * ks).sum(), rtol=1e-4)

# *** batch compiles (prebuild) ***

def _src(name: str, body: str) -> str:
  return f"__kernel void {name}(__global float* data0, __global const float* data1) {{ int i = get_global_id(0); data0[i] = {body}; }}\n"

def _run_k(k, dev, x: np.ndarray) -> np.ndarray:
  """Run a data0[i] = f(data1[i]) kernel of `dev` (its own context: buffers made there)."""
  import pyopencl as cl
  mf = cl.mem_flags
  out, inp = cl.Buffer(dev.ctx, mf.READ_WRITE, x.nbytes), cl.Buffer(dev.ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
  k.set_args(out, inp)
  cl.enqueue_nd_range_kernel(dev.queue, k, (len(x),), None)
  res = np.empty_like(x)
  cl.enqueue_copy(dev.queue, res, out, is_blocking=True)
  return res

def _fresh_device():
  """A second device object on the same OpenCL device: nothing in memory, as in a new process."""
  return clrt._CLDevice("OPENCL", DEV.dev.device)

X = np.arange(8, dtype=np.float32)

@pytest.mark.parametrize("own_cache", [True, False], ids=["rebuilt_from_source", "from_stored_binary"])
def test_prebuild_compiles_once_and_later_lookups_build_nothing(tmp_path, monkeypatch, own_cache):
  monkeypatch.setenv("TINYSCHED_CACHE", str(tmp_path))
  monkeypatch.setattr(clrt, "_own_disk_cache", lambda d: own_cache)
  pairs = [(f"pb_{i}", _src(f"pb_{i}", f"data1[i] * {i}.0f + 1.0f")) for i in range(5)]
  dev = _fresh_device()
  assert dev.prebuild(pairs + pairs[:2]) == 5 and dev.single_builds == 0  # one program for all, duplicates once
  assert len(list((tmp_path / "opencl").glob("batch-*.src"))) == 1
  assert len(list((tmp_path / "opencl").glob("batch-*.bin"))) == (0 if own_cache else 1)
  assert dev.prebuild(pairs) == 0  # all on disk now
  later = _fresh_device()
  for i, (name, src) in enumerate(pairs):
    np.testing.assert_array_equal(_run_k(later.kernel(name, src), later, X), X * i + 1)
  assert later.single_builds == 0 and len(later.batches) == 1

def test_a_batch_entry_is_used_only_if_the_batch_holds_that_source(tmp_path, monkeypatch):
  monkeypatch.setenv("TINYSCHED_CACHE", str(tmp_path))
  dev = _fresh_device()
  plus, times = _src("same_name", "data1[i] + 1.0f"), _src("same_name", "data1[i] * 2.0f")
  assert dev.prebuild([("same_name", plus)]) == 1
  # a stale or tampered entry: the `times` kernel's entry names the batch that holds `plus`, a kernel of the same name
  entry = next(f for f in (tmp_path / "opencl").glob("*.bin") if not f.name.startswith("batch-"))  # (not the batch's binary)
  (tmp_path / "opencl" / f"{dev.cache_key(times)}.bin").write_bytes(entry.read_bytes())
  later = _fresh_device()
  np.testing.assert_array_equal(_run_k(later.kernel("same_name", times), later, X), X * 2)
  assert later.single_builds == 1  # built on its own
  # planted: without the check the batch's same-named kernel runs, and the numbers are wrong
  (tmp_path / "opencl" / f"{dev.cache_key(times)}.bin").write_bytes(entry.read_bytes())
  monkeypatch.setattr(clrt, "_holds", lambda bsrc, src: True)
  monkeypatch.setattr(clrt, "_key_matches", lambda recorded, wanted: True)  # (the recorded key would refuse the copy first)
  planted = _fresh_device()
  assert not np.array_equal(_run_k(planted.kernel("same_name", times), planted, X), X * 2)

def test_holds_matches_whole_members_only():
  a, b = _src("k_a", "1.0f"), _src("k_b", "2.0f")
  assert clrt._holds(a + b, a) and clrt._holds(a + b, b) and clrt._holds(a + b, b.rstrip("\n"))
  assert not clrt._holds(a + b, a[:-3] + "\n")   # a prefix of a member
  assert not clrt._holds(a + b, a + "x\n")       # more than the member
  assert not clrt._holds(a + b, _src("k_c", "1.0f"))

def test_a_batch_that_does_not_build_is_split_and_the_bad_kernel_reported_alone(tmp_path, monkeypatch):
  monkeypatch.setenv("TINYSCHED_CACHE", str(tmp_path))
  good = [(f"ok_{i}", _src(f"ok_{i}", f"data1[i] + {i}.0f")) for i in range(3)]
  bad = ("bad_k", _src("bad_k", "undefined_name"))
  dev = _fresh_device()
  assert dev.prebuild(good[:2] + [bad] + good[2:]) == 3
  later = _fresh_device()
  for i, (name, src) in enumerate(good): np.testing.assert_array_equal(_run_k(later.kernel(name, src), later, X), X + i)
  assert later.single_builds == 0
  with pytest.raises(CompileError) as e: later.kernel(*bad)
  assert "undefined_name" in e.value.log and e.value.src == bad[1]

def test_sources_that_could_collide_are_not_batched(tmp_path, monkeypatch):
  monkeypatch.setenv("TINYSCHED_CACHE", str(tmp_path))
  macro = "#define TWO 2.0f\n" + _src("with_macro", "data1[i] * TWO")
  helper = "float twice(float x) { return 2.0f * x; }\n" + _src("with_helper", "twice(data1[i])")
  dev = _fresh_device()
  assert dev.prebuild([("with_macro", macro), ("with_helper", helper)]) == 0
  for name, src in (("with_macro", macro), ("with_helper", helper)):
    np.testing.assert_array_equal(_run_k(dev.kernel(name, src), dev, X), X * 2)
  assert dev.single_builds == 2

def test_prebuild_does_nothing_without_the_disk_cache(tmp_path, monkeypatch):
  monkeypatch.setenv("TINYSCHED_CACHE", str(tmp_path))
  monkeypatch.setenv("TINYSCHED_DISK_CACHE", "0")
  assert _fresh_device().prebuild([("nodisk", _src("nodisk", "1.0f"))]) == 0 and not (tmp_path / "opencl").exists()

def test_backend_prebuild_renders_asts_as_exec_ast_does(tmp_path, monkeypatch):
  monkeypatch.setenv("TINYSCHED_CACHE", str(tmp_path))
  ast = _elementwise_ast(64, [dtypes.float32], lambda ls: [ls[0] * 5])
  be = OpenCLBackend("OPENCL")
  be.dev.programs.clear()
  prg = be.dev.program(ast, None)
  be.dev.kernels.pop((prg.name, prg.src), None)
  assert be.prebuild([ast]) == 1
  before = be.dev.single_builds
  x = _np(64)
  out, inp = Buffer("OPENCL", 64, dtypes.float32), Buffer("OPENCL", 64, dtypes.float32).allocate().copyin(x)
  be.exec_ast(ast, [out.allocate(), inp], {})
  np.testing.assert_allclose(out.numpy(), x * 5)
  assert be.dev.single_builds == before

def test_the_fp16_probe_answer_is_kept_per_device_and_driver(tmp_path, monkeypatch):
  monkeypatch.setenv("TINYSCHED_CACHE", str(tmp_path))
  d = DEV.dev.device
  runs = []
  monkeypatch.setattr(clrt, "_run_fp16_probe", lambda dev: runs.append(dev) or True)
  clrt.probe_fp16.cache_clear()
  try:
    assert clrt.probe_fp16(d) and len(runs) == 1
    clrt.probe_fp16.cache_clear()
    assert clrt.probe_fp16(d) and len(runs) == 1  # a new process: from the disk cache
    # another driver (or probe) is another answer: asked again
    monkeypatch.setattr(clrt, "_device_ident", lambda dev: "another driver")
    clrt.probe_fp16.cache_clear()
    assert clrt.probe_fp16(d) and len(runs) == 2
  finally: clrt.probe_fp16.cache_clear()

def test_an_fp16_probe_that_could_not_ask_is_not_kept(tmp_path, monkeypatch):
  monkeypatch.setenv("TINYSCHED_CACHE", str(tmp_path))
  d = DEV.dev.device
  answers = [None, True]
  monkeypatch.setattr(clrt, "_run_fp16_probe", lambda dev: answers.pop(0))
  clrt.probe_fp16.cache_clear()
  try:
    assert clrt.probe_fp16(d) is False  # not asked (a transient error): storage half now
    clrt.probe_fp16.cache_clear()
    assert clrt.probe_fp16(d) is True and not answers  # asked again by the next process, not read as "no"
  finally: clrt.probe_fp16.cache_clear()
