"""The lazy graph: LazyBuffers record operations instead of running them.

A base LazyBuffer owns a device Buffer and an op over its sources; a view LazyBuffer is a
ShapeTracker over a base. Building the same op on the same sources twice returns the same
LazyBuffer (common-subexpression caching), and trivial ops on constants fold at creation.
"""
from __future__ import annotations
import contextvars, itertools, weakref
from dataclasses import dataclass
from typing import Any, Callable
from tinysched.dtype import DType, dtypes, ConstType
from tinysched.ops import Ops, GroupOp
from tinysched.uop import UOp, exec_alu, resolve, sint, sym_ne
from tinysched.reduce import reduce_identity
from tinysched.shape import ShapeTracker
from tinysched.device import Buffer, Device
from tinysched.helpers import FUSE_ARANGE, prod, all_int, getenv, cdiv, cmod

@dataclass(frozen=True)
class Metadata:
  """Which Tensor method built a node (shown in schedule items and replay reports)."""
  name: str
  backward: bool = False
  def __repr__(self): return self.name + ("(bw)" if self.backward else "")

METADATA: contextvars.ContextVar[Metadata | None] = contextvars.ContextVar("METADATA", default=None)

# Interning: the live LazyBuffer of every cached node, by its identity key (see _node_key)
_lazycache: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

def _node_key(device: str, st: ShapeTracker, dtype: DType, op: Ops | None, arg: Any, srcs: tuple[LazyBuffer, ...],
              base: LazyBuffer | None) -> tuple:
  """What makes two LazyBuffers the same node.

  A view is its ShapeTracker over its base. A base is where it lives, what it computes and from what. Sources and
  bases enter as weak references (hashed and compared, never iterated): once a scheduled buffer drops its sources
  they die, and building the same op again makes a new buffer instead of aliasing the old one. A float arg is keyed
  by its repr, so that -0.0 and 0.0 stay apart and a nan finds itself."""
  if base is not None: return (st, weakref.ref(base))
  return (device, st, dtype, op, (float, repr(arg)) if isinstance(arg, float) else arg, tuple(map(weakref.ref, srcs)))

def create_lazybuffer(device: str, st: ShapeTracker, dtype: DType, op: Ops | None = None, arg: Any = None,
                      srcs: tuple[LazyBuffer, ...] = (), base: LazyBuffer | None = None, enable_cache: bool = True) -> LazyBuffer:
  """The LazyBuffer for a node: the live one when an equal node exists (and caching is on), else a new one.

  Two rules come first: a node of no elements is the constant 0 (there is nothing to compute), and constants are
  always interned, with their value in the dtype's python type."""
  if op is not Ops.EMPTY and st.size == 0: op, arg, srcs, base = Ops.CONST, 0, (), None
  if op is Ops.CONST:
    enable_cache = True
    if not isinstance(arg, UOp): arg = dtypes.as_const(arg, dtype)
  def build() -> LazyBuffer: return LazyBuffer(device, st, dtype, op, arg, srcs, base=base, metadata=METADATA.get())
  if not enable_cache: return build()
  key = _node_key(device, st, dtype, op, arg, srcs, base)
  if (node := _lazycache.get(key)) is None: node = _lazycache[key] = build()
  return node

def _storage(device: str, dtype: DType, size: sint, op: Ops | None, arg: Any, srcs: tuple[LazyBuffer, ...]) -> Buffer:
  """The device memory a base writes: its target's for an assign, a window into its source's for a BUFFER_VIEW
  (arg[1] is the element offset in the source's dtype), else a new Buffer of its own."""
  if op is Ops.ASSIGN: return srcs[0].base.buffer
  n = _max_size(size)
  if op is not Ops.BUFFER_VIEW: return Buffer(device, n, dtype)
  src = srcs[0]
  return Buffer(device, n, dtype, base=src.base.buffer, offset=arg[1] * src.dtype.itemsize)

def _scalar(device: str, dtype: DType, val: ConstType | UOp) -> LazyBuffer:
  """The 0-d constant node of val; views of it make every other constant."""
  return create_lazybuffer(device, ShapeTracker.from_shape(()), dtype, Ops.CONST, val)

def _movement(name: str):
  """The LazyBuffer method for ShapeTracker movement `name`: the same base seen through the moved ShapeTracker."""
  st_move = getattr(ShapeTracker, name)
  def move(self: LazyBuffer, arg) -> LazyBuffer:
    new_st = st_move(self.st, arg)
    return self._view(new_st)
  move.__name__, move.__qualname__ = name, f"LazyBuffer.{name}"
  return move

