"""Rule coverage: which named rules of the scheduler, the symbolic simplifier and codegen the stored captures exercise.

The rules are every PatternMatcher found in the modules of `MATCHER_MODULES` (tinysched/scheduling/*.py,
tinysched/symbolic.py, tinysched/codegen/*.py), one entry per (module, matcher, rule name). A rule reachable from
several matchers (a combined matcher `a + b`, or a matcher another module imports) is listed once, under the smallest
matcher of the module that defines its function: compose_views is `compose_rules`', not also views_up's and views_down's.

A capture exercises a rule when replaying its stored input with the current code fires that rule at least once.
Firings are seen through `tinysched.rewrite.FIRED`, which every rule application reports (graph_rewrite's, and the
direct `PatternMatcher.rewrite` calls of the lowerer and the OpenCL renderer). Each distinct input is replayed once
(a capture's firings depend only on its input and the code), with the memos whose misses run rules emptied first, so what a
capture exercises does not depend on which captures were replayed before it. Decoding the input is not counted.

The scheduler's grouping choices (scheduling/fusion.py decides without rewriting) are in the inventory too: each is
a named choice of a `tinysched.rewrite.Decisions` (`grouping`), listed like a rule, and reported the same way. Its
store decisions are the named `store_rules`.

Firings of matchers outside these modules (UOp.substitute's one-off matcher) are not rules of the inventory: they
are counted apart (`other_firings`).
"""
from __future__ import annotations
import importlib, json, pkgutil, sqlite3
from datetime import datetime, timezone
from dataclasses import dataclass, field
from typing import Any, Callable
from tinysched import capture_hook, rewrite
from tinysched.codegen import lowerer
from tinysched.rewrite import Decisions, PatternMatcher
from tinysched.shape import clear_caches
from replay import git as G, levels
from replay.store.encode import IncompatibleCapture
from replay.store.sqlite import Store, StoreError, compact
from replay.errors import HintedError

MATCHER_MODULES = ("tinysched.scheduling", "tinysched.symbolic", "tinysched.codegen")  # a package means all its modules
# rules the committed baseline is known not to exercise, and why (printed beside them; a key that names no rule of the
# inventory fails tests/replay/test_coverage.py, so a reason cannot outlive its rule)
WHY_UNREACHED: dict[tuple[str, str], str] = {
  ("symbolic.symbolic", "add_zero_float"): "x + 0.0 -> x is not exact for floats (-0.0 + 0.0 is +0.0), so codegen leaves it out of "
                                           "the value identities (codegen/rebuild.py) and index expressions hold no floats: only "
                                           "direct UOp.simplify callers reach it (tests/tinysched/test_symbolic.py)",
}

class CoverageError(HintedError):
  """A store that cannot be read, or a bad --per-rule: the message and what to do next (exit 2)."""

@dataclass(frozen=True, order=True)
class RuleKey:
  module: str   # e.g. tinysched.scheduling.kernel_ast
  matcher: str  # the module attribute holding the PatternMatcher
  name: str     # the rule name (PatternMatcher.rule_names())
  @property
  def where(self) -> str: return f"{self.module.removeprefix('tinysched.')}.{self.matcher}"

def _modules() -> list[Any]:
  out = []
  for name in MATCHER_MODULES:
    mod = importlib.import_module(name)
    out.append(mod)
    if hasattr(mod, "__path__"):
      for info in sorted(pkgutil.iter_modules(mod.__path__), key=lambda i: i.name):
        out.append(importlib.import_module(f"{name}.{info.name}"))
  return out

