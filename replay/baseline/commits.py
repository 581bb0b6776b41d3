"""`replay commits BASE HEAD`: capture the model suite with each commit's code and compare the two capture sets.

`commits` checks both commits out as temporary git worktrees, runs the capture suite in each with that
commit's own code (`python -m replay.baseline.suite MODEL --quick` with the worktree first on PYTHONPATH, one fresh
process per model, through replay.baseline.suite.run_model), diffs the two capture sets with replay.check.pairs, and
removes the worktrees again: after success, failure, Ctrl-C or SIGTERM (SIGTERM is turned into the same
exception as Ctrl-C, so every `finally` runs and subprocess.run kills the model process it waits for).

A commit without the suite runner (replay/baseline/suite.py or tinysched/models/suite.py) gets the current
checkout's runner files copied into its worktree (never over files it has), and the output says so
(replay.baseline.checkouts).
"""
from __future__ import annotations
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from replay import check, levels
from replay.check import Options, Report, Selection
from replay.levels import LEVELS
from replay.store.sqlite import Store
from replay.baseline.suite import run_model
from replay.baseline.checkouts import (HOOK_FILE, RUNNER_FILES, CommitsError, Log, Worktrees, _ask, add_runner, has_runner_file, interruptible,
                                       list_models,
                                       pythonpath, repo_root, resolve)

@dataclass
class Side:
  name: str                  # "BASE" / "HEAD"
  ref: str
  sha: str
  subject: str = ""
  tree: Path | None = None
  db: Path | None = None
  copied: list[str] = field(default_factory=list)   # runner files taken from the current checkout
  runs: list[dict] = field(default_factory=list)     # run_model results
  counts: dict = field(default_factory=dict)         # {label: {level: n, "kernels_scheduled": n}}

@dataclass
class CommitsResult:
  base: Side
  head: Side
  report: Report             # the comparison of base.db with head.db
  models: list[str]
  notes: list[str]
  kept: Path | None = None
  def failures(self) -> list[tuple[Side, dict]]:
    return [(s, r) for s in (self.base, self.head) for r in s.runs if not r.get("ok")]

def _lists_kernels(level: str) -> bool:
  try: return levels.get(level).lists_kernels
  except Exception: return False  # noqa: BLE001 (an unknown level is counted, not summed)

def store_counts(db: Path) -> dict[str, dict[str, int]]:
  """{label: {level: captures, "kernels_scheduled": sum of kernel counts of schedule captures}} of one store."""
  out: dict[str, dict[str, int]] = {}
  if not db.exists(): return out
  c = sqlite3.connect(f"file:{db.resolve()}?mode=ro", uri=True)
  c.text_factory = lambda b: b.decode("utf-8", "backslashreplace")  # a crafted label must not crash the counts (as Store reads it)
  try:
    for label, level, n, k in c.execute("SELECT coalesce(label,''), level, count(*), coalesce(sum(kernel_count),0) FROM captures "
                                        "GROUP BY 1, 2 ORDER BY 1, 2"):
      d = out.setdefault(label, {})
      d[level] = n
      if _lists_kernels(level): d["kernels_scheduled"] = k
  except sqlite3.DatabaseError: pass  # an unreadable store shows up in the comparison instead
  finally: c.close()
  return out

def _capture(side: Side, models: list[str], quick: bool, levels: tuple[str, ...], timeout: float | None, log: Log) -> None:
  assert side.tree is not None and side.db is not None
  with pythonpath(side.tree):
    for m in models:
      log(f"  {side.name} {side.sha[:8]}: capturing {m} ...")
      r = run_model(m, side.db, quick=quick, levels=levels, cwd=str(side.tree), timeout=timeout)
      side.runs.append(r)
      if r.get("skipped"): log(f"    {m}: skipped ({r['skipped']})")
      elif r.get("ok"): log(f"    {m}: done in {r['seconds']}s")
      else: log(f"    {m}: FAILED after {r['seconds']}s: {r.get('error')}")
  if not side.db.exists(): Store(side.db).close()  # nothing captured: an empty store still compares

