"""The lazy graph: LazyBuffers record operations instead of running them.

A base LazyBuffer owns a device Buffer and an op over its sources; a view LazyBuffer is a
ShapeTracker over a base. Building the same op on the same sources twice returns the same
LazyBuffer (common-subexpression caching), and trivial ops on constants fold at creation.
"""
from __future__ import annotations
import contextvars, weakref
from dataclasses import dataclass
from typing import Any
from tinysched.dtype import DType, dtypes, ConstType
from tinysched.ops import Ops, GroupOp
from tinysched.uop import UOp, exec_alu, resolve, sint, sym_ne
from tinysched.reduce import reduce_identity
from tinysched.shape import ShapeTracker
from tinysched.device import Buffer, Device
from tinysched.helpers import FUSE_ARANGE, prod, all_int, getenv

@dataclass(frozen=True)
class Metadata:
  """Which Tensor method built a node (shown in schedule items and replay reports)."""
  name: str
  backward: bool = False
  def __repr__(self): return self.name + ("(bw)" if self.backward else "")

METADATA: contextvars.ContextVar[Metadata | None] = contextvars.ContextVar("METADATA", default=None)

_lazycache: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

def create_lazybuffer(device: str, st: ShapeTracker, dtype: DType, op: Ops | None = None, arg: Any = None,
                      srcs: tuple[LazyBuffer, ...] = (), base: LazyBuffer | None = None, enable_cache: bool = True) -> LazyBuffer:
  if st.size == 0 and op is not Ops.EMPTY: op, arg, srcs, base = Ops.CONST, 0, (), None
  if op is Ops.CONST: arg, enable_cache = (dtypes.as_const(arg, dtype) if not isinstance(arg, UOp) else arg), True
  # sources enter the key as weak references (looked up only, never iterated): once a scheduled buffer drops
  # its sources they die, and building the same op again makes a new buffer instead of aliasing the old one
  key_arg = (float, repr(arg)) if isinstance(arg, float) else arg
  cache_key = (device, st, dtype, op, key_arg, tuple(weakref.ref(x) for x in srcs)) if base is None else (st, weakref.ref(base))
  if enable_cache and (rret := _lazycache.get(cache_key)) is not None: return rret
  ret = LazyBuffer(device, st, dtype, op, arg, srcs, base=base, metadata=METADATA.get())
  if enable_cache: _lazycache[cache_key] = ret
  return ret

