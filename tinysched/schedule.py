"""The scheduler: the lazy graph behind the tensors to realize -> an ordered list of kernels (ScheduleItems).

The behaviour follows tinygrad 0.10.0's scheduler (what is stored, what fuses, what a kernel AST looks like);
the code is ours. Passes, in order (each a module of tinysched/scheduling/):

  build_big_graph   bigraph.py     lazy graph -> one UOp graph              (the schedule-level capture input)
  plan_stores       stores.py      store_rules: which buffers go to memory
  group_stores      fusion.py      reduces and the elementwise work that fuses with them: stores per kernel
  cut_at_stores     stores.py      cut_rules: one pre-sink per kernel
  full_ast_rewrite  kernel_ast.py  inline_rules + views_up (one walk), views_down, finish_rules + number_rules
                                                                            (the kernel-level capture point)
  run_order         order.py       producers first; readers of a pre-assign value before the assign

`schedule_graph` (passes 2-6) and `full_ast_rewrite` are pure functions of their arguments: no module state, no
flags read behind the caller's back (the scheduler flags are an argument, captured with the input), so replaying
a capture runs exactly what ran when it was made. The only state kept across calls is `tensor_memo`, the kernel
ASTs of the Tensor front end's schedules, and it is dropped whenever a rule changes (and kernel_ast.rules_fingerprint's
last answer, which every call checks against the namespaces it reads). Both entry points run with cycle collection
paused (`cycle_gc_paused`).
"""
from __future__ import annotations
import gc, sys
from dataclasses import dataclass
from typing import Any
from tinysched.ops import Ops
from tinysched.uop import UOp
from tinysched.rewrite import graph_rewrite, shared_results
from tinysched.lazy import LazyBuffer, Metadata
from tinysched.helpers import dedup, FUSE_ARANGE, FUSE_CONV_BW
from tinysched import capture_hook
from tinysched.scheduling.bigraph import ScheduleError, build_big_graph, computed, value_of, topo_of
from tinysched.scheduling.stores import gather_facts, store_rules, cut_rules
from tinysched.scheduling.fusion import group_stores, is_arange
from tinysched.scheduling import kernel_ast
from tinysched.scheduling.kernel_ast import KernelMemo, KernelParts, KEPT_WALKS, rewrite_kernel, well_formed
from tinysched.scheduling.order import run_order

# read once (Ops.X reads cost ~60 ns each on Python 3.11, see scheduling/bigraph.py), for the per-node scans below
_STORE, _VIEW = Ops.STORE, Ops.VIEW

sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))  # fusion walks chains of buffers recursively

@dataclass(frozen=True, eq=False, init=False)
class ScheduleItem:
  """One kernel. From `schedule_graph`, `bufs`/`assign_preloads` are BUFFER nodes of the big graph; from
  `create_schedule`, the device Buffers behind them. `bufs` is in DEFINE_GLOBAL order, outputs first."""
  ast: UOp
  bufs: tuple
  metadata: tuple[Metadata, ...] = ()
  assign_preloads: tuple = ()        # assign targets this kernel reads before the assign writes them
  computes: tuple[UOp, ...] = ()     # BUFFER nodes of every op computed here (outputs and fused intermediates)
  def __init__(self, ast: UOp, bufs: tuple, metadata: tuple[Metadata, ...] = (), assign_preloads: tuple = (), computes: tuple[UOp, ...] = ()):
    # the fields in one step: a frozen dataclass's own __init__ sets each through object.__setattr__ (two items a kernel)
    self.__dict__.update(ast=ast, bufs=bufs, metadata=metadata, assign_preloads=assign_preloads, computes=computes)
  @property
  def output_idxs(self) -> tuple[int, ...]:
    """DEFINE_GLOBAL numbers written: each STORE's, or buffer 0 of a meta-op kernel (COPY, BUFFER_VIEW, EMPTY)."""
    if self.ast.op is not Ops.SINK: return (0,)
    return tuple(store.src[0].arg for store in self.ast.src)
  @property
  def outputs(self) -> tuple:
    """Buffers this kernel writes (or reads and writes)."""
    return tuple(self.bufs[i] for i in self.output_idxs)
  @property
  def inputs(self) -> tuple:
    """Buffers this kernel only reads."""
    outs = self.output_idxs
    return tuple(b for i, b in enumerate(self.bufs) if i not in outs)

