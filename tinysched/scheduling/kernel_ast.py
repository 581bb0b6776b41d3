"""Pass 4: one kernel's pre-sink -> its AST.

The pre-sink is a SINK of STOREs whose values still contain the big graph's forms: computed buffers fused into
this kernel (VIEW(BUFFER, op)), buffers that hold data (VIEW(BUFFER)), LOADs of buffers stored by other kernels,
and movement VIEWs anywhere. The AST may have VIEWs only as the source-free index of a LOAD, STORE or VALID, so:

1. `inline_rules`: fused buffers become their ops, data buffers PRELOADs (read before any assign of this kernel),
   and a buffer this same kernel stores is read from the stored value, not from memory;
2. `views_up`: a VIEW above an elementwise op moves onto each of its sources, until it reaches a load (where it
   composes with the load's index) or a constant (which needs none: VALID keeps the mask). Steps 1 and 2 run as one
   walk (`inline_and_up`): no inline rule matches what a views_up rule makes, and no views_up rule looks below the
   node's direct sources, which bottom-up are final already; so one walk gives what the two walks in a row give;
3. `views_down`: a VIEW that cannot move up, because a reduce is below it, moves down instead: through the reduce
   (the reduce is rebuilt over a view of its input), through elementwise ops, and into the STORE's index; a reduce
   over (a view of) a reduce of the same op (FUSE_CONV_BW, or an arange FUSE_ARANGE inlined) becomes one reduce
   over both axis sets;
4. `finish_rules`: views are simplified and their Variables unbound, PRELOAD becomes LOAD, ASSIGN disappears (the
   STORE already targets the buffer), a meta op kernel (COPY...) becomes the meta op itself;
5. `number_rules`: BUFFERs become DEFINE_GLOBAL 0.. , outputs first.

`rewrite_kernel` is pure: the same pre-sink and assign targets give the same AST, in any process.
"""
from __future__ import annotations
import itertools, operator, sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from tinysched.ops import Ops, GroupOp
from tinysched.uop import UOp, make_uop, resolve, arg_identity
from tinysched.rewrite import UPat, PatternMatcher, graph_rewrite
from tinysched.shape import ShapeTracker, View, strides_for_shape
from tinysched.helpers import prod, all_same
from tinysched.scheduling.bigraph import ScheduleError, view_of, under_views, topo_of
from tinysched import shape as SH

# read once for the rules' per-node code (an `Ops.X` read costs ~70 ns on 3.11, see scheduling/bigraph.py)
_VIEW, _STORE, _LOAD, _DEFINE_GLOBAL, _BUFFER = Ops.VIEW, Ops.STORE, Ops.LOAD, Ops.DEFINE_GLOBAL, Ops.BUFFER

CONTIGUOUS_HINT = "help: consider using .contiguous():\n   - a += a.T\n   + a += a.T.contiguous()"

# *** 1. inline fused buffers ***

def _read_own_store(ctx: dict[UOp, UOp], b: UOp) -> UOp | None: return ctx.get(b)

inline_rules = PatternMatcher([
  (UPat(Ops.VIEW, src=(UPat(), UPat.var("op"))), lambda op: op, "inline_computed"),
  (UPat(Ops.VIEW, src=(UPat(Ops.BUFFER, name="b"),), name="v"), lambda b, v: make_uop(Ops.PRELOAD, v.dtype, (b, view_of(v.st))), "read_data_buffer"),
  (UPat(Ops.CONTIGUOUS, src=(UPat.var("x"),)), lambda x: x, "drop_contiguous"),
], name="inline_rules")
own_store_rules = PatternMatcher([(UPat(Ops.LOAD, src=(UPat.var("b"), UPat())), _read_own_store, "read_own_store")], name="own_store_rules")

# *** 2. views up to the loads ***

def _compose(outer: UOp, inner: UOp) -> UOp: return inner.replace(arg=inner.st + outer.st)

def _view_onto_sources(e: UOp, v: UOp) -> UOp: return e.replace(src=tuple(s.view(v.st) for s in e.src))

def _view_into_index(b: UOp, v: UOp) -> UOp:
  # a buffer op (LOAD, PRELOAD, STORE, VALID) indexes through its VIEW source: that is where a view above it goes
  return b.replace(src=tuple(view_of(s.st + v.st) if s.op is _VIEW else s for s in b.src))

compose_rules = PatternMatcher([
  (UPat(Ops.VIEW, src=(UPat(Ops.VIEW, name="inner"),), name="outer"), _compose, "compose_views"),
], name="compose_rules")

views_up = compose_rules + PatternMatcher([
  (UPat((*GroupOp.ALU, Ops.CAST, Ops.BITCAST, Ops.ASSIGN), name="e").view(name="v"), _view_onto_sources, "view_onto_sources"),
  # constants, and Variables standing for one, are the same everywhere: the view has nothing to index
  (UPat((Ops.CONST, Ops.DEFINE_VAR, Ops.BIND), name="c").view(), lambda c: c, "view_of_const"),
  (UPat(GroupOp.Buffer, name="b").view(name="v"), _view_into_index, "view_into_index"),
], name="views_up")

