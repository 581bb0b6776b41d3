"""Boolean-mask selection against torch: `Tensor.masked_select(mask)` and `x[bool_mask]` (values, row-major order,
shapes, dtypes, gradients to the selected elements, error types), on the default device (TINYSCHED_DEVICE)."""
import numpy as np
import pytest
import torch
from tinysched import Tensor, ShapeError, DTypeError, GlobalCounters, dtypes

RNG = np.random.default_rng(1919)

def rand(*shape) -> np.ndarray: return np.asarray(RNG.standard_normal(shape), dtype=np.float32)
def coin(*shape, p: float = 0.5) -> np.ndarray: return np.asarray(RNG.random(shape) < p)

CASES = [  # (x shape, mask shape): equal, broadcast either way, 0-d, none / all selected
  ((3, 4), (3, 4)), ((2, 3, 4), (3, 4)), ((4, 1), (4, 5)), ((5,), (5,)), ((), ()), ((2, 3), (1, 3)),
]

@pytest.mark.parametrize("xs,ms", CASES)
@pytest.mark.parametrize("p", [0.0, 0.5, 1.0])
def test_masked_select_values_and_grad(xs, ms, p):
  a, m = rand(*xs), coin(*ms, p=p)
  ta = torch.tensor(a, requires_grad=True)
  want = torch.masked_select(ta, torch.tensor(m))
  want.sum().backward() if want.numel() else None
  x = Tensor(a, requires_grad=True)
  got = x.masked_select(Tensor(m))
  assert got.shape == tuple(want.shape) and got.dtype == dtypes.float32
  np.testing.assert_array_equal(got.numpy(), want.detach().numpy())  # the values, in row-major order
  if want.numel():
    (got * 1.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), ta.grad.numpy())  # 1 at selected elements (summed over broadcast)

def test_masked_select_weighted_grad_and_ints():
  a, m = rand(4, 6), coin(4, 6)
  w = rand(int(m.sum()))
  ta = torch.tensor(a, requires_grad=True)
  (torch.masked_select(ta, torch.tensor(m)) * torch.tensor(w)).sum().backward()
  x = Tensor(a, requires_grad=True)
  (x.masked_select(Tensor(m)) * Tensor(w)).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), ta.grad.numpy(), rtol=1e-6)
  i = RNG.integers(-100, 100, (3, 5)).astype(np.int32)
  mi = coin(3, 5)
  got = Tensor(i).masked_select(Tensor(mi))
  assert got.dtype == dtypes.int32
  np.testing.assert_array_equal(got.numpy(), torch.masked_select(torch.tensor(i), torch.tensor(mi)).numpy())

def test_masked_select_lazy_mask_and_order():
  """The mask may be a lazy expression (it is realized); the order is row-major, not sorted by value."""
  a = np.arange(12, dtype=np.float32)[::-1].copy().reshape(3, 4)
  x = Tensor(a)
  got = x.masked_select((x % 3) == 0)
  np.testing.assert_array_equal(got.numpy(), a[(a % 3) == 0])
  assert got.numpy().tolist() == [9.0, 6.0, 3.0, 0.0]

def test_masked_select_errors():
  with pytest.raises(ShapeError) as e: Tensor(rand(3, 4)).masked_select(Tensor(coin(3, 5)))
  assert isinstance(e.value, RuntimeError)  # torch's type
  with pytest.raises(RuntimeError): torch.masked_select(torch.zeros(3, 4), torch.zeros(3, 5, dtype=torch.bool))
  with pytest.raises(DTypeError): Tensor(rand(3)).masked_select(Tensor([1, 0, 1]))  # torch: a bool mask only
  with pytest.raises(RuntimeError): torch.masked_select(torch.zeros(3), torch.tensor([1, 0, 1]))

BOOL_INDEX = [((3, 4), (3, 4)), ((3, 4), (3,)), ((2, 3, 4), (2, 3)), ((5,), (5,)), ((2, 3), ())]

@pytest.mark.parametrize("xs,ms", BOOL_INDEX)
@pytest.mark.parametrize("host", [False, True])
def test_bool_mask_index(xs, ms, host):
  """x[mask] with a bool Tensor (or ndarray) over x's leading dims: (count, *rest), as torch."""
  a, m = rand(*xs), coin(*ms)
  if not ms: m = np.array(True)
  ta = torch.tensor(a, requires_grad=True)
  want = ta[torch.tensor(m)]
  want.sum().backward()
  x = Tensor(a, requires_grad=True)
  got = x[m if host else Tensor(m)]
  assert got.shape == tuple(want.shape)
  np.testing.assert_array_equal(got.numpy(), want.detach().numpy())
  got.sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), ta.grad.numpy())

def test_bool_mask_index_errors():
  with pytest.raises(ShapeError) as e: Tensor(rand(3, 4))[Tensor(coin(4))]
  assert isinstance(e.value, IndexError)  # torch raises IndexError here
  with pytest.raises(IndexError): torch.zeros(3, 4)[torch.zeros(4, dtype=torch.bool)]
  with pytest.raises(ShapeError): Tensor(rand(3, 4))[Tensor(coin(3, 4, 1))]

def test_masked_select_realizes_only_the_mask():
  """The count needs the mask's values: realizing it runs the mask's kernels; the selection itself stays lazy."""
  x = Tensor(rand(4, 4)).realize()
  GlobalCounters.reset()
  out = x.masked_select(x > 0)
  assert GlobalCounters.kernel_count == 1  # the compare, to read the mask
  GlobalCounters.reset()
  out.realize()
  assert GlobalCounters.kernel_count >= 1
