"""What a check produces: one Result per replayed row, and the Report that gathers them (counts, groups, exit code)."""
from __future__ import annotations
import signal
from dataclasses import dataclass, field, asdict
from typing import Any
from replay.execute.verdicts import EXIT_2_VERDICTS, FAIL_VERDICTS
from replay.prove.run import refuted_in
from replay.check import perf

OUTCOMES = ("identical", "changed", "error", "incompatible", "unstable")

@dataclass
class Result:
  db: str
  run_id: int
  seq: int
  level: str
  label: str
  input_key: str
  stored_key: str
  new_key: str | None = None
  outcome: str = "identical"
  reason: str | None = None            # incompatible: why; error: the exception line
  traceback: str | None = None
  changes: list[dict] = field(default_factory=list)
  change_count: int = 0
  text_diff: str | None = None
  kernel_list: dict | None = None
  signature: str | None = None
  rules: list[str] = field(default_factory=list)
  metadata: str | None = None
  exec: dict | None = None             # filled by the execution check
  pair: dict | None = None             # replay diff: {"old_db", "old": [run_id, seq], "new": [run_id, seq]} of the two stored rows
  note: str | None = None              # replay check --reoptimize: why a program row was replayed with its stored opts
  unstable: dict | None = None         # outcome unstable: {"outputs": {process: key or exception}, "exposed_by"} (check/determinism.py)
  cause: dict | None = None            # changed: the rules without which the stored output comes back (check/causes.py)
  def to_dict(self) -> dict[str, Any]: return asdict(self)

@dataclass
class Report:
  results: list[Result] = field(default_factory=list)
  sources: list[str] = field(default_factory=list)
  elapsed: float = 0.0
  workers: int = 1
  fatal: list[str] = field(default_factory=list)     # stores that could not be opened at all
  shard: str | None = None
  perf_gate: float | None = None                     # --perf-gate PCT
  paired: bool = False                               # replay diff/commits: results pair rows of two stores
  accepted: list[dict] = field(default_factory=list) # per-key accepts recorded in the stores (Store.accepts(), with "db")
  proofs: dict | None = None                         # replay.prove.run.ProofReport.to_json() of a check with proofs
  determinism: dict | None = None                    # what the determinism step replayed again, and how (check/determinism.py Recheck)
  stopped: str | None = None                         # the signal that stopped the run ("SIGINT"): a partial report (see replay.process)
  selected: int | None = None                        # rows the selection held (a stopped run replayed fewer)
  allow_empty: bool = False                          # the selection was allowed to be empty (--allow-empty): the gate may pass it
  causes: dict | None = None                         # what the cause step did (check/causes.py attribute's counts)
  def counts(self) -> dict[str, int]:
    c = {o: 0 for o in OUTCOMES}
    for r in self.results: c[r.outcome] += 1
    return c
  def groups(self) -> list[dict[str, Any]]:
    """Changes (and errors, incompatibilities) grouped by cause where one was found (check/causes.py: the rules without
    which the stored output comes back), else by signature (the diff's shape); largest first."""
    g: dict[tuple[str, str], list[Result]] = {}
    for r in self.results:
      if r.outcome == "identical": continue
      first = (r.reason or "").splitlines()[0][:120] if r.reason else ""
      sig = r.signature if r.outcome in ("changed", "unstable") else f"{r.level}: {r.outcome}: {first}"
      if r.outcome == "changed" and r.cause and r.cause.get("rules"): sig = "cause: " + " + ".join(r.cause["rules"])
      g.setdefault((r.outcome, sig or ""), []).append(r)
    out: list[dict[str, Any]] = [{"outcome": o, "signature": s, "count": len(rs), "example": rs[0], "members": rs,
                                  "shapes": len({m.signature for m in rs})} for (o, s), rs in g.items()]
    out.sort(key=lambda x: (-len(x["members"]), x["outcome"], x["signature"]))
    return out
  def exit_code(self) -> int:
    if self.stopped: return 128 + int(signal.Signals[self.stopped])  # 130 SIGINT, 143 SIGTERM: whatever the partial results say
    c = self.counts()
    verdicts = {r.exec.get("verdict") for r in self.results if r.exec}
    if self.fatal or c["error"] or c["incompatible"] or verdicts & set(EXIT_2_VERDICTS): return 2
    if verdicts & set(FAIL_VERDICTS) or self.perf_failures() or c["unstable"] or self.refuted() or self.throughput_refused(): return 1
    return 1 if c["changed"] else 0
  def refuted(self) -> list[dict]:
    """The proofs' counterexamples (rules, view cases, captures): each fails like a wrong number."""
    return refuted_in(self.proofs)
  def throughput_refused(self) -> list[Result]:
    """Captures whose GFLOP/s or GB/s came out above the device's measured peak, twice (replay/execute/timing.py
    held_to_peak): a bug of the cost model or the timer, which fails like a wrong number."""
    return [r for r in self.results if r.exec and r.exec.get("throughput_refused")]
  def perf_failures(self) -> list[Result]:
    """Captures whose new kernels are slower than the old by more than --perf-gate PCT, their noise and the spread the
    same-code (A/A) rows of their duration class showed (replay/check/perf.py); none when the gate is off."""
    return [self.results[i] for i in perf.failures([r.exec for r in self.results], self.perf_gate)]
