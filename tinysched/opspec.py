"""What each op of a scheduled graph accepts: how many sources, of what kind at each position, its own dtype and its
argument. One table (SPECS) for the scheduler's vocabulary, the ops of every graph that exists before code generation:
the big graph (scheduling/bigraph.py), the pre-sinks cut from it (scheduling/stores.py), the kernel ASTs
(scheduling/kernel_ast.py) and the symbolic integers inside their views (uop.py, symbolic.py). Each entry says what
those passes build, nothing looser: a node it refuses is one no pass makes, and code that reads it (index
src[2] of a STORE, the element dtype of a LOAD's buffer) would fail or silently compute something else.

`problem(op, dtype, src, arg)` says what is wrong with a node's fields (before the node is built: replay's decoder asks
it for every node of a stored graph); `verify(*roots)` checks whole graphs. The lowering ops (RANGE, SPECIAL,
VECTORIZE...) have no entry: no graph before codegen holds one, so they are refused until the lowerer gets entries.
"""
from __future__ import annotations
import reprlib
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable
from tinysched.dtype import DType, PtrDType, dtypes
from tinysched.ops import Ops, GroupOp
from tinysched.uop import UOp
from tinysched.shape import ShapeTracker

@dataclass(frozen=True)
class Kind:
  """What a source position accepts: `ok(source, the node's dtype, all sources)` (earlier positions already passed)."""
  says: str
  ok: Callable[[UOp, DType, tuple], bool]

@dataclass(frozen=True)
class DKind:
  """The dtypes a node of one form may have."""
  says: str
  ok: Callable[[DType], bool]

@dataclass(frozen=True)
class ArgKind:
  """The arguments an op takes: `ok(arg, the node's dtype)`."""
  says: str
  ok: Callable[[Any, DType], bool]

@dataclass(frozen=True)
class Form:
  """One shape of an op: its dtype, a kind per source, and `more`: any number of further sources of that kind."""
  dtype: DKind
  src: tuple[Kind, ...]
  more: Kind | None = None

@dataclass(frozen=True)
class OpSpec:
  forms: tuple[Form, ...]  # of distinct source counts: the count picks the form
  arg: ArgKind
  @property
  def min_src(self) -> int: return min(len(f.src) for f in self.forms)
  @property
  def max_src(self) -> int | None: return None if any(f.more for f in self.forms) else max(len(f.src) for f in self.forms)
  def form(self, n: int) -> Form | None:
    """The form of a node with `n` sources, or None when the op never has that many."""
    if n < len(by_count := self._by_count): return by_count[n]
    return next((f for f in self.forms if f.more is not None), None)
  @cached_property
  def _by_count(self) -> tuple[Form | None, ...]:  # (problem asks for every decoded node: a lookup, not a search)
    return tuple(next((f for f in self.forms if len(f.src) == n or (f.more is not None and n > len(f.src))), None)
                 for n in range(max(len(f.src) for f in self.forms) + 1))

# *** dtypes ***

def is_value(d: DType) -> bool:
  """A scalar a node computes: not void (statements, indices), not a pointer (buffers), not a vector (codegen's)."""
  return d.count == 1 and d is not dtypes.void and not isinstance(d, PtrDType)

VOID = DKind("dtype void", lambda d: d is dtypes.void)
PTR = DKind("a pointer dtype", lambda d: isinstance(d, PtrDType) and is_value(d.base))
VALUE = DKind("a scalar dtype", is_value)
INT = DKind("an integer dtype", lambda d: is_value(d) and dtypes.is_int(d))
BOOL = DKind("dtype bool", lambda d: d is dtypes.bool)

# *** source kinds ***

_BUFFERS = (Ops.BUFFER, Ops.DEFINE_GLOBAL)
BUFFER = Kind("a buffer (BUFFER or DEFINE_GLOBAL)", lambda s, d, src: s.op in _BUFFERS)
# a LOAD's dtype is its buffer's element dtype: the passes build both from the one LazyBuffer (bigraph.py, stores.py)
BUFFER_OF = Kind("a buffer (BUFFER or DEFINE_GLOBAL) of the node's dtype", lambda s, d, src: s.op in _BUFFERS and s.dtype.base is d)
INDEX = Kind("an index (a VIEW without sources)", lambda s, d, src: s.op is Ops.VIEW and not s.src)
SAME = Kind("a value of the node's dtype", lambda s, d, src: s.dtype is d)
ANY_VALUE = Kind("a value (a scalar dtype)", lambda s, d, src: is_value(s.dtype))
LIKE_FIRST = Kind("a value of the first source's dtype", lambda s, d, src: s.dtype is src[0].dtype)
GATE = Kind("a bool value", lambda s, d, src: s.dtype is dtypes.bool)
# a STORE writes its buffer's element dtype
STORED = Kind("a value of the buffer's element dtype", lambda s, d, src: is_value(s.dtype) and s.dtype is src[0].dtype.base)
# an ASSIGN (big graph, pre-sink) writes into its target's BUFFER (bigraph.py computed_op)
TARGET = Kind("a BUFFER of the node's dtype", lambda s, d, src: s.op is Ops.BUFFER and s.dtype.base is d)
# a movement VIEW over a value, or the VIEW(BUFFER) of a buffer that holds data (bigraph.py)
VIEWED = Kind("a value of the node's dtype or a BUFFER of it", lambda s, d, src: s.dtype is d or (s.op is Ops.BUFFER and s.dtype.base is d))
ANY = Kind("any node", lambda s, d, src: True)
VAR = Kind("a DEFINE_VAR of the node's dtype", lambda s, d, src: s.op is Ops.DEFINE_VAR and s.dtype is d)
def _bound(s: UOp, d: DType, src: tuple) -> bool:
  return s.op is Ops.CONST and s.dtype is d and type(s.arg) is int and _var_arg(v := src[0].arg, d) and v[1] <= s.arg <= v[2]
