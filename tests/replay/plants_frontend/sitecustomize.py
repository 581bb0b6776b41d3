"""Planted front-end changes for the model level's tests (tests/replay/test_model_level.py), applied in every Python
process that starts with this folder on PYTHONPATH and TINYSCHED_TEST_PLANT set: the `replay` CLI, its replay and
execution workers, a capture, as a user's edit of the front end would be.

  f16_acc_in_f16       reduce.py: float16 sums accumulate in float16 (the issue's example; visible on a device: the
                       NUMPY interpreter's float16 contractions are more exact than a sequential accumulator)
  sum_via_half         Tensor.sum of float32 goes through float16 (a lost cast: precision, visible anywhere)
  adam_eps             nn.optim.Adam's default eps 1e-8 -> 1e-2 (an optimizer change that is also in the reference)
  gelu_rewritten       Tensor.gelu as x * (0.5 + 0.5 * tanh(...)): the same function, another graph (an equivalent refactor)
"""
import os

def _f16_acc_in_f16():
  from tinysched import reduce as R
  R.acc_dtype.__code__ = (lambda dtype: dtype).__code__  # every importer holds this function object

def _sum_via_half():
  from tinysched.tensor import Tensor
  from tinysched.dtype import dtypes
  orig = Tensor.sum
  def sum_(self, axis=None, keepdim=False, acc_dtype=None):
    if self.dtype == dtypes.float32: self = self.cast(dtypes.float16).cast(dtypes.float32)
    return orig(self, axis, keepdim, acc_dtype)
  Tensor.sum = sum_

def _adam_eps():
  from tinysched.nn import optim
  d = list(optim.Adam.__defaults__)
  d[-1] = 1e-2
  optim.Adam.__defaults__ = tuple(d)

def _gelu_rewritten():
  import math
  from tinysched.tensor import Tensor
  def gelu(self): return self * (0.5 + 0.5 * (math.sqrt(2 / math.pi) * (self + 0.044715 * self ** 3)).tanh())
  Tensor.gelu = gelu

PLANTS = {"f16_acc_in_f16": _f16_acc_in_f16, "sum_via_half": _sum_via_half, "adam_eps": _adam_eps, "gelu_rewritten": _gelu_rewritten}

if (name := os.environ.get("TINYSCHED_TEST_PLANT")):
  if name not in PLANTS: raise SystemExit(f"plants_frontend: unknown plant {name!r}")
  PLANTS[name]()
