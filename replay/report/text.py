"""Reports of a replay: terminal summary, Markdown (PR comment / job summary), JSON (stable schema), JUnit XML.

JSON schema `tinysched-replay-report` version 1:
  {"schema", "version", "sources": [db paths], "shard": "I/N"|null, "elapsed_s", "workers",
   "summary": {"total", "identical", "changed", "error", "incompatible", "unstable", "exec": {verdict: count}},
   "exit_code", "fatal": [messages], "accepted": [per-key accepts in the stores: Store.accepts() rows with "db"],
   "determinism": null | {"mode", "this_process", "processes": [names], "rows", "inputs", "by_outcome": {outcome: rows},
                          "unstable", "exposed_by": {how: rows}, "skipped": why not compared | null}   (replay/check/determinism.py)
   "groups": [{"outcome", "signature", "count", "example": <result>, "members": [input keys]}],   largest first
   "results": [<result>]}                                                                          in store order
  <result> = {"db", "run_id", "seq", "level", "label", "input_key", "stored_key", "new_key", "outcome", "reason",
              "traceback", "changes": [{"kind","path","old","new"}], "change_count", "text_diff", "kernel_list",
              "signature", "rules", "metadata", "exec", "unstable": {"outputs": {process: key}, "exposed_by"} | null}
"""
from __future__ import annotations
import json
from typing import Any
from replay.check.results import Report
from replay.check.results import Result, OUTCOMES
from replay import levels
from replay.store.encode import IncompatibleCapture
from replay.check import perf
from replay.execute.verdicts import FAIL_VERDICTS
from replay.prove import run as prove_run
from replay.report import escape as E
from replay.report.atomic import write_atomic

SCHEMA, VERSION = "tinysched-replay-report", 1
NEXT_STEPS = {
  "changed": "review the diffs; if the change is intended, run `replay accept` and commit the new captures "
             "(CI: put [replay:accept] in the PR title or head commit message)",
  "error": "the current code raised on a stored input: fix the regression (see the traceback), or re-capture if the input is obsolete",
  "incompatible": "the stored input cannot be decoded by this code (format or ops changed): re-capture the baseline with `replay accept`",
  "mismatch": "old and new kernels compute different numbers: a miscompile, not a cosmetic change; [replay:accept] cannot waive it. "
              "Rerun one with `replay check DB --key KEY --exec -v`",
  "wrong": "a kernel disagrees with the independent numpy reference (also when old and new agree): a device, runtime or codegen bug; "
           "[replay:accept] cannot waive it. Rerun one with `replay check DB --key KEY --exec -v`",
  "unstable": "the same kernels gave different bits on two runs with the same inputs (a race or uninitialized memory)",
  "failed": "a kernel could not be compiled or run (see the error); its numbers are unverified",
  "timeout": "a job ran past its time limit twice (the second time alone): a hung kernel, or raise the limit with --timeout SECONDS",
  "perf": "kernels got slower beyond --perf-gate and their noise margin",
  "throughput": "a throughput figure above the device's measured peak: fix the cost model (tinysched/cost.py) or the timer",
  "counterexample": "a proof found values for which a rule or a kernel's index is wrong (shown above), whether or not a test reaches "
                    "them; [replay:accept] cannot waive it. `replay prove --rules -v` or `replay prove DB --key KEY` shows it again",
  "unstable_output": "the same stored input gave different outputs in two processes (the determinism check: another PYTHONHASHSEED, "
                     "another allocation order): something iterates a set, or objects in id() order, into the output; each capture's "
                     "reason says which perturbation exposed it. [replay:accept] cannot waive it. The group's diff is between two "
                     "processes' outputs",
}
FAIL_ORDER = FAIL_VERDICTS  # worst first

def exec_counts(rep: Report) -> dict[str, int]:
  out: dict[str, int] = {}
  for r in rep.results:
    if r.exec: out[r.exec.get("verdict", "?")] = out.get(r.exec.get("verdict", "?"), 0) + 1
  return dict(sorted(out.items()))

def stopped_line(rep: Report) -> str:
  """What a stopped run's report says first: that it is partial, and how much of the selection it covers."""
  of = f" of {rep.selected}" if rep.selected is not None else ""
  return (f"STOPPED by {rep.stopped}: a partial report ({len(rep.results)}{of} selected captures replayed; the steps after the stop "
          f"did not run, kernels not run are `skipped`), exit {rep.exit_code()}")

