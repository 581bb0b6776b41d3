"""Changes grouped by cause: the rules without which the current code gives a changed capture its stored output again.

A diff's shape is a poor name for a change: one new rule that rewrites a pattern wherever it appears changes captures
of dozens of shapes, and the rules that *built* the changed nodes (Result.rules) miss a rule whose work later rules
rewrite again, or one that removes nodes. So for a sample row of each changed shape group, the current code replays it
again with rules turned off (tinysched.rewrite.rules_off), on the rules that fired on it (those that built the changed
nodes first; causes found for other groups before them): a single rule whose absence gives back the stored output is
the cause; else a pair of the likeliest rules; else, if turning all of them off does, delta debugging (Zeller's ddmin
over the set of rules, as LLVM's debug counters are bisected in chunks) finds a smallest set that does. So a change
that needs two rules together is named as the pair, and neither alone (the search: replay/check/rule_search.py). A
rule whose *behaviour* changed (rather than one added) has no such set: the row keeps its shape group and its builders'
names here, and the triage layer's step (replay/triage/old_causes.py, Options.old_code_causes) names it by blame with
the old code.

Every replay runs in a forked child (a rewrite with rules refused can leave derived results in memo tables, as a
rewrite limit can). A cause is found once per (code, level, input, stored output) and cached on disk; the whole step
has a time budget (the replay's own time, at least MIN_BUDGET_S; Options.causes_budget sets it), and groups past it
stay named by their shape.
"""
from __future__ import annotations
import hashlib, json, time
from pathlib import Path
from typing import Any
from tinysched import rewrite
from tinysched.codegen.program_cache import code_fingerprint
from tinysched.helpers import cache_root, trusted_cache_dir, write_cache_entry
from replay import levels
from replay.process import forked
from replay.check.rule_search import ddmin, smallest_set
from replay.store.sqlite import Store
from replay.check.results import Report, Result

MAX_RUNS = 64            # replays per sample row (single rules, pairs, then ddmin)
MIN_BUDGET_S = 0.5       # the step's time budget: this, or the replay's own time if longer (a check with hundreds of
                         # changes stays within about twice a clean one; the disk cache makes the next run's step cheap)
FORMAT = 1

class _Row:
  """One changed row replayed with rules off: the key its output gets, and the rules that fire on it."""
  def __init__(self, store: Store, row: dict, reoptimize: bool) -> None:
    self.level, self.row, self.reoptimize = levels.get(row["level"]), row, reoptimize
    self.data, self.runs = store.blob(row["input_key"]), 0
  def _run(self) -> bytes:
    return self.level.run_row(self.level.decode_input(self.data), self.row, self.reoptimize)[1]
  def key_without(self, off: list[str]) -> str | None:
    self.runs += 1
    def go() -> str:
      with rewrite.rules_off(off): return hashlib.sha256(self._run()).hexdigest()
    return forked(go)
  def fired(self) -> list[str]:
    def go() -> list[str]:
      prev, rewrite.FIRED = rewrite.FIRED, []
      try:
        self._run()
        return list(dict.fromkeys(name for name, _ in rewrite.FIRED))  # first-fire order, each once
      finally: rewrite.FIRED = prev
    return forked(go) or []

def cause_of(store: Store, row: dict, builders: list[str], reoptimize: bool = False, known: list[list[str]] | None = None,
             deadline: float | None = None) -> dict[str, Any]:
  """{"rules": [...] or None, "runs": n, "how": ...}: the smallest set of rules found without which the current code
  gives `row` its stored output again (module docstring). `known`: causes found for other rows of this check, tried
  first (one change usually explains every group: one replay each); `deadline` (perf_counter): stop looking then."""
  r = _Row(store, row, reoptimize)
  stored = row["output_key"]
  spent = lambda: r.runs >= MAX_RUNS or (deadline is not None and time.perf_counter() > deadline)  # noqa: E731
  restores = lambda off: not spent() and r.key_without(off) == stored  # noqa: E731
  def named(rules: list[str]) -> dict[str, Any]:
    return {"rules": rules, "runs": r.runs, "how": "without it the stored output comes back" if len(rules) == 1 else
            "without them together the stored output comes back (no one of them alone does)"}
  # each rule of a known cause alone first, then the known sets of several, then all known rules together (a set is
  # named only where no rule of it alone does: ddmin keeps it 1-minimal)
  singles = list(dict.fromkeys(n for k in known or [] for n in k))
  for rules in [[n] for n in singles] + [k for k in known or [] if len(k) > 1]:
    if restores(rules): return named(rules)
  if len(singles) >= 2 and restores(singles): return named(ddmin(singles, restores, spent))
  fired = r.fired()
  order = [n for n in builders if n in fired] + [n for n in fired if n not in builders]
  if (found := smallest_set(order, restores, spent, frozenset(singles))) is not None: return named(found)
  if spent(): return {"rules": None, "runs": r.runs, "how": "not found within the step's time budget", "partial": True}
  return {"rules": None, "runs": r.runs, "how": "no rule or pair of the rules that fired gives the stored output back (a rule's "
                                               "behaviour changed, or code outside the rules)" if order else "no rule fired"}

