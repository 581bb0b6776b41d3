"""bfloat16 end to end, and half as storage on OpenCL devices without cl_khr_fp16.

bfloat16 values are checked bit for bit against a reference written here (`ref_bits`: integer rounding per element,
a different formulation from tinysched.dtype.bf16_bits, so a bug there cannot hide behind itself) and against torch,
on the NUMPY interpreter and on OpenCL. Every check has a planted-bug twin (`test_planted_*`): the bug the check
exists to catch is monkeypatched in and the check must go red (a check must be able to fail).
"""
from __future__ import annotations
import struct
import numpy as np
import pytest
from tinysched import Tensor, dtypes
from tinysched.dtype import least_upper_dtype
from tinysched.device import Device
from tinysched.codegen import opencl as clr
from tinysched.runtime import interpreter
from tests.tinysched.kernels import HAS_CL, _kernels

DEVICES = ["NUMPY", pytest.param("OPENCL", marks=pytest.mark.skipif(not HAS_CL, reason="no OpenCL device (install pocl-opencl-icd)"))]
BF16, F32, U16 = dtypes.bfloat16, dtypes.float32, dtypes.uint16

# *** the reference: float32 -> bfloat16 bits, one element at a time ***

def _f32_bits(x: float) -> int: return struct.unpack("<I", struct.pack("<f", x))[0]

def ref_bits_one(x: float) -> int:
  """Round-to-nearest-even by cases: keep the top 16 bits, look at the dropped 16 (above half: up; exactly half: up
  only if the kept part is odd). NaN: any NaN (the test only asks that it stays NaN)."""
  u = _f32_bits(x)
  if (u & 0x7F800000) == 0x7F800000 and (u & 0x007FFFFF): return 0x7FC0 | (u >> 16 & 0x8000)
  hi, lo = u >> 16, u & 0xFFFF
  if lo > 0x8000 or (lo == 0x8000 and hi & 1): hi += 1  # a carry into the exponent is right: it rounds up a binade / to inf
  return hi

def ref_bits(x: np.ndarray) -> np.ndarray:
  return np.array([ref_bits_one(float(v)) for v in np.asarray(x, np.float32).ravel()], np.uint16).reshape(np.shape(x))
def ref_value(x: np.ndarray) -> np.ndarray: return (ref_bits(x).astype(np.uint32) << 16).view(np.float32)
def _is_nan_bits(b: np.ndarray) -> np.ndarray: return ((b & 0x7F80) == 0x7F80) & ((b & 0x007F) != 0)

def _f32(bits: int) -> np.float32: return np.array([bits], np.uint32).view(np.float32)[0]

# rounding edge cases, as float32 bit patterns and values
EDGES = np.array([
  1.0, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-23, 1 + 2**-8 - 2**-23,   # tie to even (down), tie to even (up), just above/below a tie
  -(1 + 2**-8), -(1 + 3 * 2**-8), 2 - 2**-9, 255.5, 256.5, 3.0, -2.5, 0.1, -0.0, 0.0,
  np.inf, -np.inf, float(np.finfo(np.float32).max), float(_f32(0x7F7F7FFF)), float(_f32(0x7F7F8000)),  # float32 max -> inf; below / at
  # the tie above bfloat16's largest finite value (0x7f7f, odd: the tie rounds up, to inf)
  1e-40, -1e-40, float(_f32(0x00000001)), float(_f32(0x00008000)), float(_f32(0x00018000)), float(_f32(0x00807FFF)),  # subnormals, ties among them
  # NaNs a naive rounding turns into inf / -0
  np.nan, float(_f32(0x7F800001)), float(_f32(0x7FFFFFFF)), float(_f32(0xFFFFFFFF)), float(_f32(0x7FBFFFFF)),
], dtype=np.float32)

def _assert_bits(got: np.ndarray, x: np.ndarray) -> None:
  want = ref_bits(x)
  nan = _is_nan_bits(want)
  assert np.array_equal(_is_nan_bits(got), nan), f"NaN-ness differs at {np.nonzero(_is_nan_bits(got) != nan)[0]}"
  bad = np.nonzero((got != want) & ~nan)[0]
  assert not bad.size, f"bits differ at {bad}: got {[hex(v) for v in got[bad]]}, want {[hex(v) for v in want[bad]]} for {x[bad]}"

# *** the dtype ***