# the ContextFlags the passes depend on; only values that differ from the default are recorded with a capture
SCHEDULE_FLAGS = {"FUSE_ARANGE": FUSE_ARANGE, "FUSE_CONV_BW": FUSE_CONV_BW}

def current_flags() -> dict[str, Any]:
  """The scheduler flags in effect here (environment and Context), as schedule_graph's `flags` argument."""
  return {name: f.value for name, f in SCHEDULE_FLAGS.items() if f.value != f.default}

_TENSOR_MEMO = KernelMemo()
TENSOR_SCHEDULES = KernelMemo.MAX_SCHEDULES  # whole schedules the Tensor front end's memo keeps (each holds its big graph alive)

def tensor_memo() -> KernelMemo:
  """The memo `Tensor.realize` schedules with, kept across calls so repeated steps rewrite nothing. It is checked
  against the rules on every use: after any change to a function, method, matcher or class of a module the scheduler
  runs (kernel_ast.rule_modules: shape, symbolic, uop, dtype, helpers... included), it starts empty, and the view
  algebra's tables are emptied with it."""
  global _TENSOR_MEMO
  _TENSOR_MEMO = KernelMemo.kept(_TENSOR_MEMO, TENSOR_SCHEDULES)
  return _TENSOR_MEMO

def full_ast_rewrite(pre: UOp, var_vals: dict[UOp, int], assigned: dict[UOp, None],
                     memo: KernelMemo | None = None) -> tuple[UOp, KernelParts]:
  """pre-sink -> (AST, KernelParts: buffers in DEFINE_GLOBAL order, assign targets read early, var_vals).
  `memo` (the caller's) shares the work of kernels that differ only in their buffers. The walks the rewrite keeps on
  `pre` (each holds `pre` itself: a cycle) are dropped again, so a caller's pre-sink frees by refcount (schedule_graph
  keeps the ones it made before for the whole schedule and drops them at its end)."""
  fresh = [k for k in KEPT_WALKS if k not in pre.__dict__]
  try: ast, parts = memo.rewrite(pre, assigned) if memo is not None else rewrite_kernel(pre, assigned)
  finally:
    for k in fresh: pre.__dict__.pop(k, None)
  parts.var_vals = {**var_vals, **parts.var_vals}
  if capture_hook.HOOK is not None: capture_hook.HOOK("kernel", (pre, var_vals, assigned), ast, {"bufs": parts.bufs})
  return ast, parts

class cycle_gc_paused:
  """No cycle collection inside the block. Scheduling makes thousands of short-lived nodes, tuples and dicts, nearly all
  freed by refcount (the one cycle it makes, the walks kept on pre-sinks, is broken explicitly): young-generation
  collections in the middle of it only walk live objects again and again (5-10% of a small schedule). Collection
  resumes afterwards, on an error too; a caller who switched it off keeps it off. (A class, not a generator: entered
  twice per Tensor schedule, and a generator-based manager cost ~3 us each time.)"""
  __slots__ = ("paused",)
  def __enter__(self) -> None:
    if paused := gc.isenabled(): gc.disable()
    self.paused = paused
  def __exit__(self, *exc) -> None:
    if self.paused: gc.enable()

def schedule_graph(big_graph: UOp, var_vals: dict[UOp, int], flags: dict[str, Any] | None = None,
                   memo: KernelMemo | None = None) -> tuple[list[ScheduleItem], dict[UOp, int]]:
  """The big graph -> ordered kernels (bufs are BUFFER nodes) and the var_vals they need. `flags`: the scheduler
  flags (default: `current_flags()`); `memo`: reuse kernel ASTs across calls (default: a fresh one per call)."""
  with cycle_gc_paused(): return _schedule_graph(big_graph, var_vals, flags, memo)

