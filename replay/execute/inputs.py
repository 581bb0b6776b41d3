"""Inputs and comparison for the execution check: seeded values that respect each op's domain, and a
NaN-aware comparison with a documented tolerance per dtype.

Domains (derived from how the graph uses each buffer, so valid programs raise no false alarms):
- floats: uniform in [0.5, 2): LOG2, SQRT and RECIP of an input stay finite, EXP2 does not overflow;
  an expression that leaves the domain (log of a difference) gives NaN on every side at the same places,
  and NaN compares equal to NaN at the same position;
- integers: small values in [-8, 9) (no overflow in short arithmetic chains), but
  - a buffer that reaches the divisor of IDIV/MOD: [1, 9) (division by zero is undefined on devices),
  - a buffer that reaches a shift amount (SHL/SHR): [0, 8),
  - unsigned dtypes: [0, 9);
- bools: fair coin.
Each buffer's seed is the capture's seed plus the buffer's canonical number, recorded in the report.

Tolerances (rtol, atol) by dtype, used as |a-b| <= atol + rtol*|ref|: half 1e-2/1e-2,
float 1e-3/1e-4, double 1e-7/1e-9; integers and bools exact. NaN must sit at the same positions, and an
infinity must match in sign.

bfloat16 (buffers hold uint16 bits, see tinysched/dtype.py): inputs are bfloat16 values in the float domain
(drawn in float32, rounded with bf16_bits); comparison widens both sides to float32 and counts in bfloat16 ULPs
(8 significant bits), measured on the smaller magnitude of the pair:
- within half a ULP (or BF16_ATOL absolute): equal (float32 noise in an output judged as bfloat16);
- more than 1.5 ULP (and beyond BF16_ATOL): wrong, as any float outside its tolerance;
- one ULP: a rounding decision. The reference and a correct kernel round the same float32/float64 value to nearest
  even, so they differ only where that value lies within its compute error of a midpoint: rare. A rounding bug
  (truncation, ties away from zero) moves about half of all elements by one ULP. So one-ULP elements are tolerated up
  to BF16_ONE_ULP_SHARE of the judged elements (plus one), and all of them count as wrong beyond that.
With `intermediate_rounding` (the two sides may round intermediate bfloat16 values at different places: the
scheduler's input graph against kernels, or old and new kernel lists that fuse differently), one rounding more or
less upstream moves outputs by a few ULPs anywhere, so bfloat16 is judged like half, by BF16_LOOSE (rtol, atol).
"""
from __future__ import annotations
import functools
from typing import Any
import numpy as np
from tinysched.dtype import dtypes, bf16_bits, bf16_float
from tinysched.ops import Ops

TOLERANCES = {"half": (1e-2, 1e-2), "float": (1e-3, 1e-4), "double": (1e-7, 1e-9)}  # (rtol, atol)
BF16 = "bfloat16"
BF16_ATOL = 1e-4              # absolute floor (cancellation near zero), as float's atol
BF16_ONE_ULP_SHARE = 1 / 64   # one-ULP elements tolerated, as a share of the judged elements (plus one)
BF16_LOOSE = (2.0 ** -5, 1e-2)  # (rtol, atol) where rounding points may differ: about 4 ULP, half's atol

def judged_as(dtype_name: str, asts: list) -> str:
  """The dtype whose tolerance judges an output of `dtype_name` made by `asts`: the narrowest float dtype they compute
  in, when narrower (a float32 sum stored as double carries float32 rounding, which double's tolerance would call
  wrong)."""
  if dtype_name not in TOLERANCES and dtype_name != BF16: return dtype_name
  return min([dtype_name, *(_narrowest(a) for a in asts)], key=lambda n: _FLOAT_SIZE.get(n, 99))

_FLOAT_SIZE = {"half": 2, "bfloat16": 2, "float": 4, "double": 8}

@functools.lru_cache(maxsize=4096)
def _narrowest(ast) -> str:
  return min((u.dtype.scalar().name for u in ast.toposort()), key=lambda n: _FLOAT_SIZE.get(n, 99), default="double")

def _reads(u) -> int | None:
  """The buffer a node reads directly: BUFFER (big graph / pre-sink) or DEFINE_GLOBAL (kernel AST)."""
  if u.op is Ops.BUFFER: return u.arg[0]
  if u.op is Ops.DEFINE_GLOBAL: return u.arg
  return None

def domains(roots: list, buffer_of=None) -> dict[int, str]:
  """Buffer number -> domain name ("divisor", "shift") for the buffers whose values reach a restricted operand.
  `buffer_of(node) -> int | None` maps a DEFINE_GLOBAL to its canonical buffer (default: the node's own number)."""
  buffer_of = buffer_of or _reads
  out: dict[int, str] = {}
  for root in roots:
    for u in root.toposort():
      if u.op in (Ops.IDIV, Ops.MOD): dom, operand = "divisor", u.src[1]
      elif u.op in (Ops.SHL, Ops.SHR): dom, operand = "shift", u.src[1]
      else: continue
      for x in operand.toposort():
        if (b := buffer_of(x)) is not None: out.setdefault(b, dom)
  return dict(sorted(out.items()))