def to_json(rep: Report) -> dict[str, Any]:
  c = rep.counts()
  return {"schema": SCHEMA, "version": VERSION, "sources": rep.sources, "shard": rep.shard, "elapsed_s": round(rep.elapsed, 3),
          "workers": rep.workers, "summary": {"total": len(rep.results), **c, "exec": exec_counts(rep),
                                                            "perf_regressions": len(rep.perf_failures())}, "exit_code": rep.exit_code(),
          "stopped": rep.stopped, "selected": rep.selected, "allow_empty": rep.allow_empty,
          "fatal": rep.fatal, "perf_gate": rep.perf_gate, "accepted": rep.accepted, "proofs": rep.proofs, "determinism": rep.determinism,
          "causes": rep.causes,
          "groups": [{"outcome": g["outcome"], "signature": g["signature"], "count": g["count"], "example": g["example"].to_dict(),
                      "members": [m.input_key for m in g["members"]]} for g in rep.groups()],
          "results": [r.to_dict() for r in rep.results]}

def json_text(rep: Report) -> str:
  """The JSON report as text (ASCII: json escapes everything else, control characters and lone surrogates included)."""
  return json.dumps(to_json(rep), indent=1, sort_keys=True)

def write_json(rep: Report, path: str) -> None:
  write_atomic(path, json_text(rep))

def from_json(doc: dict) -> Report:
  if doc.get("schema") != SCHEMA or doc.get("version") != VERSION:
    raise ValueError(f"not a {SCHEMA} v{VERSION} report (schema={doc.get('schema')!r}, version={doc.get('version')!r})")
  rep = Report(results=[Result(**r) for r in doc["results"]], sources=list(doc["sources"]), elapsed=doc.get("elapsed_s", 0.0),
               workers=doc.get("workers", 1), fatal=list(doc.get("fatal", [])), shard=doc.get("shard"), perf_gate=doc.get("perf_gate"),
               accepted=list(doc.get("accepted", [])), proofs=doc.get("proofs"), determinism=doc.get("determinism"),
               stopped=doc.get("stopped"), selected=doc.get("selected"),
               allow_empty=bool(doc.get("allow_empty")), causes=doc.get("causes"))
  return rep

def merge(reports: list[Report]) -> Report:
  """Shard reports -> one report (results deduplicated by (db, run, seq, level, input) and re-sorted)."""
  seen: dict[tuple, Result] = {}
  out = Report(elapsed=max((r.elapsed for r in reports), default=0.0), workers=sum(r.workers for r in reports))
  for rep in reports:
    for s in rep.sources:
      if s not in out.sources: out.sources.append(s)
    out.fatal += [f for f in rep.fatal if f not in out.fatal]
    out.accepted += [a for a in rep.accepted if a not in out.accepted]
    for r in rep.results: seen.setdefault((r.db, r.run_id, r.seq, r.level, r.input_key), r)
  out.results = sorted(seen.values(), key=lambda r: (r.db, r.run_id, r.seq, r.level, r.input_key))
  out.determinism = merge_determinism([r.determinism for r in reports])
  out.stopped = next((r.stopped for r in reports if r.stopped), None)  # one stopped shard makes the whole partial
  out.allow_empty = bool(reports) and all(r.allow_empty for r in reports)
  if all(r.selected is not None for r in reports): out.selected = sum(r.selected or 0 for r in reports)
  return out

def merge_determinism(records: list[dict | None]) -> dict | None:
  """The shards' determinism records as one: counts added, processes listed once; a shard without one (checked with
  --no-determinism) leaves the whole unchecked (None), and one that could not compare marks the whole `skipped`."""
  have = [d for d in records if isinstance(d, dict)]
  if not have or len(have) < len(records): return None
  out: dict[str, Any] = {"mode": have[0].get("mode"), "this_process": have[0].get("this_process"), "processes": [], "rows": 0, "inputs": 0,
                         "by_outcome": {}, "unstable": 0, "exposed_by": {}, "skipped": None, "shards": len(have)}
  for d in have:
    out["processes"] += [p for p in d.get("processes") or [] if p not in out["processes"]]
    for k in ("rows", "inputs", "unstable"): out[k] += int(d.get(k) or 0)
    for k in ("by_outcome", "exposed_by"):
      for n, v in (d.get(k) or {}).items(): out[k][n] = out[k].get(n, 0) + int(v)
    out["skipped"] = out["skipped"] or d.get("skipped")
  return out

