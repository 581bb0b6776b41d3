"""Triage of one changed capture, with no model re-run: which rule application made it differ (`blame`), and the
smallest input that still differs (`minimize`).

Both compare two versions of the code on the same inputs, each run by a probe (replay/triage/probe.py): "old" (by default
the commit the capture was made at, checked out in a temporary worktree) and "new" (this checkout). The old code must
reproduce the stored output first, or nothing it says about the capture can be trusted.

blame: rewrite applications are counted over the whole replay of the input (tinysched.rewrite.rewrite_limit, like
LLVM's -opt-bisect-limit). With a limit of k, each side reports a digest of the k applications it admitted (rule
names, and the content keys of each node and its result, in order). That is a prefix property: once old and new part
they stay parted, so the smallest k where the digests differ is found by bisection, and the k-th application is the
culprit: the rule, the node and what the new code made of it, next to what the old code did at its k-th. (Comparing
the limited runs' outputs instead would not do: a half-rewritten kernel often fails a later pass on both sides alike,
which hides where they parted.)

minimize (the levels whose inputs can shrink: kernel and schedule): greedy delta debugging on the stored pre-sink or big
graph. Candidates replace one value node by one of its operands of the same dtype and shape, by a constant or by a load
of a fresh buffer of its shape, or drop a store; the smallest candidate on which old and new still both succeed and
still differ is kept, until no candidate shrinks it or the time is up. The result is written as a standalone pytest
file that rebuilds the minimal input from its encoding and asserts the old output: it fails on the change and passes
without it.
"""
from __future__ import annotations
import contextlib, math, time
from pathlib import Path
from typing import Any, Callable, Iterator
from tinysched.dtype import dtypes
from tinysched.ops import Ops
from tinysched.shape import ShapeTracker, View
from tinysched.uop import UOp
from replay import levels
from replay.store.encode import IncompatibleCapture
from replay.report import info
from replay.triage.probe import Probe, applications, outcome, sha

class TriageError(Exception):
  """Cannot triage this capture (with the message saying why and what to do)."""

def find_row(store, key: str) -> dict:
  """The one capture `key` (a prefix of its input or output key) names, as `replay show` finds it."""
  try: return info.find_row(store, str(store.path), key)[0]
  except KeyError as e: raise TriageError(str(e.args[0])) from None
  except IncompatibleCapture as e: raise TriageError(f"capture {key} is unreadable: {e}") from None

def capture_commit(store, row: dict) -> str:
  """The commit the capture's run was made at (the default old code)."""
  run = next((r for r in store.runs() if r["id"] == row["run_id"]), None)
  if run is None or not run.get("git_commit"): raise TriageError("the capture's run records no git commit: pass --old-tree DIR or --old REV")
  if run.get("git_dirty"):
    raise TriageError(f"the capture was made from a modified checkout of {run['git_commit'][:12]}: its code cannot be checked out; "
                      "pass --old-tree DIR (a checkout of the code that made it) or --old REV")
  return str(run["git_commit"])

@contextlib.contextmanager
def probes(old_tree: Path, new_tree: Path) -> Iterator[tuple[Probe, Probe]]:
  with Probe(old_tree, "old") as old, Probe(new_tree, "new") as new: yield old, new

def _check_pair(old: Probe, new: Probe, level: str, data: bytes, stored: bytes) -> tuple[dict, dict]:
  a_old, a_new = old.ask(level, data), new.ask(level, data)
  if "error" in a_old: raise TriageError(f"the old code cannot replay this capture: {a_old['error']}")
  if a_old["key"] != sha(stored):
    raise TriageError("the old code does not reproduce the stored output of this capture (it is not the code that made it): "
                      "pass the right one with --old REV or --old-tree DIR")
  return a_old, a_new

def program_rows_for(store, row: dict) -> list[dict]:
  """The program-level rows of `store` whose kernel AST is one the kernel (or schedule) row `row` outputs: where a
  wrong number whose kernel AST old and new code agree on is made (code generation)."""
  try:
    lv = levels.get(row["level"])
    if not (lv.output_is_kernel or lv.lists_kernels): return []
    out = lv.decode_output(store.blob(row["output_key"]))
    asts = {a.key for a in (out if isinstance(out, list) else [out])}
  except Exception: return []  # noqa: BLE001 (an output this code cannot read leads nowhere)
  found = []
  for name in [n for n in levels.names() if levels.get(n).lowers]:
    found += _rows_of_asts(store, name, asts)
  return found