def push_up(u: UOp, st: ShapeTracker) -> UOp: return graph_rewrite(u.view(st), views_up)

# *** 3. views down to the stores ***

def _differs(a, b) -> bool: return a is not b and a != b

def view_over_reduce(r: UOp, src: UOp, v: UOp) -> UOp | None:
  """VIEW(REDUCE(src)) with a view that reorders, repeats or masks the reduce's output: reduce a view of src instead.
  With the reduced axes moved last, each output element is `n` consecutive input elements, so every view of the
  output widens to a view of the input with the reduced dims appended (strides times n, then contiguous over them)."""
  return None if v.st.contiguous else _widened_reduce(r, src, v.st)

def _widened_reduce(r: UOp, src: UOp, st: ShapeTracker) -> UOp:
  """view_over_reduce's rewrite, for any view `st` of r's output: a reduce of a view of src, reshaped to st's shape."""
  shape, axes = src.st.shape, r.axis_arg
  reduced = tuple(shape[i] for i in axes)
  n = prod(reduced)
  reduced_last = ShapeTracker.from_shape(shape).permute(tuple(i for i in range(len(shape)) if i not in axes) + axes)
  widened = ShapeTracker(tuple(View.create(w.shape + reduced, tuple(s * n for s in w.strides) + strides_for_shape(reduced), w.offset * n,
                                           None if w.mask is None else w.mask + tuple((0, d) for d in reduced)) for w in st.views))
  rank = len(st.shape)
  return push_up(src, reduced_last + widened).r(r.arg[0], tuple(range(rank, rank + len(axes)))).view(ShapeTracker.from_shape(st.shape))

def reduce_over_reshape(r: UOp, x: UOp, v: UOp) -> UOp:
  """REDUCE(VIEW(x)) where the view only reshapes: reduce x itself over the axes where x's shape and the output differ."""
  if not v.st.contiguous: raise ScheduleError("can't push a non-contiguous VIEW down to a STORE")
  if not resolve(prod(v.st.shape) == prod(x.st.shape)): raise ScheduleError("can't push an expanding VIEW down to a STORE")
  out_shape = v.st.reduce(r.axis_arg)
  axes = tuple(i for i, (a, b) in enumerate(zip(x.st.shape, out_shape)) if _differs(a, b))
  return x.r(r.arg[0], axes).view(ShapeTracker.from_shape(out_shape))

def views_through_op(root: UOp) -> UOp | None:
  """An op with reshaping VIEWs on some sources: take them off, reshape the other sources the same way (up to their
  loads) and put one reshape above the op. A STORE instead takes the reshape into its own index."""
  moved = [s for s in root.src if under_views(s) is not s]
  if not moved: return None
  pairs = [(s.st.shape, s.src[0].st.shape) for s in moved]
  if not all_same([(outer, prod(outer), prod(inner)) for outer, inner in pairs]): raise ScheduleError(f"swizzles must have the same size: {pairs}")
  outer, inner = pairs[0]
  if root.op is _STORE:
    b, index, value = root.src
    return root.replace(src=(b, view_of(index.arg.reshape(inner)), value.src[0]))
  flat = ShapeTracker.from_shape(inner)
  return root.replace(src=tuple(s.src[0] if s in moved else push_up(s, flat) for s in root.src)).view(ShapeTracker.from_shape(outer))

def reshape_between_reduces(outer: UOp, inner: UOp, src: UOp, v: UOp) -> UOp | None:
  """REDUCE(reshape(REDUCE(src))) of one op (the inner fused into the outer's kernel by FUSE_CONV_BW or FUSE_ARANGE):
  push the reshape into the inner reduce as view_over_reduce does for other views. reduce_over_reshape would instead
  match the outer's axes against the inner's shape dim by dim, which is wrong once the reshape changes the rank
  ((4,5,1)->(20,)). The inner reduce then has the outer's input shape plus trailing 1s, and the outer reduces it
  directly (fuse_reduces)."""
  if outer.arg[0] is not inner.arg[0]: return None
  # a third reduce inside (an arange FUSE_ARANGE inlined): fuse_reduces could not merge them anyway. Said at once, so
  # the scheduler stores that arange instead (schedule.py _misfused_aranges); widening over it would never settle
  if any(u.op is Ops.REDUCE_AXIS for u in src.toposort()): raise ScheduleError("a reduce of a reduce of a reduce: only two reduces become one kernel")
  widened = _widened_reduce(inner, src, v.st).src[0]  # shape: v's shape + a 1 per reduced axis
  return widened.r(outer.arg[0], outer.axis_arg).view(ShapeTracker.from_shape(outer.st.shape))

