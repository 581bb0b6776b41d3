"""The Kernel: shape and axis bookkeeping for one kernel AST, and the optimizations applied to it.

Normalization (a pure function of the AST):
1. the *full shape* is the shape of the reduce input (the store shape when there is no reduce);
   every view in the kernel has that many dims, stores and post-reduce loads have 1 on reduced axes;
2. size-1 axes are dropped, output axes are moved before reduce axes;
3. adjacent axes of the same kind merge where every view can express the merged shape in one view.

The result is `n_out` output axes followed by `n_red` reduce axes. Each axis is then a list of
*parts* (outer to inner); an axis index is the mixed-radix number its parts' indices form.
Initially an output axis is one `global` part and a reduce axis one `loop` part; every Opt splits
one of those, inserting the new part right inside it:

  LOCAL(a, n)   output axis a: global part -> global/n, local n   (work-group dimension)
  UPCAST(a, n)  output axis a: global part -> global/n, upcast n  (n outputs per thread, unrolled; float4 where contiguous)
  UNROLL(a, n)  reduce axis a: loop part -> loop/n, unroll n      (n = 0: the whole axis)
  GROUP(a, n)   reduce axis a: loop part -> loop/n, group n       (n threads share the reduce, combined through local memory)
  STAGE(b, 0)   input buffer b (DEFINE_GLOBAL number) is copied tile by tile into local memory by the whole
                work-group, once per iteration of the outermost reduce loop (tiled matmul)
  TC(0, t)      tensor cores: the whole kernel is a matmul computed by warp-level mma.sync with t-sized tiles
                (tc_match.py, tensor_core.py); first and alone, and lowered only for a target that has them

Opts are recorded values (`Opt(op, axis, amount)`), applied in order, so a kernel can be rebuilt
exactly from (ast, opts).
"""
from __future__ import annotations
import itertools
from dataclasses import dataclass
from enum import Enum, auto
from typing import Sequence
from tinysched.ops import Ops
from tinysched.uop import UOp, sint, ssimplify
from tinysched.shape import ShapeTracker
from tinysched.helpers import prod
from tinysched.codegen import tc_match

class OptOps(Enum):
  LOCAL = auto(); UPCAST = auto(); UNROLL = auto(); GROUP = auto(); STAGE = auto(); TC = auto()  # noqa: E702
  def __repr__(self): return f"OptOps.{self.name}"

@dataclass(frozen=True, order=True)
class Opt:
  op: OptOps
  axis: int
  amount: int = 0
  def __repr__(self): return f"Opt({self.op!r}, {self.axis}, {self.amount})"
  def stable_repr(self) -> str: return repr(self)
  def to_tuple(self) -> tuple[str, int, int]: return (self.op.name, self.axis, self.amount)
  @staticmethod
  def from_tuple(t: Sequence) -> Opt:
    if len(t) != 3 or t[0] not in OptOps.__members__: raise ValueError(f"not an Opt: {t!r} (expected (op name, axis, amount))")
    return Opt(OptOps[t[0]], int(t[1]), int(t[2]))

class KernelError(ValueError):
  """The AST is not a kernel this code generator understands."""
class KernelOptError(ValueError):
  """An Opt cannot be applied to this kernel."""

# part kinds, in the order they appear in kernel names
GLOBAL, LOCAL, GROUP, LOOP, UNROLL, UPCAST = "global", "local", "group", "loop", "unroll", "upcast"
PART_ORDER = (GLOBAL, LOCAL, GROUP, LOOP, UNROLL, UPCAST)
MAX_LANES = 4096  # upcast*unroll lanes: the unrolled body grows with it
INT64_LIMIT = 2**62  # far beyond any buffer; leaves headroom so sums of in-range terms cannot wrap int64

@dataclass(frozen=True)
class Part:
  kind: str
  size: sint
  axis: int

def _is1(s: sint) -> bool: return type(s) is int and s == 1

