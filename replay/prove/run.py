"""What `replay prove` and the gate run: the integer rules (`rules`), the view algebra (`views`) and each capture's
indexing (`indexing`), cached by what they depend on (`cache`), gathered into one ProofReport.

A counterexample fails like a wrong number: it is a value the compiler gets wrong whether or not a test reaches it.
An `unknown` (the solver's time-out, an expression it cannot state) is reported with its reason and does not fail.
"""
from __future__ import annotations
import json, time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable
from tinysched import capture_hook
from replay import levels
from replay.store.encode import key_of
from replay.store.sqlite import Store
from replay.prove import indexing, rules, smt, views
from replay.prove.cache import ProofCache

@dataclass
class ProofReport:
  rules: list[rules.RuleProof] = field(default_factory=list)
  views: list[views.ViewProof] = field(default_factory=list)
  captures: list[indexing.IndexProof] = field(default_factory=list)
  cache: str | None = None
  seconds: float = 0.0
  available: bool = True  # False: z3 is not installed, nothing was proven

  def counts(self) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    groups: tuple[tuple[str, list[Any]], ...] = (("rules", self.rules), ("views", self.views), ("captures", self.captures))
    for name, items in groups:
      c: dict[str, int] = {}
      for p in items: c[p.status] = c.get(p.status, 0) + 1  # (RuleProof, ViewProof, IndexProof: each has a status)
      if items: out[name] = dict(sorted(c.items()))
    return out

  def refuted(self) -> list[Any]:
    found: list[Any] = [*self.rules, *self.views, *self.captures]
    return [p for p in found if p.status == "counterexample"]

  def exit_code(self) -> int: return 1 if self.refuted() else 0

  @staticmethod
  def from_json(doc: dict) -> ProofReport:
    """A report back from `to_json` (a check's JSON report carries one)."""
    return ProofReport([rules.RuleProof(**d) for d in doc.get("rules") or []], [views.ViewProof(**d) for d in doc.get("views") or []],
                       [indexing.IndexProof(**d) for d in doc.get("captures") or []], doc.get("cache"), doc.get("seconds", 0.0),
                       doc.get("available", True))

  def to_json(self) -> dict[str, Any]:
    return {"available": self.available, "seconds": round(self.seconds, 2), "cache": self.cache, "counts": self.counts(),
            "rules": [asdict(p) for p in self.rules], "views": [asdict(p) for p in self.views],
            "captures": [asdict(p) for p in self.captures]}

def refuted_in(doc: Any) -> list[dict]:
  """The counterexamples of a `ProofReport.to_json()` document (one read from a file: anything else has none)."""
  if not isinstance(doc, dict): return []
  return [x for k in ("rules", "views", "captures") for x in doc.get(k) or [] if isinstance(x, dict) and x.get("status") == "counterexample"]

def prove_rules_and_views(timeout_ms: int = 5000, cache: ProofCache | None = None,
                          progress: Callable[[str], None] | None = None) -> tuple[list[rules.RuleProof], list[views.ViewProof]]:
  """Every integer rule and the view algebra; from the cache when the code is unchanged."""
  parts = [str(timeout_ms)]
  if cache is not None and (hit := cache.get("rules+views", parts)) is not None:
    return [rules.RuleProof(**d) for d in hit["rules"]], [views.ViewProof(**d) for d in hit["views"]]
  rs = rules.prove_rules(timeout_ms, progress)
  vs = views.prove_views(timeout_ms)
  # a time-out may go another way next time: only a run without unknowns is kept
  if cache is not None and not any(p.status == "unknown" for p in rs) and not any(v.status == "unknown" for v in vs):
    cache.put("rules+views", parts, {"rules": [asdict(p) for p in rs], "views": [asdict(p) for p in vs]})
  return rs, vs

