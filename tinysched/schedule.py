"""The scheduler: lazy graph -> ordered kernels (ScheduleItems), following tinygrad 0.10.0's design.

Steps (DESIGN §5):
1. `to_uop`: the lazy graph becomes one big UOp graph. An unrealized buffer is VIEW(BUFFER, op), a
   realized one VIEW(BUFFER), a constant WHERE(VALID(view), CONST, 0).
2. `do_realize`: decide which buffers must be stored (outputs, meta ops, expands, unsafe pads).
3. `group_realizes`: a reduce fuses forward into elementwise children it reaches contiguously,
   otherwise it (or a contiguous child it can be chased to) is realized.
4. `break_sched`: cut the big graph at realized buffers into one pre-sink per kernel.
5. `full_ast_rewrite(pre, var_vals, assigns) -> (ast, ScheduleItemContext)`: push views to loads and
   stores, unbind, number buffers. Pure: the same inputs give the same AST in any process.
6. Order kernels (a kernel that reads a buffer's old value runs before the kernel that assigns it).
"""
from __future__ import annotations
import sys
from collections import deque
from dataclasses import dataclass, field
from tinysched.dtype import dtypes, DType
from tinysched.ops import Ops, GroupOp
from tinysched.uop import UOp, resolve
from tinysched.rewrite import UPat, PatternMatcher, graph_rewrite
from tinysched.shape import ShapeTracker, View, strides_for_shape
from tinysched.lazy import LazyBuffer, Metadata
from tinysched.device import Buffer
from tinysched.helpers import prod, dedup, all_same, all_int, FUSE_ARANGE
from tinysched import capture_hook

class ScheduleError(RuntimeError): pass

@dataclass(frozen=True, eq=False)
class ScheduleItem:
  ast: UOp
  bufs: tuple[Buffer, ...]
  metadata: tuple[Metadata, ...] = ()
  assign_preloads: tuple[UOp, ...] = ()
  @property
  def output_idxs(self) -> tuple[int, ...]:
    return tuple(x.src[0].arg for x in self.ast.src) if self.ast.op is Ops.SINK else (0,)
  @property
  def outputs(self) -> tuple[Buffer, ...]:
    """Buffers this kernel writes (or reads and writes)."""
    return tuple(b for i, b in enumerate(self.bufs) if i in self.output_idxs)
  @property
  def inputs(self) -> tuple[Buffer, ...]:
    """Buffers this kernel only reads."""
    return tuple(b for i, b in enumerate(self.bufs) if i not in self.output_idxs)

# *** helpers over the big graph ***

def new_buffer(device: str, size: int, dtype: DType, num: int) -> UOp:
  return UOp(Ops.BUFFER, dtype.ptr(), (), (num, (device, size, dtype)))

def is_scheduled(u: UOp) -> bool: return u.op is Ops.VIEW and len(u.src) == 2
def base_of(u: UOp) -> UOp:
  """Strip view-of-scheduled-buffer wrappers: VIEW(VIEW(BUFFER, op)) -> VIEW(BUFFER, op)."""
  while u.op is Ops.VIEW and len(u.src) == 1 and u.src[0].op is not Ops.BUFFER: u = u.src[0]
  return u
def is_contiguous_base(u: UOp) -> bool:
  return u.op is Ops.CONTIGUOUS and not is_scheduled(base_of(u.src[0]))
def uval(u: UOp) -> UOp:
  """The op a scheduled buffer holds (without a CONTIGUOUS that only forces its realization)."""
  if not is_scheduled(u): raise ScheduleError(f"expected a scheduled buffer, got {u.op}")
  to_store = u.src[1]
  return to_store.src[0] if is_contiguous_base(to_store) else to_store
def st_uop(st: ShapeTracker) -> UOp: return UOp(Ops.VIEW, dtypes.void, (), st)

def UPatSrc(*args, **kwargs) -> UPat:
  """A scheduled buffer: VIEW(BUFFER as b, op as to_store) as base."""
  return UPat(Ops.VIEW, src=(UPat.var("b"), UPat(*args, **{**kwargs, "name": "to_store"})), name="base")

@dataclass
class ScheduleContext:
  """What the grouping step needs to know about the big graph; derived from it by `build_context`."""
  var_vals: dict[UOp, int] = field(default_factory=dict)            # DEFINE_VAR -> bound value
  assigns: dict[UOp, None] = field(default_factory=dict)            # BUFFERs that are ASSIGN targets
  allbufs: dict[UOp, UOp] = field(default_factory=dict)             # BUFFER -> its scheduled VIEW(BUFFER, op)
  children: dict[UOp, dict[UOp, None]] = field(default_factory=dict)

