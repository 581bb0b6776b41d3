"""Kernel-level helpers shared by the codegen, OpenCL and index-range tests: hand-built ASTs, seeded inputs, and
running one AST on OpenCL and on the reference interpreter."""
from __future__ import annotations
import numpy as np
import pytest
from tinysched import Tensor
from tinysched.ops import Ops
from tinysched.uop import UOp
from tinysched.shape import ShapeTracker
from tinysched.runtime.interpreter import exec_ast as interpret

try:
  from tinysched.runtime.opencl import opencl_available, run_ast
  HAS_CL = opencl_available()
except ImportError:  # pyopencl missing: the OpenCL tests skip
  HAS_CL, run_ast = False, None
needs_cl = pytest.mark.skipif(not HAS_CL, reason="no OpenCL device (install pocl-opencl-icd)")

def _kernels(t: Tensor) -> list:
  """The kernel ScheduleItems (SINK ASTs) that realize t, built on the NUMPY device (nothing runs)."""
  return [si for si in t.schedule() if si.ast.op is Ops.SINK]

def _view(shape) -> UOp: return ShapeTracker.from_shape(tuple(shape)).to_uop()
def _glob(i: int, dt) -> UOp: return UOp(Ops.DEFINE_GLOBAL, dt.ptr(), (), i)

def _elementwise_ast(n: int, in_dtypes: list, fn) -> UOp:
  """SINK of one STORE per value fn(loads) returns; outputs are buffers 0..k-1, inputs after them."""
  v = _view((n,))
  probe = fn([UOp(Ops.LOAD, dt, (_glob(100 + i, dt), v)) for i, dt in enumerate(in_dtypes)])
  k = len(probe)
  loads = [UOp(Ops.LOAD, dt, (_glob(k + i, dt), v)) for i, dt in enumerate(in_dtypes)]
  vals = fn(loads)
  return UOp.sink_of(*(UOp.store(_glob(i, x.dtype), v, x) for i, x in enumerate(vals)))

def _random_inputs(ast: UOp, sizes: list[int], seed: int = 0, special: bool = False) -> list[np.ndarray]:
  rng = np.random.default_rng(seed)
  bufs = sorted({u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL}, key=lambda u: u.arg)
  out = []
  for b, n in zip(bufs, sizes):
    dt = b.dtype.base.np
    if dt == np.bool_: a = rng.random(n) > 0.5
    elif np.issubdtype(dt, np.floating):
      a = rng.uniform(-3, 3, n).astype(dt)
      if special and n >= 8: a[:6] = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0], dtype=dt)
    else:
      info = np.iinfo(dt)
      a = rng.integers(max(info.min, -20), min(info.max, 20), n, endpoint=True).astype(dt)
      if n >= 4: a[:2] = 0  # division by zero is defined (0) in the IR
    out.append(a)
  return out

def _assert_same(got: np.ndarray, want: np.ndarray, dtype, what: str = "") -> None:
  if np.issubdtype(want.dtype, np.floating):
    tol = {np.float16: 2e-3, np.float32: 2e-5, np.float64: 1e-12}[want.dtype.type]
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol, equal_nan=True, err_msg=what)
  else: np.testing.assert_array_equal(got, want, err_msg=what)

def _run_both(ast: UOp, arrays: list[np.ndarray], var_vals=None, opts=None, tol=None) -> None:
  """Run ast on OpenCL (with opts) and on the interpreter; outputs must agree."""
  ref = [a.copy() for a in arrays]
  interpret(ast, ref, var_vals or {})
  got = [a.copy() for a in arrays]
  run_ast(ast, got, var_vals, opts)
  for i in sorted({s.src[0].arg for s in ast.src}):
    if tol is not None and np.issubdtype(ref[i].dtype, np.floating):
      np.testing.assert_allclose(got[i], ref[i], rtol=tol, atol=tol, equal_nan=True, err_msg=f"output {i} with opts {opts}")
    else: _assert_same(got[i], ref[i], ref[i].dtype, f"output {i} with opts {opts}")
