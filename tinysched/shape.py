"""Views and ShapeTrackers: how a lazy tensor's index space maps onto its buffer.

A View is one strided window: `index = offset + sum(i_k * strides[k])`, valid where every masked
dim has `mask[k][0] <= i_k < mask[k][1]` (invalid positions read as 0, which is how padding works).
A ShapeTracker is a stack of views; the last one is outermost: its flat index is unraveled by the
shape of the view below it, and so on down to views[0], which addresses the buffer. Movement ops
only touch the last view; a reshape that one view cannot express pushes a new view.

Shape entries are `sint`s (int or symbolic UOp). Everything is an immutable value with a cached
hash; creation and the movement ops are memoized, and int-only views never build UOps except in
to_indexed_uops.
"""
from __future__ import annotations
import functools, math, operator
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, cast, overload
from tinysched.dtype import dtypes
from tinysched.ops import Ops
from tinysched.uop import UOp, sint, stable_repr, ssimplify, resolve, sym_infer, smax, smin, intern_plainly
from tinysched.helpers import dedup
from tinysched.errors import ShapeError
from tinysched import symbolic as _symbolic  # noqa: F401  (sets UOp.simplify's rules, which the index math needs: uop.py cannot import them)

Mask = Optional[tuple[tuple[sint, sint], ...]]
_IDX = dtypes.int32  # dtype of index expressions (and of Variables by default)
_SIMPLE_OPS = (Ops.DEFINE_VAR, Ops.BIND)  # symbolic leaves: already canonical

# *** memo tables: views and trackers are immutable values, so every derived result is kept forever ***
_MEMOS: list[Any] = []  # in definition order; clear_caches empties each

def _memo(fn: Callable) -> Any:
  cached = functools.lru_cache(maxsize=None)(fn)
  _MEMOS.append(cached)
  return cached

def _memo_move(norm: Callable[[Any], tuple]) -> Callable[[Callable], Any]:
  """A View movement op memoized on its argument made hashable by `norm` (callers may pass lists; the table keys are tuples)."""
  def wrap(body: Callable) -> Any:
    table = _memo(body)
    @functools.wraps(body)
    def entry(self, arg): return table(self, norm(arg))
    return entry
  return wrap

def _pairs(arg: Any) -> tuple: return tuple(tuple(x) for x in arg)

# *** sint helpers: int fast paths, UOps only when symbolic ***

def _norm(x: Any) -> sint:
  """Canonical shape entry: python int (never bool / numpy int) or a simplified non-constant UOp."""
  if type(x) is int: return x
  if isinstance(x, UOp):
    if x.op in _SIMPLE_OPS: return x
    if not (dtypes.is_int(x.dtype)): raise TypeError(f"shape entries must be integer expressions, got {x!r}")
    return ssimplify(x)
  try: return operator.index(x)  # bool, numpy integers
  except TypeError: raise TypeError(f"shape entries must be int or symbolic UOp, got {type(x).__name__} {x!r}") from None

def _add(a: sint, b: sint) -> sint: return a + b if type(a) is int and type(b) is int else _norm(a + b)
def _sub(a: sint, b: sint) -> sint: return a - b if type(a) is int and type(b) is int else _norm(a - b)
def _mul(a: sint, b: sint) -> sint:
  if type(a) is int and type(b) is int: return a * b
  if type(a) is int and a in (0, 1): return 0 if a == 0 else b  # keep symbolic products short
  if type(b) is int and b in (0, 1): return 0 if b == 0 else a
  return _norm(a * b)

def _eq(a: sint, b: sint) -> bool:
  """Structural equality of canonical sints (symbolic entries are interned and simplified)."""
  if type(a) is int and type(b) is int: return a == b
  return a is b

def _tuple_eq(a: tuple, b: tuple) -> bool: return len(a) == len(b) and all(_eq(x, y) for x, y in zip(a, b))

def _all_int(xs) -> bool: return all(type(x) is int for x in xs)

def _sprod(xs) -> sint:
  ret: sint = 1
  for x in xs: ret = _mul(ret, x)
  return ret

def _shape_str(shape: tuple) -> str: return stable_repr(tuple(shape))

def _ge0(x: sint) -> bool: return x >= 0 if type(x) is int else resolve(x >= 0, True)  # symbolic: only reject if provably < 0
def _le(a: sint, b: sint) -> bool:
  if type(a) is int and type(b) is int: return a <= b
  d = _norm(b - a)
  return d >= 0 if type(d) is int else resolve(d >= 0, True)

def _vars_of(x: sint) -> list[UOp]:
  if type(x) is int: return []
  return [v.src[0] if v.op is Ops.BIND else v for v in x.vars()]  # type: ignore[union-attr]  # not an int: a UOp

