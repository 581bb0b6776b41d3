"""Reports of a replay: terminal summary, Markdown (PR comment / job summary), JSON (stable schema), JUnit XML.

JSON schema `tinysched-replay-report` version 1:
  {"schema", "version", "sources": [db paths], "shard": "I/N"|null, "elapsed_s", "workers",
   "summary": {"total", "identical", "changed", "error", "incompatible", "unstable", "exec": {verdict: count}},
   "exit_code", "fatal": [messages], "accepted": [per-key accepts in the stores: Store.accepts() rows with "db"],
   "groups": [{"outcome", "signature", "count", "example": <result>, "members": [input keys]}],   largest first
   "results": [<result>]}                                                                          in store order
  <result> = {"db", "run_id", "seq", "level", "label", "input_key", "stored_key", "new_key", "outcome", "reason",
              "traceback", "changes": [{"kind","path","old","new"}], "change_count", "text_diff", "kernel_list",
              "signature", "rules", "metadata", "exec"}
"""
from __future__ import annotations
import json
from typing import Any
from xml.sax.saxutils import escape, quoteattr
from replay.check import Report
from replay.runner import Result, OUTCOMES
from replay.verdicts import FAIL_VERDICTS

SCHEMA, VERSION = "tinysched-replay-report", 1
MD_BUDGET = 50_000  # characters of group details in the Markdown report, so it fits a PR comment
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
  "unstable_output": "the same stored input gave different outputs in two processes with different PYTHONHASHSEED (replay check "
                     "--twice): something iterates a set or an id()-ordered dict into the output; [replay:accept] cannot waive it. "
                     "The group's diff is between the two processes' outputs",
}
FAIL_ORDER = FAIL_VERDICTS  # worst first

def exec_counts(rep: Report) -> dict[str, int]:
  out: dict[str, int] = {}
  for r in rep.results:
    if r.exec: out[r.exec.get("verdict", "?")] = out.get(r.exec.get("verdict", "?"), 0) + 1
  return dict(sorted(out.items()))

def to_json(rep: Report) -> dict[str, Any]:
  c = rep.counts()
  return {"schema": SCHEMA, "version": VERSION, "sources": rep.sources, "shard": rep.shard, "elapsed_s": round(rep.elapsed, 3),
          "workers": rep.workers, "summary": {"total": len(rep.results), **c, "exec": exec_counts(rep),
                                                            "perf_regressions": len(rep.perf_failures())}, "exit_code": rep.exit_code(),
          "fatal": rep.fatal, "perf_gate": rep.perf_gate, "accepted": rep.accepted,
          "groups": [{"outcome": g["outcome"], "signature": g["signature"], "count": g["count"], "example": g["example"].to_dict(),
                      "members": [m.input_key for m in g["members"]]} for g in rep.groups()],
          "results": [r.to_dict() for r in rep.results]}

def write_json(rep: Report, path: str) -> None:
  with open(path, "w") as f: json.dump(to_json(rep), f, indent=1, sort_keys=True)

def from_json(doc: dict) -> Report:
  if doc.get("schema") != SCHEMA or doc.get("version") != VERSION:
    raise ValueError(f"not a {SCHEMA} v{VERSION} report (schema={doc.get('schema')!r}, version={doc.get('version')!r})")
  rep = Report(results=[Result(**r) for r in doc["results"]], sources=list(doc["sources"]), elapsed=doc.get("elapsed_s", 0.0),
               workers=doc.get("workers", 1), fatal=list(doc.get("fatal", [])), shard=doc.get("shard"), perf_gate=doc.get("perf_gate"),
               accepted=list(doc.get("accepted", [])))
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
  return out

