"""tinygrad/torch compatibility of the Tensor API, second part of issue 19: non-constant pad modes, advanced indexing with
lists and Tensors, cumsum edge cases, sdpa's mask checks, sort/topk, einsum and multinomial. Checked against torch
(values, shapes, dtypes, gradients), numpy where the two disagree and we follow numpy."""
from __future__ import annotations
import numpy as np
import pytest
from tinysched import Tensor, dtypes
from tinysched.errors import ShapeError
from tests.helpers import rand, assert_close, torch, needs_torch

TF = torch.nn.functional if torch is not None else None

# *** pad(mode="reflect" | "replicate" | "circular") ***

PAD_CASES = [  # shape, flat torch-style pads (last dim first)
  ((1, 2, 5), (2, 1)), ((1, 2, 5), (4, 4)), ((1, 2, 5), (0, 3)), ((1, 2, 5), (-1, 2)), ((1, 2, 5), (2, -1)),
  ((2, 3, 4, 5), (1, 2, 2, 1)), ((2, 3, 4, 5), (3, 0, 0, 3)), ((1, 1, 3, 4, 5), (1, 1, 2, 0, 1, 2)), ((1, 2, 5), (0, 0)),
]

@needs_torch
@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape,pads", PAD_CASES)
def test_pad_modes_match_torch(mode, shape, pads):
  if mode == "circular" and any(max(pads[2 * i:2 * i + 2]) > shape[-1 - i] for i in range(len(pads) // 2)): pytest.skip("circular wraps once")
  x = rand(*shape)
  t, tt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
  got, want = t.pad(pads, mode=mode), TF.pad(tt, pads, mode=mode)
  assert got.dtype == dtypes.float32
  assert_close(got, want)
  # gradients: a weighted sum, so each source element collects the weights of every copy of it
  w = rand(*want.shape, seed=1)
  (got * Tensor(w)).sum().backward(); (want * torch.tensor(w)).sum().backward()
  assert_close(t.grad, tt.grad, atol=1e-5)

@needs_torch
@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_modes_per_dim_form_and_ints(mode):
  x = rand(3, 4, 5, dtype=np.int32, low=-50, high=50)
  want = TF.pad(torch.tensor(x).unsqueeze(0), (2, 1, 1, 3), mode=mode).squeeze(0)
  assert_close(Tensor(x).pad((None, (1, 3), (2, 1)), mode=mode), want, dtype=np.int32)  # the per-dim form, first dim left alone
  assert_close(Tensor(x).pad(((1, 1), (1, 3), (2, 1)), mode=mode)[1:-1], want, dtype=np.int32)  # the first dim too

def test_pad_modes_numpy_names():
  # numpy's names for the same paddings: reflect (no edge repeat), edge, wrap
  x = rand(4, 6)
  for mode, np_mode in (("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")):
    assert_close(Tensor(x).pad(((1, 2), (3, 2)), mode=mode), np.pad(x, ((1, 2), (3, 2)), mode=np_mode))

def test_pad_modes_fuse_into_one_kernel():
  x = Tensor(rand(2, 3, 8)).realize()
  for mode in ("reflect", "replicate", "circular"):
    assert len(x.pad((2, 3, 1, 1), mode=mode).schedule()) == 1  # movement ops and adds only: one kernel, like a constant pad

PAD_ERRORS = [
  ("reflect", (5, 0), ShapeError, "less than"),        # reflect needs pad < dim size
  ("reflect", (0, 7), ShapeError, "less than"),
  ("circular", (6, 0), ShapeError, "at most"),         # circular wraps at most once
  ("replicate", (1, 1, 1, 1, 1, 1, 1, 1), ShapeError, "does not fit"),
]

@pytest.mark.parametrize("mode,pads,exc,msg", PAD_ERRORS)
def test_pad_modes_bad_pads_raise(mode, pads, exc, msg):
  with pytest.raises(exc, match=msg): Tensor(rand(1, 2, 5)).pad(pads, mode=mode)
  with pytest.raises(RuntimeError): Tensor(rand(1, 2, 5)).pad(pads, mode=mode)  # torch's type too

def test_pad_modes_bad_arguments_raise():
  with pytest.raises(NotImplementedError, match="unknown pad mode"): Tensor(rand(2, 3)).pad((1, 1), mode="symmetric")
  with pytest.raises(ValueError, match="value"): Tensor(rand(2, 3)).pad((1, 1), mode="reflect", value=2.0)
  with pytest.raises(RuntimeError, match="value"): Tensor(rand(2, 3)).pad((1, 1), mode="reflect", value=2.0)
  with pytest.raises(ShapeError, match="empty"): Tensor.zeros(2, 0).pad((1, 1), mode="replicate")

# *** advanced indexing: lists, nested lists, Tensors, with slices ***

A3 = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
def _ti(v): return Tensor(np.array(v, dtype=np.int32))
def _npi(v): return np.array(v)

# each case builds the index from a maker of index arrays: numpy is the reference, given the index as tinygrad 0.10.0 and
# torch 2.13 read it (issue 45): a top-level list holding a sequence is a tuple of items (_as_tuple), a list of ints is
# one index array, and a sequence as an item is one index array however deep
INDEX_CASES = {
  "nested_list": lambda m: [[[0]]], "list": lambda m: [0, 2], "list_of_lists": lambda m: [[0, 1], [2, 0]],
  "negative_list": lambda m: [-1, 0, -3], "empty_list": lambda m: [], "tuple_in_tuple": lambda m: ((0, 1),),
  "list_of_tuple": lambda m: [(0, 1)], "tensor": lambda m: (m([0, 2]),), "two_tensors": lambda m: (m([0, 2]), m([1, 3])),
  "slice_tensor": lambda m: (slice(None), m([[0, 1], [2, 3]])), "tensor_slice_tensor": lambda m: (m([0, 2]), slice(None), m([1, 3])),
  "slice_two_tensors": lambda m: (slice(None), m([0, 2]), m([1, 3])), "broadcast_col_row": lambda m: (m([[0], [2]]), m([[1, 3]])),
  "broadcast_after_slice": lambda m: (slice(1, None), m([[0], [3]]), m([1, 2, 4])), "tensor_none_tensor": lambda m: (m([0, 2]), None, m([1, 3])),
  "none_tensor": lambda m: (None, m([0, 2])), "ellipsis_tensor": lambda m: (Ellipsis, m([0, 2])),
  "reversed_slice_tensor": lambda m: (slice(None, None, -1), m([0, 3])), "strided_slice_list": lambda m: (slice(0, 3, 2), [3, 1], slice(None)),
  "tensor_int_slice": lambda m: (m([2, 0]), 1, slice(None)), "list_pair_tuple": lambda m: ([0, 1], [1, 2]),
}

def _as_tuple(idx):
  return tuple(idx) if isinstance(idx, list) and any(isinstance(e, (list, tuple, np.ndarray)) for e in idx) else idx

@pytest.mark.parametrize("name", list(INDEX_CASES))
def test_advanced_indexing_matches_numpy(name):
  want = A3[_as_tuple(INDEX_CASES[name](_npi))]
  assert_close(Tensor(A3)[INDEX_CASES[name](_ti)], want, dtype=np.float32)
  assert_close(Tensor(A3)[INDEX_CASES[name](lambda v: v)], want, dtype=np.float32)  # plain lists in place of the arrays

def test_list_of_tensors_is_a_tuple():
  # a top-level list of Tensors is a tuple of indices, as tinygrad 0.10.0 and torch 2.13 read it (issue 45; it stacked
  # them into one index before, numpy's reading of a list of arrays)
  assert_close(Tensor(A3)[[_ti([0, 2]), _ti([1, 1])]], A3[[0, 2], [1, 1]], dtype=np.float32)
  assert_close(Tensor(A3)[[_ti(2), 0, _ti(1)]], A3[2, 0, 1], dtype=np.float32)  # 0-d Tensors and ints mixed: ints
  # inside a tuple, a list of Tensors is one index array (stacked; tinygrad and torch raise TypeError for it)
  assert_close(Tensor(A3)[[_ti([0, 2]), _ti([1, 1])], 0], A3[np.array([[0, 2], [1, 1]]), 0], dtype=np.float32)
  with pytest.raises(IndexError, match="same shape"): Tensor(A3)[[_ti([0, 1]), _ti([1])], 0]

@needs_torch
def test_int_and_0d_tensor_are_basic_like_torch():
  # an int (and a 0-d int Tensor, as in torch) is applied first and does not separate tensor indices: x[1, :, idx] has
  # idx's dims where idx was (numpy would put them first). torch and tinygrad agree on this
  a4 = np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5)
  tt = torch.tensor(a4)
  for idx in ((1, slice(None), [1, 3]), (_ti(1), slice(None), _ti([1, 3])), (slice(None), _ti(2), slice(None)),
              (slice(None), _ti([0, 2]), _ti(1), _ti([1, 3])), (_ti([1, 0]), _ti(0), slice(None), _ti([[1], [3]]))):
    t_idx = tuple(torch.tensor(i.numpy()) if isinstance(i, Tensor) else (torch.tensor(i) if isinstance(i, list) else i) for i in idx)
    assert_close(Tensor(a4)[idx], tt[t_idx])

@needs_torch
def test_advanced_indexing_gradient():
  x, tx = Tensor(A3, requires_grad=True), torch.tensor(A3, requires_grad=True)
  idx = ([[0, 2], [2, 2]], slice(1, 3), [[4], [0]])  # a repeated row: its gradient adds up
  got, want = x[idx], tx[tuple(torch.tensor(i) if isinstance(i, list) else i for i in idx)]
  assert_close(got, want)
  w = rand(*want.shape, seed=3)
  (got * Tensor(w)).sum().backward(); (want * torch.tensor(w)).sum().backward()
  assert_close(x.grad, tx.grad)

def test_unsupported_indices_raise_clearly():
  x = Tensor(A3)
  with pytest.raises(IndexError, match="boolean"): x[[True, False, True]]
  with pytest.raises(IndexError, match="boolean"): x[0, Tensor([True, False, True, False])]  # a mask alone is supported
  assert_close(x[Tensor([True, False, True])], A3[[True, False, True]])
  with pytest.raises(IndexError, match="ragged"): x[[[0, 1], [2]], 0]  # a ragged item (a top-level list of lists is a tuple)
  with pytest.raises(IndexError, match="int Tensor"): x[[0.5, 1.0]]
  with pytest.raises(IndexError, match="out of bounds"): x[[0, 3]]

# *** cumsum on a 0-d tensor and along an empty axis ***

@needs_torch
@pytest.mark.parametrize("shape,axis", [((), 0), ((), -1), ((0,), 0), ((2, 0), 1), ((0, 3), 0), ((0, 3), 1), ((2, 3, 0), -1)])
def test_cumsum_0d_and_empty(shape, axis):
  x = rand(*shape) if shape else np.array(1.5, np.float32)
  t, tt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
  got, want = t.cumsum(axis), tt.cumsum(axis)
  assert got.dtype == dtypes.float32
  assert_close(got, want)
  got.sum().backward(); want.sum().backward()
  assert_close(t.grad, tt.grad)
  xi = x.astype(np.int32)
  assert Tensor(xi).cumsum(axis).dtype == Tensor(np.ones((2,), np.int32)).cumsum(0).dtype  # as a non-empty int cumsum
  assert_close(Tensor(xi).cumsum(axis), torch.tensor(xi).cumsum(axis).numpy().astype(Tensor(xi).cumsum(axis).dtype.np))
  with pytest.raises(IndexError): Tensor(x).cumsum(1 if not shape else len(shape))

# *** scaled_dot_product_attention with attn_mask and is_causal: torch raises RuntimeError ***

@needs_torch
def test_sdpa_mask_and_causal_raise_like_torch():
  q = Tensor(rand(2, 3, 4))
  m = Tensor.ones(3, 3, dtype=dtypes.bool)
  tq = torch.tensor(q.numpy())
  with pytest.raises(RuntimeError):
    TF.scaled_dot_product_attention(tq, tq, tq, attn_mask=torch.ones(3, 3, dtype=torch.bool), is_causal=True)
  with pytest.raises(RuntimeError, match="attn_mask.*is_causal"): q.scaled_dot_product_attention(q, q, attn_mask=m, is_causal=True)
  with pytest.raises(ValueError, match="attn_mask.*is_causal"): q.scaled_dot_product_attention(q, q, attn_mask=m, is_causal=True)
  # each alone still works (against torch)
  for kw, tkw in (({"attn_mask": m}, {"attn_mask": torch.ones(3, 3, dtype=torch.bool)}), ({"is_causal": True}, {"is_causal": True})):
    assert_close(q.scaled_dot_product_attention(q, q, **kw), TF.scaled_dot_product_attention(tq, tq, tq, **tkw), atol=1e-5)

# *** sort / topk: stable (torch's stable=True), values and int32 indices, gradients through the values ***

NAN, INF = float("nan"), float("inf")
SORT_DATA = [
  np.array([3.0, NAN, 1.0, 3.0, -INF, 1.0, INF, NAN, -0.0, 0.0], np.float32),  # ties, nans last (first descending), +-inf, +-0
  rand(4, 7, seed=5), np.round(rand(3, 4, 6, seed=6)),  # rounding makes many ties
]

@needs_torch
@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("which", range(len(SORT_DATA)))
def test_sort_matches_torch_stable(which, descending):
  x = SORT_DATA[which]
  for dim in range(-x.ndim, x.ndim):
    t, tt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (v, i), (tv, ti) = t.sort(dim=dim, descending=descending), torch.sort(tt, dim=dim, descending=descending, stable=True)
    assert v.dtype == dtypes.float32 and i.dtype == dtypes.int32  # int32 indices like argmax (torch: int64)
    assert_close(v, tv)
    assert_close(i, ti.numpy().astype(np.int32))
    w = rand(*x.shape, seed=7)
    (v.isnan().where(0, v) * Tensor(w)).sum().backward()
    (torch.where(tv.isnan(), 0, tv) * torch.tensor(w)).sum().backward()
    assert_close(t.grad, tt.grad)

@needs_torch
@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int8, np.bool_])
def test_sort_ints_and_bools(dtype):
  x = rand(3, 9, seed=8, dtype=dtype, low=-5 if dtype != np.uint8 else 0, high=6)
  for descending in (False, True):
    v, i = Tensor(x).sort(descending=descending)
    tv, ti = torch.sort(torch.tensor(x), descending=descending, stable=True)
    assert_close(v, tv, dtype=dtype)
    assert_close(i, ti.numpy().astype(np.int32), dtype=np.int32)

