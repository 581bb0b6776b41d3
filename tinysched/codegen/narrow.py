"""Narrowing: a lowered program's 64-bit index arithmetic gets back 32-bit types wherever its exact value ranges allow.

A node is narrowed when it is a pure function of thread ids, loop counters and Variables (index arithmetic and the
validity tests over it) and its exact range, and its integer operands' ranges, fit int32: the int op then computes
exactly the 64-bit value. Everything else keeps int64; casts join 32- and 64-bit values right after their source.
"""
from __future__ import annotations
from tinysched.dtype import DType, dtypes
from tinysched.ops import Ops, GroupOp
from tinysched.uop import UOp

NARROW = dtypes.int32
INT32_MIN, INT32_MAX = -2**31, 2**31 - 1

_PURE_LEAVES = frozenset({Ops.SPECIAL, Ops.RANGE, Ops.DEFINE_VAR})
# signed or at most 32-bit unsigned: every value converts to int64 exactly
_EXACT_IN_I64 = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32)

def fits32(lo, hi) -> bool: return INT32_MIN <= lo and hi <= INT32_MAX

class Narrowing:
  """One pass over a linear program (lowerer.narrow_indices). `pick32(node, fits)` is the 32-bit decision (a hook tests
  replace); `wide` is the dtype the index arithmetic was built in. `new` maps every original node to its new one."""
  def __init__(self, uops: list[UOp], pick32, wide: DType):
    self.pick32, self.wide = pick32, wide
    self.pure: dict[UOp, bool] = {}
    self.new: dict[UOp, UOp] = {}
    self.slots: list[list[UOp]] = []   # one slot per emitted node: the node, then the casts of it
    self.slot_of: dict[UOp, int] = {}
    self.uops = uops

  def is_pure(self, u: UOp) -> bool:
    # an integer/bool function of thread ids, loop counters and Variables only (no memory, no accumulators)
    if u.op is Ops.CONST: return True
    return self.pure.get(u, False)

  def fits(self, u: UOp) -> bool:
    """u's exact value range (computed on the 64-bit graph) is inside int32; never for a non-integer."""
    return dtypes.is_int(u.dtype) and fits32(u.vmin, u.vmax)

  def val(self, s: UOp, want: DType) -> UOp:
    """The new program's value of original node s, in dtype `want` (a cast, emitted right after its source)."""
    if s.op is Ops.CONST: return UOp.const(want, s.arg) if dtypes.is_int(want) and dtypes.is_int(s.dtype) else s
    n = self.new[s]
    if n.dtype == want or not (dtypes.is_int(n.dtype) and dtypes.is_int(want)): return n
    if n.op is Ops.CONST: return UOp.const(want, n.arg)
    c = UOp(Ops.CAST, want, (n,))
    if c not in self.slot_of:
      i = self.slot_of[n]
      self.slots[i].append(c)
      self.slot_of[c] = i
    return c

  def emit(self, n: UOp) -> None:
    if n in self.slot_of: return  # the same node twice (two originals narrowed to one): its first place computes it
    self.slot_of[n] = len(self.slots)
    self.slots.append([n])

  def one(self, u: UOp) -> UOp:
    op = u.op
    if op in _PURE_LEAVES or ((op in GroupOp.ALU or op is Ops.CAST) and all(self.is_pure(s) for s in u.src)):
      self.pure[u] = dtypes.is_int(u.dtype) or dtypes.is_bool(u.dtype)
    int_srcs = [s for s in u.src if dtypes.is_int(s.dtype)]
    wide_node = self.pure.get(u, False) and (u.dtype == self.wide or (dtypes.is_bool(u.dtype) and bool(int_srcs) and
                                                                 all(s.dtype == self.wide for s in int_srcs)))
    if wide_node:
      if op is Ops.SPECIAL: return u.replace(dtype=NARROW) if self.pick32(u, fits32(u.vmin, u.vmax)) else u
      if op is Ops.RANGE:
        # the loop counter is incremented once past its last value: that one must fit too
        calc = NARROW if self.pick32(u, fits32(u.vmin, u.vmax + 1)) else self.wide
        return UOp(op, calc, tuple(self.val(s, calc) for s in u.src), u.arg)
      if op is Ops.DEFINE_VAR: return u
      if op is Ops.CAST and u.src[0].dtype in _EXACT_IN_I64:
        # a widening cast is only a change of type: the source value is exact either way
        return self.val(u.src[0], NARROW if self.pick32(u, self.fits(u) and self.fits(u.src[0])) else self.wide)
      # a 32-bit op on exact 32-bit operands is exact when its own result fits 32 bits
      ok = (dtypes.is_bool(u.dtype) or self.fits(u)) and all(self.fits(s) for s in int_srcs)
      calc = NARROW if self.pick32(u, ok) else self.wide
      return UOp(op, u.dtype if dtypes.is_bool(u.dtype) else calc,
                 tuple(self.val(s, calc) if dtypes.is_int(s.dtype) else self.val(s, s.dtype) for s in u.src), u.arg)
    if op is Ops.INDEX: src = (self.new[u.src[0]], self.as_is(u.src[1])) + tuple(self.val(s, s.dtype) for s in u.src[2:])
    elif op is Ops.CAST and dtypes.is_int(u.src[0].dtype):
      # a conversion depends only on the value: take the operand in whatever type it has now
      if (x := self.as_is(u.src[0])).dtype == u.dtype: return x
      src = (x,)
    # loop counters as sources of ENDRANGE / DEFINE_ACC only mark the loop (an accumulator is declared before its loop
    # opens: it keeps the marker it was built with)
    else: src = tuple(self.new.get(s, s) if s.op is Ops.RANGE else self.val(s, s.dtype) for s in u.src)
    return u if src == u.src else UOp(op, u.dtype, src, u.arg)

  def as_is(self, s: UOp) -> UOp:
    """An integer operand whose type does not matter (an address, a conversion's input), in the type it has now."""
    if s.op is Ops.CONST: return UOp.const(NARROW if fits32(s.arg, s.arg) else self.wide, s.arg) if s.dtype == self.wide else s
    return self.new[s]

  def run(self) -> list[UOp]:
    for u in self.uops:
      n = self.new[u] = self.one(u)
      if n.op is not Ops.CONST and n not in self.slot_of: self.emit(n)
    return [x for sl in self.slots for x in sl]

__all__ = ["Narrowing", "fits32", "NARROW"]
