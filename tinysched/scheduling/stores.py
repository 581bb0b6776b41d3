"""Pass 2: which computed buffers must be stored to memory, and the cut of the big graph at those stores.

A computed buffer is fused into whatever reads it unless something forces it to memory:
- it is an ASSIGN, a CONTIGUOUS or a meta op (COPY, BUFFER_VIEW, EMPTY);
- it is read through a view that repeats elements (an expand), which would recompute the op per copy;
- it is read through a padding view and its op is not zero-preserving (exp, log, reciprocal, integer division...:
  the pad's zeros would pass through f and come out as f(0) != 0);
- a COPY or BUFFER_VIEW reads it (those need real memory as their source).

`plan_stores` fills `stores` (BUFFER -> what to store, in firing order) by a bottom-up rewrite in which every buffer
already chosen reads as a LOAD; so the zero-preservation check of a pad sees only the ops that would really be
fused under it. `cut_at_stores` then rewrites the graph once more, turning each chosen buffer into a STORE (kept in
`stores`) and each read of it into a LOAD: every STORE is then the root of one kernel's graph.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from tinysched.ops import Ops, GroupOp
from tinysched.uop import UOp, make_uop, resolve
from tinysched.rewrite import UPat, PatternMatcher
from tinysched.shape import ShapeTracker
from tinysched.helpers import prod, all_int
from tinysched.scheduling.bigraph import ScheduleError, computed, value_of, read_buffers, view_of

_LOAD, _ASSIGN = Ops.LOAD, Ops.ASSIGN  # (read once: an `Ops.X` read costs ~70 ns on 3.11, see scheduling/bigraph.py)

@dataclass
class GraphFacts:
  """What fusion needs to know about the big graph, gathered in one walk (`gather_facts`)."""
  var_vals: dict[UOp, int] = field(default_factory=dict)
  writer: dict[UOp, UOp] = field(default_factory=dict)               # BUFFER -> its VIEW(BUFFER, op), walk order
  assign_targets: dict[UOp, None] = field(default_factory=dict)      # BUFFERs an ASSIGN writes
  readers: dict[UOp, dict[UOp, None]] = field(default_factory=dict)  # BUFFER -> computed BUFFERs reading it
  topo: dict[UOp, None] = field(default_factory=dict)                # the big graph's toposort (the later walks follow it)

def gather_facts(sink: UOp, var_vals: dict[UOp, int]) -> GraphFacts:
  facts = GraphFacts(var_vals=dict(var_vals), topo=sink.toposort())
  for u in facts.topo:
    if not computed(u): continue
    b = u.src[0]
    if facts.writer.setdefault(b, u) is not u:
      raise ScheduleError(f"buffer {b.arg[0]} ({b.arg[1][2]!r}, {b.arg[1][1]} elements) is written by two different ops in one "
                          "schedule (usually two assigns into the same buffer).\nhelp: realize the first assign before building the second")
    op = value_of(u)
    if op.op is _ASSIGN: facts.assign_targets[b] = None
    for _, src_buf in read_buffers(op): facts.readers.setdefault(src_buf, {})[b] = None
  return facts

# *** choosing the stores ***

def _buffer(*ops: Ops, name: str = "value") -> UPat:
  """VIEW(BUFFER as b, <op> as value) as node; any op when none given."""
  return UPat(Ops.VIEW, src=(UPat.var("b"), UPat(ops or None, name=name)), name="node")

def store_and_load(ctx: dict[UOp, UOp], b: UOp, value: UOp, node: UOp) -> UOp:
  """Record `b` as stored in `ctx` (contiguously, in its own shape) and return the node that reads it back."""
  reader = make_uop(_LOAD, node.dtype, (b, view_of(node.st)))
  ctx[b] = UOp.store(b, view_of(ShapeTracker.from_shape(node.st.shape)), value)
  return reader

def zero_preserving(u: UOp, stop=None) -> bool:
  """No op under `u` maps 0 to something else, so padding `u`'s result equals computing it on padded inputs.
  Stored buffers are LOADs in the graph being rewritten, so the walk ends at them; `stop(node)`: also end at a node
  for which it is true (in the big graph: a buffer computed in another kernel)."""
  if stop is None: return all(x.op not in GroupOp.UnsafePad for x in u.toposort())
  todo, seen = [u], set()
  while todo:
    if (x := todo.pop()) in seen: continue
    seen.add(x)
    if x.op in GroupOp.UnsafePad: return False
    if not stop(x): todo.extend(x.src)
  return True

def _plain_pad(node: UOp, movement: UOp) -> bool:
  """One masked view that shows no more elements than the buffer holds: a plain pad (or shrink)."""
  shape, st = node.st.shape, movement.st
  return len(st.views) == 1 and (mask := st.views[-1].mask) is not None and all_int(shape) and \
    resolve(prod(shape) >= prod([end - begin for begin, end in mask]))

def _store_before_expand(ctx: dict[UOp, UOp], b: UOp, value: UOp, node: UOp, movement: UOp) -> UOp | None:
  """A view that repeats elements: store once, read many times (not recompute the op per copy)."""
  if _plain_pad(node, movement) or not resolve(prod(node.st.shape) < prod(movement.st.shape)): return None
  return store_and_load(ctx, b, value, node).view(movement.st)

def _store_before_unsafe_pad(ctx: dict[UOp, UOp], b: UOp, value: UOp, node: UOp, movement: UOp) -> UOp | None:
  """A padding (masked) view over an op that maps 0 to something else: the pad's zeros must not go through it."""
  if all(v.mask is None for v in movement.st.views) or zero_preserving(node): return None  # (a plain pad has a mask too)
  return store_and_load(ctx, b, value, node).view(movement.st)

def _store_source_of(ctx: dict[UOp, UOp], root: UOp, b: UOp, value: UOp, node: UOp, movement: UOp | None = None) -> UOp:
  load = store_and_load(ctx, b, value, node)
  return root.replace(src=(load if movement is None else load.view(movement.st),))

store_rules = PatternMatcher([
  (_buffer(Ops.ASSIGN, Ops.CONTIGUOUS, *GroupOp.Meta), store_and_load, "store_meta_op"),
  (_buffer().view(name="movement"), _store_before_expand, "store_before_expand"),
  (_buffer().view(name="movement"), _store_before_unsafe_pad, "store_before_unsafe_pad"),
  (UPat((Ops.COPY, Ops.BUFFER_VIEW), src=(UPat.any(_buffer(), _buffer().view(name="movement")),), name="root"), _store_source_of,
   "store_copy_source"),
], name="store_rules")

cut_rules = PatternMatcher([
  (_buffer(), lambda ctx, b, value, node: store_and_load(ctx, b, value, node) if b in ctx else None, "cut_at_store"),
], name="cut_rules")
