"""Each captured kernel's indexing proven in bounds for every value of its thread ids, loop counters and Variables, not
only for the values a stored input reaches (DESIGN.md §9 "Evidence beyond execution").

What is lowered: a program-level row's AST with its stored opts and target (the target as `replay_program_full` builds
it: Target.from_dict of the stored, host-free fields); a kernel-level row's output AST and each kernel of a
schedule-level row's output with the heuristic's opts (`heuristic.choose_opts`, what `to_program(ast, None, target)`
renders) for the fixed named target `KERNEL_TARGET` (POCL_CPU: the device the model stores were captured on). Lowering is
`run_passes(Kernel(ast, opts), target)`, the pipeline `to_program` renders, kept open to read the program before
`narrow_indices` and the map it made (`LowerState.renamed`, Narrowing.new).

What is proven, on the program as rendered (after narrowing, with the C semantics of replay.prove.smt):
- every LOAD/STORE through INDEX(buffer, idx): `gate => 0 <= idx and idx + width - 1 < size`, gate being the access's
  valid source (the renderer reads `gate ? buf[idx] : 0` and writes `if (gate) ...`; the lowering emits no IF), width
  the vector width (a float4 access covers idx..idx+3). Global buffers: size is the allocated BUFFER's (kernel and
  schedule rows: the row's buffer map into the input graph), else (program rows, or rows without a map) one past the
  largest position the AST's views reach over the Variables' ranges (`_sizes_from_views`: what `replay check --exec`
  allocates, jobs.program_specs, but evaluated without int32 wrap-around). Local arrays: their declared size.
- every node `narrow_indices` retyped to int32: its 64-bit value in the program before narrowing fits int32 (a loop
  counter: also its value after the last increment), for every value.
Thread ids range over their launch size (symbolic global sizes included), loop counters over [start, end), Variables
over their declared [min, max]. A value the index reads from memory (a gather's loaded position) is a free variable of its
dtype: the proof then covers every content of that memory, and a counterexample says `reads_memory`.
"""
from __future__ import annotations
import itertools, json, time
from dataclasses import dataclass
from typing import Any, Callable
from tinysched.dtype import dtypes
from tinysched.ops import Ops, GroupOp
from tinysched.uop import UOp
from tinysched.helpers import cdiv, cmod
from tinysched.codegen import heuristic, lowerer
from tinysched.codegen.kernel import Kernel
from tinysched.codegen.target import Target, POCL_CPU
from tinysched.codegen.narrow import NARROW, INT32_MIN, INT32_MAX
from replay import levels
from replay.levels.program import stored_opts
from replay.execute.jobs import buffer_specs
from replay.execute.reference import reach
from replay.store.sqlite import Store
from replay.prove import smt
from replay.prove.smt import z3

KERNEL_TARGET = POCL_CPU  # kernel/schedule rows carry no target: they are lowered for this one, with the heuristic's opts
_RANK = {"proven": 0, "unknown": 1, "counterexample": 2}
_PURE = frozenset({Ops.CONST, Ops.SPECIAL, Ops.RANGE, Ops.DEFINE_VAR}) | GroupOp.ALU | {Ops.CAST}
NO_Z3 = "z3 is not installed (pip install z3-solver)"
W = 66  # bounds are compared in 66 bits: idx + width - 1 of a 64-bit idx cannot wrap there

@dataclass
class IndexProof:
  """One capture row: `proven` (every access and narrowed node of every kernel, for all values), `counterexample`
  (`counterexample` says where, at which values, and the Variables a `replay check --exec` run would need) or
  `unknown` (`reason`: a solver time-out or an index it cannot state)."""
  db: str | None
  level: str
  input_key: str | None
  label: str | None
  status: str
  accesses: int
  narrowed: int
  counterexample: dict | None
  reason: str | None
  seconds: float

# *** which kernels a row holds, with opts, target and buffer sizes ***