def seeded_fill(size: int, dtype, seed: int, domain: str | None = None) -> np.ndarray:
  rng = np.random.default_rng(seed)
  npd = np.dtype(dtype.scalar().fmt)
  if dtype.scalar() == dtypes.bfloat16:  # the float domain drawn in float32, stored as the bits of the nearest bfloat16
    x: np.ndarray = rng.random(size, dtype=np.float32)
    x *= 1.5 - 2.0 ** -7  # below 2 - 2^-8, the midpoint that would round up to 2.0: the values stay in [0.5, 2)
    x += 0.5
    return bf16_bits(x)
  if dtypes.is_float(dtype):  # uniform in [0.5, 2), drawn in the buffer's precision (no float64 temporary)
    x = rng.random(size, dtype=np.float64 if npd.itemsize == 8 else np.float32)
    x *= 1.5
    x += 0.5
    return x.astype(npd, copy=False)
  if dtypes.is_bool(dtype): return rng.integers(0, 2, size, dtype=np.uint8).view(np.bool_)
  if domain == "divisor": lo, hi = 1, 9
  elif domain == "shift": lo, hi = 0, 8
  else: lo, hi = (0 if dtypes.is_unsigned(dtype) else -8), 9
  return rng.integers(lo, hi, size, dtype=npd)

def _ulp(a64: np.ndarray, b64: np.ndarray, npd: np.dtype) -> np.ndarray:
  """Distance in units of the last place of `npd` (on the magnitude of a)."""
  spacing = np.spacing(np.abs(a64).astype(npd)).astype(np.float64)
  with np.errstate(all="ignore"): return np.abs(a64 - b64) / np.where(spacing > 0, spacing, np.finfo(npd).smallest_subnormal)

def compare(ref: np.ndarray, got: np.ndarray, dtype_name: str, ignore: np.ndarray | None = None,
            intermediate_rounding: bool = False) -> dict[str, Any]:
  """How `got` differs from `ref`: equal (within the dtype's tolerance), max abs/rel error, max ULP, the count and
  first indices of out-of-tolerance elements. NaN/inf by position. `ignore`: elements not judged (see reference.uncertain_outputs).
  `intermediate_rounding`: bfloat16 only, see the module docstring."""
  if ignore is not None and ignore.any() and ref.shape == got.shape:
    keep = ~ignore
    c = compare(ref[keep], got[keep], dtype_name, intermediate_rounding=intermediate_rounding)
    where = np.flatnonzero(keep)
    return {**c, "first_diff": where[c["first_diff"]].tolist() if c["first_diff"] else [], "n_undecidable": int(ignore.sum())}
  if ref.shape != got.shape: return {"equal": False, "max_abs_err": None, "max_rel_err": None, "n_diff": max(ref.size, got.size), "n_nonfinite": 0,
                                     "first_diff": [], "error": f"sizes differ: {ref.size} vs {got.size}"}
  if dtype_name == BF16: return _compare_bf16(ref, got, intermediate_rounding)
  if ref.dtype.kind in "biu":
    diff = ref != got
    ae = np.abs(ref.astype(np.float64) - got.astype(np.float64))
    return {"equal": not diff.any(), "max_abs_err": float(ae.max()) if ae.size else 0.0, "max_rel_err": None, "n_diff": int(diff.sum()),
            "n_nonfinite": 0, "first_diff": np.flatnonzero(diff)[:5].tolist(), "rtol": 0.0, "atol": 0.0}
  rtol, atol = TOLERANCES.get(dtype_name, (1e-3, 1e-4))
  # only the elements that differ can add to any statistic (equal values and NaN against NaN give 0 and are fine):
  # judge those, in float64, and map their positions back
  ref, got = ref.reshape(-1), got.reshape(-1)
  with np.errstate(all="ignore"): where = np.flatnonzero((ref != got) & ~(np.isnan(ref) & np.isnan(got)))
  if where.size < ref.size:
    c = _compare_floats(ref[where], got[where], ref.dtype, rtol, atol)
    return {**c, "first_diff": where[c["first_diff"]].tolist()}
  return _compare_floats(ref, got, ref.dtype, rtol, atol)

def _float_errors(a64: np.ndarray, b64: np.ndarray) -> tuple[np.ndarray, ...]:
  """(nan in a, nan in b, an infinity that does not match, both finite, abs error, rel error) of two float64 arrays."""
  nan_a, nan_b = np.isnan(a64), np.isnan(b64)
  inf_mismatch = (np.isinf(a64) | np.isinf(b64)) & (a64 != b64) & ~(nan_a | nan_b)
  finite = ~(nan_a | nan_b | np.isinf(a64) | np.isinf(b64))
  with np.errstate(all="ignore"):
    ae = np.where(finite, np.abs(a64 - b64), 0.0)
    re = np.where(finite, ae / np.maximum(np.abs(a64), 1e-30), 0.0)
  return nan_a, nan_b, inf_mismatch, finite, ae, re