def _rows_of_asts(store, level: str, asts: set) -> list[dict]:
  """The rows of `level` (one that lowers a kernel AST) whose input's AST is one of `asts`."""
  found = []
  for r in store.captures(level=level):
    if r.get("_invalid"): continue
    try: root = levels.get(level).decode_input(store.blob(r["input_key"])).roots()[0]
    except Exception: continue  # noqa: BLE001
    if root.key in asts: found.append(r)
  return found

def _differing_program_row(store, rows: list[dict], old: Probe, new: Probe) -> dict | None:
  """The first of `rows` (program_rows_for) on which old and new code differ (and the old code reproduces it)."""
  for r in rows:
    d, stored = store.blob(r["input_key"]), store.blob(r["output_key"])
    try: a_old, a_new = _check_pair(old, new, r["level"], d, stored)
    except TriageError: continue
    if outcome(a_old) != outcome(a_new): return r
  return None

def blame(store, key: str, old_tree: Path, new_tree: Path) -> dict[str, Any]:
  """The first rule application (else lowering pass) at which the new code's replay of capture `key` departs from the
  old code's. A kernel or schedule capture whose output old and new code agree on is blamed through a program-level
  capture of its kernels that differs (`via`): a wrong number there is made by code generation."""
  row = find_row(store, key)
  level, data, stored = row["level"], store.blob(row["input_key"]), store.blob(row["output_key"])
  with probes(old_tree, new_tree) as (old, new):
    a_old, a_new = _check_pair(old, new, level, data, stored)
    res: dict[str, Any] = {"level": level, "input_key": row["input_key"], "label": row.get("label") or ""}
    if outcome(a_old) == outcome(a_new):
      prows = program_rows_for(store, row)
      if (prow := _differing_program_row(store, prows, old, new)) is None:
        return {**res, "verdict": "identical", "probes": old.asked + new.asked, "program_rows": len(prows)}
      via = {"level": prow["level"], "input_key": prow["input_key"], "via": {"level": level, "input_key": row["input_key"]}}
      return {**res, **via, **blame_input(old, new, prow["level"], store.blob(prow["input_key"]))}
    return {**res, **blame_input(old, new, level, data)}

def blame_input(old: Probe, new: Probe, level: str, data: bytes) -> dict[str, Any]:
  """The blame of one input on which old and new code differ (module docstring): a rule application, else a lowering
  pass, else `outside rules`."""
  t0 = time.perf_counter()
  res: dict[str, Any] = {}
  big = 1 << 60
  t_old, t_new = old.ask(level, data, limit=big), new.ask(level, data, limit=big)
  n_old, n_new = int(t_old.get("spent", 0)), int(t_new.get("spent", 0))
  asked: dict[int, tuple[dict, dict]] = {}
  def at(k: int) -> tuple[dict, dict]:
    if k not in asked: asked[k] = (old.ask(level, data, limit=k), new.ask(level, data, limit=k))
    return asked[k]
  def f(k: int) -> bool:  # have the first k applications of old and new parted? (a prefix property: monotone in k)
    a, b = at(k)
    return (applications(a), a.get("spent")) != (applications(b), b.get("spent"))
  hi = max(n_old, n_new)
  p = _first_pass_apart(old, new, level, data)  # (the code generator's lowering: where its emitted nodes part)
  def pass_blame(why: str) -> dict[str, Any]:
    assert p is not None
    return {**res, "verdict": "blamed pass", "pass": p[0], "pass_index": p[1], "passes": p[2], "applications_new": n_new,
            "probes": old.asked + new.asked, "seconds": round(time.perf_counter() - t0, 2),
            "why": f"{why}; the lowering parts at pass {p[0]!r} (#{p[1] + 1} of {len(p[2])}: {' -> '.join(p[2])}): the change is "
                   "in that pass's own code"}
  if not f(hi):
    if p is not None: return pass_blame(f"old and new apply the same {n_new} rules with the same results")
    return {**res, "verdict": "outside rules", "probes": old.asked + new.asked, "applications_new": n_new,
            "why": f"old and new apply the same {n_new} rules to the same nodes with the same results, and still differ: "
                   "the change is in pass code around the rules, not in a rule"}
  lo = 0  # f(0) is False: no application, nothing to tell them apart
  while hi - lo > 1:
    mid = (lo + hi) // 2
    if f(mid): hi = mid
    else: lo = mid
  if p is not None and hi > p[3]:
    # every rule application up to the end of the pass where the lowering parted was the same on both sides: the rules
    # that differ later only see what that pass made differently (blaming one would name a bystander)
    return pass_blame(f"the rule applications are the same through the end of that pass ({p[3]}); the first to differ, #{hi}, comes after")
  a_at, b_at = at(hi)
  new_last, old_last = (b_at.get("last") if b_at.get("spent") == hi else None), (a_at.get("last") if a_at.get("spent") == hi else None)
  return {**res, "verdict": "blamed", "application": hi, "applications_new": n_new, "applications_old": n_old,
          "rule": new_last[0] if new_last else None, "node": new_last[1] if new_last else None, "result": new_last[2] if new_last else None,
          "old_rule": old_last[0] if old_last else None, "old_node": old_last[1] if old_last else None,
          "old_result": old_last[2] if old_last else None, "probes": old.asked + new.asked, "seconds": round(time.perf_counter() - t0, 2)}