BOUND = Kind("an integer CONST of the node's dtype within the DEFINE_VAR's range", _bound)

# *** arguments ***

def _nat(x: Any) -> bool: return type(x) is int and x >= 0
def _buffer_arg(a: Any, d: DType) -> bool:
  return (type(a) is tuple and len(a) == 2 and _nat(a[0]) and type(b := a[1]) is tuple and len(b) == 3 and type(b[0]) is str and b[0] != ""
          and _nat(b[1]) and isinstance(b[2], DType) and isinstance(d, PtrDType) and b[2] is d.base)
def _var_arg(a: Any, d: DType) -> bool:
  return type(a) is tuple and len(a) == 3 and type(a[0]) is str and a[0] != "" and type(a[1]) is int and type(a[2]) is int and a[1] <= a[2]

NONE = ArgKind("no argument", lambda a, d: a is None)
# a CONST's Python type need not match its dtype (a Tensor made from a Python int with a float dtype keeps its int)
NUMBER = ArgKind("a number (bool, int or float) as its argument", lambda a, d: type(a) in (bool, int, float))
NAT = ArgKind("a non-negative int as its argument", lambda a, d: _nat(a))
BUFFER_ARG = ArgKind("the argument (number, (device, size, element dtype))", _buffer_arg)
VAR_ARG = ArgKind("the argument (name, min, max) with min <= max", _var_arg)
REDUCE_ARG = ArgKind("the argument (ADD|MUL|MAX|AND|OR, (axis, ...)) with non-negative int axes",
                     lambda a, d: type(a) is tuple and len(a) == 2 and a[0] in GroupOp.Associative and type(a[1]) is tuple
                     and all(_nat(x) for x in a[1]))
SHAPE = ArgKind("a ShapeTracker as its argument", lambda a, d: type(a) is ShapeTracker)
# lazy.py assign: () for a contiguous target, else the target's ShapeTracker, which the STORE goes through
ASSIGN_ARG = ArgKind("the argument () or (ShapeTracker,)", lambda a, d: type(a) is tuple and len(a) <= 1 and all(type(x) is ShapeTracker for x in a))
BUFFER_VIEW_ARG = ArgKind("the argument (size, offset) of non-negative ints",
                          lambda a, d: type(a) is tuple and len(a) == 2 and _nat(a[0]) and _nat(a[1]))

def _spec(arg: ArgKind, *forms: Form) -> OpSpec: return OpSpec(forms, arg)

