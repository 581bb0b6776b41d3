"""Lowering: a Kernel (AST + opts) becomes a linear program of UOps.

The linear program is a list of nodes in execution order. Control flow is explicit:
RANGE ... ENDRANGE brackets a loop, BARRIER is a work-group barrier; values are SPECIAL (thread
ids), DEFINE_ACC (accumulators), DEFINE_LOCAL (local memory), LOAD/STORE through INDEX(buffer,
index, ...), GEP/VECTORIZE for float4 accesses, ASSIGN (accumulator update) and ALU ops.

The lowering is a pipeline of named passes over one LowerState, in the order `LOWERING_PASSES` lists:
- placeholders, thread_ids, loops: every kernel part (kernel.py) gets a placeholder index, then a
  thread id, a loop counter, a constant, or (upcast/unroll parts) a *lane*. A view's (index, valid)
  come from `ShapeTracker.to_indexed_uops` on the axes' mixed-radix placeholder expressions (the
  same expressions the interpreter evaluates), with the placeholders substituted;
- closed_form_reduces: reduces that `reduce_folds` (folds.py, named rules) writes without a loop;
- reduce_loops, stores: AST nodes become values through `ast_lowering` (named rules), once per lane
  combination (interning shares what does not depend on the lane); loads and stores whose lanes
  are consecutive and provably 4-aligned become one vector access. The Emitter (emit.py) places
  each value in the innermost open loop it depends on, so loop-invariant work is hoisted;
- linearize, narrow_indices (narrow.py), local_memory_limit.
A LowerState given a rule trace records every codegen rule that fired (provenance.py uses it to
say which pass or rule made each node of the program).

Index widths: every index expression is built and simplified in int64 (`IDX`), where value ranges
are exact, so no 32-bit wrap-around can either corrupt an index or hide from the simplifier (arange's
`% (2n-1)` folds away once the ranges are exact). `narrow_indices` then retypes each node of index
arithmetic to int32 exactly when its range and its operands' ranges fit (a loop counter also needs
its last increment to fit); everything else stays `long` in the C source, with casts inserted where
32- and 64-bit values meet. Buffers past 2**31 elements therefore work; small kernels stay all-int.

Closed-form reduces (`reduce_folds`, folds.py): before a reduce gets a loop, it is written as
REDUCE_AXIS(body, R...) with each reduce axis a symbol. A sum of a constant masked by intervals of R
becomes the constant times the interval's length (arange, cumsum of a constant: O(1) per output);
a sum whose mask leaves at most one point of R becomes one guarded load. Floats fold only where the
result is bit-exact (c*count exact for every count; +0.0 added back for a lone -0.0).

`IDX`, `PICK32` and `reduce_folds` are read from this module when a kernel is lowered, so a test
that plants a 32-bit IDX, a wrong 32-bit decision or a reduced rule set here changes the whole lowering.
"""
from __future__ import annotations
import math
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence
from tinysched.dtype import DType, dtypes, PtrDType
from tinysched.ops import Ops, GroupOp
from tinysched.symbolic import decompose_sum, build_sum
from tinysched.uop import UOp, sint
from tinysched.reduce import reduce_identity, acc_dtype
from tinysched.rewrite import UPat, PatternMatcher, graph_rewrite
from tinysched.helpers import prod
from tinysched.shape import ShapeTracker, View
from tinysched.codegen.kernel import Kernel, KernelOptError, KernelError, GLOBAL, LOCAL, GROUP, LOOP, UNROLL, UPCAST
from tinysched.codegen.target import Target
from tinysched.codegen.emit import Emitter
from tinysched.codegen.narrow import Narrowing
from tinysched.codegen.rebuild import substitute, contains, alu
from tinysched.codegen.folds import reduce_folds, LOOPS

# Index arithmetic is built and simplified in 64 bits, where value ranges are exact (no 32-bit wrap-around can hide an
# overflow or block a fold); `narrow_indices` then gives every node that provably fits 32 bits back its fast int type.
IDX = dtypes.int64
MAX_GRID_Y = 65535  # NVIDIA limits work-group counts in dims 1 and 2; dim 0 is practically unlimited

# *** integer sums: c0*t0 + c1*t1 + ... + const ***

# the simplifier's sum-of-products helpers, with the index dtype as the default
decompose = decompose_sum
def build(terms: list[tuple[UOp, int]], const: int, dtype: DType | None = None) -> UOp: return build_sum(dtype or IDX, terms, const)

def _mixed_radix(vals: list[UOp], sizes: list[sint]) -> UOp:
  """vals[0]*prod(sizes[1:]) + ... + vals[-1]."""
  ret: UOp = UOp.const(IDX, 0)
  for v, s in zip(vals, sizes): ret = ret * wide(s) + v
  return ret

# *** 64-bit index expressions ***

_WIDE_CACHE: dict[UOp, UOp] = {}
def wide(x: sint) -> UOp:
  """A shape entry (int, or a symbolic expression over 32-bit Variables) as an exact 64-bit index expression: every
  integer node becomes int64, a Variable is read through a CAST (it stays a 32-bit kernel argument)."""
  if not isinstance(x, UOp): return UOp.const(IDX, x)
  if x.op is Ops.CONST: return UOp.const(IDX, x.arg)
  if (c := _WIDE_CACHE.get(x)) is not None: return c
  new: dict[UOp, UOp] = {}
  for u in x.toposort():
    if u.op is Ops.CONST: new[u] = UOp.const(IDX, u.arg) if dtypes.is_int(u.dtype) else u
    elif u.op is Ops.DEFINE_VAR: new[u] = u if u.dtype == IDX else UOp(Ops.CAST, IDX, (u,))
    elif u.op is Ops.BIND: new[u] = new[u.src[0]]
    elif u.op is Ops.CAST and dtypes.is_int(u.dtype) and dtypes.is_int(u.src[0].dtype) and \
        dtypes.min(u.dtype) <= u.src[0].vmin and u.src[0].vmax <= dtypes.max(u.dtype):
      new[u] = new[u.src[0]]  # a value-preserving cast: the 64-bit value is already exact
    else:
      src = tuple(new[s] for s in u.src)
      new[u] = UOp(u.op, IDX if dtypes.is_int(u.dtype) else u.dtype, src, u.arg)
  if len(_WIDE_CACHE) > 4096: _WIDE_CACHE.clear()  # it keeps nodes alive: bound it
  _WIDE_CACHE[x] = ret = new[x].simplify()
  return ret

