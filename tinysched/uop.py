"""The IR node: an immutable, interned UOp with a process-stable content key.

Building the same node twice returns the same object, so `is` is equality and graphs share
structure. `key` is a sha256 over op, dtype, arg and the children's keys: it never uses id() or
Python's randomized str hash, so it is identical in every process.
"""
from __future__ import annotations
import hashlib, math, struct, threading, weakref
from _weakref import _remove_dead_weakref  # type: ignore[attr-defined]  # CPython's C helper, not in typeshed
from enum import Enum
from functools import cached_property
from typing import Any, Callable, Iterator, Union
from tinysched.dtype import DType, PtrDType, dtypes, ConstType
from tinysched.ops import Ops, GroupOp
from tinysched.helpers import cdiv, cmod

sint = Union[int, "UOp"]  # a shape entry: a python int or a symbolic integer UOp
_MISSING = object()
# read once for the per-node properties (st, buf_uop): on Python 3.11 every `Ops.X` read goes through EnumType's
# __getattr__ hook (~60 ns)
_VIEW, _BUFFERS, _READS_BUFFER = Ops.VIEW, (Ops.BUFFER, Ops.DEFINE_GLOBAL), (Ops.LOAD, Ops.PRELOAD, Ops.STORE, Ops.ASSIGN)
_REDUCE_AXIS, _NO_SHAPE = Ops.REDUCE_AXIS, (Ops.SINK, Ops.BUFFER, Ops.DEFINE_GLOBAL, Ops.BIND)  # (st: ops whose sources' shape is not theirs)
_CONST, _SINK, _STORE, _WHERE = Ops.CONST, Ops.SINK, Ops.STORE, Ops.WHERE  # (the construction helpers')

def _intern_arg(arg: Any) -> Any:
  # floats: 0.0 == -0.0 and nan != nan would merge or split nodes wrongly, so intern by bit pattern;
  # the type is part of the key so CONST 1 and CONST 1.0 (or True) never merge
  if type(arg) is float: return (float, struct.pack("<d", arg))
  # inside a tuple too, a plainly keyed element stands for itself (it never equals a (type, ...) pair)
  if type(arg) is tuple: return (tuple, tuple([a if (t := type(a)) in _PLAIN_ARGS else (int, a) if t is int else _intern_arg(a) for a in arg]))
  return (type(arg), arg)

_ucache: dict[tuple, _Ref] = {}  # intern table: key -> weak reference (a dead node frees its entry)

class _Ref(weakref.ref):
  """An intern table entry: it carries its key, so one callback (no closure per node) frees the entry."""
  __slots__ = ("key",)
  key: tuple

def _forget(r: _Ref) -> None:
  # only a dead entry, not one a live node of the same key has taken since; one lookup (in C) instead of two
  _remove_dead_weakref(_ucache, r.key)

_new: Callable[[type], Any] = object.__new__

class _UOpMeta(type):
  def __call__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None):
    k = (op, dtype, src, arg if type(arg) in _PLAIN_ARGS else _intern_arg(arg))
    if (ref := _ucache.get(k)) is not None and (ret := ref()) is not None: return ret
    # the fields set here, not through __init__: a python call less per new node (the hot path of every rewrite); through
    # the slots' own setters (set after the class below), which skip object.__setattr__'s lookup of the name (~40 ns each)
    ret = _new(cls)
    _set_op(ret, op); _set_dtype(ret, dtype); _set_src(ret, src); _set_arg(ret, arg)
    r = _ucache[k] = _Ref(ret, _forget)
    r.key = k
    return ret

# args that intern by plain equality (no float/bool/int confusion possible inside): skip _intern_arg. Types of other
# modules (ShapeTracker, whose equality is already type-strict) join through intern_plainly
_PLAIN_ARGS: set[type] = {type(None), str, Ops, DType, PtrDType}  # (dtypes and ops are equal only to themselves)

def intern_plainly(t: type) -> None: _PLAIN_ARGS.add(t)

