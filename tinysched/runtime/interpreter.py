"""The NUMPY device: a reference interpreter that executes kernel ASTs directly with vectorized numpy.

Every node evaluates to an array of its own shape: a LOAD gathers through its view's (index, valid)
expressions (the same expressions codegen uses), a REDUCE_AXIS reduces with keepdims, a STORE
scatters through its view. It is the oracle OpenCL kernels are checked against, so it favours
clarity and exactness over speed.

Accumulation: REDUCE_AXIS on float16 accumulates in float32 and rounds once at the end (what the
OpenCL kernels do); float32 and float64 accumulate in their own dtype with numpy's pairwise
summation; integers wrap in their own dtype.
"""
from __future__ import annotations
from typing import Any
import numpy as np
from tinysched.dtype import DType, dtypes
from tinysched.ops import Ops
from tinysched.uop import UOp, Variable, sym_infer
from tinysched.symeval import eval_np
from tinysched.device import Backend, Buffer

class InterpreterError(RuntimeError): pass

_index_cache: dict[tuple[UOp, int], tuple[UOp, UOp, tuple[UOp, ...]]] = {}

def view_indices(view: UOp, var_vals: dict[UOp, int]) -> tuple[tuple[int, ...], np.ndarray, np.ndarray]:
  """(shape, flat buffer index, validity) of every position of a source-free VIEW node."""
  st = view.arg
  shape = tuple(sym_infer(s, var_vals) for s in st.shape)
  key = (view, len(shape))
  if (c := _index_cache.get(key)) is None:
    idxs = tuple(Variable(f"_i{i}", 0, max(int(s.vmax) if isinstance(s, UOp) else s, 1) - 1) for i, s in enumerate(st.shape))
    idx, valid = st.to_indexed_uops(list(idxs))
    c = _index_cache[key] = (idx, valid, idxs)
  idx, valid, idxs = c
  grids = np.indices(shape, dtype=np.int64) if len(shape) else np.zeros((0,), dtype=np.int64)
  env: dict[UOp, Any] = {**var_vals, **{v: grids[i] for i, v in enumerate(idxs)}}
  i_arr = np.broadcast_to(np.asarray(eval_np(idx, env), dtype=np.int64), shape)
  v_arr = np.broadcast_to(np.asarray(eval_np(valid, env), dtype=bool), shape)
  return shape, i_arr, v_arr

def _np_dtype(d: DType) -> np.dtype: return np.dtype(d.scalar().fmt)

def _idiv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  if np.issubdtype(np.result_type(a, b), np.floating): return np.trunc(a / b)
  safe_b = np.where(b == 0, 1, b)
  q = np.abs(a) // np.abs(safe_b)
  return np.where(b == 0, 0, np.where((a < 0) != (safe_b < 0), -q, q))

def _alu(op: Ops, dtype: DType, srcs: list[np.ndarray]) -> np.ndarray:
  is_bool = dtypes.is_bool(dtype)
  if op is Ops.NEG: return np.logical_not(srcs[0]) if is_bool else np.negative(srcs[0])
  if op is Ops.EXP2: return np.exp2(srcs[0])
  if op is Ops.LOG2: return np.log2(srcs[0])
  if op is Ops.SIN: return np.sin(srcs[0])
  if op is Ops.SQRT: return np.sqrt(srcs[0])
  if op is Ops.RECIP: return np.reciprocal(srcs[0]) if dtypes.is_float(dtype) else _idiv(np.ones_like(srcs[0]), srcs[0])
  if op is Ops.ADD: return np.logical_or(*srcs) if is_bool else np.add(*srcs)
  if op is Ops.MUL: return np.logical_and(*srcs) if is_bool else np.multiply(*srcs)
  if op is Ops.IDIV: return _idiv(*srcs)
  if op is Ops.MOD: return np.fmod(srcs[0], np.where(srcs[1] == 0, 1, srcs[1])) * (srcs[1] != 0)
  if op is Ops.MAX: return np.maximum(*srcs)
  if op is Ops.CMPLT: return np.less(*srcs)
  if op is Ops.CMPNE: return np.not_equal(*srcs)
  if op is Ops.AND: return np.bitwise_and(*srcs)
  if op is Ops.OR: return np.bitwise_or(*srcs)
  if op is Ops.XOR: return np.bitwise_xor(*srcs)
  if op is Ops.SHL: return np.left_shift(*srcs)
  if op is Ops.SHR: return np.right_shift(*srcs)
  if op is Ops.WHERE: return np.where(*srcs)
  if op is Ops.MULACC: return srcs[0]*srcs[1] + srcs[2]
  raise InterpreterError(f"the interpreter has no rule for {op}")

