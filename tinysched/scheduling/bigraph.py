"""Pass 1: the lazy graph as one UOp graph, the input of everything else (and the schedule-level capture).

Node forms (our vocabulary for the rest of the scheduler):
- a buffer this schedule computes:      VIEW(BUFFER, op)      arg = the buffer's ShapeTracker
- a buffer that already holds data:     VIEW(BUFFER)
- a movement on either:                 VIEW(<one of the above>)
- a constant:                           WHERE(VALID(VIEW), CONST c, CONST 0)   (the VIEW keeps its shape and mask)
"""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Iterator
from tinysched.dtype import DType, dtypes
from tinysched.ops import Ops
from tinysched.uop import UOp, make_uop
from tinysched.shape import ShapeTracker
from tinysched.lazy import LazyBuffer, Metadata
from tinysched.device import Buffer

class ScheduleError(RuntimeError): pass

# the ops the per-node helpers below test, read once: on Python 3.11 every `Ops.X` read goes through EnumType's
# __getattr__ hook (~60 ns), and these run for every node of every kernel
_VIEW, _BUFFER, _CONTIGUOUS, _CONST, _ASSIGN = Ops.VIEW, Ops.BUFFER, Ops.CONTIGUOUS, Ops.CONST, Ops.ASSIGN
_NO_ARG = (Ops.CAST, Ops.BITCAST)  # ops whose node takes no arg from the lazy buffer

def view_of(st: ShapeTracker) -> UOp:
  """A source-free VIEW: a ShapeTracker as a node (the form loads, stores and VALID take)."""
  return make_uop(_VIEW, dtypes.void, (), st)

def buffer_node(device: str, size: int, dtype: DType, number: int) -> UOp:
  return make_uop(_BUFFER, dtype.ptr(), (), (number, (device, size, dtype)))

def computed(u: UOp) -> bool:
  """VIEW(BUFFER, op): a buffer whose value this schedule computes."""
  return u.op is _VIEW and len(u.src) == 2

def under_views(u: UOp) -> UOp:
  """The node below any movement VIEWs (a VIEW of a bare BUFFER is a node form of its own, not a movement)."""
  while u.op is _VIEW and len(u.src) == 1 and u.src[0].op is not _BUFFER: u = u.src[0]
  return u

def forced_only(op: UOp) -> bool:
  """A CONTIGUOUS the graph builder put around an op only to force its store (not a user's .contiguous())."""
  return op.op is _CONTIGUOUS and not computed(under_views(op.src[0]))

def value_of(u: UOp) -> UOp:
  """The op a computed buffer holds, without a CONTIGUOUS that only forced its store."""
  if not computed(u): raise ScheduleError(f"expected a computed buffer VIEW(BUFFER, op), got {u.op}")
  op = u.src[1]
  return op.src[0] if forced_only(op) else op

def topo_of(sink: UOp) -> dict[UOp, None]:
  """`sink.toposort()`, kept on the node: several passes walk each kernel's pre-sink (read it, never change it)."""
  if (topo := sink.__dict__.get("_topo")) is None: topo = sink.__dict__["_topo"] = sink.toposort()
  return topo

def read_buffers(op: UOp) -> Iterator[tuple[UOp, UOp]]:
  """(source node, BUFFER) for each source of `op` that reads a computed buffer, possibly through views."""
  for s in op.src:
    if computed(b := under_views(s)): yield s, b.src[0]

@dataclass
class BigGraph:
  sink: UOp                                                   # SINK over the outputs
  var_vals: dict[UOp, int] = field(default_factory=dict)      # bound Variables met in constants
  device_buffers: dict[UOp, Buffer] = field(default_factory=dict)   # BUFFER node -> the device Buffer
  lazy_of: dict[Buffer, LazyBuffer] = field(default_factory=dict)  # Buffer -> the LazyBuffer computing it
  metadata: dict[UOp, Metadata] = field(default_factory=dict)      # BUFFER node -> the Tensor call that made it

def _dependencies(lb: LazyBuffer) -> tuple[LazyBuffer, ...]:
  if (base := lb.base) is not lb: return (base,)
  return () if lb.realized is not None or lb.op is _CONST else tuple(lb.srcs)