def build_context(big_graph: UOp, var_vals: dict[UOp, int]) -> ScheduleContext:
  ctx = ScheduleContext(var_vals=dict(var_vals))
  for u in big_graph.toposort():
    if not is_scheduled(u): continue
    ubuf = u.src[0]
    if (other := ctx.allbufs.get(ubuf)) is not None and other is not u:
      raise ScheduleError(f"buffer {ubuf.arg[0]} ({ubuf.arg[1][2]!r}, {ubuf.arg[1][1]} elements) is written by two different ops in one "
                          "schedule (usually two assigns into the same buffer).\nhelp: realize the first assign before building the second")
    ctx.allbufs[ubuf] = u
    op = uval(u)
    if op.op is Ops.ASSIGN: ctx.assigns[ubuf] = None
    for x in op.src:
      if is_scheduled(base_of(x)): ctx.children.setdefault(base_of(x).buf_uop, {})[ubuf] = None
  return ctx

def _lazy_toposort(outs: list[LazyBuffer]) -> list[LazyBuffer]:
  """Every LazyBuffer reachable from outs, sources first; iterative (graphs are deep)."""
  order: list[LazyBuffer] = []
  seen: set[int] = set()  # ids, membership only
  stack: list[tuple[LazyBuffer, bool]] = [(x, False) for x in reversed(outs)]
  while stack:
    lb, expanded = stack.pop()
    if id(lb) in seen: continue
    if expanded:
      seen.add(id(lb)); order.append(lb)
      continue
    stack.append((lb, True))
    deps: list[LazyBuffer] = []
    if lb.base is not lb: deps = [lb.base]
    elif lb.realized is None and lb.op is not Ops.CONST: deps = list(lb.srcs)
    for d in reversed(deps):
      if id(d) not in seen: stack.append((d, False))
  return order

def to_uop(outs: list[LazyBuffer], buffers: dict[UOp, Buffer], lazybufs: dict[Buffer, LazyBuffer],
           ubuf_metadata: dict[UOp, Metadata]) -> tuple[UOp, dict[UOp, int]]:
  """The lazy graph as one big UOp graph (a SINK over the outputs) and the values of its bound Variables."""
  var_vals: dict[UOp, int] = {}
  cache: dict[int, UOp] = {}  # id(LazyBuffer) -> UOp; the LazyBuffers are alive for the whole call
  for buf in _lazy_toposort(outs):
    if buf is not buf.base:
      cache[id(buf)] = cache[id(buf.base)].view(buf.st)
      continue
    dtype = buf.dtype
    if buf.realized is None and buf.op is Ops.CONST:
      val = buf.arg
      if isinstance(val, UOp): var_vals.update([val.unbind()])
      cache[id(buf)] = UOp(Ops.VALID, dtypes.bool, (st_uop(buf.st),)).where(UOp.const(dtype, val), UOp.const(dtype, 0))
      continue
    if buf.realized is not None:
      ubuf = new_buffer(buf.device, buf.buffer.size, buf.buffer.dtype, len(buffers))
      buffers[ubuf] = buf.buffer
      op = None
    elif buf.op is Ops.ASSIGN:
      target, new_val = (cache[id(x)] for x in buf.srcs)
      ubuf = target.buf_uop
      op = UOp(Ops.ASSIGN, dtype, (ubuf, new_val), buf.arg)
    else:
      ubuf = new_buffer(buf.device, buf.buffer.size, buf.buffer.dtype, len(buffers))
      buffers[ubuf] = buf.buffer
      op = UOp(buf.op, dtype, tuple(cache[id(x)] for x in buf.srcs), None if buf.op in (Ops.CAST, Ops.BITCAST) else buf.arg)
    cache[id(buf)] = UOp(Ops.VIEW, dtype, (ubuf,) if op is None else (ubuf, UOp(Ops.CONTIGUOUS, dtype, (op,)) if buf.forced_realize else op),
                         buf.st)
    if op is not None:
      if buf.metadata is not None: ubuf_metadata[ubuf] = buf.metadata
      lazybufs[buf.buffer] = buf
  return UOp.sink_of(*(cache[id(x)] for x in outs)), var_vals

# *** step 2: what must be realized ***

def can_pad(u: UOp) -> bool:
  """Padding fills with 0, so it may not pass an op with f(0) != 0. The walk stops at realized
  buffers: in the graph being rewritten they are already LOADs."""
  return not any(x.op in GroupOp.UnsafePad for x in u.toposort())

def realize(ctx: dict[UOp, UOp], b: UOp, to_store: UOp, base: UOp) -> UOp:
  ctx[b] = UOp.store(b, st_uop(ShapeTracker.from_shape((st := base.st).shape)), to_store)
  return UOp(Ops.LOAD, base.dtype, (b, st_uop(st)))

