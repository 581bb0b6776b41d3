"""tinygrad/torch compatibility of the Tensor API (issue 19): results that used to be silently wrong, and error
types that are catchable as both our type and tinygrad's. Against torch when installed, else numpy."""
from __future__ import annotations
import itertools
import numpy as np
import pytest
from tinysched import Tensor, dtypes
from tests.helpers import rand, assert_close, torch, needs_torch

# *** truthiness: non-bool tensors are cast to bool (x != 0) first ***

MIXED = np.array([[0.0, 2.0, 0.5], [-1.0, 0.0, 0.0], [3.0, 0.25, -0.5]], dtype=np.float32)

def test_logical_not_casts_to_bool():
  assert_close(Tensor(MIXED).logical_not(), np.logical_not(MIXED), dtype=np.bool_)
  assert_close(Tensor([0, 2, -3]).logical_not(), np.array([True, False, False]), dtype=np.bool_)

@pytest.mark.parametrize("axis", [None, 0, 1])
def test_all_any_on_non_bool(axis):
  assert_close(Tensor(MIXED).all(axis=axis), np.all(MIXED, axis=axis), dtype=np.bool_)
  assert_close(Tensor(MIXED).any(axis=axis), np.any(MIXED, axis=axis), dtype=np.bool_)
  assert Tensor([0.5, 2.0]).all().item() is True and Tensor([0, 3]).all().item() is False

# *** eye ***

@pytest.mark.parametrize("n,m", [(5, 3), (3, 5), (4, 4), (4, 1), (1, 4), (6, 2), (3, None), (0, 2), (2, 0)])
def test_eye_rectangular(n, m):
  assert_close(Tensor.eye(n, m), np.eye(n, m, dtype=np.float32), dtype=np.float32)

# *** integer lerp / interpolate: computed in float, no wrap-around ***

def test_lerp_uint8_does_not_wrap():
  a, b = np.array([10, 200, 7], np.uint8), np.array([250, 5, 7], np.uint8)
  want = a.astype(np.float32) + (b.astype(np.float32) - a.astype(np.float32)) * 0.25
  assert_close(Tensor(a).lerp(Tensor(b), 0.25), want)
  assert_close(Tensor(a).lerp(Tensor(b), Tensor([0.25, 0.25, 0.25])), want)

@needs_torch
@pytest.mark.parametrize("size", [(3, 5), (5, 7), (2, 3)])
def test_interpolate_uint8_matches_torch(size):
  img = rand(1, 2, 4, 6, dtype=np.uint8, low=0, high=256)
  got = Tensor(img).interpolate(size)
  # torch's own uint8 kernel, bit for bit: fixed-point, rounding after each dim (issue 45; this compared with the float
  # result rounded once before, which is within 1 of torch's). Before the first fix the uint8 differences wrapped (off by ~100)
  fixed_point = torch.nn.functional.interpolate(torch.tensor(img), size=size, mode="bilinear", align_corners=False)
  assert_close(got, fixed_point.numpy(), dtype=np.uint8)
  flt = torch.nn.functional.interpolate(torch.tensor(img).float(), size=size, mode="bilinear", align_corners=False)
  assert np.abs(got.numpy().astype(int) - torch.floor(flt + 0.5).numpy().astype(int)).max() <= 1

# *** pow: in the graph for every exponent, gradients as torch's ***

@needs_torch
def test_pow_zero_stays_in_graph():
  x = Tensor([0.0, 1.5, -2.0], requires_grad=True)
  y = x ** 0
  assert_close(y, np.ones(3, np.float32), dtype=np.float32)
  y.sum().backward()
  tx = torch.tensor([0.0, 1.5, -2.0], requires_grad=True)
  (tx ** 0).sum().backward()
  assert_close(x.grad, tx.grad)  # 0 everywhere, x = 0 included (torch masks exponent == 0)

BASES = [0.0, -2.0, -0.5, 0.5, 2.0]
EXPONENTS = [0.0, -1.0, -2.0, 0.5, -0.5, 1.5, 2.0, 3.0]

@needs_torch
def test_pow_grad_grid_tensor_exponent():
  b, e = (np.array(v, np.float32) for v in zip(*itertools.product(BASES, EXPONENTS)))
  x, y = Tensor(b, requires_grad=True), Tensor(e, requires_grad=True)
  tx, ty = torch.tensor(b, requires_grad=True), torch.tensor(e, requires_grad=True)
  out, tout = x ** y, tx ** ty
  assert_close(out, tout, atol=1e-5, rtol=1e-5)
  out.sum().backward(); tout.sum().backward()
  assert_close(x.grad, tx.grad, atol=1e-5, rtol=1e-5)
  assert_close(y.grad, ty.grad, atol=1e-5, rtol=1e-5)