def _reduce(op: Ops, x: np.ndarray, axes: tuple[int, ...], dtype: DType) -> np.ndarray:
  acc = np.float32 if dtype.scalar() == dtypes.float16 else _np_dtype(dtype)
  x = x.astype(acc, copy=False)
  if op is Ops.ADD: r = np.add.reduce(x, axis=axes, keepdims=True, dtype=acc)
  elif op is Ops.MUL: r = np.multiply.reduce(x, axis=axes, keepdims=True, dtype=acc)
  elif op is Ops.MAX:
    if x.size == 0: r = np.full([1 if i in axes else s for i, s in enumerate(x.shape)], dtypes.min(dtype), dtype=acc)
    else: r = np.maximum.reduce(x, axis=axes, keepdims=True)
  else: raise InterpreterError(f"the interpreter cannot reduce with {op}")
  return r.astype(_np_dtype(dtype))

def exec_ast(ast: UOp, bufs: list[np.ndarray], var_vals: dict[UOp, int]) -> None:
  """Run one kernel AST on flat numpy buffers (bufs[i] is DEFINE_GLOBAL i), in place."""
  if ast.op is Ops.COPY:
    bufs[0][:] = bufs[1].view(bufs[0].dtype)[:bufs[0].size] if bufs[1].dtype != bufs[0].dtype else bufs[1][:bufs[0].size]
    return
  if ast.op in (Ops.EMPTY, Ops.BUFFER_VIEW): return
  if ast.op is not Ops.SINK: raise InterpreterError(f"kernel AST must be a SINK, got {ast.op}")
  vals: dict[UOp, Any] = {}
  with np.errstate(all="ignore"):
    for u in ast.toposort():
      op = u.op
      if op in (Ops.DEFINE_GLOBAL, Ops.VIEW, Ops.SINK): continue
      if op is Ops.CONST: vals[u] = np.array(u.arg, dtype=_np_dtype(u.dtype))
      elif op is Ops.DEFINE_VAR: vals[u] = np.array(var_vals[u], dtype=_np_dtype(u.dtype))
      elif op is Ops.VALID: vals[u] = view_indices(u.src[0], var_vals)[2]
      elif op is Ops.LOAD:
        buf = bufs[u.src[0].arg]
        shape, idx, valid = view_indices(u.src[1], var_vals)
        if buf.size == 0: vals[u] = np.zeros(shape, dtype=buf.dtype)
        else: vals[u] = np.where(valid, buf[np.clip(idx, 0, buf.size - 1)], np.zeros((), dtype=buf.dtype))
      elif op is Ops.STORE:
        buf = bufs[u.src[0].arg]
        shape, idx, valid = view_indices(u.src[1], var_vals)
        val = np.broadcast_to(vals[u.src[2]], shape).astype(buf.dtype, copy=False)
        buf[idx[valid]] = val[valid]
      elif op is Ops.REDUCE_AXIS: vals[u] = _reduce(u.arg[0], vals[u.src[0]], u.arg[1], u.dtype)
      elif op is Ops.CAST: vals[u] = vals[u.src[0]].astype(_np_dtype(u.dtype))
      elif op is Ops.BITCAST:
        src = np.ascontiguousarray(vals[u.src[0]])
        vals[u] = src.view(_np_dtype(u.dtype))
      elif op is Ops.BIND: vals[u] = np.array(u.src[1].arg, dtype=_np_dtype(u.dtype))
      else:
        res = _alu(op, u.dtype, [vals[s] for s in u.src])
        vals[u] = np.asarray(res).astype(_np_dtype(u.dtype), copy=False)

class NumpyBackend(Backend):
  def __init__(self, name: str = "NUMPY"): self.name = name
  def alloc(self, size: int, dtype: DType) -> np.ndarray: return np.zeros(size, dtype=_np_dtype(dtype))
  def copyin(self, handle: np.ndarray, src: np.ndarray) -> None: handle[:] = src
  def copyout(self, handle: np.ndarray, size: int, dtype: DType) -> np.ndarray: return handle[:size].copy()
  def exec_ast(self, ast: UOp, bufs: list[Buffer], var_vals: dict[UOp, int]) -> None:
    exec_ast(ast, [b.handle if b._base is None else _sub(b) for b in bufs], var_vals)

def _sub(b: Buffer) -> np.ndarray:
  base = b.base.handle
  return base.view(np.uint8)[b.offset:b.offset + b.nbytes].view(_np_dtype(b.dtype))