SPECS: dict[Ops, OpSpec] = {
  **{o: _spec(NONE, Form(VALUE, (SAME,))) for o in GroupOp.Unary},
  **{o: _spec(NONE, Form(VALUE, (SAME, SAME))) for o in GroupOp.Binary - GroupOp.Comparison},
  **{o: _spec(NONE, Form(BOOL, (ANY_VALUE, LIKE_FIRST))) for o in GroupOp.Comparison},
  Ops.WHERE: _spec(NONE, Form(VALUE, (GATE, SAME, SAME))),
  Ops.MULACC: _spec(NONE, Form(VALUE, (SAME, SAME, SAME))),
  Ops.CAST: _spec(NONE, Form(VALUE, (ANY_VALUE,))),
  Ops.BITCAST: _spec(NONE, Form(VALUE, (ANY_VALUE,))),
  Ops.REDUCE_AXIS: _spec(REDUCE_ARG, Form(VALUE, (SAME,))),
  Ops.CONST: _spec(NUMBER, Form(VALUE, ())),
  Ops.DEFINE_VAR: _spec(VAR_ARG, Form(INT, ())),
  Ops.BIND: _spec(NONE, Form(INT, (VAR, BOUND))),
  Ops.BUFFER: _spec(BUFFER_ARG, Form(PTR, ())),
  Ops.DEFINE_GLOBAL: _spec(NAT, Form(PTR, ())),
  # a source-free VIEW is an index (of a LOAD, STORE, VALID); VIEW(x) moves x, or reads a BUFFER that holds data;
  # VIEW(BUFFER, op): a buffer this schedule computes (bigraph.py)
  Ops.VIEW: _spec(SHAPE, Form(VOID, ()), Form(VALUE, (VIEWED,)), Form(VALUE, (TARGET, SAME))),
  Ops.VALID: _spec(NONE, Form(BOOL, (INDEX,))),
  Ops.LOAD: _spec(NONE, Form(VALUE, (BUFFER_OF, INDEX))),
  Ops.PRELOAD: _spec(NONE, Form(VALUE, (BUFFER_OF, INDEX))),
  Ops.STORE: _spec(NONE, Form(VOID, (BUFFER, INDEX, STORED))),
  Ops.ASSIGN: _spec(ASSIGN_ARG, Form(VALUE, (TARGET, SAME))),
  Ops.CONTIGUOUS: _spec(NONE, Form(VALUE, (SAME,))),
  # meta ops: in the big graph over their source; as a kernel AST (finish_rules meta_kernel) over the output buffer too
  Ops.COPY: _spec(NAT, Form(VALUE, (SAME,)), Form(VALUE, (BUFFER_OF, SAME))),
  Ops.BUFFER_VIEW: _spec(BUFFER_VIEW_ARG, Form(VALUE, (ANY_VALUE,)), Form(VALUE, (BUFFER_OF, ANY_VALUE))),
  Ops.EMPTY: _spec(NONE, Form(VALUE, ()), Form(VALUE, (BUFFER_OF,))),
  # a SINK groups a graph's roots; which roots (a kernel's STOREs, a big graph's VIEWs) is the business of whoever reads
  # the graph as one (replay's decoders of each capture level)
  Ops.SINK: _spec(NONE, Form(VOID, (), more=ANY)),
}

def _counts(spec: OpSpec) -> str:
  if spec.max_src is None: return f"at least {spec.min_src} source(s)"
  ns = [str(n) for n in sorted({len(f.src) for f in spec.forms})]
  return (ns[0] if len(ns) == 1 else ", ".join(ns[:-1]) + " or " + ns[-1]) + (" source" if ns == ["1"] else " sources")

def _brief(u: UOp) -> str: return f"{u.op.name} {u.dtype!r}"

def problem(op: Ops, dtype: DType, src: tuple[UOp, ...], arg: Any) -> str | None:
  """What is wrong with a node of these fields, said after the op's name ("needs 3 sources, has 1"), or None when SPECS
  accepts it."""
  if (spec := SPECS.get(op)) is None: return "is not an op of a graph before code generation (no entry in tinysched/opspec.py SPECS)"
  if (form := spec.form(len(src))) is None: return f"needs {_counts(spec)}, has {len(src)}"
  if not form.dtype.ok(dtype):
    return f"needs {form.dtype.says}" + ("" if len(spec.forms) == 1 else f" with {len(src)} source(s)") + f", has {dtype!r}"
  kinds = form.src
  for i, s in enumerate(src):
    kind = kinds[i] if i < len(kinds) else form.more
    if not kind.ok(s, dtype, src): return f"source {i} must be {kind.says}, found {_brief(s)}"  # type: ignore[union-attr]  # form(n) fits n
  # (the dtype restated: an argument may have to agree with it, as a BUFFER's element dtype does)
  if not spec.arg.ok(arg, dtype): return f"needs {form.dtype.says} and {spec.arg.says}, got {dtype!r} {_brief_arg(arg)}"
  return None

_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlevel, _REPR.maxtuple = 40, 60, 3, 6
def _brief_arg(a: Any) -> str: return _REPR.repr(a)  # bounded, whatever a stored graph holds

class OpSpecError(ValueError):
  """A graph holds a node SPECS refuses."""

def verify(*roots: UOp) -> None:
  """Every node of these graphs (node arguments' symbolic integers included) passes `problem`, or OpSpecError names the first that does not."""
  seen: set[UOp] = set()
  todo = list(roots)
  while todo:
    for u in todo.pop().toposort():
      if u in seen: continue
      seen.add(u)
      if (why := problem(u.op, u.dtype, u.src, u.arg)) is not None: raise OpSpecError(f"{u.op.name} {why} (node {u!r})")
      todo += _arg_nodes(u.arg)

def _arg_nodes(x: Any) -> list[UOp]:
  """The nodes inside an argument: the symbolic sizes of a view."""
  if isinstance(x, UOp): return [x]
  if type(x) is tuple: return [n for a in x for n in _arg_nodes(a)]
  if isinstance(x, ShapeTracker): return [n for v in x.views for n in _arg_nodes((v.shape, v.strides, v.offset, v.mask))]
  return []