@needs_torch
@pytest.mark.parametrize("k,dim,largest", [(1, -1, True), (3, -1, True), (3, -1, False), (2, 0, True), (7, 1, False), (0, -1, True)])
def test_topk_matches_torch(k, dim, largest):
  x = rand(4, 7, 5, seed=9)  # distinct values: torch's topk does not promise an order among ties
  t, tt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
  (v, i), (tv, ti) = t.topk(k, dim=dim, largest=largest, sorted=True), torch.topk(tt, k, dim=dim, largest=largest, sorted=True)
  assert_close(v, tv)
  assert_close(i, ti.numpy().astype(np.int32), dtype=np.int32)
  if k:
    w = rand(*tv.shape, seed=10)
    (v * Tensor(w)).sum().backward(); (tv * torch.tensor(w)).sum().backward()
    assert_close(t.grad, tt.grad)

def test_sort_topk_edges_and_errors():
  v, i = Tensor(3.0).sort()
  assert v.shape == () and v.item() == 3.0 and i.item() == 0
  v, i = Tensor.zeros(2, 0).sort(dim=1)
  assert v.shape == (2, 0) and i.shape == (2, 0)
  with pytest.raises(ShapeError, match="k=5"): Tensor(rand(4)).topk(5)
  with pytest.raises(ShapeError, match="at most 4096"): Tensor.zeros(4097).sort()
  with pytest.raises(IndexError): Tensor(rand(4)).sort(dim=1)
  for dt in (np.float32, np.int32, np.bool_):  # comparisons and two sums (the places, the moved values): two kernels
    assert len(Tensor(rand(8, dtype=dt)).realize().sort()[0].schedule()) == 2