def wide_st(st: ShapeTracker) -> ShapeTracker:
  """The same tracker with its symbolic entries as 64-bit expressions (views rebuilt field by field, not re-canonicalized)."""
  if all(v._ints for v in st.views): return st
  def w(x: sint) -> sint: return x if type(x) is int else wide(x)
  return ShapeTracker(tuple(View(tuple(w(s) for s in v.shape), tuple(w(s) for s in v.strides), w(v.offset),
                                 None if v.mask is None else tuple((w(b), w(e)) for b, e in v.mask)) for v in st.views))

def _split_dims(n: int) -> list[list[int]]:
  """Consecutive groups (outer to inner) of n items, at most 3: the outermost items merge first."""
  groups = [[i] for i in range(n)]
  while len(groups) > 3: groups[0:2] = [groups[0] + groups[1]]
  return groups

def _default_pick32(u: UOp, ok: bool) -> bool: return ok
PICK32 = _default_pick32  # the 32-bit decision (module-level so a test can plant a wrong one)

def narrow_indices(uops: list[UOp]) -> list[UOp]:
  """Give back 32-bit types to the lowered program's 64-bit index arithmetic wherever that is exact.

  A node is narrowed when it is a pure function of thread ids, loop counters and Variables (index arithmetic and
  the validity tests over it) and its exact range, and its integer operands' ranges, fit int32: then the int op
  computes exactly the 64-bit value. Everything else keeps int64; a 32-bit operand of a 64-bit op is cast up (and a
  64-bit value read by a 32-bit op cast down) right after it is defined. Other integer nodes (memory, accumulators)
  keep their dtypes and get their operands back in their original types."""
  return Narrowing(uops, PICK32, IDX).run()

# *** the result ***

@dataclass(frozen=True)
class Lowered:
  name: str
  uops: tuple[UOp, ...]
  global_size: tuple[sint, ...]       # work-items per dim (groups * local size)
  local_size: tuple[int, ...] | None  # None: the driver picks (no local ids used)
  local_mem: int                      # bytes of __local memory
  bufs: tuple[UOp, ...]               # DEFINE_GLOBALs by number
  vars: tuple[UOp, ...]               # DEFINE_VARs, kernel argument order
  outs: tuple[int, ...]               # buffer numbers written


# *** lowering: the state the passes share, and the queries they make of it ***

