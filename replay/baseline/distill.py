"""`replay distill SRC... --out DB`: the few captures of a large capture set that exercise what a baseline does not.

A test suite captured with `pytest --replay-capture` holds thousands of rows, most of which fire the same rules as
the model suite; replaying all of them on every change costs minutes and finds nothing more. Distilling keeps, for
every rule and grouping choice of the coverage inventory (replay/baseline/coverage.py), enough rows that at least `per_rule`
captures of baseline + distilled set exercise it, where the source rows can: corpus minimization in the manner of
afl-cmin, over rule coverage instead of branch edges.

Selection is greedy and deterministic: each step takes the source input that serves the most rules still short of
`per_rule`, ties broken by size: first whether its largest view or buffer exceeds BIG_ELEMENTS (2**24: a past-int32
test's execution takes minutes and tens of GiB, so among inputs of equal gain it loses; an input serving more short
rules is taken even when big), then the smaller stored input, then level and input key; it stops when no input serves a rule
that is short. Only inputs that replay to the end with the current code are candidates (an error row is a bug to fix,
not a baseline). Each chosen input keeps one row (its first: store, run, sequence order) with its label, so a
distilled capture still names the test it came from.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from tinysched.ops import Ops
from tinysched.uop import UOp

from replay import levels
from replay.store.sqlite import Store, copy_rows
from replay.baseline.coverage import CoverageError, RuleKey, coverage, fired_rules_of, rule_inventory, _rows

Log = Callable[[str], None]
BIG_ELEMENTS = 1 << 24

def _rank(level: str) -> int:
  try: return levels.get(level).rank
  except Exception: return 1 << 30  # noqa: BLE001 (an unknown level last)

def _uops(x, out: list) -> None:
  """The UOps a decoded input holds (a tuple of graphs and maps, or a program document's roots)."""
  if isinstance(x, UOp): out.append(x)
  elif isinstance(x, (list, tuple)):
    for y in x: _uops(y, out)
  elif isinstance(x, dict):
    for k, v in x.items(): _uops(k, out); _uops(v, out)
  elif hasattr(x, "roots"): _uops(list(x.roots()), out)

def footprint(inputs) -> int:
  """The element count of the largest view or buffer of a decoded input (symbolic sizes are not counted)."""
  us: list = []
  _uops(inputs, us)
  big = 0
  for u in us:
    for n in u.toposort():
      try:
        if n.op is Ops.VIEW and hasattr(n.arg, "size"): big = max(big, int(n.arg.size))
        elif n.op is Ops.BUFFER: big = max(big, int(n.arg[1][1]))
      except (TypeError, ValueError, IndexError): continue  # a symbolic size
  return big

@dataclass
class Distilled:
  out: str
  sources: list[str]
  source_inputs: int = 0                 # distinct (level, input key) in the sources
  ran: int = 0                           # of those, replayed to the end with the current code (the candidates)
  kept: list[tuple[str, dict]] = field(default_factory=list)  # (source store, row) written to `out`
  newly_covered: list[RuleKey] = field(default_factory=list)  # rules the baseline never exercised and `out` does
  short: list[tuple[RuleKey, int]] = field(default_factory=list)  # rules below per_rule even after distilling (count)

def _candidates(stores: list[tuple[str, list[dict]]], log: Log) -> tuple[list[tuple[tuple, str, dict, frozenset[RuleKey]]], int]:
  """Per distinct source input that ran: (sort key, store, first row, rules it fires); and how many distinct inputs."""
  _, by_fn = rule_inventory()
  seen: set[tuple[str, str]] = set()
  out = []
  total = sum(len(rows) for _, rows in stores)
  done = 0
  for path, rows in stores:
    store = Store(path, readonly=True)
    try:
      sizes = dict(store.conn.execute("SELECT key, size FROM graphs").fetchall())
      for row in rows:
        done += 1
        if done % 500 == 0: log(f"  replayed {done}/{total} source rows")
        k = (row["level"], row["input_key"])
        if k in seen or row.get("_invalid"): continue
        seen.add(k)
        try: inputs = levels.get(row["level"]).decode_input(store.blob(row["input_key"]))
        except Exception: continue  # noqa: BLE001 (a missing, corrupt or undecodable payload: not a candidate)
        big = footprint(inputs) > BIG_ELEMENTS
        outcome, fired = fired_rules_of(row["level"], inputs)
        if outcome != "ran": continue
        rules = frozenset(rk for f in fired if (rk := by_fn.get(f)) is not None)
        out.append(((big, sizes.get(row["input_key"]) or 0, _rank(row["level"]), row["level"], row["input_key"]), path, row, rules))
    finally: store.close()
  return out, len(seen)

def distill(sources: list[str], out: str, against: list[str] | None = None, per_rule: int = 3, log: Log = print) -> Distilled:
  """Write the distilled rows of `sources` to a new store `out` (replaced whole; see the module docstring)."""
  if per_rule < 1: raise CoverageError(f"--per-rule {per_rule}: must be at least 1", "pass how many captures each rule should have")
  res = Distilled(out=str(out), sources=list(sources))
  src_rows = _rows(list(sources))  # unreadable sources fail before anything is replayed
  have = {c.rule: c.captures for c in coverage(list(against)).rules} if against else {}
  log(f"baseline: {sum(1 for v in have.values() if v)} rules exercised by {', '.join(against or []) or 'nothing'}")
  cands, res.source_inputs = _candidates(src_rows, log)
  res.ran = len(cands)
  need = {rk: per_rule - have.get(rk, 0) for rk in rule_inventory()[0]}
  need = {rk: n for rk, n in need.items() if n > 0}
  remaining = sorted(cands, key=lambda c: c[0])
  kept_rules: set[RuleKey] = set()
  while need and remaining:
    best_i, best_gain = -1, 0
    for i, (_, _, _, rules) in enumerate(remaining):
      gain = sum(1 for rk in rules if rk in need)
      if gain > best_gain: best_i, best_gain = i, gain  # strictly greater: the first (smallest) of equal gains wins
    if best_gain == 0: break
    _, path, row, rules = remaining.pop(best_i)
    res.kept.append((path, row))
    kept_rules |= rules
    for rk in rules:
      if rk in need:
        need[rk] -= 1
        if need[rk] == 0: del need[rk]
  res.newly_covered = sorted(rk for rk in kept_rules if not have.get(rk))
  res.short = [(rk, per_rule - n) for rk, n in sorted(need.items())]  # (rule, captures it has in baseline + distilled)
  for suffix in ("", "-wal", "-shm"): Path(f"{out}{suffix}").unlink(missing_ok=True)  # no stale journal beside a new store
  if res.kept: copy_rows(Path(out), res.kept)
  return res

def summary(res: Distilled, per_rule: int) -> str:
  lines = [f"{len(res.kept)} of {res.source_inputs} distinct source inputs kept ({res.ran} replayed to the end) -> {res.out}"]
  if res.newly_covered: lines.append(f"rules the baseline never exercised, now covered ({len(res.newly_covered)}): " +
                                     ", ".join(f"{rk.name} ({rk.where})" for rk in res.newly_covered))
  never = [rk for rk, n in res.short if n == 0]
  if never: lines.append(f"rules no capture exercises ({len(never)}): " + ", ".join(f"{rk.name} ({rk.where})" for rk in never))
  if few := [(rk, n) for rk, n in res.short if n > 0]:
    lines.append(f"rules with fewer than {per_rule} captures ({len(few)}): " + ", ".join(f"{rk.name} ({n})" for rk, n in few))
  return "\n".join(lines)

__all__ = ["distill", "summary", "Distilled"]