def _first_pass_apart(old: Probe, new: Probe, level: str, data: bytes) -> tuple[str, int, list[str], int] | None:
  """The first lowering pass (tinysched/codegen/lowerer.py LOWERING_PASSES) after which old and new code have emitted
  different nodes, and how many rule applications both had made by its end (the fewer); or None (no lowering at this
  level, passes named differently, or none parts)."""
  if not levels.get(level).lowers: return None
  a, b = old.ask(level, data, passes=True), new.ask(level, data, passes=True)
  pa, pb = a.get("passes") or [], b.get("passes") or []
  if not pa or [x[0] for x in pa] != [x[0] for x in pb]: return None
  return next(((x[0], i, [y[0] for y in pa], min(int(x[3]) if len(x) > 3 else 0, int(y[3]) if len(y) > 3 else 0))
               for i, (x, y) in enumerate(zip(pa, pb)) if x[1] != y[1]), None)

def blame_of(res: dict[str, Any]) -> str | None:
  """What a blame result names (a rule, or a lowering pass), for comparing two failures."""
  if res.get("verdict") == "blamed": return f"rule {res.get('rule')}"
  if res.get("verdict") == "blamed pass": return f"pass {res.get('pass')}"
  return None

# *** minimize ***

def _shape(u) -> tuple | None:
  try: st = u.st
  except Exception: return None
  if st is None: return None
  shape = tuple(st.shape)
  return shape if all(isinstance(s, int) for s in shape) else None

def _constant(u, shape: tuple, value: Any = None):
  d = u.dtype
  one = True if d == dtypes.bool else (1.0 if dtypes.is_float(d) else 1)
  zero = False if d == dtypes.bool else (0.0 if dtypes.is_float(d) else 0)
  scalar = UOp(Ops.VIEW, dtypes.void, (), ShapeTracker.from_shape(()))
  one = one if value is None else value
  value = UOp(Ops.WHERE, d, (UOp(Ops.VALID, dtypes.bool, (scalar,)), UOp(Ops.CONST, d, (), one), UOp(Ops.CONST, d, (), zero)))
  return UOp(Ops.VIEW, d, (value,), ShapeTracker((View.create(shape, (0,) * len(shape)),)))

def _fresh_load(u, shape: tuple, number: int, device: str):
  buf = UOp(Ops.BUFFER, u.dtype.ptr(), (), (number, (device, max(math.prod(shape), 1), u.dtype)))
  return UOp(Ops.VIEW, u.dtype, (buf,), ShapeTracker.from_shape(shape))