def realize_view(ctx: dict[UOp, UOp], base: UOp, view: UOp, to_store: UOp, b: UOp) -> UOp | None:
  base_shape, st = base.st.shape, view.st
  # a single masked view no bigger than its base is a simple pad: fuse it if the ops allow
  if len(st.views) == 1 and (m := st.views[-1].mask) is not None and all_int(base_shape) and \
      resolve(prod(base_shape) >= prod([e - s for s, e in m])):
    return None if can_pad(base) else realize(ctx, b, to_store, base).view(st)
  # realize before an expand: otherwise the op would be recomputed for every broadcast element
  if resolve(prod(base_shape) < prod(st.shape)): return realize(ctx, b, to_store, base).view(st)
  # any other pad must be safe
  return None if (all(v.mask is None for v in st.views) or can_pad(base)) else realize(ctx, b, to_store, base).view(st)

def realize_before_meta(ctx: dict[UOp, UOp], root: UOp, b: UOp, to_store: UOp, base: UOp, view: UOp | None = None) -> UOp:
  ld = realize(ctx, b, to_store, base)
  return root.replace(src=(ld if view is None else ld.view(view.st),))

do_realize = PatternMatcher([
  # meta ops, ASSIGN and CONTIGUOUS are always stored
  (UPatSrc((Ops.ASSIGN, Ops.CONTIGUOUS, *GroupOp.Meta)), realize, "realize_meta"),
  (UPatSrc().view(name="view"), realize_view, "realize_view"),
  # the source of a COPY or BUFFER_VIEW must exist in memory
  (UPat((Ops.COPY, Ops.BUFFER_VIEW), src=(UPat.any(UPatSrc(), UPatSrc().view(name="view")),), name="root"), realize_before_meta,
   "realize_before_copy"),
], name="do_realize")

# *** step 3: group reduces with their elementwise children ***

def recursive_group(tr: UOp, st: ShapeTracker, r: UOp, ctx: ScheduleContext, realizes: dict[UOp, UOp], reduce_for_op: dict[UOp, UOp],
                    group: dict[UOp, None], cache: set) -> None:
  """Walk the children of reduce `r`'s buffer; collect the realized buffers it can fuse into, or
  put `r` itself into `group` when a child cannot fuse (a second reduce, a non-contiguous path)."""
  if (tr, st) in cache: return
  cache.add((tr, st))
  rsize = ctx.allbufs[r].st.size
  if tr in realizes and tr is not r:
    # fusing is only possible along a contiguous path of the same size, and one reduce per kernel
    if not st.contiguous or st.size != rsize or tr in reduce_for_op: group.setdefault(r)
    group.setdefault(tr)
    return
  for tr_next in ctx.children.get(tr, {}):
    tr_next_uop = base_of(uval(ctx.allbufs[tr_next]))
    if tr_next_uop.op is Ops.REDUCE_AXIS:
      group.setdefault(r)
      return
    st_childs = dedup(x.st for x in tr_next_uop.src if is_scheduled(base_of(x)) and base_of(x).buf_uop is tr)
    if len(st_childs) > 1:
      group.setdefault(r)
      return
    recursive_group(tr_next, st + st_childs[0], r, ctx, realizes, reduce_for_op, group, cache)

def get_isolated_children(r: UOp, reduce_for_op: dict[UOp, UOp], ctx: ScheduleContext, realizes: dict[UOp, UOp],
                          group: dict[UOp, None]) -> dict[UOp, None]:
  rc_parents, seen = deque(group), set()
  while rc_parents:
    if (p := uval(ctx.allbufs[rc_parents.pop()])) in seen: continue
    seen.add(p)
    if p.op is Ops.REDUCE_AXIS: return {}  # another reduce upstream of the group: can't fuse
    rc_parents.extend(base_of(x).buf_uop for x in p.src if is_scheduled(base_of(x)) and base_of(x).buf_uop is not r)
  descendants: dict[UOp, None] = {}
  for tr in group: recursive_group(tr, ctx.allbufs[tr].st, tr, ctx, realizes, reduce_for_op, descendants, set())
  return {**group, **({} if any(tr in group for tr in descendants) else descendants)}

def _inline_arange(ctx: ScheduleContext, realizes: dict[UOp, UOp], stores: list[UOp]) -> None:
  """FUSE_ARANGE: the buffers an arange (a sum of masked constants) would be stored in are recomputed inside each
  kernel that reads them, so codegen can fold it to a closed form there (lowerer.py `reduce_folds`: an embedding's
  vocab loop becomes one guarded load). Kept stored: an arange that is an output (a contiguous base), and one that
  no kernel reads (only COPY/BUFFER_VIEW do)."""
  if any(is_contiguous_base(ctx.allbufs[b].src[1]) for b in stores): return
  readers = [c for b in stores for c in ctx.children.get(b, {})]
  if all(uval(ctx.allbufs[c]).op in (Ops.COPY, Ops.BUFFER_VIEW) for c in readers): return
  for b in stores: realizes.pop(b, None)

