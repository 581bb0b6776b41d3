"""Tensor methods against numpy (always) and torch (when installed): values, shapes, dtypes, errors."""
from __future__ import annotations
import numpy as np
import pytest
from tinysched import Tensor, dtypes
from tinysched.realize import run_schedule
from tests.helpers import rand, assert_close, torch, needs_torch

A = rand(3, 4, 5)

# *** creation ***

def test_creation_values_and_dtypes():
  assert_close(Tensor([[1, 2], [3, 4]]), np.array([[1, 2], [3, 4]], dtype=np.int32), dtype=np.int32)
  assert_close(Tensor([1.5, 2]), np.array([1.5, 2], dtype=np.float32), dtype=np.float32)
  assert_close(Tensor([True, False]), np.array([True, False]), dtype=np.bool_)
  assert_close(Tensor.zeros(2, 3), np.zeros((2, 3), np.float32), dtype=np.float32)
  assert_close(Tensor.ones((2, 3), dtype=dtypes.int32), np.ones((2, 3), np.int32), dtype=np.int32)
  assert_close(Tensor.full((2, 2), 7), np.full((2, 2), 7, np.int32), dtype=np.int32)
  assert_close(Tensor.arange(5), np.arange(5, dtype=np.int32), dtype=np.int32)
  assert_close(Tensor.arange(1, 2, 0.25), np.arange(1, 2, 0.25, dtype=np.float32), dtype=np.float32)
  assert_close(Tensor.arange(5, 0, -2), np.arange(5, 0, -2, dtype=np.int32))
  assert_close(Tensor.eye(3, 4), np.eye(3, 4, dtype=np.float32))
  assert Tensor.rand(2, 3).shape == (2, 3) and Tensor.randn(4).dtype == dtypes.float32
  r = Tensor.rand(200).numpy()
  assert 0 <= r.min() and r.max() < 1
  assert Tensor(np.array(2.5, np.float32)).shape == () and Tensor(np.array(2.5)).item() == 2.5  # 0-d arrays stay 0-d
  assert Tensor(np.arange(6).reshape(2, 3)[:, ::2]).tolist() == [[0, 2], [3, 5]]  # non-contiguous arrays are copied
  Tensor.manual_seed(3); a = Tensor.rand(5).numpy()
  Tensor.manual_seed(3); b = Tensor.rand(5).numpy()
  np.testing.assert_array_equal(a, b)

def test_random_and_init_helpers():
  Tensor.manual_seed(0)
  assert Tensor.empty(2, 3).shape == (2, 3) and Tensor.empty(4, dtype=dtypes.int32).dtype == dtypes.int32
  r = Tensor.randint(500, low=3, high=7).numpy()
  assert r.dtype == np.int32 and r.min() == 3 and r.max() == 6
  u = Tensor.uniform(1000, low=-3.0, high=-1.0).numpy()
  assert -3 <= u.min() and u.max() < -1 and abs(u.mean() + 2) < 0.1
  n = Tensor.normal(2000, mean=1.0, std=0.5).numpy()
  assert abs(n.mean() - 1) < 0.05 and abs(n.std() - 0.5) < 0.05
  k = Tensor.kaiming_uniform(64, 16, a=0.0).numpy()
  assert np.abs(k).max() <= np.sqrt(6 / 16)
  assert Tensor.glorot_uniform(8, 4).shape == (8, 4) and Tensor.scaled_uniform(3, 3).shape == (3, 3)
  assert Tensor(A).rand_like().shape == A.shape and Tensor(A).randn_like(dtype=dtypes.float16).dtype == dtypes.float16

def test_core_methods():
  t = Tensor(A)
  assert t.shape == (3, 4, 5) and t.ndim == 3 and t.numel() == 60 and t.nbytes() == 240 and t.size(1) == 4
  assert t.tolist() == A.tolist() and Tensor([[2.5]]).item() == 2.5 and Tensor(7).item() == 7
  c = t.permute(2, 0, 1).contiguous()
  sched = c.schedule()
  assert len(sched) == 1
  run_schedule(sched)  # schedule() hands the kernels over: the caller runs them
  assert_close(c, A.transpose(2, 0, 1))
  assert c.lazydata.is_realized
  b = Tensor(rand(2, 2)).realize()
  buf = b.lazydata.base.buffer
  b.assign(b * 2 + 1).realize()  # in place
  assert b.lazydata.base.buffer is buf
  assert_close(b, rand(2, 2) * 2 + 1, atol=1e-6)
  b += 1
  assert_close(b.realize(), rand(2, 2) * 2 + 2, atol=1e-6)
  assert t.detach().requires_grad is False and t.is_floating_point() and not Tensor([1]).is_floating_point()

def test_full_like_zeros_like():
  t = Tensor(rand(2, 3, dtype=np.int32))
  assert_close(t.zeros_like(), np.zeros((2, 3), np.int32), dtype=np.int32)
  assert_close(t.full_like(2.5, dtype=dtypes.float32), np.full((2, 3), 2.5, np.float32))

# *** reductions ***

AXES = [None, 0, 1, -1, (0, 2), (-1, -2)]

@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("op", ["sum", "max", "min", "mean", "prod"])
def test_reduce_float(op, axis, keepdim):
  got = getattr(Tensor(A), op)(axis=axis, keepdim=keepdim)
  want = getattr(np, {"sum": "sum", "max": "max", "min": "min", "mean": "mean", "prod": "prod"}[op])(A, axis=axis, keepdims=keepdim)
  assert_close(got, want, atol=1e-5, rtol=1e-4, dtype=np.float32)

@pytest.mark.parametrize("axis", [None, 0, -1, (0, 1)])
@pytest.mark.parametrize("correction", [0, 1])
def test_var_std(axis, correction):
  assert_close(Tensor(A).var(axis=axis, correction=correction), np.var(A, axis=axis, ddof=correction), atol=1e-5, rtol=1e-4)
  assert_close(Tensor(A).std(axis=axis, keepdim=True, correction=correction), np.std(A, axis=axis, ddof=correction, keepdims=True),
               atol=1e-5, rtol=1e-4)
  v, m = Tensor(A).var_mean(axis=axis, correction=correction)
  assert_close(m, np.mean(A, axis=axis), atol=1e-6)

def test_reduce_int_bool_half_dtypes():
  ai = rand(3, 4, dtype=np.int8, low=-5, high=5)
  assert_close(Tensor(ai).sum(), np.sum(ai.astype(np.int32)), dtype=np.int32)  # small ints sum in int32 like tinygrad
  assert_close(Tensor(ai).max(axis=1), ai.max(axis=1), dtype=np.int8)
  assert_close(Tensor(ai).min(axis=0), ai.min(axis=0), dtype=np.int8)
  assert_close(Tensor(ai).mean(), np.float32(ai.mean()), dtype=np.float32)
  ab = rand(3, 4, dtype=np.bool_)
  assert_close(Tensor(ab).sum(axis=1), ab.sum(axis=1).astype(np.int32), dtype=np.int32)
  assert_close(Tensor(ab).max(axis=0), ab.max(axis=0), dtype=np.bool_)
  ah = rand(4, 6, dtype=np.float16)
  assert_close(Tensor(ah).sum(axis=1), ah.astype(np.float32).sum(axis=1).astype(np.float16), atol=1e-2, dtype=np.float16)
  au = rand(3, 4, dtype=np.uint8, low=0, high=200)
  assert_close(Tensor(au).sum(), np.uint32(au.astype(np.uint32).sum()), dtype=np.uint32)
  assert_close(Tensor(au).min(axis=1), au.min(axis=1), dtype=np.uint8)

@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_argmin(axis, keepdim):
  got = Tensor(A).argmax(axis=axis, keepdim=keepdim)
  want = np.argmax(A, axis=axis, keepdims=keepdim)
  assert_close(got, want.astype(np.int32), dtype=np.int32)
  assert_close(Tensor(A).argmin(axis=axis, keepdim=keepdim), np.argmin(A, axis=axis, keepdims=keepdim).astype(np.int32))

