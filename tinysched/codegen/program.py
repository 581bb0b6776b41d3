"""`to_program(ast, opts, target) -> Program`: the kernel-level capture point of code generation.

A pure function: the same (ast, opts, target) give byte-identical source in any process (every
step iterates lists and insertion-ordered dicts, never sets, and names come from counters).
"""
from __future__ import annotations
from dataclasses import dataclass
from typing import Sequence
from tinysched.dtype import DType
from tinysched.ops import Ops
from tinysched.uop import UOp, sint, sym_infer
from tinysched.cost import ProgramCost, program_cost
from tinysched.codegen.kernel import Kernel, Opt, KernelOptError
from tinysched.codegen.target import Target, GENERIC_GPU, device_class
from tinysched.codegen.lowerer import lower
from tinysched.codegen.opencl import render
from tinysched.codegen import heuristic, tensor_core
from tinysched import capture_hook

@dataclass(frozen=True)
class Program:
  name: str
  src: str
  global_size: tuple[sint, ...]       # work-items per dim (symbolic where the kernel shape is)
  local_size: tuple[int, ...] | None  # None: the driver picks
  buf_dtypes: tuple[DType, ...]       # kernel buffer arguments, DEFINE_GLOBAL order
  outs: tuple[int, ...]               # which of them are written
  vars: tuple[UOp, ...]               # DEFINE_VARs, passed as int arguments after the buffers
  opts: tuple[Opt, ...]
  local_mem: int                      # bytes of __local memory
  cost: ProgramCost | None = None     # what a launch executes: FLOPs and accesses per buffer (tinysched/cost.py)
  def launch_dims(self, var_vals: dict[UOp, int]) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    return tuple(sym_infer(g, var_vals) for g in self.global_size), self.local_size

def to_program(ast: UOp, opts: Sequence[Opt] | None = None, target: Target = GENERIC_GPU) -> Program:
  """Lower and render one kernel AST with explicit opts (None: `default_opts(ast, target)`), for the target's class
  (`device_class`: its limits clamped to what code generation can use; the capture records that class)."""
  lw, given, target = None, opts is not None, device_class(target)
  if opts is None:
    opts, lw = heuristic.choose_opts(ast, target)
  opts = tuple(opts)
  if lw is None:
    k = Kernel(ast, opts)
    if k.tc:  # the tensor-core kernel is a template of its own, not a lowering
      try: tc = tensor_core.build(k, target)
      except tensor_core.TensorCoreError as e: raise KernelOptError(str(e)) from None
      prg = Program(tc.name, tc.src, tc.global_size, tc.local_size, tuple(b.dtype.base for b in k.bufs), tuple(k.outbufs), (), opts,
                    tc.local_mem, tc.cost)
      report_program(ast, target, prg, given)
      return prg
    lw = lower(k, target)
  src = render(lw, target)
  prg = Program(lw.name, src, lw.global_size, lw.local_size, tuple(b.dtype.base for b in lw.bufs), lw.outs, lw.vars, opts, lw.local_mem,
                program_cost(lw.uops, lw.global_size, len(lw.bufs)))
  report_program(ast, target, prg, given)
  return prg

def report_program(ast: UOp, target: Target, prg: Program, opts_given: bool) -> None:
  """The program-level capture point: (ast, the opts it was rendered with, target) -> source. Called by to_program, and
  by the program cache for a program it gives back without rendering (capture must see the same call either way)."""
  if capture_hook.HOOK is not None: capture_hook.HOOK("program", (ast, prg.opts, target), prg.src, {"program": prg, "opts_given": opts_given})

def is_kernel_ast(ast: UOp) -> bool: return ast.op is Ops.SINK

__all__ = ["Program", "to_program", "report_program"]