def accepted_lines(rep: Report, md: bool = False, limit: int = 20) -> list[str]:
  """What `replay accept --key/--group` accepted in the checked stores since their last full capture (newest first)."""
  if not rep.accepted: return []
  acc = sorted(rep.accepted, key=lambda a: (a.get("time") or "", a.get("db") or "", a.get("id") or 0), reverse=True)
  q = (lambda x: f"`{_md(str(x))}`") if md else str
  out = [("**" if md else "") + f"accepted per kernel since the last full capture: {len(acc)} row(s)" + ("**" if md else "")]
  for a in acc[:limit]:
    out.append(f"{'- ' if md else '    '}{a.get('level')} {q((a.get('input_key') or '')[:16])} ({a.get('label') or '-'}, {a.get('db')}): "
               f"{q((a.get('old_output_key') or '')[:12])} -> {q((a.get('new_output_key') or '')[:12])} at {q((a.get('git_commit') or '?')[:10])}"
               f"{' (dirty)' if a.get('git_dirty') else ''} by {a.get('who') or '?'} on {a.get('time')}: {a.get('message')}")
  if len(acc) > limit: out.append(f"{'- ' if md else '    '}... and {len(acc) - limit} more (see the JSON report's accepted)")
  return out

def exec_timing(rep: Report) -> str | None:
  """One line: total old vs new kernel time over the executed captures, and how many got slower."""
  timed = [r.exec for r in rep.results if r.exec and r.exec.get("old_time_s") and r.exec.get("new_time_s")]
  if not timed: return None
  old, new = sum(e["old_time_s"] for e in timed), sum(e["new_time_s"] for e in timed)
  slower = sum(1 for e in timed if e.get("slower"))
  return f"kernel time over {len(timed)} executed captures: stored {old*1e3:.3f} ms, current {new*1e3:.3f} ms ({new/old:.2f}x); {slower} slower"

def _exec_line(r: Result) -> str:
  e = r.exec or {}
  if not e: return ""
  parts = [e.get("verdict", "")]
  if e.get("max_abs_err") is not None: parts.append(f"max abs err {e['max_abs_err']:.3g}")
  if e.get("verdict") in ("mismatch", "wrong"):
    parts.append(f"{e.get('where')}")
    parts.append(f"max rel err {e['max_rel_err']:.3g}" if e.get("max_rel_err") is not None else "")
    parts.append(f"max {e['max_ulp']:.3g} ULP" if e.get("max_ulp") is not None else "")
    parts.append(f"{e.get('n_diff')} elements differ (first at {e.get('first_diff')}) in buffer {e.get('buffer')}"
                 + (f", {e['n_nonfinite']} of them NaN/inf on one side only" if e.get("n_nonfinite") else ""))
    if e.get("unstable_sides"): parts.append(f"also unstable: {e['unstable_sides']}")
    if e.get("wrong_sides"): parts.append(f"off the reference: {', '.join(e['wrong_sides'])}")
  if e.get("verdict") in ("unstable", "failed", "timeout", "skipped"): parts.append(e.get("error") or e.get("reason") or "")
  if e.get("retried"): parts.append("retried alone")
  if e.get("old_time_s") and e.get("new_time_s"):
    parts.append(f"time {e['old_time_s']*1e6:.1f}us -> {e['new_time_s']*1e6:.1f}us (noise {100 * (e.get('noise') or 0):.0f}%)"
                 + (" SLOWER" if e.get("slower") else "") + (" faster" if e.get("faster") else ""))
    if e.get("gbps") is not None: parts.append(f"{e['gbps']:.2f} GB/s, {e.get('gflops', 0):.2f} GFLOP/s")
  if e.get("seed") is not None: parts.append(f"seed {e['seed']}")
  return ", ".join(p for p in parts if p)

def exec_failures(rep: Report) -> list[Result]:
  """Every executed capture whose verdict fails the gate, worst kind first."""
  order = {v: i for i, v in enumerate(FAIL_ORDER)}
  bad = [r for r in rep.results if r.exec and r.exec.get("verdict") in order]
  return sorted(bad, key=lambda r: (order[r.exec["verdict"]], r.db, r.input_key))