def group_realizes(ctx: ScheduleContext, realizes: dict[UOp, UOp]) -> list[list[UOp]]:
  reduce_for_op: dict[UOp, UOp] = {}
  reduce_of_const: list[UOp] = []
  fuse_arange = bool(FUSE_ARANGE)
  for r, r_view in ctx.allbufs.items():
    if (r_uop := uval(r_view)).op is not Ops.REDUCE_AXIS or r in realizes: continue
    group: dict[UOp, None] = {}
    recursive_group(r, r_uop.st, r, ctx, realizes, reduce_for_op, group, set())
    can_chase = all(tr not in reduce_for_op for tr in group)
    forced_realize = r in group
    if not forced_realize and len(group) > 1: group = get_isolated_children(r, reduce_for_op, ctx, realizes, group)
    # an assign in the group may only fuse if no other assign target is read by the kernel
    if not forced_realize and any(x in ctx.assigns for x in group):
      parents = deque((r, *group))
      while parents and not forced_realize:
        if (p_view := ctx.allbufs.get(p := parents.pop())) is None: continue
        if (p_uop := uval(p_view)).op is Ops.ASSIGN and p not in group: forced_realize, can_chase = True, False
        if p in realizes: continue
        parents.extend(base_of(x).src[0] for x in p_uop.src if base_of(x).op is Ops.VIEW and len(base_of(x).src) != 0)
    if forced_realize or not group:
      tr = r
      if can_chase:
        # chase the reduce down a chain of single, contiguous, same-size children
        st = r_uop.st
        while len(ctx.children.get(tr, {})) == 1:
          tr_next = next(iter(ctx.children[tr]))
          tr_next_uop = uval(ctx.allbufs[tr_next])
          st_childs = dedup(x.st for x in tr_next_uop.src if is_scheduled(base_of(x)) and base_of(x).buf_uop is tr)
          if len(st_childs) > 1 or st.size != st_childs[0].size: break
          st = st + st_childs[0]
          if not st.contiguous or tr_next_uop.op is Ops.REDUCE_AXIS: break
          tr = tr_next
        # never store after a cast to a bigger dtype: store the smaller value
        if (tr_uop := uval(ctx.allbufs[tr])).op is Ops.CAST and tr_uop.dtype.itemsize > tr_uop.src[0].dtype.itemsize:
          tr = base_of(tr_uop.src[0]).buf_uop
      group = {tr: None}
      realizes[tr] = tr
    reduce_for_op.update((tr, r) for tr in group)
    if fuse_arange and r_uop.arg[0] is Ops.ADD and base_of(r_uop.src[0]).op is Ops.WHERE: reduce_of_const.append(r)
  for r in reduce_of_const: _inline_arange(ctx, realizes, [tr for tr, rop in reduce_for_op.items() if rop is r])
  output_groups: dict[UOp, list[UOp]] = {}
  for ubuf in realizes: output_groups.setdefault(reduce_for_op.get(ubuf, ubuf), []).append(ubuf)
  return list(output_groups.values())

break_sched = PatternMatcher([
  (UPatSrc(), lambda ctx, b, to_store, base: realize(ctx, b, to_store, base) if b in ctx else None, "break_at_realized"),
], name="break_sched")

# *** step 5: the kernel AST ***

def apply_swizzle(u: UOp, st: ShapeTracker) -> UOp: return graph_rewrite(u.view(st), view_left)

def permute_reduce(input_st: ShapeTracker, axis: tuple[int, ...]) -> tuple[ShapeTracker, tuple]:
  permute_axis = tuple(i for i in range(len(input_st.shape)) if i not in axis) + axis
  tmp = input_st.permute(permute_axis)
  return tmp, tmp.shape[-len(axis):]

def swizzle_reduce(r: UOp, src: UOp, st: ShapeTracker) -> UOp:
  """A non-contiguous view of a reduce's output becomes a view of its input (with the reduced
  axes moved last) and a new reduce."""
  tmp, rshape = permute_reduce(ShapeTracker.from_shape(src.st.shape), r.axis_arg)
  prshape = prod(rshape)
  rstrides = strides_for_shape(rshape)
  nv = [View.create(v.shape + rshape, tuple(x*prshape for x in v.strides) + rstrides, v.offset*prshape,
                    v.mask + tuple((0, s) for s in rshape) if v.mask is not None else None) for v in st.views]
  new_input_st = tmp + ShapeTracker(tuple(nv))
  _, new_rshape = permute_reduce(new_input_st, r.axis_arg)
  new_axis = tuple(range(len(new_input_st.shape) - len(new_rshape), len(new_input_st.shape)))
  return apply_swizzle(src, new_input_st).r(r.arg[0], new_axis).view(ShapeTracker.from_shape(st.shape))