def _compare_floats(ref: np.ndarray, got: np.ndarray, npd: np.dtype, rtol: float, atol: float) -> dict[str, Any]:
  a64, b64 = ref.astype(np.float64), got.astype(np.float64)
  nan_a, nan_b, inf_mismatch, finite, ae, re = _float_errors(a64, b64)
  with np.errstate(all="ignore"):
    ulp = np.where(finite, _ulp(a64, b64, npd), 0.0) if ref.size else ae
  bad = (nan_a != nan_b) | inf_mismatch | (finite & (ae > atol + rtol * np.abs(a64)))
  return {"equal": not bad.any(), "max_abs_err": float(ae.max()) if ae.size else 0.0, "max_rel_err": float(re.max()) if re.size else 0.0,
          "max_ulp": float(ulp.max()) if ulp.size else 0.0, "n_diff": int(bad.sum()),
          "n_nonfinite": int(((nan_a != nan_b) | inf_mismatch).sum()), "first_diff": np.flatnonzero(bad)[:5].tolist(),
          "rtol": rtol, "atol": atol}

def _bf16_values(a: np.ndarray) -> np.ndarray:
  """A bfloat16 buffer (uint16 bits) as its float32 values; an output of another float dtype judged as bfloat16
  (judged_as) as float32."""
  return bf16_float(a) if a.dtype == np.uint16 else a.astype(np.float32)

def _compare_bf16(ref: np.ndarray, got: np.ndarray, loose: bool = False) -> dict[str, Any]:
  """compare() for outputs judged as bfloat16: in bfloat16 ULPs, with the one-ULP allowance of the module docstring."""
  a, b = _bf16_values(ref.reshape(-1)), _bf16_values(got.reshape(-1))
  if ref.dtype == got.dtype == np.uint16 and np.array_equal(ref, got):  # the same bits (the common case): equal, NaNs included
    a = b = np.zeros(0, np.float32)
  a64, b64 = a.astype(np.float64), b.astype(np.float64)
  nan_a, nan_b, inf_mismatch, finite, ae, re = _float_errors(a64, b64)
  with np.errstate(all="ignore"):
    # a bfloat16 ULP is 2^16 float32 ULPs (same exponent range; subnormals: 2^-133 both ways); on the smaller magnitude,
    # so one step down across a power of two counts as one ULP, not half of one
    small = np.minimum(np.abs(a), np.abs(b))
    ulp = np.where(finite, ae / (np.spacing(np.where(finite, small, np.float32(0))).astype(np.float64) * 65536.0), 0.0)
  bad = (nan_a != nan_b) | inf_mismatch
  if loose:  # rounding points may differ: an rtol/atol judge, no one-ULP rule
    bad |= finite & (ae > BF16_LOOSE[1] + BF16_LOOSE[0] * np.abs(a64))
    n_one, allowed = 0, ref.size
  else:
    off = finite & (ae > BF16_ATOL)
    far = off & (ulp > 1.5)
    one = off & (ulp > 0.5) & ~far
    n_one, allowed = int(one.sum()), int(ref.size * BF16_ONE_ULP_SHARE) + 1
    bad |= far | (one if n_one > allowed else False)
  return {"equal": not bad.any(), "max_abs_err": float(ae.max()) if ae.size else 0.0, "max_rel_err": float(re.max()) if re.size else 0.0,
          "max_ulp": float(ulp.max()) if ulp.size else 0.0, "n_diff": int(bad.sum()),
          "n_nonfinite": int(((nan_a != nan_b) | inf_mismatch).sum()), "first_diff": np.flatnonzero(bad)[:5].tolist(),
          **({"rtol": BF16_LOOSE[0], "atol": BF16_LOOSE[1]} if loose else {"rtol": 0.0, "atol": BF16_ATOL, "ulp_tolerance": 1.5}),
          "n_one_ulp": n_one, "one_ulp_allowed": allowed}

DISCONTINUOUS = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.IDIV, Ops.MOD})

def discontinuous(ast) -> bool:
  """Does the kernel decide something from float values (a comparison, a float -> int/bool cast)? Then a rounding
  difference of one ULP upstream can flip an output, and a tolerance alone cannot judge it."""
  for u in ast.toposort():
    if u.op in DISCONTINUOUS and u.src and dtypes.is_float(u.src[0].dtype): return True
    if u.op is Ops.CAST and u.src and dtypes.is_float(u.src[0].dtype) and not dtypes.is_float(u.dtype): return True
  return False

def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
  """Bit-for-bit equal (NaNs included): the test for `unstable`. Compared as the widest unsigned words that divide
  the size, without copies."""
  if a.shape != b.shape or a.dtype.itemsize != b.dtype.itemsize: return False
  a, b = np.ascontiguousarray(a).reshape(-1).view(np.uint8), np.ascontiguousarray(b).reshape(-1).view(np.uint8)
  w = next(w for w in (8, 4, 2, 1) if a.size % w == 0)
  return bool(np.array_equal(a.view(f"u{w}"), b.view(f"u{w}")))