def test_names_and_fields():
  assert dtypes.from_name("bfloat16") is BF16 and repr(BF16) == "dtypes.bfloat16"
  assert BF16.itemsize == 2 and dtypes.finfo(BF16) == (8, 7) and dtypes.is_float(BF16) and not dtypes.is_int(BF16)
  assert BF16.vec(4).scalar() is BF16 and dtypes.from_np(np.uint16) is U16  # uint16 storage does not make uint16 arrays bfloat16
  t = Tensor([1.0, 2.0], dtype="bfloat16")
  assert t.dtype is BF16 and t.float().bfloat16().dtype is BF16 and t.element_size() == 2

# tinygrad 0.10.0's least_upper_dtype for bfloat16 (measured with tinygrad 0.10.0 installed)
PROMOTIONS = [(dtypes.bool, BF16), (dtypes.int8, BF16), (dtypes.uint8, BF16), (dtypes.int16, BF16), (dtypes.uint16, BF16),
              (dtypes.int32, BF16), (dtypes.uint32, BF16), (dtypes.int64, BF16), (dtypes.uint64, BF16), (BF16, BF16),
              (dtypes.float16, F32), (F32, F32), (dtypes.float64, dtypes.float64)]

@pytest.mark.parametrize("other,want", PROMOTIONS, ids=lambda d: d.name)
def test_promotion_follows_tinygrad(other, want):
  assert least_upper_dtype(other, BF16) is want and least_upper_dtype(BF16, other) is want
  assert (Tensor([1], dtype=other) + Tensor([1.0], dtype=BF16)).dtype is want

def test_promotion_of_existing_types_is_unchanged():
  assert least_upper_dtype(dtypes.int64, dtypes.uint64) is dtypes.float16  # the lowest common float is still half
  assert least_upper_dtype(dtypes.int64, dtypes.float16) is dtypes.float16

# *** casts ***

def check_cast_bits(dev: str) -> None:
  """float32 -> bfloat16 in a kernel: the bits of the stored value, of a fused bitcast, and of the host conversion."""
  x = EDGES
  stored = Tensor(x, device=dev).cast(BF16).realize()
  _assert_bits(stored.bitcast(U16).numpy(), x)                         # store rounding
  _assert_bits(Tensor(x, device=dev).cast(BF16).bitcast(U16).numpy(), x)  # cast rounding, read through a bitcast in one kernel
  _assert_bits(Tensor(x, device=dev, dtype=BF16).bitcast(U16).numpy(), x)  # the host conversion (Tensor(..., dtype=bfloat16))
  back = stored.cast(F32).numpy()
  assert back.dtype == np.float32 and np.array_equal(back, ref_value(x), equal_nan=True)
  assert np.array_equal(stored.numpy(), ref_value(x), equal_nan=True)  # numpy() of bfloat16 is float32

@pytest.mark.parametrize("dev", DEVICES)
def test_cast_float32_to_bf16_rounds_to_nearest_even(dev):
  check_cast_bits(dev)

def test_reference_agrees_with_torch():
  torch = pytest.importorskip("torch")
  got = torch.tensor(EDGES).bfloat16().view(torch.int16).numpy().astype(np.uint16)
  _assert_bits(got, EDGES)

@pytest.mark.parametrize("dev", DEVICES)
def test_cast_matches_torch(dev):
  torch = pytest.importorskip("torch")
  x = np.random.default_rng(0).standard_normal(4096).astype(np.float32) * np.float32(1e3)
  x = np.concatenate([x, EDGES])
  want = torch.tensor(x).bfloat16().float().numpy()
  assert np.array_equal(Tensor(x, device=dev).bfloat16().float().numpy(), want, equal_nan=True)

@pytest.mark.parametrize("dev", DEVICES)
def test_casts_between_bf16_and_ints_half_bool(dev):
  i = np.array([0, 1, -3, 257, 1000, -32768, 65535], np.int32)
  _assert_bits(Tensor(i, device=dev).cast(BF16).bitcast(U16).numpy(), i.astype(np.float32))  # 257 -> 256, 1000 exact
  v = ref_value(np.array([2.75, -3.5, 0.0, 1e4], np.float32))
  t = Tensor(v, device=dev).cast(BF16)
  assert t.cast(dtypes.int32).numpy().tolist() == [2, -3, 0, 9984]  # 1e4 is 9984 in bfloat16; int casts truncate
  assert t.cast(dtypes.bool).numpy().tolist() == [True, True, False, True]
  np.testing.assert_array_equal(t.cast(dtypes.float16).numpy(), v.astype(np.float16))

