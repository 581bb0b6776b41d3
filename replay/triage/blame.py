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

minimize (kernel, schedule and program levels): greedy delta debugging on the stored input (replay/triage/shrink.py makes
the candidates); the smallest candidate that fails the same way is kept (old and new both run it and still differ, blame
names the same rule or pass, and, where the capture's numbers differ or are wrong, the execution verdict is the same at
the same output: replay/triage/verdict.py), until no candidate shrinks it or the time is up. The result is written as a
standalone pytest file that rebuilds the minimal input from its encoding and asserts the old output: it fails on the
change and passes without it.

Where old and new agree on a capture (and on every program-level capture of its kernels), a wrong number there is older
than the capture: both work against the reference instead (replay/triage/reference.py), on what reference_inputs lists.
"""
from __future__ import annotations
import contextlib, json, time
from pathlib import Path
from typing import Any, Callable, Iterator
from replay import levels
from replay.store.encode import IncompatibleCapture, encode_graph
from replay.report import info
from replay.triage.probe import Probe, applications, outcome, sha
from replay.triage.shrink import greedy
from replay.triage import reference as R
from replay.triage import verdict as V

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

def reference_inputs(store, row: dict, device: str | None) -> list[tuple[str, str, bytes, int, str]]:
  """What the reference triage judges for `row`: (level, input key, input, seed, where from). A schedule row itself (its
  kernels against its graph) and a program row itself; then the program-level captures of its kernels; else the programs
  the heuristic makes of its kernel ASTs for `device` (a store captured without the program level; none without one)."""
  seed = lambda k: int(k[:8], 16)  # noqa: E731 (the execution check's seed for an input)
  lv = levels.get(row["level"])
  own = [(row["level"], row["input_key"], store.blob(row["input_key"]), seed(row["input_key"]), "the capture")]
  if lv.lowers: return own
  found = own if lv.lists_kernels else []
  if (prows := program_rows_for(store, row)):
    return found + [(r["level"], r["input_key"], store.blob(r["input_key"]), seed(r["input_key"]), "its program-level capture") for r in prows]
  if device is None: return found
  try: out = lv.decode_output(store.blob(row["output_key"]))
  except Exception: return found  # noqa: BLE001 (an output this code cannot read has no kernels to lower)
  for ast in (out if isinstance(out, list) else [out]):
    if (data := R.kernel_program_input(encode_graph([ast]), device)) is not None:
      found.append(("program", sha(data), data, seed(row["input_key"]), f"the program the heuristic makes of its kernel for {device}"))
  return found

def _devices(device: str | None) -> dict[str, str | None]:
  """The device each kind of input is judged on: programs on a compiled one (None when there is none), schedules on any."""
  name = R.judging_device(device, "schedule")  # (opened once, in a child: a bad name raises here)
  return {n: None if name == "NUMPY" and levels.get(n).lowers else name for n in levels.names()}

def _first_wrong(store, row: dict, device: str | None, progress: Callable[[str], None] | None = None) -> tuple[dict | None, int]:
  """The first of reference_inputs that is wrong on its device ({level, input_key, data, seed, from, base, device}, with
  how many were judged), or (None, judged). R.ReferenceError when nothing could be judged (no device, or only programs
  and no compiled device)."""
  devs = _devices(device)
  judged = 0
  for level, ikey, data, seed, where in reference_inputs(store, row, devs.get("program")):
    if (d := devs.get(level)) is None: continue
    if progress: progress(f"  judging {where} {ikey[:16]} on {d}")
    base = R.judge(data, d, seed=seed, level=level)
    judged += 1
    if base["verdict"] == "wrong":
      return {"level": level, "input_key": ikey, "data": data, "seed": seed, "from": where, "base": base, "device": d}, judged
  if not judged: R.judging_device(device, "program")  # (raises, saying why)
  return None, judged

def _via(row: dict, w: dict) -> dict:
  """How a result names the input it was found on, where that is not the row itself."""
  if w["input_key"] == row["input_key"]: return {}
  return {"input_key": w["input_key"], "level": w["level"], "via": {"level": row["level"], "input_key": row["input_key"]}, "from": w["from"]}

def blame_against_reference(store, row: dict, device: str | None, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
  """Blame `row` against the reference (replay/triage/reference.py): the first of reference_inputs that is wrong on its
  device, and the rule that makes it so; verdict "right" when every one computes what it means."""
  w, judged = _first_wrong(store, row, device, progress)
  res: dict[str, Any] = {"level": row["level"], "input_key": row["input_key"], "label": row.get("label") or ""}
  if w is None: return {**res, "verdict": "right", "against": "reference", "judged": judged, "device": R.judging_device(device, "schedule")}
  return {**res, **_via(row, w), **R.blame_reference(w["data"], w["device"], w["seed"], w["base"], progress, w["level"])}

def blame(store, key: str, old_tree: Path, new_tree: Path, device: str | None = None,
          progress: Callable[[str], None] | None = None) -> dict[str, Any]:
  """The first rule application (else lowering pass) at which the new code's replay of capture `key` departs from the
  old code's. A kernel or schedule capture whose output old and new code agree on is blamed through a program-level
  capture of its kernels that differs (`via`): a wrong number there is made by code generation. Where old and new agree
  on all of them, against the reference (blame_against_reference): a bug older than the capture is in both."""
  row = find_row(store, key)
  level, data, stored = row["level"], store.blob(row["input_key"]), store.blob(row["output_key"])
  with probes(old_tree, new_tree) as (old, new):
    a_old, a_new = _check_pair(old, new, level, data, stored)
    res: dict[str, Any] = {"level": level, "input_key": row["input_key"], "label": row.get("label") or ""}
    if outcome(a_old) == outcome(a_new):
      prows = program_rows_for(store, row)
      if (prow := _differing_program_row(store, prows, old, new)) is None:
        try: ref = blame_against_reference(store, row, device, progress)
        except R.ReferenceError as e: ref = {"verdict": "right", "device": None, "judged": 0, "not_judged": str(e)}
        if ref["verdict"] != "right": return {**res, **ref, "old_agrees": True}
        return {**res, "verdict": "identical", "probes": old.asked + new.asked, "program_rows": len(prows), "device": ref["device"],
                "judged": ref["judged"], **({"not_judged": ref["not_judged"]} if "not_judged" in ref else {})}
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

def minimize_against_reference(store, row: dict, device: str | None, time_limit: float,
                               progress: Callable[[str], None] | None = None) -> dict[str, Any]:
  """Minimize `row` against the reference (replay/triage/reference.py): the first of reference_inputs that is wrong on
  its device, shrunk while it stays wrong the same way. TriageError when every one is right."""
  same = f"old and new code give this {row['level']} capture the same output"
  try: w, judged = _first_wrong(store, row, device)
  except R.ReferenceError as e: raise TriageError(f"{same}, and it cannot be judged against the reference: {e}") from None
  if w is None:
    raise TriageError(f"{same}, and all {judged} of what it lowers to compute what they mean on the reference: nothing fails here "
                      "to minimize (a wrong number seen elsewhere comes from below: the runtime, the device)")
  if progress: progress(f"  {same}, and {w['from']} {w['input_key'][:16]} is wrong on {w['device']}: minimizing it against the reference")
  res = R.minimize_reference(w["data"], w["device"], time_limit, w["seed"], progress, w["level"])
  return {**res, "input_key": w["input_key"], "via": _via(row, w).get("via")}

def minimize(store, key: str, old_tree: Path, new_tree: Path, time_limit: float = 60.0,
             progress: Callable[[str], None] | None = None, device: str | None = None) -> dict[str, Any]:
  """Shrink capture `key`'s input while old and new code still disagree on it the same way: a candidate is kept only if
  both sides still run it, their outputs still differ, and blame still names the same rule or lowering pass (a smaller
  input that differs for another reason would be the repro of another change). Kernel, schedule and program levels.
  Where old and new agree (a bug older than the capture), against the reference: minimize_against_reference."""
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
        return minimize_against_reference(store, row, device, time_limit, progress)
      via = {"level": level, "input_key": row["input_key"]}
      row, level = prow, prow["level"]
      data, stored = store.blob(row["input_key"]), store.blob(row["output_key"])
      if progress: progress(f"  the {via['level']} output is the same in old and new code; minimizing its program-level capture "
                            f"{row['input_key'][:16]}, whose source differs")
    try: pre, encode = levels.get(level).shrinkable(data)
    except IncompatibleCapture as e: raise TriageError(f"{key}: {e}") from None
    culprit = blame_of(blame_input(old, new, level, data))
    # the capture's number verdict (old and new run on the device): a candidate must keep it, at the same output
    seed, dev = int(row["input_key"][:8], 16), _verdict_device(device)
    try: extra = json.loads(row.get("extra") or "{}")
    except ValueError: extra = {}
    first = V.verdict(level, data, stored, extra if isinstance(extra, dict) else {}, dev, seed) if dev else {"verdict": "skipped"}
    klass = (first["verdict"], first.get("buffer")) if first["verdict"] in V.NUMBER_FAILURES else None
    if progress and klass: progress(f"  its verdict on {dev}: {klass[0]} at buffer {klass[1]}: every candidate kept must keep it")
    def diverges(enc: bytes) -> bool:
      o = old.ask(level, enc)
      if "error" in o: return False
      n = new.ask(level, enc)
      return "error" not in n and o["key"] != n["key"]
    def same_verdict(enc: bytes) -> bool:
      if klass is None or dev is None: return True
      o = old.ask(level, enc, extra=True)
      if "error" in o: return False
      got = V.verdict(level, enc, o["output"].encode(), o.get("extra") or {}, dev, seed)
      return (got["verdict"], got.get("buffer")) == klass
    def fails(enc: bytes) -> bool | None:  # (None: the outputs no longer differ; False: they differ for another reason)
      if not diverges(enc): return None
      return (culprit is None or blame_of(blame_input(old, new, level, enc)) == culprit) and same_verdict(enc)
    start = len(pre.toposort())
    cur, cur_enc, tried, rejected = greedy(pre, data, encode, fails, t0 + time_limit, progress)
    final = old.ask(level, cur_enc, output=True)
    return {"level": level, "input_key": row["input_key"], "via": via, "nodes_before": start, "nodes": len(cur.toposort()), "candidates_tried": tried,
            "seconds": round(time.perf_counter() - t0, 2), "timed_out": time.perf_counter() - t0 >= time_limit,
            "input": cur_enc.decode(), "old_output": final["output"], "pretty": cur.pretty(), "failure": culprit,
            "verdict": f"{klass[0]} at output buffer {klass[1]} on {dev}" if klass else None, "rejected_other_failures": rejected}

def _verdict_device(device: str | None) -> str | None:
  """The execution check's device (opened in a child), or None when it cannot be opened (then only blame decides)."""
  try: return R.judging_device(device, "schedule")  # (any device: kernel and schedule jobs run on the interpreter too)
  except R.ReferenceError: return None

def repro_test(res: dict[str, Any], db: str, key: str) -> str:
  """A standalone pytest file: the minimal input, and the output the old code gives it."""
  why = (f"the same failure as the capture: blame names {res['failure']}" if res.get("failure")
         else "old and new outputs differ (blame names no rule or pass for the capture)")
  if res.get("verdict"): why += f", and old and new numbers are {res['verdict']}, as the capture's"
  return (f'"""Minimal input of capture {key} in {db} ({res["nodes_before"]} -> {res["nodes"]} nodes), written by `replay minimize`.\n\n'
          f"It passes with the code that made the capture and fails with the change under review; {why}.\n\n"
          + "\n".join("    " + ln for ln in res["pretty"].splitlines()) + '\n"""\n'
          f"INPUT = {res['input']!r}\n"
          f"OLD_OUTPUT = {res['old_output']!r}\n\n"
          "def test_minimal_input_gives_the_old_output():\n"
          "  from replay import levels\n"
          f"  _, out = levels.get({res['level']!r}).replay_output(INPUT.encode())\n"
          "  assert out.decode() == OLD_OUTPUT\n")