def determinism_line(rep: Report) -> str | None:
  """One line: how many rows the determinism check replayed again, in which processes, and what it found."""
  d = rep.determinism
  if not d: return None
  if d.get("skipped"): return f"determinism: not checked: {d['skipped']}"
  by = d.get("by_outcome") or {}
  what = ", ".join(f"{n} {o}" for o, n in by.items() if n)
  found = f"{d.get('unstable', 0)} unstable" + (f" (exposed by {', '.join(f'{k}: {v}' for k, v in d['exposed_by'].items())})"
                                                if d.get("exposed_by") else "")
  return (f"determinism: {d.get('rows', 0)} rows, {d.get('inputs', 0)} inputs ({d.get('mode')}; as first replayed: {what or 'none'}) "
          f"replayed again in {' and '.join(d.get('processes') or []) or 'no process'}, against {d.get('this_process')}: {found}")

def accepted_lines(rep: Report, md: bool = False, limit: int = 20) -> list[str]:
  """What `replay accept --key/--group` accepted in the checked stores since their last full capture (newest first)."""
  if not rep.accepted: return []
  acc = sorted(rep.accepted, key=lambda a: (a.get("time") or "", a.get("db") or "", a.get("id") or 0), reverse=True)
  # the accept log is stored text (who, message, label): Markdown gets it escaped; the terminal escapes each line
  q = (lambda x: f"`{E.md_code(x, None, table=False)}`") if md else str
  t = (lambda x: E.md_text(x, 300)) if md else str
  out = [("**" if md else "") + f"accepted per kernel since the last full capture: {len(acc)} row(s)" + ("**" if md else "")]
  for a in acc[:limit]:
    out.append(f"{'- ' if md else '    '}{t(a.get('level'))} {q((a.get('input_key') or '')[:16])} ({t(a.get('label') or '-')}, {t(a.get('db'))}): "
               f"{q((a.get('old_output_key') or '')[:12])} -> {q((a.get('new_output_key') or '')[:12])} at {q((a.get('git_commit') or '?')[:10])}"
               f"{' (dirty)' if a.get('git_dirty') else ''} by {t(a.get('who') or '?')} on {t(a.get('time'))}: {t(a.get('message'))}")
  if len(acc) > limit: out.append(f"{'- ' if md else '    '}... and {len(acc) - limit} more (see the JSON report's accepted)")
  return out

def exec_timing(rep: Report) -> str | None:
  """One line: total old vs new kernel time over the executed captures, and how many got slower."""
  timed = [r.exec for r in rep.results if r.exec and r.exec.get("old_time_s") and r.exec.get("new_time_s")]
  if not timed: return None
  old, new = sum(e["old_time_s"] for e in timed), sum(e["new_time_s"] for e in timed)
  slower = sum(1 for e in timed if e.get("slower"))
  line = f"kernel time over {len(timed)} executed captures: stored {old*1e3:.3f} ms, current {new*1e3:.3f} ms ({new/old:.2f}x); {slower} slower"
  aa = perf.summary([r.exec for r in rep.results], rep.perf_gate)
  gl = perf.group_line([r.exec for r in rep.results], rep.perf_gate)
  return line + (f"; {aa}" if aa else "") + (f"; {gl}" if gl else "") + (f"; {pk}" if (pk := peak_line(timed)) else "")

def peak_line(timed: list[dict]) -> str | None:
  """The throughput figures against the device's measured peak: the best fraction reached, and the refused figures."""
  held = [e for e in timed if e.get("peak")]
  if not held: return None
  p = max((e["peak"] for e in held), key=lambda d: (d.get("gflops", 0), d.get("gbps", 0)))
  refused = sum(1 for e in held if e.get("throughput_refused"))
  best = max((e.get("peak_fraction") or 0.0 for e in held), default=0.0)
  return (f"throughput held to the peak measured on {p.get('device')} ({p.get('gflops', 0):.1f} GFLOP/s, {p.get('gbps', 0):.1f} GB/s): "
          f"{len(held)} figures, the best {100 * best:.1f}% of it, {refused} refused"
          + (" (ABOVE THE PEAK: a cost-model or timer bug)" if refused else ""))