def fuse_reduces(outer: UOp, inner: UOp) -> UOp:
  """REDUCE(REDUCE(x)) of one op: one reduce of x over both sets of axes (the outer's first, as they were pushed)."""
  op, axes, x = inner.arg[0], outer.axis_arg + inner.axis_arg, inner.src[0]
  if outer.arg[0] is not op: raise ScheduleError("can't merge reduces with different ops")
  if Ops.REDUCE_AXIS in {u.op for u in x.toposort()}: raise ScheduleError("a reduce of a reduce of a reduce: only two reduces become one kernel")
  return x.r(op, axes)

def store_through_assign_view(a: UOp, b: UOp, index: UOp) -> UOp | None:
  # an ASSIGN into a view of its target stores through that view
  return UOp.store(b, view_of(a.arg[0] + index.arg), a.replace(arg=())) if a.arg else None

views_down = compose_rules + PatternMatcher([
  (UPat(Ops.STORE, src=(UPat.var("b"), UPat.var("index"), UPat(Ops.ASSIGN, name="a"))), store_through_assign_view, "store_through_assign_view"),
  (UPat(Ops.REDUCE_AXIS, src=(UPat.var("src"),), name="r").view(name="v"), view_over_reduce, "view_over_reduce"),
  (UPat(Ops.REDUCE_AXIS, src=(UPat(Ops.REDUCE_AXIS, src=(UPat.var("src"),), name="inner").view(name="v"),), name="outer"),
   reshape_between_reduces, "reshape_between_reduces"),
  (UPat(Ops.REDUCE_AXIS, src=(UPat.var("x").view(name="v"),), name="r"), reduce_over_reshape, "reduce_over_reshape"),
  # (only a VIEW source can be a reshape to move: other nodes are not offered to the rule)
  (UPat((*GroupOp.ALU, Ops.CAST, Ops.BITCAST, Ops.ASSIGN, Ops.CONTIGUOUS, Ops.STORE), name="root", src_ops=(Ops.VIEW,)), views_through_op,
   "views_through_op"),
  (UPat(Ops.REDUCE_AXIS, src=(UPat(Ops.REDUCE_AXIS, name="inner"),), name="outer"), fuse_reduces, "fuse_reduces"),
], name="views_down")

# *** 4. finish: unbind views, loads, meta kernels ***

@dataclass
class KernelParts:
  """What rewriting a kernel finds besides the AST: its buffers by DEFINE_GLOBAL number, the assign targets it reads
  before writing them, and the values of the Variables bound in its views."""
  assigned: dict[UOp, None]
  var_vals: dict[UOp, int]
  numbers: dict[UOp, int]     # BUFFER -> DEFINE_GLOBAL number
  early: dict[UOp, None]      # assign targets read before the assign (ordered set)
  unbound: set  # views already simplified and unbound (membership only): a rewritten VIEW is not unbound twice
  @property
  def bufs(self) -> list[UOp]: return list(self.numbers)
  @property
  def preloads(self) -> list[UOp]: return list(self.early)

def _unbind(ctx: KernelParts, x: UOp) -> UOp | None:
  if x.src or x.arg in ctx.unbound: return None
  st, found = x.arg.simplify().unbind()
  ctx.var_vals.update(found)
  ctx.unbound.add(st)
  return None if st == x.arg else view_of(st)

def _preload(ctx: KernelParts, x: UOp, b: UOp) -> UOp:
  # from here on every read is a LOAD; the targets read before their assign are what ordering needs to know
  if b.op is _DEFINE_GLOBAL: b = ctx.bufs[b.arg]  # numbered already (finish_and_number): the BUFFER it stands for
  if b in ctx.assigned: ctx.early.setdefault(b)
  return make_uop(_LOAD, x.dtype, x.src, x.arg)

finish_rules = PatternMatcher([
  (UPat(Ops.VIEW, name="x"), _unbind, "unbind_view"),
  (UPat(Ops.PRELOAD, src=(UPat.var("b"), UPat()), name="x"), _preload, "preload_to_load"),
  (UPat(Ops.ASSIGN, src=(UPat(), UPat.var("x"))), lambda x: x, "drop_assign"),
  (UPat(Ops.SINK, src=(UPat(Ops.STORE, src=(UPat.var("b"), UPat(), UPat(GroupOp.Meta, name="x"))),)),
   lambda b, x: x.replace(src=(b, *x.src)), "meta_kernel"),
], name="finish_rules")

def _global(ctx: KernelParts, x: UOp) -> UOp:
  number = ctx.numbers.setdefault(x, len(ctx.numbers))
  return make_uop(_DEFINE_GLOBAL, x.dtype, (), number)
number_rules = PatternMatcher([(UPat(Ops.BUFFER, name="x"), _global, "define_global")], name="number_rules")

_combined: dict[tuple[PatternMatcher, PatternMatcher], PatternMatcher] = {}