def arg_identity(arg: Any) -> Any:
  """What two node arguments must share for the nodes to intern as one (with op, dtype and sources): the interning key's
  argument part, for whoever compares graphs without building nodes (KernelMemo's structural key). The same rule as
  `_UOpMeta.__call__`, which inlines it."""
  return arg if type(arg) in _PLAIN_ARGS else _intern_arg(arg)

_KEYING = threading.local()  # .active: computing a key (per thread)

def stable_repr(x: Any) -> str:
  """A deterministic text form of a node argument; the input of `key` and of printed ASTs."""
  if x is None or type(x) in (bool, int, str): return repr(x)
  if type(x) is float:
    if math.isnan(x): return "nan" if not math.copysign(1, x) < 0 else "-nan"
    return repr(x)  # repr round-trips exactly and keeps -0.0 and inf
  if isinstance(x, UOp):
    # inside a content key a node counts by its own full key (bounds and dtypes of Variables included);
    # for printing, symbolic integers read as infix text
    return f"UOp#{x.key}" if getattr(_KEYING, "active", False) else (x.render_sym() if x.op in _SYM_OPS else f"UOp#{x.key[:16]}")
  if isinstance(x, Enum): return f"{type(x).__name__}.{x.name}"
  if isinstance(x, DType): return repr(x)
  if isinstance(x, tuple): return "(" + ", ".join(stable_repr(a) for a in x) + ("," if len(x) == 1 else "") + ")"
  if hasattr(x, "stable_repr"): return x.stable_repr()
  raise TypeError(f"argument of type {type(x).__name__} has no stable representation: {x!r}")

_FIELDS = ("op", "dtype", "src", "arg")  # a node's identity, in constructor order

def _visit(n: UOp, out: dict[UOp, None]) -> None:
  # UOp.toposort's walk: sources first, left to right, each node once
  for s in n.src:
    if s not in out: _visit(s, out)
  out[n] = None

def _infix(op: Ops, negate_rhs: bool = False) -> tuple[Callable, Callable]:
  """The operator pair (self OP x, x OP self) of a UOp, where x is a UOp or a python scalar (a constant of self's dtype).
  With negate_rhs the right operand is negated first: subtraction is built as addition of the negation."""
  if negate_rhs:
    def left(self, x): return self.alu(op, -self.ufix(x))
    def right(self, x): return self.ufix(x).alu(op, -self)
  else:
    def left(self, x): return self.alu(op, self.ufix(x))
    def right(self, x): return self.ufix(x).alu(op, self)
  return left, right