def _exec_line(r: Result) -> str:
  e = r.exec or {}
  if not e: return ""
  parts = [e.get("verdict", "")]
  if e.get("max_abs_err") is not None: parts.append(f"max abs err {e['max_abs_err']:.3g}")
  if e.get("verdict") in ("mismatch", "wrong"):
    parts.append(f"{e.get('where')}")
    parts.append(f"max rel err {e['max_rel_err']:.3g}" if e.get("max_rel_err") is not None else "")
    parts.append(f"max {e['max_ulp']:.3g} ULP" if e.get("max_ulp") is not None else "")
    parts.append(f"{e.get('n_diff')} elements differ (first at {e.get('first_diff')}) in "
                 + (f"output {e['output']!r}" if e.get("output") is not None else f"buffer {e.get('buffer')}")
                 + (f", {e['n_nonfinite']} of them NaN/inf on one side only" if e.get("n_nonfinite") else ""))
    if e.get("unstable_sides"): parts.append(f"also unstable: {e['unstable_sides']}")
    if e.get("wrong_sides"): parts.append(f"off the reference: {', '.join(e['wrong_sides'])}")
  if e.get("verdict") in ("unstable", "failed", "timeout", "skipped"): parts.append(e.get("error") or e.get("reason") or "")
  if e.get("retried"): parts.append("retried alone")
  if e.get("old_time_s") and e.get("new_time_s"):
    parts.append(f"time {e['old_time_s']*1e6:.1f}us -> {e['new_time_s']*1e6:.1f}us (noise {100 * (e.get('noise') or 0):.0f}%)"
                 + (" SLOWER" if e.get("slower") else "") + (" faster" if e.get("faster") else ""))
    if e.get("gbps") is not None:
      parts.append(f"{e['gbps']:.2f} GB/s, {e.get('gflops', 0):.2f} GFLOP/s"
                   + (f" ({100 * e['peak_fraction']:.1f}% of the measured peak)" if e.get("peak_fraction") is not None else ""))
  if e.get("seed") is not None: parts.append(f"seed {e['seed']}")
  return ", ".join(p for p in parts if p)

def verdict_of(r: Result) -> str:
  """A result's execution verdict ("" when it was not executed)."""
  return (r.exec or {}).get("verdict", "")

def exec_failures(rep: Report) -> list[Result]:
  """Every executed capture whose verdict fails the gate, worst kind first."""
  order = {v: i for i, v in enumerate(FAIL_ORDER)}
  bad = [r for r in rep.results if r.exec and r.exec.get("verdict") in order]
  return sorted(bad, key=lambda r: (order[verdict_of(r)], r.db, r.input_key))

def terminal(rep: Report, max_groups: int = 10, verbose: bool = False) -> str:
  """The summary `replay check` prints. Every entry of `lines` is one line (diffs and tracebacks are split first), and
  each is escaped as one (E.terminal_line): whatever the stores hold, nothing acts on the terminal or adds a line."""
  c = rep.counts()
  lines = [f"replayed {len(rep.results)} captures from {len(rep.sources)} store(s) in {rep.elapsed:.2f}s "
           f"({len(rep.results)/max(rep.elapsed, 1e-9):.0f}/s, {rep.workers} worker(s))" + (f", shard {rep.shard}" if rep.shard else "")]
  if rep.stopped: lines.insert(0, stopped_line(rep))
  lines.append("  " + "  ".join(f"{o}: {c[o]}" for o in OUTCOMES))
  if ec := exec_counts(rep): lines.append("  exec: " + "  ".join(f"{k}: {v}" for k, v in ec.items()))
  if et := exec_timing(rep): lines.append("  " + et)
  if dl := determinism_line(rep): lines.append("  " + dl)
  fails = exec_failures(rep)
  for r in fails[:10]: lines.append(f"  {verdict_of(r).upper()}: {r.label or '-'} {r.level} {r.input_key[:16]} ({r.db}): {_exec_line(r)}")
  if len(fails) > 10: lines.append(f"  ... and {len(fails) - 10} more failing executions (see --report-json)")
  if (t := triage_commands(fails)): lines.append(f"  triage: {t}")
  for r in rep.perf_failures()[:5]: lines.append(f"  SLOWER (--perf-gate): {r.label or '-'} {r.level} {r.input_key[:16]}: {_exec_line(r)}")
  for r in rep.throughput_refused()[:5]:
    lines.append(f"  THROUGHPUT REFUSED: {r.label or '-'} {r.level} {r.input_key[:16]}: {(r.exec or {}).get('throughput_refused')}")
  for f in rep.fatal: lines.append(f"  FATAL {f}")
  lines += ["  " + ln for ln in proof_lines(rep)]
  lines += ["  " + ln for ln in accepted_lines(rep)]
  groups = rep.groups()
  for g in groups[:max_groups]:
    ex: Result = g["example"]
    lines += ["", f"[{g['outcome']}] x{g['count']}  {g['signature']}" + cause_note(g)]
    lines.append(f"  example: {ex.label or '-'} {ex.level} input {ex.input_key[:16]} ({ex.db})")
    if ex.metadata: lines.append(f"  made by: {ex.metadata}")
    if ex.rules: lines.append(f"  rules that built the changed nodes: {', '.join(ex.rules)}")
    if ex.kernel_list and (ex.kernel_list['removed'] or ex.kernel_list['added']):
      kl = ex.kernel_list
      lines.append(f"  kernels: {kl['old_count']} -> {kl['new_count']}; removed {[k['outputs'] for k in kl['removed']]}; "
                   f"added {[k['outputs'] for k in kl['added']]}")
    for ch in ex.changes[:6]: lines.append(f"  {ch['kind']}: {ch['path']}: {ch['old']!r} -> {ch['new']!r}")
    if ex.reason: lines.append(f"  {ex.reason.splitlines()[0]}")
    if ex.exec: lines.append(f"  exec: {_exec_line(ex)}")
    if verbose and ex.text_diff: lines += ["  " + ln for ln in ex.text_diff.splitlines()[:60]]
    if verbose and ex.traceback: lines += ["  " + ln for ln in ex.traceback.splitlines()[-12:]]
  if len(groups) > max_groups: lines += ["", f"... and {len(groups) - max_groups} more groups (all of them: --report-html FILE, --report-json FILE)"]
  code = rep.exit_code()
  lines.append("")
  if rep.stopped: lines.append(stopped_line(rep))
  elif code == 0: lines.append("OK: every capture replays identically.")
  else:
    bad = [v for v in _failing_kinds(rep)]
    named = {"counterexample": "proof counterexamples", "perf": "exec perf", "throughput": "throughput above the peak"}
    found = ", ".join([named.get(v, f"exec {v}") for v in bad] + (["changes"] if c["changed"] else [])
                      + (["unstable outputs"] if c["unstable"] else []))
    lines.append(f"exit {code}: " + ("errors, incompatible captures, or kernels that failed or timed out" if code == 2
                                     else f"{found or 'changes'} found"))
    for v in _failing_kinds(rep): lines.append(f"  next ({v}): {NEXT_STEPS[v]}")
    for o in ("changed", "error", "incompatible"):
      if c[o]: lines.append(f"  next: {NEXT_STEPS[o]}")
    if c["unstable"]: lines.append(f"  next (unstable): {NEXT_STEPS['unstable_output']}")
  return "\n".join(map(E.terminal_line, lines))

