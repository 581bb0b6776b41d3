"""Vectorized numpy evaluation of integer/bool UOp expressions (index and validity expressions).

Used by property tests and by the numpy reference interpreter of kernel ASTs, so it evaluates a
whole grid of loop indices at once: every RANGE/SPECIAL/DEFINE_VAR takes an array (or int) from
`env` and every op is one numpy call over int64 arrays. IDIV/MOD follow C (truncation) like the IR.
"""
from __future__ import annotations
from typing import Callable, TypeGuard, Union
import numpy as np
from tinysched.dtype import dtypes
from tinysched.ops import Ops
from tinysched.uop import UOp
from tinysched.helpers import cdiv, cmod

Value = Union[np.ndarray, int, bool]

def _as_val(v) -> Value:
  # env values: python scalars stay scalars (cheap), arrays become int64 (or bool) so arithmetic never overflows int32
  if isinstance(v, (bool, np.bool_)): return bool(v)
  if isinstance(v, (int, np.integer)): return int(v)
  a = np.asarray(v)
  if a.dtype == np.bool_: return a
  if not np.issubdtype(a.dtype, np.integer): raise TypeError(f"eval_np needs integer or bool values, got an array of {a.dtype}")
  return a.astype(np.int64, copy=False)

def _scalar(x) -> TypeGuard[int]: return not isinstance(x, np.ndarray)  # a Value that is no array: an int or a bool

def _idiv(a: Value, b: Value) -> Value:
  if _scalar(a) and _scalar(b): return cdiv(a, b) if b != 0 else 0
  if _scalar(b):
    if b == 0: return np.zeros(np.shape(a), np.int64)
    q = np.floor_divide(a, b)
    # floor -> truncation: round up where the division was inexact and the signs differ
    if b > 0: return q + ((a < 0) & (q*b != a))
    return q + ((a > 0) & (q*b != a))
  a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
  safe = np.where(b == 0, 1, b)
  q = np.floor_divide(a, safe)
  q = q + (((a < 0) != (safe < 0)) & (q*safe != a))
  return np.where(b == 0, 0, q)  # x//0 is 0 like the scalar folding in uop._PY_ALU

def _mod(a: Value, b: Value) -> Value:
  if _scalar(a) and _scalar(b): return cmod(a, b) if b != 0 else 0
  q = _idiv(a, b)
  r = a - q*b
  return np.where(np.asarray(b) == 0, 0, r) if not _scalar(b) else (r if b != 0 else np.zeros(np.shape(a), np.int64))

def _neg(a: Value) -> Value:
  if isinstance(a, (bool, np.bool_)) or (isinstance(a, np.ndarray) and a.dtype == np.bool_): return np.logical_not(a) if not _scalar(a) else (not a)
  return -a

def _where(c: Value, x: Value, y: Value) -> Value:
  if _scalar(c): return x if c else y
  return np.where(c, x, y)

def _cast(x: Value, dtype) -> Value:
  if dtypes.is_bool(dtype): return bool(x) if _scalar(x) else np.asarray(x) != 0
  if dtypes.is_int(dtype): return int(x) if _scalar(x) else np.asarray(x).astype(np.int64)
  raise ValueError(f"eval_np only casts to int or bool, not {dtype}")

def _max(a: Value, b: Value) -> Value: return max(a, b) if _scalar(a) and _scalar(b) else np.maximum(a, b)
def _lt(a: Value, b: Value) -> Value: return a < b
def _ne(a: Value, b: Value) -> Value: return a != b

_BINARY: dict[Ops, Callable[[Value, Value], Value]] = {
  Ops.ADD: lambda a, b: a + b, Ops.MUL: lambda a, b: a * b, Ops.IDIV: _idiv, Ops.MOD: _mod, Ops.MAX: _max,
  Ops.CMPLT: _lt, Ops.CMPNE: _ne, Ops.AND: lambda a, b: a & b, Ops.OR: lambda a, b: a | b, Ops.XOR: lambda a, b: a ^ b,
}

def _leaf_name(u: UOp) -> str:
  if u.op is Ops.DEFINE_VAR: return f"Variable {u.arg[0]!r}"
  if u.op is Ops.RANGE: return f"RANGE {u.arg!r}"
  if u.op is Ops.SPECIAL: return f"SPECIAL {u.arg[0]!r}"
  return str(u.op)

def eval_np(u: UOp, env: dict[UOp, Value]) -> Value:
  """Evaluate `u` with numpy; `env` gives values (ints or same-shaped integer arrays) for its
  DEFINE_VARs, RANGEs and SPECIALs (a BIND uses its bound value unless env overrides it).
  Returns a python int/bool when every input is a scalar, else an int64 or bool array."""
  vals: dict[UOp, Value] = {}
  topo = u.toposort()
  for n in topo:  # children first: every source is already in vals; no recursion on deep graphs
    op = n.op
    if op is Ops.CONST:
      if not isinstance(n.arg, (int, bool)): raise ValueError(f"eval_np evaluates integer expressions, got constant {n.arg!r}")
      vals[n] = n.arg
    elif op in (Ops.DEFINE_VAR, Ops.RANGE, Ops.SPECIAL):
      if n in env: vals[n] = _as_val(env[n])
      # a Variable seen only inside BINDs needs no value: only a real use of it is an error
      elif n is u or any(n in x.src for x in topo if x.op is not Ops.BIND): raise KeyError(f"eval_np: no value for {_leaf_name(n)} in env")
    elif op is Ops.BIND: vals[n] = _as_val(env[n]) if n in env else n.src[1].arg
    elif (fn := _BINARY.get(op)) is not None: vals[n] = fn(vals[n.src[0]], vals[n.src[1]])
    elif op is Ops.NEG: vals[n] = _neg(vals[n.src[0]])
    elif op is Ops.WHERE: vals[n] = _where(vals[n.src[0]], vals[n.src[1]], vals[n.src[2]])
    elif op is Ops.CAST: vals[n] = _cast(vals[n.src[0]], n.dtype)
    else: raise ValueError(f"eval_np cannot evaluate {op} (only integer/bool index arithmetic)")
  ret = vals[u]
  # numpy scalars (from e.g. np.int64 env entries) come back as python ones: one result type per shape kind
  if isinstance(ret, np.generic): return ret.item()
  return ret

__all__ = ["eval_np"]