class LowerState:
  """One kernel being lowered: its parts' placeholders, thread ids and loops, the emitter, and the values computed so far.
  The passes (LOWERING_PASSES) fill it in order; its methods answer questions about it (a view's index at a lane
  combination, the value of an AST node, a load) and memoize the answers."""
  def __init__(self, k: Kernel, target: Target, rule_trace: list[tuple[str, UOp, UOp]] | None = None):
    self.k, self.t = k, target
    self.em = Emitter()
    self.rule_trace = rule_trace  # when a list: (rule name, AST or reduce node, result) of every codegen rule that fired
    self.plist: list[tuple[int, int, Any]] = [(a, j, p) for a, ps in enumerate(k.parts) for j, p in enumerate(ps)]
    # filled by the passes, in LOWERING_PASSES order
    self.ph: dict[tuple[int, int], UOp] = {}             # part -> its placeholder
    self.axis_expr: list[UOp] = []                       # axis -> mixed-radix expression of its parts' placeholders
    self.lanes: list[tuple[int, int]] = []               # UPCAST/UNROLL parts, each lane a constant per lane combination
    self.lane_ph: list[UOp] = []
    self.lane_sizes: list[sint] = []
    self.out_lanes: list[int] = []
    self.red_lanes: list[int] = []
    self.var: dict[tuple[int, int], UOp] = {}            # part -> thread id / loop counter / 0 expression
    self.lparts: list[tuple[int, int]] = []
    self.has_local = False
    self.ndim, self.wg = 1, 1
    self.local_size: tuple[int, ...] | None = None
    self.global_size: tuple[sint, ...] = ()
    self.loops: list[tuple[tuple[int, int], UOp]] = []
    self.conc: dict[UOp, UOp] = {}                       # placeholder -> concrete (lanes stay)
    self.loop_reduces: list[UOp] = list(k.reduceops)     # the reduces that need a loop
    self.folded_inner: set[UOp] = set()
    self.fold_syms: list[UOp] = []
    self.reduce_result: dict[tuple[UOp, tuple[int, ...]], UOp] = {}
    self.stage: dict[UOp, tuple[UOp, UOp, UOp]] = {}  # staged LOAD -> (local buffer, layout index (placeholders), barrier)
    self.local_mem = 0
    self.n_acc = self.n_local = 0
    self.uops: list[UOp] = []                            # the linear program
    self.renamed: dict[UOp, UOp] = {}                    # a pass that rebuilds the program: old node -> new node
    # memo tables of the queries
    self.view_cache: dict[UOp, Any] = {}
    self.at_cache: dict[tuple, tuple[UOp, UOp]] = {}
    self.val_cache: dict[tuple, UOp] = {}
    self.vload_cache: dict[tuple, UOp] = {}
    self.in_body = False
    self.cur_lanes: tuple[int, ...] = ()

  def lid_flat(self) -> UOp:
    """A flat local id (hardware order: dim 0 fastest) as a placeholder expression."""
    return _mixed_radix([self.ph[x] for x in self.lparts], [self.k.parts[a][j].size for a, j in self.lparts])

  def view_sym(self, view: UOp) -> tuple[UOp, UOp]:
    st = wide_st(self.k.sts[view])
    if not st.shape: return st.reshape((1,)).to_indexed_uops([UOp.const(IDX, 0)])  # an index to take the offset's dtype from
    idxs = [UOp.const(IDX, 0) if _is1(s) else self.axis_expr[i] for i, s in enumerate(st.shape)]
    return st.to_indexed_uops(idxs)

  def view_base(self, view: UOp) -> tuple[UOp, UOp, Any]:
    """(index, valid) with thread ids and loops in place, lanes still placeholders; plus the linear form in the lanes."""
    if (c := self.view_cache.get(view)) is not None: return c
    idx, valid = self.view_sym(view)
    idx, valid = substitute(idx, self.conc), substitute(valid, self.conc)
    c = (idx, valid, self._linear(idx))
    self.view_cache[view] = c
    return c

  def _linear(self, idx: UOp) -> tuple[list[tuple[UOp, int]], int, dict[UOp, int]] | None:
    lane_set = set(self.lane_ph)
    terms, const = decompose(idx)
    rest: list[tuple[UOp, int]] = []; coeffs: dict[UOp, int] = {}
    for t, c in terms:
      if t in lane_set: coeffs[t] = coeffs.get(t, 0) + c
      elif contains(t, lane_set): return None
      else: rest.append((t, c))
    return rest, const, coeffs

  def lane_subst(self, x: UOp, lanes: tuple[int, ...]) -> UOp:
    m = {p: UOp.const(IDX, v) for p, v in zip(self.lane_ph, lanes)}
    return substitute(x, m)

  def at(self, idx: UOp, valid: UOp, lin: Any, lanes: tuple[int, ...]) -> tuple[UOp, UOp]:
    if lin is not None:
      rest, const, coeffs = lin
      i = build(rest, const + sum(coeffs.get(p, 0)*v for p, v in zip(self.lane_ph, lanes)))
    else: i = self.lane_subst(idx, lanes)
    return i, self.lane_subst(valid, lanes)

  def view_at(self, view: UOp, lanes: tuple[int, ...]) -> tuple[UOp, UOp]:
    key = (view, lanes)
    if (c := self.at_cache.get(key)) is None:
      idx, valid, lin = self.view_base(view)
      c = self.at_cache[key] = self.at(idx, valid, lin, lanes)
    return c

  def vec_lane(self, idx: UOp, valid: UOp, lin: Any, lanes: tuple[int, ...], dtype: DType, allowed: list[int]) -> tuple[int, tuple[int, ...]] | None:
    """(lane position, base lanes) when lanes base..base+3 of one lane read consecutive, 4-aligned elements."""
    if lin is None or dtype.scalar() == dtypes.bool: return None
    rest, const, coeffs = lin
    if any(c % 4 != 0 for _, c in rest): return None
    for pos in reversed(allowed):
      p = self.lane_ph[pos]
      if self.lane_sizes[pos] % 4 != 0 or coeffs.get(p) != 1 or contains(valid, {p}): continue
      base = lanes[:pos] + (lanes[pos] - lanes[pos] % 4,) + lanes[pos+1:]
      if (const + sum(coeffs.get(q, 0)*v for q, v in zip(self.lane_ph, base))) % 4 == 0: return pos, base
    return None

  def make_load(self, buf: UOp, idx: UOp, valid: UOp, dtype: DType, barrier: UOp | None = None) -> UOp:
    if valid.op is Ops.CONST and not valid.arg: return UOp.const(dtype, 0)
    src: tuple[UOp, ...] = (UOp(Ops.INDEX, buf.dtype, (buf, idx)),)
    if not (valid.op is Ops.CONST and valid.arg): src += (valid,)
    if barrier is not None: src += (barrier,)
    return UOp(Ops.LOAD, dtype, src)

  def load(self, ld: UOp, lanes: tuple[int, ...]) -> UOp:
    if self.in_body and ld in self.stage: return self.staged_load(ld, lanes)
    buf, view = ld.src[0], ld.src[1]
    dt = buf.dtype.base
    idx, valid, lin = self.view_base(view)
    allowed = self.out_lanes + self.red_lanes if self.in_body else self.out_lanes
    if (v := self.vec_lane(idx, valid, lin, lanes, dt, allowed)) is not None:
      pos, base = v
      key = (buf, view, base, pos)
      if (vl := self.vload_cache.get(key)) is None:
        bi, bv = self.view_at(view, base)
        vl = self.vload_cache[key] = self.make_load(buf, bi, bv, dt.vec(4))
      if vl.op is not Ops.LOAD: return UOp.const(dt, 0)
      return UOp(Ops.GEP, dt, (vl,), lanes[pos] - base[pos])
    i, vv = self.view_at(view, lanes)
    return self.make_load(buf, i, vv, dt)

  def staged_load(self, ld: UOp, lanes: tuple[int, ...]) -> UOp:
    lbuf, layout, bar = self.stage[ld]
    dt = ld.src[0].dtype.base
    if (c := self.view_cache.get(layout)) is None:
      idx = substitute(layout, self.conc)
      c = self.view_cache[layout] = (idx, self._linear(idx))
    idx, lin = c
    true = UOp.const(dtypes.bool, True)
    if (v := self.vec_lane(idx, true, lin, lanes, dt, self.out_lanes + self.red_lanes)) is not None:
      pos, base = v
      key = (ld, base, pos, "local")
      if (vl := self.vload_cache.get(key)) is None:
        vl = self.vload_cache[key] = self.make_load(lbuf, self.at(idx, true, lin, base)[0], true, dt.vec(4), bar)
      return UOp(Ops.GEP, dt, (vl,), lanes[pos] - base[pos])
    return self.make_load(lbuf, self.at(idx, true, lin, lanes)[0], true, dt, bar)

  def lower(self, node: UOp, lanes: tuple[int, ...]) -> UOp:
    """The scalar value of AST node `node` at one lane combination."""
    key = (node, lanes)
    if (c := self.val_cache.get(key)) is not None: return c
    for u in node.toposort():
      if (u, lanes) in self.val_cache: continue
      self.val_cache[(u, lanes)] = self._lower_one(u, lanes)
    return self.val_cache[key]

  def _lower_one(self, u: UOp, lanes: tuple[int, ...]) -> UOp:
    self.cur_lanes = lanes
    hit = ast_lowering.rewrite_named(u, self)
    if hit is None:  # no rule, or a rule that gave the node back unchanged (e.g. ALU over Variables only)
      if u.op in (Ops.VIEW, Ops.DEFINE_GLOBAL, Ops.CONST, Ops.DEFINE_VAR) or u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST): return u
      raise KernelError(f"cannot lower {u.op} in a kernel AST")
    if self.rule_trace is not None: self.rule_trace.append((hit[1], u, hit[0]))
    return hit[0]

  def _srcs(self, u: UOp) -> tuple[UOp, ...]: return tuple(self.val_cache[(s, self.cur_lanes)] for s in u.src)

  def _reduce_value(self, u: UOp) -> UOp:
    key = (u, tuple(self.cur_lanes[i] for i in self.out_lanes))
    if key not in self.reduce_result: raise KernelError("internal: reduce used before it was computed")
    v = self.reduce_result[key]
    if u in self.folded_inner:  # inside a parent's loop: its fold symbols become the loop's indices at these lanes
      loop_idx = [self.lane_subst(substitute(self.axis_expr[self.k.n_out + a], self.conc), self.cur_lanes) for a in range(len(self.fold_syms))]
      v = substitute(v, dict(zip(self.fold_syms, loop_idx)))
    return v

  def _elementwise(self, u: UOp) -> UOp:
    srcs = self._srcs(u)
    if u.op is Ops.CAST and srcs[0].dtype == u.dtype: return srcs[0]
    if u.op is Ops.CAST and srcs[0].op is Ops.CONST: return UOp.const(u.dtype, srcs[0].arg)
    return alu(u.op, u.dtype, srcs, u.arg)

  def lane_combos(self, positions: list[int]) -> list[tuple[int, ...]]:
    """Every lane tuple that varies the given lane positions (others 0), first position outermost."""
    combos = [tuple(0 for _ in self.lanes)]
    for pos in positions:
      combos = [c[:pos] + (v,) + c[pos+1:] for c in combos for v in range(self.lane_sizes[pos])]  # type: ignore[arg-type]  # int lane sizes
    return combos

  def _fold_view(self, view: UOp, lanes: tuple[int, ...]) -> tuple[UOp, UOp]:
    """(index, valid) of a view with output axes as thread ids (lanes substituted) and reduce axes as fold symbols."""
    k = self.k
    st = wide_st(k.sts[view])
    if not st.shape: idx, valid = st.reshape((1,)).to_indexed_uops([UOp.const(IDX, 0)])  # as in view_sym
    else:
      idx, valid = st.to_indexed_uops([UOp.const(IDX, 0) if _is1(sz) and k.nested else self.fold_syms[i - k.n_out] if i >= k.n_out else
                                       UOp.const(IDX, 0) if _is1(sz) else self.axis_expr[i] for i, sz in enumerate(st.shape)])
    return self.lane_subst(substitute(idx, self.conc), lanes), self.lane_subst(substitute(valid, self.conc), lanes)

  def _fold_body(self, node: UOp, lanes: tuple[int, ...]) -> UOp | None:
    """A reduce input with every reduce axis as its fold symbol (loads read through it), or None for what cannot be written so."""
    memo: dict[UOp, UOp] = {}
    for u in node.toposort():
      if u.op is Ops.VALID: memo[u] = self._fold_view(u.src[0], lanes)[1]
      elif u.op is Ops.LOAD: memo[u] = self.make_load(u.src[0], *self._fold_view(u.src[1], lanes), u.dtype)
      elif u.op in (Ops.CONST, Ops.DEFINE_VAR, Ops.VIEW, Ops.DEFINE_GLOBAL): memo[u] = u
      elif u.op is Ops.REDUCE_AXIS:  # a nested reduce: only in its folded form
        if (fv := self.reduce_result.get((u, tuple(lanes[i] for i in self.out_lanes)))) is None: return None
        memo[u] = fv
      elif u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST):
        srcs = tuple(memo[x] for x in u.src)
        memo[u] = srcs[0] if u.op is Ops.CAST and srcs[0].dtype == u.dtype else \
          UOp.const(u.dtype, srcs[0].arg) if u.op is Ops.CAST and srcs[0].op is Ops.CONST else alu(u.op, u.dtype, srcs, u.arg)
      else: return None
    return memo[node]

  def define_local(self, dtype: DType, size: int) -> UOp:
    self.local_mem += size * dtype.itemsize
    self.local_mem = (self.local_mem + 15) // 16 * 16
    n = self.n_local
    self.n_local += 1
    return self.em.declare(UOp(Ops.DEFINE_LOCAL, PtrDType(dtype.priority, dtype.itemsize, dtype.name, dtype.fmt, 1, dtype),
                               (), (f"temp{n}", size)))

  def define_acc(self, dtype: DType, ident, ranges: list[UOp]) -> UOp:
    n = self.n_acc
    self.n_acc += 1
    return self.em.declare(UOp(Ops.DEFINE_ACC, dtype, (UOp.const(dtype, ident), *ranges), n))

  def lowered(self) -> Lowered:
    k = self.k
    return Lowered(k.name, tuple(self.uops), self.global_size, self.local_size, self.local_mem, tuple(k.bufs), tuple(k.vars), tuple(k.outbufs))