def terminal(rep: Report, max_groups: int = 10, verbose: bool = False) -> str:
  c = rep.counts()
  lines = [f"replayed {len(rep.results)} captures from {len(rep.sources)} store(s) in {rep.elapsed:.2f}s "
           f"({len(rep.results)/max(rep.elapsed, 1e-9):.0f}/s, {rep.workers} worker(s))" + (f", shard {rep.shard}" if rep.shard else "")]
  lines.append("  " + "  ".join(f"{o}: {c[o]}" for o in OUTCOMES))
  if ec := exec_counts(rep): lines.append("  exec: " + "  ".join(f"{k}: {v}" for k, v in ec.items()))
  if et := exec_timing(rep): lines.append("  " + et)
  fails = exec_failures(rep)
  for r in fails[:10]: lines.append(f"  {r.exec['verdict'].upper()}: {r.label or '-'} {r.level} {r.input_key[:16]} ({r.db}): {_exec_line(r)}")
  if len(fails) > 10: lines.append(f"  ... and {len(fails) - 10} more failing executions (see --report-json)")
  for r in rep.perf_failures()[:5]: lines.append(f"  SLOWER (--perf-gate): {r.label or '-'} {r.level} {r.input_key[:16]}: {_exec_line(r)}")
  for f in rep.fatal: lines.append(f"  FATAL {f}")
  lines += ["  " + ln for ln in accepted_lines(rep)]
  groups = rep.groups()
  for g in groups[:max_groups]:
    ex: Result = g["example"]
    lines.append(f"\n[{g['outcome']}] x{g['count']}  {g['signature']}")
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
  if len(groups) > max_groups: lines.append(f"\n... and {len(groups) - max_groups} more groups (see --report-md/--report-json)")
  code = rep.exit_code()
  lines.append("")
  if code == 0: lines.append("OK: every capture replays identically.")
  else:
    bad = [v for v in _failing_kinds(rep)]
    found = ", ".join([f"exec {v}" for v in bad] + (["changes"] if c["changed"] else []) + (["unstable outputs"] if c["unstable"] else []))
    lines.append(f"exit {code}: " + ("errors, incompatible captures, or kernels that failed or timed out" if code == 2 else f"{found or 'changes'} found"))
    for v in _failing_kinds(rep): lines.append(f"  next ({v}): {NEXT_STEPS[v]}")
    for o in ("changed", "error", "incompatible"):
      if c[o]: lines.append(f"  next: {NEXT_STEPS[o]}")
    if c["unstable"]: lines.append(f"  next (unstable): {NEXT_STEPS['unstable_output']}")
  return "\n".join(lines)

def _failing_kinds(rep: Report) -> list[str]:
  kinds = {r.exec["verdict"] for r in exec_failures(rep)}
  return [v for v in FAIL_ORDER if v in kinds] + (["perf"] if rep.perf_failures() else [])