def _post_order(outs: list[LazyBuffer]) -> list[LazyBuffer]:
  """Every LazyBuffer the outputs depend on, each after its dependencies (depth first, sources left to right).
  Recursive, which is twice as fast (on 3.11 a Python call takes no C stack); a graph deeper than the recursion limit
  (a long training step) walks again on an explicit stack, in the same order. Membership by id(): the LazyBuffers
  live for the whole call, and the order comes from the walk, never from the set."""
  order: list[LazyBuffer] = []
  finished: set[int] = set()
  try:
    for out in outs:
      if id(out) not in finished: _visit(out, finished, order)
    return order
  except RecursionError: return _post_order_on_a_stack(outs)

def _visit(lb: LazyBuffer, finished: set[int], order: list[LazyBuffer]) -> None:
  # (a module function, not a closure: a closure calling itself is a cycle, which would keep the whole lazy graph alive
  # until the next cycle collection, and the lazy cache would hand its scheduled buffers out again)
  finished.add(id(lb))
  for d in _dependencies(lb):
    if id(d) not in finished: _visit(d, finished, order)
  order.append(lb)

def _post_order_on_a_stack(outs: list[LazyBuffer]) -> list[LazyBuffer]:
  order: list[LazyBuffer] = []
  finished: set[int] = set()
  # a node comes back (expanded) after its dependencies; one reached again on a deeper path is walked there first
  # and skipped later, so this is the depth-first post-order, as UOp.toposort walks
  stack: list[tuple[LazyBuffer, bool]] = [(out, False) for out in reversed(outs)]
  while stack:
    lb, expanded = stack.pop()
    if id(lb) in finished: continue
    if expanded:
      finished.add(id(lb)); order.append(lb)
      continue
    stack.append((lb, True))
    for d in reversed(_dependencies(lb)):
      if id(d) not in finished: stack.append((d, False))
  return order

class _Builder:
  def __init__(self) -> None:
    self.graph = BigGraph(UOp.sink_of())
    self.node: dict[int, UOp] = {}  # id(LazyBuffer) -> its node

  def new_buffer(self, lb: LazyBuffer) -> UOp:
    b = buffer_node(lb.device, lb.buffer.size, lb.buffer.dtype, len(self.graph.device_buffers))
    self.graph.device_buffers[b] = lb.buffer
    return b

  def constant(self, lb: LazyBuffer) -> UOp:
    if isinstance(lb.arg, UOp): self.graph.var_vals.update([lb.arg.unbind()])
    valid = make_uop(Ops.VALID, dtypes.bool, (view_of(lb.st),))
    return valid.where(UOp.const(lb.dtype, lb.arg), UOp.const(lb.dtype, 0))

  def computed_op(self, lb: LazyBuffer) -> tuple[UOp, UOp]:
    """(BUFFER, op) of a buffer to compute; an ASSIGN writes into its target's BUFFER instead of a new one."""
    srcs = tuple(self.node[id(s)] for s in lb.srcs)
    if (op := lb.op) is _ASSIGN: return srcs[0].buf_uop, make_uop(_ASSIGN, lb.dtype, (srcs[0].buf_uop, srcs[1]), lb.arg)
    return self.new_buffer(lb), make_uop(op, lb.dtype, srcs, None if op in _NO_ARG else lb.arg)

  def add(self, lb: LazyBuffer) -> None:
    if (base := lb.base) is not lb: self.node[id(lb)] = self.node[id(base)].view(lb.st); return
    if (realized := lb.realized) is None and lb.op is _CONST: self.node[id(lb)] = self.constant(lb); return
    if realized is not None:
      self.node[id(lb)] = make_uop(_VIEW, lb.dtype, (self.new_buffer(lb),), lb.st)
      return
    b, op = self.computed_op(lb)
    if lb.forced_realize: op = make_uop(_CONTIGUOUS, lb.dtype, (op,))
    self.node[id(lb)] = make_uop(_VIEW, lb.dtype, (b, op), lb.st)
    if lb.metadata is not None: self.graph.metadata[b] = lb.metadata
    self.graph.lazy_of[lb.buffer] = lb

def build_big_graph(outs: list[LazyBuffer]) -> BigGraph:
  """The outputs' lazy graph as one UOp graph. BUFFER numbers follow the walk order, so the same lazy graph gives
  the same big graph (and the same capture key) in every process."""
  builder = _Builder()
  for lb in _post_order(outs): builder.add(lb)
  builder.graph.sink = UOp.sink_of(*(builder.node[id(x)] for x in outs))
  return builder.graph