def test_argmax_ties_int_bool():
  x = np.array([[1, 5, 5, 0], [7, 7, 7, 7], [-3, -9, -3, -9]], dtype=np.int32)
  assert_close(Tensor(x).argmax(1), np.argmax(x, 1).astype(np.int32))  # first occurrence wins
  assert_close(Tensor(x).argmin(1), np.argmin(x, 1).astype(np.int32))
  b = np.array([[False, True, True], [False, False, False]])
  assert_close(Tensor(b).argmax(1), np.argmax(b, 1).astype(np.int32))
  assert_close(Tensor(b).argmin(-1), np.argmin(b, -1).astype(np.int32))
  assert_close(Tensor(x.astype(np.uint8)).argmin(0), np.argmin(x.astype(np.uint8), 0).astype(np.int32))

def _np_softmax(x, axis):
  e = np.exp(x - x.max(axis=axis, keepdims=True))
  return e / e.sum(axis=axis, keepdims=True)

@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_log_softmax(axis):
  assert_close(Tensor(A).softmax(axis), _np_softmax(A, axis), atol=1e-6)
  assert_close(Tensor(A).log_softmax(axis), np.log(_np_softmax(A, axis)), atol=1e-5)
  big = A * 100  # no overflow thanks to the max shift
  assert_close(Tensor(big).softmax(axis), _np_softmax(big, axis), atol=1e-6)

def test_softmax_dtype_and_int_input():
  assert Tensor(A).softmax(dtype=dtypes.float16).dtype == dtypes.float16
  xi = np.array([[1, 2, 3]], dtype=np.int32)
  assert_close(Tensor(xi).softmax(), _np_softmax(xi.astype(np.float32), -1), atol=1e-6, dtype=np.float32)

@pytest.mark.parametrize("axis", [None, 0, -1, (1, 2)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_logsumexp(axis, keepdim):
  m = A.max(axis=axis, keepdims=True)
  want = np.log(np.exp(A - m).sum(axis=axis, keepdims=True)) + m
  if not keepdim: want = np.squeeze(want, axis=axis) if axis is not None else want.reshape(())
  assert_close(Tensor(A).logsumexp(axis, keepdim), want, atol=1e-5)

def test_logsumexp_infinities():
  x = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [1000.0, 1000.0]], dtype=np.float32)
  assert_close(Tensor(x).logsumexp(1), np.array([-np.inf, np.inf, 1000 + np.log(2)], dtype=np.float32), atol=1e-3)

def test_logcumsumexp():
  x = rand(3, 4)
  assert_close(Tensor(x).logcumsumexp(1), np.log(np.cumsum(np.exp(x), axis=1)), atol=1e-5)

@pytest.mark.parametrize("axis", [None, 0, -1])
def test_any_all(axis):
  b = rand(3, 4, dtype=np.bool_, seed=2)
  assert_close(Tensor(b).any(axis), np.any(b, axis=axis), dtype=np.bool_)
  assert_close(Tensor(b).all(axis, keepdim=True), np.all(b, axis=axis, keepdims=True), dtype=np.bool_)
  f = np.array([[0.0, 0.5], [0.0, 0.0]], dtype=np.float32)
  assert_close(Tensor(f).any(axis), np.any(f, axis=axis))
  assert_close(Tensor(f).all(axis), np.all(f, axis=axis))

def test_cumsum():
  assert_close(Tensor(A).cumsum(1), np.cumsum(A, 1), atol=1e-5)
  assert_close(Tensor(A).cumsum(-1), np.cumsum(A, -1), atol=1e-5)
  ai = rand(5, dtype=np.int32, low=-3, high=3)
  assert_close(Tensor(ai).cumsum(), np.cumsum(ai).astype(np.int32))

# *** elementwise ***

POS = rand(3, 4, low=0.1, high=3.0, seed=1)
UNARY = [
  ("neg", lambda t: -t, lambda a: -a, A), ("exp", Tensor.exp, np.exp, A), ("log", Tensor.log, np.log, POS),
  ("log2", Tensor.log2, np.log2, POS), ("exp2", Tensor.exp2, np.exp2, A), ("sqrt", Tensor.sqrt, np.sqrt, POS),
  ("rsqrt", Tensor.rsqrt, lambda a: 1 / np.sqrt(a), POS), ("sin", Tensor.sin, np.sin, A), ("cos", Tensor.cos, np.cos, A),
  ("tan", Tensor.tan, np.tan, A * 0.5), ("reciprocal", Tensor.reciprocal, lambda a: 1 / a, POS), ("square", Tensor.square, np.square, A),
  ("sign", Tensor.sign, np.sign, A), ("abs", Tensor.abs, np.abs, A), ("trunc", Tensor.trunc, np.trunc, A * 3),
  ("floor", Tensor.floor, np.floor, A * 3), ("ceil", Tensor.ceil, np.ceil, A * 3),
  ("round", Tensor.round, np.round, np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 1.4, -1.6], np.float32)),
  ("sigmoid", Tensor.sigmoid, lambda a: 1 / (1 + np.exp(-a)), A), ("tanh", Tensor.tanh, np.tanh, A),
  ("relu", Tensor.relu, lambda a: np.maximum(a, 0), A),
  ("relu6", Tensor.relu6, lambda a: np.clip(a, 0, 6), A * 4),
  ("leakyrelu", Tensor.leakyrelu, lambda a: np.where(a > 0, a, 0.01 * a), A),
  ("elu", Tensor.elu, lambda a: np.where(a > 0, a, np.exp(a) - 1), A),
  ("celu", Tensor.celu, lambda a: np.maximum(a, 0) + np.minimum(0, np.exp(a) - 1), A),
  ("gelu", Tensor.gelu, lambda a: 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a ** 3))), A),
  ("quick_gelu", Tensor.quick_gelu, lambda a: a / (1 + np.exp(-1.702 * a)), A),
  ("silu", Tensor.silu, lambda a: a / (1 + np.exp(-a)), A), ("swish", Tensor.swish, lambda a: a / (1 + np.exp(-a)), A),
  ("hardswish", Tensor.hardswish, lambda a: a * np.clip(a + 3, 0, 6) / 6, A * 2),
  ("hardsigmoid", Tensor.hardsigmoid, lambda a: np.clip(a / 6 + 0.5, 0, 1), A * 2),
  ("hardtanh", Tensor.hardtanh, lambda a: np.clip(a, -1, 1), A),
  ("softplus", Tensor.softplus, lambda a: np.log1p(np.exp(a)), A),
  ("mish", Tensor.mish, lambda a: a * np.tanh(np.log1p(np.exp(a))), A),
  ("softsign", Tensor.softsign, lambda a: a / (1 + np.abs(a)), A),
  ("isnan", Tensor.isnan, np.isnan, np.array([1.0, np.nan, np.inf], np.float32)),
  ("isinf", Tensor.isinf, np.isinf, np.array([1.0, np.nan, np.inf, -np.inf], np.float32)),
]

@pytest.mark.parametrize("name,tf,nf,x", UNARY, ids=[u[0] for u in UNARY])
def test_unary(name, tf, nf, x):
  got = tf(Tensor(x))
  want = nf(x)
  assert_close(got, want, atol=1e-5, rtol=1e-4)
  assert got.dtype == (dtypes.bool if want.dtype == np.bool_ else dtypes.float32)

def test_unary_int_inputs_become_float():
  xi = np.array([1, 4, 9], dtype=np.int32)
  assert_close(Tensor(xi).sqrt(), np.sqrt(xi).astype(np.float32), dtype=np.float32)
  assert_close(Tensor(xi).exp(), np.exp(xi).astype(np.float32), rtol=1e-5, dtype=np.float32)
  assert_close(Tensor(xi).log(), np.log(xi).astype(np.float32), dtype=np.float32)
  assert_close(Tensor(xi).abs(), np.abs(xi), dtype=np.int32)
  assert_close(-Tensor(xi), -xi, dtype=np.int32)
  assert_close(Tensor(xi).relu(), xi, dtype=np.int32)

def test_unary_half():
  h = rand(4, 3, dtype=np.float16)
  for tf, nf in [(Tensor.exp, np.exp), (Tensor.sigmoid, lambda a: 1 / (1 + np.exp(-a))), (Tensor.relu, lambda a: np.maximum(a, 0))]:
    got = tf(Tensor(h))
    assert got.dtype == dtypes.float16
    assert_close(got, nf(h.astype(np.float32)), atol=1e-2, rtol=1e-2)