# *** elementwise, reductions, matmul ***

def _pair(n: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(seed)
  a, b = (ref_value(rng.standard_normal(n).astype(np.float32) * np.float32(s)) for s in (3, 2))
  return a, b + np.where(np.abs(b) < 1e-3, np.float32(1), np.float32(0))  # no divisor near 0

OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "max": lambda a, b: a.maximum(b),
       "neg": lambda a, b: -a, "lt": lambda a, b: a < b}

def check_elementwise(dev: str) -> None:
  """One op per kernel: the float32 result rounded once (numpy reference, bit for bit); +,-,* also equal torch's."""
  a, b = _pair(2048)
  ta, tb = Tensor(a, device=dev).bfloat16(), Tensor(b, device=dev).bfloat16()
  for name, fn in OPS.items():
    got = fn(ta, tb)
    ref = fn(Tensor(a, device="NUMPY"), Tensor(b, device="NUMPY")).numpy()  # exact float32 arithmetic on exact inputs
    if got.dtype is BF16: _assert_bits(got.bitcast(U16).numpy(), ref)
    else: assert np.array_equal(got.numpy(), ref), name
  # an op whose result is cast to float32 in the same kernel is rounded to bfloat16 first (it is a bfloat16 value)
  bits = (ta * tb).float().bitcast(dtypes.uint32).numpy()
  assert not np.any(bits & 0xFFFF), "a bfloat16 value cast to float32 has low mantissa bits"
  _assert_bits((bits >> 16).astype(np.uint16), a * b)

@pytest.mark.parametrize("dev", DEVICES)
def test_elementwise_ops_round_once(dev):
  check_elementwise(dev)

@pytest.mark.parametrize("dev", DEVICES)
def test_elementwise_vs_torch(dev):
  torch = pytest.importorskip("torch")
  a, b = _pair(2048)
  ta, tb = Tensor(a, device=dev).bfloat16(), Tensor(b, device=dev).bfloat16()
  xa, xb = torch.tensor(a).bfloat16(), torch.tensor(b).bfloat16()
  for name, ours, theirs in [("add", ta + tb, xa + xb), ("sub", ta - tb, xa - xb), ("mul", ta * tb, xa * xb),
                             ("max", ta.maximum(tb), torch.maximum(xa, xb)), ("float", (ta * tb).float(), (xa * xb).float())]:
    assert np.array_equal(ours.numpy(), theirs.float().numpy()), name
  # division, exp, sqrt, log: the float32 functions (and x*recip(y) for x/y) may differ by a float32 ulp, so at most one bfloat16 ulp
  for name, ours, theirs in [("div", ta / tb, xa / xb), ("exp", (ta / 4).exp(), (xa / 4).exp()), ("sqrt", ta.abs().sqrt(), xa.abs().sqrt()),
                             ("log", (ta.abs() + 1).realize().log(), (xa.abs() + 1).log())]:  # torch rounds x+1 first: realize it
    np.testing.assert_allclose(ours.numpy(), theirs.float().numpy(), rtol=2**-7, atol=1e-30, err_msg=name)
  # a fused chain rounds once, on the store; torch rounds after every op: within a bfloat16 ulp or two
  c = (ta * tb + ta).numpy()
  np.testing.assert_allclose(c, (xa * xb + xa).float().numpy(), rtol=2**-6, atol=2**-6)
  _assert_bits((ta * tb + ta).bitcast(U16).numpy(), a * b + a)  # exactly: float32 arithmetic, one rounding

def check_sum(dev: str) -> None:
  """A bfloat16 sum accumulates in float32 and rounds once: 4096 ones are 4096 (accumulating in bfloat16 stops at 256)."""
  s = Tensor(np.ones(4096, np.float32), device=dev, dtype=BF16).sum()  # a buffer, not a constant: no closed-form count
  assert s.dtype is BF16 and s.item() == 4096.0, f"the sum of 4096 bfloat16 ones is {s.item()}"
  x = ref_value(np.random.default_rng(2).standard_normal((8, 512)).astype(np.float32))
  got = Tensor(x, device=dev).bfloat16().sum(1).numpy()
  # float32 summation order may move a sum across a rounding boundary: one bfloat16 ulp
  np.testing.assert_allclose(got, ref_value(x.astype(np.float64).sum(1).astype(np.float32)), rtol=2**-8)