def _failing_kinds(rep: Report) -> list[str]:
  kinds = {verdict_of(r) for r in exec_failures(rep)}
  return ([v for v in FAIL_ORDER if v in kinds] + (["perf"] if rep.perf_failures() else []) + (["throughput"] if rep.throughput_refused() else [])
          + (["counterexample"] if rep.refuted() else []))

def proof_lines(rep: Report) -> list[str]:
  """The proofs of a check (replay.prove), as `replay prove` prints them: counts per kind, then every counterexample."""
  if rep.proofs is None: return []
  return prove_run.text(prove_run.ProofReport.from_json(rep.proofs)).splitlines()

# *** Markdown: fits a GitHub PR comment (65,536 characters) and says what it leaves out ***
MD_LIMIT = 60_000  # UTF-8 bytes of the whole Markdown report; `replay gate` puts its decision (under 2 kB) above it
MD_FAIL_ROWS = 30  # failing executions listed by name; the rest are counted (every one is in the HTML and JSON reports)
MD_DIFF_LINES, MD_DIFF_BYTES = 60, 6_000  # of one group's text diff

def _size(lines: list[str]) -> int: return sum(len(x.encode()) + 1 for x in lines)

FAIL_OUTCOMES = ("error", "incompatible", "unstable")  # replay outcomes that fail whatever a reviewer says

def group_failures(g: dict) -> list[str]:
  """What makes a group fail whatever a reviewer says: its outcome (FAIL_OUTCOMES) or its members' failing exec
  verdicts, worst first; [] for a reviewable (or cosmetic) group."""
  if g["outcome"] in FAIL_OUTCOMES: return [g["outcome"]]
  kinds = {(m.exec or {}).get("verdict") for m in g["members"]}
  return [v for v in FAIL_ORDER if v in kinds]

def ordered_groups(rep: Report) -> list[dict]:
  """The groups as the Markdown and HTML reports list them: failing groups first (worst kind first), then the others,
  each part largest first (Report.groups' order)."""
  order = {v: i for i, v in enumerate(("error", "incompatible", *FAIL_ORDER))}
  groups = rep.groups()
  return sorted(groups, key=lambda g: (order[f[0]] if (f := group_failures(g)) else len(order)))  # stable: keeps count order