def _schedule_graph(big_graph: UOp, var_vals: dict[UOp, int], flags: dict[str, Any] | None,
                    memo: KernelMemo | None) -> tuple[list[ScheduleItem], dict[UOp, int]]:
  flags = current_flags() if flags is None else flags
  memo = KernelMemo() if memo is None else memo
  # the same big graph again (a training or decode loop re-building the same step): the same schedule. Not while
  # capturing, where every kernel's full_ast_rewrite must reach the capture hook.
  key = (big_graph, tuple(var_vals.items()), tuple(sorted(flags.items())))
  if capture_hook.HOOK is None and (hit := memo.schedules.get(key)) is not None: return list(hit[0]), dict(hit[1])
  fuse_arange = bool(flags.get("FUSE_ARANGE", FUSE_ARANGE.default))
  fuse_conv_bw = bool(flags.get("FUSE_CONV_BW", FUSE_CONV_BW.default))
  keep: frozenset = frozenset()
  facts = gather_facts(big_graph, var_vals)
  planned: dict[UOp, UOp] = {}
  graph_rewrite(big_graph, store_rules, planned, topo=facts.topo)                      # plan_stores: fills `planned` as rules fire
  # the kernels' rewrites share the results of the passes that depend on the node alone (repeated parts of layers)
  walked: list[UOp] = []  # every round's pre-sinks: their kept walks hold the sinks themselves (dropped below)
  try:
    with shared_results(kernel_ast.inline_and_up(False), kernel_ast.views_up, kernel_ast.views_down):
      while True:
        stores = dict(planned)
        # (keep_stored and fuse_conv_bw only when set: a patched group_stores with the 3-argument signature keeps working)
        extra: dict[str, Any] = {**({"keep_stored": keep} if keep else {}), **({"fuse_conv_bw": True} if fuse_conv_bw else {})}
        groups = group_stores(facts, stores, fuse_arange, **extra)
        graph_rewrite(big_graph, cut_rules, stores, topo=facts.topo)                       # cut_at_stores: the STOREs of every kernel
        pres = [UOp.sink_of(*(stores[b] for b in group)) for group in groups]
        walked += pres
        if not fuse_arange or not (bad := _misfused_aranges(pres, facts, memo)) - keep: break
        keep |= bad  # schedule again with those aranges stored (a fixed point: `keep` only grows)
      kernels: list[ScheduleItem] = []
      for pre in pres:
        # (the BUFFER is the first source of both: a STORE's target, a computed VIEW(BUFFER, op)'s buffer)
        computes = tuple(dedup([x.src[0] for x in topo_of(pre) if (op := x.op) is _STORE or (op is _VIEW and computed(x))]))
        ast, parts = full_ast_rewrite(pre, facts.var_vals, facts.assign_targets, memo)
        facts.var_vals.update(parts.var_vals)  # Variables bound in the kernel's views
        kernels.append(ScheduleItem(ast, tuple(parts.bufs), assign_preloads=tuple(parts.preloads), computes=computes))
  finally:
    # drop the walks kept on the pre-sinks (each holds its sink: a cycle), on an error too, so graphs free by refcount
    for pre in walked:
      for k in KEPT_WALKS: pre.__dict__.pop(k, None)
  ordered = run_order(kernels)
  memo.keep_schedule(key, (ordered, dict(facts.var_vals)))
  return ordered, facts.var_vals

def _runnable(ast: UOp) -> bool:
  """A kernel holding an inlined arange can run: it is well formed, and every reduce nested in another has a closed
  form (codegen gives an inner reduce no loop of its own). Asks the code generator's first passes, the ones that
  decide this; schedules are built for it, so the scheduler may ask what it accepts."""
  if not well_formed(ast): return False
  # deferred to keep import tinysched fast: the code generator (~9 ms) loads at the first schedule, not at import
  from tinysched.codegen import kernel, lowerer, target
  upto = [p.name for p in lowerer.LOWERING_PASSES].index("closed_form_reduces") + 1
  try: lowerer.run_passes(kernel.Kernel(ast), target.GENERIC_GPU, lowerer.LOWERING_PASSES[:upto])
  except kernel.KernelError: return False  # anything else is a codegen bug: let it show, never hide it behind another schedule
  return True

