"""What a reduction means, in one place: the value it starts from and the dtype it accumulates in.

The front end (an empty reduce is its identity; gradients of expands are sums), the code generator (accumulator
registers) and the NUMPY interpreter (the execution check's reference) all ask here, so they cannot disagree.
"""
from __future__ import annotations
from tinysched.dtype import DType, ConstType, dtypes
from tinysched.ops import Ops

def reduce_identity(op: Ops, dtype: DType) -> ConstType:
  """The value a reduce of zero elements gives, typed for `dtype` (False/True for bool sums and products)."""
  if op is Ops.ADD: return dtypes.as_const(0, dtype)
  if op is Ops.MUL: return dtypes.as_const(1, dtype)
  if op is Ops.MAX: return dtypes.min(dtype)
  raise ValueError(f"{op} is not a reduce op (ADD, MUL or MAX)")

def acc_dtype(dtype: DType) -> DType:
  """The dtype a sum over `dtype` is accumulated in: half sums run in float32 so they neither overflow nor lose
  the small terms; every other dtype accumulates in itself."""
  return dtypes.float32 if dtype == dtypes.float16 else dtype

def output_dtype(dtype: DType) -> DType:
  """The dtype `Tensor.sum`/`prod` return by default: bools and small ints in int32, small unsigned ints in uint32
  (as tinygrad does), everything else keeps its dtype."""
  if dtypes.is_unsigned(dtype): return dtypes.uint32 if dtype.itemsize <= 4 else dtype
  if dtypes.is_int(dtype) or dtypes.is_bool(dtype): return dtypes.int32 if dtype.itemsize <= 4 else dtype
  return dtype