class UOp(metaclass=_UOpMeta):
  __slots__ = ("op", "dtype", "src", "arg", "__weakref__", "__dict__")
  op: Ops
  dtype: DType
  src: tuple[UOp, ...]
  arg: Any
  def __init__(self, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None):
    object.__setattr__(self, "op", op)
    object.__setattr__(self, "dtype", dtype)
    object.__setattr__(self, "src", src)
    object.__setattr__(self, "arg", arg)
  def __setattr__(self, name, value):
    if name in _FIELDS: raise AttributeError(f"UOp is immutable: cannot set {name}")
    object.__setattr__(self, name, value)
  def __delattr__(self, name):
    if name in _FIELDS: raise AttributeError(f"UOp is immutable: cannot delete {name}")
    object.__delattr__(self, name)
  def __reduce__(self): raise TypeError("UOps are not picklable by design: use replay's canonical encoding")
  def replace(self, **kwargs) -> UOp:
    """This node with some of its fields changed (keywords other than the four fields are ignored)."""
    return make_uop(kwargs.get("op", self.op), kwargs.get("dtype", self.dtype), kwargs.get("src", self.src), kwargs.get("arg", self.arg))

  # *** identity ***
  @cached_property
  def key(self) -> str:
    """Content hash, identical across processes (hex sha256)."""
    _fill_children(self, "key")  # children first, without recursion: deep graphs must not hit the recursion limit
    h = hashlib.sha256()
    prev, _KEYING.active = getattr(_KEYING, "active", False), True
    try: arg = stable_repr(self.arg)
    finally: _KEYING.active = prev
    h.update(f"{self.op.name}|{self.dtype!r}|{arg}|{len(self.src)}".encode())
    for s in self.src: h.update(s.key.encode())
    return h.hexdigest()

  # *** graph walking ***
  def toposort(self) -> dict[UOp, None]:
    """Every node of the graph, children before parents, in deterministic (first-visit) order."""
    out: dict[UOp, None] = {}
    # recursion is twice as fast (on 3.11 a Python call takes no C stack); a graph deeper than the recursion limit
    # (a long training step) walks again on an explicit stack, which visits in the same order
    try:
      _visit(self, out)
      return out
    except RecursionError: return self._toposort_on_a_stack()
  def _toposort_on_a_stack(self) -> dict[UOp, None]:
    out: dict[UOp, None] = {}
    stack: list[tuple[UOp, bool]] = [(self, False)]
    while stack:
      n, expanded = stack.pop()
      if n in out: continue
      if expanded: out[n] = None
      else:
        stack.append((n, True))
        for s in reversed(n.src):
          if s not in out: stack.append((s, False))
    return out
  @property
  def sparents(self) -> dict[UOp, None]: return self.toposort()
  @property
  def parents(self) -> dict[UOp, None]:
    ret = self.toposort(); del ret[self]
    return ret
  def __iter__(self) -> Iterator[UOp]: return iter(self.toposort())

  # *** printing ***
  def pretty(self) -> str:
    """Readable, deterministic tree; a node used more than once is printed once as `%n` and referenced as `^%n`."""
    counts: dict[UOp, int] = {}
    for n in self.toposort():
      for s in n.src: counts[s] = counts.get(s, 0) + 1
    labels: dict[UOp, int] = {}
    lines: list[str] = []
    stack: list[tuple[UOp, int]] = [(self, 0)]
    while stack:
      n, depth = stack.pop()
      pad = "  " * depth
      if n in labels:
        lines.append(f"{pad}^%{labels[n]}")
        continue
      tag = ""
      if counts.get(n, 0) > 1:
        labels[n] = len(labels)
        tag = f"%{labels[n]} = "
      arg = "" if n.arg is None else f" {stable_repr(n.arg)}"
      lines.append(f"{pad}{tag}{n.op.name} {n.dtype!r}{arg}")
      for s in reversed(n.src): stack.append((s, depth + 1))
    return "\n".join(lines)
  def __repr__(self) -> str:
    if self.op in _SYM_OPS and all(x.op in _SYM_OPS for x in self.toposort()): return f"<{self.render_sym()}>"
    return f"UOp({self.op!r}, {self.dtype!r}, arg={stable_repr(self.arg)}, src=<{len(self.src)}>, key={self.key[:12]})"

  # *** construction helpers ***
  @staticmethod
  def const(dtype: DType, b: ConstType | UOp) -> UOp:
    if isinstance(b, UOp): return b.unbind()[0] if b.op is Ops.BIND else b
    if dtype.count > 1: return UOp(Ops.VECTORIZE, dtype, (UOp.const(dtype.scalar(), b),)*dtype.count)
    return make_uop(_CONST, dtype, (), dtypes.as_const(b, dtype))
  def const_like(self, b: ConstType) -> UOp: return UOp.const(self.dtype, b)
  def cast(self, dtype: DType) -> UOp:
    if self.dtype == dtype: return self
    if self.op is Ops.CONST: return UOp.const(dtype, self.arg)
    return self._only_src(Ops.CAST, dtype=dtype)
  def bitcast(self, dtype: DType) -> UOp: return self._only_src(Ops.BITCAST, dtype=dtype)
  def _only_src(self, op: Ops, arg: Any = None, dtype: DType | None = None) -> UOp:
    """A node of `op` over self alone, of self's dtype unless one is given."""
    return make_uop(op, self.dtype if dtype is None else dtype, (self,), arg)
  def alu(self, op: Ops, *src: UOp) -> UOp:
    srcs = (self,) + src
    out_dtype = dtypes.bool if op in GroupOp.Comparison else srcs[-1].dtype
    if op is _WHERE: out_dtype = srcs[1].dtype
    # an integer compared with itself is decided (not for floats: NaN != NaN); symbolic shapes compare this way
    if op in GroupOp.Comparison and len(srcs) == 2 and srcs[0] is srcs[1] and not dtypes.is_float(srcs[0].dtype):
      return UOp.const(dtypes.bool, False)
    # fold constants eagerly: keeps symbolic shapes small and identical wherever they are built
    if all(s.op is _CONST for s in srcs) and op in _PY_ALU:
      try: return UOp.const(out_dtype, exec_alu(op, out_dtype, [s.arg for s in srcs]))
      except (ZeroDivisionError, ValueError, OverflowError): pass
    return make_uop(op, out_dtype, srcs)
  def ufix(self, x: sint | float) -> UOp: return x if isinstance(x, UOp) else UOp.const(self.dtype, x)
  def where(self, x: UOp | ConstType, y: UOp | ConstType) -> UOp:
    xx = x if isinstance(x, UOp) else (y.const_like(x) if isinstance(y, UOp) else UOp.const(dtypes.from_py(x), x))
    yy = y if isinstance(y, UOp) else xx.const_like(y)
    return self.alu(Ops.WHERE, xx, yy)
  def sink(self, *srcs: UOp) -> UOp: return UOp.sink_of(self, *srcs)
  @staticmethod
  def sink_of(*srcs: UOp) -> UOp: return make_uop(_SINK, dtypes.void, srcs)
  @staticmethod
  def store(*srcs: UOp) -> UOp: return make_uop(_STORE, dtypes.void, srcs)
  def r(self, op: Ops, axis: tuple[int, ...]) -> UOp: return self._only_src(_REDUCE_AXIS, (op, tuple(axis)))
  @property
  def axis_arg(self) -> tuple[int, ...]:
    if self.op is not _REDUCE_AXIS: raise ValueError(f"axis_arg of {self.op}")
    return self.arg[1]
  def view(self, st) -> UOp:
    """Wrap in a VIEW carrying ShapeTracker `st`."""
    return self._only_src(_VIEW, st)
  @property
  def st(self):
    """The ShapeTracker a node's value has: a VIEW's own, a buffer op's VIEW source, an elementwise
    op's first source with one, a reduce's input reduced; None for nodes without a shape."""
    if (op := self.op) is _VIEW: return self.arg  # (most asks: nothing to cache, and no __dict__ made for it)
    if (ret := self.__dict__.get("_st", _MISSING)) is not _MISSING: return ret
    ret = None
    if op in GroupOp.Buffer:
      for s in self.src:
        if s.op is _VIEW:
          ret = s.arg
          break
    elif op is _REDUCE_AXIS:
      if (sst := self.src[0].st) is not None: ret = type(sst).from_shape(sst.reduce(self.axis_arg))
    elif self.src and op not in _NO_SHAPE:
      for s in self.src:
        if (ret := s.st) is not None: break
    self.__dict__["_st"] = ret
    return ret
  @property
  def shape(self) -> tuple[sint, ...]:
    if (st := self.st) is None: raise ValueError(f"{self.op} has no shape")
    return st.shape
  @property
  def buf_uop(self) -> UOp:
    """The BUFFER / DEFINE_GLOBAL a buffer op or VIEW refers to."""
    if (op := self.op) in _BUFFERS: return self
    if op is _VIEW and self.src: return self.src[0].buf_uop
    if op in _READS_BUFFER: return self.src[0].buf_uop
    raise ValueError(f"{self.op} has no buffer")

  # *** symbolic integers ***
  __add__, __radd__ = _infix(Ops.ADD)
  __sub__, __rsub__ = _infix(Ops.ADD, negate_rhs=True)
  __mul__, __rmul__ = _infix(Ops.MUL)
  __floordiv__, __rfloordiv__ = _infix(Ops.IDIV)
  __mod__, __rmod__ = _infix(Ops.MOD)
  __lt__, __gt__ = _infix(Ops.CMPLT)  # x > y is y < x: one comparison op
  # no reflected forms for these: a python scalar on the left stays a TypeError
  __and__, __or__, __xor__, ne, maximum = (_infix(o)[0] for o in (Ops.AND, Ops.OR, Ops.XOR, Ops.CMPNE, Ops.MAX))
  # integer negation is x*-1 so that the simplifier sees one canonical form of subtraction
  def __neg__(self): return self*-1 if dtypes.is_int(self.dtype) else self.alu(Ops.NEG)
  def __ge__(self, x): return (self < x).logical_not()
  def __le__(self, x): return (self > x).logical_not()
  def eq(self, x): return self.ne(x).logical_not()
  def logical_not(self): return self.alu(Ops.CMPNE, self.const_like(True))
  def minimum(self, x): return -((-self).maximum(-self.ufix(x)))
  # equality and hashing are object identity (inherited from object, in C): nodes are interned
  def __bool__(self): raise TypeError(f"the truth value of symbolic {self!r} is unknown: use resolve()")

  def bind(self, val: int) -> UOp:
    if self.op is not Ops.DEFINE_VAR: raise ValueError(f"only a Variable can be bound, not {self.op}")
    name, lo, hi = self.arg
    if not isinstance(val, int) or not lo <= val <= hi: raise ValueError(f"value {val!r} is outside Variable {name!r}'s range [{lo}, {hi}]")
    return UOp(Ops.BIND, self.dtype, (self, self.const_like(val)))
  def unbind(self) -> tuple[UOp, int]:
    if self.op is not Ops.BIND: raise ValueError(f"unbind needs a bound Variable, not {self.op}")
    return self.src[0], self.src[1].arg
  @property
  def val(self) -> int: return self.unbind()[1]
  @property
  def expr(self) -> str:
    if self.op is not Ops.DEFINE_VAR: raise ValueError(f"expr of {self.op}")
    return self.arg[0]
  def vars(self) -> list[UOp]:
    """DEFINE_VARs and BINDs inside, in first-visit order."""
    return [x for x in self.toposort() if x.op is Ops.DEFINE_VAR or x.op is Ops.BIND]

  @cached_property
  def _min_max(self) -> tuple[ConstType, ConstType]:
    _fill_children(self, "_min_max")
    return _range(self)
  @property
  def vmin(self) -> ConstType: return self._min_max[0]
  @property
  def vmax(self) -> ConstType: return self._min_max[1]

  def render_sym(self) -> str:
    """Infix text of a symbolic integer expression (for printing shapes and index expressions)."""
    return _render(self)
  def simplify(self) -> UOp: return REWRITES.simplify(self)
  def substitute(self, dvars: dict[UOp, UOp]) -> UOp: return REWRITES.substitute(self, dvars)

