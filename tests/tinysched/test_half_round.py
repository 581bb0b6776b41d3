"""`ts_half_round` (tinysched/codegen/opencl.py): a float rounded to the nearest half (ties to even) and back, in
registers, for half carried in float (no cl_khr_fp16: PoCL, NVIDIA). Every half result of +, *, / and casts goes
through it, so it must equal the conversion for every input.

- Proved for all 2^32 float32 bit patterns with z3: the helper's formula, transcribed below, against z3's IEEE
  conversion float -> half -> float. Two planted mistakes (ties rounded up, the subnormal threshold one binade off) must
  give counterexamples, or the proof proves nothing.
- The helper's C text is run on the OpenCL device (scalar and float4) over every half value, the midpoints between
  neighbours and their float neighbours, the edges of the range, and random floats, against numpy's float16.
"""
import numpy as np
import pytest
from tinysched.codegen.opencl import scalar_helpers

try: import z3
except ImportError: z3 = None
needs_z3 = pytest.mark.skipif(z3 is None, reason="z3-solver is not installed")

def _formula(x, ties: int = 1, sub: int = 0x38800000):
  """The helper on the 32-bit pattern x (a z3 bit-vector), as a z3 float."""
  F32, RNE = z3.Float32(), z3.RNE()
  f = z3.fpBVToFP(x, F32)
  a = x & 0x7fffffff
  normal = z3.fpBVToFP((x + 0xfff + (z3.LShR(x, 13) & ties)) & 0xffffe000, F32)
  subnormal = z3.fpMul(RNE, z3.fpRoundToIntegral(RNE, z3.fpMul(RNE, f, z3.FPVal(2.0**24, F32))), z3.FPVal(2.0**-24, F32))
  r = z3.If(z3.ULT(a, sub), subnormal, normal)
  inf = z3.If(z3.fpIsNegative(f), z3.fpMinusInfinity(F32), z3.fpPlusInfinity(F32))
  r = z3.If(z3.UGT(z3.fpToIEEEBV(r) & 0x7fffffff, 0x477fe000), inf, r)
  return f, z3.If(z3.UGT(a, 0x7f800000), f, r)

def counterexample(**planted) -> int | None:
  """A float32 bit pattern where the formula differs from float -> half -> float, or None (proved for all)."""
  x = z3.BitVec("x", 32)
  f, got = _formula(x, **planted)
  want = z3.fpFPToFP(z3.RNE(), z3.fpFPToFP(z3.RNE(), f, z3.FloatHalf()), z3.Float32())
  s = z3.Solver()
  s.add(z3.Not(z3.Or(z3.And(z3.fpIsNaN(got), z3.fpIsNaN(want)), z3.fpToIEEEBV(got) == z3.fpToIEEEBV(want))))
  return s.model()[x].as_long() if s.check() == z3.sat else None

@needs_z3
def test_the_rounding_is_proved_for_every_float():
  assert counterexample() is None

@needs_z3
@pytest.mark.parametrize("planted", [{"ties": 0}, {"sub": 0x38000000}], ids=["ties rounded up", "subnormal threshold off"])
def test_a_planted_rounding_mistake_has_a_counterexample(planted):
  assert counterexample(**planted) is not None

def test_the_formula_in_the_source_is_the_proved_one():
  # the transcription above follows the helper's text: these are its constants and operations
  src = scalar_helpers(("ts_half_round",))[0]
  for part in ("0xfffu", "(u >> 13) & 1u", "0xffffe000u", "rint(f * 0x1p24f) * 0x1p-24f", "a < 0x38800000u", "0x477fe000u", "a > 0x7f800000u"):
    assert part in src, part

def _samples() -> np.ndarray:
  halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
  h = halves[np.isfinite(halves)].astype(np.float32)
  h = np.sort(np.unique(h))
  mid = ((h[:-1].astype(np.float64) + h[1:]) / 2).astype(np.float32)  # exact: midpoints of halves are floats
  near = np.concatenate([np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf))])
  edges = np.array([65504, 65519.996, 65520, 65536, 1e30, np.inf, -np.inf, np.nan, 2**-14, 2**-24, 2**-25, 3 * 2**-26, 1e-30, 0.0, -0.0],
                   np.float32)
  rnd = np.random.default_rng(0).integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)
  return np.concatenate([h, mid, near, edges, -edges, rnd]).astype(np.float32)

def _opencl() -> bool:
  try:
    from tinysched.runtime.opencl import opencl_available
    return opencl_available()
  except ImportError: return False

def device_differences(width: int, helper_text: str | None = None) -> int:
  """How many samples the helper (its C text, run on the OpenCL device) rounds otherwise than numpy's float16."""
  from tinysched import Device
  from tinysched.device import Buffer
  from tinysched.dtype import dtypes
  from tinysched.codegen.opencl import _HELPERS
  x = _samples()
  x = x[: len(x) // 4 * 4]
  n = "" if width == 1 else str(width)
  helper = (helper_text or _HELPERS["ts_half_round"]).format(n=n)
  src = (helper + f"\n__kernel void half_round(__global const float{n}* x, __global float{n}* y) {{ int i = get_global_id(0); "
         f"y[i] = ts_half_round{n}(x[i]); }}\n")
  dev = Device["OPENCL"]
  bx = Buffer("OPENCL", x.size, dtypes.float32).allocate().copyin(x)
  by = Buffer("OPENCL", x.size, dtypes.float32).allocate()
  dev.run_source("half_round", src, [bx, by], (x.size // width,))
  got = by.numpy()
  with np.errstate(all="ignore"): want = x.astype(np.float16).astype(np.float32)
  bad = ~((got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want)))
  return int(bad.sum())

@pytest.mark.skipif(not _opencl(), reason="no OpenCL platform")
@pytest.mark.parametrize("width", [1, 4])
def test_the_helper_rounds_as_numpy_on_the_device(width):
  assert device_differences(width) == 0

@pytest.mark.skipif(not _opencl(), reason="no OpenCL platform")
def test_the_device_comparison_catches_a_planted_tie_mistake():
  from tinysched.codegen.opencl import _HELPERS
  assert device_differences(1, _HELPERS["ts_half_round"].replace("((u >> 13) & 1u)", "1u")) > 0