# *** einsum ***

EINSUM_CASES = [  # equation, operand shapes
  ("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ij->ji", [(3, 4)]), ("ii->", [(4, 4)]),
  ("ii->i", [(4, 4)]), ("i,j->ij", [(3,), (4,)]), ("ijk->j", [(2, 3, 4)]), ("ijk->", [(2, 3, 4)]), ("ij,ij->ij", [(3, 4), (3, 4)]),
  ("i,i->", [(5,), (5,)]), ("ij,jk", [(3, 4), (4, 5)]), ("ba", [(3, 4)]), ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
  ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]), (" i j , j k -> i k ", [(3, 4), (4, 5)]), ("iij->ji", [(3, 3, 2)]), ("i,->i", [(3,), ()]),
  ("ij,j->i", [(3, 4), (4,)]), ("ij->", [(0, 3)]),
]

@needs_torch
@pytest.mark.parametrize("eq,shapes", EINSUM_CASES, ids=[c[0].replace(" ", "_") for c in EINSUM_CASES])
def test_einsum_matches_torch(eq, shapes):
  arrs = [rand(*s, seed=i) for i, s in enumerate(shapes)]
  ours = [Tensor(a, requires_grad=True) for a in arrs]
  theirs = [torch.tensor(a, requires_grad=True) for a in arrs]
  got, want = Tensor.einsum(eq, *ours), torch.einsum(eq, *theirs)
  assert got.dtype == dtypes.float32
  assert_close(got, want, atol=1e-5)
  w = rand(*want.shape, seed=11)
  (got * Tensor(w)).sum().backward(); (want * torch.tensor(w)).sum().backward()
  for o, t in zip(ours, theirs): assert_close(o.grad, t.grad, atol=1e-5)