def run_commits(base_ref: str, head_ref: str, models: list[str] | None = None, quick: bool = True, levels: tuple[str, ...] = LEVELS,
                level: str | None = None, keep: bool = False, tmp_dir: str | None = None, timeout: float | None = None,
                cwd: Path | str | None = None, log: Log = print, options: Options = Options(), after_compare=None) -> CommitsResult:
  """Capture the suite at both commits in temporary worktrees and compare the captures (HEAD against BASE), with the
  execution check when `options` ask for it. `after_compare(report)` runs while both stores still exist (drawings)."""
  root = repo_root(cwd)
  base = Side("BASE", base_ref, resolve(root, base_ref))
  head = Side("HEAD", head_ref, resolve(root, head_ref))
  for s in (base, head): s.subject = _ask(["log", "-1", "--format=%s", s.sha], root)
  notes: list[str] = []
  with interruptible(), Worktrees(root, tmp_dir) as wt:
    log(f"replay commits: BASE {base.sha[:8]} {base.subject!r} -> HEAD {head.sha[:8]} {head.subject!r}")
    log(f"  worktrees in {wt.tmp}")
    for s in (base, head):
      s.tree = wt.add(s.name.lower(), s.sha)
      s.db = wt.tmp / f"{s.name.lower()}-{s.sha[:8]}.db"
      if not (s.tree / HOOK_FILE).exists():
        raise CommitsError(f"{s.name} {s.ref} ({s.sha[:8]}) predates the capture hooks ({HOOK_FILE} is missing)",
                           "pick a newer commit that has the capture hooks")
      missing = [r for r in RUNNER_FILES if not has_runner_file(s.tree, r)]
      s.copied = add_runner(s.tree, root)
      if missing:
        notes.append(f"{s.name} {s.sha[:8]} has no suite runner ({', '.join(missing)} missing): using the current checkout's "
                     f"runner ({', '.join(s.copied)}) against {s.name}'s code")
        log(f"  note: {notes[-1]}")
    suites = {s.name: list_models(s.tree) for s in (base, head) if s.tree is not None}
    names = models or suites["HEAD"]
    if unknown := [m for m in names if m not in suites["BASE"] and m not in suites["HEAD"]]:
      raise CommitsError(f"unknown model(s) {unknown}: BASE's suite has {', '.join(suites['BASE']) or 'nothing'}, "
                         f"HEAD's has {', '.join(suites['HEAD']) or 'nothing'}", "pick names from those with --models")
    for s in (base, head):
      # a model only one commit has is not a failure: its captures show up as added or removed
      if absent := [m for m in names if m not in suites[s.name]]:
        notes.append(f"{', '.join(absent)} not in {s.name}'s suite: {'added' if s is base else 'removed'} captures show that")
        log(f"  note: {notes[-1]}")
      _capture(s, [m for m in names if m in suites[s.name]], quick, levels, timeout, log)
    for s in (base, head): s.counts = store_counts(s.db) if s.db is not None else {}
    rep = check.run(Selection((str(head.db),), level=level, against=str(base.db), allow_empty=True), options)
    if not rep.results:  # a comparison of nothing must not read as "nothing changed"
      skipped = sorted({f"{r['model']} ({r['skipped']})" for s in (base, head) for r in s.runs if r.get("skipped")})
      why = "nothing was compared: no model captured anything at either commit"
      raise CommitsError(why + (f"; skipped: {'; '.join(skipped)}" if skipped else ""),
                         "install what the skipped models need, or name models that run here with --models")
    if after_compare is not None: after_compare(rep)
    if keep:
      wt.keep = True
      notes.append(f"kept worktrees and stores in {wt.tmp} (remove with: git worktree remove --force <path>; git worktree prune)")
    else:  # the stores are deleted with the worktrees: name the commits instead of paths that will not exist
      rep.sources = [f"BASE {base.sha[:8]} ({base.ref})", f"HEAD {head.sha[:8]} ({head.ref})"]
      for r in rep.results: r.db = f"HEAD {head.sha[:8]}"
    return CommitsResult(base, head, rep, names, notes, wt.tmp if keep else None)

def counts_table(res: CommitsResult) -> str:
  """Captures per model and level, BASE -> HEAD (with the number of kernels the schedules produced)."""
  lines = ["captures per model (BASE -> HEAD):"]
  labels = sorted(set(res.base.counts) | set(res.head.counts))
  for lb in labels:
    b, h = res.base.counts.get(lb, {}), res.head.counts.get(lb, {})
    cols = [f"{k} {b.get(k, 0)} -> {h.get(k, 0)}" + (" *" if b.get(k, 0) != h.get(k, 0) else "")
            for k in (*LEVELS, "kernels_scheduled") if b.get(k) or h.get(k)]
    lines.append(f"  {lb or '-':20s} " + "   ".join(cols))
  if not labels: lines.append("  (nothing captured)")
  return "\n".join(lines)