def test_clip_lerp_where():
  assert_close(Tensor(A).clip(-0.5, 0.5), np.clip(A, -0.5, 0.5))
  assert_close(Tensor(A).clamp(min_=0), np.clip(A, 0, None))
  assert_close(Tensor(A).clip(max_=0.1), np.clip(A, None, 0.1))
  b = rand(3, 4, 5, seed=5)
  assert_close(Tensor(A).lerp(Tensor(b), 0.25), A + (b - A) * 0.25, atol=1e-6)
  cond = A > 0
  assert_close(Tensor(cond).where(Tensor(A), Tensor(b)), np.where(cond, A, b))
  assert_close(Tensor(cond).where(1.0, Tensor(b)), np.where(cond, 1.0, b))
  assert_close(Tensor(cond).where(Tensor(A), 0), np.where(cond, A, 0))
  assert_close(Tensor(cond[0, 0]).where(3, 4), np.where(cond[0, 0], 3, 4).astype(np.int32), dtype=np.int32)  # broadcast cond
  assert_close((Tensor(A) > 0).where(2, 1.5), np.where(A > 0, 2, 1.5).astype(np.float32), dtype=np.float32)
  assert_close(Tensor(A).masked_fill(Tensor(cond), -1.0), np.where(cond, -1.0, A))

BIN_A, BIN_B = rand(3, 1, 5, seed=3), rand(4, 1, seed=4, low=0.5, high=2.0)
BINARY = [("add", lambda a, b: a + b), ("sub", lambda a, b: a - b), ("mul", lambda a, b: a * b), ("div", lambda a, b: a / b),
          ("pow", lambda a, b: abs(a) ** b), ("maximum", None), ("minimum", None)]

@pytest.mark.parametrize("name,f", BINARY, ids=[b[0] for b in BINARY])
def test_binary_broadcast(name, f):
  if f is None:
    got, want = getattr(Tensor(BIN_A), name)(Tensor(BIN_B)), getattr(np, name)(BIN_A, BIN_B)
  else: got, want = f(Tensor(BIN_A), Tensor(BIN_B)), f(BIN_A, BIN_B)
  assert got.shape == (3, 4, 5)
  assert_close(got, want, atol=1e-5, rtol=1e-5)

@pytest.mark.parametrize("scalar", [2, 0.5, -3])
def test_binary_python_scalars_both_sides(scalar):
  t = Tensor(BIN_B)
  for got, want in [(t + scalar, BIN_B + scalar), (scalar + t, scalar + BIN_B), (t - scalar, BIN_B - scalar), (scalar - t, scalar - BIN_B),
                    (t * scalar, BIN_B * scalar), (scalar * t, scalar * BIN_B), (t / scalar, BIN_B / scalar), (scalar / t, scalar / BIN_B),
                    (t ** scalar, BIN_B ** scalar), (scalar ** t if scalar > 0 else t, scalar ** BIN_B if scalar > 0 else BIN_B)]:
    assert got.dtype == dtypes.float32
    assert_close(got, want.astype(np.float32), atol=1e-5, rtol=1e-5)

def test_pow_edge_cases():
  x = np.array([-2.0, -0.5, 0.0, 0.5, 2.0], np.float32)
  assert_close(Tensor(x) ** 3, x ** 3)
  assert_close(Tensor(x) ** 3.0, x ** 3.0, atol=1e-5)
  with np.errstate(divide="ignore"): assert_close(Tensor(x) ** -2.0, (x ** -2.0), rtol=1e-5)
  e = np.array([2.0, 3.0, 0.0, 0.5, -1.0], np.float32)
  assert_close(Tensor(x) ** Tensor(e), x ** e, rtol=1e-5)
  with np.errstate(invalid="ignore"): assert_close(Tensor(x) ** 0.5, x ** 0.5)
  xi = np.array([1, 2, 3], np.int32)
  assert_close(Tensor(xi) ** 2, xi ** 2, dtype=np.int32)
  assert_close(2 ** Tensor(xi), 2 ** xi, dtype=np.int32)
  assert_close(Tensor(xi) ** Tensor(xi), xi ** xi, dtype=np.int32)