@needs_torch
def test_einsum_list_form_and_ints():
  a, b = rand(3, 4, dtype=np.int32, low=-5, high=5), rand(4, 2, dtype=np.int32, low=-5, high=5, seed=1)
  assert_close(Tensor.einsum("ij,jk->ik", [Tensor(a), Tensor(b)]), torch.einsum("ij,jk->ik", torch.tensor(a), torch.tensor(b)), dtype=np.int32)

EINSUM_ERRORS = [
  ("...ij...->ij", [(2, 3, 4)], ValueError, "ellipsis"), ("ij->ii", [(3, 3)], ValueError, "repeats"),
  ("ij->k", [(3, 3)], ValueError, "not in any input"), ("ij,jk->ik", [(3, 4)], ValueError, "2 operands"),
  ("ijk->i", [(3, 4)], ShapeError, "3 letters"), ("ij,jk->ik", [(3, 4), (5, 2)], ShapeError, "letter 'j'"),
  ("i1->i", [(3, 4)], ValueError, "letters"), ("ii->i", [(3, 4)], ShapeError, "letter 'i'"),
]

@pytest.mark.parametrize("eq,shapes,exc,msg", EINSUM_ERRORS)
def test_einsum_errors(eq, shapes, exc, msg):
  with pytest.raises(exc, match=msg): Tensor.einsum(eq, *[Tensor(rand(*s)) for s in shapes])

