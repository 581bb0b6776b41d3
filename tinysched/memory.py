"""Memory planner: intermediate buffers of one schedule share device memory when their lifetimes don't overlap.

A buffer is *intermediate* when
- a kernel of this schedule writes it before anything reads it (so it carries no earlier data),
- it is not allocated yet, is not a view and is not viewed by another buffer, and
- nothing outside this schedule refers to it: no LazyBuffer (Tensor) holds it, so after the
  schedule nobody can read it. This is checked with reference counts: every reference must come
  from the ScheduleItems' `bufs` tuples (`sys.getrefcount`, calibrated at import).
Its lifetime is [first, last] kernel index using it. Intermediates on one device are packed
greedily (by first use) into arenas: an arena is reusable once its last user's lifetime ended before
the new buffer's first use. Each member becomes a view at offset 0 of its arena Buffer, which is
allocated once at the arena's largest member size; the arena is freed (to the allocator's free list)
when the last member dies.

Correctness first: when in doubt a buffer is left alone. `run_schedule(..., plan_memory=False)` or
TINYSCHED_MEMORY_PLANNER=0 turns planning off; results are identical either way.
"""
from __future__ import annotations
import sys
from dataclasses import dataclass, field
from typing import Sequence
from tinysched.dtype import dtypes
from tinysched.ops import Ops
from tinysched.device import Buffer

def _refcount(x: object) -> int: return sys.getrefcount(x)

def _calibrate() -> int:
  """References a candidate has inside plan_memory's scan loop that do not come from the schedule."""
  probe = [Buffer("NUMPY", 1, dtypes.uint8)]
  for b in probe: return _refcount(b)
  return 0
_BASE = _calibrate()

@dataclass
class _Arena:
  device: str
  nbytes: int = 0
  free_after: int = -1  # last kernel index of the latest member
  members: list[Buffer] = field(default_factory=list)

@dataclass(frozen=True)
class MemoryPlan:
  arenas: int           # device allocations made for the intermediates
  buffers: int          # intermediates that share them
  bytes_before: int     # bytes the intermediates would have used separately
  bytes_after: int      # bytes of the arenas

def plan_memory(schedule: Sequence) -> MemoryPlan:
  """Make the schedule's intermediate buffers share memory (in place: members become views of arenas)."""
  uses: dict[int, int] = {}           # id(Buffer) -> references held by the schedule's bufs tuples
  first: dict[int, int] = {}
  last: dict[int, int] = {}
  read_first: set[int] = set()        # ids read before any write (membership only)
  viewed: set[int] = set()            # bases of views used anywhere (membership only)
  order: list[Buffer] = []
  for i, si in enumerate(schedule):
    outs = set(si.output_idxs) if si.ast.op is Ops.SINK else {0}
    for j, b in enumerate(si.bufs):
      k = id(b)
      uses[k] = uses.get(k, 0) + 1
      if b._base is not None: viewed.add(id(b._base))
      if k not in first:
        first[k] = i
        order.append(b)
        if j not in outs or si.ast.op in (Ops.BUFFER_VIEW,): read_first.add(k)
      last[k] = i
  cands: list[Buffer] = []
  for b in order:
    k = id(b)
    if k in read_first or k in viewed or b._base is not None or b._handle is not None or b.nbytes == 0: continue
    # every reference must be one of the schedule's (the loop variable and `order` are in _BASE)
    if _refcount(b) - _BASE - uses[k] != 0: continue
    cands.append(b)
  arenas: list[_Arena] = []
  placed: list[tuple[Buffer, _Arena]] = []
  for b in sorted(cands, key=lambda x: first[id(x)]):
    k = id(b)
    free = [a for a in arenas if a.device == b.device and a.free_after < first[k]]
    fitting = [a for a in free if a.nbytes >= b.nbytes]
    if fitting: a = min(fitting, key=lambda x: x.nbytes)
    elif free: a = max(free, key=lambda x: x.nbytes)
    else:
      a = _Arena(b.device)
      arenas.append(a)
    a.nbytes = max(a.nbytes, b.nbytes)
    a.free_after = last[k]
    a.members.append(b)
    placed.append((b, a))
  shared = [a for a in arenas if len(a.members) > 1]
  for a in shared:
    base = Buffer(a.device, a.nbytes, dtypes.uint8)
    for b in a.members: b._base, b.offset = base, 0
  n = sum(len(a.members) for a in shared)
  return MemoryPlan(len(shared), n, sum(b.nbytes for a in shared for b in a.members), sum(a.nbytes for a in shared))

__all__ = ["plan_memory", "MemoryPlan"]