def _is1(s: sint) -> bool: return type(s) is int and s == 1

# AST nodes -> values of one lane combination (ctx is the LowerState; rule names show in replay reports)
ast_lowering = PatternMatcher([
  (UPat(Ops.LOAD, name="x"), lambda ctx, x: ctx.load(x, ctx.cur_lanes), "load_through_view"),
  (UPat(Ops.VALID, name="x"), lambda ctx, x: ctx.view_at(x.src[0], ctx.cur_lanes)[1], "valid_to_mask"),
  (UPat(Ops.REDUCE_AXIS, name="x"), lambda ctx, x: ctx._reduce_value(x), "reduce_to_accumulator"),
  (UPat((*GroupOp.ALU, Ops.CAST, Ops.BITCAST), name="x"), lambda ctx, x: ctx._elementwise(x), "elementwise"),
], name="ast_lowering")

# *** the passes, in pipeline order ***

def make_placeholders(lw: LowerState) -> None:
  """A placeholder per kernel part (a RANGE with a tuple arg, so it has a value range), each axis as the mixed-radix
  expression of its parts, and the lanes: the UPCAST (output) and UNROLL (reduce) parts of size > 1."""
  k = lw.k
  for a, j, p in lw.plist: lw.ph[(a, j)] = UOp(Ops.RANGE, IDX, (UOp.const(IDX, 0), wide(p.size)), ("p", a, j))
  lw.axis_expr = [_mixed_radix([lw.ph[(a, j)] for j in range(len(ps))], [p.size for p in ps]) for a, ps in enumerate(k.parts)]
  lw.lanes = [(a, j) for a, j, p in lw.plist if p.kind in (UPCAST, UNROLL) and not _is1(p.size)]
  lw.lane_ph = [lw.ph[x] for x in lw.lanes]
  lw.lane_sizes = [k.parts[a][j].size for a, j in lw.lanes]
  lw.out_lanes = [i for i, (a, j) in enumerate(lw.lanes) if k.parts[a][j].kind == UPCAST]
  lw.red_lanes = [i for i, (a, j) in enumerate(lw.lanes) if k.parts[a][j].kind == UNROLL]