def test_int_division_and_mod_match_python():
  a = np.array([7, -7, 7, -7, 0, 5], np.int32)
  b = np.array([2, 2, -2, -2, 3, 5], np.int32)
  assert_close(Tensor(a) // Tensor(b), a // b, dtype=np.int32)
  assert_close(Tensor(a) % Tensor(b), a % b, dtype=np.int32)
  assert_close(Tensor(a).idiv(Tensor(b)), np.trunc(a / b).astype(np.int32), dtype=np.int32)
  assert_close(Tensor(a).div(Tensor(b), rounding_mode="trunc"), np.trunc(a / b).astype(np.int32))
  assert_close(Tensor(a).div(Tensor(b), rounding_mode="floor"), a // b)
  assert_close(Tensor(a) / Tensor(b), (a / b).astype(np.float32), dtype=np.float32)  # true division of ints is float
  f = rand(5, seed=9) * 3
  assert_close(Tensor(f) % 1.5, np.mod(f, 1.5), atol=1e-5)
  assert_close(Tensor(f) // 0.7, np.floor_divide(f, 0.7).astype(np.float32), atol=1e-5)

@pytest.mark.parametrize("a_dt,b_dt,out", [
  (np.int32, np.float32, np.float32), (np.bool_, np.int32, np.int32), (np.int8, np.uint8, np.int16), (np.float16, np.float32, np.float32),
  (np.int64, np.float16, np.float16), (np.uint32, np.int32, np.int64), (np.bool_, np.bool_, np.bool_), (np.int16, np.int32, np.int32)])
def test_dtype_promotion(a_dt, b_dt, out):
  a, b = rand(2, 3, dtype=a_dt, low=0, high=4, seed=1), rand(2, 3, dtype=b_dt, low=0, high=4, seed=2)
  got = Tensor(a) + Tensor(b)
  assert got.dtype.np == np.dtype(out)
  want = (a.astype(np.float64) + b.astype(np.float64)) if out != np.bool_ else (a | b)
  assert_close(got, want.astype(out), atol=1e-2)

def test_python_scalar_keeps_tensor_dtype():
  assert (Tensor([1, 2], dtype=dtypes.int8) + 1).dtype == dtypes.int8
  assert (Tensor([1, 2], dtype=dtypes.float16) * 2.5).dtype == dtypes.float16
  assert (Tensor([1, 2]) * 2.5).dtype == dtypes.float32  # int * float scalar -> float
  assert (Tensor([True, False]) + 1).dtype == dtypes.int32
  assert (Tensor([True, False]) & True).dtype == dtypes.bool

def test_comparisons():
  a, b = rand(3, 4, dtype=np.int32, low=0, high=3, seed=1), rand(3, 4, dtype=np.int32, low=0, high=3, seed=2)
  for got, want in [(Tensor(a) < Tensor(b), a < b), (Tensor(a) <= Tensor(b), a <= b), (Tensor(a) > Tensor(b), a > b),
                    (Tensor(a) >= Tensor(b), a >= b), (Tensor(a) == Tensor(b), a == b), (Tensor(a) != Tensor(b), a != b),
                    (Tensor(a) < 1, a < 1), (1 < Tensor(a), 1 < a), (Tensor(a).eq(2), a == 2), (Tensor(a).ne(2), a != 2)]:
    assert_close(got, want, dtype=np.bool_)
  assert_close(Tensor(A) > Tensor(BIN_A[:, :, :5].reshape(3, 1, 5)), A > BIN_A.reshape(3, 1, 5))

def test_bitwise_and_shifts():
  a, b = np.array([0b1100, 7, -1], np.int32), np.array([0b1010, 2, 5], np.int32)
  assert_close(Tensor(a) & Tensor(b), a & b)
  assert_close(Tensor(a) | Tensor(b), a | b)
  assert_close(Tensor(a) ^ Tensor(b), a ^ b)
  assert_close(~Tensor(a), ~a)
  assert_close(~Tensor(np.array([1, 200], np.uint8)), ~np.array([1, 200], np.uint8))
  assert_close(Tensor(a[:2]) << 2, a[:2] << 2)
  assert_close(Tensor(a[:2]) >> 1, a[:2] >> 1)
  bb = np.array([True, False, True])
  assert_close(~Tensor(bb), ~bb)
  assert_close(Tensor(bb) & Tensor(~bb), bb & ~bb)
  assert_close(Tensor(bb).logical_not(), ~bb)

def test_casts():
  f = np.array([-1.7, 0.2, 2.9, 300.0], np.float32)
  assert_close(Tensor(f).cast(dtypes.int32), f.astype(np.int32), dtype=np.int32)
  assert_close(Tensor(f).half(), f.astype(np.float16), dtype=np.float16)
  assert_close(Tensor(f).bool(), f.astype(bool), dtype=np.bool_)
  assert_close(Tensor(f).cast("float64"), f.astype(np.float64), dtype=np.float64)
  assert_close(Tensor(f).bitcast(dtypes.uint32), f.view(np.uint32), dtype=np.uint32)
  assert_close(Tensor([1, 0, 3]).float(), np.array([1, 0, 3], np.float32), dtype=np.float32)

# *** movement ***

def test_movement_ops():
  t = Tensor(A)
  assert_close(t.reshape(4, -1), A.reshape(4, -1))
  assert_close(t.reshape((5, 12)), A.reshape(5, 12))
  assert_close(t.permute(2, 0, 1), A.transpose(2, 0, 1))
  assert_close(t.permute((-1, 0, 1)), A.transpose(2, 0, 1))
  assert_close(t.transpose(), A.swapaxes(1, 0))
  assert_close(t.transpose(-1, 0), A.swapaxes(-1, 0))
  assert_close(Tensor(BIN_B).expand(2, 4, 3), np.broadcast_to(BIN_B, (2, 4, 3)))
  assert_close(Tensor(BIN_B).expand(-1, 6), np.broadcast_to(BIN_B, (4, 6)))
  assert_close(t.flip(0), A[::-1])
  assert_close(t.flip((0, -1)), A[::-1, :, ::-1])
  assert_close(t.shrink(((1, 3), None, (0, 2))), A[1:3, :, 0:2])
  assert_close(t.flatten(), A.reshape(-1))
  assert_close(t.flatten(1), A.reshape(3, -1))
  assert_close(t.flatten(0, 1), A.reshape(12, 5))
  assert_close(t.reshape(3, 1, 4, 5).squeeze(1), A)
  assert_close(t.reshape(1, 3, 1, 4, 5).squeeze(), A)
  assert_close(t.squeeze(0), A)  # a dim that is not 1 stays
  assert_close(t.unsqueeze(0), A[None])
  assert_close(t.unsqueeze(-1), A[..., None])
  assert_close(t.unflatten(1, (2, 2)), A.reshape(3, 2, 2, 5))
  assert_close(t.T, A.swapaxes(0, 1))  # tinygrad's T swaps dims 1 and 0
  assert_close(Tensor(A[0]).T, A[0].T)

def test_pad():
  x = rand(2, 3)
  assert_close(Tensor(x).pad(((1, 0), (2, 1))), np.pad(x, ((1, 0), (2, 1))))
  assert_close(Tensor(x).pad((1, 2)), np.pad(x, ((0, 0), (1, 2))))  # flat, last dim first
  assert_close(Tensor(x).pad((1, 2, 0, 1)), np.pad(x, ((0, 1), (1, 2))))
  assert_close(Tensor(x).pad((None, (1, 1)), value=-5.0), np.pad(x, ((0, 0), (1, 1)), constant_values=-5.0))
  assert_close(Tensor(x).pad2d((1, 1, 1, 0), value=2.0), np.pad(x, ((1, 0), (1, 1)), constant_values=2.0))
  assert_close(Tensor(x).pad(((0, 0), (-1, 1))), np.pad(x[:, 1:], ((0, 0), (0, 1))))  # negative pad crops
  xi = rand(2, 2, dtype=np.int8)
  assert_close(Tensor(xi).pad(((1, 1), (0, 0)), value=-128), np.pad(xi, ((1, 1), (0, 0)), constant_values=-128), dtype=np.int8)
  xh = rand(2, 2, dtype=np.float16)
  assert Tensor(xh).pad(((1, 1), (0, 0)), value=float("-inf")).dtype == dtypes.float16

# *** indexing ***

IDX = [1, -1, (1, 2), (slice(None), 2), (Ellipsis, 1), (None, 1, None), (slice(None, None, 2),), (slice(None, None, -1),),
       (slice(3, 0, -2), slice(None), slice(None, None, -3)), (Ellipsis, None), (1, Ellipsis, 2), (slice(-2, None), slice(1, -1, 2)),
       (slice(5, 10),), (slice(None), slice(None), slice(4, 1)), (0, 0, 0), (-3, None, slice(None, None, 3), Ellipsis)]

@pytest.mark.parametrize("idx", IDX, ids=[repr(i) for i in IDX])
def test_getitem_basic(idx):
  got = Tensor(A)[idx]
  assert_close(got, A[idx])

ADV = [([0, 2],), (slice(None), [3, 1]), ([0, 2], [1, 3]), ("ii",), (slice(None), "ii"), ("ii", slice(None), [0, 4]), (1, "ii"),
       (slice(None), "ii", "ii"), (Ellipsis, [-1, 0]), ([[0], [2]], slice(1, 3), [0, 1, 4]), (slice(None, None, -1), [2, 0])]

@pytest.mark.parametrize("idx", ADV, ids=[repr(i) for i in ADV])
def test_getitem_advanced(idx):
  ii = np.array([[0, 2], [1, 1]])
  np_idx = tuple(ii if isinstance(i, str) else (np.array(i) if isinstance(i, list) else i) for i in idx)
  t_idx = tuple(Tensor(ii) if isinstance(i, str) else (Tensor(i) if isinstance(i, list) else i) for i in idx)
  assert_close(Tensor(A)[t_idx], A[np_idx])
  # python lists work as tensors too
  l_idx = tuple(ii.tolist() if isinstance(i, str) else i for i in idx)
  assert_close(Tensor(A)[l_idx], A[np_idx])

def test_getitem_dtypes_and_inf():
  xi = rand(4, 3, dtype=np.int8)
  assert_close(Tensor(xi)[Tensor([3, 0])], xi[[3, 0]], dtype=np.int8)
  xb = rand(4, 3, dtype=np.bool_)
  assert_close(Tensor(xb)[:, Tensor([2, 2])], xb[:, [2, 2]], dtype=np.bool_)
  xf = np.array([np.inf, -np.inf, np.nan, 1.0], np.float32)
  assert_close(Tensor(xf)[Tensor([3, 0, 1])], xf[[3, 0, 1]])  # a masked gather must not turn inf into nan
  assert_close(Tensor(xf)[Tensor([[2]])], xf[[[2]]])

def test_iter_and_len():
  assert len(Tensor(A)) == 3
  rows = list(Tensor(A))
  assert len(rows) == 3 and rows[1].shape == (4, 5)
  assert_close(rows[2], A[2])

def test_setitem():
  base = rand(3, 4)
  for idx, v in [(1, 5.0), ((slice(None), 2), np.array([1.0, 2.0, 3.0], np.float32)), ((slice(0, 2), slice(1, None, 2)), -1.0),
                 ((Ellipsis, -1), 7.0), ((Tensor([0, 2]),), 9.0)]:
    t = Tensor(base.copy()).realize()
    buf = t.lazydata.base.buffer
    t[idx] = Tensor(v) if isinstance(v, np.ndarray) else v
    want = base.copy()
    want[(np.array([0, 2]),) if isinstance(idx, tuple) and isinstance(idx[0], Tensor) else idx] = v
    assert_close(t, want)
    assert t.lazydata.base.buffer is buf  # written in place
  t = Tensor(base.copy()).realize()
  t[Tensor([1, 1]), Tensor([0, 0])] = Tensor([3.0, 4.0])  # last write wins, like numpy
  want = base.copy(); want[[1, 1], [0, 0]] = [3.0, 4.0]
  assert_close(t, want)
  ti = Tensor(np.arange(6, dtype=np.int32)).realize()
  ti[2:4] = 0
  assert_close(ti, np.array([0, 1, 0, 0, 4, 5], np.int32), dtype=np.int32)

def test_setitem_errors():
  t = Tensor(rand(3, 4), requires_grad=True)
  with pytest.raises(RuntimeError, match="requires grad"): t[0] = 1.0
  t = Tensor(rand(3, 4))
  with pytest.raises(ValueError, match=r"\(2,\).*\(4,\)"): t[0] = Tensor([1.0, 2.0])

def test_getitem_with_bound_variable():
  from tinysched import Variable
  t = Tensor(A).realize()
  v = Variable("start_pos", 0, 2).bind(1)
  assert_close((t[v] * 1).contiguous(), A[1])
  assert_close(t[0:v + 1].sum(0), A[0:2].sum(0), atol=1e-6)
  assert t[:, 0:v].shape[1] is not None and t[:, 0:v].shape[0] == 3

def test_softplus_large_values():
  x = np.array([-100.0, -1.0, 0.0, 1.0, 100.0], np.float32)
  assert_close(Tensor(x).softplus(), np.logaddexp(0, x), atol=1e-6)
  assert_close(Tensor(x).softplus(beta=2.0), np.logaddexp(0, 2 * x) / 2, atol=1e-6)

def test_getitem_errors():
  t = Tensor(A)
  with pytest.raises(IndexError, match=r"index 3 is out of bounds for dimension 0 with size 3"): t[3]
  with pytest.raises(IndexError, match=r"index -6 is out of bounds for dimension 1"): t[:, -6]
  with pytest.raises(IndexError, match="too many indices"): t[0, 0, 0, 0]
  with pytest.raises(IndexError, match="single ellipsis"): t[..., 0, ...]
  with pytest.raises(IndexError, match="int tensors"): t[Tensor([0.5])]
  with pytest.raises(TypeError, match="invalid index"): t["a"]
  with pytest.raises(ValueError, match="step cannot be zero"): t[::0]

# *** combining ***

def test_cat_stack():
  a, b, c = rand(2, 3, seed=1), rand(4, 3, seed=2), rand(1, 3, seed=3)
  assert_close(Tensor(a).cat(Tensor(b), Tensor(c)), np.concatenate([a, b, c]))
  assert_close(Tensor.cat(Tensor(a.T), Tensor(b.T), dim=-1), np.concatenate([a.T, b.T], -1))
  assert_close(Tensor(a).cat(Tensor(a), dim=1), np.concatenate([a, a], 1))
  ci = Tensor([[1, 2]]).cat(Tensor([[3.5, 4.0]]))
  assert ci.dtype == dtypes.float32 and ci.tolist() == [[1, 2], [3.5, 4.0]]
  bb = Tensor([True]).cat(Tensor([False, True]))
  assert bb.dtype == dtypes.bool and bb.tolist() == [True, False, True]
  assert_close(Tensor(a).stack(Tensor(a * 2), dim=0), np.stack([a, a * 2]))
  assert_close(Tensor.stack(Tensor(a), Tensor(a * 2), dim=-1), np.stack([a, a * 2], -1))
  assert_close(Tensor.stack(Tensor(a), Tensor(a), Tensor(a), dim=1), np.stack([a, a, a], 1))
  with pytest.raises(ValueError, match=r"\(2, 3\).*\(2, 4\)"): Tensor(a).cat(Tensor(rand(2, 4)))
  with pytest.raises(ValueError, match="stack needs tensors of one shape"): Tensor(a).stack(Tensor(b))

def test_repeat_split_chunk():
  x = rand(2, 3)
  assert_close(Tensor(x).repeat(2, 3), np.tile(x, (2, 3)))
  assert_close(Tensor(x).repeat((2, 1, 2)), np.tile(x, (2, 1, 2)))
  assert_close(Tensor(x).repeat_interleave(2, dim=1), np.repeat(x, 2, axis=1))
  assert_close(Tensor(x).repeat_interleave(2), np.repeat(x, 2))
  y = rand(7, 2)
  parts = Tensor(y).split(3)
  assert [p.shape for p in parts] == [(3, 2), (3, 2), (1, 2)]
  assert_close(parts[2], y[6:])
  parts = Tensor(y).split([1, 4, 2], dim=0)
  assert_close(parts[1], y[1:5])
  assert [p.shape for p in Tensor(y).chunk(3)] == [(3, 2), (3, 2), (1, 2)]
  assert [p.shape for p in Tensor(y).chunk(2, dim=-1)] == [(7, 1), (7, 1)]
  with pytest.raises(ValueError, match=r"sum to 5.*has 7"): Tensor(y).split([1, 4])
  with pytest.raises(ValueError, match="repeat"): Tensor(x).repeat(2)

def test_gather():
  x = rand(3, 4)
  idx = np.array([[0, 0], [1, 0], [3, 2]])
  assert_close(Tensor(x).gather(1, Tensor(idx)), np.take_along_axis(x, idx, 1))
  idx0 = np.array([[2, 0, 1, 1], [0, 0, 0, 2]])
  assert_close(Tensor(x).gather(0, Tensor(idx0)), np.take_along_axis(x, idx0, 0))
  # the index may be smaller than self outside dim (torch semantics)
  assert_close(Tensor(x).gather(-1, Tensor(idx[:2])), np.take_along_axis(x[:2], idx[:2], -1))
  xi = rand(3, 4, dtype=np.int32)
  assert_close(Tensor(xi).gather(1, Tensor(idx)), np.take_along_axis(xi, idx, 1), dtype=np.int32)
  with pytest.raises(TypeError, match="int tensor"): Tensor(x).gather(1, Tensor(idx.astype(np.float32)))
  with pytest.raises(ValueError, match="dims"): Tensor(x).gather(1, Tensor([0, 1]))

def test_triu_tril_one_hot_roll():
  x = rand(2, 3, 4)
  for d in (-1, 0, 1, 2):
    assert_close(Tensor(x).triu(d), np.triu(x, d))
    assert_close(Tensor(x).tril(d), np.tril(x, d))
  xi = rand(3, 3, dtype=np.int32)
  assert_close(Tensor(xi).triu(), np.triu(xi), dtype=np.int32)
  y = np.array([[0, 2], [1, 3]], np.int32)
  assert_close(Tensor(y).one_hot(4), np.eye(4, dtype=np.int32)[y], dtype=np.int32)
  assert_close(Tensor(y).one_hot(), np.eye(4, dtype=np.int32)[y])
  assert_close(Tensor(x).roll(1, -1), np.roll(x, 1, -1))
  assert_close(Tensor(x).roll((-1, 2), (0, 1)), np.roll(x, (-1, 2), (0, 1)))
  with pytest.raises(TypeError, match="int tensor"): Tensor([0.5]).one_hot(3)

# *** linear algebra ***

@pytest.mark.parametrize("sa,sb", [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)),
                                   ((5, 2, 3), (5, 3, 4)), ((1, 2, 3), (4, 3, 2)), ((2, 1, 2, 3), (3, 3, 2))])
def test_matmul_shapes(sa, sb):
  a, b = rand(*sa, seed=1), rand(*sb, seed=2)
  assert_close(Tensor(a) @ Tensor(b), a @ b, atol=1e-5)
  assert_close(Tensor(a).dot(Tensor(b)), np.matmul(a, b), atol=1e-5)

def test_matmul_dtypes_and_linear():
  a, b = rand(2, 3, dtype=np.int32, seed=1), rand(3, 2, dtype=np.int32, seed=2)
  assert_close(Tensor(a) @ Tensor(b), a @ b, dtype=np.int32)
  ah, bh = rand(2, 3, dtype=np.float16), rand(3, 2, dtype=np.float16)
  got = Tensor(ah) @ Tensor(bh)
  assert got.dtype == dtypes.float16
  assert_close(got, ah.astype(np.float32) @ bh.astype(np.float32), atol=2e-2)
  assert (Tensor(ah).matmul(Tensor(bh), acc_dtype=dtypes.float32)).dtype == dtypes.float32
  x, w, bias = rand(4, 3), rand(3, 2), rand(2)
  assert_close(Tensor(x).linear(Tensor(w), Tensor(bias)), x @ w + bias, atol=1e-5)
  with pytest.raises(ValueError, match=r"\(2, 3\) and \(4, 2\)"): Tensor(rand(2, 3)) @ Tensor(rand(4, 2))
  with pytest.raises(ValueError, match="at least 1 dimension"): Tensor(2.0) @ Tensor(rand(2))

# *** convolution and pooling (numpy references) ***

def np_conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
  sh, sw = (stride, stride) if isinstance(stride, int) else stride
  ph, pw = (padding, padding) if isinstance(padding, int) else padding
  dh, dw = (dilation, dilation) if isinstance(dilation, int) else dilation
  x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
  n, cin, h, wd = x.shape
  cout, cpg, kh, kw = w.shape
  oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (wd - dw * (kw - 1) - 1) // sw + 1
  out = np.zeros((n, cout, oh, ow), np.float64)
  opg = cout // groups
  for o in range(cout):
    g = o // opg
    xs = x[:, g * cpg:(g + 1) * cpg]
    for i in range(oh):
      for j in range(ow):
        patch = xs[:, :, i * sh:i * sh + dh * (kh - 1) + 1:dh, j * sw:j * sw + dw * (kw - 1) + 1:dw]
        out[:, o, i, j] = (patch * w[o]).sum(axis=(1, 2, 3))
  return out + (b.reshape(1, -1, 1, 1) if b is not None else 0)

CONV = [dict(), dict(stride=2), dict(padding=1), dict(padding=(1, 2)), dict(dilation=2, padding=2), dict(stride=(2, 1), padding=(0, 1)),
        dict(groups=2, padding=1)]

@pytest.mark.parametrize("kw", CONV, ids=[str(c) for c in CONV])
def test_conv2d_numpy(kw):
  g = kw.get("groups", 1)
  x, w, b = rand(2, 4, 6, 5, seed=1), rand(6, 4 // g, 3, 3, seed=2), rand(6, seed=3)
  assert_close(Tensor(x).conv2d(Tensor(w), Tensor(b), **kw), np_conv2d(x, w, b, **kw), atol=1e-4)

def test_conv2d_flat_padding_and_1d_3d():
  x, w = rand(1, 2, 5, 5), rand(3, 2, 3, 3)
  # flat form (left, right, top, bottom)
  assert_close(Tensor(x).conv2d(Tensor(w), padding=(1, 0, 2, 1)), np_conv2d(np.pad(x, ((0, 0), (0, 0), (2, 1), (1, 0))), w), atol=1e-4)
  x1, w1 = rand(2, 3, 7), rand(4, 3, 3)
  want1 = np_conv2d(x1[..., None], w1[..., None], padding=(1, 0))[..., 0]
  assert_close(Tensor(x1).conv2d(Tensor(w1), padding=1), want1, atol=1e-4)
  assert Tensor(rand(1, 2, 4, 4, 4)).conv2d(Tensor(rand(3, 2, 2, 2, 2))).shape == (1, 3, 3, 3, 3)

def test_conv2d_bias_relu_is_one_kernel():
  x, w, b = Tensor(rand(1, 3, 6, 6)).realize(), Tensor(rand(4, 3, 3, 3)).realize(), Tensor(rand(4)).realize()
  out = x.conv2d(w, b, padding=1).relu()
  sched = out.schedule()
  assert len(sched) == 1
  run_schedule(sched)  # schedule() hands the kernels to the caller: run them
  assert_close(out, np.maximum(np_conv2d(x.numpy(), w.numpy(), b.numpy(), padding=1), 0), atol=1e-4)

def test_conv2d_errors():
  with pytest.raises(ValueError, match=r"3 channels.*2 per group"): Tensor(rand(1, 3, 4, 4)).conv2d(Tensor(rand(2, 2, 3, 3)))
  with pytest.raises(ValueError, match="same number"): Tensor(rand(1, 3, 4, 4)).conv2d(Tensor(rand(2, 3, 3)))
  with pytest.raises(ValueError, match="padding"): Tensor(rand(1, 3, 4, 4)).conv2d(Tensor(rand(2, 3, 3, 3)), padding=(1, 1, 1))
  with pytest.raises(ValueError, match="larger than the input"): Tensor(rand(1, 1, 2, 2)).conv2d(Tensor(rand(1, 1, 3, 3)), dilation=2)

def np_pool(x, k, s, p, op, pad_value):
  x = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=pad_value)
  oh, ow = (x.shape[2] - k) // s + 1, (x.shape[3] - k) // s + 1
  out = np.zeros(x.shape[:2] + (oh, ow), np.float32)
  for i in range(oh):
    for j in range(ow): out[:, :, i, j] = op(x[:, :, i * s:i * s + k, j * s:j * s + k], axis=(2, 3))
  return out

@pytest.mark.parametrize("k,s,p", [(2, 2, 0), (3, 1, 0), (3, 2, 1), (2, 3, 0)])
def test_pools_numpy(k, s, p):
  x = rand(2, 3, 7, 6)
  assert_close(Tensor(x).max_pool2d(k, s, padding=p), np_pool(x, k, s, p, np.max, -np.inf))
  assert_close(Tensor(x).avg_pool2d(k, s, padding=p), np_pool(x, k, s, p, np.mean, 0.0), atol=1e-6)

def test_pool_defaults_and_int():
  x = rand(1, 2, 4, 6)
  assert_close(Tensor(x).max_pool2d(), np_pool(x, 2, 2, 0, np.max, 0))
  xi = rand(1, 1, 4, 4, dtype=np.int32, low=-50, high=-10)
  assert_close(Tensor(xi).max_pool2d(2, padding=1), np_pool(xi, 2, 2, 1, np.max, np.iinfo(np.int32).min).astype(np.int32), dtype=np.int32)
  x1 = rand(2, 3, 8)
  assert_close(Tensor(x1).max_pool1d(2), x1.reshape(2, 3, 4, 2).max(-1))
  assert_close(Tensor(x1).avg_pool1d(4), x1.reshape(2, 3, 2, 4).mean(-1), atol=1e-6)

# *** normalization, dropout, attention ***

def test_layernorm_batchnorm():
  x = rand(2, 3, 4)
  m, v = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  assert_close(Tensor(x).layernorm(), (x - m) / np.sqrt(v + 1e-5), atol=1e-5)
  m2, v2 = x.mean((1, 2), keepdims=True), x.var((1, 2), keepdims=True)
  assert_close(Tensor(x).layernorm(axis=(1, 2), eps=1e-3), (x - m2) / np.sqrt(v2 + 1e-3), atol=1e-5)
  w, b, mean, invstd = rand(3, seed=1), rand(3, seed=2), rand(3, seed=3), rand(3, seed=4, low=0.5)
  want = (x - mean[None, :, None]) * w[None, :, None] * invstd[None, :, None] + b[None, :, None]
  assert_close(Tensor(x).batchnorm(Tensor(w), Tensor(b), Tensor(mean), Tensor(invstd)), want, atol=1e-5)
  assert_close(Tensor(x).batchnorm(None, None, Tensor(mean), Tensor(invstd)), (x - mean[None, :, None]) * invstd[None, :, None], atol=1e-5)

def test_dropout():
  x = Tensor.ones(2000)
  assert Tensor.training is False
  assert x.dropout(0.5) is x  # identity outside training
  with Tensor.train():
    assert Tensor.training is True
    d = x.dropout(0.25).numpy()
    assert np.all(np.isclose(d, 0) | np.isclose(d, 1 / 0.75))
    assert 0.2 < (d == 0).mean() < 0.3
    assert x.dropout(0.0) is x
    assert (x.dropout(1.0).numpy() == 0).all()
  assert Tensor.training is False
  with pytest.raises(ValueError, match="probability"): x.dropout(1.5)

def test_train_test_contexts():
  @Tensor.train()
  def f(): return Tensor.training
  assert f() is True and Tensor.training is False
  with Tensor.train():
    with Tensor.train(False): assert Tensor.training is False
    assert Tensor.training is True
  with Tensor.test():
    assert Tensor.no_grad is True
    y = Tensor([1.0], requires_grad=True) * 2
    assert y._ctx is None  # no graph recorded
  assert Tensor.no_grad is False

def np_sdpa(q, k, v, mask=None):
  s = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
  if mask is not None: s = s + (np.where(mask, 0, -np.inf) if mask.dtype == np.bool_ else mask)
  return _np_softmax(s, -1) @ v

def test_scaled_dot_product_attention():
  q, k, v = rand(2, 3, 5, 4, seed=1), rand(2, 3, 6, 4, seed=2), rand(2, 3, 6, 4, seed=3)
  Q, K, V = Tensor(q), Tensor(k), Tensor(v)
  assert_close(Q.scaled_dot_product_attention(K, V), np_sdpa(q, k, v), atol=1e-5)
  bm = rand(5, 6, dtype=np.bool_, seed=4); bm[:, 0] = True
  assert_close(Q.scaled_dot_product_attention(K, V, attn_mask=Tensor(bm)), np_sdpa(q, k, v, bm), atol=1e-5)
  fm = rand(5, 6, seed=5)
  assert_close(Q.scaled_dot_product_attention(K, V, attn_mask=Tensor(fm)), np_sdpa(q, k, v, fm), atol=1e-5)
  qs = rand(2, 3, 6, 4, seed=6)
  assert_close(Tensor(qs).scaled_dot_product_attention(K, V, is_causal=True), np_sdpa(qs, k, v, np.tril(np.ones((6, 6), bool))), atol=1e-5)
  assert Q.scaled_dot_product_attention(K, V, dropout_p=0.5).shape == (2, 3, 5, 4)  # not training: no dropout
  assert_close(Q.scaled_dot_product_attention(K, V, dropout_p=0.5), np_sdpa(q, k, v), atol=1e-5)

# *** losses (numpy references) ***

def test_losses_numpy():
  logits, y = rand(6, 5, seed=1), np.array([0, 4, 2, 1, 3, 2], np.int32)
  logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  assert_close(Tensor(logits).sparse_categorical_crossentropy(Tensor(y)), -logp[np.arange(6), y].mean(), atol=1e-5)
  keep = y != 2
  assert_close(Tensor(logits).sparse_categorical_crossentropy(Tensor(y), ignore_index=2), -logp[np.arange(6), y][keep].mean(), atol=1e-5)
  ls = 0.1
  want = -((1 - ls) * logp[np.arange(6), y] + ls * logp.mean(-1))
  assert_close(Tensor(logits).sparse_categorical_crossentropy(Tensor(y), label_smoothing=ls, reduction="none"), want, atol=1e-5)
  assert_close(Tensor(logits).sparse_categorical_crossentropy(Tensor(y), reduction="sum"), -logp[np.arange(6), y].sum(), atol=1e-4)
  assert_close(Tensor(logits).cross_entropy(Tensor(y)), -logp[np.arange(6), y].mean(), atol=1e-5)
  probs = _np_softmax(rand(6, 5, seed=7), -1)
  assert_close(Tensor(logits).cross_entropy(Tensor(probs), reduction="sum"), -(logp * probs).sum(), atol=1e-4)
  w = rand(5, seed=8, low=0.1, high=1)
  nll = -logp[np.arange(6), y] * w[y]
  assert_close(Tensor(logp).nll_loss(Tensor(y), Tensor(w)), nll.sum() / w[y].sum(), atol=1e-5)
  assert_close(Tensor(logp).nll_loss(Tensor(y), reduction="none"), -logp[np.arange(6), y], atol=1e-5)
  p, t = rand(6, seed=9, low=0.05, high=0.95), rand(6, dtype=np.bool_, seed=10).astype(np.float32)
  assert_close(Tensor(p).binary_crossentropy(Tensor(t)), -(t * np.log(p) + (1 - t) * np.log(1 - p)).mean(), atol=1e-5)
  z = rand(6, seed=11) * 5
  sig = 1 / (1 + np.exp(-z))
  assert_close(Tensor(z).binary_crossentropy_logits(Tensor(t), reduction="none"), -(t * np.log(sig) + (1 - t) * np.log(1 - sig)),
               atol=1e-5, rtol=1e-4)

def test_loss_errors():
  with pytest.raises(TypeError, match="int tensor"): Tensor(rand(2, 3)).sparse_categorical_crossentropy(Tensor([0.0, 1.0]))
  with pytest.raises(ValueError, match=r"\(3,\).*\(2, 3\)"): Tensor(rand(2, 3)).sparse_categorical_crossentropy(Tensor([0, 1, 2]))
  with pytest.raises(ValueError, match="reduction"): Tensor(rand(2)).binary_crossentropy(Tensor(rand(2)), reduction="avg")
  with pytest.raises(ValueError, match="label_smoothing"): Tensor(rand(2, 3)).cross_entropy(Tensor([0, 1]), label_smoothing=2.0)

def test_sequential():
  x = rand(2, 3)
  assert_close(Tensor(x).sequential([Tensor.relu, lambda t: t * 2, Tensor.exp]), np.exp(np.maximum(x, 0) * 2), rtol=1e-5)

# *** bad inputs: clear errors naming shapes and dtypes ***

def test_bad_inputs():
  with pytest.raises(ValueError, match=r"cannot broadcast shapes \(2, 3\), \(4,\)"): Tensor(rand(2, 3)) + Tensor(rand(4))
  with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 3\)"): Tensor(rand(2, 3)).expand(4, 3)
  with pytest.raises(IndexError, match=r"dimension 3 is out of range for a tensor of shape \(2, 3\)"): Tensor(rand(2, 3)).sum(3)
  with pytest.raises(IndexError, match=r"dimension -3"): Tensor(rand(2, 3)).softmax(-3)
  with pytest.raises(IndexError, match="out of range"): Tensor(rand(2, 3)).argmax(2)
  with pytest.raises(TypeError, match=r"bitwise ops need int or bool tensors, got dtypes.float"): Tensor(rand(2)) & Tensor(rand(2))
  with pytest.raises(TypeError, match=r"dtypes.float"): ~Tensor(rand(2))
  with pytest.raises(TypeError, match="idiv needs integer"): Tensor(rand(2)).idiv(2)
  with pytest.raises(ValueError, match=r"cannot reshape tensor of shape \(2, 3\)"): Tensor(rand(2, 3)).reshape(4, -1)
  with pytest.raises(ValueError, match="permutation"): Tensor(rand(2, 3)).permute(0, 0)
  with pytest.raises(RuntimeError, match=r"non-scalar tensor of shape \(2, 3\) needs a gradient"):
    (Tensor(rand(2, 3), requires_grad=True) * 2).backward()
  with pytest.raises(ValueError, match=r"shape \(2,\) != tensor shape \(2, 3\)"):
    (Tensor(rand(2, 3), requires_grad=True) * 2).backward(Tensor([1.0, 1.0]))
  with pytest.raises(RuntimeError, match="does not require grad"): Tensor([1.0]).sum().backward()
  with pytest.raises(ValueError, match="ragged"): Tensor([[1, 2], [3]])
  with pytest.raises(TypeError, match="cannot make a Tensor"): Tensor({"a": 1})
  with pytest.raises(TypeError, match="ambiguous"): bool(Tensor([1]))
  with pytest.raises(ValueError, match=r"item\(\) needs a tensor with one element, got shape \(2,\)"): Tensor([1, 2]).item()
  with pytest.raises(ValueError, match=r"assign shape mismatch: target \(2,\) vs value \(3,\)"): Tensor([1.0, 2.0]).assign(Tensor([1.0, 2, 3]))
  with pytest.raises(TypeError, match=r"assign dtype mismatch: target dtypes.float vs value dtypes.int"): Tensor([1.0, 2.0]).assign(Tensor([1, 2]))