class _Rewrites:
  """UOp.simplify and UOp.substitute run the rewrite engine, which builds on this module: symbolic.py and rewrite.py set
  these at their import (shape.py imports symbolic, which imports rewrite), so uop never imports upward."""
  __slots__ = ("simplify", "substitute")
  simplify: Callable[[UOp], UOp]
  substitute: Callable[[UOp, dict[UOp, UOp]], UOp]
REWRITES = _Rewrites()

# the field slots' setters, for _UOpMeta.__call__
_set_op, _set_dtype, _set_src, _set_arg = (UOp.__dict__[f].__set__ for f in _FIELDS)

# UOp(op, dtype, src, arg) itself, called as a function: a class call goes through the metaclass's __call__ slot, which
# looks the method up and calls it without vectorcall (~650 instructions of ~2400 for an interned hit). For the rewrite
# engine's rebuild of every node whose sources changed
make_uop = _UOpMeta.__call__.__get__(UOp)

def _fill_children(root: UOp, attr: str) -> None:
  """Compute the cached property `attr` of every descendant of `root` that lacks it, children before parents,
  iteratively (the property of a node then only reads its direct children's cached values)."""
  stack: list[tuple[UOp, bool]] = [(s, False) for s in reversed(root.src)]
  while stack:
    n, ready = stack.pop()
    if attr in n.__dict__: continue
    if ready: getattr(n, attr)
    else:
      stack.append((n, True))
      stack.extend((s, False) for s in reversed(n.src) if attr not in s.__dict__)

