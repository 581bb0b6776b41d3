"""Running schedules: every ScheduleItem executes on the device of its output buffer.

Before running, the memory planner (tinysched/memory.py) lets intermediate buffers that only this
schedule uses share memory; PLAN_MEMORY (env TINYSCHED_MEMORY_PLANNER, default on) or the
`plan_memory` argument switches it.
"""
from __future__ import annotations
import os
from tinysched.ops import Ops
from tinysched.uop import UOp
from tinysched.device import Device
from tinysched.schedule import ScheduleItem

def kernel_vars(ast: UOp) -> list[UOp]:
  """The Variables a kernel AST uses (in its views and as values), first-use order."""
  out: dict[UOp, None] = {}
  for x in ast.toposort():
    if x.op is Ops.VIEW and not x.src:
      for v in x.arg.vars(): out[v if v.op is Ops.DEFINE_VAR else v.src[0]] = None
    elif x.op is Ops.DEFINE_VAR: out[x] = None
  return list(out)

PLAN_MEMORY = os.environ.get("TINYSCHED_MEMORY_PLANNER", "1") not in ("0", "")

def run_schedule(schedule: list[ScheduleItem], var_vals: dict[UOp, int] | None = None, plan_memory: bool | None = None) -> None:
  var_vals = var_vals or {}
  if PLAN_MEMORY if plan_memory is None else plan_memory:
    from tinysched.memory import plan_memory as _plan
    _plan(schedule)
  for si in schedule:
    for b in si.bufs: b.allocate()
    if si.ast.op is Ops.COPY:
      dst, src = si.bufs
      if dst.device == src.device: Device[dst.device].exec_ast(si.ast, list(si.bufs), {})
      else: dst.copyin(src.numpy().view(dst.dtype.np)[:dst.size])
      continue
    if si.ast.op in (Ops.EMPTY, Ops.BUFFER_VIEW): continue
    kv = {v: var_vals[v] for v in kernel_vars(si.ast)}
    Device[si.outputs[0].device].exec_ast(si.ast, list(si.bufs), kv)