def _combine(a: PatternMatcher, b: PatternMatcher) -> PatternMatcher:
  """a + b, kept while both stay the same objects (building a matcher inspects every rule's signature)."""
  if (pm := _combined.get((a, b))) is None:
    if len(_combined) > 8: _combined.clear()  # only patched matchers make new pairs
    pm = _combined[(a, b)] = a + b
  return pm

def finish_and_number() -> PatternMatcher:
  """finish_rules + number_rules, for one walk (their rules match different ops): a buffer is numbered as the walk
  meets it, the order a second walk over the finished kernel would meet it in (the outputs take the first numbers
  before). Built from the module's matchers as they are now, so a patched one is used."""
  return _combine(finish_rules, number_rules)

def inline_and_up(own_store: bool) -> PatternMatcher:
  """inline_rules (+ own_store_rules, for a kernel of several stores) + views_up, for one walk (the module docstring
  says why that is the same as two). Built from the module's matchers as they are now, so a patched one is used."""
  return _combine(_combine(inline_rules, own_store_rules) if own_store else inline_rules, views_up)

# the matchers every process needs, built at import rather than inside its first schedule (building a matcher inspects
# every rule's signature: ~75 us each); a patched matcher still gets one of its own on first use
inline_and_up(False); inline_and_up(True); finish_and_number()  # noqa: E702

# *** the pass ***

def _assign_read_ok(st: ShapeTracker) -> bool:
  """An augmented assign may read its own target only where it writes it: contiguously, or one masked view that is
  contiguous inside its mask."""
  if st.contiguous: return True
  if len(st.views) != 1 or (mask := st.views[0].mask) is None: return False
  return ShapeTracker.from_shape(st.shape).shrink(mask) == st.shrink(mask)

def _check_assign_reads(sink: UOp, assigned: dict[UOp, None], kind: tuple[Ops, ...]) -> None:
  reads: dict[UOp, dict[Ops, None]] = {}
  for x in sink.toposort():
    if x.op in kind and x.src[0] in assigned: reads.setdefault(x.src[0], {})[x.op] = None
  for b, ops in reads.items():
    if len(ops) > 1:
      raise ScheduleError(f"cycle detected in kernel: buffer {b.arg[0]} is read both before and after it is assigned.\n"
                          "help: use .contiguous() to break the part loading pre-assign into a different kernel.")

def rewrite_kernel(pre: UOp, assigned: dict[UOp, None]) -> tuple[UOp, KernelParts]:
  """pre-sink -> (AST, KernelParts); pure."""
  stored = {s.src[0]: s.src[2] for s in pre.src}
  sink = graph_rewrite(pre, inline_and_up(len(pre.src) > 1), stored, topo=pre.__dict__.get("_topo"))
  # reading an assign target both before (PRELOAD) and after (LOAD) the assign has no order that satisfies both (views_up
  # only moves views into the index of a PRELOAD or LOAD: the set of buffers each reads is the one inlining made)
  if assigned: _check_assign_reads(sink, assigned, (Ops.PRELOAD, Ops.LOAD))
  down = graph_rewrite(sink, views_down, topo=(topo := sink.toposort()))
  # the finishing walk follows a toposort too: the same one where no view moved (most kernels)
  if down is not sink: sink, topo = down, down.toposort()
  # no rule makes an ASSIGN: a kernel without one in its pre-sink (most) has no self operand to check
  if Ops.ASSIGN in {x.op for x in topo_of(pre)}:  # (a set of ops: no Ops.X read per node, see scheduling/bigraph.py)
    targets = {x.src[0] for x in topo if x.op is Ops.ASSIGN}
    if targets and any(x.op is Ops.PRELOAD and x.src[0] in targets and not _assign_read_ok(x.st) for x in topo):
      raise ScheduleError("self operand of augmented assign must be contiguous.\n" + CONTIGUOUS_HINT)
  parts = KernelParts(assigned, {}, {}, {}, set())
  # outputs take the first numbers: the buffer of every STORE (a meta op kernel's one STORE becomes the meta op)
  for store in sink.src if sink.op is Ops.SINK else (sink,):
    if store.op is Ops.STORE and store.src[0].op is Ops.BUFFER: _global(parts, store.src[0])
  return graph_rewrite(sink, finish_and_number(), parts, topo=topo), parts

def well_formed(ast: UOp) -> bool:
  """Every index VIEW of the kernel has one rank, and in each dimension one size other than 1: the shape every
  loop of the kernel runs over. An arange inlined into a kernel that reduces the same dimension at another size
  (interpolate's two gathers) breaks it, and no code generator can run such a kernel."""
  shapes = [u.arg.shape for u in ast.toposort() if u.op is Ops.VIEW and not u.src]
  if len({len(s) for s in shapes}) > 1: return False
  return all(len({d for d in dim if not (isinstance(d, int) and d == 1)}) <= 1 for dim in zip(*shapes))

