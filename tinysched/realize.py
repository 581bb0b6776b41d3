"""Running schedules: every ScheduleItem executes on the device of its output buffer.

Before running, the memory planner (tinysched/memory.py) lets intermediate buffers that only this
schedule uses share memory; PLAN_MEMORY (env TINYSCHED_MEMORY_PLANNER, default on) or the
`plan_memory` argument switches it.

`RECORDER` is the jit's hook (tinysched/jit.py): while TinyJit records a call it sees every item that runs.
"""
from __future__ import annotations
import functools, os
from typing import Callable, Sequence
from tinysched.ops import Ops
from tinysched.uop import UOp
from tinysched.device import Backend, Buffer, Device
from tinysched.schedule import ScheduleItem
from tinysched.helpers import GlobalCounters
from tinysched.cost import kernel_flops, buffers_bytes
from tinysched import memory
from tinysched import runtime as _runtime  # noqa: F401  (registers the backends Device opens: device.py cannot import them)

def kernel_vars(ast: UOp) -> list[UOp]:
  """The Variables a kernel AST uses (in its views and as values), first-use order."""
  out: dict[UOp, None] = {}
  for x in ast.toposort():
    if x.op is Ops.VIEW and not x.src:
      for v in x.arg.vars(): out[v if v.op is Ops.DEFINE_VAR else v.src[0]] = None
    elif x.op is Ops.DEFINE_VAR: out[x] = None
  return list(out)

PLAN_MEMORY = os.environ.get("TINYSCHED_MEMORY_PLANNER", "1") not in ("0", "")

# Set by tinysched.jit (TinyJit) while it records a call: called as RECORDER(item, var_vals) for every item that
# runs, after its buffers are allocated and before it runs. None (the default) costs one global lookup per item.
RECORDER: Callable[[ScheduleItem, dict[UOp, int]], None] | None = None

def exec_item(ast: UOp, bufs: Sequence[Buffer], var_vals: dict[UOp, int], backend: Backend,
              cost: tuple[int | Callable[[], int], int] | None = None, prepared: Callable | None = None) -> None:
  """Run one item's work on its (allocated) buffers: a kernel on `backend`, a COPY, nothing for EMPTY / BUFFER_VIEW
  (a view's memory is its source's from the start). The one way an item runs: run_schedule and the jit's replay; so
  it is where GlobalCounters counts (a kernel: its cost from tinysched/cost.py and the time the backend reports; a
  COPY: its destination's bytes). `cost`: the kernel's (FLOPs, bytes) when the caller knows them (a TinyJit launch
  without Variables: the same every replay). `prepared`: the backend's `prepare` of this launch (a TinyJit replay),
  which runs it in place of exec_ast."""
  if ast.op is Ops.COPY:
    dst, src = bufs
    if dst.device == src.device: Device[dst.device].exec_ast(ast, list(bufs), {})
    else: dst.copyin(src.numpy().view(dst.dtype.np)[:dst.size])  # type: ignore[arg-type]  # a buffer's dtype has a numpy type
    GlobalCounters.count(0, dst.nbytes)
    return
  if ast.op in (Ops.EMPTY, Ops.BUFFER_VIEW): return
  t = prepared(bufs, var_vals) if prepared is not None else backend.exec_ast(ast, list(bufs), var_vals)
  if cost is None:
    # FLOPs at new Variable values (a decode step's start_pos) walk the AST: ~28 us, more than the launch itself, so
    # they are counted when GlobalCounters.global_ops is read
    cost = (functools.partial(kernel_flops, ast, var_vals) if var_vals else kernel_flops(ast), buffers_bytes(ast, bufs, var_vals))
  GlobalCounters.count(*cost, t)

def run_schedule(schedule: list[ScheduleItem], var_vals: dict[UOp, int] | None = None, plan_memory: bool | None = None) -> None:
  var_vals = var_vals or {}
  if PLAN_MEMORY if plan_memory is None else plan_memory:
    memory.plan_memory(schedule)
  for si in schedule:
    for b in si.bufs: b.allocate()
    kv = {v: var_vals[v] for v in kernel_vars(si.ast)} if si.ast.op is Ops.SINK else {}
    if RECORDER is not None: RECORDER(si, kv)
    exec_item(si.ast, si.bufs, kv, Device[si.outputs[0].device])