def verdict_summary(g: dict) -> str:
  """The members' execution verdicts, counted (worst first), or what the group is without them."""
  counts: dict[str, int] = {}
  for m in g["members"]:
    if m.exec: counts[m.exec.get("verdict", "?")] = counts.get(m.exec.get("verdict", "?"), 0) + 1
  rank = {v: i for i, v in enumerate((*FAIL_ORDER, "equivalent", "skipped"))}
  return ", ".join(f"{v} {n}" for v, n in sorted(counts.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))

def cause_note(g: dict) -> str:
  """What a group named by its cause adds to its line: how the cause was found, and how many diff shapes it spans."""
  c = g["example"].cause or {}
  if not c.get("rules") or not g["signature"].startswith("cause: "): return ""
  return f"  ({c.get('how')}; {g.get('shapes', 1)} diff shape(s))"

def triage_commands(fails: list[Result]) -> str | None:
  """The commands that find the cause of the first wrong or mismatching capture (a program-level one first: blame and
  minimize reach code generation through it; a kernel row they redirect to its program row themselves)."""
  cands = [r for r in fails if verdict_of(r) in ("wrong", "mismatch") and not r.pair]
  if not cands: return None
  def lowers(x: Result) -> bool:
    try: return levels.get(x.level).lowers
    except IncompatibleCapture: return False  # (a level this code does not know: blame says so)
  r = min(cands, key=lambda x: (not lowers(x), fails.index(x)))
  return (f"`replay blame {r.db} {r.input_key[:16]}` names the rule or lowering pass; "
          f"`replay minimize {r.db} {r.input_key[:16]} -o test_repro.py` writes the smallest input that fails the same way")

def next_command(rep: Report, r: Result) -> str:
  """The command that shows one capture of the report again, in detail."""
  if rep.paired or r.pair: return f"replay show {r.db} {r.input_key[:16]} --html capture.html"
  if r.exec or r.outcome == "changed": return f"replay check {r.db} --key {r.input_key[:16]} --exec -v"
  return f"replay check {r.db} --key {r.input_key[:16]} -v"

def differing_parts(old: str, new: str, width: int = 80, context: int = 24) -> tuple[str, str]:
  """`old` and `new` shortened to at most about `width` characters each around where they differ (a common prefix and
  suffix become '…'), so two long values that differ late never show as the same first characters."""
  if len(old) <= width and len(new) <= width: return old, new
  p = 0
  while p < min(len(old), len(new)) and old[p] == new[p]: p += 1
  s = 0
  while s < min(len(old), len(new)) - p and old[-1 - s] == new[-1 - s]: s += 1
  def cut(x: str) -> str:
    a, b = max(0, p - context), min(len(x), len(x) - s + context)
    if b - a > width + context: b = a + width + context  # the first difference (at p) is always shown
    return ("…" if a > 0 else "") + x[a:b] + ("…" if b < len(x) else "")
  return cut(old), cut(new)

# Every value below may come from a store or a merged JSON report: each goes through the escape of the place it lands
# in (replay/report/escape.py), so none can end a table cell, a code span, a fence or the <details> block.
def _cell(s: Any, width: int = 300) -> str: return E.md_code(s, width)  # inside `...` in a table cell
def _md(s: Any, width: int | None = None) -> str: return E.md_text(s, width)  # plain text, a table cell or the <summary> line