def test_einsum_fuses_like_matmul():
  a, b = Tensor(rand(3, 4)).realize(), Tensor(rand(4, 5)).realize()
  assert len(Tensor.einsum("ij,jk->ik", a, b).schedule()) == len((a @ b).schedule()) == 1
  assert len(Tensor.einsum("ii->", Tensor(rand(4, 4)).realize()).schedule()) == 1  # the diagonal is a view

# *** multinomial: statistics over a large sample with a fixed seed, bounds 6 sigma wide (cannot flake: the seed fixes
# the draw, and a correct sampler is inside 6 sigma with probability 1 - 2e-9 for any seed) ***

P4 = np.array([1.0, 2.0, 3.0, 4.0]) / 10

def _within_6_sigma(freq: np.ndarray, p: np.ndarray, n: int) -> None:
  sigma = np.sqrt(p * (1 - p) / n)
  assert np.all(np.abs(freq - p) <= 6 * sigma + 1e-12), f"frequencies {freq} vs {p} (6 sigma {6 * sigma})"

def test_multinomial_with_replacement_statistics():
  Tensor.manual_seed(1234)
  n = 200_000
  got = Tensor(P4 * 10, dtype=dtypes.float32).multinomial(n, replacement=True)
  assert got.shape == (n,) and got.dtype == dtypes.int32
  s = got.numpy()
  _within_6_sigma(np.bincount(s, minlength=4) / n, P4, n)
  rows = Tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 5.0]]).multinomial(20_000, replacement=True).numpy()
  assert rows.shape == (2, 20_000) and not (rows[0] == 1).any() and (rows[1] == 2).all()  # zero weights never drawn
  _within_6_sigma(np.array([(rows[0] == 0).mean()]), np.array([0.5]), 20_000)