class LazyBuffer:
  """A node of the lazy graph: a base (an op over sources, with the Buffer it will fill) or a view of a base."""
  def __init__(self, device: str, st: ShapeTracker, dtype: DType, op: Ops | None = None, arg: Any = None,
               srcs: tuple[LazyBuffer, ...] = (), base: LazyBuffer | None = None, metadata: Metadata | None = None):
    self.device, self.st, self.dtype, self.metadata = device, st, dtype, metadata
    self.shape, self.size = st.shape, st.size
    if base is not None:
      if base.base is not base: raise ValueError("a view's base must be a base LazyBuffer")
      self._base: LazyBuffer | None = base
      return
    # a base: it owns a buffer and, until it is scheduled (which deletes srcs), an op
    self._base, self.op, self.arg, self.srcs, self.forced_realize = None, op, arg, srcs, False
    self.buffer = _storage(device, dtype, self.size, op, arg, srcs)

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
    """val everywhere in `shape`: the scalar constant reshaped to all-ones dims, then expanded."""
    ones = tuple(1 for _ in shape)
    return _scalar(self.device, self.dtype, val).reshape(ones).expand(shape)

  def _const_view(self, unmasked: bool) -> bool:
    """Whether this views an unscheduled CONST of a concrete value (not a bound Variable's UOp): the nodes that
    creation-time folding can compute with. `unmasked`: no view has a mask, so no element is padding's 0."""
    b = self.base
    if b.op is not Ops.CONST or b.realized is not None or isinstance(b.arg, UOp): return False
    return not unmasked or not any(v.mask is not None for v in self.st.views)
  @property
  def is_unrealized_const(self) -> bool: return self._const_view(unmasked=False)
  @property
  def is_unrealized_unmasked_const(self) -> bool: return self._const_view(unmasked=True)

  def contiguous(self) -> LazyBuffer:
    """This data in a buffer of its own layout. A view that is already its whole base in order is the base, which is
    then marked to be realized; anything else (reordered, masked, a part, or a constant) becomes a CONTIGUOUS node."""
    if self.st.contiguous and self.size == self.base.size and not self.is_unrealized_const:
      self.base.forced_realize = True
      return self
    return self._over(Ops.CONTIGUOUS)

  def cast(self, dtype: DType, bitcast: bool = False) -> LazyBuffer:
    """A CAST (or BITCAST) node; constants fold to the constant in the new dtype. A cast that does not widen is applied to
    the base under the same view (it moves fewer bytes when the view expands); a bitcast that changes the item size
    rescales the last dim and cannot move past a view."""
    if dtype == self.dtype: return self
    if not bitcast and self.is_unrealized_unmasked_const:
      return create_lazybuffer(self.device, self.st, dtype, Ops.CONST, dtypes.as_const(self.base.arg, dtype))
    resizes = bitcast and dtype.itemsize != self.dtype.itemsize
    if not resizes and self.base is not self and dtype.itemsize <= self.dtype.itemsize and getenv("CAST_BEFORE_VIEW", 1):
      return self.base.cast(dtype, bitcast)._view(self.st)
    return self._over(Ops.BITCAST if bitcast else Ops.CAST, dtype, dtype, self._bitcast_shape(dtype) if resizes else None)
  def _bitcast_shape(self, dtype: DType) -> tuple[sint, ...]:
    last_bytes = self.shape[-1] * self.dtype.itemsize
    if not all_int(self.shape) or last_bytes % dtype.itemsize:
      raise ValueError(f"cannot bitcast {self.dtype} of shape {self.shape} to {dtype}: the last dimension's bytes do not divide")
    return (*self.shape[:-1], last_bytes // dtype.itemsize)

  def assign(self, x: LazyBuffer) -> LazyBuffer:
    """Write x into this buffer's memory. The node is the target's shape; a target that is not a plain contiguous view
    keeps its ShapeTracker in the arg, and the store goes through it."""
    if self.size != x.size: raise ValueError(f"assign size mismatch: target {self.shape} vs value {x.shape}")
    through = () if self.st.contiguous else (self.st,)
    return create_lazybuffer(self.device, ShapeTracker.from_shape(self.shape), self.dtype, Ops.ASSIGN, through, (self.base, x))

  def copy_to_device(self, device: str) -> LazyBuffer:
    """This data on another device. A constant is made again there; otherwise the smaller of the view (made contiguous)
    and its base is copied, and in the base's case the view is applied again on the other side."""
    if device == self.device: return self
    if self.is_unrealized_const: return _scalar(device, self.dtype, self.base.arg)._view(self.st)
    view_is_smaller = resolve(prod(self.st.shape) < prod(self.base.st.shape), False)
    src = self.contiguous() if view_is_smaller else self.base
    # a COPY is never interned, every copy is its own transfer (arg: the bytes moved)
    moved = LazyBuffer.metaop(Ops.COPY, src.shape, src.dtype, device, arg=src.buffer.nbytes, src=(src,))
    return moved if view_is_smaller else moved._view(self.st)

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
    """Constant folding at creation: x+0, x*1, integer x*0, x//1 and ops whose every source is a constant."""
    consts: list[Any] = [s.base.arg if s.is_unrealized_unmasked_const else None for s in srcs]
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
      # x * 0 is 0 only for ints and bools: a float inf or nan times 0 is nan (tinygrad 0.10.0 folds floats too)
      if cy is not None and cy == 0 and not isinstance(cy, bool) and not dtypes.is_float(out_dtype): return y
      if cx is not None and cx == 0 and not isinstance(cx, bool) and not dtypes.is_float(out_dtype): return x
    if op is Ops.IDIV and cy is not None and cy == 1: return x
    return None

  # *** reduce ***
  def _reduce_op(self, op: Ops, axis: tuple[int, ...]) -> LazyBuffer:
    """One REDUCE_AXIS node (dims kept) over the axes of `axis` whose size is not 1, ascending; with none, nothing to do."""
    live = tuple(sorted(a for a in axis if resolve(sym_ne(self.shape[a], 1))))
    return self._over(Ops.REDUCE_AXIS, (op, live), shape=self.st.reduce(live)) if live else self

  def r(self, op: Ops, axis: tuple[int, ...]) -> LazyBuffer:
    """Reduce over axis with op, dims kept. Folded at creation: a reduce of no elements is op's identity and a reduce of
    a constant is a constant. A big reduce runs as two stages (see _split_point), anything else as one REDUCE_AXIS."""
    out_shape = self.st.reduce(axis)
    if self.size == 0 and 0 not in out_shape: return self.const_with_shape(reduce_identity(op, self.dtype), out_shape)
    if self.is_unrealized_unmasked_const and all_int(self.shape) and (value := self._reduced_const(op, axis)) is not None:
      return self.const_with_shape(value, out_shape)
    if (point := self._split_point(axis, out_shape)) is None: return self._reduce_op(op, axis)
    # axis a is viewed as (f, rest) and f moved last: stage one reduces `axis` (of which a is now the rest) for each
    # of the f slices, stage two reduces the f partial results
    a, f = point
    split_shape = (*self.shape[:a], f, self.shape[a] // f, *self.shape[a + 1:])
    f_last = (*range(a), *range(a + 1, len(split_shape)), a)
    partial = self.reshape(split_shape).permute(f_last)._reduce_op(op, axis)
    return partial._reduce_op(op, (len(out_shape),)).reshape(out_shape)

  def _reduced_const(self, op: Ops, axis: tuple[int, ...]) -> ConstType | None:
    """This constant c reduced over n = (elements per output) copies: c*n for a sum, c**n for a product, c for a max.
    The products go through exec_alu so they wrap like the dtype does."""
    c, n = self.base.arg, prod(self.shape[i] for i in axis)
    if op is Ops.MAX: return c
    if op is Ops.ADD: return exec_alu(Ops.MUL, self.dtype, [c, n])
    if op is Ops.MUL: return exec_alu(Ops.MUL, self.dtype, [c**n, 1])
    return None

  def _split_point(self, axis: tuple[int, ...], out_shape: tuple[sint, ...]) -> tuple[int, int] | None:
    """Where to split a big reduce into two kernels, so the first one runs in parallel: (axis, factor), or None.

    Not split: with SPLIT_REDUCEOP=0, symbolic or empty shapes, fewer than REDUCEOP_SPLIT_THRESHOLD (32768) inputs per
    output, or an arange (a sum of masked constants) that FUSE_ARANGE will inline: codegen folds it to a closed form,
    which two stages would not. Else the first axis, in `axis` order, that is not broadcast (stride 0: nothing to gain)
    and has a divisor in [8, cap], with cap = min(256, 2**REDUCEOP_SPLIT_SIZE // outputs); the factor is the largest one."""
    if not getenv("SPLIT_REDUCEOP", 1) or not all_int(self.shape) or 0 in self.shape: return None
    if FUSE_ARANGE and self.is_unrealized_const: return None
    outputs = prod(out_shape)
    if prod(self.shape) // outputs < getenv("REDUCEOP_SPLIT_THRESHOLD", 32768): return None
    cap = min(256, 2**getenv("REDUCEOP_SPLIT_SIZE", 22) // outputs)
    strides = self.st.views[-1].strides
    for ax in axis:
      if strides[ax] == 0: continue
      if (f := next((f for f in range(cap, 7, -1) if self.shape[ax] % f == 0), None)) is not None: return ax, f
    return None

  # *** movement: views over the same base ***
  def _view(self, new_st: ShapeTracker) -> LazyBuffer:
    """The base seen through new_st. Nothing to see (an empty source, or a mask that leaves no valid element: all
    padding) is the constant 0; the identity view is the base itself."""
    if _sees_nothing(self.st, new_st): return self.const_with_shape(0, new_st.shape)
    base = self.base
    identity = new_st.contiguous and base.shape == new_st.shape
    return base if identity else create_lazybuffer(self.device, new_st, self.dtype, base=base)
  reshape = _movement("reshape")
  pad = _movement("pad")
  expand = _movement("expand")
  permute = _movement("permute")
  shrink = _movement("shrink")
  stride = _movement("stride")

  def _over(self, op: Ops, arg: Any = None, dtype: DType | None = None, shape: tuple[sint, ...] | None = None) -> LazyBuffer:
    """A new base computing op over this node alone (by default in its dtype and shape), laid out contiguously."""
    st = ShapeTracker.from_shape(self.shape if shape is None else shape)
    return create_lazybuffer(self.device, st, self.dtype if dtype is None else dtype, op, arg, (self,))

def _upper(x: sint) -> ConstType:
  """The largest value of a size: itself, or for a symbolic one the most its Variables allow."""
  return x if isinstance(x, int) else x.vmax
def _sees_nothing(src: ShapeTracker, new: ShapeTracker) -> bool:
  """Whether a view `new` of data laid out by `src` shows no element of it: src is empty, or new's mask is all padding
  (some dim's valid range [lo, hi) is empty)."""
  if src.size == 0: return True
  mask = new.views[-1].mask
  return mask is not None and any(_upper(hi - lo) == 0 for lo, hi in mask)
_EXACT: dict[Ops, Callable[[int, int], int]] = {Ops.ADD: lambda a, b: a + b, Ops.MUL: lambda a, b: a * b, Ops.MAX: max,
          Ops.IDIV: lambda a, b: cdiv(a, b) if b else 0, Ops.MOD: lambda a, b: cmod(a, b) if b else 0}

def _max_size(size: sint) -> int:
  """Buffers of symbolic size are allocated for the largest value their Variables allow: the size evaluated in exact
  integers at every corner of the Variables' ranges (a size's vmax is computed in its int32 dtype, which saturates at
  2**31-1 once the product can wrap: `n*4096` for n up to 2**20 would have allocated half of what its kernel writes)."""
  if isinstance(size, int): return size
  vs = sorted({u for u in size.toposort() if u.op is Ops.DEFINE_VAR}, key=lambda u: u.arg[0])
  if len(vs) > 8 or any(u.op not in _EXACT and u.op not in (Ops.CONST, Ops.DEFINE_VAR, Ops.BIND) for u in size.toposort()):
    return int(_upper(size))  # (a form sizes do not take: the dtype's bound, as before)
  best = None
  for corner in itertools.product(*[(v.arg[1], v.arg[2]) for v in vs]):
    vals: dict[UOp, int] = dict(zip(vs, corner))
    for u in size.toposort():
      if u.op is Ops.CONST: vals[u] = int(u.arg)
      elif u.op is Ops.BIND: vals[u] = vals[u.src[0]]
      elif u.op is not Ops.DEFINE_VAR: vals[u] = _EXACT[u.op](*(vals[s] for s in u.src))
    best = vals[size] if best is None else max(best, vals[size])
  return int(best) if best is not None else int(_upper(size))

__all__ = ["LazyBuffer", "Metadata", "METADATA", "create_lazybuffer", "Device"]