@pytest.mark.parametrize("dev", DEVICES)
def test_sum_accumulates_in_float32(dev):
  check_sum(dev)

@pytest.mark.parametrize("dev", DEVICES)
def test_sum_and_matmul_vs_torch(dev):
  torch = pytest.importorskip("torch")
  rng = np.random.default_rng(3)
  a, b = rng.standard_normal((33, 70)).astype(np.float32), rng.standard_normal((70, 17)).astype(np.float32)
  ta, tb = Tensor(a, device=dev).bfloat16(), Tensor(b, device=dev).bfloat16()
  xa, xb = torch.tensor(a).bfloat16(), torch.tensor(b).bfloat16()
  mm = ta @ tb
  assert mm.dtype is BF16
  # products of bfloat16s are exact in float32 and both accumulate in float32: equal up to summation order, one rounding
  np.testing.assert_allclose(mm.numpy(), (xa @ xb).float().numpy(), rtol=2**-7, atol=2**-7)
  np.testing.assert_allclose(mm.numpy(), ref_value(ref_value(a).astype(np.float64) @ ref_value(b).astype(np.float64)), rtol=2**-7, atol=2**-7)
  np.testing.assert_allclose(ta.sum(0).numpy(), xa.sum(0).float().numpy(), rtol=2**-7, atol=2**-7)
  np.testing.assert_allclose(ta.mean().numpy(), xa.mean().float().numpy(), rtol=2**-7, atol=2**-7)
  assert np.isnan(Tensor([1.0, np.nan], device=dev).bfloat16().sum().item())

# *** gradients ***

@pytest.mark.parametrize("dev", DEVICES)
def test_gradients_through_a_bf16_cast(dev):
  torch = pytest.importorskip("torch")
  rng = np.random.default_rng(4)
  x, w = rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
  tx, tw = Tensor(x, device=dev, requires_grad=True), Tensor(w, device=dev, requires_grad=True)
  out = (tx.bfloat16() @ tw.bfloat16()).float().relu().sum()
  out.backward()
  px, pw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
  (px.bfloat16() @ pw.bfloat16()).float().relu().sum().backward()
  assert tx.grad is not None and tx.grad.dtype is F32 and tw.grad.dtype is F32  # the gradient comes back in the input's dtype
  np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=2**-7, atol=2**-7)
  np.testing.assert_allclose(tw.grad.numpy(), pw.grad.numpy(), rtol=2**-7, atol=2**-7)
  np.testing.assert_allclose(out.item(), (px.bfloat16() @ pw.bfloat16()).float().relu().sum().item(), rtol=1e-2)

# *** OpenCL source ***

def test_bf16_source_is_ushort_and_deterministic():
  from tinysched.codegen import to_program
  from tinysched.codegen.target import POCL_CPU, NVIDIA_LIKE_GPU
  a, b = Tensor.empty(64, dtype=BF16), Tensor.empty(64, dtype=BF16)
  for t in (POCL_CPU, NVIDIA_LIKE_GPU):
    si = _kernels((a * b).sum() + a.float().bfloat16())[-1]
    src = to_program(si.ast, None, t).src
    assert "ushort* restrict data" in src and "<<16)" in src and "ts_bf16_bits" in src and "bfloat16" not in src
    assert src == to_program(si.ast, None, t).src  # same AST, same bytes
  f = _kernels(Tensor.empty(64) * 2 + 1)[0]
  assert "ts_" not in to_program(f.ast, None, POCL_CPU).src  # float32 kernels get no helpers

# *** half as storage (no cl_khr_fp16) ***

needs_cl = pytest.mark.skipif(not HAS_CL, reason="no OpenCL device (install pocl-opencl-icd)")

def _cl_target():
  return Device["OPENCL"].target  # type: ignore[attr-defined]

def _half_inputs(n: int = 2048) -> np.ndarray:
  x = np.random.default_rng(5).standard_normal(n).astype(np.float16)
  return np.concatenate([x, np.array([0, -0.0, 65504, -65504, 6e-8, np.inf, -np.inf, np.nan, 1 / 3], np.float16)])