class Kernel:
  def __init__(self, ast: UOp, opts: Sequence[Opt] = ()):
    if not isinstance(ast, UOp) or ast.op is not Ops.SINK:
      raise KernelError(f"a kernel AST is a SINK of STOREs, got {getattr(ast, 'op', type(ast).__name__)}")
    if not ast.src or any(s.op is not Ops.STORE for s in ast.src): raise KernelError("a kernel AST is a SINK of STOREs")
    self.ast = ast
    topo = list(ast.toposort())
    self.reduceops: list[UOp] = [u for u in topo if u.op is Ops.REDUCE_AXIS]
    self.bufs: list[UOp] = sorted({u for u in topo if u.op is Ops.DEFINE_GLOBAL}, key=lambda u: u.arg)
    self.outbufs: list[int] = [s.src[0].arg for s in ast.src]
    self.vars: list[UOp] = []  # DEFINE_VARs in first-use order (shapes, then values)
    for u in topo:
      if u.op is Ops.VIEW:
        for v in u.arg.vars():
          if (vv := v.src[0] if v.op is Ops.BIND else v) not in self.vars: self.vars.append(vv)
      elif u.op is Ops.DEFINE_VAR and u not in self.vars: self.vars.append(u)
    self._normalize(topo)
    self.parts: list[list[Part]] = [[Part(GLOBAL if i < self.n_out else LOOP, s, i)] for i, s in enumerate(self.full_shape)]
    self.staged: list[int] = []
    self.tc = 0  # the tensor-core tile (Opt TC's amount), 0: none
    self.applied: list[Opt] = []
    for o in opts: self.apply_opt(o)

  # *** normalization ***
  def _normalize(self, topo: list[UOp]) -> None:
    # a reduce may contain another (FUSE_ARANGE: an arange inside an embedding's gather) when they reduce disjoint axes;
    # reduces side by side must reduce the same axes. Only a nested reduce that folds to a closed form can be lowered
    # (lowerer.py `fold_reduces`; the rest is refused there).
    self.inner_reduces: dict[UOp, list[UOp]] = {r: [x for x in r.src[0].toposort() if x.op is Ops.REDUCE_AXIS] for r in self.reduceops}
    self.nested = any(self.inner_reduces.values())
    outer = [r for r in self.reduceops if not any(r in v for v in self.inner_reduces.values())]
    red_axes: tuple[int, ...] | None = None
    for r in self.reduceops:
      if r.arg[0] not in (Ops.ADD, Ops.MUL, Ops.MAX): raise KernelError(f"cannot reduce with {r.arg[0]}")
      for x in self.inner_reduces[r]:
        if set(x.arg[1]) & set(r.arg[1]): raise KernelError(f"a reduce over axes {tuple(x.arg[1])} inside a reduce over {tuple(r.arg[1])}")
    for r in outer:
      ax = tuple(sorted(r.arg[1]))
      if red_axes is not None and ax != red_axes: raise KernelError(f"reduces over different axes in one kernel: {red_axes} and {ax}")
      red_axes = ax
    for r in self.reduceops:  # reduces at one nesting level reduce the same axes
      ins = self.inner_reduces[r]
      direct = [x for x in ins if not any(x in self.inner_reduces[y] for y in ins)]
      if len({tuple(sorted(x.arg[1])) for x in direct}) > 1: raise KernelError("reduces over different axes in one kernel (inside one reduce)")
    views = [u for u in topo if u.op is Ops.VIEW and not u.src]
    if not views: raise KernelError("a kernel AST needs at least one VIEW")
    if self.reduceops:
      innermost = next(r for r in self.reduceops if not self.inner_reduces[r])
      inner = [u for u in innermost.src[0].toposort() if u.op is Ops.VIEW]
      if not inner: raise KernelError("a reduce without a shaped input")
      full = inner[0].arg.shape
    else: full = self.ast.src[0].src[1].arg.shape
    red = {a for r in self.reduceops for a in r.arg[1]}
    for v in views:
      sh = v.arg.shape
      if len(sh) != len(full) or not all(a is b or a == b or (_is1(a) and i in red) for i, (a, b) in enumerate(zip(sh, full))):
        raise KernelError(f"view of shape {sh} does not fit the kernel's full shape {full}")
    sts = {v: v.arg for v in views}
    # drop size-1 axes, then put reduce axes last
    keep = [i for i, s in enumerate(full) if not _is1(s)]
    order = [i for i in keep if i not in red] + [i for i in keep if i in red]
    kinds = [i in red for i in order]
    # axes merge only with axes reduced by the same reduces (a nested reduce's axes stay apart from its parent's)
    keys = [frozenset(j for j, r in enumerate(self.reduceops) if i in r.arg[1]) for i in order]
    origin = [[i] for i in order]  # original axes of each normalized axis
    for v, st in sts.items():
      if len(keep) != len(full): st = st.reshape(tuple(st.shape[i] for i in keep))
      perm = tuple(keep.index(i) for i in order)
      if perm != tuple(range(len(perm))): st = st.permute(perm)
      sts[v] = st
    shape = [full[i] for i in order]
    # merge adjacent axes of one kind where every view stays one view
    i = len(shape) - 1
    while i > 0:
      if kinds[i] == kinds[i-1] and keys[i] == keys[i-1]:
        new_sts = {}
        for v, st in sts.items():
          ns = tuple(st.shape[:i-1]) + (st.shape[i-1]*st.shape[i],) + tuple(st.shape[i+1:])
          nst = st.reshape(ns)
          if len(nst.views) != len(st.views): break
          new_sts[v] = nst
        else:
          sts = new_sts
          shape[i-1:i+1] = [ssimplify(shape[i-1]*shape[i])]
          origin[i-1:i+1] = [origin[i-1] + origin[i]]
          del kinds[i], keys[i]
      i -= 1
    self.sts: dict[UOp, ShapeTracker] = sts
    self.full_shape: tuple[sint, ...] = tuple(shape)
    self.n_red = sum(kinds)
    self.n_out = len(shape) - self.n_red
    # each reduce's axes as reduce-axis numbers (0 = the first reduce axis, full_shape[n_out])
    self.red_axes: dict[UOp, tuple[int, ...]] = {r: tuple(a - self.n_out for a in range(self.n_out, len(shape)) if set(origin[a]) & set(r.arg[1]))
                                                 for r in self.reduceops}
    # reduce axes that only nested reduces reduce: they fold away (or the kernel is refused), so they get no loop
    outer_axes = {a for r in outer for a in self.red_axes[r]}
    self.inner_only: frozenset[int] = frozenset(a for a in range(self.n_red) if a not in outer_axes)
    # views of stores and of loads outside the reduce have 1s on the reduce axes
    for v, st in sts.items():
      if len(st.shape) != len(shape): raise KernelError(f"internal: normalized view {st.shape} vs full shape {shape}")
    # index arithmetic is exact up to 64 bits (lowerer.py narrows it to 32 bits where it provably fits)
    if any(v.arg.real_size() > INT64_LIMIT for v in views):
      raise KernelError(f"kernel of shape {tuple(shape)} addresses more than 2**62 elements of a buffer: 64-bit indexing cannot express it")

  # *** parts ***
  def parts_of(self, kind: str) -> list[Part]: return [p for ps in self.parts for p in ps if p.kind == kind]
  @property
  def all_parts(self) -> list[Part]: return list(itertools.chain.from_iterable(self.parts))
  @property
  def lanes(self) -> int: return prod(p.size for p in self.all_parts if p.kind in (UPCAST, UNROLL))
  @property
  def local_size(self) -> int: return prod(p.size for p in self.all_parts if p.kind in (LOCAL, GROUP))
  def _split(self, axis: int, kind_from: str, kind_new: str, amount: int, opt: Opt) -> None:
    ps = self.parts[axis]
    j = next(k for k, p in enumerate(ps) if p.kind == kind_from)
    size = ps[j].size
    if type(size) is not int: raise KernelOptError(f"{opt}: axis {axis} has symbolic size {size}; opts need concrete sizes")
    if amount < 1 or size % amount != 0:
      raise KernelOptError(f"{opt}: amount {amount} does not divide the remaining size {size} of axis {axis} (shape {self.shape_str()})")
    ps[j:j+1] = [Part(kind_from, size // amount, axis), Part(kind_new, amount, axis)]

  # a snapshot of what apply_opt changes: tuples, so the in-place edits of later opts cannot reach it
  def state(self) -> tuple: return tuple(map(tuple, self.parts)), tuple(self.staged), tuple(self.applied), self.tc
  def restore(self, snapshot: tuple) -> None:
    parts, staged, applied, self.tc = snapshot
    self.parts, self.staged, self.applied = [list(ps) for ps in parts], list(staged), list(applied)
  def apply_opt(self, opt: Opt) -> None:
    """Apply one Opt; on KernelOptError the kernel is unchanged (so heuristics can just try)."""
    saved = self.state()
    try: self._apply_opt(opt)
    except KernelOptError:
      self.restore(saved)
      raise
    self.applied.append(opt)

  def _apply_opt(self, opt: Opt) -> None:
    if not isinstance(opt, Opt): raise KernelOptError(f"not an Opt: {opt!r}")
    op, ax, amt = opt.op, opt.axis, opt.amount
    if self.tc: raise KernelOptError(f"{opt}: no opt applies after TC (the tensor-core kernel fixes the whole schedule)")
    if op is OptOps.TC:
      if self.applied: raise KernelOptError(f"{opt}: TC must be the first and only opt")
      if ax != 0: raise KernelOptError(f"{opt}: TC takes axis 0")
      if (why := tc_match.check(self, amt)) is not None: raise KernelOptError(f"{opt}: {why}")
      self.tc = amt
      return
    if op in (OptOps.LOCAL, OptOps.UPCAST):
      if not 0 <= ax < self.n_out: raise KernelOptError(f"{opt}: output axis {ax} out of range (kernel has {self.n_out}: {self.shape_str()})")
      self._split(ax, GLOBAL, LOCAL if op is OptOps.LOCAL else UPCAST, amt, opt)
    elif op in (OptOps.UNROLL, OptOps.GROUP):
      if not 0 <= ax < self.n_red: raise KernelOptError(f"{opt}: reduce axis {ax} out of range (kernel has {self.n_red}: {self.shape_str()})")
      if op is OptOps.UNROLL and amt == 0:
        amt = next(p.size for p in self.parts[self.n_out + ax] if p.kind == LOOP)  # type: ignore[assignment]  # an int: checked next
        if type(amt) is not int: raise KernelOptError(f"{opt}: cannot fully unroll a symbolic axis")
      if ax in self.inner_only: raise KernelOptError(f"{opt}: reduce axis {ax} is only reduced by a nested reduce (it folds, no loop to split)")
      if op is OptOps.GROUP and self.parts_of(GROUP): raise KernelOptError(f"{opt}: only one GROUP per kernel")
      self._split(self.n_out + ax, LOOP, UNROLL if op is OptOps.UNROLL else GROUP, amt, opt)
    elif op is OptOps.STAGE:
      if not self.reduceops: raise KernelOptError(f"{opt}: STAGE needs a reduce kernel")
      if ax in self.outbufs: raise KernelOptError(f"{opt}: buffer {ax} is written by this kernel")
      loads = [u for r in self.reduceops for u in r.src[0].toposort() if u.op is Ops.LOAD and u.src[0].arg == ax]
      if not loads: raise KernelOptError(f"{opt}: buffer {ax} is not loaded inside the reduce")
      if ax in self.staged: raise KernelOptError(f"{opt}: buffer {ax} is already staged")
      if amt != 0: raise KernelOptError(f"{opt}: STAGE takes amount 0")
      self.staged.append(ax)
    else: raise KernelOptError(f"unknown opt {opt}")
    if self.lanes > MAX_LANES: raise KernelOptError(f"{opt}: {self.lanes} upcast*unroll lanes exceed the limit of {MAX_LANES}")

  def shape_str(self) -> str: return "(" + ", ".join(str(s) for s in self.full_shape) + ")"

  @property
  def name(self) -> str:
    """tinygrad-style: r_ for kernels with a reduce, E_ for elementwise, then the part sizes by kind."""
    sizes = [p.size for kind in PART_ORDER for p in self.all_parts if p.kind == kind and not _is1(p.size)]
    def fmt(s: sint) -> str:
      if type(s) is int: return str(s)
      txt = "".join(c if c.isalnum() else "_" for c in s.render_sym()).strip("_")  # type: ignore[union-attr]  # not an int: a UOp
      return txt or "n"
    return ("r_" if self.reduceops else "E_") + ("_".join(fmt(s) for s in sizes) if sizes else "1")

__all__ = ["Opt", "OptOps", "Kernel", "KernelError", "KernelOptError", "Part"]