def test_separately_realized_equal_ops_are_distinct_buffers():
  a = Tensor.zeros(3).contiguous().realize()
  b = Tensor.zeros(3).contiguous().realize()
  assert a.lazydata.base.buffer is not b.lazydata.base.buffer
  a.assign(Tensor([1.0, 2.0, 3.0])).realize()
  assert b.tolist() == [0.0, 0.0, 0.0]

def test_two_assigns_into_one_buffer_give_a_clear_error():
  x = Tensor.full((5, 3), 2.0).contiguous().realize()
  g = x.sum(0)
  m = Tensor.zeros(3).contiguous().realize()
  m2 = Tensor(m.lazydata)  # a second Tensor over the same buffer
  m.assign(g + 1); m2.assign(g + 2)
  with pytest.raises((RuntimeError, ValueError), match="assign"): Tensor.realize(m, m2)

# *** torch comparisons (skipped without torch) ***

@needs_torch
@pytest.mark.parametrize("name", ["relu", "sigmoid", "tanh", "gelu", "silu", "elu", "celu", "softplus", "mish", "softsign", "hardswish",
                                  "hardsigmoid", "hardtanh", "relu6", "leakyrelu", "quick_gelu"])
def test_activations_torch(name):
  import torch.nn.functional as TF
  x = rand(4, 5) * 4
  tx = torch.tensor(x)
  want = {"gelu": lambda t: TF.gelu(t, approximate="tanh"), "leakyrelu": lambda t: TF.leaky_relu(t, 0.01), "softsign": TF.softsign,
          "hardswish": TF.hardswish, "hardsigmoid": TF.hardsigmoid, "hardtanh": TF.hardtanh, "relu6": TF.relu6, "mish": TF.mish,
          "quick_gelu": lambda t: t * torch.sigmoid(1.702 * t), "softplus": TF.softplus, "elu": TF.elu, "celu": TF.celu,
          "silu": TF.silu}.get(name, getattr(torch, name, None))
  assert_close(getattr(Tensor(x), name)(), want(tx), atol=1e-5, rtol=1e-5)

