"""Shared helpers for the tests: numpy/torch comparisons (tensor ops, autograd, nn, optim, state), and whether an
OpenCL platform is here (tests that run kernels on it skip without one)."""
from __future__ import annotations
from typing import Any, Callable
import numpy as np
import pytest
from tinysched import Tensor

try:
  import torch
except ImportError:  # the numpy-reference tests still run; torch comparisons skip
  torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")

def has_opencl() -> bool:
  try:
    from tinysched.runtime.opencl import opencl_available  # (pyopencl may be missing: then there is no platform)
    return opencl_available()
  except Exception: return False

needs_opencl = pytest.mark.skipif(not has_opencl(), reason="needs an OpenCL platform (PoCL here)")

def rand(*shape: int, seed: int = 0, dtype: Any = np.float32, low: float = -2.0, high: float = 2.0) -> np.ndarray:
  """Deterministic test data: uniform floats, or ints in [low, high) for an int dtype, or bools."""
  rng = np.random.default_rng(seed)
  if np.dtype(dtype) == np.bool_: return rng.random(shape) > 0.5
  if np.issubdtype(np.dtype(dtype), np.integer): return rng.integers(int(low), int(high), shape).astype(dtype)
  return rng.uniform(low, high, shape).astype(dtype)

def assert_close(got: Tensor | np.ndarray, want: Any, atol: float = 1e-5, rtol: float = 1e-5, dtype: Any = None) -> None:
  """Shape (and optionally numpy dtype) must match exactly, values within tolerance (nan == nan)."""
  g = got.numpy() if isinstance(got, Tensor) else np.asarray(got)
  w = want.detach().numpy() if torch is not None and isinstance(want, torch.Tensor) else np.asarray(want)
  assert g.shape == w.shape, f"shape {g.shape} != expected {w.shape}"
  if dtype is not None: assert g.dtype == np.dtype(dtype), f"dtype {g.dtype} != expected {np.dtype(dtype)}"
  if g.dtype == np.bool_ or np.issubdtype(g.dtype, np.integer): np.testing.assert_array_equal(g, w)
  else: np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), atol=atol, rtol=rtol, equal_nan=True)

def numerical_grad(f: Callable[..., Tensor], arrays: list[np.ndarray], eps: float = 1e-6) -> list[np.ndarray]:
  """Central finite differences of the scalar f(*Tensors) in float64, one element at a time."""
  grads = []
  for i, a in enumerate(arrays):
    g = np.zeros_like(a, dtype=np.float64)
    for idx in np.ndindex(a.shape):
      vals = []
      for sgn in (1, -1):
        b = a.astype(np.float64).copy()
        b[idx] += sgn * eps
        args = [Tensor(b) if j == i else Tensor(x.astype(np.float64)) for j, x in enumerate(arrays)]
        vals.append(f(*args).item())
      g[idx] = (vals[0] - vals[1]) / (2 * eps)
    grads.append(g)
  return grads
