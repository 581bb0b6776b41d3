"""Lowering: a Kernel (AST + opts) becomes a linear program of UOps.

The linear program is a list of nodes in execution order. Control flow is explicit:
RANGE ... ENDRANGE brackets a loop, BARRIER is a work-group barrier; values are SPECIAL (thread
ids), DEFINE_ACC (accumulators), DEFINE_LOCAL (local memory), LOAD/STORE through INDEX(buffer,
index, ...), GEP/VECTORIZE for float4 accesses, ASSIGN (accumulator update) and ALU ops.

How (DESIGN §6):
- every kernel part (kernel.py) gets a placeholder index; a view's (index, valid) come from
  `ShapeTracker.to_indexed_uops` on the axes' mixed-radix placeholder expressions (the same
  expressions the interpreter evaluates), then placeholders become thread ids, loop counters, or
  constants for upcast/unroll *lanes*;
- lanes are expanded: each lane combination computes its own scalar values (interning shares what
  does not depend on the lane); loads and stores whose lanes are consecutive and provably
  4-aligned become one vector access;
- the Emitter places each value in the innermost open loop it depends on, so loop-invariant work
  is hoisted and nothing is used outside the loop that defines it.
"""
from __future__ import annotations
import math
from dataclasses import dataclass
from typing import Any
from tinysched.dtype import DType, dtypes, PtrDType
from tinysched.ops import Ops, GroupOp
from tinysched.symbolic import decompose_sum, build_sum
from tinysched.uop import UOp, sint
from tinysched.rewrite import UPat, PatternMatcher
from tinysched.helpers import prod
from tinysched.codegen.kernel import Kernel, KernelOptError, KernelError, GLOBAL, LOCAL, GROUP, LOOP, UNROLL, UPCAST
from tinysched.codegen.target import Target

IDX = dtypes.int32
MAX_GRID_Y = 65535  # NVIDIA limits work-group counts in dims 1 and 2; dim 0 is practically unlimited
LEAVES = frozenset({Ops.CONST, Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR})
EFFECTS = frozenset({Ops.STORE, Ops.ASSIGN, Ops.BARRIER, Ops.DEFINE_ACC, Ops.DEFINE_LOCAL})

# *** integer sums: c0*t0 + c1*t1 + ... + const ***

# the simplifier's sum-of-products helpers, with the index dtype as the default
decompose = decompose_sum
def build(terms: list[tuple[UOp, int]], const: int, dtype: DType = IDX) -> UOp: return build_sum(dtype, terms, const)

def _has(x: UOp, targets: frozenset[UOp] | set[UOp]) -> bool: return any(u in targets for u in x.toposort())

def _subst(x: UOp, m: dict[UOp, UOp]) -> UOp:
  """x with the nodes in m replaced, simplified (a plain rebuild: cheaper than a rewrite pass)."""
  if not m: return x
  topo = x.toposort()
  if not any(u in m for u in topo): return x
  new: dict[UOp, UOp] = {}
  for u in topo:
    if u in m: new[u] = m[u]
    elif u.src:
      src = tuple(new[s] for s in u.src)
      new[u] = u if all(a is b for a, b in zip(src, u.src)) else UOp(u.op, u.dtype, src, u.arg)
    else: new[u] = u
  return new[x].simplify()

def _mixed_radix(vals: list[UOp], sizes: list[sint]) -> UOp:
  """vals[0]*prod(sizes[1:]) + ... + vals[-1]."""
  ret: UOp = UOp.const(IDX, 0)
  for v, s in zip(vals, sizes): ret = ret * s + v
  return ret

def _split_dims(n: int) -> list[list[int]]:
  """Consecutive groups (outer to inner) of n items, at most 3: the outermost items merge first."""
  groups = [[i] for i in range(n)]
  while len(groups) > 3: groups[0:2] = [groups[0] + groups[1]]
  return groups

# *** the emitter: scoped placement of nodes ***

class Block:
  __slots__ = ("range", "items", "open_child", "closed")
  def __init__(self, rng: UOp | None):
    self.range, self.items, self.open_child, self.closed = rng, [], None, False

