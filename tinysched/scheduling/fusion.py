"""Pass 3: which stores share a kernel. Elementwise work fuses into whatever reads it for free; a reduction is the
one thing that decides kernel boundaries.

For each reduce that is not itself stored, walk forward from its buffer through the buffers that read it. The
stores reached along a path that is contiguous and as big as the reduce's output, with no second reduce on the
way, can compute the reduce inside their own kernel: they form its group. If the walk meets a second reduce, a
view that reorders or repeats the reduce's output, or a store that already belongs to another reduce, the reduce
is stored by itself; it is then moved ("chased") down a chain of single readers while that keeps the store
contiguous and the same size, so the kernel also does the elementwise tail (but it never stores after a cast to
a wider dtype: storing the narrower value is cheaper).

Two more reasons to store the reduce by itself: a group member that computes from another reduce (upstream,
other than through this one) would put two reduces in one kernel; and an assign target in the group may not be
fused with a kernel that also reads the target of another assign.

Two switches of tinygrad 0.10.0 then drop stores again: FUSE_ARANGE (`inline_arange`: an arange is recomputed by its
readers) and FUSE_CONV_BW (`unstore_reduce_of_reduce`: a reduce read through a view only by a reduce of the same op is
computed inside that reader, where kernel_ast merges the two reduces into one).
"""
from __future__ import annotations
from tinysched.ops import Ops
from tinysched.uop import UOp
from tinysched.shape import ShapeTracker
from tinysched.helpers import dedup
from tinysched.rewrite import Decisions
from tinysched.scheduling.bigraph import under_views, value_of, read_buffers, forced_only, computed
from tinysched.scheduling.stores import GraphFacts, zero_preserving

# read once for the per-node code below (an `Ops.X` read costs ~70 ns on 3.11, see scheduling/bigraph.py)
_REDUCE_AXIS, _ASSIGN, _VIEW, _CAST = Ops.REDUCE_AXIS, Ops.ASSIGN, Ops.VIEW, Ops.CAST
_COPY, _BUFFER_VIEW, _ADD, _WHERE = Ops.COPY, Ops.BUFFER_VIEW, Ops.ADD, Ops.WHERE

# every grouping choice, named so that replay coverage can count the captures that exercise it
grouping = Decisions("grouping", {
  "fused_into_readers": "a reduce computed inside the kernels of the stores its readers reach",
  "alone_reduce_reader": "stored alone: a reader of it is itself a reduce",
  "alone_read_twice": "stored alone: a reader reads it through two different views",
  "alone_reordering_view": "stored alone: a store is reached through a view that reorders or resizes it",
  "alone_store_taken": "stored alone: a store it reaches already belongs to another reduce's kernel",
  "alone_second_reduce": "stored alone: the group would hold a second reduce upstream",
  "group_widened": "a group of several stores took in the stores its members' own walks reach",
  "alone_other_assign": "stored alone: the group assigns and would read another assign's target",
  "chased_down": "a reduce stored alone moved down its chain of single readers",
  "before_widening_cast": "stored before a cast to a wider dtype (the narrower value is cheaper to store)",
  "arange_inlined": "FUSE_ARANGE: an arange's stores dropped, each reader recomputes it",
  "arange_kept": "FUSE_ARANGE: an arange kept stored (an output, or read only by COPY/BUFFER_VIEW)",
  "double_reduce_fused": "FUSE_CONV_BW: a reduce read through a view only by a reduce of the same op is not stored",
  "double_reduce_shared": "FUSE_CONV_BW: a reduce read by a reduce stays stored: it has other readers",
  "double_reduce_output": "FUSE_CONV_BW: a reduce read by a reduce stays stored: it is an output (0.10.0 drops the store)",
  "double_reduce_other_op": "FUSE_CONV_BW: a reduce read by a reduce of another op stays stored (0.10.0 fails an assert)",
  "double_reduce_unsafe_pad": "FUSE_CONV_BW: a reduce read by a reduce through a pad stays stored: it computes an op that "
                              "maps 0 elsewhere (0.10.0 fuses it, wrong numbers)",
})