def _kernel_constant(u, shape: tuple, value: Any = None):
  """A constant of `u`'s dtype over `shape` as a kernel AST writes one: WHERE(VALID(view), c, 0)."""
  d = u.dtype
  one = True if d == dtypes.bool else (1.0 if dtypes.is_float(d) else 1)
  zero = False if d == dtypes.bool else (0.0 if dtypes.is_float(d) else 0)
  view = UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View.create(shape, (0,) * len(shape)),)))
  c = UOp(Ops.CONST, d, (), one if value is None else value)
  return UOp(Ops.WHERE, d, (UOp(Ops.VALID, dtypes.bool, (view,)), c, UOp(Ops.CONST, d, (), zero)))

def _kernel_candidates(ast) -> list:
  """Smaller kernel ASTs (a program-level input): one value node replaced by one of its operands of the same dtype and
  shape or by a constant of its shape, or one store of the SINK dropped. Loads stay (their buffers are the kernel's)."""
  topo = list(ast.toposort())
  out = []
  if ast.op is Ops.SINK and len(ast.src) > 1: out += [ast.replace(src=ast.src[:i] + ast.src[i + 1:]) for i in range(len(ast.src))]
  for u in topo:
    if u.op in (Ops.SINK, Ops.STORE, Ops.LOAD, Ops.CONST, Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.VALID, Ops.VIEW): continue
    if u.dtype.name == "void" or (shape := _shape(u)) is None: continue
    if u.op is Ops.WHERE and u.src[0].op is Ops.VALID and all(s.op is Ops.CONST for s in u.src[1:]): continue  # already a constant
    kids = [c for c in u.src if c.dtype == u.dtype and _shape(c) == shape]
    values = sorted({c.arg for c in u.toposort() if c.op is Ops.CONST and c.dtype == u.dtype and c.arg not in (0, 1)}, key=repr)
    for repl in (*kids, _kernel_constant(u, shape), *(_kernel_constant(u, shape, v) for v in values)):
      if u in repl.toposort(): continue
      out.append(ast.substitute({u: repl}))
  return out

def _candidates(pre) -> list:
  """Smaller inputs (a pre-sink or a big graph): one value node replaced (by an operand, a constant, a fresh buffer load),
  or one entry of the SINK dropped. A kernel AST (a program-level input): _kernel_candidates."""
  topo = list(pre.toposort())
  if any(u.op is Ops.DEFINE_GLOBAL for u in topo): return _kernel_candidates(pre)
  bufs = [u for u in topo if u.op is Ops.BUFFER]
  number = 1 + max((b.arg[0] for b in bufs), default=-1)
  device = bufs[0].arg[1][0] if bufs else "NUMPY"
  out = []
  if pre.op is Ops.SINK and len(pre.src) > 1:
    out += [pre.replace(src=pre.src[:i] + pre.src[i + 1:]) for i in range(len(pre.src))]
  stores = {s for s in pre.src if s.op is Ops.STORE} if pre.op is Ops.SINK else set()
  for u in topo:
    if u.op in (Ops.SINK, Ops.STORE, Ops.BUFFER, Ops.CONST, Ops.DEFINE_VAR, Ops.BIND, Ops.VALID) or u in stores: continue
    if u.op is Ops.VIEW and (not u.src or (len(u.src) == 1 and u.src[0].op is Ops.BUFFER)): continue  # already a leaf
    if u.dtype.name == "void" or (shape := _shape(u)) is None: continue
    # one of its own operands of the same dtype and shape in its place (keeps what is below, drops the node), or a leaf
    kids = [c for c in u.src if c.dtype == u.dtype and c.op is not Ops.BUFFER and _shape(c) == shape]
    # constants: 1, and each value a constant below it has (a change about constants keeps showing)
    values = sorted({c.arg for c in u.toposort() if c.op is Ops.CONST and c.dtype == u.dtype and c.arg not in (0, 1)}, key=repr)
    consts = [_constant(u, shape)] + [_constant(u, shape, v) for v in values]
    for repl in (*kids, *consts, _fresh_load(u, shape, number, device)):
      if u in repl.toposort(): continue  # no smaller: the node itself is part of it
      out.append(pre.substitute({u: repl}))
  return out