def _md_group_details(rep: Report, i: int, g: dict) -> list[str]:
  ex: Result = g["example"]
  fails = group_failures(g)
  out = [f"<details><summary>{i}. {'❌ ' if fails else ''}{_md(g['outcome'])} ×{g['count']}: {_md(ex.label or '-', 200)} {_md(ex.level)} "
         f"<code>{_md(ex.input_key[:12])}</code></summary>", ""]
  out.append(f"next: `{E.md_code(next_command(rep, ex), None, table=False)}`  ")
  if ex.metadata: out.append(f"made by: `{E.md_code(ex.metadata, 200, table=False)}`  ")
  if ex.rules: out.append(f"rules: `{E.md_code(', '.join(ex.rules), 2000, table=False)}`  ")
  if (vs := verdict_summary(g)): out.append(f"exec of the members: {_md(vs, 400)}  ")
  if ex.exec: out.append(f"exec of the example: {_md(_exec_line(ex), 400)}  ")
  if ex.reason: out += ["", "```", E.md_block(ex.reason[:2000]), "```"]
  if ex.changes:
    out += ["", "| change | path | old | new |", "|---|---|---|---|"]
    for ch in ex.changes[:12]:
      o, n = differing_parts(str(ch["old"]), str(ch["new"]))
      out.append(f"| {_md(ch['kind'], 80)} | `{_cell(ch['path'], 200)}` | `{_cell(o, 200)}` | `{_cell(n, 200)}` |")
    if len(ex.changes) > 12 or ex.change_count > 12:
      out.append(f"\n({max(len(ex.changes), ex.change_count) - 12} more changes in the HTML and JSON reports)")
  if ex.text_diff:
    lines, kept, size = ex.text_diff.splitlines(), [], 0
    for ln in lines[:MD_DIFF_LINES]:
      ln = E.md_block(ln)
      if size + len(ln.encode()) + 1 > MD_DIFF_BYTES: break
      kept.append(ln); size += len(ln.encode()) + 1
    out += ["", "```diff", *kept, "```"]
    if len(kept) < len(lines): out.append(f"({len(lines) - len(kept)} more diff lines in the HTML report)")
  if ex.traceback: out += ["", "```", E.md_block("\n".join(ex.traceback.splitlines()[-15:])), "```"]
  return out + ["", "</details>", ""]

def markdown(rep: Report, html_name: str | None = None, limit: int = MD_LIMIT) -> str:
  """The Markdown report, at most `limit` UTF-8 bytes: summary, failures first (each with the command to run next), the
  group table as far as it fits and then one line that counts the groups and captures left out, the groups' details as
  far as they fit (counted too), next steps. No group is left out without being counted. `html_name`: the HTML report
  written beside it (named where the rest is)."""
  c = rep.counts()
  code = rep.exit_code()
  fails = exec_failures(rep)
  elsewhere = f"`{E.md_code(html_name, None, table=False)}`" if html_name else "the HTML report (`--report-html FILE`) and the JSON report"
  icon = "❌" if code == 2 or fails or c["error"] or c["incompatible"] or c["unstable"] else {0: "✅", 1: "⚠️"}[code]
  if rep.stopped: icon = "⛔"
  head = [f"## {icon} process replay: {len(rep.results)} captures", *([f"**{stopped_line(rep)}**"] if rep.stopped else []), "",
          "| identical | changed | error | incompatible | time | rate |", "|---:|---:|---:|---:|---:|---:|",
          f"| {c['identical']} | {c['changed']} | {c['error']} | {c['incompatible']} | {rep.elapsed:.1f}s "
          f"| {len(rep.results)/max(rep.elapsed, 1e-9):.0f}/s |", ""]
  if ec := exec_counts(rep): head += ["Execution check: " + ", ".join(f"**{_md(k, 80)}** {v}" for k, v in ec.items()), ""]
  if et := exec_timing(rep): head += [et, ""]
  if dl := determinism_line(rep): head += [_md(dl), ""]
  for f in rep.fatal[:20]: head.append(f"- ❌ **fatal**: `{_cell(f, 400)}`")
  if len(rep.fatal) > 20: head.append(f"- ❌ {len(rep.fatal) - 20} more fatal store errors in {elsewhere}")
  if rep.fatal: head.append("")
  if acc := accepted_lines(rep, md=True): head += [*acc, ""]
  if pl := proof_lines(rep): head += ["```", *map(E.md_block, pl), "```", ""]
  if fails or c["error"] or c["incompatible"] or c["unstable"] or rep.perf_failures():  # what no accept marker waives comes first
    n_fail = len(fails) + c["error"] + c["incompatible"] + c["unstable"]
    head += [f"### ❌ Failures: {n_fail} capture(s), not waivable by [replay:accept]", ""]
    if fails:
      head += ["| verdict | capture | detail | next |", "|---|---|---|---|"]
      head += [f"| **{_md(verdict_of(r), 80)}** | {_md(r.label or '-', 300)} {_md(r.level, 80)} `{_cell(r.input_key[:12])}` | "
               f"{_md(_exec_line(r), 240)} | `{_cell(next_command(rep, r), 200)}` |" for r in fails[:MD_FAIL_ROWS]]
      if len(fails) > MD_FAIL_ROWS: head.append(f"| … | **{len(fails) - MD_FAIL_ROWS} more failing executions** in {elsewhere} | | |")
      head.append("")
    if c["error"] or c["incompatible"]:
      head.append(f"- {c['error']} error(s), {c['incompatible']} incompatible capture(s): the first groups below")
    if c["unstable"]: head.append(f"- {c['unstable']} unstable capture(s), whose output differs between processes: the first groups below")
    head += [f"- next ({v}): {NEXT_STEPS[v]}" for v in _failing_kinds(rep)] + [""]
  foot: list[str] = []
  if code:
    foot.append("**Next steps**")
    for o in ("changed", "error", "incompatible"):
      if c[o]: foot.append(f"- {o}: {NEXT_STEPS[o]}")
    if c["unstable"]: foot.append(f"- unstable: {NEXT_STEPS['unstable_output']}")
  groups = ordered_groups(rep)
  if not groups: return "\n".join(head + foot) + "\n"
  more_line = lambda k: (f"**{len(groups) - k} more groups ({sum(g['count'] for g in groups[k:])} captures) in {elsewhere}**"
                         f" (groups {k + 1}–{len(groups)} of {len(groups)})")
  room = limit - _size(head) - _size(foot) - 2 * len(more_line(0).encode()) - 64
  table = ["### Groups (failing first, then largest first)", "", "| # | outcome | exec | count | signature |", "|---:|---|---|---:|---|"]
  shown = 0
  for i, g in enumerate(groups):
    row = (f"| {i+1} | {'❌ ' if group_failures(g) else ''}{_md(g['outcome'], 80)} | {_md(verdict_summary(g), 80) or '-'} | {g['count']} | "
           f"`{_cell(g['signature'])}` |")
    if _size(table) + len(row.encode()) + 1 > room * 0.6: break
    table.append(row); shown += 1
  if shown < len(groups): table += ["", more_line(shown)]
  table.append("")
  details: list[str] = []
  detailed = 0
  for i, g in enumerate(groups[:shown]):
    block = _md_group_details(rep, i + 1, g)
    if _size(table) + _size(details) + _size(block) > room: break
    details += block; detailed += 1
  if detailed < shown:
    details += [f"_Details of groups {detailed + 1}–{shown} (above, in the table) did not fit here: they are in {elsewhere}._", ""]
  return "\n".join(head + table + details + foot) + "\n"