class _Fusion:
  def __init__(self, facts: GraphFacts, stores: dict[UOp, UOp]):
    self.facts, self.stores = facts, stores
    self.kernel_of: dict[UOp, UOp] = {}  # stored BUFFER -> the reduce BUFFER its kernel computes

  def op_of(self, b: UOp) -> UOp: return value_of(self.facts.writer[b])

  def views_of(self, op: UOp, b: UOp) -> list[ShapeTracker]:
    """The distinct views through which `op` reads buffer `b`."""
    return dedup(s.st for s, buf in read_buffers(op) if buf is b)

  def collect(self, at: UOp, path: ShapeTracker, r: UOp, group: dict[UOp, None], visited: set) -> None:
    """Walk from `at` (reached from reduce `r` through the composed view `path`): stores reached join `group`; `r`
    joins it too when it cannot fuse into one of them. At a reader that is a reduce, or that reads `at` twice
    through different views, `r` cannot fuse, and `at`'s remaining readers are not walked."""
    if (at, path) in visited: return
    visited.add((at, path))
    if at in self.stores and at is not r:
      if not path.contiguous or path.size != self.facts.writer[r].st.size:
        grouping.note("alone_reordering_view")
        group[r] = None
      elif at in self.kernel_of:
        grouping.note("alone_store_taken")
        group[r] = None
      group[at] = None
      return
    for reader in self.facts.readers.get(at, {}):
      op = under_views(self.op_of(reader))
      if op.op is _REDUCE_AXIS:
        grouping.note("alone_reduce_reader")
        group[r] = None
        return
      if len(views := self.views_of(op, at)) != 1:
        grouping.note("alone_read_twice")
        group[r] = None
        return
      self.collect(reader, path + views[0], r, group, visited)

  def upstream_reduce(self, r: UOp, group: dict[UOp, None]) -> bool:
    """Whether a group member, or anything it computes from other than through `r`, is a reduce."""
    todo, seen = list(group), set()
    while todo:
      if (op := self.op_of(todo.pop())) in seen: continue
      seen.add(op)
      if op.op is _REDUCE_AXIS: return True
      todo.extend(buf for _, buf in read_buffers(op) if buf is not r)
    return False

  def isolate(self, r: UOp, group: dict[UOp, None]) -> dict[UOp, None]:
    """A group of several stores: empty if it would hold a second reduce; else the group, plus the stores its members'
    own walks reach, unless those walks lead back into the group."""
    if self.upstream_reduce(r, group):
      grouping.note("alone_second_reduce")
      return {}
    reached: dict[UOp, None] = {}
    for m in group: self.collect(m, self.facts.writer[m].st, m, reached, set())
    if any(m in group for m in reached) or not reached: return group
    grouping.note("group_widened")
    return {**group, **reached}

  def reads_other_assign(self, r: UOp, group: dict[UOp, None]) -> bool:
    """Whether the kernel of `r` + `group` would read (through fused buffers) an assign outside the group."""
    todo, seen = [r, *group], set()
    while todo:
      if (b := todo.pop()) in seen or (node := self.facts.writer.get(b)) is None: continue
      seen.add(b)
      op = value_of(node)
      if op.op is _ASSIGN and b not in group: return True
      if b in self.stores: continue
      todo.extend(u.src[0] for s in op.src if (u := under_views(s)).op is _VIEW and u.src)
    return False

  def chase(self, r: UOp, path: ShapeTracker) -> UOp:
    """Where a reduce that is stored by itself should be stored: down its chain of single readers."""
    at = r
    while len(readers := self.facts.readers.get(at, {})) == 1:
      nxt = next(iter(readers))
      op = self.op_of(nxt)
      views = self.views_of(op, at)
      if len(views) != 1 or path.size != views[0].size: break
      path = path + views[0]
      if not path.contiguous or op.op is _REDUCE_AXIS: break
      at = nxt
    if at is not r: grouping.note("chased_down")
    if (op := self.op_of(at)).op is _CAST and op.dtype.itemsize > op.src[0].dtype.itemsize:
      grouping.note("before_widening_cast")
      at = under_views(op.src[0]).buf_uop
    return at

  def group_reduce(self, r: UOp, r_op: UOp) -> None:
    group: dict[UOp, None] = {}
    self.collect(r, r_op.st, r, group, set())
    movable = all(m not in self.kernel_of for m in group)
    alone = r in group
    if not alone and len(group) > 1: group = self.isolate(r, group)
    if not alone and any(m in self.facts.assign_targets for m in group) and self.reads_other_assign(r, group):
      grouping.note("alone_other_assign")
      alone, movable = True, False
    if alone or not group:
      at = self.chase(r, r_op.st) if movable else r
      group = {at: None}
      self.stores[at] = at  # a placeholder: cut_at_stores writes the STORE
    else: grouping.note("fused_into_readers")
    self.kernel_of.update((m, r) for m in group)

  def inline_arange(self, r: UOp) -> None:
    """FUSE_ARANGE: the stores of an arange's kernel (a sum of masked constants) are dropped, so each reader
    recomputes it, where codegen folds it to a closed form (an embedding's vocabulary loop becomes one guarded load).
    Kept: an arange that is an output, and one only COPY/BUFFER_VIEW read."""
    mine = [b for b, owner in self.kernel_of.items() if owner is r]
    readers = [rd for b in mine for rd in self.facts.readers.get(b, {})]
    if any(forced_only(self.facts.writer[b].src[1]) for b in mine) or all(self.op_of(rd).op in (_COPY, _BUFFER_VIEW) for rd in readers):
      grouping.note("arange_kept")
      return
    grouping.note("arange_inlined")
    for b in mine: self.stores.pop(b, None)

  def unstore_reduce_of_reduce(self, inner: UOp) -> None:
    """FUSE_CONV_BW, seen from the stored reduce `inner`: when the only buffer reading it is a reduce of the same op
    that reads it through a movement view (a convolution's weight gradient reduces a permuted reduce), `inner` is not
    stored: it is computed in that reader's kernel, where kernel_ast merges the two into one reduce over both axis sets
    (fuse_reduces). Kept stored, unlike tinygrad 0.10.0: an output (0.10.0 drops its store), a reader of another op
    (0.10.0 asserts), a pad between them over an op that maps 0 elsewhere (0.10.0 gives wrong numbers)."""
    outers = [rd for rd in self.facts.readers.get(inner, {}) if reads_reduce_through_view(self.op_of(rd)) is inner]
    if not outers: return
    outer, inner_op = self.op_of(outers[0]), self.op_of(inner)
    if len(self.facts.readers[inner]) != 1: kept = "double_reduce_shared"
    elif forced_only(self.facts.writer[inner].src[1]): kept = "double_reduce_output"
    elif inner_op.arg[0] is not outer.arg[0]: kept = "double_reduce_other_op"
    elif any(v.mask is not None for v in outer.src[0].st.views) and \
        not zero_preserving(inner_op, stop=lambda u: computed(u) and u.src[0] in self.stores):  # stored: computed elsewhere
      kept = "double_reduce_unsafe_pad"
    else:
      grouping.note("double_reduce_fused")
      del self.stores[inner]
      return
    grouping.note(kept)