def rule_inventory() -> tuple[list[RuleKey], dict[tuple[str, Callable | Decisions], RuleKey]]:
  """(every rule, sorted; (rule name, rule function) -> its entry), from the matchers the modules hold right now."""
  homes: dict[tuple[str, Callable | Decisions], tuple[tuple, RuleKey]] = {}
  for mod in _modules():
    for attr, pm in sorted(vars(mod).items()):
      if isinstance(pm, Decisions):
        for name in pm.names(): homes.setdefault((name, pm), ((), RuleKey(mod.__name__, attr, name)))
      if not isinstance(pm, PatternMatcher): continue
      for _, fn, name, _ in pm.rules:
        # home: the module defining the rule's function first, then the smallest matcher, then by name
        rank = (getattr(fn, "__module__", None) != mod.__name__, len(pm.rules), mod.__name__, attr)
        if (k := (name, fn)) not in homes or rank < homes[k][0]: homes[k] = (rank, RuleKey(mod.__name__, attr, name))
  by_fn = {k: key for k, (_, key) in homes.items()}
  return sorted(dict.fromkeys(by_fn.values())), by_fn

def _forget_memos() -> None:
  """Empty the process-wide memos whose misses run rules (results never change, only whether rules fire again): the view
  algebra's tables and the lowerer's 64-bit index expressions (it simplifies). Otherwise a capture replayed after
  another would fire fewer rules than on its own."""
  clear_caches()
  lowerer._WIDE_CACHE.clear()

def fired_rules(level: str, data: bytes) -> tuple[str, list[tuple[str, Callable | Decisions]]]:
  """Replay one stored input with rule tracing: (outcome, the (rule name, function) of every firing, in order). Outcome:
  `ran`, `error` (the current code raised: the firings until then are kept) or `incompatible` (the input cannot be
  decoded: nothing ran)."""
  try: inputs = levels.get(level).decode_input(data)
  except Exception: return "incompatible", []  # noqa: BLE001 (the decoder's fault or the input's: nothing ran)
  return fired_rules_of(level, inputs)

def fired_rules_of(level: str, inputs) -> tuple[str, list[tuple[str, Callable | Decisions]]]:
  """fired_rules for an input already decoded (Level.decode_input)."""
  fired: list[tuple[str, Callable | Decisions]] = []
  with capture_hook.paused():  # replaying must not capture itself
    _forget_memos()
    prev, rewrite.FIRED = rewrite.FIRED, fired
    try: levels.get(level).run(inputs)
    except IncompatibleCapture: return "incompatible", fired
    except Exception: return "error", fired  # noqa: BLE001 (`replay check` reports the error itself)
    finally: rewrite.FIRED = prev
  return "ran", fired

@dataclass
class RuleCount:
  rule: RuleKey
  captures: int = 0  # capture rows whose replay fired it
  firings: int = 0   # over all those rows
  def to_dict(self) -> dict[str, Any]:
    return {"rule": self.rule.name, "module": self.rule.module, "matcher": self.rule.matcher, "where": self.rule.where,
            "captures": self.captures, "firings": self.firings}

@dataclass
class Coverage:
  stores: list[str]
  rules: list[RuleCount]  # uncovered first, then by module, matcher and rule name
  captures: int = 0
  outcomes: dict[str, int] = field(default_factory=dict)  # capture rows by replay outcome (ran / error / incompatible)
  other_firings: int = 0  # firings of matchers outside the inventory, over all rows
  front_end: dict[str, int] = field(default_factory=dict)  # front-end function -> model-level rows that ran it (0: none)
  @property
  def uncovered(self) -> list[RuleCount]: return [r for r in self.rules if r.captures == 0]
  def to_dict(self) -> dict[str, Any]:
    return {"format": "replay-coverage", "version": 2, "stores": self.stores, "captures": self.captures,
            "outcomes": dict(sorted(self.outcomes.items())), "rules": [r.to_dict() for r in self.rules],
            "totals": {"rules": len(self.rules), "exercised": len(self.rules) - len(self.uncovered), "uncovered": len(self.uncovered)},
            "other_firings": self.other_firings,
            "front_end": {"functions": dict(sorted(self.front_end.items())), "run": sum(1 for n in self.front_end.values() if n),
                          "never": sorted(k for k, n in self.front_end.items() if not n)},
            "why_unreached": {f"{w}.{n}": t for (w, n), t in sorted(WHY_UNREACHED.items()) if any(c.rule.where == w and c.rule.name == n
                                                                                                for c in self.uncovered)}}
  def to_json(self) -> str: return json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n"