def _sample_points(vs: list[UOp]) -> list[dict[UOp, int]]:
  # deterministic probe values for an equality the simplifier cannot decide structurally
  lo, hi = [v.arg[1] for v in vs], [v.arg[2] for v in vs]
  mid = [(a + b) // 2 for a, b in zip(lo, hi)]
  alt = [l if k % 2 == 0 else h for k, (l, h) in enumerate(zip(lo, hi))]
  alt2 = [h if k % 2 == 0 else l for k, (l, h) in enumerate(zip(lo, hi))]
  return [dict(zip(vs, p)) for p in (lo, hi, mid, alt, alt2)]

def _same_value(a: sint, b: sint) -> bool:
  """a == b for every value of the Variables (decided exactly for ints, by structure or probing when symbolic)."""
  if type(a) is int and type(b) is int: return a == b
  a, b = _norm(a), _norm(b)
  if _eq(a, b): return True
  if type(a) is int and type(b) is int: return a == b
  vs = dedup(_vars_of(a) + _vars_of(b))
  ua = a.substitute({x: x.src[0] for x in a.vars() if x.op is Ops.BIND}) if isinstance(a, UOp) else a
  ub = b.substitute({x: x.src[0] for x in b.vars() if x.op is Ops.BIND}) if isinstance(b, UOp) else b
  return all(sym_infer(ua, p) == sym_infer(ub, p) for p in _sample_points(vs))

@overload
def strides_for_shape(shape: tuple[int, ...]) -> tuple[int, ...]: ...
@overload
def strides_for_shape(shape: tuple[sint, ...]) -> tuple[sint, ...]: ...
def strides_for_shape(shape: tuple[sint, ...]) -> tuple[sint, ...]:
  """C-contiguous strides of `shape`, with stride 0 on size-1 dims (they never move the index)."""
  return _strides_for_shape(tuple(shape))

@_memo
def _strides_for_shape(shape: tuple[sint, ...]) -> tuple[sint, ...]:
  if _all_int(shape):
    out, acc = [], 1
    for s in reversed(shape):
      out.append(0 if s == 1 else acc)
      acc *= s
    return tuple(reversed(out))
  outs: list[sint] = []
  acc_s: sint = 1
  for s in reversed(shape):
    s = _norm(s)
    outs.append(0 if type(s) is int and s == 1 else acc_s)
    acc_s = _mul(acc_s, s)
  return tuple(reversed(outs))

def _cdiv_ceil(a: int, b: int) -> int: return -((-a) // b)

# *** View ***

@dataclass(frozen=True, eq=False)
class View:
  """One strided, optionally masked window onto a buffer. Build it with View.create (canonical form)."""
  shape: tuple[sint, ...]
  strides: tuple[sint, ...]
  offset: sint
  mask: Mask
  contiguous: bool = field(init=False)
  _hash: int = field(init=False, repr=False)
  _ints: bool = field(init=False, repr=False)  # every field is a plain int: the fast paths apply

  def __post_init__(self):
    sa = object.__setattr__
    sa(self, "_hash", hash((self.shape, self.strides, self.offset, self.mask)))
    sa(self, "_ints", type(self.offset) is int and all(type(x) is int for x in self.shape) and all(type(x) is int for x in self.strides)
       and (self.mask is None or all(type(b) is int and type(e) is int for b, e in self.mask)))
    sa(self, "contiguous", type(self.offset) is int and self.offset == 0 and self.mask is None and
       (self.strides == strides_for_shape(self.shape) if self._ints else _tuple_eq(self.strides, strides_for_shape(self.shape))))
  def __hash__(self) -> int: return self._hash
  def __eq__(self, other: object) -> bool:
    if self is other: return True
    if type(other) is not View or self._hash != other._hash: return False
    return _tuple_eq(self.shape, other.shape) and _tuple_eq(self.strides, other.strides) and _eq(self.offset, other.offset) and \
      (self.mask == other.mask if self.mask is None or other.mask is None else
       len(self.mask) == len(other.mask) and all(_eq(a, c) and _eq(b, d) for (a, b), (c, d) in zip(self.mask, other.mask)))
  def stable_repr(self) -> str:
    return f"View(shape={stable_repr(self.shape)}, strides={stable_repr(self.strides)}, offset={stable_repr(self.offset)}, " \
           f"mask={stable_repr(self.mask)})"
  def __repr__(self) -> str: return self.stable_repr()

  @staticmethod
  def create(shape: tuple[sint, ...], strides: tuple[sint, ...] | None = None, offset: sint = 0, mask: Mask = None) -> View:
    """The canonical view: stride 0 on size-1 dims, a full mask is None, an empty mask makes the
    all-masked form, a single-element mask dim moves its stride into the offset."""
    return _create(tuple(shape), None if strides is None else tuple(strides), offset,
                   None if mask is None else tuple(tuple(m) for m in mask))

  @property
  def ndim(self) -> int: return len(self.shape)
  @property
  def size(self) -> sint: return math.prod(self.shape) if self._ints else _sprod(self.shape)
  @property
  def all_masked(self) -> bool:
    return self.mask is not None and any(type(b) is int and type(e) is int and b >= e for b, e in self.mask)

  # *** index expressions ***
  def to_indexed_uops(self, idxs: list[UOp] | tuple[UOp, ...], vexpr: UOp | None = None) -> tuple[UOp, UOp]:
    """(buffer index, validity) at loop indices `idxs`; not simplified (ShapeTracker simplifies)."""
    if len(idxs) != len(self.shape):
      raise ValueError(f"view of shape {_shape_str(self.shape)} needs {len(self.shape)} indices, got {len(idxs)}")
    idt = idxs[0].dtype if idxs else _IDX  # constants take the indices' dtype (a 64-bit caller gets 64-bit offsets)
    iexpr: UOp | None = None
    for i, sh, st in zip(idxs, self.shape, self.strides):
      if (type(sh) is int and sh == 1) or (type(st) is int and st == 0): continue
      term = i if type(st) is int and st == 1 else i * st
      iexpr = term if iexpr is None else iexpr + term
    if iexpr is None: iexpr = UOp.const(idt, self.offset) if type(self.offset) is int else cast(UOp, self.offset)
    elif not (type(self.offset) is int and self.offset == 0): iexpr = iexpr + self.offset
    valid = vexpr
    if self.mask is not None:
      if self.all_masked: return iexpr, UOp.const(dtypes.bool, False)
      for i, sh, (b, e) in zip(idxs, self.shape, self.mask):
        conds = []
        if not (type(b) is int and b == 0): conds.append((b - 1 if type(b) is int else _norm(b - 1)) < i)  # i >= b as (b-1) < i
        if not _eq(e, sh): conds.append(i < e)
        for c in conds: valid = c if valid is None else valid & c
    return iexpr, (valid if valid is not None else UOp.const(dtypes.bool, True))

  def _max_index(self) -> int | None:
    """Largest buffer index over valid positions (None when nothing is valid); symbolic entries use vmax."""
    if any(type(s) is int and s == 0 for s in self.shape) or self.all_masked: return None
    mask = self.mask if self.mask is not None else tuple((0, s) for s in self.shape)
    if self._ints:
      return self.offset + sum(st*(e-1) if st > 0 else st*b for st, (b, e) in zip(self.strides, mask))
    return int(self.to_indexed_uops(_ranges(self.shape))[0].simplify().vmax)

  # *** movement ops: each is memoized on (view, argument as tuples) ***
  @_memo_move(tuple)
  def reshape(self, new_shape: tuple[sint, ...]) -> View | None:
    """The same elements in row-major order under `new_shape`, or None if one view cannot express it."""
    new_shape = tuple(_norm(s) for s in new_shape)
    if any(type(s) is int and s < 0 for s in new_shape):
      raise ValueError(f"cannot reshape {_shape_str(self.shape)} to {_shape_str(new_shape)}: negative dimension")
    if not _same_value(self.size, _sprod(new_shape)):
      raise ShapeError(f"cannot reshape {_shape_str(self.shape)} to {_shape_str(new_shape)}: element counts differ")
    if _tuple_eq(self.shape, new_shape): return self
    if any(type(s) is int and s == 0 for s in self.shape): return View.create(new_shape)  # no elements: any view is exact
    if self.contiguous: return View.create(new_shape)
    if self.all_masked: return _all_masked(new_shape)
    return _reshape_view(self, new_shape)

  @_memo_move(tuple)
  def permute(self, order: tuple[int, ...]) -> View:
    if sorted(order) != list(range(len(self.shape))) or not all(type(o) is int for o in order):
      raise ValueError(f"cannot permute shape {_shape_str(self.shape)} by {order}: not a permutation of range({len(self.shape)})")
    def reorder(xs: tuple) -> tuple: return tuple(xs[o] for o in order)
    return View.create(reorder(self.shape), reorder(self.strides), self.offset, self.mask and reorder(self.mask))

  @_memo_move(tuple)
  def expand(self, new_shape: tuple[sint, ...]) -> View:
    new_shape = tuple(_norm(s) for s in new_shape)
    if len(new_shape) != len(self.shape):
      raise ValueError(f"cannot expand shape {_shape_str(self.shape)} to {_shape_str(new_shape)}: wrong number of dims")
    for s, ns in zip(self.shape, new_shape):
      if not (_eq(s, ns) or (type(s) is int and s == 1)) or (type(ns) is int and ns < 0):
        raise ValueError(f"cannot expand shape {_shape_str(self.shape)} to {_shape_str(new_shape)}: only size-1 dims can grow")
    if _tuple_eq(self.shape, new_shape): return self
    if self.all_masked: return View.create(new_shape, None, 0, tuple((0, 0) for _ in new_shape))
    mask = None if self.mask is None else \
      tuple(m if _eq(s, ns) else (0, ns) for m, s, ns in zip(self.mask, self.shape, new_shape))
    strides = tuple(st if _eq(s, ns) else 0 for st, s, ns in zip(self.strides, self.shape, new_shape))
    return View.create(new_shape, strides, self.offset, mask)

  @_memo_move(_pairs)
  def pad(self, arg: tuple[tuple[sint, sint], ...]) -> View:
    arg = tuple((_norm(b), _norm(e)) for b, e in arg)
    if len(arg) != len(self.shape):
      raise ValueError(f"cannot pad shape {_shape_str(self.shape)} by {stable_repr(arg)}: wrong number of dims")
    if not all(_ge0(b) and _ge0(e) for b, e in arg):
      raise ValueError(f"cannot pad shape {_shape_str(self.shape)} by {stable_repr(arg)}: negative pad")
    if all(type(b) is int and b == 0 and type(e) is int and e == 0 for b, e in arg): return self
    new_shape = tuple(_add(_add(s, b), e) for s, (b, e) in zip(self.shape, arg))
    offset = self.offset
    for st, (b, _) in zip(self.strides, arg): offset = _sub(offset, _mul(b, st))
    old_mask = self.mask if self.mask is not None else tuple((0, s) for s in self.shape)
    mask = tuple((_add(mb, b), _add(me, b)) for (mb, me), (b, _) in zip(old_mask, arg))
    return View.create(new_shape, self.strides, offset, mask)

  @_memo_move(_pairs)
  def shrink(self, arg: tuple[tuple[sint, sint], ...]) -> View:
    arg = tuple((_norm(b), _norm(e)) for b, e in arg)
    if len(arg) != len(self.shape):
      raise ValueError(f"cannot shrink shape {_shape_str(self.shape)} to {stable_repr(arg)}: wrong number of dims")
    for s, (b, e) in zip(self.shape, arg):
      if not (_ge0(b) and _le(b, e) and _le(e, s)):
        raise ShapeError(f"cannot shrink shape {_shape_str(self.shape)} to {stable_repr(arg)}: need 0 <= begin <= end <= dim")
    if all(type(b) is int and b == 0 and _eq(e, s) for s, (b, e) in zip(self.shape, arg)): return self
    new_shape = tuple(_sub(e, b) for b, e in arg)
    offset = self.offset
    for st, (b, _) in zip(self.strides, arg): offset = _add(offset, _mul(b, st))
    mask = None
    if self.mask is not None:
      if self.all_masked: return View.create(new_shape, None, 0, tuple((0, 0) for _ in new_shape))
      ms = []
      for s, (mb, me), (b, e) in zip(self.shape, self.mask, arg):
        if _all_int((mb, me, b, e)): ms.append((max(mb, b) - b, max(min(me, e), max(mb, b)) - b))  # intersect, then shift
        elif type(mb) is int and mb == 0 and _eq(me, s): ms.append((0, _sub(e, b)))  # unmasked (symbolic) dim
        else: ms.append((smax(_sub(mb, b), 0), smin(_sub(me, b), _sub(e, b))))
      mask = tuple(ms)
    return View.create(new_shape, self.strides, offset, mask)

  @_memo_move(tuple)
  def stride(self, muls: tuple[int, ...]) -> View:
    """Take every muls[k]-th element of dim k; a negative mul walks the dim backwards (-1 = flip)."""
    if len(muls) != len(self.shape): raise ValueError(f"cannot stride shape {_shape_str(self.shape)} by {muls}: wrong number of dims")
    if not all(type(m) is int and m != 0 for m in muls):
      raise ValueError(f"cannot stride shape {_shape_str(self.shape)} by {muls}: multipliers must be nonzero ints")
    if all(m == 1 for m in muls): return self
    new_shape, strides, mask = [], [], []
    offset = self.offset
    old_mask = self.mask if self.mask is not None else tuple((0, s) for s in self.shape)
    for s, st, m, (b, e) in zip(self.shape, self.strides, muls, old_mask):
      a = abs(m)
      if a != 1 and not _all_int((s, b, e)):
        raise ValueError(f"cannot stride shape {_shape_str(self.shape)} by {muls}: only flips (+-1) on symbolic dims")
      if m < 0: offset = _add(offset, _mul(_sub(s, 1), st))  # start at the last element
      new_shape.append(s if a == 1 else (s + a - 1) // a)
      strides.append(_mul(st, m))
      if m > 0: mask.append((b, e) if a == 1 else (_cdiv_ceil(b, a), _cdiv_ceil(e, a)))  # type: ignore[arg-type]  # ints: checked above
      elif a == 1: mask.append((_sub(s, e), _sub(s, b)))
      else: mask.append(((s - 1 - e) // a + 1, (s - 1 - b) // a + 1))  # b <= s-1-k*a < e
    keep_mask = self.mask is not None or any(abs(m) != 1 for m in muls)  # create() drops it again when it covers everything
    return View.create(tuple(new_shape), tuple(strides), offset, tuple(mask) if keep_mask else None)

  def flip(self, axes: tuple[int, ...]) -> View:
    """Reverse the dims in `axes` (a stride of -1 there); axes are not checked here, ShapeTracker.flip does that."""
    return self.stride(tuple(-1 if k in axes else 1 for k in range(self.ndim)))

  # *** composition ***
  @_memo
  def __add__(self, vm1: View) -> View | None:
    """`vm1` applied on top of self (vm1's flat index addresses self's shape) as one view, or None."""
    return _compose(self, vm1)

  @_memo
  def minify(self) -> View:
    """The same flat-order function with adjacent dims merged wherever strides and mask allow."""
    dims = [(s, st, b, e) for s, st, (b, e) in zip(self.shape, self.strides, self.mask or tuple((0, s) for s in self.shape))
            if not (type(s) is int and s == 1)]
    if not dims or not self._ints or self.all_masked: return self
    new_shape: list[sint] = []
    cur = dims[-1]
    for d in reversed(dims[:-1]):
      m = _merge(d, cur)
      if m is None:
        new_shape.append(cur[0])
        cur = d
      else: cur = m[0]
    new_shape.append(cur[0])
    ns = tuple(reversed(new_shape))
    if ns == self.shape: return self
    ret = self.reshape(ns)
    return self if ret is None else ret

  # *** symbolic ***
  def vars(self) -> list[UOp]:
    """DEFINE_VARs used by this view (bound ones unbound), first-seen order."""
    if self._ints: return []
    xs = list(self.shape) + list(self.strides) + [self.offset] + [x for m in (self.mask or ()) for x in m]
    return dedup(v for x in xs for v in _vars_of(x))

  @_memo
  def unbind(self) -> tuple[View, dict[UOp, int]]:
    """Replace every BIND by its Variable; returns the values it had."""
    if self._ints: return self, {}
    xs = list(self.shape) + list(self.strides) + [self.offset] + [x for m in (self.mask or ()) for x in m]
    var_vals: dict[UOp, int] = {}
    for x in xs:
      if type(x) is int: continue
      for b in x.vars():  # type: ignore[union-attr]  # not an int: a UOp
        if b.op is not Ops.BIND: continue
        v, val = b.unbind()
        if var_vals.get(v, val) != val: raise ValueError(f"Variable {v.arg[0]!r} is bound to both {var_vals[v]} and {val} in {self}")
        var_vals[v] = val
    if not var_vals: return self, {}
    sub = {v.bind(val): v for v, val in var_vals.items()}
    def ub(x: sint) -> sint: return x if type(x) is int else _norm(x.substitute(sub))  # type: ignore[union-attr]  # not an int: a UOp
    return View.create(tuple(ub(s) for s in self.shape), tuple(ub(s) for s in self.strides), ub(self.offset),
                       None if self.mask is None else tuple((ub(b), ub(e)) for b, e in self.mask)), var_vals


@_memo
def _create(shape: tuple, strides: tuple | None, offset: Any, mask: tuple | None) -> View:
  # the scheduler's common case: plain ints everywhere (bool is excluded by `type(...) is int`)
  if type(offset) is int and all(type(s) is int for s in shape) and (strides is None or all(type(s) is int for s in strides)) and \
     (mask is None or all(type(b) is int and type(e) is int for b, e in mask)):
    return _create_ints(shape, strides, offset, mask)
  shape = tuple(_norm(s) for s in shape)
  n = len(shape)
  for s in shape:
    if type(s) is int and s < 0: raise ValueError(f"cannot create a view of shape {_shape_str(shape)}: negative dimension")
  if strides is None: strides = strides_for_shape(shape)
  else:
    if len(strides) != n: raise ValueError(f"view of shape {_shape_str(shape)} got {len(strides)} strides {stable_repr(tuple(strides))}")
    strides = tuple(0 if type(s) is int and s == 1 else _norm(st) for s, st in zip(shape, strides))
  offset = _norm(offset)
  if any(type(s) is int and s == 0 for s in shape): return View(shape, strides_for_shape(shape), 0, None)  # no elements
  if mask is not None:
    if len(mask) != n: raise ValueError(f"view of shape {_shape_str(shape)} got a mask of {len(mask)} dims {stable_repr(mask)}")
    ms, sts = [], list(strides)
    for k, (s, (b, e)) in enumerate(zip(shape, mask)):
      b, e = _norm(b), _norm(e)
      if type(b) is int and type(e) is int:
        b, e = max(b, 0), (min(e, s) if type(s) is int else e)  # clamp to the dim: a mask never extends the view
        if b >= e: return View(shape, (0,)*n, 0, ((0, 0),)*n)  # nothing valid: the canonical all-masked view
        if e - b == 1 and not (type(sts[k]) is int and sts[k] == 0):
          offset, sts[k] = _add(offset, _mul(b, sts[k])), 0  # one valid index: its stride is a constant
      ms.append((b, e))
    strides = tuple(sts)
    mask = None if all(type(b) is int and b == 0 and _eq(e, s) for (b, e), s in zip(ms, shape)) else tuple(ms)
  return View(shape, strides, offset, mask)

def _create_ints(shape: tuple[int, ...], strides: tuple[int, ...] | None, offset: int, mask: tuple | None) -> View:
  n = len(shape)
  if n and min(shape) < 0: raise ValueError(f"cannot create a view of shape {_shape_str(shape)}: negative dimension")
  if 0 in shape: return View(shape, strides_for_shape(shape), 0, None)  # no elements
  if strides is None: strides = strides_for_shape(shape)
  else:
    if len(strides) != n: raise ValueError(f"view of shape {_shape_str(shape)} got {len(strides)} strides {stable_repr(tuple(strides))}")
    if 1 in shape: strides = tuple(0 if s == 1 else st for s, st in zip(shape, strides))
  if mask is not None:
    if len(mask) != n: raise ValueError(f"view of shape {_shape_str(shape)} got a mask of {len(mask)} dims {stable_repr(mask)}")
    ms, sts, full = [], list(strides), True
    for k in range(n):
      s, (b, e) = shape[k], mask[k]
      if b < 0: b = 0  # clamp to the dim: a mask never extends the view
      if e > s: e = s
      if b >= e: return View(shape, (0,)*n, 0, ((0, 0),)*n)  # nothing valid: the canonical all-masked view
      if e - b == 1 and sts[k] != 0: offset, sts[k] = offset + b*sts[k], 0  # one valid index: its stride is a constant
      if b != 0 or e != s: full = False
      ms.append((b, e))
    strides, mask = tuple(sts), None if full else tuple(ms)
  return View(shape, strides, offset, mask)

def _merge(outer: tuple, inner: tuple) -> tuple[tuple, sint] | None:
  """Merge dim `outer` (size, stride, mask begin, mask end) into the adjacent inner one: ((merged dim), offset change) or None."""
  no, so, bo, eo = outer
  ni, si, bi, ei = inner
  if not _all_int((no, ni, bo, eo, bi, ei)): return None
  single = eo - bo == 1
  if not (single or _eq(so, _mul(si, ni))): return None
  if bi == 0 and ei == ni: mb, me = bo*ni, eo*ni
  elif single: mb, me = bo*ni + bi, bo*ni + ei
  else: return None
  # with one valid outer index its real stride only shifts the offset
  doff = 0 if _eq(so, _mul(si, ni)) else _mul(bo, _sub(so, _mul(si, ni)))
  return (no*ni, si, mb, me), doff

def _split(dim: tuple, m: int) -> tuple[tuple, tuple] | None:
  """Split (size, stride, b, e) into (outer, inner) dims with inner size m, or None if the mask is no box."""
  n, st, b, e = dim
  if not _all_int((b, e)): return ((n // m, _mul(st, m), 0, n // m), (m, st, 0, m)) if b == 0 and _eq(e, n) else None
  if b % m == 0 and e % m == 0: return (n // m, _mul(st, m), b // m, e // m), (m, st, 0, m)
  if b // m == (e - 1) // m: return (n // m, _mul(st, m), b // m, b // m + 1), (m, st, b % m, (e - 1) % m + 1)
  return None

def _reshape_view(v: View, new_shape: tuple[sint, ...]) -> View | None:
  old_full = v.mask if v.mask is not None else tuple((0, s) for s in v.shape)
  old = [(s, st, b, e) for s, st, (b, e) in zip(v.shape, v.strides, old_full) if not (type(s) is int and s == 1)]
  new_pos = [k for k, s in enumerate(new_shape) if not (type(s) is int and s == 1)]
  new_dims: list[tuple | None] = [None]*len(new_pos)
  offset = v.offset
  i = j = 0
  while i < len(old) and j < len(new_pos):
    o0, n0 = old[i][0], new_shape[new_pos[j]]
    if _eq(o0, n0):  # one old dim is one new dim (the only way symbolic dims get through)
      new_dims[j] = old[i]
      i, j = i + 1, j + 1
      continue
    if type(o0) is not int or type(n0) is not int: return None
    # the smallest group of old dims and new dims with the same element count
    gi, gj, po, pn = [i], [j], o0, n0
    i, j = i + 1, j + 1
    while po != pn:
      if po < pn:
        if i >= len(old) or type(old[i][0]) is not int: return None
        po *= old[i][0]; gi.append(i); i += 1  # noqa: E702
      else:
        if j >= len(new_pos) or type(new_shape[new_pos[j]]) is not int: return None
        pn *= new_shape[new_pos[j]]; gj.append(j); j += 1  # noqa: E702
    cur = old[gi[-1]]
    for k in reversed(gi[:-1]):
      if (r := _merge(old[k], cur)) is None: return None
      cur, doff = r
      offset = _add(offset, doff)
    for jj in reversed(gj[1:]):
      if (sp := _split(cur, new_shape[new_pos[jj]])) is None: return None  # type: ignore[arg-type]  # a group's dims are ints
      cur, new_dims[jj] = sp
    new_dims[gj[0]] = cur
  if i != len(old) or j != len(new_pos): return None  # symbolic counts that only match as a product
  strides: list[sint] = [0]*len(new_shape)
  mask: list[tuple[sint, sint]] = [(0, 1)]*len(new_shape)
  for k, d in zip(new_pos, new_dims):
    strides[k], mask[k] = d[1], (d[2], d[3])  # type: ignore[index]
  return View.create(new_shape, tuple(strides), offset, tuple(mask) if v.mask is not None else None)

def _all_masked(shape: tuple[sint, ...]) -> View | None:
  # a 0-d view has no dim to carry an empty mask: "nothing valid" is not expressible there
  return View.create(shape, None, 0, tuple((0, 0) for _ in shape)) if shape else None

def _compose(vm2: View, vm1: View) -> View | None:
  if vm1.contiguous:  # vm1 is the identity on flat indices: the answer is vm2 seen under vm1's shape
    if _tuple_eq(vm1.shape, vm2.shape): return vm2
    if vm2.contiguous: return vm1
    return vm2.reshape(vm1.shape) if _same_value(vm1.size, vm2.size) else None
  if vm2.contiguous: return vm1  # likewise for vm2
  if not (vm1._ints and vm2._ints): return None  # symbolic: only the exact cases above
  if 0 in vm1.shape: return View.create(vm1.shape)
  if vm2.all_masked or vm1.all_masked: return _all_masked(vm1.shape)
  if vm1.mask is not None:
    # compose the valid box only, then pad back: positions outside it are invalid either way
    box = vm1.mask
    inner = _compose(vm2, vm1.shrink(box))
    return None if inner is None else inner.pad(tuple((b, s - e) for (b, e), s in zip(box, vm1.shape)))
  v2 = vm2.minify()  # merging dims keeps v2's flat index space and makes vm1's strides more likely to fit
  S = v2.shape
  total = math.prod(S)
  if not 0 <= vm1.offset < total: return None
  cs = [math.prod(S[j+1:]) for j in range(len(S))]  # row-major strides of v2's index space (nonzero on size-1 dims)
  def unravel(x: int) -> list[int]: return [(x // c) % s for c, s in zip(cs, S)]
  origin = unravel(vm1.offset)  # type: ignore[arg-type]  # int-only views (_ints) from here on
  lo, hi = list(origin), list(origin)
  deltas: list[list[int] | None] = []
  for n, s in zip(vm1.shape, vm1.strides):
    if n == 1 or s == 0:
      deltas.append(None)
      continue
    if abs(s) >= total: return None  # type: ignore[arg-type]  # an int stride (_ints)
    d = unravel(abs(s))  # type: ignore[arg-type]
    if s < 0: d = [-x for x in d]
    for jj, x in enumerate(d):
      if x > 0: hi[jj] += (n - 1)*x
      else: lo[jj] += (n - 1)*x
    deltas.append(d)
  # no carries: every position of vm1 unravels digit by digit, so the multi-index is linear in vm1's indices
  if any(l < 0 or h >= s for l, h, s in zip(lo, hi, S)): return None
  strides = tuple(0 if d is None else sum(x*st for x, st in zip(d, v2.strides)) for d in deltas)
  offset = v2.offset + sum(o*st for o, st in zip(origin, v2.strides))
  mask = None
  if v2.mask is not None:
    ms = [(0, n) for n in vm1.shape]
    for jj, (b, e) in enumerate(v2.mask):
      if b == 0 and e == S[jj]: continue
      users = [k for k, d in enumerate(deltas) if d is not None and d[jj] != 0]
      o = origin[jj]
      if not users:
        if not b <= o < e: return _all_masked(vm1.shape)
        continue
      if len(users) > 1: return None  # the dim's mask constrains a sum of indices: not a box
      k = users[0]
      x = deltas[k][jj]  # type: ignore[index]
      if x > 0: kb, ke = _cdiv_ceil(b - o, x), _cdiv_ceil(e - o, x)  # b <= o + k*x < e
      else: kb, ke = (o - e) // -x + 1, (o - b) // -x + 1
      ms[k] = (max(ms[k][0], kb), min(ms[k][1], ke))
    mask = tuple(ms)
  return View.create(vm1.shape, strides, offset, mask)

# *** ShapeTracker ***

def _ranges(shape: tuple[sint, ...]) -> tuple[UOp, ...]:
  return tuple(UOp(Ops.RANGE, _IDX, (UOp.const(_IDX, 0), s if isinstance(s, UOp) else UOp.const(_IDX, s)), i) for i, s in enumerate(shape))

def _on_outer_view(view_op: Callable[[View, Any], View | None]) -> Callable[[ShapeTracker, Any], ShapeTracker]:
  """The ShapeTracker method of a View movement op (it keeps the View op's name, parameter and docstring)."""
  @functools.wraps(view_op)
  def op(self: ShapeTracker, arg: Any) -> ShapeTracker:
    views = self.views
    if (moved := view_op(views[-1], arg)) is None:  # only a reshape one view cannot express: stack a fresh view on top
      return ShapeTracker(views + (View.create(arg),))
    return ShapeTracker(views[:-1] + (moved,))
  return op

@_memo
def _one_view(shape: tuple[sint, ...]) -> ShapeTracker:
  """The shared contiguous tracker of a shape."""
  return ShapeTracker((View.create(shape),))

@dataclass(frozen=True, eq=False)
class ShapeTracker:
  """A stack of views, the last one outermost; movement ops change the last view."""
  views: tuple[View, ...]
  _hash: int = field(init=False, repr=False)

  def __post_init__(self):
    if not isinstance(self.views, tuple) or not self.views or not all(type(v) is View for v in self.views):
      raise ValueError(f"a ShapeTracker needs a non-empty tuple of Views, got {self.views!r}")
    object.__setattr__(self, "_hash", hash(self.views))
  def __hash__(self) -> int: return self._hash
  def __eq__(self, other: object) -> bool:
    return self is other or (type(other) is ShapeTracker and self._hash == other._hash and self.views == other.views)
  def stable_repr(self) -> str: return f"ShapeTracker(views={stable_repr(self.views)})"
  def __repr__(self) -> str: return self.stable_repr()

  @staticmethod
  def from_shape(shape: tuple[sint, ...]) -> ShapeTracker: return _one_view(tuple(shape))

  @property
  def shape(self) -> tuple[sint, ...]: return self.views[-1].shape
  @property
  def ndim(self) -> int: return len(self.views[-1].shape)
  @property
  def size(self) -> sint: return self.views[-1].size
  # derived on first use, not at construction: movement ops build many trackers nobody asks about
  @functools.cached_property
  def _single(self) -> View | None:
    """The only view, when there is one: most questions are then local to it."""
    return self.views[0] if len(self.views) == 1 else None
  @functools.cached_property
  def contiguous(self) -> bool:
    """One view that is the identity on the buffer."""
    return (only := self._single) is not None and only.contiguous
  @property
  def consecutive(self) -> bool:
    """One unmasked view walking the buffer in order from some offset (contiguous up to the offset)."""
    if (only := self._single) is None or only.mask is not None: return False
    return _tuple_eq(only.strides, strides_for_shape(only.shape))

  def reduce(self, axis: tuple[int, ...]) -> tuple[sint, ...]:
    for a in axis:
      if not (type(a) is int and 0 <= a < len(self.shape)):
        raise ValueError(f"cannot reduce shape {_shape_str(self.shape)} over axis {axis}")
    return tuple(1 if i in axis else s for i, s in enumerate(self.shape))

  # *** index expressions ***
  def to_indexed_uops(self, idxs: list[UOp] | tuple[UOp, ...] | None = None) -> tuple[UOp, UOp]:
    """(buffer index, validity) at loop indices `idxs` (RANGEs over the shape by default), simplified."""
    return self._indexed(None if idxs is None else tuple(idxs))
  @_memo
  def _indexed(self, idxs: tuple[UOp, ...] | None) -> tuple[UOp, UOp]:
    if idxs is None: idxs = _ranges(self.shape)
    idt = idxs[0].dtype if idxs else _IDX
    top = self.views[-1]
    back: dict[UOp, UOp] = {}
    if len(self.views) > 1 and top.mask is not None and top._ints and not top.all_masked:
      # the index only matters where the outer mask holds: simplify it with every masked loop index
      # replaced by a stand-in RANGE over just its valid span (so a pad's -1 offset no longer blocks
      # folding // and %), then put the real indices back. The outer validity keeps the real ones.
      _, valid = top.to_indexed_uops(idxs)
      stand: list[UOp] = list(idxs)
      for k, (i, (b, e)) in enumerate(zip(idxs, top.mask)):
        lo, hi = max(b, int(i.vmin)), min(e - 1, int(i.vmax))
        if (lo, hi) == (i.vmin, i.vmax) or lo > hi: continue
        stand[k] = UOp(Ops.RANGE, i.dtype, (UOp.const(i.dtype, lo), UOp.const(i.dtype, hi + 1)), ("valid", k))
        back[stand[k]] = i
      idx = top.to_indexed_uops(stand)[0]
    else: idx, valid = top.to_indexed_uops(idxs)
    inner_valid: UOp | None = None
    for v in reversed(self.views[:-1]):
      # unravel the outer flat index by this view's shape, then index it
      if v.all_masked: return UOp.const(idt, 0), UOp.const(dtypes.bool, False)
      idx = idx.simplify()
      sub: list[UOp] = []
      acc: sint = 1
      for k in range(len(v.shape) - 1, -1, -1):
        s = v.shape[k]
        if type(s) is int and s == 1: sub.append(UOp.const(idt, 0))
        else:
          q = idx if type(acc) is int and acc == 1 else idx // acc
          sub.append(q if k == 0 else q % s)
        acc = _mul(acc, s)
      idx, inner_valid = v.to_indexed_uops(tuple(reversed(sub)), inner_valid)
    if inner_valid is not None:
      if back: inner_valid = inner_valid.simplify()  # while the stand-ins' tighter ranges still apply
      valid = valid & inner_valid
    both = UOp.sink_of(idx, valid).simplify()
    if back: both = both.substitute(back).simplify()
    return both.src[0], both.src[1]

  def real_size(self) -> int:
    """Buffer elements this tracker may touch: 1 + the largest index over valid positions (an upper bound)."""
    if any(type(s) is int and s == 0 for s in self.shape): return 0
    m0 = self.views[0]._max_index()
    if m0 is None: return 0
    if len(self.views) == 1: return m0 + 1
    idx, valid = self.to_indexed_uops()
    if valid.op is Ops.CONST and not valid.arg: return 0
    return int(min(m0, idx.vmax)) + 1

  def real_strides(self, ignore_valid: bool = False) -> tuple[sint | None, ...]:
    """Per dim, the buffer stride of that loop index, or None if it is not a plain stride (masked or non-linear)."""
    if (v := self._single) is not None:
      if v.mask is None or ignore_valid: return v.strides
      return tuple(None if not (type(b) is int and b == 0 and _eq(e, s)) else st for st, s, (b, e) in zip(v.strides, v.shape, v.mask))
    idxs = _ranges(self.shape)
    idx, valid = self.to_indexed_uops(idxs)
    pos = {r: k for k, r in enumerate(idxs)}
    coeff: list[int] = [0]*len(idxs)
    bad: set[int] = set()  # membership only, never iterated
    stack = [idx]
    while stack:  # idx is a simplified sum of coefficient*term: a dim has a stride iff its index appears only as a plain term
      u = stack.pop()
      if u.op is Ops.ADD: stack.extend(u.src)
      elif u in pos: coeff[pos[u]] += 1
      elif u.op is Ops.MUL and u.src[0] in pos and u.src[1].op is Ops.CONST: coeff[pos[u.src[0]]] += u.src[1].arg
      else: bad.update(pos[r] for r in u.toposort() if r in pos)
    if not ignore_valid: bad.update(pos[r] for r in valid.toposort() if r in pos)
    return tuple(None if k in bad else c for k, c in enumerate(coeff))

  def unit_stride_axes(self, ignore_valid: bool = False) -> list[int]:
    return [i for i, st in enumerate(self.real_strides(ignore_valid)) if type(st) is int and st == 1]

  def axis_is_masked(self, axis: int) -> bool:
    if not (type(axis) is int and 0 <= axis < len(self.shape)):
      raise ValueError(f"axis {axis} is out of range for shape {_shape_str(self.shape)}")
    if (v := self._single) is not None:
      if v.mask is None: return False
      b, e = v.mask[axis]
      return not (type(b) is int and b == 0 and _eq(e, v.shape[axis]))
    idxs = _ranges(self.shape)
    _, valid = self.to_indexed_uops(idxs)
    return idxs[axis] in valid.toposort()

  # *** composition and simplification ***
  @_memo  # the scheduler composes the same pairs in every kernel of a repeated layer
  def __add__(self, other: ShapeTracker) -> ShapeTracker:
    """`other` applied on top of self: other's index space starts from self's shape."""
    # push other's views one at a time, innermost first, merging after each push
    return functools.reduce(lambda st, v: ShapeTracker(st.views + (v,)).simplify(), other.views, self)

  @_memo
  def simplify(self) -> ShapeTracker:
    """Merge adjacent views wherever one view expresses the pair exactly."""
    views = list(self.views)
    merged = True
    while merged and len(views) >= 2:
      merged = False
      for i in range(len(views) - 1, 0, -1):  # outermost pair first: that is where new views are pushed
        if (m := views[i-1] + views[i]) is not None:
          views[i-1:i+1] = [m]
          merged = True
          break
    return self if len(views) == len(self.views) else ShapeTracker(tuple(views))

  # *** movement ops: a tracker's op is its outermost view's op (same argument, same errors) ***
  reshape = _on_outer_view(View.reshape)
  permute = _on_outer_view(View.permute)
  expand = _on_outer_view(View.expand)
  pad = _on_outer_view(View.pad)
  shrink = _on_outer_view(View.shrink)
  stride = _on_outer_view(View.stride)
  _flip_unchecked = _on_outer_view(View.flip)
  def flip(self, axes: tuple[int, ...]) -> ShapeTracker:
    axes = tuple(axes)
    if not all(type(a) is int and 0 <= a < len(self.shape) for a in axes) or len(set(axes)) != len(axes):
      raise ValueError(f"cannot flip shape {_shape_str(self.shape)} on axes {axes}: axes must be distinct dims")
    return self._flip_unchecked(axes)

  # *** symbolic ***
  def vars(self) -> list[UOp]:
    """DEFINE_VARs used by any view, first-seen order."""
    return dedup(x for v in self.views for x in v.vars())
  @property
  def var_vals(self) -> dict[UOp, int]: return self.unbind()[1]
  def unbind(self) -> tuple[ShapeTracker, dict[UOp, int]]:
    """Replace BINDs by their Variables; returns the bound values."""
    if all(v._ints for v in self.views): return self, {}
    out: list[View] = []
    var_vals: dict[UOp, int] = {}
    for v in self.views:
      nv, vv = v.unbind()
      for k, val in vv.items():
        if var_vals.get(k, val) != val: raise ValueError(f"Variable {k.arg[0]!r} is bound to both {var_vals[k]} and {val}")
        var_vals[k] = val
      out.append(nv)
    return ShapeTracker(tuple(out)), var_vals
  def to_uop(self) -> UOp: return UOp(Ops.VIEW, dtypes.void, (), self)

intern_plainly(ShapeTracker)  # a VIEW's argument: its equality already tells trackers of 1 and True apart

def clear_caches() -> None:
  """Forget every memoized view/tracker result: benchmarks measure cold paths with it, and kernel_ast.rules_fingerprint
  calls it when a rule changes (a patched helper, `_compose`, would otherwise still be answered from these tables)."""
  for table in _MEMOS: table.cache_clear()

__all__ = ["View", "ShapeTracker", "strides_for_shape", "clear_caches"]
