"""tinygrad/torch compatibility of the Tensor API, second part of issue 19: non-constant pad modes, advanced indexing with
lists and Tensors, cumsum edge cases, sdpa's mask checks, sort/topk, einsum and multinomial. Checked against torch
(values, shapes, dtypes, gradients), numpy where the two disagree and we follow numpy."""
from __future__ import annotations
import warnings
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
  if mode == "circular" and any(p > s for p, s in zip(pads[::2] + pads[1::2], shape[::-1] * 2)): pytest.skip("circular wraps once")
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