@needs_torch
@pytest.mark.parametrize("e", EXPONENTS + [1.0, -3.0, 0.25])
def test_pow_grad_grid_scalar_exponent(e):
  x, tx = Tensor(BASES, requires_grad=True), torch.tensor(BASES, requires_grad=True)
  (x ** e).sum().backward(); (tx ** e).sum().backward()
  assert_close(x.grad, tx.grad, atol=1e-5, rtol=1e-5)

# *** std: gradient 0 where the std is 0 (torch), nan where it is undefined ***

@needs_torch
@pytest.mark.parametrize("data,axis,correction", [
  ([[3.0], [1.0]], 1, 0), ([[1.0, 1.0, 1.0]], 1, 1), ([[1.0, 1.0, 1.0]], 1, 0), ([[3.0], [1.0]], 1, 1), ([[1.0, 2.0, 4.0]], 1, 1)])
def test_std_grad_matches_torch(data, axis, correction):
  x, tx = Tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
  y, ty = x.std(axis=axis, correction=correction), tx.std(axis, correction=correction)
  assert_close(y, ty, atol=1e-6)
  y.sum().backward(); ty.sum().backward()
  assert_close(x.grad, tx.grad, atol=1e-6)

# *** errors: catchable as our type and as tinygrad's ***

from tinysched.errors import ShapeError, AxisError, DTypeError, DTypeNameError  # noqa: E402

def _t(*shape): return Tensor(rand(*shape))

ERRORS = {
  "reshape_count": (lambda: _t(2, 3).reshape(4, 2), ShapeError, (ValueError, RuntimeError), "cannot reshape"),
  "reshape_two_inferred": (lambda: _t(2, 3).reshape(-1, -1), ShapeError, (ValueError, RuntimeError), "only one dimension"),
  "broadcast": (lambda: _t(2, 3) + _t(4, 3), ShapeError, (ValueError, RuntimeError), "cannot broadcast"),
  "expand": (lambda: _t(2, 3).expand(4, 3), ShapeError, (ValueError, RuntimeError), "cannot broadcast"),
  "permute": (lambda: _t(2, 3).permute(0, 0), ShapeError, (ValueError, RuntimeError), "not a permutation"),
  "pad": (lambda: _t(2, 3).pad(((1, 1),)), ShapeError, (ValueError, RuntimeError), "needs 2 entries"),
  "shrink": (lambda: _t(2, 3).shrink(((0, 1),)), ShapeError, (ValueError, RuntimeError), "needs 2 entries"),
  "shrink_bounds": (lambda: _t(2, 3).shrink(((0, 5), None)), ShapeError, (ValueError, RuntimeError), "need 0 <= begin"),
  "cat": (lambda: _t(2, 3).cat(_t(2, 4), dim=0), ShapeError, (ValueError, RuntimeError), "differ outside that dim"),
  "stack": (lambda: _t(2, 3).stack(_t(3, 2)), ShapeError, (ValueError, RuntimeError), "one shape"),
  "matmul": (lambda: _t(2, 3) @ _t(4, 5), ShapeError, (ValueError, RuntimeError), "cannot matmul"),
  "conv2d": (lambda: _t(1, 3, 5, 5).conv2d(_t(4, 2, 3, 3)), ShapeError, (ValueError, RuntimeError), "channels"),
  "assign_shape": (lambda: _t(2, 3).assign(_t(3, 2)), ShapeError, (ValueError, RuntimeError), "assign shape mismatch"),
  "axis": (lambda: _t(2, 3).sum(axis=2), AxisError, (IndexError, RuntimeError), "out of range"),
  "transpose_axis": (lambda: _t(2, 3).transpose(0, 5), AxisError, (IndexError, RuntimeError), "out of range"),
  "idiv_float": (lambda: _t(2).idiv(_t(2)), DTypeError, (TypeError, RuntimeError), "integer"),
  "bitwise_float": (lambda: _t(2) & _t(2), DTypeError, (TypeError, RuntimeError), "bitwise"),
  "assign_dtype": (lambda: _t(2).assign(Tensor([1, 2])), DTypeError, (TypeError, RuntimeError), "dtype mismatch"),
  "dtype_name": (lambda: dtypes.from_name("float77"), DTypeNameError, (KeyError, AttributeError), "unknown dtype"),
}