def push_swizzle_through_reduce(root: UOp, swizzle: UOp, src: UOp) -> UOp:
  swizzle_st, src_st = swizzle.st, src.st
  if not swizzle_st.contiguous: raise ScheduleError("can't push a non-contiguous VIEW down to a STORE")
  if not resolve(prod(swizzle_st.shape) == prod(src_st.shape)): raise ScheduleError("can't push an expanding VIEW down to a STORE")
  output_shape = swizzle_st.reduce(root.axis_arg)
  new_axis = tuple(i for i, (s, u) in enumerate(zip(src_st.shape, output_shape)) if s is not u and s != u)
  return swizzle.src[0].r(root.arg[0], new_axis).view(ShapeTracker.from_shape(output_shape))

def push_swizzle_through_elementwise(root: UOp) -> UOp | None:
  swizzles = [x for x in root.src if base_of(x) is not x]
  if not swizzles: return None
  shapes = [(x.st.shape, x.src[0].st.shape) for x in swizzles]
  if not all_same([(a, prod(a), prod(b)) for a, b in shapes]): raise ScheduleError(f"swizzles must have the same size: {shapes}")
  new_shape, new_input_shape = shapes[0]
  if root.op is Ops.STORE:
    # the stored value keeps its own shape; the output view is reshaped to match it
    b, out_st, val = root.src
    return root.replace(src=(b, st_uop(out_st.arg.reshape(new_input_shape)), val.src[0]))
  ret = root.replace(src=tuple(x.src[0] if x in swizzles else apply_swizzle(x, ShapeTracker.from_shape(new_input_shape)) for x in root.src))
  return ret.view(ShapeTracker.from_shape(new_shape))

def merge_double_reduce(root: UOp, first_reduce: UOp) -> UOp:
  if root.arg[0] is not first_reduce.arg[0]: raise ScheduleError("can't merge reduces with different ops")
  if any(x.op is Ops.REDUCE_AXIS for x in first_reduce.parents): raise ScheduleError("can't merge more than two reduces")
  return first_reduce.src[0].r(first_reduce.arg[0], root.axis_arg + first_reduce.axis_arg)

merge_views = PatternMatcher([
  (UPat(Ops.VIEW, src=(UPat(Ops.VIEW, name="s0"),), name="s1"), lambda s0, s1: s0.replace(arg=s0.st + s1.st), "merge_views"),
], name="merge_views")

# push VIEWs up to the loads
view_left = merge_views + PatternMatcher([
  (UPat((*GroupOp.ALU, Ops.CAST, Ops.BITCAST, Ops.ASSIGN), name="e").view(name="v"),
   lambda e, v: e.replace(src=tuple(s.view(v.st) for s in e.src)), "view_through_elementwise"),
  # constants, and Variables standing for a constant, broadcast: VALID carries the mask
  (UPat((Ops.CONST, Ops.DEFINE_VAR, Ops.BIND), name="c").view(), lambda c: c, "view_of_const"),
  (UPat(GroupOp.Buffer, name="b").view(name="v"),
   lambda b, v: b.replace(src=tuple(st_uop(s.arg + v.arg) if s.op is Ops.VIEW else s for s in b.src)), "merge_view_into_buffer_op"),
], name="view_left")

def assign_store_view(a: UOp, b: UOp, st: UOp) -> UOp | None:
  # an ASSIGN into a view of its target stores through that view
  return UOp.store(b, st_uop(a.arg[0] + st.arg), a.replace(arg=())) if a.arg else None

# push VIEWs down to the stores
view_right = merge_views + PatternMatcher([
  (UPat(Ops.STORE, src=(UPat.var("b"), UPat.var("st"), UPat(Ops.ASSIGN, name="a"))), assign_store_view, "assign_view"),
  (UPat(Ops.REDUCE_AXIS, src=(UPat.var("src"),), name="r").view(name="v"),
   lambda v, r, src: None if v.st.contiguous else swizzle_reduce(r, src, v.st), "swizzle_reduce"),
  (UPat(Ops.REDUCE_AXIS, src=(UPat.var("src").view(name="swizzle"),), name="root"), push_swizzle_through_reduce, "swizzle_through_reduce"),
  (UPat((*GroupOp.ALU, Ops.CAST, Ops.BITCAST, Ops.ASSIGN, Ops.CONTIGUOUS, Ops.STORE), name="root"), push_swizzle_through_elementwise,
   "swizzle_through_elementwise"),
  (UPat(Ops.REDUCE_AXIS, src=(UPat(Ops.REDUCE_AXIS, name="first_reduce"),), name="root"), merge_double_reduce, "merge_double_reduce"),
], name="view_right")