def check_half_on_device() -> None:
  """A half kernel runs on the OpenCL device (never the interpreter) and equals numpy's float16 bit for bit."""
  h = _half_inputs()
  t = Tensor(h, device="OPENCL")
  with np.errstate(all="ignore"):
    want = np.sqrt(h * h + np.float16(1)) * np.reciprocal(h) - h  # numpy rounds every float16 op
    want_sum = h[:2048].astype(np.float32).sum(dtype=np.float32)
  got = ((t * t + 1).sqrt() / t - t).numpy()
  assert got.dtype == np.float16
  ok = ~np.isnan(want)
  bad = np.nonzero(got.view(np.uint16)[ok] != want.view(np.uint16)[ok])[0]
  assert not bad.size, f"{bad.size} half results differ from numpy's float16, e.g. {got[ok][bad[:3]]} vs {want[ok][bad[:3]]}"
  assert np.array_equal(np.isnan(got), np.isnan(want)), "NaN-ness differs from numpy's float16"
  s = Tensor(h[:2048], device="OPENCL").sum()
  np.testing.assert_allclose(float(s.item()), float(np.float16(want_sum)), rtol=2**-10)
  mm = (Tensor(h[:64].reshape(8, 8), device="OPENCL") @ Tensor(h[64:128].reshape(8, 8), device="OPENCL")).numpy()
  np.testing.assert_allclose(mm.astype(np.float32), (h[:64].reshape(8, 8).astype(np.float32) @ h[64:128].reshape(8, 8).astype(np.float32)),
                             rtol=2**-9, atol=2**-9)

def check_half_ops_match_interpreter() -> None:
  """Every half ALU op on the OpenCL device equals the interpreter (numpy float16) bit for bit. IDIV is the sharp case:
  trunc of the float quotient differs from trunc of the half-rounded quotient for a few percent of inputs."""
  from tinysched.ops import Ops
  from tinysched.runtime.opencl import run_ast
  from tests.tinysched.kernels import _elementwise_ast
  rng = np.random.default_rng(6)
  n, H = 4096, dtypes.float16
  a, b = (rng.standard_normal(n) * 50).astype(np.float16), (rng.standard_normal(n) * 3).astype(np.float16)
  ops = [(Ops.IDIV, 2), (Ops.MOD, 2), (Ops.RECIP, 1), (Ops.MULACC, 3), (Ops.ADD, 2), (Ops.MUL, 2), (Ops.SQRT, 1), (Ops.EXP2, 1)]
  ast = _elementwise_ast(n, [H, H], lambda ls: [ls[0].alu(op, *([ls[1], ls[0]][:k - 1])) if op is not Ops.EXP2 else
                                                (ls[0] * 0.0625).alu(op) for op, k in ops])
  with np.errstate(all="ignore"):
    ref = [np.zeros(n, np.float16) for _ in ops] + [a, b]
    got = [x.copy() for x in ref]
    interpreter.exec_ast(ast, ref, {})
    run_ast(ast, got)
  for (op, _), g, r in zip(ops, got, ref):
    ok = ~np.isnan(r)
    bad = np.nonzero(g.view(np.uint16)[ok] != r.view(np.uint16)[ok])[0]
    assert not bad.size, f"half {op}: {bad.size} of {n} differ from the interpreter, e.g. {g[ok][bad[:3]]} vs {r[ok][bad[:3]]}"

@pytest.fixture
def storage_half(monkeypatch):
  """The OpenCL device renders half as storage (it does on PoCL and NVIDIA anyway; a device with cl_khr_fp16 is forced)."""
  import dataclasses
  dev = Device["OPENCL"].dev  # type: ignore[attr-defined]
  if dev.target.has_fp16: monkeypatch.setattr(dev, "target", dataclasses.replace(dev.target, has_fp16=False))
  monkeypatch.setattr(dev, "programs", {})

@needs_cl
def test_half_storage_ops_match_the_interpreter(storage_half):
  check_half_ops_match_interpreter()

@needs_cl
def test_planted_unrounded_half_quotient_is_caught(monkeypatch, storage_half):
  from tinysched.ops import Ops
  orig = clr._alu
  def trunc_of_float_quotient(ctx, x):  # IDIV like any other op: trunc(a/b) in float, rounded after
    if x.op is Ops.IDIV and x.dtype == dtypes.float16:
      return clr._round_to(ctx, x.dtype, clr.render_alu(x.op, dtypes.float32, [ctx.r[s] for s in x.src], x.src))
    return orig(ctx, x)
  monkeypatch.setattr(clr, "_alu", trunc_of_float_quotient)
  with pytest.raises(AssertionError, match="Ops.IDIV"): check_half_ops_match_interpreter()