def junit(rep: Report) -> str:
  by_suite: dict[str, list[Result]] = {}
  for r in rep.results: by_suite.setdefault(f"replay.{r.level}", []).append(r)
  parts = ['<?xml version="1.0" encoding="UTF-8"?>',
           f'<testsuites name="process-replay" tests="{len(rep.results)}" time="{rep.elapsed:.3f}">']
  for suite, rs in sorted(by_suite.items()):
    fails = sum(r.outcome in ("changed", "unstable") or bool(r.exec and r.exec.get("verdict") in FAIL_ORDER) for r in rs)
    errs = sum(r.outcome in ("error", "incompatible") for r in rs)
    parts.append(f'  <testsuite name={E.xml_attr(suite)} tests="{len(rs)}" failures="{fails}" errors="{errs}">')
    for r in rs:
      name = f"{r.label or '-'}:{r.level}:{r.input_key[:16]}"
      parts.append(f'    <testcase classname={E.xml_attr(suite + "." + (r.label or "unlabelled"))} name={E.xml_attr(name)}>')
      if r.exec and r.exec.get("verdict") in FAIL_ORDER:
        what = ("exec " + verdict_of(r) + ": " + (r.exec.get("where") or r.exec.get("error") or ""))[:200]
        parts.append(f'      <failure message={E.xml_attr(what)}>{E.xml_text(_exec_line(r)[:4000])}</failure>')
      elif r.outcome in ("changed", "unstable"):
        body = (r.signature or "") + "\n" + (r.text_diff or "")[:4000] + ("\n" + _exec_line(r) if r.exec else "")
        parts.append(f'      <failure message={E.xml_attr((r.signature or "changed")[:200])}>{E.xml_text(body)}</failure>')
      elif r.outcome in ("error", "incompatible"):
        parts.append(f'      <error message={E.xml_attr((r.reason or r.outcome)[:200])}>{E.xml_text((r.traceback or r.reason or "")[:4000])}</error>')
      parts.append("    </testcase>")
    parts.append("  </testsuite>")
  if rep.stopped:  # a CI parser must see the run as broken, not as the few rows that happened to finish
    parts += ['  <testsuite name="replay.run" tests="1" failures="0" errors="1">', '    <testcase classname="replay.run" name="stopped">',
              f'      <error message={E.xml_attr(stopped_line(rep))}></error>', '    </testcase>', '  </testsuite>']
  parts.append("</testsuites>")
  return "\n".join(parts) + "\n"