@needs_torch
@pytest.mark.parametrize("kw", [dict(), dict(stride=2), dict(padding=1), dict(stride=2, padding=1, output_padding=1), dict(dilation=2),
                                dict(groups=2, stride=(2, 1)), dict(padding=(0, 1), stride=(1, 2))])
def test_conv_transpose2d_torch(kw):
  import torch.nn.functional as TF
  g = kw.get("groups", 1)
  x, w, b = rand(2, 4, 5, 6, seed=1), rand(4, 6 // g, 3, 3, seed=2), rand(6, seed=3)
  want = TF.conv_transpose2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), **kw)
  assert_close(Tensor(x).conv_transpose2d(Tensor(w), Tensor(b), **kw), want, atol=1e-4)

@needs_torch
@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=(2, 3), stride=2, ceil_mode=True), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
                                dict(kernel_size=2, stride=1, dilation=2), dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 0))])
def test_pools_torch(kw):
  import torch.nn.functional as TF
  x = rand(2, 3, 7, 8)
  assert_close(Tensor(x).max_pool2d(**kw), TF.max_pool2d(torch.tensor(x), **kw))
  if "dilation" in kw: return  # torch's avg_pool2d has no dilation
  for cip in (True, False):
    assert_close(Tensor(x).avg_pool2d(**kw, count_include_pad=cip), TF.avg_pool2d(torch.tensor(x), **kw, count_include_pad=cip), atol=1e-6)