def assign_thread_ids(lw: LowerState) -> None:
  """GLOBAL parts become group (or global) ids, GROUP and LOCAL parts local ids, at most 3 dims each; sets the launch sizes."""
  k, t = lw.k, lw.t
  gparts = [(a, j) for a, j, p in lw.plist if p.kind == GLOBAL and not _is1(p.size)]
  # GROUP threads outermost: consecutive hardware threads (dim 0) then take the LOCAL parts of output axes, which is
  # where the heuristics put the contiguous direction
  lparts = [(a, j) for a, j, p in lw.plist if p.kind == GROUP and not _is1(p.size)] + \
           [(a, j) for a, j, p in lw.plist if p.kind == LOCAL and not _is1(p.size)]
  lw.lparts = lparts
  # local memory is per work-group: a staged kernel needs explicit work-groups even with no local parts
  lw.has_local = bool(lparts) or bool(k.staged)
  size = lambda x: k.parts[x[0]][x[1]].size  # noqa: E731
  def bound(s: sint) -> int: return s if type(s) is int else int(wide(s).vmax)  # 64-bit: an int32 product could wrap
  ggroups = _split_dims(len(gparts))
  # counts of work-groups in dims 1 and 2 are limited on some GPUs: fall back to one flat dim
  if any(bound(prod(size(gparts[i]) for i in g)) > MAX_GRID_Y for g in ggroups[:-1]): ggroups = [list(range(len(gparts)))] if gparts else []
  lgroups = _split_dims(len(lparts))
  lw.ndim = max(len(ggroups), len(lgroups), 1)
  gsz: list[sint] = [1]*lw.ndim
  lsz: list[int] = [1]*lw.ndim
  for d, grp in enumerate(reversed(ggroups)):
    sizes = [size(gparts[i]) for i in grp]
    total = prod(sizes)
    gsz[d] = total if type(total) is int else wide(total)  # evaluated at launch: must not wrap either
    fn = "group" if lw.has_local else "global"
    sp = UOp(Ops.SPECIAL, IDX, (), (f"gidx{d}", bound(total), fn))
    _assign_split(lw, sp, [gparts[i] for i in grp], sizes)
  for d, grp in enumerate(reversed(lgroups)):
    sizes = [size(lparts[i]) for i in grp]
    total = prod(sizes)
    if type(total) is not int: raise KernelOptError("local sizes must be concrete")
    lim = t.max_work_item_sizes[d] if d < len(t.max_work_item_sizes) else 1
    if total > lim: raise KernelOptError(f"local size {total} in dim {d} exceeds {t.name}'s max work-item size {lim}")
    lsz[d] = total
    sp = UOp(Ops.SPECIAL, IDX, (), (f"lidx{d}", total, "local"))
    _assign_split(lw, sp, [lparts[i] for i in grp], sizes)
  wg = prod(lsz)
  if wg > t.max_work_group_size:
    raise KernelOptError(f"work-group size {wg} exceeds {t.name}'s max work-group size {t.max_work_group_size}")
  lw.wg = wg
  lw.local_size = tuple(lsz) if lw.has_local else None
  lw.global_size = tuple(g*l for g, l in zip(gsz, lsz)) if lw.has_local else tuple(gsz)

def _assign_split(lw: LowerState, sp: UOp, parts: list[tuple[int, int]], sizes: list[sint]) -> None:
  for i, x in enumerate(parts):
    inner = prod(sizes[i+1:])
    v = sp if (type(inner) is int and inner == 1) else sp // wide(inner)
    if i > 0: v = v % wide(sizes[i])
    lw.var[x] = v.simplify()

def make_loops(lw: LowerState) -> None:
  """A loop counter per LOOP part (except the reduce axes only a nested reduce iterates); size-1 parts are 0. Then every
  placeholder but the lanes' has its concrete value (`conc`)."""
  k = lw.k
  for a, j, p in lw.plist:
    if p.kind == LOOP and not _is1(p.size) and a - k.n_out not in k.inner_only:
      lw.loops.append(((a, j), r := UOp(Ops.RANGE, IDX, (UOp.const(IDX, 0), wide(p.size)), len(lw.loops))))
      lw.var[(a, j)] = r
  for a, j, p in lw.plist:
    if _is1(p.size) or (p.kind == LOOP and a - k.n_out in k.inner_only): lw.var[(a, j)] = UOp.const(IDX, 0)
  lw.conc = {lw.ph[x]: v for x, v in lw.var.items()}