_SYM_OPS = frozenset({Ops.CONST, Ops.DEFINE_VAR, Ops.BIND, Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.NEG, Ops.CMPLT,
                      Ops.CMPNE, Ops.AND, Ops.OR, Ops.WHERE, Ops.RANGE, Ops.SPECIAL, Ops.XOR})

def Variable(name: str, min_val: int, max_val: int, dtype: DType = dtypes.int32) -> UOp:
  """A symbolic integer in [min_val, max_val]; bind it to a value with .bind(v)."""
  if not isinstance(name, str) or not name: raise ValueError(f"Variable name must be a non-empty string, got {name!r}")
  if not (isinstance(min_val, int) and isinstance(max_val, int)) or min_val > max_val:
    raise ValueError(f"Variable {name!r} needs integer bounds min <= max, got [{min_val}, {max_val}]")
  return UOp(Ops.DEFINE_VAR, dtype, (), (name, min_val, max_val))

# *** python semantics of every ALU op (constant folding and the symbolic evaluator) ***

_PY_ALU: dict[Ops, Callable] = {
  Ops.NEG: lambda x: (not x) if isinstance(x, bool) else -x, Ops.EXP2: lambda x: 2.0**x if x < 1024 else math.inf,
  Ops.LOG2: lambda x: math.log2(x) if x > 0 else (-math.inf if x == 0 else math.nan),
  Ops.SIN: lambda x: math.sin(x) if math.isfinite(x) else math.nan,
  Ops.SQRT: lambda x: math.sqrt(x) if x >= 0 else math.nan,
  Ops.RECIP: lambda x: 1/x if x != 0 else math.copysign(math.inf, x),
  Ops.ADD: lambda x, y: x + y, Ops.MUL: lambda x, y: x * y, Ops.MAX: max,
  Ops.IDIV: lambda x, y: cdiv(x, y) if y != 0 else 0, Ops.MOD: lambda x, y: cmod(x, y) if y != 0 else 0,
  Ops.CMPLT: lambda x, y: x < y, Ops.CMPNE: lambda x, y: x != y,
  Ops.AND: lambda x, y: x & y, Ops.OR: lambda x, y: x | y, Ops.XOR: lambda x, y: x ^ y,
  Ops.SHL: lambda x, y: x << y, Ops.SHR: lambda x, y: x >> y,
  Ops.WHERE: lambda c, x, y: x if c else y, Ops.MULACC: lambda x, y, z: x*y + z,
}