@pytest.fixture
def no_interpreter_fallback(monkeypatch):
  from tinysched.runtime.opencl import OpenCLBackend
  def refuse(self, ast, bufs, var_vals, why): raise AssertionError(f"ran on the interpreter: {why}")
  monkeypatch.setattr(OpenCLBackend, "_interpret", refuse)

@needs_cl
def test_half_without_fp16_runs_on_the_device(no_interpreter_fallback):
  t = _cl_target()
  if t.has_fp16: pytest.skip(f"{t.name} has native half: the storage path is covered by the forced target below")
  check_half_on_device()
  si = _kernels(Tensor.empty(16, dtype=dtypes.float16) * 3)[0]
  from tinysched.codegen import to_program
  src = to_program(si.ast, None, t).src
  assert "cl_khr_fp16" not in src and "vload_half" in src and "vstore_half" in src and "__global half*" in src

@needs_cl
def test_half_storage_forced_on_any_device(monkeypatch, no_interpreter_fallback):
  # a device with native half (a GPU) runs the storage path when its target says it has none
  import dataclasses
  dev = Device["OPENCL"].dev  # type: ignore[attr-defined]
  monkeypatch.setattr(dev, "target", dataclasses.replace(dev.target, has_fp16=False))
  monkeypatch.setattr(dev, "programs", {})
  check_half_on_device()

@needs_cl
def test_fp16_probe_agrees_with_the_device():
  # PoCL's CPU device lists no cl_khr_fp16 and its compiler rejects half arithmetic: the probe says False there
  from tinysched.runtime.opencl import probe_fp16, select_device
  d = select_device("OPENCL")
  listed = "cl_khr_fp16" in d.extensions.split()
  assert _cl_target().has_fp16 == (listed or probe_fp16(d))
  if "Portable Computing Language" in d.platform.name and d.type & 2: assert not probe_fp16(d)  # CL_DEVICE_TYPE_CPU

def check_probe_covers(probe: str) -> None:
  """The fp16 probe uses each builtin the renderer emits for native half. NVIDIA's compiler builds half arithmetic but
  has no half math builtins: a probe of arithmetic alone said yes there, and half kernels with sqrt/exp2/... failed."""
  from tinysched.ops import Ops
  from tinysched.uop import UOp
  x, y = UOp(Ops.CONST, dtypes.float16, (), 1.0), UOp(Ops.CONST, dtypes.float16, (), 2.0)
  for op, srcs in [(Ops.EXP2, (x,)), (Ops.LOG2, (x,)), (Ops.SIN, (x,)), (Ops.SQRT, (x,)), (Ops.IDIV, (x, y)), (Ops.MOD, (x, y))]:
    fn = clr.render_alu(op, dtypes.float16, ["a", "b"][:len(srcs)], srcs).split("(")[0]
    assert fn + "(" in probe, f"half {op} renders {fn}(), which the fp16 probe does not try"
  assert "half4" in probe and "(int)" in probe, "the fp16 probe tries no half4 memory or conversion"

def test_fp16_probe_uses_what_native_half_kernels_use():
  pytest.importorskip("pyopencl")
  from tinysched.runtime.opencl import _FP16_PROBE
  check_probe_covers(_FP16_PROBE)

def test_planted_arithmetic_only_probe_is_caught():
  # the first probe: half arithmetic alone (NVIDIA passed it, then failed every half kernel with a math builtin)
  with pytest.raises(AssertionError, match="does not try"):
    check_probe_covers("#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n__kernel void p(__global half* a) { a[0] = a[0]*a[0] + (half)1.0f; }")

# *** planted bugs: each check above goes red with the bug it exists to catch ***

def _truncating_bits(x) -> np.ndarray:
  return (np.ascontiguousarray(np.asarray(x, np.float32)).view(np.uint32) >> 16).astype(np.uint16).reshape(np.shape(x))

@pytest.fixture
def fresh_programs(monkeypatch):
  """Programs compiled while a bug is planted stay out of the device's cache (keyed by AST, not by renderer)."""
  if HAS_CL: monkeypatch.setattr(Device["OPENCL"].dev, "programs", {})  # type: ignore[attr-defined]