def prove_captures(paths: list[str], level: str | None = None, label: str | None = None, key: str | None = None,
                   rows: set[tuple[str, str, str]] | None = None, timeout_ms: int = 10_000, cache: ProofCache | None = None,
                   progress: Callable[[int, int], None] | None = None) -> list[indexing.IndexProof]:
  """The indexing of every selected row (`rows`: only these (db, level, input key)) as the current code makes and
  lowers it: a kernel- or schedule-level row's kernels are the current code's output for its stored input (the stored
  output when the current code raises on it: the check reports that error itself). A row whose content and code were
  proven before is read from the cache; identical kernels within a run are proven once."""
  todo: list[tuple[str, dict, bytes, bytes]] = []
  for p in paths:
    s = Store(p, readonly=True)
    try:
      for r in s.captures(level=level, label=label, key=key):
        if rows is not None and (p, r["level"], r["input_key"]) not in rows: continue
        todo.append((p, r, din := s.blob(r["input_key"]), _current_output(r["level"], din) or s.blob(r["output_key"])))
    finally: s.close()
  kernels: dict = {}  # indexing's memo of kernels proven in this run
  out: list[indexing.IndexProof] = []
  for n, (p, r, din, dout) in enumerate(todo, 1):
    try: extra = json.loads(r.get("extra") or "{}")
    except ValueError: extra = {}
    parts = [r["level"], r["input_key"], key_of(dout), json.dumps(extra, sort_keys=True), str(timeout_ms)]
    hit = cache.get("capture", parts) if cache is not None else None
    if hit is not None: pr = indexing.IndexProof(**hit)
    else:
      pr = indexing.prove_row(r["level"], din, dout, extra, timeout_ms, cache=kernels)
      if cache is not None and pr.status != "unknown": cache.put("capture", parts, asdict(pr))
    pr.db, pr.input_key, pr.label = p, r["input_key"], r.get("label")
    out.append(pr)
    if progress is not None: progress(n, len(todo))
  return out

def _current_output(level: str, data: bytes) -> bytes | None:
  try:
    with capture_hook.paused(): return levels.get(level).replay_output(data)[1]  # proving must not capture itself
  except Exception: return None  # noqa: BLE001 (the stored output is proven instead; the check reports the error)

def run(paths: list[str], do_rules: bool = True, do_captures: bool = True, level: str | None = None, label: str | None = None,
        key: str | None = None, rows: set[tuple[str, str, str]] | None = None, timeout_ms: int = 10_000, cache: ProofCache | None = None,
        progress: Callable[[int, int], None] | None = None) -> ProofReport:
  t0 = time.perf_counter()
  rep = ProofReport(available=smt.available())
  if not rep.available: return rep
  if do_rules: rep.rules, rep.views = prove_rules_and_views(min(timeout_ms, 5000), cache)
  if do_captures and paths: rep.captures = prove_captures(paths, level, label, key, rows, timeout_ms, cache, progress)
  rep.cache, rep.seconds = (cache.status() if cache is not None else None), time.perf_counter() - t0
  return rep

def _capture_line(p: indexing.IndexProof) -> str:
  where = f"{p.label or '-'} {p.level} {(p.input_key or '')[:16]} ({p.db})"
  if p.status == "counterexample": return f"  COUNTEREXAMPLE: {where}: {json.dumps(p.counterexample, sort_keys=True, default=str)[:600]}"
  return f"  UNKNOWN: {where}: {p.reason}"

def text(rep: ProofReport, verbose: bool = False) -> str:
  """The report for a terminal: counts, then every counterexample in full (values and both sides), unknowns with why."""
  if not rep.available: return "proofs: skipped: z3 is not installed (pip install z3-solver, the `proofs` extra)"
  c = rep.counts()
  lines = [f"proved in {rep.seconds:.1f}s" + (f" ({rep.cache})" if rep.cache else "")]
  for name in ("rules", "views", "captures"):
    if name in c: lines.append(f"  {name}: " + "  ".join(f"{k}: {v}" for k, v in c[name].items()))
  if rep.captures:
    lines.append(f"  capture accesses proven in bounds: {sum(p.accesses for p in rep.captures)}; int32-narrowed nodes proven to fit: "
                 f"{sum(p.narrowed for p in rep.captures)}")
  for p in rep.rules:
    if p.status == "counterexample" or (verbose and p.status in ("unknown", "unreached", "listed")):
      lines.append(f"  {p.status.upper()}: rule {p.matcher}.{p.rule}: " + (rules.format_counterexample(p) if p.counterexample else (p.reason or "")))
  for v in rep.views:
    if v.status != "proven": lines.append(f"  {v.status.upper()}: view case {v.case}: " + (json.dumps(v.counterexample, default=str)[:400]
                                                                                         if v.counterexample else (v.reason or "")))
  for cp in rep.captures:
    if cp.status != "proven": lines.append(_capture_line(cp))
  if rep.refuted():
    lines.append(f"exit 1: {len(rep.refuted())} counterexample(s): a rule or an index is wrong for the values shown, whether or not a test "
                 "reaches them")
  return "\n".join(lines)