# *** a memo for schedules with repeated layers ***

# what the passes keep on a pre-sink's __dict__ (bigraph.topo_of's toposort): it holds the pre-sink itself, a cycle, so
# whoever made one drops it again (schedule.py)
KEPT_WALKS = ("_topo",)

def first_use_buffers(topo: dict[UOp, None]) -> list[UOp]:
  """A kernel's BUFFERs in first-use order: the canonical numbering (KernelMemo, structural_key)."""
  return [u for u in topo if u.op is _BUFFER]

def structural_key(topo: dict[UOp, None]) -> tuple:
  """A kernel's pre-sink up to which buffers it touches: per node of its toposort, (op, dtype, positions of its sources,
  argument), a BUFFER as (dtype, device/size/dtype) alone, its number left out. The kernels of a model's repeated layers
  differ only in their buffers and share one key. Exact: two pre-sinks have the same key exactly when renumbering
  their buffers 0.. in first-use order (the order they come in the toposort) makes them one graph, node for node, as
  interning compares nodes (`arg_identity`), so no rule can tell them apart (none reads a buffer's number). Cheaper than
  building that renumbered graph: tuples, no nodes, nothing interned."""
  pos: dict[UOp, int] = {}
  out: list[tuple] = []
  for i, u in enumerate(topo):
    pos[u] = i
    if (op := u.op) is _BUFFER: out.append((u.dtype, u.arg[1]))
    else: out.append((op, u.dtype, tuple([pos[s] for s in u.src]), arg_identity(u.arg)))
  return tuple(out)

# *** what a memo must see: the rules of every module the memoized work runs ***

# The modules of the tinysched package that rules_fingerprint does not read, and why: none of their code runs inside the
# work a memo keeps (schedule_graph on a big graph, full_ast_rewrite on a pre-sink, the codegen passes schedule.py's
# `_runnable` asks). Every other module of the package is read, with the classes defined in it, so a module added to the
# package is read until it is named here. "pkg.*": the package and every module under it. tests/tinysched/
# test_memo_sees_patches.py keeps the list honest: each entry names modules of the package, and no module read imports
# one of them (but the capture slot).
NOT_READ: dict[str, str] = {
  "tinysched": "the package's names for users (Tensor, dtypes...): the passes import from the modules themselves",
  "tinysched.tensor": "the Tensor front end: it builds the lazy graph, from which each schedule builds its big graph anew, "
                      "and the memo is keyed by that graph (a patch there makes another graph, never a stale answer)",
  "tinysched.function": "the front end's autograd functions (as tinysched.tensor)",
  "tinysched.nn.*": "layers, optimizers, state dicts: front end (as tinysched.tensor)",
  "tinysched.models.*": "model definitions: front end (as tinysched.tensor)",
  "tinysched.realize": "runs a finished schedule",
  "tinysched.memory": "plans the buffers of a finished schedule",
  "tinysched.jit": "TinyJit: replays finished schedules",
  "tinysched.runtime.*": "devices: run finished kernels",
  "tinysched.cost": "FLOPs and bytes of a finished kernel (realize, replay's timings)",
  "tinysched.symeval": "numpy evaluation of index expressions, for tests and the reference interpreter",
  "tinysched.capture_hook": "the capture slot: its hook records what the passes made and changes none of it (replay swaps it "
                            "on and off, which is no rule change)",
  "tinysched.codegen": "the code generator's names for users: the scheduler imports its modules",
  "tinysched.codegen.heuristic": "default Opts, chosen for a finished kernel when it is lowered",
  "tinysched.codegen.opencl": "renders lowered kernels (after the passes _runnable asks)",
  "tinysched.codegen.program": "to_program: lowering and rendering of a finished kernel",
  "tinysched.codegen.program_cache": "the disk cache of to_program (it checks the code it keys on itself)",
  "tinysched.codegen.provenance": "labels a rendered program's nodes for replay",
  "tinysched.codegen.tensor_core": "renders the tensor-core kernel of a finished kernel (Opt TC)",
}
# (lazy.py and device.py are read although only build_big_graph runs them, anew at every schedule, as tensor.py's code:
# they are the path from the lazy graph to the big graph, and cost ~170 values)
_PACKAGE = __name__.split(".")[0]

def not_read(name: str) -> bool:
  """Whether NOT_READ leaves module `name` out."""
  return name in NOT_READ or any(name == k[:-2] or name.startswith(k[:-1]) for k in NOT_READ if k.endswith(".*"))

def package_modules() -> list[str]:
  """Every module of the tinysched package: its files (found without importing anything), and any module of it loaded."""
  root = Path(__file__).resolve().parent.parent
  names = {".".join(parts[:-1] if parts[-1] == "__init__" else parts)
           for parts in (p.relative_to(root.parent).with_suffix("").parts for p in root.rglob("*.py"))}
  return sorted(names | {m for m in list(sys.modules) if m == _PACKAGE or m.startswith(_PACKAGE + ".")})