def test_multinomial_without_replacement_statistics():
  Tensor.manual_seed(99)
  b = 40_000
  s = Tensor(np.tile(P4 * 10, (b, 1)).astype(np.float32)).multinomial(2).numpy()
  assert s.shape == (b, 2) and (s[:, 0] != s[:, 1]).all()
  _within_6_sigma(np.bincount(s[:, 0], minlength=4) / b, P4, b)
  second = np.array([sum(P4[j] * P4[k] / (1 - P4[j]) for j in range(4) if j != k) for k in range(4)])  # drawn one by one
  _within_6_sigma(np.bincount(s[:, 1], minlength=4) / b, second, b)
  perm = Tensor(np.tile([1.0, 2.0, 0.0, 4.0], (50, 1)).astype(np.float32)).multinomial(4).numpy()
  assert (np.sort(perm, axis=1) == np.arange(4)).all() and (perm[:, 3] == 2).all()  # all drawn, the zero weight last

def test_multinomial_seeded_and_errors():
  w = Tensor([0.2, 0.5, 0.3])
  Tensor.manual_seed(7); a = w.multinomial(50, replacement=True).numpy()
  Tensor.manual_seed(7); b = w.multinomial(50, replacement=True).numpy()
  Tensor.manual_seed(8); c = w.multinomial(50, replacement=True).numpy()
  assert (a == b).all() and (a != c).any()
  with pytest.raises(RuntimeError, match="without replacement"): w.multinomial(4)
  with pytest.raises(ValueError, match="without replacement"): w.multinomial(4)
  with pytest.raises(ShapeError, match="1-D or 2-D"): Tensor.ones(2, 2, 2).multinomial(1)
  with pytest.raises(ValueError, match="positive"): w.multinomial(0)

def test_list_index_builds_the_graph_an_int_tensor_does():
  # a Python list index is a default-int Tensor, as it was before lists went through numpy (no int64 kernels appear)
  x = Tensor(A3).realize()
  want = x[Tensor([0, 2])].schedule()
  got = x[[0, 2]].schedule()
  assert [si.ast.key for si in got] == [si.ast.key for si in want]

# *** symbolic reshapes: a bound Variable as a dim (a KV cache's length) ***