def test_planted_interpreter_truncation_is_caught(monkeypatch):
  # the interpreter rounds through both names (stores: bf16_bits; casts and constants: bf16_round)
  monkeypatch.setattr(interpreter, "bf16_bits", _truncating_bits)
  monkeypatch.setattr(interpreter, "bf16_round", lambda x: interpreter.bf16_float(_truncating_bits(x)))
  with pytest.raises(AssertionError, match="bits differ"): check_cast_bits("NUMPY")
  with pytest.raises(AssertionError): check_elementwise("NUMPY")

def test_planted_host_truncation_is_caught(monkeypatch):
  import tinysched.tensor as tensor_mod
  monkeypatch.setattr(tensor_mod, "bf16_bits", _truncating_bits)
  with pytest.raises(AssertionError, match="bits differ"): check_cast_bits("NUMPY")

@needs_cl
def test_planted_opencl_truncation_is_caught(monkeypatch, fresh_programs):
  monkeypatch.setitem(clr._HELPERS, "ts_bf16_bits", "ushort{n} ts_bf16_bits{n}(float{n} f) {{ return convert_ushort{n}(as_uint{n}(f) >> 16); }}")
  with pytest.raises(AssertionError, match="bits differ"): check_cast_bits("OPENCL")
  with pytest.raises(AssertionError): check_elementwise("OPENCL")

@needs_cl
def test_planted_opencl_nan_to_inf_is_caught(monkeypatch, fresh_programs):
  # rounding without the NaN case: 0x7f800001 carries to inf, 0x7fffffff to -0
  monkeypatch.setitem(clr._HELPERS, "ts_bf16_bits", "ushort{n} ts_bf16_bits{n}(float{n} f) {{ uint{n} u = as_uint{n}(f); "
                      "return convert_ushort{n}((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }}")
  with pytest.raises(AssertionError, match="NaN-ness differs"): check_cast_bits("OPENCL")

@needs_cl
def test_planted_bf16_accumulation_is_caught(monkeypatch, fresh_programs):
  # rounding every bfloat16 op result (as the half storage path does) would accumulate sums in bfloat16
  orig = clr._alu
  monkeypatch.setattr(clr, "_alu", lambda ctx, x: clr._round_to(ctx, x.dtype, orig(ctx, x)) if x.dtype.scalar() is BF16 else orig(ctx, x))
  with pytest.raises(AssertionError): check_sum("OPENCL")

@needs_cl
def test_planted_unrounded_cast_from_bf16_is_caught(monkeypatch, fresh_programs):
  # skipping the rounding of a bfloat16 op result that is cast to float32 in the same kernel
  monkeypatch.setattr(clr, "_exact_bf16", lambda u: True)
  with pytest.raises(AssertionError): check_elementwise("OPENCL")

def _patch_render(monkeypatch, old: str, new: str) -> None:
  import tinysched.codegen.program as program
  orig = program.render
  monkeypatch.setattr(program, "render", lambda lw, target, *a: orig(lw, target, *a).replace(old, new))

@needs_cl
def test_planted_half_round_toward_zero_is_caught(monkeypatch, fresh_programs, no_interpreter_fallback):
  dev = Device["OPENCL"].dev  # type: ignore[attr-defined]
  if dev.target.has_fp16:
    import dataclasses
    monkeypatch.setattr(dev, "target", dataclasses.replace(dev.target, has_fp16=False))
  check_half_on_device()  # the unpatched path is green here
  monkeypatch.setattr(dev, "programs", {})
  _patch_render(monkeypatch, "_rte(", "_rtz(")  # vstore_half*_rte -> _rtz: stores and per-op rounding truncate
  with pytest.raises(AssertionError): check_half_on_device()

@needs_cl
def test_planted_missing_half_op_rounding_is_caught(monkeypatch, fresh_programs, no_interpreter_fallback):
  dev = Device["OPENCL"].dev  # type: ignore[attr-defined]
  if dev.target.has_fp16:
    import dataclasses
    monkeypatch.setattr(dev, "target", dataclasses.replace(dev.target, has_fp16=False))
  from tinysched.ops import Ops
  monkeypatch.setattr(clr, "_EXACT_HALF_OPS", frozenset(Ops))  # no op rounds: float arithmetic, rounded on the store only
  with pytest.raises(AssertionError): check_half_on_device()