def fold_reduces(lw: LowerState) -> None:
  """Reduces that `reduce_folds` turns into a closed form (every output lane) need no loop: their values go straight
  into reduce_result; the rest stay in lw.loop_reduces."""
  k = lw.k
  lw.loop_reduces = list(k.reduceops)
  lw.folded_inner = set()
  if not k.reduceops: return
  if k.staged:
    if k.nested: raise KernelError("a kernel with a reduce inside a reduce cannot STAGE buffers")
    return
  rs = [UOp(Ops.RANGE, IDX, (UOp.const(IDX, 0), wide(k.full_shape[k.n_out + a])), ("fold", a)) for a in range(k.n_red)]
  lw.fold_syms = rs
  out_combos = lw.lane_combos(lw.out_lanes)
  outer = [r for r in k.reduceops if not any(r in v for v in k.inner_reduces.values())]
  # inner reduces first (k.reduceops is in toposort order): a folded inner reduce is a value in its parent's body,
  # written with the parent's fold symbols, so the parent can fold too (arange inside a gather: `v == id`, one load)
  for r in k.reduceops:
    if r.arg[0] is not Ops.ADD: continue  # every rule is about sums
    own = [rs[a] for a in k.red_axes[r]]
    left = set(rs) if r in outer else set(own)  # an inner reduce's value may still depend on its parents' axes
    adt = acc_dtype(r.dtype)
    vals = []
    for c in out_combos:
      if (body := lw._fold_body(r.src[0], c)) is None: break
      if body.dtype != adt: body = body.cast(adt) if body.op is Ops.CONST else UOp(Ops.CAST, adt, (body,))
      v = graph_rewrite(UOp(Ops.REDUCE_AXIS, adt, (body, *own), (r.arg[0], LOOPS)), reduce_folds, lw, track=lw.rule_trace)
      if any(u.op is Ops.REDUCE_AXIS or u in left for u in v.toposort()): break
      vals.append((tuple(c[i] for i in lw.out_lanes), v.cast(r.dtype) if v.dtype != r.dtype else v))
    else:
      for key, v in vals: lw.reduce_result[(r, key)] = v
      lw.loop_reduces.remove(r)
  # an inner reduce that folded is a value of its parent's fold symbols: a parent that keeps its loop reads it with
  # the loop's indices in place of the symbols (`_reduce_value`). An inner reduce that needs a loop is refused.
  lw.folded_inner = {r for r in k.reduceops if r not in outer and r not in lw.loop_reduces}
  if k.nested and lw.loop_reduces:
    bad = [r for r in lw.loop_reduces if r not in outer]
    if bad:
      raise KernelError(f"a reduce inside a reduce is only supported when the inner one folds to a closed form (lowerer.py "
                        f"reduce_folds); {len(bad)} nested reduce(s) of this kernel need a loop.\nhelp: schedule with FUSE_ARANGE=0 "
                        "(the inner reduce gets its own kernel)")

def lower_reduce_loops(lw: LowerState) -> None:
  """The reduces left after fold_reduces: accumulators, their loops (staged tiles loaded in the outermost), the
  unrolled lanes' updates, then the GROUP combine through local memory."""
  if not lw.loop_reduces: return
  k, em = lw.k, lw.em
  out_combos = lw.lane_combos(lw.out_lanes)
  red_combos = lw.lane_combos(lw.red_lanes)
  ranges = [r for _, r in lw.loops]
  accs: dict[tuple[UOp, tuple[int, ...]], UOp] = {}
  for r in lw.loop_reduces:
    adt = acc_dtype(r.dtype)
    for c in out_combos: accs[(r, c)] = lw.define_acc(adt, reduce_identity(r.arg[0], r.dtype), ranges)
  # the outermost loop is where staged tiles are loaded
  first_loop = lw.loops[0] if lw.loops else None
  stage_here = bool(k.staged)
  lw.in_body = True
  for i, (_, rng) in enumerate(lw.loops):
    em.open(rng)
    if i == 0 and stage_here: _stage_tiles(lw, first_loop[1])  # type: ignore[index]  # set: there is a loop
  if stage_here and first_loop is None: _stage_tiles(lw, None)
  assigns: dict[tuple[UOp, tuple[int, ...]], UOp] = {}
  def x_at(r: UOp, c: tuple[int, ...], u: tuple[int, ...], adt: DType) -> UOp:
    x = lw.lower(r.src[0], tuple(c[i] if i in lw.out_lanes else u[i] for i in range(len(lw.lanes))))
    return x.cast(adt) if x.dtype != adt else x
  if len(out_combos) >= 4 and len(red_combos) > 1:
    # register tiles: one update per accumulator and unrolled step, step-major, so each step's operands are loaded
    # just before their products (low register pressure) and every product becomes an FMA. Each update reads the
    # previous one (never the DEFINE_ACC twice), so equal values of two steps cannot be merged by interning.
    cur = {key: a for key, a in accs.items()}
    for ui, u in enumerate(red_combos):
      last = ui == len(red_combos) - 1
      for r in lw.loop_reduces:
        adt = acc_dtype(r.dtype)
        for c in out_combos:
          key = (r, c)
          upd = UOp(Ops.ASSIGN, adt, (accs[key], alu(r.arg[0], adt, (cur[key], x_at(r, c, u, adt)))), ui)
          cur[key] = em.effect(upd, None if last else em.contrib[accs[key]])
    assigns = cur
  else:
    for r in lw.loop_reduces:
      adt = acc_dtype(r.dtype)
      for c in out_combos:
        acc = accs[(r, c)]
        xs = [x_at(r, c, u, adt) for u in red_combos]
        # unrolled lanes combine as a balanced tree (short dependency chains), then into the accumulator
        while len(xs) > 1: xs = [alu(r.arg[0], adt, (xs[i], xs[i+1])) if i + 1 < len(xs) else xs[i] for i in range(0, len(xs), 2)]
        assigns[(r, c)] = em.effect(UOp(Ops.ASSIGN, adt, (acc, alu(r.arg[0], adt, (acc, xs[0])))))
  for i in reversed(range(len(lw.loops))):
    if i == 0 and stage_here: em.effect(UOp(Ops.BARRIER, dtypes.void, ()))  # the tile is read: the next iteration may overwrite it
    em.close()
  lw.in_body = False
  if lw.k.parts_of(GROUP): assigns = _group_reduce(lw, assigns, out_combos)
  for (r, c), a in assigns.items():
    lw.reduce_result[(r, tuple(c[i] for i in lw.out_lanes))] = a.cast(r.dtype) if a.dtype != r.dtype else a