@needs_torch
def test_conv2d_torch():
  import torch.nn.functional as TF
  for kw in CONV + [dict(stride=2, padding=2, dilation=(2, 1), groups=2)]:
    g = kw.get("groups", 1)
    x, w, b = rand(2, 4, 7, 6, seed=1), rand(6, 4 // g, 3, 2, seed=2), rand(6, seed=3)
    assert_close(Tensor(x).conv2d(Tensor(w), Tensor(b), **kw), TF.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), **kw), atol=1e-4)

@needs_torch
def test_losses_and_attention_torch():
  import torch.nn.functional as TF
  logits, y = rand(6, 5, seed=1), np.array([0, 4, 2, 1, 3, 2])
  tl, ty = torch.tensor(logits), torch.tensor(y)
  for kw in [dict(), dict(label_smoothing=0.2), dict(reduction="sum"), dict(reduction="none")]:
    assert_close(Tensor(logits).cross_entropy(Tensor(y.astype(np.int32)), **kw), TF.cross_entropy(tl, ty, **kw), atol=1e-5)
  assert_close(Tensor(logits).sparse_categorical_crossentropy(Tensor(y.astype(np.int32)), ignore_index=2, label_smoothing=0.1),
               TF.cross_entropy(tl, ty, ignore_index=2, label_smoothing=0.1), atol=1e-5)
  l4, y4 = rand(2, 5, 3, 3, seed=2), rand(2, 3, 3, dtype=np.int64, low=0, high=5, seed=3)
  assert_close(Tensor(l4).cross_entropy(Tensor(y4)), TF.cross_entropy(torch.tensor(l4), torch.tensor(y4)), atol=1e-5)
  lp = TF.log_softmax(tl, 1)
  w = rand(5, low=0.1, high=1, seed=4)
  assert_close(Tensor(lp.numpy()).nll_loss(Tensor(y.astype(np.int32)), Tensor(w), ignore_index=2),
               TF.nll_loss(lp, ty, torch.tensor(w), ignore_index=2), atol=1e-5)
  p, t = rand(6, low=0.05, high=0.95, seed=5), rand(6, dtype=np.bool_, seed=6).astype(np.float32)
  assert_close(Tensor(p).binary_crossentropy(Tensor(t)), TF.binary_cross_entropy(torch.tensor(p), torch.tensor(t)), atol=1e-5)
  assert_close(Tensor(p * 8 - 4).binary_crossentropy_logits(Tensor(t)),
               TF.binary_cross_entropy_with_logits(torch.tensor(p * 8 - 4), torch.tensor(t)), atol=1e-5)
  q, k, v = (rand(2, 2, 4, 3, seed=s) for s in (7, 8, 9))
  tq, tk, tv = map(torch.tensor, (q, k, v))
  for kw in [dict(), dict(is_causal=True)]:
    assert_close(Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), **kw), TF.scaled_dot_product_attention(tq, tk, tv, **kw), atol=1e-5)
  m = rand(4, 4, dtype=np.bool_, seed=10); m[:, 0] = True
  assert_close(Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), attn_mask=Tensor(m)),
               TF.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.tensor(m)), atol=1e-5)