_RULE_MODULES: list[str] = []  # rule_modules(), found once (in place: this module's namespace is read too)

def rule_modules() -> list[str]:
  """The modules rules_fingerprint reads: those of the package but NOT_READ."""
  if not _RULE_MODULES: _RULE_MODULES[:] = [m for m in package_modules() if not not_read(m)]
  return _RULE_MODULES

_CLASS_NAMES: dict[str, list[str]] = {}  # module -> the names that held a class defined there (only grows)

def _rule_owners() -> tuple[list, list[str]]:
  """(the modules and classes rules_fingerprint reads, the modules to read that are not loaded). Each loaded module,
  then the classes under the names that held a class defined in it, whatever holds that name now (a class that replaced
  one is read), with the bases of theirs that are defined in a module read. A module not loaded has run nothing yet."""
  owners: list = []
  seen: set[int] = set()  # ids of the classes in owners (membership only)
  missing: list[str] = []
  modules = rule_modules()
  read = set(modules)  # (membership only)
  for name in modules:
    if (mod := sys.modules.get(name)) is None:
      missing.append(name)
      continue
    ns = vars(mod)
    held = _CLASS_NAMES.setdefault(name, [])
    held += [k for k, v in ns.items() if isinstance(v, type) and v.__module__ == name and k not in held]
    owners.append(mod)
    for k in held:
      if not isinstance(cls := ns.get(k), type): continue
      for c in cls.__mro__:
        if (c is cls or c.__module__ in read) and id(c) not in seen:
          seen.add(id(c))
          owners.append(c)
  return owners, missing

def _rule_namespaces() -> list:
  """The namespaces rules_fingerprint reads, in its order."""
  return [vars(o) for o in _rule_owners()[0]]

def _is_rule(o) -> bool: return callable(o) or isinstance(o, (PatternMatcher, staticmethod, classmethod, property, tuple))

class _Reads:
  """What rules_fingerprint read at its last call. One object, updated in place (this module's namespace is read)."""
  __slots__ = ("fp", "missing", "last", "changed", "steady", "values", "eq_of", "eq_objs", "moving", "moving_values", "started")
  def __init__(self) -> None: self.clear()
  def clear(self) -> None:
    """Forget every read: the next call reads everything (and forgets the results memoized outside a KernelMemo)."""
    self.fp: tuple = ()
    self.missing: list[str] = []  # modules to read that were not loaded at the last full read
    self.last: dict[int, tuple[Any, tuple]] = {}  # id(owner) -> (owner, its namespace's values at the last full read)
    self.changed: set[int] = set()  # ids of the owners whose values changed without a rule changing (membership only)
    # the namespaces compared as one list (`values`: all their values, `eq_of(values)`: the rules whose == is not
    # identity, `eq_objs`), and those that changed a value that is no rule twice (GlobalCounters' counts after each
    # realize), compared one by one so that such a change costs no full read
    self.steady: list = []
    self.values: list = []
    self.eq_of: Callable[[list], tuple] = _none
    self.eq_objs: tuple = ()
    self.moving: list[tuple[Any, Any]] = []  # (owner, its namespace)
    self.moving_values: list[tuple] = []
    self.started = False

def _none(values: list) -> tuple: return ()

_READS = _Reads()

def rules_fingerprint() -> tuple:
  """Everything the memoized work runs: the functions, classes, matchers and tuples in the namespaces of the modules
  `rule_modules` names and of the classes defined in them (`_rule_owners`). Any monkeypatch of one of them (a rule
  change in a running process) changes it, and the results memoized outside a KernelMemo by code a patch may have
  changed (`_forget_derived`) are dropped then. The objects themselves, compared by identity (`same_rules`): a memo
  holding them keeps them alive, so a freed rule's id cannot come back as a new one's.
  Asked on every schedule, so most calls are one comparison in C of all the namespaces' values (~1,850) with those of
  the last call, and the rules are picked again only when one of those values is another object. A namespace seen to
  change values that are no rules twice (counters) is compared on its own from then on."""
  r = _READS
  # (the first call, or a module to read that is loaded now)
  if not r.started or r.missing and any(map(sys.modules.__contains__, r.missing)): return _full_read(r)
  now: list = []
  add = now.extend
  for ns in r.steady: add(ns.values())
  try: same = now == r.values  # in C, identity first: an element that is another object is compared by its ==
  except Exception: same = False  # (a replaced value whose == cannot answer, a numpy array)
  # equal: only a rule whose == is not identity (an equal tuple of passes, a bound method) can be another object. (No
  # per-namespace lengths: a name added or deleted changes the list's length, and one moved from a namespace to the
  # end of the next could leave the list equal only if every value of that next one were equal to it.)
  if not same or not all(map(operator.is_, r.eq_of(now), r.eq_objs)): return _full_read(r)
  for i, (_, ns) in enumerate(r.moving):
    if len(ns) == len(last := r.moving_values[i]) and all(map(operator.is_, ns.values(), last)): continue
    if len(ns) != len(last) or any(_is_rule(x) or _is_rule(y) for x, y in zip(last, ns.values()) if x is not y): return _full_read(r)
    r.moving_values[i] = tuple(ns.values())
  return r.fp