def _sizes_from_graph(ast: UOp, graph: UOp, bufmap: list | None) -> dict[int, tuple[int, str]] | None:
  """{DEFINE_GLOBAL number: (elements of its dtype, "buffer")} from the input graph's BUFFERs through the row's map."""
  if not bufmap: return None
  specs = buffer_specs(graph)
  nbytes = {u.arg[0]: u.arg[1][1] * u.arg[1][2].itemsize for u in graph.toposort() if u.op is Ops.BUFFER}
  out: dict[int, tuple[int, str]] = {}
  for g in (u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL):
    if not (0 <= g.arg < len(bufmap)) or bufmap[g.arg] not in specs or not isinstance(specs[bufmap[g.arg]][0], int): return None
    out[g.arg] = (nbytes[bufmap[g.arg]] // g.dtype.base.itemsize, "buffer")
  return out

_EXACT: dict[Ops, Callable[..., int]] = {Ops.ADD: lambda a, b: a + b, Ops.MUL: lambda a, b: a * b, Ops.MAX: max, Ops.NEG: lambda a: -a,
          Ops.IDIV: lambda a, b: cdiv(a, b) if b else 0, Ops.MOD: lambda a, b: cmod(a, b) if b else 0}

def _exact(x: Any, vv: dict[UOp, int]) -> int:
  """A shape entry's value as a Python int (no wrap-around: the exact value the 64-bit index arithmetic computes)."""
  if isinstance(x, int): return x
  env: dict[UOp, int] = {}
  for u in x.toposort():
    if u.op is Ops.CONST: env[u] = int(u.arg)
    elif u.op is Ops.DEFINE_VAR: env[u] = vv[u]
    elif u.op in (Ops.BIND, Ops.CAST): env[u] = env[u.src[0]]
    elif u.op in _EXACT: env[u] = _EXACT[u.op](*(env[s] for s in u.src))
    else: raise ValueError(f"cannot evaluate {u.op} in a shape entry")
  return env[x]

def _box_reach(v, vv: dict[UOp, int]) -> int:
  """One past the largest position one view addresses over its valid box (each dim at the end its stride favours)."""
  top = _exact(v.offset, vv)
  for d, (s, st) in enumerate(zip(v.shape, v.strides)):
    s, st = _exact(s, vv), _exact(st, vv)
    lo, hi = (max(_exact(v.mask[d][0], vv), 0), min(_exact(v.mask[d][1], vv), s)) if v.mask is not None else (0, s)
    if lo >= hi: return 0
    top += st * ((hi - 1) if st > 0 else lo)
  return top + 1

def _sizes_from_views(ast: UOp) -> dict[int, tuple[int, str]]:
  """One past the largest position the AST's views reach, the largest over the corners of the Variables' ranges (a
  symbolic view is linear in each Variable). A stack of int views: every position, by the reference's own view code
  (replay.execute.reference.reach); a symbolic stack: the innermost view's whole valid box (an upper bound).
  Not jobs.program_specs itself: it evaluates symbolic entries with int32 wrap-around (sym_infer)."""
  views = [(u.src[0].arg, u.src[1].arg) for u in ast.toposort() if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.DEFINE_GLOBAL]
  vs = list(dict.fromkeys(x for _, st in views for x in st.vars()))
  corners = [dict(zip(vs, c)) for c in itertools.product(*[(v.arg[1], v.arg[2]) for v in vs])] if len(vs) <= 4 else [{v: v.arg[2] for v in vs}]
  out: dict[int, tuple[int, str]] = {}
  for b, st in views:
    if len(st.views) > 1 and not st.vars(): n = reach(st, {})
    else: n = max(_box_reach(st.views[0], c) for c in corners)
    out[b] = (max(n, 1, out.get(b, (0, ""))[0]), "view reach")
  return out

def row_kernels(level: str, data_in: bytes, data_out: bytes, extra: dict | None, target: Target = KERNEL_TARGET) -> list[tuple]:
  """[(kernel number in the row, ast, opts or None for the heuristic's, target, {buffer: (size, source)})] of one row.
  A level whose output is graphs (kernel ASTs) is lowered for `target`, its buffers sized by the input graph (its root,
  Level.shrinkable) through the row's buffer map (extra["bufs"]: one map, or one per kernel); a level whose output is
  source has the AST, opts and target in its input."""
  L = levels.get(level)
  if not L.graph_output:
    doc = L.decode_input(data_in)
    ast = doc.roots()[0]
    return [(0, ast, stored_opts(doc), Target.from_dict(doc.doc.get("target") or {}), _sizes_from_views(ast))]
  graph, _ = L.shrinkable(data_in)
  bufs = (extra or {}).get("bufs") or []
  maps = bufs if bufs and isinstance(bufs[0], list) else [bufs]
  return [(i, a, None, target, (_sizes_from_graph(a, graph, maps[i]) if i < len(maps) else None) or _sizes_from_views(a))
          for i, a in enumerate(L.graphs(L.decode_output(data_out))) if a.op is Ops.SINK]  # EMPTY, COPY...: no program

# *** one kernel ***

def lower_for_proof(ast: UOp, opts, target: Target):
  """(opts, the final LowerState, the program before narrow_indices), as to_program lowers it."""
  if opts is None: opts = heuristic.choose_opts(ast, target)[0]
  pre: list[UOp] = []
  def after(name: str, lw) -> None:
    if name == "linearize": pre[:] = lw.uops
  lw = lowerer.run_passes(Kernel(ast, tuple(opts)), target, after=after)
  return tuple(opts), lw, pre

def _impure(u: UOp) -> UOp | None:
  """A node the index depends on that is not a function of thread ids, loops and Variables (a load), or None."""
  for x in u.toposort():
    if x.op not in _PURE or not (dtypes.is_int(x.dtype) or x.dtype == dtypes.bool): return x
  return None

def _ext(t: Any, signed: bool = True) -> Any:
  if z3.is_bool(t): return z3.If(t, z3.BitVecVal(1, W), z3.BitVecVal(0, W))
  return z3.SignExt(W - t.size(), t) if signed else z3.ZeroExt(W - t.size(), t)

def _seed_threads(enc: smt.Encoding, uops, lw) -> None:
  """Thread ids first, as the device has them: a size_t below the launch size (a symbolic global size is smaller than
  the bound the SPECIAL's arg records), converted to the SPECIAL's dtype (an int32 one wraps, as C's conversion does)."""
  gs, ls = lw.global_size, lw.local_size
  for u in uops:
    if u.op is not Ops.SPECIAL or u in enc.terms: continue
    name, bound, fn = u.arg
    d = int(name[-1])
    t = z3.BitVec(name if name not in enc.free else f"{name}#{len(enc.free)}", 64)
    enc.free[str(t)] = t
    enc.facts += [t >= 0, t < int(bound)]
    if fn != "local" and d < len(gs) and not isinstance(gs[d], int):
      g = enc.add(gs[d])
      g = z3.SignExt(64 - g.size(), g) if g.size() < 64 else g
      enc.facts.append(t < (g / (ls[d] if fn == "group" and ls else 1)))
    bits = 8 * u.dtype.itemsize
    enc.terms[u] = t if bits == 64 else z3.Extract(bits - 1, 0, t)

def _model_values(m, enc: smt.Encoding) -> dict[str, int | bool]:
  return {n: smt._value(m, v) for n, v in sorted(enc.free.items()) if m.eval(v, model_completion=False) is not None}

def _var_vals(m, enc: smt.Encoding, uops) -> dict[str, int]:
  """The Variables' values (what `replay check --exec` would be given), the unconstrained ones at their minimum."""
  out = {}
  for u in uops:
    if u.op is Ops.DEFINE_VAR and u in enc.terms: out[u.arg[0]] = smt._value(m, enc.terms[u]) if m is not None else u.arg[1]
  return out

def _solve(enc: smt.Encoding, claims: list[tuple[Any, Any]], timeout_ms: int):
  """Prove every claim (a z3 Bool, with a payload): ('proven', None, None), ('counterexample', payload, model) for one
  false claim, or ('unknown', reason, None). One solver call for all claims; after a time-out the claims one by one
  (a smaller problem each), within one more `timeout_ms` in all."""
  if not claims: return "proven", None, None
  def check(cs, ms: int):
    s = z3.Solver()
    s.set("timeout", max(1, ms))
    s.add(*enc.facts)
    s.add(z3.Not(z3.And(*[c for c, _ in cs])))
    r = s.check()
    if r == z3.sat:
      m = s.model()
      return next((("counterexample", p, m) for c, p in cs if z3.is_false(m.eval(c, model_completion=True))),
                  ("unknown", "the solver's model satisfies every claim (internal)", None))
    return ("proven", None, None) if r == z3.unsat else ("unknown", f"the solver gave up ({s.reason_unknown()}; time-out {timeout_ms} ms)", None)
  first = check(claims, timeout_ms)
  if first[0] != "unknown" or len(claims) == 1: return first
  deadline, worst = time.perf_counter() + timeout_ms / 1000, first
  for c in claims:
    left = int((deadline - time.perf_counter()) * 1000)
    if left <= 0: return worst
    v = check([c], left)
    if v[0] == "counterexample": return v
    if v[0] == "unknown": worst = v
  return ("proven", None, None) if worst is first else worst

def prove_kernel(ast: UOp, opts, target: Target, sizes: dict[int, tuple[int, str]], timeout_ms: int = 10_000) -> dict:
  """{status, accesses, narrowed, counterexample, reason} for one kernel AST."""
  if z3 is None: return {"status": "unknown", "accesses": 0, "narrowed": 0, "counterexample": None, "reason": NO_Z3}
  try: opts, lw, pre = lower_for_proof(ast, opts, target)
  except Exception as e:  # noqa: BLE001 (a kernel the code generator refuses has no program to prove: say why)
    return {"status": "unknown", "accesses": 0, "narrowed": 0, "counterexample": None, "reason": f"lowering failed: {type(e).__name__}: {e}"}
  uops = list(lw.uops)
  where = {"opts": [list(o.to_tuple()) for o in opts], "target": target.name, "kernel_name": lw.k.name}
  # 1. accesses of the rendered program
  enc, claims, n_acc = smt.Encoding(), [], 0
  _seed_threads(enc, uops, lw)
  for i, u in enumerate(uops):
    if u.op not in (Ops.LOAD, Ops.STORE) or u.src[0].op is not Ops.INDEX: continue
    index = u.src[0]
    buf, idx = index.src[0], index.src[1]
    if buf.op is Ops.DEFINE_GLOBAL:
      if buf.arg not in sizes: return {"status": "unknown", "accesses": n_acc, "narrowed": 0, "counterexample": None,
                                       "reason": f"no size known for buffer data{buf.arg}", **where}
      size, source = sizes[buf.arg]
      name = f"data{buf.arg}"
    elif buf.op is Ops.DEFINE_LOCAL: size, source, name = int(buf.arg[1]), "local array", str(buf.arg[0])
    else: continue
    gates = [s for s in u.src[1:] if s.op is not Ops.BARRIER] if u.op is Ops.LOAD else list(u.src[2:3])
    width = u.dtype.count if u.op is Ops.LOAD else u.src[1].dtype.count
    reads = next((x for x in [idx, *gates] if _impure(x) is not None), None)
    n_acc += 1
    it = _ext(enc.add(idx))
    gt = enc.add(gates[0]) if gates else z3.BoolVal(True)
    ok = z3.And(it >= 0, it + (width - 1) < size)
    claims.append((z3.Implies(gt, ok), {"kind": "access", "op": u.op.name, "buffer": name, "program_node": i,
                                        "buffer_number": buf.arg if buf.op is Ops.DEFINE_GLOBAL else None,
                                        "dtype": str(u.dtype if u.op is Ops.LOAD else u.src[1].dtype), "width": width,
                                        "size": size, "size_source": source, "index_expr": idx.render_sym()[:400],
                                        "gate_expr": gates[0].render_sym()[:400] if gates else None, "reads_memory": reads is not None,
                                        "_it": it, "_gt": gt}))
  status, p, m = _solve(enc, claims, timeout_ms)
  res: dict = {"status": status, "accesses": n_acc, "narrowed": 0, "counterexample": None, "reason": None, **where}
  if status == "counterexample":
    cex = {k: v for k, v in p.items() if not k.startswith("_")}
    cex.update(index=smt._value(m, p["_it"]), gate=bool(z3.is_true(m.eval(p["_gt"], model_completion=True))),
               values=_model_values(m, enc), var_vals=_var_vals(m, enc, uops), **where)
    res["counterexample"] = cex
  if status == "unknown": res["reason"] = p
  # 2. nodes narrowed to int32: their 64-bit value fits, for every value
  enc2, nclaims = smt.Encoding(), []
  _seed_threads(enc2, pre, lw)
  for u in pre:
    n = lw.renamed.get(u)
    if n is None or u.dtype != lowerer.IDX or n.dtype != NARROW or u.op in (Ops.CONST, Ops.DEFINE_VAR): continue
    if _impure(u) is not None: continue  # narrowing only retypes pure nodes: nothing to state
    t = _ext(enc2.add(u))
    hi = INT32_MAX - 1 if u.op is Ops.RANGE else INT32_MAX  # a loop counter is incremented once past its last value
    nclaims.append((z3.And(t >= INT32_MIN, t <= hi), {"kind": "narrowing", "op": u.op.name, "expr": u.render_sym()[:400],
                                                      "range_claimed": [int(u.vmin), int(u.vmax)], "_t": t}))
  res["narrowed"] = len(nclaims)
  s2, p2, m2 = _solve(enc2, nclaims, timeout_ms)
  if s2 == "counterexample":
    cex = {k: v for k, v in p2.items() if not k.startswith("_")}
    cex.update(value=smt._value(m2, p2["_t"]), values=_model_values(m2, enc2), var_vals=_var_vals(m2, enc2, pre), **where)
    if res["counterexample"] is None: res.update(status="counterexample", counterexample=cex)
    else: res["counterexample"]["also"] = cex  # an out-of-bounds access first, the narrowing behind it next
  elif s2 == "unknown" and res["status"] == "proven": res.update(status="unknown", reason=f"narrowed nodes: {p2}")
  return res

# *** rows and stores ***

def _kernel_key(ast: UOp, opts, target: Target, sizes: dict) -> tuple:
  return (ast.key, None if opts is None else tuple(opts), target.stable_repr(), tuple(sorted((b, n) for b, (n, _) in sizes.items())))

def prove_row(level: str, data_in: bytes, data_out: bytes, extra: dict | None, timeout_ms: int = 10_000,
              target: Target = KERNEL_TARGET, cache: dict | None = None) -> IndexProof:
  """Prove one capture row's kernels (db and label are the caller's to fill). `cache`: results by (AST key, opts,
  target, sizes), shared across rows so a kernel captured many times is proven once."""
  t0 = time.perf_counter()
  def done(status, acc=0, nar=0, cex=None, reason=None):
    return IndexProof(None, level, None, None, status, acc, nar, cex, reason, time.perf_counter() - t0)
  if z3 is None: return done("unknown", reason=NO_Z3)
  try: kernels = row_kernels(level, data_in, data_out, extra, target)
  except Exception as e:  # noqa: BLE001 (an undecodable row is not proven: say why)
    return done("unknown", reason=f"cannot decode the row: {type(e).__name__}: {e}")
  if not kernels: return done("proven", reason="no generated kernel (the row's output is a buffer op)")
  worst: dict | None = None
  acc = nar = 0
  for i, ast, opts, tg, sizes in kernels:
    key = _kernel_key(ast, opts, tg, sizes)
    r = cache.get(key) if cache is not None else None
    if r is None:
      r = prove_kernel(ast, opts, tg, sizes, timeout_ms)
      if cache is not None: cache[key] = r
    acc, nar = acc + r["accesses"], nar + r["narrowed"]
    if worst is None or _RANK[r["status"]] > _RANK[worst["status"]]: worst = {**r, "kernel": i}
  assert worst is not None
  cex = None if worst["counterexample"] is None else {**worst["counterexample"], "kernel": worst["kernel"]}
  reason = worst["reason"] if worst["status"] != "proven" else None
  if reason and len(kernels) > 1: reason = f"kernel {worst['kernel']}: {reason}"
  return done(worst["status"], acc, nar, cex, reason)

def prove_stores(paths: list[str], level: str | None = None, label: str | None = None, key: str | None = None, timeout_ms: int = 10_000,
                 progress: Callable[[int, int, IndexProof], None] | None = None, target: Target = KERNEL_TARGET) -> list[IndexProof]:
  """Every row of the stores (or of `level`; rows with `label`; rows whose input or output key starts with `key`),
  identical kernels proven once (by AST key, opts, target and buffer sizes)."""
  todo = []
  stores = [Store(p, readonly=True) for p in paths]
  for p, s in zip(paths, stores): todo += [(p, s, r) for r in s.captures(level=level, label=label, key=key)]
  try: return _prove_rows(todo, timeout_ms, progress, target)
  finally:
    for s in stores: s.close()

def _prove_rows(todo: list, timeout_ms: int, progress: Callable[[int, int, IndexProof], None] | None, target: Target) -> list[IndexProof]:
  cache: dict = {}
  out: list[IndexProof] = []
  for i, (p, s, r) in enumerate(todo):
    try: extra = json.loads(r.get("extra") or "{}")
    except ValueError: extra = {}
    try: din, dout = s.blob(r["input_key"]), s.blob(r["output_key"])
    except Exception as e:  # noqa: BLE001 (a damaged payload is not proven: say why)
      pr = IndexProof(None, r["level"], None, None, "unknown", 0, 0, None, f"cannot read the row: {e}", 0.0)
    else: pr = prove_row(r["level"], din, dout, extra, timeout_ms, target, cache)
    pr.db, pr.input_key, pr.label = p, r["input_key"], r.get("label")
    out.append(pr)
    if progress is not None: progress(i + 1, len(todo), pr)
  return out

def summary(proofs: list[IndexProof]) -> dict[str, int]:
  """Counts by status, and the accesses and narrowed nodes checked."""
  out = {"proven": 0, "unknown": 0, "counterexample": 0}
  for p in proofs: out[p.status] += 1
  return {**out, "rows": len(proofs), "accesses": sum(p.accesses for p in proofs), "narrowed": sum(p.narrowed for p in proofs)}

__all__ = ["IndexProof", "prove_row", "prove_stores", "prove_kernel", "row_kernels", "lower_for_proof", "summary", "KERNEL_TARGET"]
