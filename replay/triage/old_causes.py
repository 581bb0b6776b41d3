"""Causes of changes that no rule turned off explains: a rule whose *behaviour* changed, named by blame with the old code.

The check's cause search (replay/check/causes.py) turns rules off on the current code; a rule that was edited (not
added) has no such set, so its rows stay in shape groups. For those groups, this step runs `replay blame` (the old code
of the capture's commit in a temporary worktree against this checkout, replay/triage/blame.py blame_input) on the sample
row of each group, largest group first, and names the group by the rule (or lowering pass) where the two codes first
part: `cause: view_of_const (changed)`. Groups with the same culprit merge in the report.

It runs where the old code can be had: the capture's run records a commit, made from a clean checkout, that the
repository holding this checkout (or the store) has; the old code must reproduce the stored output (else nothing is
named); and where the change is in the files: when this checkout's files do not make the output the check made (code
patched in memory, a test's plant), the step stops before any worktree is made. Results are cached by (this code, the
old commit, input, stored output); the step has a time budget (at least MIN_BUDGET_S, or the replay's own time), and
groups past it stay named by their shape until a later check. It is the triage layer's step, handed to the check as
`Options.old_code_causes` (the check sits below triage).
"""
from __future__ import annotations
import contextlib, hashlib, json, time
from pathlib import Path
from typing import Any
from tinysched.codegen.program_cache import code_fingerprint
from tinysched.helpers import cache_root, trusted_cache_dir, write_cache_entry
from replay import git as G
from replay.baseline.checkouts import CommitsError, Worktrees
from replay.check.causes import read_cached
from replay.check.results import Report, Result
from replay.store.sqlite import Store
from replay.triage.blame import TriageError, _check_pair, blame_input, blame_of, capture_commit
from replay.triage.probe import Probe, ProbeError, outcome

MIN_BUDGET_S = 5.0       # a worktree and two probes take about 1.5 s before the first blame
FORMAT = 1

def _cache_path(old_sha: str, row: dict) -> Path | None:
  folder = trusted_cache_dir(cache_root() / "causes")
  if folder is None: return None
  key = json.dumps([FORMAT, "old-code", code_fingerprint(), old_sha, row["level"], row["input_key"], row["output_key"]])
  return folder / f"{hashlib.sha256(key.encode()).hexdigest()}.json"

def _repo_for(store_path: str, sha: str) -> Path | None:
  """The repository that has commit `sha`: this checkout's, else the one holding the store."""
  for where in (G.THIS_CHECKOUT, Path(store_path).resolve().parent):
    if (root := G.toplevel(where)) is not None and G.commit_of(root, sha) is not None: return root
  return None

def unexplained(rep: Report) -> list[list[Result]]:
  """The changed shape groups the cause search left without a cause (or ran out of time on), largest first."""
  groups: dict[tuple[str, str], list[Result]] = {}
  for r in rep.results:
    c = r.cause or {}
    if r.outcome == "changed" and not r.pair and c and not c.get("rules"):
      groups.setdefault((r.level, r.signature or ""), []).append(r)
  return [m for _, m in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))]

def attribute(rep: Report, budget_s: float | None = None) -> dict[str, Any]:
  """Name the groups `unexplained` leaves by blame with the old code (module docstring); returns counts."""
  todo = unexplained(rep)
  if not todo: return {}
  budget = budget_s if budget_s is not None else max(MIN_BUDGET_S, rep.elapsed)
  t0 = time.perf_counter()
  stats = {"groups": len(todo), "named": 0, "cached": 0, "not_named": 0, "over_budget": 0}
  stores: dict[str, Store] = {}
  trees: dict[str, Path | None] = {}
  with contextlib.ExitStack() as stack:
    probes: dict[str, Probe] = {}
    new: list[Probe] = []  # this checkout's files, started once
    def new_probe() -> Probe:
      if not new: new.append(stack.enter_context(Probe(G.THIS_CHECKOUT, "new")))
      return new[0]
    def old_tree(store_path: str, sha: str) -> Path | None:
      if sha not in trees:
        root = _repo_for(store_path, sha)
        try: trees[sha] = stack.enter_context(Worktrees(root, prefix="replay-causes-")).add("old", sha) if root else None
        except CommitsError: trees[sha] = None
      return trees[sha]
    for members in todo:
      if time.perf_counter() - t0 > budget:
        stats["over_budget"] += 1
        continue
      sample = members[0]
      store = stores.get(sample.db) or stores.setdefault(sample.db, stack.enter_context(contextlib.closing(Store(sample.db, readonly=True))))
      row = next((x for x in store.captures(level=sample.level, key=sample.input_key) if x["input_key"] == sample.input_key
                  and x["run_id"] == sample.run_id and x["seq"] == sample.seq), None)
      if row is None: continue
      try: sha = capture_commit(store, row)
      except TriageError: continue  # (no commit, or a modified checkout: no old code to ask)
      path = _cache_path(sha, row)
      if (got := read_cached(path)) is not None: stats["cached"] += 1
      else:
        # the probes run this checkout's files: where they do not make the output this check made, the change is in
        # memory (a monkeypatch, a plant loaded at start-up) and no blame of files can name it (and no worktree is made)
        if new_probe().ask(sample.level, store.blob(row["input_key"])).get("key") != sample.new_key:
          stats["in_memory"] = 1
          break
        if (tree := old_tree(sample.db, sha)) is None: continue
        if sha not in probes: probes[sha] = stack.enter_context(Probe(tree, "old"))
        got = _blame_one(probes[sha], new_probe(), store, row, sha)
        if path is not None and got.get("final"):
          try: write_cache_entry(path, json.dumps(got).encode())
          except OSError: pass  # (no cache: blamed again next time)
      stats["named" if got.get("rules") else "not_named"] += 1
      if got.get("rules"):
        for m in members: m.cause = {**got, "sampled": m is not members[0]}
  return stats

def _blame_one(old: Probe, new: Probe, store: Store, row: dict, sha: str) -> dict[str, Any]:
  """The cause of one row by blame with the old code: {"rules": [culprit] or None, "how": ..., "final": cacheable}."""
  data, stored = store.blob(row["input_key"]), store.blob(row["output_key"])
  try:
    a_old, a_new = _check_pair(old, new, row["level"], data, stored)
    if outcome(a_old) == outcome(a_new):
      return {"rules": None, "how": f"the old code ({sha[:10]}) and this checkout's files give the same output (a change in memory?)", "final": False}
    res = blame_input(old, new, row["level"], data)
  except (TriageError, ProbeError) as e:
    return {"rules": None, "how": f"blame with the old code ({sha[:10]}) could not run: {e}", "final": False}
  if (name := blame_of(res)) is None:
    return {"rules": None, "how": f"blame with the old code ({sha[:10]}): {res.get('why') or res.get('verdict')}", "final": True}
  culprit = name.split(" ", 1)[1] + (" (changed)" if name.startswith("rule ") else " (pass changed)")
  where = f"application #{res['application']}" if res.get("application") else f"pass #{res.get('pass_index', 0) + 1}"
  return {"rules": [culprit], "changed": True, "runs": res.get("probes"), "final": True,
          "how": f"blame with the old code ({sha[:10]}) first parts at its {where}: its behaviour changed"}

__all__ = ["attribute", "unexplained", "MIN_BUDGET_S"]