def exec_alu(op: Ops, dtype: DType, operands: list[ConstType]) -> ConstType:
  """Evaluate one ALU op on python scalars with the wrap-around of `dtype`."""
  return dtypes.as_const(_PY_ALU[op](*operands), dtype)

def _range(u: UOp) -> tuple[ConstType, ConstType]:
  dmin, dmax = dtypes.min(u.dtype), dtypes.max(u.dtype)
  op, s = u.op, u.src
  if op is Ops.CONST: return u.arg, u.arg
  if op is Ops.DEFINE_VAR: return u.arg[1], u.arg[2]
  if op is Ops.BIND: return s[0].vmin, s[0].vmax
  if op is Ops.RANGE: return s[0].vmin, s[1].vmax - 1
  if op is Ops.SPECIAL: return 0, u.arg[1] - 1
  # a result that may leave the dtype's range wraps around (exec_alu), so then it can be anything
  def fit(lo, hi): return (lo, hi) if dmin <= lo and hi <= dmax else (dmin, dmax)
  if op is Ops.CAST and dtypes.is_int(u.dtype) and dtypes.is_int(s[0].dtype): return fit(s[0].vmin, s[0].vmax)
  if op is Ops.CAST and dtypes.is_int(u.dtype) and dtypes.is_bool(s[0].dtype): return int(s[0].vmin), int(s[0].vmax)
  if op is Ops.NEG and not dtypes.is_bool(u.dtype): return fit(-s[0].vmax, -s[0].vmin)
  if len(s) >= 2:
    (a0, a1), (b0, b1) = s[0]._min_max, s[1]._min_max
    if op is Ops.ADD: return fit(a0 + b0, a1 + b1)
    if op is Ops.MUL:
      vals = [a0*b0, a0*b1, a1*b0, a1*b1]
      return fit(min(vals), max(vals))
    if op is Ops.MAX: return max(a0, b0), max(a1, b1)
    if op in (Ops.IDIV, Ops.MOD) and dtypes.is_int(u.dtype) and \
        (r := _divmod_range(op, a0, a1, b0, b1)) is not None: return fit(*r)  # type: ignore[arg-type]  # an int dtype: int bounds
    if op is Ops.CMPLT: return bool(a1 < b0), bool(a0 < b1)
    if op is Ops.CMPNE: return bool(a1 < b0 or a0 > b1), not (a0 == a1 == b0 == b1)
    if op is Ops.AND and dtypes.is_bool(u.dtype): return bool(a0 and b0), bool(a1 and b1)
    if op is Ops.OR and dtypes.is_bool(u.dtype): return bool(a0 or b0), bool(a1 or b1)
    if op is Ops.WHERE:
      (c0, c1) = (a0, a1)
      (x0, x1), (y0, y1) = s[1]._min_max, s[2]._min_max
      if c0 == c1: return (x0, x1) if c0 else (y0, y1)
      return min(x0, y0), max(x1, y1)
  return dmin, dmax