def _group_reduce(lw: LowerState, assigns: dict, out_combos: list) -> dict:
  """Combine the partial results of a GROUP's threads through local memory. Every thread stores its
  partial; for a power-of-two group a tree halves the live partials each step (log2 steps, one
  barrier each), otherwise every thread sums the partials in a loop. Every thread then reads the
  result (stores are gated to group index 0)."""
  em = lw.em
  gx = next((a, j) for a, j, p in lw.plist if p.kind == GROUP)
  gsize = lw.k.parts[gx[0]][gx[1]].size
  lid_ph = lw.lid_flat()
  lid = substitute(lid_ph, lw.conc)
  true = UOp.const(dtypes.bool, True)
  stores, temps = [], {}
  for key, a in assigns.items():
    temps[key] = tmp = lw.define_local(a.dtype, lw.wg)
    stores.append(em.effect(UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, tmp.dtype, (tmp, lid)), a))))
  bar = em.effect(UOp(Ops.BARRIER, dtypes.void, tuple(stores)))
  out = {}
  if gsize & (gsize - 1) == 0:
    gvar = lw.var[gx]
    step = gsize // 2
    while step >= 1:
      # threads g < step add partial g+step into partial g
      active = UOp(Ops.CMPLT, dtypes.bool, (gvar, UOp.const(IDX, step)))
      partner = substitute(lid_ph, {**lw.conc, lw.ph[gx]: gvar + step})
      stores = []
      for key, a in assigns.items():
        tmp = temps[key]
        mine = lw.make_load(tmp, lid, true, a.dtype, bar)
        other = lw.make_load(tmp, partner, active, a.dtype, bar)
        val = alu(key[0].arg[0], a.dtype, (mine, other))
        stores.append(em.effect(UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, tmp.dtype, (tmp, lid)), val, active))))
      bar = em.effect(UOp(Ops.BARRIER, dtypes.void, tuple(stores)))
      step //= 2
    first = substitute(lid_ph, {**lw.conc, lw.ph[gx]: UOp.const(IDX, 0)})
    for key, a in assigns.items(): out[key] = lw.make_load(temps[key], first, true, a.dtype, bar)
    return out
  g = UOp(Ops.RANGE, IDX, (UOp.const(IDX, 0), UOp.const(IDX, gsize)), len(lw.loops))
  lid_g = substitute(lid_ph, {**lw.conc, lw.ph[gx]: g})
  accs = {key: lw.define_acc(a.dtype, reduce_identity(key[0].arg[0], key[0].dtype), [g]) for key, a in assigns.items()}
  em.open(g)
  for key, a in assigns.items():
    ld = lw.make_load(temps[key], lid_g, true, a.dtype, bar)
    out[key] = em.effect(UOp(Ops.ASSIGN, a.dtype, (accs[key], alu(key[0].arg[0], a.dtype, (accs[key], ld)))))
  em.close()
  return out

def _stage_tiles(lw: LowerState, r0: UOp | None) -> None:
  """Copy every staged load's tile into local memory: all threads of the work-group load it
  cooperatively (consecutive threads read consecutive addresses), then a barrier."""
  k, em = lw.k, lw.em
  r0x = lw.loops[0][0] if lw.loops else None
  lid_ph = lw.lid_flat()
  lid = substitute(lid_ph, lw.conc)
  stores: list[UOp] = []
  pending: list[tuple[UOp, UOp, UOp]] = []
  loads = []
  for r in k.reduceops:
    for u in r.src[0].toposort():
      if u.op is Ops.LOAD and u.src[0].arg in k.staged and u not in loads: loads.append(u)
  for ld in loads:
    buf, view = ld.src[0], ld.src[1]
    dt = buf.dtype.base
    sym_idx, sym_valid = lw.view_sym(view)
    deps = {u for u in sym_idx.toposort()} | {u for u in sym_valid.toposort()}
    tile = [(a, j) for a, j, p in lw.plist if lw.ph[(a, j)] in deps and p.kind != GLOBAL and (a, j) != r0x and not _is1(p.size)]
    sizes = {x: k.parts[x[0]][x[1]].size for x in tile}
    if not all(type(s) is int for s in sizes.values()): raise KernelOptError("STAGE needs concrete tile sizes")
    # layout: reduce-axis parts outermost, then output axes in natural order (upcast lanes innermost, so reads vectorize)
    layout = [x for x in tile if x[0] >= k.n_out] + [x for x in tile if x[0] < k.n_out]
    S = prod(sizes[x] for x in layout)
    lbuf = lw.define_local(dt, S)
    layout_idx = _mixed_radix([lw.ph[x] for x in layout], [sizes[x] for x in layout])
    # loader order: the part with the smallest global stride innermost (coalesced reads)
    terms, const = decompose(sym_idx)
    coef: dict[UOp, int] = {}
    for t, c in terms: coef[t] = coef.get(t, 0) + c
    nonlinear = {u for t, _ in terms if t.op is not Ops.RANGE for u in t.toposort()}  # placeholders inside div/mod terms
    order = sorted(tile, key=lambda x: -abs(coef[lw.ph[x]]) if lw.ph[x] in coef and lw.ph[x] not in nonlinear else -math.inf)
    q = order[-1] if order else None
    vw = 1
    # float4 reads: q steps the global index by exactly 1 and everything else keeps it 4-aligned
    if q is not None and coef.get(lw.ph[q]) == 1 and lw.ph[q] not in nonlinear and sizes[q] % 4 == 0 and dt != dtypes.bool and \
        const % 4 == 0 and all(c % 4 == 0 for t, c in coef.items() if t is not lw.ph[q]) and lw.ph[q] not in set(sym_valid.toposort()):
      vw = 4
    units = S // vw
    n_iter = -(-units // lw.wg)
    e = UOp(Ops.RANGE, IDX, (UOp.const(IDX, 0), UOp.const(IDX, n_iter)), ("stage", len(pending))) if n_iter > 1 else UOp.const(IDX, 0)
    if n_iter > 1: em.open(e)
    unit = e * lw.wg + lid
    gate = (unit < units) if units % lw.wg != 0 else None
    osz = [sizes[x] for x in order]
    coords: dict[UOp, UOp] = {}
    flat = unit * vw
    for i, x in enumerate(order):
      inner = prod(osz[i+1:])
      cval = flat // inner if inner != 1 else flat
      if i > 0: cval = cval % osz[i]
      coords[lw.ph[x]] = cval
    m = {**lw.conc, **coords}
    if r0 is not None: m[lw.ph[r0x]] = r0  # type: ignore[index]  # r0 comes with its axis r0x
    gidx = substitute(sym_idx, m)
    gvalid = substitute(sym_valid, m)
    if gate is not None: gvalid = (gvalid & gate).simplify() if gvalid.op is not Ops.CONST else (gate if gvalid.arg else gvalid)
    val = lw.make_load(buf, gidx, gvalid, dt.vec(vw) if vw > 1 else dt)
    lidx0 = substitute(layout_idx, coords)
    # q innermost in the layout too: the vector's lanes are consecutive there, and 4-aligned (coord_q is a multiple of 4
    # and every outer stride a multiple of size_q)
    lin_ok = vw > 1 and bool(layout) and layout[-1] == q
    gsrc = () if gate is None else (gate,)
    if lin_ok:
      stores.append(em.effect(UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, lbuf.dtype, (lbuf, lidx0)), val if val.op is Ops.LOAD else
                                                            UOp.const(dt.vec(4), 0), *gsrc))))
    else:
      for kk in range(vw):
        li = substitute(layout_idx, {**coords, lw.ph[q]: coords[lw.ph[q]] + kk}) if vw > 1 else lidx0  # type: ignore[index]  # vw > 1: q is set
        lane_val = UOp(Ops.GEP, dt, (val,), kk) if vw > 1 and val.op is Ops.LOAD else (val if vw == 1 else UOp.const(dt, 0))
        stores.append(em.effect(UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, lbuf.dtype, (lbuf, li)), lane_val, *gsrc))))
    if n_iter > 1: em.close()
    pending.append((ld, lbuf, layout_idx))
  bar = em.effect(UOp(Ops.BARRIER, dtypes.void, tuple(stores)))
  for ld, lbuf, layout_idx in pending: lw.stage[ld] = (lbuf, layout_idx, bar)