def markdown(rep: Report, max_groups: int = 20) -> str:
  c = rep.counts()
  code = rep.exit_code()
  fails = exec_failures(rep)
  icon = "❌" if code == 2 or fails else {0: "✅", 1: "⚠️"}[code]
  out = [f"## {icon} process replay: {len(rep.results)} captures", "",
         "| identical | changed | error | incompatible | time | rate |", "|---:|---:|---:|---:|---:|---:|",
         f"| {c['identical']} | {c['changed']} | {c['error']} | {c['incompatible']} | {rep.elapsed:.1f}s | {len(rep.results)/max(rep.elapsed, 1e-9):.0f}/s |", ""]
  if ec := exec_counts(rep): out += ["Execution check: " + ", ".join(f"**{k}** {v}" for k, v in ec.items()), ""]
  if et := exec_timing(rep): out += [et, ""]
  for f in rep.fatal: out.append(f"- **fatal**: `{f}`")
  if acc := accepted_lines(rep, md=True): out += [*acc, ""]
  if fails:  # numbers that are wrong come before anything a reviewer could accept
    out += [f"### ❌ {len(fails)} failing execution(s): not waivable by [replay:accept]", "", "| verdict | capture | detail |", "|---|---|---|"]
    out += [f"| **{r.exec['verdict']}** | {r.label or '-'} {r.level} `{r.input_key[:12]}` | {_md(_exec_line(r))[:300]} |" for r in fails[:30]]
    if len(fails) > 30: out.append(f"| … | {len(fails) - 30} more | see the JSON report |")
    out += [""] + [f"- next ({v}): {NEXT_STEPS[v]}" for v in _failing_kinds(rep)] + [""]
  groups = rep.groups()
  if groups:
    out += ["### Groups (largest first)", "", "| # | outcome | count | signature |", "|---:|---|---:|---|"]
    for i, g in enumerate(groups[:max_groups]): out.append(f"| {i+1} | {g['outcome']} | {g['count']} | `{_md(g['signature'])[:200]}` |")
    out.append("")
    for i, g in enumerate(groups[:max_groups]):
      if sum(len(x) + 1 for x in out) > MD_BUDGET:  # a PR comment holds 65,536 characters
        out += [f"_{len(groups[:max_groups]) - i} more group(s) left out to fit a PR comment: see the JSON report._", ""]
        break
      ex: Result = g["example"]
      out += [f"<details><summary>{i+1}. {g['outcome']} ×{g['count']}: {ex.label or '-'} {ex.level} <code>{ex.input_key[:12]}</code></summary>", ""]
      if ex.metadata: out.append(f"made by: `{_md(ex.metadata)}`  ")
      if ex.rules: out.append(f"rules: `{', '.join(ex.rules)}`  ")
      if ex.exec: out.append(f"exec: {_exec_line(ex)}  ")
      if ex.reason: out += ["", "```", ex.reason[:2000], "```"]
      if ex.changes:
        out += ["", "| change | path | old | new |", "|---|---|---|---|"]
        out += [f"| {ch['kind']} | `{_md(ch['path'])}` | `{_md(str(ch['old']))[:80]}` | `{_md(str(ch['new']))[:80]}` |" for ch in ex.changes[:12]]
      if ex.text_diff: out += ["", "```diff", "\n".join(ex.text_diff.splitlines()[:80]), "```"]
      if ex.traceback: out += ["", "```", "\n".join(ex.traceback.splitlines()[-15:]), "```"]
      out += ["", "</details>", ""]
  if code:
    out.append("**Next steps**")
    for o in ("changed", "error", "incompatible"):
      if c[o]: out.append(f"- {o}: {NEXT_STEPS[o]}")
    if c["unstable"]: out.append(f"- unstable: {NEXT_STEPS['unstable_output']}")
  return "\n".join(out) + "\n"

def _md(s: str) -> str: return s.replace("|", "\\|").replace("`", "'")

def junit(rep: Report) -> str:
  by_suite: dict[str, list[Result]] = {}
  for r in rep.results: by_suite.setdefault(f"replay.{r.level}", []).append(r)
  parts = ['<?xml version="1.0" encoding="UTF-8"?>',
           f'<testsuites name="process-replay" tests="{len(rep.results)}" time="{rep.elapsed:.3f}">']
  for suite, rs in sorted(by_suite.items()):
    fails = sum(r.outcome in ("changed", "unstable") or bool(r.exec and r.exec.get("verdict") in FAIL_ORDER) for r in rs)
    errs = sum(r.outcome in ("error", "incompatible") for r in rs)
    parts.append(f'  <testsuite name={quoteattr(suite)} tests="{len(rs)}" failures="{fails}" errors="{errs}">')
    for r in rs:
      name = f"{r.label or '-'}:{r.level}:{r.input_key[:16]}"
      parts.append(f'    <testcase classname={quoteattr(suite + "." + (r.label or "unlabelled"))} name={quoteattr(name)}>')
      if r.exec and r.exec.get("verdict") in FAIL_ORDER:
        parts.append(f'      <failure message={quoteattr(("exec " + r.exec["verdict"] + ": " + (r.exec.get("where") or r.exec.get("error") or ""))[:200])}>'
                     f'{escape(_exec_line(r)[:4000])}</failure>')
      elif r.outcome in ("changed", "unstable"):
        body = (r.signature or "") + "\n" + (r.text_diff or "")[:4000] + ("\n" + _exec_line(r) if r.exec else "")
        parts.append(f'      <failure message={quoteattr((r.signature or "changed")[:200])}>{escape(body)}</failure>')
      elif r.outcome in ("error", "incompatible"):
        parts.append(f'      <error message={quoteattr((r.reason or r.outcome)[:200])}>{escape((r.traceback or r.reason or "")[:4000])}</error>')
      parts.append("    </testcase>")
    parts.append("  </testsuite>")
  parts.append("</testsuites>")
  return "\n".join(parts) + "\n"