@dataclass
class ScheduleItemContext:
  var_vals: dict[UOp, int]
  assigned: dict[UOp, None]
  sts: set = field(default_factory=set)  # membership only
  bufs: list[UOp] = field(default_factory=list)
  assign_preloads: list[UOp] = field(default_factory=list)

def _unbind_view(ctx: ScheduleItemContext, x: UOp) -> UOp | None:
  if x.src or (st := x.arg) in ctx.sts: return None
  st, var_vals = st.simplify().unbind()
  ctx.var_vals.update(var_vals)
  ctx.sts.add(st)
  return st_uop(st) if st != x.arg else None

def _preload_to_load(ctx: ScheduleItemContext, x: UOp, b: UOp) -> UOp:
  if b in ctx.assigned and b not in ctx.assign_preloads: ctx.assign_preloads.append(b)
  return x.replace(op=Ops.LOAD)

to_si = PatternMatcher([
  (UPat(Ops.VIEW, name="x"), _unbind_view, "unbind_view"),
  (UPat(Ops.PRELOAD, src=(UPat.var("b"), UPat()), name="x"), _preload_to_load, "preload_to_load"),
  # the store already targets the assigned buffer: the ASSIGN node has done its job
  (UPat(Ops.ASSIGN, src=(UPat(), UPat.var("x"))), lambda x: x, "drop_assign"),
  (UPat(Ops.SINK, src=(UPat(Ops.STORE, src=(UPat.var("b"), UPat(), UPat(GroupOp.Meta, name="x"))),)),
   lambda b, x: x.replace(src=(b, *x.src)), "meta_kernel"),
], name="to_si")

def _number_buf(ctx: ScheduleItemContext, x: UOp) -> UOp:
  if x not in ctx.bufs: ctx.bufs.append(x)
  return UOp(Ops.DEFINE_GLOBAL, x.dtype, (), ctx.bufs.index(x))
append_bufs = PatternMatcher([(UPat(Ops.BUFFER, name="x"), _number_buf, "define_global")], name="append_bufs")

lazy = PatternMatcher([
  (UPatSrc(), lambda to_store, **_: to_store, "fuse_buffer"),
  (UPat(Ops.BUFFER, name="b").view(name="view"), lambda b, view: UOp(Ops.PRELOAD, view.dtype, (b, st_uop(view.st))), "preload"),
  (UPat(Ops.CONTIGUOUS, src=(UPat.var("x"),)), lambda x: x, "drop_contiguous"),
], name="lazy")
multioutput = PatternMatcher([(UPat(Ops.LOAD, src=(UPat.var("b"), UPat())), lambda ctx, b: ctx.get(b), "multioutput_load")],
                             name="multioutput")

CONTIGUOUS_HINT = "help: consider using .contiguous():\n   - a += a.T\n   + a += a.T.contiguous()"

_AST_MEMO: dict[tuple, tuple[UOp, tuple[int, ...], tuple[int, ...], dict[UOp, int]]] = {}
AST_MEMO_SIZE = 8192

def _canonical_buffers(pre: UOp) -> tuple[UOp, list[UOp]]:
  """`pre` with its BUFFER nodes renumbered 0.. by first appearance, and the original BUFFERs in that order.
  Kernels that differ only in which buffers they touch (the layers of a model) then share one canonical form."""
  bufs: list[UOp] = []
  new: dict[UOp, UOp] = {}
  for u in pre.toposort():
    if u.op is Ops.BUFFER:
      new[u] = UOp(Ops.BUFFER, u.dtype, (), (len(bufs), u.arg[1]))
      bufs.append(u)
    elif u.src:
      src = tuple(new[s] for s in u.src)
      new[u] = u if src == u.src else UOp(u.op, u.dtype, src, u.arg)
    else: new[u] = u
  return new[pre], bufs