def _rows(paths: list[str]) -> list[tuple[str, list[dict]]]:
  """Every store's capture rows, all read before anything is replayed (an unreadable store: CoverageError)."""
  out = []
  for p in paths:
    try:
      store = Store(p, readonly=True)
      try: out.append((p, list(store.captures())))
      finally: store.close()
    except (StoreError, sqlite3.DatabaseError) as e:
      raise CoverageError(f"{p}: {e}" if str(p) not in str(e) else str(e),
                          "pass capture stores written by `replay capture` or `replay suite` (`replay stats DB` shows what a "
                          "store holds)") from None
  return out

# the front end's inventory: every function and method defined in these modules (a package: all its modules)
FRONT_END_MODULES = ("tinysched.tensor", "tinysched.function", "tinysched.lazy", "tinysched.reduce", "tinysched.nn")

def front_end_inventory() -> list[str]:
  """`module:Qual.name` of every function and method the front-end modules define (as the model level's trace names them)."""
  out: set[str] = set()
  for m in _walk(FRONT_END_MODULES):
    for name, obj in vars(m).items():
      if getattr(obj, "__module__", None) != m.__name__: continue
      if isinstance(obj, type):
        for attr, f in vars(obj).items():
          f = f.__func__ if isinstance(f, (staticmethod, classmethod)) else f.fget if isinstance(f, property) else f
          if callable(f) and getattr(f, "__code__", None) is not None: out.add(f"{m.__name__}:{name}.{attr}")
      elif callable(obj) and getattr(obj, "__code__", None) is not None: out.add(f"{m.__name__}:{name}")
  return sorted(out)

def _walk(names: tuple[str, ...]) -> list[Any]:
  mods = []
  for n in names:
    m = importlib.import_module(n)
    mods.append(m)
    if hasattr(m, "__path__"): mods += [importlib.import_module(f"{n}.{i.name}") for i in pkgutil.iter_modules(m.__path__)]
  return mods

def front_end_counts(stores: list[tuple[str, list[dict]]]) -> dict[str, int]:
  """Per front-end function, the model-level rows whose call ran it (from the functions each row recorded at capture)."""
  counts = {n: 0 for n in front_end_inventory()}
  for _, rows in stores:
    for row in rows:
      # (rows that record the front-end functions their call ran: the model level's)
      try: fns = json.loads(row.get("extra") or "{}").get("functions")
      except (ValueError, AttributeError): continue
      if not isinstance(fns, dict): continue
      for n in fns:
        if n in counts: counts[n] += 1
  return counts

def coverage(paths: list[str]) -> Coverage:
  """Replay every capture row of the stores with rule tracing and count, per rule, the rows that fired it."""
  stores = _rows(paths)
  rules, by_fn = rule_inventory()
  counts = {k: RuleCount(k) for k in rules}
  cov = Coverage(stores=list(paths), rules=[])
  done: dict[tuple[str, str], tuple[str, dict[RuleKey, int], int]] = {}  # (level, input key) -> outcome, firings, other
  for path, rows in stores:
    store = Store(path, readonly=True)
    try:
      for row in rows:
        k = (row["level"], row["input_key"])
        if k not in done:
          if row.get("_invalid"): done[k] = ("incompatible", {}, 0)
          else:
            try: data = store.blob(row["input_key"])
            except Exception: done[k] = ("incompatible", {}, 0)  # noqa: BLE001 (a missing or corrupt payload: nothing to replay)
            else:
              outcome, fired = fired_rules(row["level"], data)
              per: dict[RuleKey, int] = {}
              other = 0
              for f in fired:
                if (rk := by_fn.get(f)) is None: other += 1
                else: per[rk] = per.get(rk, 0) + 1
              done[k] = (outcome, per, other)
        outcome, per, other = done[k]
        cov.captures += 1
        cov.outcomes[outcome] = cov.outcomes.get(outcome, 0) + 1
        cov.other_firings += other
        for rk, n in per.items():
          counts[rk].captures += 1
          counts[rk].firings += n
    finally: store.close()
  cov.rules = sorted(counts.values(), key=lambda c: (c.captures > 0, c.rule))
  cov.front_end = front_end_counts(stores)
  return cov