def _misfused_aranges(pres: list[UOp], facts, memo: KernelMemo) -> frozenset:
  """FUSE_ARANGE: the inlined aranges inside kernels whose AST cannot be built (the view push fails: a reshape of the
  inlined reduce's output) or cannot run (`_runnable`). Rewritten without capture: only the final kernels are captured."""
  # a fused arange in a pre-sink is a buffer the big graph computes with an arange (cut_at_stores keeps the reduce and
  # the WHERE under its views): a graph computing none (most) has no kernel to look at
  if not any(is_arange(value_of(node)) for node in facts.writer.values()): return frozenset()
  bad: dict[UOp, None] = {}
  for pre in pres:
    if not (fused := [x.src[0] for x in topo_of(pre) if x.op is _VIEW and computed(x) and is_arange(value_of(x))]): continue
    try:
      ast = memo.rewrite(pre, facts.assign_targets)[0]
      if (ok := memo.runnable.get(ast)) is None: ok = memo.runnable[ast] = _runnable(ast)
    except (ScheduleError, ValueError): ok = False
    if not ok: bad.update(dict.fromkeys(fused))
  return frozenset(bad)

def create_schedule_with_vars(outs: list[LazyBuffer]) -> tuple[list[ScheduleItem], dict[UOp, int]]:
  with cycle_gc_paused(): return _create_schedule_with_vars(outs)

def _create_schedule_with_vars(outs: list[LazyBuffer]) -> tuple[list[ScheduleItem], dict[UOp, int]]:
  # a constant needs no kernel, and neither does a buffer of no elements (an EMPTY of size 0; any other op of no
  # elements is already the constant 0): tinygrad 0.10.0 schedules nothing for either
  outs = dedup(x.base for x in outs if x.base.realized is None and x.base.op is not Ops.CONST and not _no_elements(x.base))
  if not outs: return [], {}
  for out in outs: out.forced_realize = True
  big = build_big_graph(outs)
  flags = current_flags()
  kernels, var_vals = schedule_graph(big.sink, big.var_vals, flags, tensor_memo())
  # (built directly: dataclasses.replace reads the fields' definitions again for every kernel)
  dev, meta = big.device_buffers, big.metadata
  schedule = [ScheduleItem(k.ast, tuple([dev[u] for u in k.bufs]), tuple(dedup(m for u in k.computes if (m := meta.get(u)))),
                           tuple([dev[u] for u in k.assign_preloads]), k.computes) for k in kernels]
  if capture_hook.HOOK is not None:
    capture_hook.HOOK("schedule", (big.sink, var_vals, flags), [k.ast for k in kernels],
                      {"metadata": [[repr(m) for m in si.metadata] for si in schedule], "bufs": [k.bufs for k in kernels]})
  for si in schedule:
    for b in si.outputs:
      if (lb := big.lazy_of.get(b)) is not None and hasattr(lb, "srcs"): del lb.srcs  # scheduled: realized from now on
  return schedule, var_vals

def _no_elements(lb: LazyBuffer) -> bool: return isinstance(n := lb.st.size, int) and n == 0

def create_schedule(outs: list[LazyBuffer]) -> list[ScheduleItem]:
  schedule, var_vals = create_schedule_with_vars(outs)
  if var_vals: raise ScheduleError(f"schedule has bound Variables {[v.arg[0] for v in var_vals]}: use create_schedule_with_vars")
  return schedule

__all__ = ["ScheduleItem", "ScheduleError", "SCHEDULE_FLAGS", "current_flags", "full_ast_rewrite", "schedule_graph", "create_schedule",
           "create_schedule_with_vars"]