def lower_stores(lw: LowerState) -> None:
  """One STORE per output lane combination (one float4 store where 4 lanes are consecutive and aligned), gated to
  GROUP index 0 when a GROUP combine gave every thread the result."""
  k = lw.k
  out_combos = lw.lane_combos(lw.out_lanes)
  gate_g: UOp | None = None
  for a, j, p in lw.plist:
    if p.kind == GROUP and not _is1(p.size): gate_g = UOp(Ops.CMPLT, dtypes.bool, (lw.var[(a, j)], UOp.const(IDX, 1)))
  for st in k.ast.src:
    buf, view, value = st.src
    dt = buf.dtype.base
    idx, valid, lin = lw.view_base(view)
    done: set[tuple[int, ...]] = set()  # membership only
    for c in out_combos:
      if c in done: continue
      v = lw.vec_lane(idx, valid, lin, c, dt, lw.out_lanes)
      if v is not None and v[1] == c:
        pos, base = v
        group = [c[:pos] + (c[pos] + kk,) + c[pos+1:] for kk in range(4)]
        vals = [_store_value(lw, value, g, dt) for g in group]
        bi, bv = lw.view_at(view, base)
        _emit_store(lw, buf, bi, bv, UOp(Ops.VECTORIZE, dt.vec(4), tuple(vals)), gate_g)
        done.update(group)
        continue
      i, vv = lw.view_at(view, c)
      _emit_store(lw, buf, i, vv, _store_value(lw, value, c, dt), gate_g)

def _store_value(lw: LowerState, value: UOp, lanes: tuple[int, ...], dt: DType) -> UOp:
  v = lw.lower(value, lanes)
  if v.dtype != dt: v = UOp.const(dt, v.arg) if v.op is Ops.CONST else UOp(Ops.CAST, dt, (v,))
  return v

def _emit_store(lw: LowerState, buf: UOp, idx: UOp, valid: UOp, val: UOp, gate: UOp | None) -> None:
  if gate is not None: valid = gate if (valid.op is Ops.CONST and valid.arg) else UOp(Ops.AND, dtypes.bool, (valid, gate))
  if valid.op is Ops.CONST and not valid.arg: return
  src = (UOp(Ops.INDEX, buf.dtype, (buf, idx)), val) + (() if valid.op is Ops.CONST else (valid,))
  lw.em.effect(UOp(Ops.STORE, dtypes.void, src))

def linearize(lw: LowerState) -> None:
  """The emitter's nested scopes as one list, kernel arguments first."""
  lw.uops = [*lw.k.bufs, *lw.k.vars] + lw.em.linearize()

def narrow(lw: LowerState) -> None:
  """Index arithmetic back to 32 bits where exact (see narrow_indices); `renamed` records which node became which."""
  n = Narrowing(lw.uops, PICK32, IDX)
  lw.uops, lw.renamed = n.run(), n.new

def check_local_memory(lw: LowerState) -> None:
  if lw.local_mem > lw.t.local_mem_size:
    raise KernelOptError(f"kernel needs {lw.local_mem} bytes of local memory, {lw.t.name} has {lw.t.local_mem_size}")

class Pass(NamedTuple):
  name: str
  run: Callable[[LowerState], None]

# the lowering, in order: each pass reads what the ones before it left in the LowerState
LOWERING_PASSES: tuple[Pass, ...] = (
  Pass("placeholders", make_placeholders),
  Pass("thread_ids", assign_thread_ids),
  Pass("loops", make_loops),
  Pass("closed_form_reduces", fold_reduces),   # rules: reduce_folds
  Pass("reduce_loops", lower_reduce_loops),    # values: ast_lowering
  Pass("stores", lower_stores),                # values: ast_lowering
  Pass("linearize", linearize),
  Pass("narrow_indices", narrow),
  Pass("local_memory_limit", check_local_memory),
)

def run_passes(k: Kernel, target: Target, passes: Sequence[Pass] = LOWERING_PASSES,
               after: Callable[[str, LowerState], None] | None = None, rule_trace: list | None = None) -> LowerState:
  """Run `passes` on a fresh LowerState; `after(pass name, state)` is called after each (tracing)."""
  lw = LowerState(k, target, rule_trace)
  for p in passes:
    p.run(lw)
    if after is not None: after(p.name, lw)
  return lw

def lower(k: Kernel, target: Target) -> Lowered: return run_passes(k, target).lowered()

def reduces_fold(k: Kernel, target: Target) -> bool:
  """Every reduce of the (unoptimized) kernel has a closed form: it needs no loop, so no reduce opts."""
  if not k.reduceops: return False
  upto = [p.name for p in LOWERING_PASSES].index("closed_form_reduces") + 1
  return not run_passes(k, target, LOWERING_PASSES[:upto]).loop_reduces

__all__ = ["lower", "reduces_fold", "narrow_indices", "reduce_folds", "ast_lowering", "Lowered", "LowerState", "LOWERING_PASSES", "Pass",
           "run_passes", "Emitter", "decompose", "build", "acc_dtype", "reduce_identity"]