def _full_read(r: _Reads) -> tuple:
  """rules_fingerprint, reading every namespace afresh (~0.4 ms)."""
  if not r.started:
    # the passes schedule.py's _runnable asks are read (lowerer imports the modules they use); deferred to keep import
    # tinysched fast: the code generator (~9 ms) loads at the first schedule, not at import
    from tinysched.codegen import lowerer  # noqa: F401
  owners, missing = _rule_owners()
  spaces = [tuple(vars(o).values()) for o in owners]
  flat = list(itertools.chain.from_iterable(spaces))
  # whether a value is a rule depends on its type alone (callable() asks the type, and so does isinstance here): asked
  # once per type present, then the values are picked in C (a Python call per value was ~1 ms per fingerprint)
  types = list(map(type, flat))
  rule_type = {t: _is_rule(o) for t, o in dict(zip(types, flat)).items()}
  fp = tuple(itertools.compress(flat, map(rule_type.__getitem__, types)))
  if r.started and same_rules(fp, r.fp):
    fp = r.fp  # the same rules: the same tuple. A namespace whose values changed holds state (the tensor memo, replaced
    # at the first schedule; counters): changed twice, it is compared on its own
    changed = {id(o) for o, vals in zip(owners, spaces) if (was := r.last.get(id(o))) is not None and not _same_values(was[1], vals)}
    moving = {id(o) for o, _ in r.moving} | (changed & r.changed)
    r.changed |= changed
  else:
    _forget_derived()  # other rules (or the first read: a patch may precede it) than the results memoized so far
    moving = {id(o) for o, _ in r.moving}
  r.fp, r.missing, r.started = fp, missing, True
  r.last = {id(o): (o, vals) for o, vals in zip(owners, spaces)}
  steady = [(o, vals) for o, vals in zip(owners, spaces) if id(o) not in moving]
  r.steady = [vars(o) for o, _ in steady]
  r.values = list(itertools.chain.from_iterable(vals for _, vals in steady))
  eq_rule = {t: is_rule and t.__eq__ is not object.__eq__ for t, is_rule in rule_type.items()}
  eq_at = tuple(itertools.compress(range(len(r.values)), map(eq_rule.__getitem__, map(type, r.values))))
  # (an itemgetter of one position gives the element, not a 1-tuple)
  r.eq_of = operator.itemgetter(*eq_at) if len(eq_at) > 1 else operator.itemgetter(slice(eq_at[0], eq_at[0] + 1)) if eq_at else _none
  r.eq_objs = r.eq_of(r.values)
  r.moving = [(o, vars(o)) for o in owners if id(o) in moving]
  r.moving_values = [tuple(ns.values()) for _, ns in r.moving]
  return fp

def _same_values(a: tuple, b: tuple) -> bool: return len(a) == len(b) and all(map(operator.is_, a, b))

def _forget_derived() -> None:
  """Drop the results memoized outside a KernelMemo by code that a patch may have changed (each is taken again at its
  next use, only speed depends on them): the view algebra's tables (a patched `shape._compose` would otherwise still be
  answered by `View.__add__`'s table) and the lowerer's 64-bit index expressions (simplified by symbolic's rules)."""
  SH.clear_caches()
  if (lowerer := sys.modules.get("tinysched.codegen.lowerer")) is not None: lowerer._WIDE_CACHE.clear()

def same_rules(a: tuple, b: tuple) -> bool:
  # (the same tuple: rules_fingerprint hands out its last one again while nothing changed)
  return a is b or (len(a) == len(b) and all(map(operator.is_, a, b)))