def _divmod_range(op: Ops, a0: int, a1: int, b0: int, b1: int) -> tuple[int, int] | None:
  """[lo, hi] of a C-style a // b or a % b for a in [a0, a1] and b in [b0, b1] (exact integers), or None when the
  divisor's range holds 0 (then the op yields 0 there and anything else near it: no useful bound)."""
  if b0 <= 0 <= b1: return None
  if op is Ops.IDIV:
    # truncating division is monotone in a for a fixed sign of b, and |a/b| shrinks as |b| grows: the corners bound it
    qs = [cdiv(a, b) for a in (a0, a1) for b in (b0, b1)]
    return min(qs), max(qs)
  m, small = max(abs(b0), abs(b1)) - 1, min(abs(b0), abs(b1))  # |a % b| < |b|, with the sign of a; a itself when |a| < |b|
  if a0 >= 0: return (a0, a1) if a1 < small else (0, min(a1, m))
  if a1 <= 0: return (a0, a1) if -a0 < small else (max(a0, -m), 0)
  return max(a0, -m), min(a1, m)

_INFIX = {Ops.ADD: "+", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.AND: "&", Ops.OR: "|",
          Ops.XOR: "^"}

def _render(root: UOp) -> str:
  # children before parents, iteratively: a deep expression must not hit the recursion limit
  memo: dict[UOp, str] = {}
  for u in root.toposort(): memo[u] = _render_one(u, memo)
  return memo[root]

def _render_one(u: UOp, memo: dict[UOp, str]) -> str:
  if u.op is Ops.CONST: return repr(u.arg)
  if u.op is Ops.DEFINE_VAR: return u.arg[0]
  if u.op is Ops.BIND: return f"{u.src[0].arg[0]}={u.src[1].arg}"
  if u.op is Ops.RANGE: return f"r{u.arg}" if not isinstance(u.arg, tuple) else f"r{u.arg[0]}"
  if u.op is Ops.SPECIAL: return str(u.arg[0])
  if u.op is Ops.NEG: return f"(-{memo[u.src[0]]})"
  if u.op is Ops.MAX: return f"max({memo[u.src[0]]}, {memo[u.src[1]]})"
  if u.op is Ops.WHERE: return f"({memo[u.src[0]]} ? {memo[u.src[1]]} : {memo[u.src[2]]})"
  if u.op in _INFIX and len(u.src) == 2: return f"({memo[u.src[0]]}{_INFIX[u.op]}{memo[u.src[1]]})"
  return f"{u.op.name}({', '.join(memo[s] for s in u.src)})"