class Emitter:
  def __init__(self):
    self.root = Block(None)
    self.stack: list[Block] = [self.root]
    self.placed: dict[UOp, Block] = {}
    self.always: set[UOp] = set()            # declarations and effects: visible once emitted (membership only)
    self.contrib: dict[UOp, frozenset] = {}  # the loops a node's value depends on

  def _visible(self, x: UOp) -> bool:
    if x in self.always or x.op in LEAVES: return True
    b = self.placed.get(x)
    return b is not None and not b.closed

  def _insert(self, b: Block, x: UOp) -> None:
    if b.open_child is not None: b.items.insert(len(b.items) - 1, x)  # hoisted: before the open loop (always the last item)
    else: b.items.append(x)
    self.placed[x] = b

  def value(self, root: UOp) -> UOp:
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
      x, ready = stack.pop()
      if self._visible(x) and x in self.contrib: continue
      if not ready:
        stack.append((x, True))
        stack.extend((s, False) for s in reversed(x.src) if not (self._visible(s) and s in self.contrib))
        continue
      c = frozenset().union(*(self.contrib[s] for s in x.src))
      if x.op is Ops.RANGE: c = c | {x}
      self.contrib[x] = c
      if x.op in LEAVES: continue
      if x.op is Ops.RANGE: raise KernelError(f"internal: loop {x.arg} used outside of its scope")
      if x.op in EFFECTS: raise KernelError(f"internal: {x.op} used before it was emitted")
      target = self.root
      open_ranges = [b.range for b in self.stack if b.range is not None]
      if any(r not in open_ranges for r in c if r.op is Ops.RANGE): raise KernelError("internal: value depends on a closed loop")
      for b in reversed(self.stack):
        if b.range is not None and b.range in c:
          target = b
          break
      self._insert(target, x)
    return root

  def declare(self, x: UOp) -> UOp:
    """DEFINE_ACC / DEFINE_LOCAL: declared at function scope (local arrays first of all)."""
    for s in x.src: self.value(s) if s.op is not Ops.RANGE else None
    self.contrib[x] = frozenset(s for s in x.src if s.op is Ops.RANGE)
    if x.op is Ops.DEFINE_LOCAL:
      n = sum(1 for it in self.root.items if isinstance(it, UOp) and it.op is Ops.DEFINE_LOCAL)
      self.root.items.insert(n, x)
      self.placed[x] = self.root
    else: self._insert(self.root, x)
    self.always.add(x)
    return x

  def effect(self, x: UOp, contrib: frozenset | None = None) -> UOp:
    """STORE / ASSIGN / BARRIER: emitted in the innermost open scope, in program order. `contrib`
    overrides the loops the node's users depend on (an accumulator update read again inside its loop)."""
    for s in x.src:
      if s.op not in EFFECTS: self.value(s)
    cur = self.stack[-1]
    cur.items.append(x)
    self.placed[x] = cur
    self.always.add(x)
    # users of an ASSIGN read the accumulator after its loops; users of a BARRIER live in this scope
    if contrib is not None: self.contrib[x] = contrib
    elif x.op is Ops.BARRIER: self.contrib[x] = frozenset(b.range for b in self.stack if b.range is not None)
    else: self.contrib[x] = frozenset()
    return x

  def open(self, rng: UOp) -> None:
    for s in rng.src: self.value(s)  # a symbolic bound is computed before the loop
    b = Block(rng)
    cur = self.stack[-1]
    cur.items.append(b)
    cur.open_child = b
    self.stack.append(b)
    self.placed[rng] = b
    self.contrib[rng] = frozenset({rng})

  def close(self) -> None:
    b = self.stack.pop()
    b.closed = True
    self.stack[-1].open_child = None

  def linearize(self) -> list[UOp]:
    if len(self.stack) != 1: raise KernelError("internal: unclosed loops")
    def walk(b: Block) -> list[UOp]:
      out: list[UOp] = []
      for it in b.items:
        if isinstance(it, Block): out += [it.range] + walk(it) + [UOp(Ops.ENDRANGE, dtypes.void, (it.range,))]
        else: out.append(it)
      return out
    return walk(self.root)

# *** lowering ***

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

def acc_dtype(d: DType) -> DType: return dtypes.float32 if d == dtypes.float16 else d
def reduce_identity(op: Ops, d: DType):
  if op is Ops.ADD: return False if d == dtypes.bool else 0
  if op is Ops.MUL: return True if d == dtypes.bool else 1
  return dtypes.min(d)