class KernelMemo:
  """Kernel ASTs already rewritten, by the structure of their pre-sink (`structural_key`). Owned by whoever schedules:
  `schedule_graph` makes a fresh one per call unless given one, and a memo kept across calls goes through
  `KernelMemo.kept` before each use, so a rule patched between two schedules is never answered from an old entry.
  `max_schedules`: how many whole schedules it keeps (each holds its big graph alive; 0: none, for a caller whose every
  graph is new).

  The structural key walks the whole pre-sink, and most kernels never meet another of their structure: a kernel is
  first rewritten as it is and kept under a cheap signature (`_signature`); only when a second pre-sink of the same
  signature comes are both keyed by structure (the rewrite is the same either way: no rule reads a buffer's number)."""
  MAX_ENTRIES = 8192  # kernels; a training loop or a decode loop schedules the same few hundred again and again
  MAX_SCHEDULES = 256  # the default of max_schedules
  def __init__(self, fingerprint: tuple[int, ...] = (), max_schedules: int = MAX_SCHEDULES) -> None:
    self.fingerprint, self.max_schedules = fingerprint, max_schedules
    self.entries: dict[tuple, tuple[UOp, tuple[int, ...], tuple[int, ...], dict[UOp, int]]] = {}
    # signature -> [(pre-sink, entry)]: kernels kept without their structural key (the only ones of their signature)
    self.pending: dict[tuple, list[tuple[UOp, tuple[UOp, tuple[int, ...], tuple[int, ...], dict[UOp, int]]]]] = {}
    self.keyed: set[tuple] = set()  # signatures whose kernels go by structural key (membership only)
    self.schedules: dict[tuple, tuple[list, dict[UOp, int]]] = {}  # whole schedules, see schedule.py schedule_graph
    self.runnable: dict[UOp, bool] = {}  # FUSE_ARANGE: may codegen lower this kernel (schedule.py _runnable)

  def size(self) -> int:
    """Kernels kept, with or without their structural key."""
    return len(self.entries) + sum(map(len, self.pending.values()))

  @staticmethod
  def kept(memo: KernelMemo | None, max_schedules: int = MAX_SCHEDULES) -> KernelMemo:
    """`memo` again if it was filled under the rules in effect now and has room, else a new one. A memo full of whole
    schedules (a decode loop with a moving bound Variable adds one per step) drops those and keeps its kernels."""
    fp = rules_fingerprint()
    if memo is None or not same_rules(memo.fingerprint, fp) or memo.size() >= KernelMemo.MAX_ENTRIES:
      return KernelMemo(fp, max_schedules)
    memo.max_schedules = max_schedules  # (this caller's wish, whoever made the memo)
    if len(memo.schedules) >= max_schedules: memo.schedules.clear()
    return memo

  def keep_schedule(self, key: tuple, value: tuple[list, dict[UOp, int]]) -> None:
    if self.max_schedules > 0: self.schedules[key] = value

  def rewrite(self, pre: UOp, assigned: dict[UOp, None]) -> tuple[UOp, KernelParts]:
    topo = topo_of(pre)
    order = first_use_buffers(topo)
    targets = tuple(i for i, b in enumerate(order) if b in assigned)
    sig = _signature(topo, order, targets)
    hit = None
    if (waiting := self.pending.get(sig)) is not None:
      hit = next((e for p, e in waiting if p is pre), None)  # this very pre-sink again (FUSE_ARANGE asked first)
      if hit is None:  # another of its signature: from now on these go by structural key
        for p, e in waiting: self._keyed_entry(p, sig, e)
        del self.pending[sig]
    if hit is None and sig in self.keyed:
      hit = self._keyed_entry(pre, sig)
    if hit is None:  # the first of its signature: rewritten as it is
      hit = _entry(pre, order, targets)
      self.pending.setdefault(sig, []).append((pre, hit))
    ast, bufs, preloads, var_vals = hit
    return ast, KernelParts(assigned, dict(var_vals), {order[i]: n for n, i in enumerate(bufs)}, {order[i]: None for i in preloads}, set())

  def _keyed_entry(self, pre: UOp, sig: tuple, entry: tuple | None = None) -> tuple:
    """The entry of `pre`'s structural key: `entry` stored under it (a pending kernel's), or found, or rewritten now."""
    self.keyed.add(sig)
    targets = sig[2]
    kept = [k for k in KEPT_WALKS if k not in pre.__dict__]  # (a memo may keep `pre`: no cycle left on it)
    key = (structural_key(topo := topo_of(pre)), targets)
    if entry is not None: self.entries.setdefault(key, entry)
    elif (entry := self.entries.get(key)) is None: entry = self.entries[key] = _entry(pre, first_use_buffers(topo), targets)
    for k in kept: pre.__dict__.pop(k, None)
    return entry

def _entry(pre: UOp, order: list[UOp], targets: tuple[int, ...]) -> tuple[UOp, tuple[int, ...], tuple[int, ...], dict[UOp, int]]:
  """A memo entry: `pre` rewritten, its buffers (DEFINE_GLOBAL order) and preloads by position in `order`, its var_vals."""
  ast, parts = rewrite_kernel(pre, {order[i]: None for i in targets})
  pos = {b: i for i, b in enumerate(order)}
  return ast, tuple(pos[b] for b in parts.bufs), tuple(pos[b] for b in parts.preloads), parts.var_vals

def _signature(topo: dict[UOp, None], order: list[UOp], targets: tuple[int, ...]) -> tuple:
  """What two pre-sinks of one structure share, cheaply: the number of nodes and of buffers, and which buffers are
  assign targets. (Only a filter: equal signatures are compared by structural key.)"""
  return (len(topo), len(order), targets)