def table(cov: Coverage, uncovered_only: bool = False) -> str:
  """The terminal table: rule, where, captures that exercised it, total firings; uncovered rules first; then totals."""
  shown = cov.uncovered if uncovered_only else cov.rules
  head = ("rule", "where", "captures", "firings")
  body = [(c.rule.name, c.rule.where, str(c.captures), str(c.firings)) for c in shown]
  why = {i: WHY_UNREACHED[(c.rule.where, c.rule.name)] for i, c in enumerate(shown)
         if c.captures == 0 and (c.rule.where, c.rule.name) in WHY_UNREACHED}
  w = [max(len(r[i]) for r in [head, *body]) for i in range(4)]
  def line(r: tuple[str, ...]) -> str: return f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:>{w[2]}}  {r[3]:>{w[3]}}".rstrip()
  out = [line(head), line(tuple("-" * n for n in w))]
  for i, r in enumerate(body): out += [line(r)] + ([f"  why: {why[i]}"] if i in why else [])
  n, unc = len(cov.rules), len(cov.uncovered)
  ran = ", ".join(f"{v} {k}" for k, v in sorted(cov.outcomes.items()))
  out.append(f"\n{n} rules: {n - unc} exercised, {unc} never; {cov.captures} captures in {len(cov.stores)} store(s) ({ran or 'none'})")
  if cov.outcomes.get("error") or cov.outcomes.get("incompatible"):
    out.append("  captures that did not run to the end count only the rules they fired before (`replay check` says why they failed)")
  if cov.other_firings: out.append(f"  {cov.other_firings} firings of matchers outside the rule modules (UOp.substitute) not counted")
  fe = cov.front_end
  if any(fe.values()):
    never = sorted(k for k, v in fe.items() if not v)
    out.append(f"front end ({', '.join(FRONT_END_MODULES)}): {len(fe) - len(never)} of {len(fe)} functions run by the model-level captures; "
               f"never run ({len(never)}): " + ", ".join(n.split(":", 1)[1] for n in never[:40]) + (" ..." if len(never) > 40 else ""))
  else: out.append("front end: no model-level captures in these stores (the `frontend` baseline member has them)")
  return "\n".join(out)

def save(path: str, log: Callable[[str], None] = print) -> Coverage:
  """Measure the coverage of one store's own rows and append it to the store's `coverage` table (Store.save_coverage),
  with the commit of the code that measured it; the store is compacted again afterwards (one file to commit)."""
  cov = coverage([path])
  commit, dirty = G.code_commit()
  store = Store(path)
  try:
    store.save_coverage({"measured": datetime.now(timezone.utc).isoformat(timespec="seconds"), "git_commit": commit,
                         "git_dirty": dirty, "captures_total": cov.captures},
                        [{"module": c.rule.module, "matcher": c.rule.matcher, "rule": c.rule.name, "captures": c.captures,
                          "firings": c.firings} for c in cov.rules])
  finally: store.close()
  compact(path)
  log(f"{path}: coverage saved ({len(cov.rules) - len(cov.uncovered)} of {len(cov.rules)} rules exercised by {cov.captures} captures)")
  return cov

__all__ = ["coverage", "save", "table", "rule_inventory", "fired_rules", "fired_rules_of", "Coverage", "RuleCount", "RuleKey", "CoverageError",
           "MATCHER_MODULES"]