def full_ast_rewrite(pre: UOp, var_vals: dict[UOp, int], assigned: dict[UOp, None]) -> tuple[UOp, ScheduleItemContext]:
  """pre-sink -> kernel AST. Returns (ast, context); the context holds the kernel's buffers in
  DEFINE_GLOBAL order (outputs first), its var_vals and the assign targets it reads early.

  Pure, so memoized on the pre-sink with canonical buffer numbers: a model's repeated layers are rewritten
  once (the AST never depends on buffer numbers, nor on var_vals, which only pass through)."""
  canon, bufs = _canonical_buffers(pre)
  akey = tuple(i for i, b in enumerate(bufs) if b in assigned)
  if (hit := _AST_MEMO.get((canon, akey))) is None:
    ast, actx = _full_ast_rewrite(canon, {}, {bufs_c: None for bufs_c in (_nth_buffer(canon, i) for i in akey)})
    # canonical BUFFER numbers are positions in `bufs`: the context maps back to this kernel's buffers
    hit = (ast, tuple(b.arg[0] for b in actx.bufs), tuple(b.arg[0] for b in actx.assign_preloads), actx.var_vals)
    if len(_AST_MEMO) >= AST_MEMO_SIZE: _AST_MEMO.clear()
    _AST_MEMO[(canon, akey)] = hit
  ast, buf_idx, preload_idx, found = hit
  ctx = ScheduleItemContext({**var_vals, **found}, assigned, bufs=[bufs[i] for i in buf_idx], assign_preloads=[bufs[i] for i in preload_idx])
  if capture_hook.HOOK is not None: capture_hook.HOOK("kernel", (pre, var_vals, assigned), ast, {"bufs": ctx.bufs})
  return ast, ctx

def clear_caches() -> None:
  """Forget memoized kernel ASTs (after changing rewrite rules in a running process, e.g. in tests)."""
  _AST_MEMO.clear()

def _nth_buffer(canon: UOp, i: int) -> UOp:
  for u in canon.toposort():
    if u.op is Ops.BUFFER and u.arg[0] == i: return u
  raise KeyError(i)

def _full_ast_rewrite(pre: UOp, var_vals: dict[UOp, int], assigned: dict[UOp, None]) -> tuple[UOp, ScheduleItemContext]:
  # fuse, and fold loads of a buffer stored by this same kernel
  stored = {x.src[0]: x.src[2] for x in pre.src}
  sink = graph_rewrite(pre, lazy + multioutput if len(pre.src) > 1 else lazy, stored)
  # a kernel may not read an assign target both before (PRELOAD) and after (LOAD) the assign
  kinds: dict[UOp, set] = {}
  for x in sink.toposort():
    if x.op in (Ops.PRELOAD, Ops.LOAD) and x.src[0] in assigned: kinds.setdefault(x.src[0], set()).add(x.op)
  for b, k in kinds.items():
    if len(k) > 1:
      raise ScheduleError(f"cycle detected in kernel: buffer {b.arg[0]} is read both before and after it is assigned.\n"
                          "help: use .contiguous() to break the part loading pre-assign into a different kernel.")
  sink = graph_rewrite(graph_rewrite(sink, view_left), view_right)
  # an augmented assign must read its own target contiguously (masked single views are fine)
  assign_targets = [x.src[0] for x in sink.toposort() if x.op is Ops.ASSIGN]
  if assign_targets:
    for x in sink.toposort():
      if x.op is Ops.PRELOAD and x.src[0] in assign_targets and not _assign_read_ok(x.st):
        raise ScheduleError("self operand of augmented assign must be contiguous.\n" + CONTIGUOUS_HINT)
  ctx = ScheduleItemContext(dict(var_vals), assigned)
  sink = graph_rewrite(sink, to_si, ctx)
  # outputs get the first DEFINE_GLOBAL numbers, then inputs in first-use order
  for x in sink.src if sink.op is Ops.SINK else (sink,):
    if x.src and x.src[0].op is Ops.BUFFER: _number_buf(ctx, x.src[0])
  sink = graph_rewrite(sink, append_bufs, ctx)
  return sink, ctx

def _assign_read_ok(s: ShapeTracker) -> bool:
  if s.contiguous: return True
  if len(s.views) == 1 and (m := s.views[0].mask) is not None:
    return ShapeTracker.from_shape(s.shape).shrink(m) == s.shrink(m)
  return False

# *** step 6: the whole schedule ***

sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))

@dataclass(frozen=True)
class ScheduledKernel:
  """One kernel of a scheduled graph: its AST, the BUFFER nodes in DEFINE_GLOBAL order, the assign targets it
  reads before they are written, and every buffer whose op it computes (outputs and fused intermediates)."""
  ast: UOp
  bufs: tuple[UOp, ...]
  assign_preloads: tuple[UOp, ...]
  computes: tuple[UOp, ...]
  @property
  def outputs(self) -> tuple[UOp, ...]:
    idxs = tuple(x.src[0].arg for x in self.ast.src) if self.ast.op is Ops.SINK else (0,)
    return tuple(self.bufs[i] for i in idxs)
  @property
  def inputs(self) -> tuple[UOp, ...]:
    outs = self.outputs
    return tuple(b for b in self.bufs if b not in outs)