def test_reshape_with_a_bound_variable_dim():
  from tinysched import Variable
  vi = Variable("i", 1, 10).bind(4)
  xn = np.arange(30, dtype=np.float32)
  x = Tensor(xn).realize()
  z = x.shrink(((0, 3 * vi),)).reshape(3, vi)
  assert z.shape[0] == 3 and z.shape[1] is not None and str(z.shape[1]).startswith("<i")
  np.testing.assert_array_equal((z * 2).sum(1).numpy(), (xn[:12].reshape(3, 4) * 2).sum(1))
  # and back: (3, i) -> (3*i,), and the transposed view of a (3, i) slice
  np.testing.assert_array_equal((z.reshape(3 * vi) + 1).sum().numpy(), (xn[:12] + 1).sum())
  w = Tensor(xn.reshape(3, 10)).realize()[:, :vi]
  wt = w.reshape(3, vi).T  # (i, 3): a symbolic shape has no numpy(); its concrete reductions do
  np.testing.assert_array_equal(wt.sum(0).numpy(), xn.reshape(3, 10)[:, :4].T.sum(0))
  with pytest.raises(ValueError, match="element counts differ"): z.reshape(4, vi)  # 3*i elements cannot be 4*i

@pytest.mark.parametrize("device", ["NUMPY", "OPENCL"])
def test_mean_and_var_over_a_symbolic_shrink(device):
  # the count they divide by is an expression of the bound Variable: a 0-d Tensor computes it (Tensor(uop))
  from tinysched import Variable
  from tinysched.runtime.opencl import opencl_available
  if device == "OPENCL" and not opencl_available(): pytest.skip("no OpenCL device")
  vi = Variable("i", 1, 10).bind(4)
  yn = np.random.default_rng(0).random((3, 10), dtype=np.float32)
  y = Tensor(yn, device=device).realize().shrink((None, (0, vi)))
  np.testing.assert_allclose(y.mean(1).numpy(), yn[:, :4].mean(1), rtol=1e-6)
  np.testing.assert_allclose(y.mean().numpy(), yn[:, :4].mean(), rtol=1e-6)
  np.testing.assert_allclose(y.var().numpy(), yn[:, :4].var(ddof=1), rtol=1e-5)
  np.testing.assert_allclose(Tensor(vi * 2 + 1, device=device).numpy(), 9)

def test_symbolic_edge_cases_fail_clearly_or_work():
  from tinysched import Variable
  from tinysched.errors import ArgumentError
  assert Tensor(3.0).flip(0).numpy() == 3.0 and Tensor(3.0).flip(-1).numpy() == 3.0  # a 0-d tensor takes dim 0 / -1, as torch
  with pytest.raises(IndexError): Tensor(3.0).flip(1)
  with pytest.raises(ArgumentError, match="shrink"): Tensor.arange(Variable("i", 1, 10).bind(4))
  assert Tensor.arange(np.int64(3)).tolist() == [0, 1, 2]  # numpy ints are ints
  with pytest.raises(ValueError, match="unbound Variable 'u'"): Tensor(Variable("u", 1, 10) + 1)

def test_nested_list_of_index_tensors_is_one_index_array():
  # an item [[i, j], [j, i]] stacks the Tensors at every depth (it raised a TypeError from numpy: a stacked Tensor was
  # handed on as host data). At the top level the list is a tuple of two items (tinygrad's and torch's reading, issue 45)
  xn = np.arange(12.0, dtype=np.float32).reshape(3, 4)
  i, j = Tensor([0, 2]), Tensor([1, 0])
  np.testing.assert_array_equal(Tensor(xn)[([[i, j], [j, i]],)].numpy(), xn[np.array([[[0, 2], [1, 0]], [[1, 0], [0, 2]]])])
  np.testing.assert_array_equal(Tensor(xn)[[[i, j], [j, i]]].numpy(), xn[np.array([[0, 2], [1, 0]]), np.array([[1, 0], [0, 2]])])