def read_cached(path: Path | None) -> dict | None:
  """A cause cached at `path` (this module's entries and replay/triage/old_causes.py's), or None."""
  if path is None: return None
  try: got = json.loads(path.read_text())
  except (OSError, ValueError): return None
  return got if isinstance(got, dict) and "rules" in got else None

def _cache_path(row: dict, reoptimize: bool) -> Path | None:
  folder = trusted_cache_dir(cache_root() / "causes")
  if folder is None: return None
  key = json.dumps([FORMAT, code_fingerprint(), row["level"], row["input_key"], row["output_key"], reoptimize])
  return folder / f"{hashlib.sha256(key.encode()).hexdigest()}.json"

def attribute(rep: Report, reoptimize: bool = False, budget_s: float | None = None) -> dict[str, int]:
  """Name the cause of each changed result of `rep` (Result.cause), one sample row per shape group; returns counts."""
  groups: dict[tuple[str, str], list[Result]] = {}
  for res in rep.results:
    if res.outcome == "changed" and not res.pair: groups.setdefault((res.level, res.signature or ""), []).append(res)
  if not groups: return {}
  budget = budget_s if budget_s is not None else max(MIN_BUDGET_S, rep.elapsed)
  t0, stats = time.perf_counter(), {"groups": len(groups), "attributed": 0, "unattributed": 0, "cached": 0, "over_budget": 0}
  known: list[list[str]] = []
  stores: dict[str, Store] = {}
  def sample_row(sample: Result) -> tuple[Store, dict] | None:
    store = stores.get(sample.db) or stores.setdefault(sample.db, Store(sample.db, readonly=True))
    row = next((x for x in store.captures(level=sample.level, key=sample.input_key) if x["input_key"] == sample.input_key
                and x["run_id"] == sample.run_id and x["seq"] == sample.seq), None)
    return None if row is None else (store, row)
  def settle(members: list[Result], got: dict) -> None:
    stats["attributed" if got.get("rules") else "unattributed"] += 1
    if got.get("rules") and got["rules"] not in known: known.append(got["rules"])
    for m in members: m.cause = {**got, "sampled": m is not members[0]}
  try:
    retry: list[tuple[list[Result], Store, dict, Path | None, dict]] = []
    for (_, _), members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
      if time.perf_counter() - t0 > budget:
        stats["over_budget"] += 1
        continue
      if (found := sample_row(members[0])) is None: continue
      store, row = found
      path = _cache_path(row, reoptimize)
      if (got := read_cached(path)) is not None: stats["cached"] += 1
      else:
        got = cause_of(store, row, list(members[0].rules), reoptimize, known, t0 + budget)
        if not got.get("rules"):
          retry.append((members, store, row, path, got))  # (a cause found later, for a larger share of the change, may explain it)
          continue
        if path is not None:
          try: write_cache_entry(path, json.dumps(got).encode())
          except OSError: pass  # (no cache: found again next time)
      settle(members, got)
    for members, store, row, path, first in retry:  # the causes found since: a few replays each
      if not known: got = first  # (nothing new to try: the first search's answer stands)
      elif time.perf_counter() - t0 <= budget: got = cause_of(store, row, [], reoptimize, known, t0 + budget)
      else: got = {"rules": None, "runs": 0, "how": "not found within the step's time budget", "partial": True}
      if path is not None and not got.get("partial"):
        try: write_cache_entry(path, json.dumps(got).encode())
        except OSError: pass
      settle(members, got)
  finally:
    for s in stores.values(): s.close()
  return stats

__all__ = ["attribute", "cause_of", "read_cached", "MAX_RUNS"]
