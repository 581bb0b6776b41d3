"""Provenance: which lowering pass or codegen rule made each node of a lowered program.

The lowering runs with a rule trace (ast_lowering and reduce_folds record every rule that fired) and a hook after each
pass of LOWERING_PASSES. A node is labelled with the first codegen rule whose result contains it new (not already in
the rule's input, not made by an earlier pass or rule), else with the pass that first held it (`pass:NAME`). A pass that
rebuilds the program (narrow_indices) passes its input nodes' labels on to the nodes that replace them.

Replay uses the labels to name what changed a program-level capture (replay/levels/program.py `program_rules_behind`), as
kernel-level reports name the scheduler rules behind a changed AST.
"""
from __future__ import annotations
from typing import Sequence
from tinysched.ops import Ops
from tinysched.uop import UOp
from tinysched.codegen.kernel import Kernel, Opt
from tinysched.codegen.target import Target
from tinysched.codegen.lowerer import Lowered, LowerState, run_passes
from tinysched.codegen.opencl import render
from tinysched.codegen import tensor_core

_ARGUMENTS = frozenset({Ops.CONST, Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR})  # leaves every kernel shares: never labelled

def rule_makers(trace: list[tuple[str, UOp, UOp]], pass_of_entry: list[int] | None = None,
                existed: dict[UOp, int] | None = None) -> dict[UOp, str]:
  """Each node a traced rule created -> that rule's name. Walks every graph once: a node seen in an earlier rule's input
  or result is never claimed again (interning shares nodes between lane combinations and rules), nor is a node that
  existed (`existed`: node -> pass index) before the pass the rule fired in (`pass_of_entry`: trace index -> pass index)."""
  seen: set[UOp] = set()  # membership only
  made: dict[UOp, str] = {}
  def visit(root: UOp, claim: str | None, cur: int) -> None:
    todo = [root]
    while todo:
      if (u := todo.pop()) in seen: continue
      seen.add(u)
      if existed is not None and existed.get(u, cur) < cur: continue  # an earlier pass made it (and what it reads)
      if claim is not None and u.op not in _ARGUMENTS: made[u] = claim
      todo.extend(u.src)
  for i, (name, before, after) in enumerate(trace):
    cur = pass_of_entry[i] if pass_of_entry is not None else 0
    visit(before, None, cur)
    visit(after, name, cur)
  return made

def trace_lowering(k: Kernel, target: Target) -> tuple[Lowered, dict[UOp, str]]:
  """Lower `k` as `lower` does, and label every node of the result with the rule or pass that made it."""
  trace: list[tuple[str, UOp, UOp]] = []
  pass_of_entry: list[int] = []
  names: list[str] = []
  existed: dict[UOp, int] = {}  # node -> index of the pass after which it was first seen in the state
  carried: dict[UOp, UOp] = {}  # node of the final program -> the node it replaced
  def after(name: str, lw: LowerState) -> None:
    i = len(names)
    names.append(name)
    pass_of_entry.extend([i] * (len(trace) - len(pass_of_entry)))
    for u in lw.em.placed: existed.setdefault(u, i)
    for u in lw.uops: existed.setdefault(u, i)
    for v in lw.var.values():  # thread ids and loop counters: made by their passes before any rule uses them
      for u in v.toposort(): existed.setdefault(u, i)
    for old, new in lw.renamed.items():
      if new is not old: carried.setdefault(new, carried.get(old, old))
  lw = run_passes(k, target, after=after, rule_trace=trace)
  made = rule_makers(trace, pass_of_entry, existed)
  def label(u: UOp) -> str:
    src = carried.get(u, u)
    if (r := made.get(src) or made.get(u)) is not None: return r
    return f"pass:{names[existed[src]]}" if src in existed else f"pass:{names[existed[u]]}" if u in existed else "?"
  return lw.lowered(), {u: label(u) for u in lw.uops}

def trace_program(ast: UOp, opts: Sequence[Opt], target: Target) -> tuple[str, list[tuple[UOp, str, bool, str]]]:
  """The source `to_program(ast, opts, target)` renders, and per rendered node (program order): (node, its text, whether
  the text is inlined into a user, the label of the rule or pass that made it). A tensor-core kernel (Opt TC) is a
  template, not a lowering: its source, and no nodes to name."""
  k = Kernel(ast, tuple(opts))
  if k.tc: return tensor_core.build(k, target).src, []
  lowered, labels = trace_lowering(k, target)
  shown: dict[UOp, tuple[str, bool]] = {}
  src = render(lowered, target, shown)
  return src, [(u, txt, inl, labels.get(u, "?")) for u, (txt, inl) in shown.items() if u.op not in _ARGUMENTS]

__all__ = ["rule_makers", "trace_lowering", "trace_program"]