class LazyBuffer:
  def __init__(self, device: str, st: ShapeTracker, dtype: DType, op: Ops | None = None, arg: Any = None,
               srcs: tuple[LazyBuffer, ...] = (), base: LazyBuffer | None = None, metadata: Metadata | None = None):
    self.device, self.st, self.dtype, self.shape, self.size, self.metadata = device, st, dtype, st.shape, st.size, metadata
    self._base: LazyBuffer | None = None
    if base is None:
      # a base: it owns a buffer and (until it is scheduled) an op
      self.op, self.arg, self.srcs = op, arg, srcs
      if op is Ops.ASSIGN: self.buffer = srcs[0].base.buffer  # assign writes into its target's memory
      elif op is Ops.BUFFER_VIEW:
        self.buffer = Buffer(device, _max_size(self.size), dtype, base=srcs[0].base.buffer, offset=arg[1] * srcs[0].dtype.itemsize)
      else: self.buffer = Buffer(device, _max_size(self.size), dtype)
      self.forced_realize = False
    else:
      if base.base is not base: raise ValueError("a view's base must be a base LazyBuffer")
      self._base = base

  def __repr__(self) -> str:
    return f"<LB {self.device} {self.shape} {self.dtype!r} op={self.base.op if hasattr(self.base, 'op') else 'realized'}>"
  @property
  def base(self) -> LazyBuffer: return self._base if self._base is not None else self
  @property
  def realized(self) -> Buffer | None:
    """The Buffer once this base has been scheduled or loaded (it holds data after run_schedule)."""
    return self.buffer if self._base is None and "srcs" not in self.__dict__ else None  # dict lookup: no exception cost
  @property
  def is_realized(self) -> bool: return self.base.realized is not None
  @property
  def lbs(self) -> list[LazyBuffer]: return [self]

  # *** creation ***
  @staticmethod
  def metaop(op: Ops, shape: tuple[sint, ...], dtype: DType, device: str, arg: Any = None, src: tuple[LazyBuffer, ...] = (),
             enable_cache: bool = False) -> LazyBuffer:
    return create_lazybuffer(device, ShapeTracker.from_shape(shape), dtype, op, arg, src, enable_cache=enable_cache)
  @staticmethod
  def from_buffer(buf: Buffer, shape: tuple[int, ...]) -> LazyBuffer:
    """A realized LazyBuffer around an existing, filled device buffer."""
    ret = LazyBuffer(buf.device, ShapeTracker.from_shape(shape), buf.dtype, None)
    ret.buffer = buf
    del ret.srcs  # realized: nothing to schedule
    return ret
  def const_like(self, b: ConstType | UOp) -> LazyBuffer: return self.const_with_shape(b, self.shape)
  def const_with_shape(self, val: ConstType | UOp, shape: tuple[sint, ...]) -> LazyBuffer:
    return LazyBuffer.metaop(Ops.CONST, (), self.dtype, self.device, arg=val).reshape((1,)*len(shape)).expand(shape)
  @property
  def is_unrealized_const(self) -> bool: return self.base.realized is None and getattr(self.base, "op", None) is Ops.CONST \
    and not isinstance(self.base.arg, UOp)
  @property
  def is_unrealized_unmasked_const(self) -> bool: return self.is_unrealized_const and all(v.mask is None for v in self.st.views)

  def contiguous(self) -> LazyBuffer:
    if not self.st.contiguous or self.size != self.base.size or self.is_unrealized_const:
      return create_lazybuffer(self.device, ShapeTracker.from_shape(self.shape), self.dtype, Ops.CONTIGUOUS, None, (self,))
    self.base.forced_realize = True
    return self

  def cast(self, dtype: DType, bitcast: bool = False) -> LazyBuffer:
    if self.dtype == dtype: return self
    if self.is_unrealized_unmasked_const and not bitcast:
      return create_lazybuffer(self.device, self.st, dtype, Ops.CONST, dtypes.as_const(self.base.arg, dtype))
    new_shape = self.shape
    if bitcast and self.dtype.itemsize != dtype.itemsize:
      if not all_int(new_shape) or (new_shape[-1]*self.dtype.itemsize) % dtype.itemsize != 0:
        raise ValueError(f"cannot bitcast {self.dtype} of shape {self.shape} to {dtype}: the last dimension's bytes do not divide")
      new_shape = new_shape[:-1] + ((new_shape[-1]*self.dtype.itemsize) // dtype.itemsize,)
    elif getenv("CAST_BEFORE_VIEW", 1) and dtype.itemsize <= self.dtype.itemsize and self is not self.base:
      # cast before the view: moves fewer bytes when the view expands
      return self.base.cast(dtype, bitcast)._view(self.st)
    cast_op: Ops = Ops.BITCAST if bitcast else Ops.CAST
    return create_lazybuffer(self.device, ShapeTracker.from_shape(new_shape), dtype, cast_op, dtype, (self,))

  def assign(self, x: LazyBuffer) -> LazyBuffer:
    if self.size != x.size: raise ValueError(f"assign size mismatch: target {self.shape} vs value {x.shape}")
    return LazyBuffer.metaop(Ops.ASSIGN, self.shape, self.dtype, self.device, arg=() if self.st.contiguous else (self.st,),
                             src=(self.base, x), enable_cache=True)

  def copy_to_device(self, device: str) -> LazyBuffer:
    if self.device == device: return self
    # a constant is rebuilt on the other device
    if self.is_unrealized_const: return LazyBuffer.metaop(Ops.CONST, (), self.dtype, device, arg=self.base.arg)._view(self.st)
    # copy the smaller of view and base, then re-apply the view on the other side
    if resolve(prod(self.st.shape) < prod(self.base.st.shape), False): return self.contiguous()._copy(device)
    return self.base._copy(device)._view(self.st)
  def _copy(self, device: str) -> LazyBuffer:
    return create_lazybuffer(device, ShapeTracker.from_shape(self.shape), self.dtype, Ops.COPY, self.buffer.nbytes, (self,),
                             enable_cache=False)

  # *** elementwise ***
  def alu(self, op: Ops, *in_srcs: LazyBuffer) -> LazyBuffer:
    srcs = (self,) + in_srcs
    if op is Ops.WHERE:
      if srcs[0].dtype != dtypes.bool: raise TypeError(f"WHERE condition must be bool, got {srcs[0].dtype}")
      if srcs[1].dtype != srcs[2].dtype: raise TypeError(f"WHERE branches must have one dtype, got {srcs[1].dtype} and {srcs[2].dtype}")
    elif op not in (Ops.CAST, Ops.BITCAST):
      if not all(s.dtype == srcs[-1].dtype for s in srcs):
        raise TypeError(f"{op.name} needs sources of one dtype, got {', '.join(repr(s.dtype) for s in srcs)}")
    if not all(s.shape == self.shape for s in srcs):
      raise ValueError(f"{op.name} needs sources of one shape, got {', '.join(str(s.shape) for s in srcs)}")
    out_dtype = dtypes.bool if op in GroupOp.Comparison else srcs[-1].dtype
    if (folded := self._fold(op, srcs, out_dtype)) is not None: return folded
    return create_lazybuffer(self.device, ShapeTracker.from_shape(self.shape), out_dtype, op, None, srcs)

  def _fold(self, op: Ops, srcs: tuple[LazyBuffer, ...], out_dtype: DType) -> LazyBuffer | None:
    """Constant folding at creation: x+0, x*1, x*0, x//1 and ops whose every source is a constant."""
    consts = [s.base.arg if s.is_unrealized_unmasked_const else None for s in srcs]
    if all(c is not None for c in consts) and op in GroupOp.ALU:
      try: return srcs[0].cast(out_dtype).const_like(exec_alu(op, out_dtype, consts)) if out_dtype == srcs[0].dtype else \
        self.const_with_shape(0, self.shape).cast(out_dtype).const_like(exec_alu(op, out_dtype, consts))
      except (ZeroDivisionError, ValueError, OverflowError): return None
    if len(srcs) != 2: return None
    x, y = srcs
    cx, cy = consts
    if op is Ops.ADD:
      if cy is not None and cy == 0 and not isinstance(cy, bool): return x
      if cx is not None and cx == 0 and not isinstance(cx, bool): return y
    if op is Ops.MUL:
      if cy is not None and cy == 1 and not isinstance(cy, bool): return x
      if cx is not None and cx == 1 and not isinstance(cx, bool): return y
      if cy is not None and cy == 0 and not isinstance(cy, bool): return y
      if cx is not None and cx == 0 and not isinstance(cx, bool): return x
    if op is Ops.IDIV and cy is not None and cy == 1: return x
    return None

  # *** reduce ***
  def _reduce_op(self, op: Ops, axis: tuple[int, ...]) -> LazyBuffer:
    axis = tuple(sorted(x for x in axis if resolve(sym_ne(self.shape[x], 1))))
    if len(axis) == 0: return self
    return create_lazybuffer(self.device, ShapeTracker.from_shape(self.st.reduce(axis)), self.dtype, Ops.REDUCE_AXIS, (op, axis), (self,))

  def r(self, op: Ops, axis: tuple[int, ...]) -> LazyBuffer:
    new_shape = self.st.reduce(axis)
    # a reduce of zero elements is its identity
    if self.size == 0 and 0 not in new_shape:
      return self.const_with_shape(reduce_identity(op, self.dtype), new_shape)
    # a reduce over an unmasked constant is a constant
    if self.is_unrealized_unmasked_const and all_int(self.shape):
      n = prod(self.shape[i] for i in axis)
      if op is Ops.ADD: return self.const_with_shape(exec_alu(Ops.MUL, self.dtype, [self.base.arg, n]), new_shape)
      if op is Ops.MUL: return self.const_with_shape(exec_alu(Ops.MUL, self.dtype, [self.base.arg**n, 1]), new_shape)
      if op is Ops.MAX: return self.const_with_shape(self.base.arg, new_shape)
    # split a large reduce into two kernels so the first one can run in parallel; not an arange (a sum of masked
    # constants) that FUSE_ARANGE will inline: codegen folds it to a closed form, and two stages would not fold
    if not getenv("SPLIT_REDUCEOP", 1) or not all_int(self.shape) or 0 in self.shape or (FUSE_ARANGE and self.is_unrealized_const) or \
        prod(self.shape) // prod(new_shape) < getenv("REDUCEOP_SPLIT_THRESHOLD", 32768):
      return self._reduce_op(op, axis)
    biggest = min(256, 2**getenv("REDUCEOP_SPLIT_SIZE", 22) // prod(new_shape))
    strides = self.st.views[-1].strides
    candidates = [(i, d) for i in axis for d in range(biggest, 7, -1) if self.shape[i] % d == 0 and strides[i] != 0]
    if not candidates: return self._reduce_op(op, axis)
    dim, divisor = candidates[0]
    split_shape = self.shape[:dim] + (divisor, self.shape[dim] // divisor) + self.shape[dim+1:]
    order = tuple(x for x in range(len(split_shape)) if x != dim) + (dim,)
    first = self.reshape(split_shape).permute(order)._reduce_op(op, axis)
    return first._reduce_op(op, (len(new_shape),)).reshape(new_shape)

  # *** movement: views over the same base ***
  def _view(self, new_st: ShapeTracker) -> LazyBuffer:
    if self.st.size == 0 or (new_st.views[-1].mask is not None and any(_is_zero(e - b) for b, e in new_st.views[-1].mask)):
      return self.const_with_shape(0, new_st.shape)
    if new_st.contiguous and self.base.shape == new_st.shape: return self.base
    return create_lazybuffer(self.device, new_st, self.dtype, base=self.base)
  def reshape(self, arg: tuple[sint, ...]) -> LazyBuffer: return self._view(self.st.reshape(arg))
  def pad(self, arg: tuple[tuple[sint, sint], ...]) -> LazyBuffer: return self._view(self.st.pad(arg))
  def expand(self, arg: tuple[sint, ...]) -> LazyBuffer: return self._view(self.st.expand(arg))
  def permute(self, arg: tuple[int, ...]) -> LazyBuffer: return self._view(self.st.permute(arg))
  def shrink(self, arg: tuple[tuple[sint, sint], ...]) -> LazyBuffer: return self._view(self.st.shrink(arg))
  def stride(self, arg: tuple[int, ...]) -> LazyBuffer: return self._view(self.st.stride(arg))

def _is_zero(x: sint) -> bool: return (x == 0) if isinstance(x, int) else (x.vmax == 0)
def _max_size(size: sint) -> int:
  """Buffers of symbolic size are allocated for the largest value their Variables allow."""
  return size if isinstance(size, int) else int(size.vmax)

__all__ = ["LazyBuffer", "Metadata", "METADATA", "create_lazybuffer", "Device"]