def minimize(store, key: str, old_tree: Path, new_tree: Path, time_limit: float = 60.0,
             progress: Callable[[str], None] | None = None) -> dict[str, Any]:
  """Shrink capture `key`'s input while old and new code still disagree on it the same way: a candidate is kept only if
  both sides still run it, their outputs still differ, and blame still names the same rule or lowering pass (a smaller
  input that differs for another reason would be the repro of another change). Kernel, schedule and program levels."""
  row = find_row(store, key)
  level = row["level"]
  data, stored = store.blob(row["input_key"]), store.blob(row["output_key"])
  t0 = time.perf_counter()
  via = None
  with probes(old_tree, new_tree) as (old, new):
    a_old, a_new = _check_pair(old, new, level, data, stored)
    if outcome(a_old) == outcome(a_new):
      prows = program_rows_for(store, row)
      if (prow := _differing_program_row(store, prows, old, new)) is None:
        raise TriageError(f"old and new code give this {level} capture the same output"
                          + (f", and the same source for its {n} program-level capture(s)" if (n := len(prows))
                             else ", and the store has no program-level capture of its kernels")
                          + ": a wrong number here comes from below (the runtime, the device), or from code that is the same in both")
      via = {"level": level, "input_key": row["input_key"]}
      row, level = prow, prow["level"]
      data = store.blob(row["input_key"])
      if progress: progress(f"  the {via['level']} output is the same in old and new code; minimizing its program-level capture "
                            f"{row['input_key'][:16]}, whose source differs")
    try: pre, encode = levels.get(level).shrinkable(data)
    except IncompatibleCapture as e: raise TriageError(f"{key}: {e}") from None
    culprit = blame_of(blame_input(old, new, level, data))
    def diverges(enc: bytes) -> bool:
      o = old.ask(level, enc)
      if "error" in o: return False
      n = new.ask(level, enc)
      return "error" not in n and o["key"] != n["key"]
    def same_failure(enc: bytes) -> bool:
      return diverges(enc) and (culprit is None or blame_of(blame_input(old, new, level, enc)) == culprit)
    rejected = 0
    start = len(pre.toposort())
    cur, cur_enc, tried = pre, data, 0
    improved = True
    while improved and time.perf_counter() - t0 < time_limit:
      improved = False
      for cand in sorted(_candidates(cur), key=lambda c: (len(c.toposort()), c.key)):
        if time.perf_counter() - t0 >= time_limit: break
        if len(cand.toposort()) >= len(cur.toposort()) or (enc := encode(cand)) is None: continue
        tried += 1
        if diverges(enc):
          if not same_failure(enc):
            rejected += 1  # it differs, but for another reason than the capture
            continue
          cur, cur_enc, improved = cand, enc, True
          if progress: progress(f"  {len(cur.toposort())} nodes")
          break
    final = old.ask(level, cur_enc, output=True)
    return {"level": level, "input_key": row["input_key"], "via": via, "nodes_before": start, "nodes": len(cur.toposort()), "candidates_tried": tried,
            "seconds": round(time.perf_counter() - t0, 2), "timed_out": time.perf_counter() - t0 >= time_limit,
            "input": cur_enc.decode(), "old_output": final["output"], "pretty": cur.pretty(), "failure": culprit,
            "rejected_other_failures": rejected}

def repro_test(res: dict[str, Any], db: str, key: str) -> str:
  """A standalone pytest file: the minimal input, and the output the old code gives it."""
  why = (f"the same failure as the capture: blame names {res['failure']}" if res.get("failure")
         else "old and new outputs differ (blame names no rule or pass for the capture)")
  return (f'"""Minimal input of capture {key} in {db} ({res["nodes_before"]} -> {res["nodes"]} nodes), written by `replay minimize`.\n\n'
          f"It passes with the code that made the capture and fails with the change under review; {why}.\n\n"
          + "\n".join("    " + ln for ln in res["pretty"].splitlines()) + '\n"""\n'
          f"INPUT = {res['input']!r}\n"
          f"OLD_OUTPUT = {res['old_output']!r}\n\n"
          "def test_minimal_input_gives_the_old_output():\n"
          "  from replay import levels\n"
          f"  _, out = levels.get({res['level']!r}).replay_output(INPUT.encode())\n"
          "  assert out.decode() == OLD_OUTPUT\n")