def _fold(op: Ops, dtype: DType, srcs: tuple[UOp, ...], arg: Any = None) -> UOp:
  """Build an ALU node; fold a WHERE on a constant condition and integer/bool ops on constants."""
  if op is Ops.WHERE and srcs[0].op is Ops.CONST: return srcs[1] if srcs[0].arg else srcs[2]
  if op in GroupOp.ALU and all(s.op is Ops.CONST for s in srcs) and not dtypes.is_float(dtype) and \
      not any(dtypes.is_float(s.dtype) for s in srcs):
    return UOp(op, dtype, srcs, arg).simplify()
  return UOp(op, dtype, srcs, arg)

class Lowerer:
  def __init__(self, k: Kernel, target: Target):
    self.k, self.t = k, target
    self.em = Emitter()
    # parts and their placeholders (RANGE nodes with a tuple arg, so they have value ranges)
    self.plist: list[tuple[int, int, Any]] = [(a, j, p) for a, ps in enumerate(k.parts) for j, p in enumerate(ps)]
    self.ph: dict[tuple[int, int], UOp] = {}
    for a, j, p in self.plist:
      self.ph[(a, j)] = UOp(Ops.RANGE, IDX, (UOp.const(IDX, 0), p.size if isinstance(p.size, UOp) else UOp.const(IDX, p.size)), ("p", a, j))
    self.axis_expr = [_mixed_radix([self.ph[(a, j)] for j in range(len(ps))], [p.size for p in ps]) for a, ps in enumerate(k.parts)]
    self.lanes = [(a, j) for a, j, p in self.plist if p.kind in (UPCAST, UNROLL) and not _is1(p.size)]
    self.lane_ph = [self.ph[x] for x in self.lanes]
    self.lane_sizes = [k.parts[a][j].size for a, j in self.lanes]
    self.out_lanes = [i for i, (a, j) in enumerate(self.lanes) if k.parts[a][j].kind == UPCAST]
    self.red_lanes = [i for i, (a, j) in enumerate(self.lanes) if k.parts[a][j].kind == UNROLL]
    self._setup_ids()
    self.loops: list[tuple[tuple[int, int], UOp]] = []
    for a, j, p in self.plist:
      if p.kind == LOOP and not _is1(p.size):
        self.loops.append(((a, j), r := UOp(Ops.RANGE, IDX, (UOp.const(IDX, 0), p.size if isinstance(p.size, UOp) else UOp.const(IDX, p.size)), len(self.loops))))
        self.var[(a, j)] = r
    for a, j, p in self.plist:
      if _is1(p.size): self.var[(a, j)] = UOp.const(IDX, 0)
    self.conc = {self.ph[x]: v for x, v in self.var.items()}  # placeholder -> concrete (lanes stay)
    self.view_cache: dict[UOp, Any] = {}
    self.at_cache: dict[tuple, tuple[UOp, UOp]] = {}
    self.val_cache: dict[tuple, UOp] = {}
    self.vload_cache: dict[tuple, UOp] = {}
    self.reduce_result: dict[tuple[UOp, tuple[int, ...]], UOp] = {}
    self.stage: dict[UOp, tuple[UOp, UOp, UOp]] = {}  # staged LOAD -> (local buffer, layout index (placeholders), barrier)
    self.local_mem = 0
    self.n_acc = self.n_local = 0
    self.in_body = False
    self.cur_lanes: tuple[int, ...] = ()

  # *** thread ids ***
  def _setup_ids(self) -> None:
    k, t = self.k, self.t
    self.var: dict[tuple[int, int], UOp] = {}
    gparts = [(a, j) for a, j, p in self.plist if p.kind == GLOBAL and not _is1(p.size)]
    # GROUP threads outermost: consecutive hardware threads (dim 0) then take the LOCAL parts of output axes, which is
    # where the heuristics put the contiguous direction
    lparts = [(a, j) for a, j, p in self.plist if p.kind == GROUP and not _is1(p.size)] + \
             [(a, j) for a, j, p in self.plist if p.kind == LOCAL and not _is1(p.size)]
    self.lparts = lparts
    # local memory is per work-group: a staged kernel needs explicit work-groups even with no local parts
    self.has_local = bool(lparts) or bool(k.staged)
    size = lambda x: k.parts[x[0]][x[1]].size  # noqa: E731
    def bound(s: sint) -> int: return s if type(s) is int else int(s.vmax)
    ggroups = _split_dims(len(gparts))
    # counts of work-groups in dims 1 and 2 are limited on some GPUs: fall back to one flat dim
    if any(bound(prod(size(gparts[i]) for i in g)) > MAX_GRID_Y for g in ggroups[:-1]): ggroups = [list(range(len(gparts)))] if gparts else []
    lgroups = _split_dims(len(lparts))
    self.ndim = max(len(ggroups), len(lgroups), 1)
    gsz: list[sint] = [1]*self.ndim
    lsz: list[int] = [1]*self.ndim
    for d, grp in enumerate(reversed(ggroups)):
      sizes = [size(gparts[i]) for i in grp]
      total = prod(sizes)
      gsz[d] = total
      fn = "group" if self.has_local else "global"
      sp = UOp(Ops.SPECIAL, IDX, (), (f"gidx{d}", bound(total), fn))
      self._assign_group(sp, [gparts[i] for i in grp], sizes)
    for d, grp in enumerate(reversed(lgroups)):
      sizes = [size(lparts[i]) for i in grp]
      total = prod(sizes)
      if type(total) is not int: raise KernelOptError("local sizes must be concrete")
      lim = t.max_work_item_sizes[d] if d < len(t.max_work_item_sizes) else 1
      if total > lim: raise KernelOptError(f"local size {total} in dim {d} exceeds {t.name}'s max work-item size {lim}")
      lsz[d] = total
      sp = UOp(Ops.SPECIAL, IDX, (), (f"lidx{d}", total, "local"))
      self._assign_group(sp, [lparts[i] for i in grp], sizes)
    wg = prod(lsz)
    if wg > t.max_work_group_size:
      raise KernelOptError(f"work-group size {wg} exceeds {t.name}'s max work-group size {t.max_work_group_size}")
    self.wg = wg
    self.local_size = tuple(lsz) if self.has_local else None
    self.global_size = tuple(g*l for g, l in zip(gsz, lsz)) if self.has_local else tuple(gsz)

  def _assign_group(self, sp: UOp, parts: list[tuple[int, int]], sizes: list[sint]) -> None:
    for i, x in enumerate(parts):
      inner = prod(sizes[i+1:])
      v = sp if (type(inner) is int and inner == 1) else sp // inner
      if i > 0: v = v % sizes[i]
      self.var[x] = v.simplify()

  def lid_flat(self) -> UOp:
    """A flat local id (hardware order: dim 0 fastest) as a placeholder expression."""
    return _mixed_radix([self.ph[x] for x in self.lparts], [self.k.parts[a][j].size for a, j in self.lparts])

  # *** index expressions ***
  def view_sym(self, view: UOp) -> tuple[UOp, UOp]:
    st = self.k.sts[view]
    idxs = [UOp.const(IDX, 0) if _is1(s) else self.axis_expr[i] for i, s in enumerate(st.shape)]
    return st.to_indexed_uops(idxs)

  def view_base(self, view: UOp) -> tuple[UOp, UOp, Any]:
    """(index, valid) with thread ids and loops in place, lanes still placeholders; plus the linear form in the lanes."""
    if (c := self.view_cache.get(view)) is not None: return c
    idx, valid = self.view_sym(view)
    idx, valid = _subst(idx, self.conc), _subst(valid, self.conc)
    c = (idx, valid, self._linear(idx))
    self.view_cache[view] = c
    return c

  def _linear(self, idx: UOp) -> tuple[list[tuple[UOp, int]], int, dict[UOp, int]] | None:
    lane_set = set(self.lane_ph)
    terms, const = decompose(idx)
    rest, coeffs = [], {}
    for t, c in terms:
      if t in lane_set: coeffs[t] = coeffs.get(t, 0) + c
      elif _has(t, lane_set): return None
      else: rest.append((t, c))
    return rest, const, coeffs

  def lane_subst(self, x: UOp, lanes: tuple[int, ...]) -> UOp:
    m = {p: UOp.const(IDX, v) for p, v in zip(self.lane_ph, lanes)}
    return _subst(x, m)

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
      if self.lane_sizes[pos] % 4 != 0 or coeffs.get(p) != 1 or _has(valid, {p}): continue
      base = lanes[:pos] + (lanes[pos] - lanes[pos] % 4,) + lanes[pos+1:]
      if (const + sum(coeffs.get(q, 0)*v for q, v in zip(self.lane_ph, base))) % 4 == 0: return pos, base
    return None

  # *** memory ***
  def make_load(self, buf: UOp, idx: UOp, valid: UOp, dtype: DType, barrier: UOp | None = None) -> UOp:
    if valid.op is Ops.CONST and not valid.arg: return UOp.const(dtype, 0)
    src = (UOp(Ops.INDEX, buf.dtype, (buf, idx)),)
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
      idx = _subst(layout, self.conc)
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

  # *** values ***
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
    ret = ast_lowering.rewrite(u, self)
    if ret is None:  # no rule, or a rule that gave the node back unchanged (e.g. ALU over Variables only)
      if u.op in (Ops.VIEW, Ops.DEFINE_GLOBAL, Ops.CONST, Ops.DEFINE_VAR) or u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST): return u
      raise KernelError(f"cannot lower {u.op} in a kernel AST")
    return ret

  def _srcs(self, u: UOp) -> tuple[UOp, ...]: return tuple(self.val_cache[(s, self.cur_lanes)] for s in u.src)
  def _reduce_value(self, u: UOp) -> UOp:
    key = (u, tuple(self.cur_lanes[i] for i in self.out_lanes))
    if key not in self.reduce_result: raise KernelError("internal: reduce used before it was computed")
    return self.reduce_result[key]
  def _elementwise(self, u: UOp) -> UOp:
    srcs = self._srcs(u)
    if u.op is Ops.CAST and srcs[0].dtype == u.dtype: return srcs[0]
    if u.op is Ops.CAST and srcs[0].op is Ops.CONST: return UOp.const(u.dtype, srcs[0].arg)
    return _fold(u.op, u.dtype, srcs, u.arg)

  # *** program structure ***
  def lane_combos(self, positions: list[int]) -> list[tuple[int, ...]]:
    """Every lane tuple that varies the given lane positions (others 0), first position outermost."""
    combos = [tuple(0 for _ in self.lanes)]
    for pos in positions:
      combos = [c[:pos] + (v,) + c[pos+1:] for c in combos for v in range(self.lane_sizes[pos])]
    return combos

  def run(self) -> Lowered:
    k = self.k
    if k.reduceops: self.lower_reduce()
    self.lower_stores()
    uops = [*k.bufs, *k.vars] + self.em.linearize()
    if self.local_mem > self.t.local_mem_size:
      raise KernelOptError(f"kernel needs {self.local_mem} bytes of local memory, {self.t.name} has {self.t.local_mem_size}")
    return Lowered(k.name, tuple(uops), self.global_size, self.local_size, self.local_mem, tuple(k.bufs), tuple(k.vars), tuple(k.outbufs))

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

  def lower_reduce(self) -> None:
    k, em = self.k, self.em
    out_combos = self.lane_combos(self.out_lanes)
    red_combos = self.lane_combos(self.red_lanes)
    ranges = [r for _, r in self.loops]
    accs: dict[tuple[UOp, tuple[int, ...]], UOp] = {}
    for r in k.reduceops:
      adt = acc_dtype(r.dtype)
      for c in out_combos: accs[(r, c)] = self.define_acc(adt, reduce_identity(r.arg[0], r.dtype), ranges)
    # the outermost loop is where staged tiles are loaded
    first_loop = self.loops[0] if self.loops else None
    stage_here = bool(k.staged)
    self.in_body = True
    for i, (_, rng) in enumerate(self.loops):
      em.open(rng)
      if i == 0 and stage_here: self.emit_stage(first_loop[1])
    if stage_here and first_loop is None: self.emit_stage(None)
    assigns: dict[tuple[UOp, tuple[int, ...]], UOp] = {}
    def x_at(r: UOp, c: tuple[int, ...], u: tuple[int, ...], adt: DType) -> UOp:
      x = self.lower(r.src[0], tuple(c[i] if i in self.out_lanes else u[i] for i in range(len(self.lanes))))
      return x.cast(adt) if x.dtype != adt else x
    if len(out_combos) >= 4 and len(red_combos) > 1:
      # register tiles: one update per accumulator and unrolled step, step-major, so each step's operands are loaded
      # just before their products (low register pressure) and every product becomes an FMA. Each update reads the
      # previous one (never the DEFINE_ACC twice), so equal values of two steps cannot be merged by interning.
      cur = {key: a for key, a in accs.items()}
      for ui, u in enumerate(red_combos):
        last = ui == len(red_combos) - 1
        for r in k.reduceops:
          adt = acc_dtype(r.dtype)
          for c in out_combos:
            key = (r, c)
            upd = UOp(Ops.ASSIGN, adt, (accs[key], _fold(r.arg[0], adt, (cur[key], x_at(r, c, u, adt)))), ui)
            cur[key] = em.effect(upd, None if last else em.contrib[accs[key]])
      assigns = cur
    else:
      for r in k.reduceops:
        adt = acc_dtype(r.dtype)
        for c in out_combos:
          acc = accs[(r, c)]
          xs = [x_at(r, c, u, adt) for u in red_combos]
          # unrolled lanes combine as a balanced tree (short dependency chains), then into the accumulator
          while len(xs) > 1: xs = [_fold(r.arg[0], adt, (xs[i], xs[i+1])) if i + 1 < len(xs) else xs[i] for i in range(0, len(xs), 2)]
          assigns[(r, c)] = em.effect(UOp(Ops.ASSIGN, adt, (acc, _fold(r.arg[0], adt, (acc, xs[0])))))
    for i in reversed(range(len(self.loops))):
      if i == 0 and stage_here: em.effect(UOp(Ops.BARRIER, dtypes.void, ()))  # the tile is read: the next iteration may overwrite it
      em.close()
    self.in_body = False
    if self.k.parts_of(GROUP): assigns = self.group_reduce(assigns, out_combos)
    for (r, c), a in assigns.items():
      self.reduce_result[(r, tuple(c[i] for i in self.out_lanes))] = a.cast(r.dtype) if a.dtype != r.dtype else a

  def group_reduce(self, assigns: dict, out_combos: list) -> dict:
    """Combine the partial results of a GROUP's threads through local memory. Every thread stores its
    partial; for a power-of-two group a tree halves the live partials each step (log2 steps, one
    barrier each), otherwise every thread sums the partials in a loop. Every thread then reads the
    result (stores are gated to group index 0)."""
    em = self.em
    gx = next((a, j) for a, j, p in self.plist if p.kind == GROUP)
    gsize = self.k.parts[gx[0]][gx[1]].size
    lid_ph = self.lid_flat()
    lid = _subst(lid_ph, self.conc)
    true = UOp.const(dtypes.bool, True)
    stores, temps = [], {}
    for key, a in assigns.items():
      temps[key] = tmp = self.define_local(a.dtype, self.wg)
      stores.append(em.effect(UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, tmp.dtype, (tmp, lid)), a))))
    bar = em.effect(UOp(Ops.BARRIER, dtypes.void, tuple(stores)))
    out = {}
    if gsize & (gsize - 1) == 0:
      gvar = self.var[gx]
      step = gsize // 2
      while step >= 1:
        # threads g < step add partial g+step into partial g
        active = UOp(Ops.CMPLT, dtypes.bool, (gvar, UOp.const(IDX, step)))
        partner = _subst(lid_ph, {**self.conc, self.ph[gx]: gvar + step})
        stores = []
        for key, a in assigns.items():
          tmp = temps[key]
          mine = self.make_load(tmp, lid, true, a.dtype, bar)
          other = self.make_load(tmp, partner, active, a.dtype, bar)
          val = _fold(key[0].arg[0], a.dtype, (mine, other))
          stores.append(em.effect(UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, tmp.dtype, (tmp, lid)), val, active))))
        bar = em.effect(UOp(Ops.BARRIER, dtypes.void, tuple(stores)))
        step //= 2
      first = _subst(lid_ph, {**self.conc, self.ph[gx]: UOp.const(IDX, 0)})
      for key, a in assigns.items(): out[key] = self.make_load(temps[key], first, true, a.dtype, bar)
      return out
    g = UOp(Ops.RANGE, IDX, (UOp.const(IDX, 0), UOp.const(IDX, gsize)), len(self.loops))
    lid_g = _subst(lid_ph, {**self.conc, self.ph[gx]: g})
    accs = {key: self.define_acc(a.dtype, reduce_identity(key[0].arg[0], key[0].dtype), [g]) for key, a in assigns.items()}
    em.open(g)
    for key, a in assigns.items():
      ld = self.make_load(temps[key], lid_g, true, a.dtype, bar)
      out[key] = em.effect(UOp(Ops.ASSIGN, a.dtype, (accs[key], _fold(key[0].arg[0], a.dtype, (accs[key], ld)))))
    em.close()
    return out

  def emit_stage(self, r0: UOp | None) -> None:
    """Copy every staged load's tile into local memory: all threads of the work-group load it
    cooperatively (consecutive threads read consecutive addresses), then a barrier."""
    k, em = self.k, self.em
    r0x = self.loops[0][0] if self.loops else None
    lid_ph = self.lid_flat()
    lid = _subst(lid_ph, self.conc)
    stores: list[UOp] = []
    pending: list[tuple[UOp, UOp, UOp]] = []
    loads = []
    for r in k.reduceops:
      for u in r.src[0].toposort():
        if u.op is Ops.LOAD and u.src[0].arg in k.staged and u not in loads: loads.append(u)
    for ld in loads:
      buf, view = ld.src[0], ld.src[1]
      dt = buf.dtype.base
      sym_idx, sym_valid = self.view_sym(view)
      deps = {u for u in sym_idx.toposort()} | {u for u in sym_valid.toposort()}
      tile = [(a, j) for a, j, p in self.plist if self.ph[(a, j)] in deps and p.kind != GLOBAL and (a, j) != r0x and not _is1(p.size)]
      sizes = {x: k.parts[x[0]][x[1]].size for x in tile}
      if not all(type(s) is int for s in sizes.values()): raise KernelOptError("STAGE needs concrete tile sizes")
      # layout: reduce-axis parts outermost, then output axes in natural order (upcast lanes innermost, so reads vectorize)
      layout = [x for x in tile if x[0] >= k.n_out] + [x for x in tile if x[0] < k.n_out]
      S = prod(sizes[x] for x in layout)
      lbuf = self.define_local(dt, S)
      layout_idx = _mixed_radix([self.ph[x] for x in layout], [sizes[x] for x in layout])
      # loader order: the part with the smallest global stride innermost (coalesced reads)
      terms, const = decompose(sym_idx)
      coef: dict[UOp, int] = {}
      for t, c in terms: coef[t] = coef.get(t, 0) + c
      nonlinear = {u for t, _ in terms if t.op is not Ops.RANGE for u in t.toposort()}  # placeholders inside div/mod terms
      order = sorted(tile, key=lambda x: -abs(coef[self.ph[x]]) if self.ph[x] in coef and self.ph[x] not in nonlinear else -math.inf)
      q = order[-1] if order else None
      vw = 1
      # float4 reads: q steps the global index by exactly 1 and everything else keeps it 4-aligned
      if q is not None and coef.get(self.ph[q]) == 1 and self.ph[q] not in nonlinear and sizes[q] % 4 == 0 and dt != dtypes.bool and \
          const % 4 == 0 and all(c % 4 == 0 for t, c in coef.items() if t is not self.ph[q]) and self.ph[q] not in set(sym_valid.toposort()):
        vw = 4
      units = S // vw
      n_iter = -(-units // self.wg)
      e = UOp(Ops.RANGE, IDX, (UOp.const(IDX, 0), UOp.const(IDX, n_iter)), ("stage", len(pending))) if n_iter > 1 else UOp.const(IDX, 0)
      if n_iter > 1: em.open(e)
      unit = e * self.wg + lid
      gate = (unit < units) if units % self.wg != 0 else None
      osz = [sizes[x] for x in order]
      coords: dict[UOp, UOp] = {}
      flat = unit * vw
      for i, x in enumerate(order):
        inner = prod(osz[i+1:])
        cval = flat // inner if inner != 1 else flat
        if i > 0: cval = cval % osz[i]
        coords[self.ph[x]] = cval
      m = {**self.conc, **coords}
      if r0 is not None: m[self.ph[r0x]] = r0
      gidx = _subst(sym_idx, m)
      gvalid = _subst(sym_valid, m)
      if gate is not None: gvalid = (gvalid & gate).simplify() if not (gvalid.op is Ops.CONST) else (gate if gvalid.arg else gvalid)
      val = self.make_load(buf, gidx, gvalid, dt.vec(vw) if vw > 1 else dt)
      lidx0 = _subst(layout_idx, coords)
      # q innermost in the layout too: the vector's lanes are consecutive there, and 4-aligned (coord_q is a multiple of 4
      # and every outer stride a multiple of size_q)
      lin_ok = vw > 1 and bool(layout) and layout[-1] == q
      gsrc = () if gate is None else (gate,)
      if lin_ok:
        stores.append(em.effect(UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, lbuf.dtype, (lbuf, lidx0)), val if val.op is Ops.LOAD else
                                                              UOp.const(dt.vec(4), 0), *gsrc))))
      else:
        for kk in range(vw):
          li = _subst(layout_idx, {**coords, self.ph[q]: coords[self.ph[q]] + kk}) if vw > 1 else lidx0
          lane_val = UOp(Ops.GEP, dt, (val,), kk) if vw > 1 and val.op is Ops.LOAD else (val if vw == 1 else UOp.const(dt, 0))
          stores.append(em.effect(UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, lbuf.dtype, (lbuf, li)), lane_val, *gsrc))))
      if n_iter > 1: em.close()
      pending.append((ld, lbuf, layout_idx))
    bar = em.effect(UOp(Ops.BARRIER, dtypes.void, tuple(stores)))
    for ld, lbuf, layout_idx in pending: self.stage[ld] = (lbuf, layout_idx, bar)

  def lower_stores(self) -> None:
    k = self.k
    out_combos = self.lane_combos(self.out_lanes)
    gate_g: UOp | None = None
    for a, j, p in self.plist:
      if p.kind == GROUP and not _is1(p.size): gate_g = UOp(Ops.CMPLT, dtypes.bool, (self.var[(a, j)], UOp.const(IDX, 1)))
    for st in k.ast.src:
      buf, view, value = st.src
      dt = buf.dtype.base
      idx, valid, lin = self.view_base(view)
      done: set[tuple[int, ...]] = set()  # membership only
      for c in out_combos:
        if c in done: continue
        v = self.vec_lane(idx, valid, lin, c, dt, self.out_lanes)
        if v is not None and v[1] == c:
          pos, base = v
          group = [c[:pos] + (c[pos] + kk,) + c[pos+1:] for kk in range(4)]
          vals = [self._store_val(value, g, dt) for g in group]
          bi, bv = self.view_at(view, base)
          self._store(buf, bi, bv, UOp(Ops.VECTORIZE, dt.vec(4), tuple(vals)), gate_g)
          done.update(group)
          continue
        i, vv = self.view_at(view, c)
        self._store(buf, i, vv, self._store_val(value, c, dt), gate_g)

  def _store_val(self, value: UOp, lanes: tuple[int, ...], dt: DType) -> UOp:
    v = self.lower(value, lanes)
    if v.dtype != dt: v = UOp.const(dt, v.arg) if v.op is Ops.CONST else UOp(Ops.CAST, dt, (v,))
    return v

  def _store(self, buf: UOp, idx: UOp, valid: UOp, val: UOp, gate: UOp | None) -> None:
    if gate is not None: valid = gate if (valid.op is Ops.CONST and valid.arg) else UOp(Ops.AND, dtypes.bool, (valid, gate))
    if valid.op is Ops.CONST and not valid.arg: return
    src = (UOp(Ops.INDEX, buf.dtype, (buf, idx)), val) + (() if valid.op is Ops.CONST else (valid,))
    self.em.effect(UOp(Ops.STORE, dtypes.void, src))

def _is1(s: sint) -> bool: return type(s) is int and s == 1

# AST nodes -> values of one lane combination (ctx is the Lowerer; rule names show in replay reports)
ast_lowering = PatternMatcher([
  (UPat(Ops.LOAD, name="x"), lambda ctx, x: ctx.load(x, ctx.cur_lanes), "load_through_view"),
  (UPat(Ops.VALID, name="x"), lambda ctx, x: ctx.view_at(x.src[0], ctx.cur_lanes)[1], "valid_to_mask"),
  (UPat(Ops.REDUCE_AXIS, name="x"), lambda ctx, x: ctx._reduce_value(x), "reduce_to_accumulator"),
  (UPat(Ops.BIND, name="x"), lambda ctx, x: x.src[0], "bind_to_variable"),
  (UPat((*GroupOp.ALU, Ops.CAST, Ops.BITCAST), name="x"), lambda ctx, x: ctx._elementwise(x), "elementwise"),
], name="ast_lowering")

def lower(k: Kernel, target: Target) -> Lowered:
  return Lowerer(k, target).run()

__all__ = ["lower", "Lowered", "Lowerer", "Emitter", "decompose", "build", "acc_dtype", "reduce_identity"]