@pytest.mark.parametrize("name", list(ERRORS))
def test_error_catchable_both_ways(name):
  fn, cls, bases, msg = ERRORS[name]
  for base in bases:
    with pytest.raises(base) as info: fn()
    assert isinstance(info.value, cls), f"{name} raised {type(info.value).__name__}, not {cls.__name__}"
    assert msg in str(info.value)  # our message is kept

# *** linspace, meshgrid, erf and the hyperbolic functions, against torch ***

@needs_torch
@pytest.mark.parametrize("start,stop,steps", [(0, 1, 5), (-3.5, 2.25, 11), (2, -2, 7), (1.5, 1.5, 3), (4, 9, 1), (0, 1, 0)])
def test_linspace(start, stop, steps):
  got = Tensor.linspace(start, stop, steps)
  assert got.dtype == dtypes.float32
  assert_close(got, torch.linspace(start, stop, steps), atol=1e-6, rtol=1e-6)

@needs_torch
def test_linspace_int_dtype_and_errors():
  assert_close(Tensor.linspace(0, 10, 4, dtype=dtypes.int32), torch.linspace(0, 10, 4, dtype=torch.int32), dtype=np.int32)
  assert_close(Tensor.linspace(-7, 5, 5, dtype=dtypes.int32), torch.linspace(-7, 5, 5, dtype=torch.int32), dtype=np.int32)
  with pytest.raises(ValueError): Tensor.linspace(0, 1, -1)

@needs_torch
@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid(indexing):
  xs = [np.array([1.0, 2.0, 3.0], np.float32), np.array([4.0, 5.0], np.float32), np.array([6.0, 7.0, 8.0, 9.0], np.float32)]
  for k in (1, 2, 3):
    ours = [Tensor(x, requires_grad=True) for x in xs[:k]]
    theirs = [torch.tensor(x, requires_grad=True) for x in xs[:k]]
    got, want = Tensor.meshgrid(*ours, indexing=indexing), torch.meshgrid(*theirs, indexing=indexing)
    assert len(got) == len(want)
    for g, w in zip(got, want): assert_close(g, w)
    # gradients: each input collects its grid's weights
    wts = [rand(*w.shape, seed=i) for i, w in enumerate(want)]
    sum((g * Tensor(wt)).sum() for g, wt in zip(got, wts)).backward()
    sum((w * torch.tensor(wt)).sum() for w, wt in zip(want, wts)).backward()
    for o, t in zip(ours, theirs): assert_close(o.grad, t.grad, atol=1e-5)
  with pytest.raises(ValueError): Tensor.meshgrid(Tensor(rand(2, 2)), Tensor([1.0]))

X_ANY = np.array([-3.0, -1.5, -0.3, 0.0, 0.2, 0.9, 2.5, 4.0], np.float32)
HYPER = [  # name, domain
  ("erf", X_ANY), ("sinh", X_ANY), ("cosh", X_ANY), ("asinh", np.concatenate([X_ANY, [-40.0, 300.0]]).astype(np.float32)),
  ("acosh", np.array([1.0, 1.01, 1.5, 3.0, 20.0, 0.5], np.float32)), ("atanh", np.array([-0.95, -0.5, 0.0, 0.1, 0.7, 1.0, 1.5], np.float32)),
]

@needs_torch
@pytest.mark.parametrize("name,x", HYPER, ids=[h[0] for h in HYPER])
def test_erf_and_hyperbolic(name, x):
  t, tt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
  got, want = getattr(t, name)(), getattr(torch, name)(tt)
  assert got.dtype == dtypes.float32
  with np.errstate(invalid="ignore"): assert_close(got, want, atol=1e-6, rtol=1e-5)
  got.sum().backward(); want.sum().backward()
  assert_close(t.grad, tt.grad, atol=1e-5, rtol=1e-4)

@needs_torch
@pytest.mark.parametrize("name", ["erf", "sinh", "cosh", "asinh", "atanh"])
def test_erf_and_hyperbolic_int_and_half(name):
  xi = np.array([0, 1, 2], np.int32)
  assert_close(getattr(Tensor(xi), name)(), getattr(torch, name)(torch.tensor(xi)), atol=1e-6, rtol=1e-5, dtype=np.float32)
  xh = np.array([-0.5, 0.0, 0.25], np.float16)
  got = getattr(Tensor(xh), name)()
  assert got.dtype == dtypes.float16
  assert_close(got, getattr(torch, name)(torch.tensor(xh).float()).numpy(), atol=2e-3, rtol=2e-3)