def schedule_graph(big_graph: UOp, var_vals: dict[UOp, int]) -> tuple[list[ScheduledKernel], dict[UOp, int]]:
  """Steps 2-6 on the big graph: a pure function (the schedule-level capture point)."""
  ctx = build_context(big_graph, var_vals)
  realizes: dict[UOp, UOp] = {}
  graph_rewrite(big_graph, do_realize, realizes)
  store_groups = group_realizes(ctx, realizes)
  graph_rewrite(big_graph, break_sched, realizes)
  kernels: list[ScheduledKernel] = []
  for stores in store_groups:
    sink = UOp.sink_of(*(realizes[u] for u in stores))
    computes = tuple(dedup(x.buf_uop for x in sink.toposort() if x.op is Ops.STORE or is_scheduled(x)))
    ast, ast_ctx = full_ast_rewrite(sink, ctx.var_vals, ctx.assigns)
    ctx.var_vals.update(ast_ctx.var_vals)  # Variables found in the kernel's views
    kernels.append(ScheduledKernel(ast, tuple(ast_ctx.bufs), tuple(ast_ctx.assign_preloads), computes))
  return order_schedule(kernels), ctx.var_vals

def create_schedule_with_vars(outs: list[LazyBuffer]) -> tuple[list[ScheduleItem], dict[UOp, int]]:
  outs = dedup(x.base for x in outs if x.base.realized is None and x.base.op is not Ops.CONST)
  if not outs: return [], {}
  for out in outs: out.forced_realize = True
  buffers: dict[UOp, Buffer] = {}
  lazybufs: dict[Buffer, LazyBuffer] = {}
  ubuf_metadata: dict[UOp, Metadata] = {}
  big_graph, var_vals = to_uop(outs, buffers, lazybufs, ubuf_metadata)
  kernels, var_vals = schedule_graph(big_graph, var_vals)
  schedule = [ScheduleItem(k.ast, tuple(buffers[u] for u in k.bufs), tuple(dedup(m for u in k.computes if (m := ubuf_metadata.get(u)))),
                           k.assign_preloads) for k in kernels]
  if capture_hook.HOOK is not None:
    capture_hook.HOOK("schedule", (big_graph, var_vals), [k.ast for k in kernels],
                      {"metadata": [[repr(m) for m in si.metadata] for si in schedule], "bufs": [k.bufs for k in kernels]})
  for si in schedule:
    for b in si.outputs:
      if b in lazybufs and hasattr(lazybufs[b], "srcs"): del lazybufs[b].srcs  # scheduled: realized from now on
  return schedule, var_vals

def order_schedule(kernels: list[ScheduledKernel]) -> list[ScheduledKernel]:
  """Kahn's algorithm over kernels: producers before consumers; a kernel that reads a buffer's old
  value runs before the kernel that assigns to it. Ties keep the grouping order (deterministic)."""
  producer: dict[UOp, int] = {}
  for i, k in enumerate(kernels):
    for out in k.outputs: producer[out] = i
  edges: list[list[int]] = [[] for _ in kernels]
  in_degree = [0] * len(kernels)
  for i, k in enumerate(kernels):
    assigners = dedup(j for x in k.assign_preloads if (j := producer.get(x)) is not None and j != i)
    for j in assigners:
      edges[i].append(j); in_degree[j] += 1
    for j in dedup(j for x in k.inputs if (j := producer.get(x)) is not None and j not in assigners and j != i):
      edges[j].append(i); in_degree[i] += 1
  queue = deque(i for i in range(len(kernels)) if in_degree[i] == 0)
  order: list[int] = []
  while queue:
    order.append(i := queue.popleft())
    for j in edges[i]:
      in_degree[j] -= 1
      if in_degree[j] == 0: queue.append(j)
  if len(order) != len(kernels):
    stuck = [i for i in range(len(kernels)) if in_degree[i] > 0]
    raise ScheduleError(f"cycle detected in graph: grouped {len(kernels)} kernels but only {len(order)} can be ordered; "
                        f"kernels {stuck[:8]} wait on each other (often two assigns reading each other's targets).\n"
                        "help: realize one of the assigns first, or use .contiguous() on the value read before the assign")
  return [kernels[i] for i in order]

def create_schedule(outs: list[LazyBuffer]) -> list[ScheduleItem]:
  schedule, var_vals = create_schedule_with_vars(outs)
  if var_vals: raise ScheduleError(f"schedule has bound Variables {[v.arg[0] for v in var_vals]}: use create_schedule_with_vars")
  return schedule