@needs_torch
@pytest.mark.parametrize("mode,align", [("linear", False), ("linear", True), ("nearest", False), ("nearest-exact", False)])
def test_interpolate_torch(mode, align):
  import torch.nn.functional as TF
  x = rand(1, 2, 4, 5)
  for size in [(7, 3), (2, 10)]:
    kw = {"align_corners": align} if mode == "linear" else {}
    want = TF.interpolate(torch.tensor(x), size=size, mode="bilinear" if mode == "linear" else mode, **kw)
    assert_close(Tensor(x).interpolate(size, mode=mode, align_corners=align), want, atol=1e-5)

@needs_torch
def test_reductions_and_indexing_torch():
  x = rand(3, 4, 5)
  tx = torch.tensor(x)
  assert_close(Tensor(x).logsumexp(1), torch.logsumexp(tx, 1), atol=1e-5)
  assert_close(Tensor(x).log_softmax(0), torch.log_softmax(tx, 0), atol=1e-5)
  assert_close(Tensor(x).std(axis=(0, 2), correction=0), torch.std(tx, (0, 2), correction=0), atol=1e-5)
  assert_close(Tensor(x).argmax(2), torch.argmax(tx, 2).int())
  idx = np.array([[2, 0], [1, 2]])
  assert_close(Tensor(x)[Tensor(idx), :, Tensor(idx)], tx[torch.tensor(idx), :, torch.tensor(idx)])
  assert_close(Tensor(x)[1:, Tensor([0, 3])], tx[1:, torch.tensor([0, 3])])
  assert_close(Tensor(x)[1, :, Tensor(idx)], tx[1, :, torch.tensor(idx)])  # torch's placement (numpy differs here)
  assert_close(Tensor(x)[Tensor(idx), ::2, -1], tx[torch.tensor(idx), ::2, -1])
  assert_close(Tensor(x).gather(2, Tensor(idx.reshape(1, 2, 2))), torch.gather(tx, 2, torch.tensor(idx.reshape(1, 2, 2))))
  assert_close(Tensor(x).triu(1), torch.triu(tx, 1))
  assert_close(Tensor(x).repeat(1, 2, 1), tx.repeat(1, 2, 1))