def reads_reduce_through_view(op: UOp) -> UOp | None:
  """The BUFFER of the reduce that reduce `op` reads through a movement view, if it does (the seed's double reduce: a
  keepdim reduce read directly is not one)."""
  if op.op is not _REDUCE_AXIS: return None
  s = op.src[0]
  if s.op is not _VIEW or len(s.src) != 1 or not computed(b := under_views(s)): return None
  return b.src[0] if value_of(b).op is _REDUCE_AXIS else None

def is_arange(op: UOp) -> bool:
  """A sum of masked constants (arange, cumsum of a constant): the reduce FUSE_ARANGE recomputes in its readers."""
  return op.op is _REDUCE_AXIS and op.arg[0] is _ADD and under_views(op.src[0]).op is _WHERE

def group_stores(facts: GraphFacts, stores: dict[UOp, UOp], fuse_arange: bool, keep_stored: frozenset = frozenset(),
                 fuse_conv_bw: bool = False) -> list[list[UOp]]:
  """Adds the reduces' stores to `stores` and returns the stored BUFFERs grouped by kernel, in `stores` order.
  `keep_stored`: aranges FUSE_ARANGE must not inline (their readers' kernels would not be well formed).
  `fuse_conv_bw`: FUSE_CONV_BW, a reduce of a reduce shares one kernel (unstore_reduce_of_reduce)."""
  f = _Fusion(facts, stores)
  aranges: list[UOp] = []
  for r, node in facts.writer.items():
    if (r_op := value_of(node)).op is not _REDUCE_AXIS or r in stores: continue
    f.group_reduce(r, r_op)
    if fuse_arange and is_arange(r_op) and r not in keep_stored: aranges.append(r)
  if fuse_conv_bw:  # every reduce now stored, in the big graph's order
    for r, node in facts.writer.items():
      if r in stores and value_of(node).op is _REDUCE_AXIS: f.unstore_reduce_of_reduce(r)
  for r in aranges: f.inline_arange(r)
  kernels: dict[UOp, list[UOp]] = {}
  for b in stores: kernels.setdefault(f.kernel_of.get(b, b), []).append(b)
  return list(kernels.values())