# *** helpers over sint (int or symbolic UOp) ***

def resolve(x: Any, default: bool = True) -> bool:
  """The truth of a (possibly symbolic) comparison if it is decided by value ranges, else `default`."""
  if not isinstance(x, UOp): return bool(x)
  if x.dtype != dtypes.bool: raise ValueError(f"resolve needs a boolean expression, got {x!r}")
  lo, hi = x._min_max  # a bool's range is (False, True) unless decided
  return default if lo != hi else bool(lo)

def sint_eq(a: sint, b: sint) -> bool:
  """Structural equality of two shape entries (symbolic entries compare by identity after interning)."""
  return a is b if isinstance(a, UOp) or isinstance(b, UOp) else a == b

def ssimplify(x: sint) -> sint:
  if not isinstance(x, UOp): return x
  r = x.simplify()
  return r.arg if r.op is Ops.CONST else r

def sym_ne(a: sint, b: sint) -> Any:
  """a != b: a bool for two ints, the symbolic CMPNE when either side is a Variable expression (`resolve` decides it)."""
  if isinstance(a, UOp): return a.ne(b)
  return b.ne(a) if isinstance(b, UOp) else a != b

def smax(*xs: sint) -> sint:
  if len(xs) == 2 and type(xs[0]) is int and type(xs[1]) is int: return max(xs)  # the hot case: concrete shapes
  xs_ = xs[0] if len(xs) == 1 and isinstance(xs[0], (tuple, list)) else xs
  if all(isinstance(x, int) for x in xs_): return max(xs_)
  ret = xs_[0]
  for x in xs_[1:]: ret = x.maximum(ret) if isinstance(x, UOp) else ret.maximum(x) if isinstance(ret, UOp) else max(ret, x)
  return ssimplify(ret)

def smin(*xs: sint) -> sint:
  if len(xs) == 2 and type(xs[0]) is int and type(xs[1]) is int: return min(xs)
  xs_ = xs[0] if len(xs) == 1 and isinstance(xs[0], (tuple, list)) else xs
  if all(isinstance(x, int) for x in xs_): return min(xs_)
  ret = xs_[0]
  for x in xs_[1:]: ret = x.minimum(ret) if isinstance(x, UOp) else ret.minimum(x) if isinstance(ret, UOp) else min(ret, x)
  return ssimplify(ret)

def sym_infer(x: sint, var_vals: dict[UOp, int]) -> int:
  """Evaluate a symbolic integer given values for its Variables."""
  if isinstance(x, int): return x
  env: dict[UOp, ConstType] = {}
  def get(n: UOp) -> ConstType:
    # a Variable needs a value only where it is used unbound (the one under a BIND is not evaluated)
    if n.op is Ops.DEFINE_VAR and n not in env: raise KeyError(f"no value for Variable {n.arg[0]!r}")
    return env[n]
  for n in x.toposort():
    if n.op is Ops.CONST: env[n] = n.arg
    elif n.op is Ops.DEFINE_VAR:
      if n in var_vals: env[n] = var_vals[n]
    elif n.op is Ops.BIND: env[n] = n.src[1].arg
    elif n.op in _PY_ALU: env[n] = exec_alu(n.op, n.dtype, [get(s) for s in n.src])
    elif n.op is Ops.CAST: env[n] = dtypes.as_const(get(n.src[0]), n.dtype)
    else: raise ValueError(f"cannot evaluate {n.op} symbolically")
  return get(x)  # type: ignore[return-value]  # an int expression evaluates to an int

__all__ = ["UOp", "make_uop", "Variable", "sint", "resolve", "sym_ne", "smax", "smin", "ssimplify", "sym_infer", "exec_alu", "stable_repr", "Ops",
           "GroupOp", "PtrDType"]
