"""Perf verdicts that do not cry wolf: every captured kernel whose old and new sides run the same code is a free A/A test.

A job whose two sides are the same kernels (the same ASTs, or the same OpenCL source: every identical row of an
`--exec-all` sweep) is timed like any other, but a time difference there is noise by definition: it is never a perf
finding. Those rows measure the noise instead, per duration class (launch-bound, short, long kernels), and set the bar
a changed kernel of their class must clear in the same run:
- judged by the whole rule (`--perf-gate`: 5 rounds, the rank test, a confirmation; replay/execute/timing.py), the A/A
  rows go through that rule too, and the largest excess among those it would have called slower (its false alarms in
  this run, `aa_false_alarm`) becomes the class's bar: a changed kernel must be slower than every false alarm of its
  class. On a quiet machine there are none, and the bar is the gate's percentage and the job's noise;
- judged by the margin rule alone (fewer than 3 rounds), the bar is at least the 99th percentile of the class's A/A
  excesses (when the run has at least MIN_AA of them), so that rule would have fired on at most 1% of them.
The report prints how often the plain rule (the gate's percentage and twice the job's own noise) and the whole rule
fired on the A/A rows: the false-alarm rates the gate had on this machine, in this run.

Launch-bound kernels (under 50 us) are not judged one by one: their times are mostly launch overhead and scatter by
tens of times the kernel's own work (the A/A rows show it). They are judged as a group (`group_verdict`): the changed
launch-bound rows' slowdowns (new / old) must rank above the A/A rows' of the same class (one-sided Mann-Whitney,
p < ALPHA; with too few A/A rows, a sign test against no change), and their median must exceed the A/A median by the
gate's percentage. A slower group fails the gate as one finding, listing its rows that measured slower beyond it.
"""
from __future__ import annotations
import math, statistics
from typing import Any, Iterable
from replay.execute.timing import ALPHA, MIN_RANKED_RUNS, MIN_SLOWER_S, rank_p  # (one floor and one rank test for the worker's verdict and the gate)

MIN_AA = 20           # A/A rows a class needs before their spread sets its margin
MIN_GROUP = 6         # changed launch-bound rows a group verdict needs (fewer: too few to rank, none is judged)
CLASSES = ((0.0, 50e-6, "launch-bound (< 50 us)"), (50e-6, 1e-3, "short (50 us - 1 ms)"), (1e-3, float("inf"), "long (>= 1 ms)"))

def duration_class(t: float) -> str:
  return next(name for lo, hi, name in CLASSES if lo <= t < hi)

def _timed(execs: Iterable[dict | None]) -> list[dict]:
  return [e for e in execs if e and e.get("old_time_s") and e.get("new_time_s")]

def _excess(e: dict) -> float:
  """How much slower the new side measured, as a fraction of the old (negative: faster)."""
  return e["new_time_s"] / e["old_time_s"] - 1.0

def _fires(e: dict, margin: float) -> bool:
  return e["new_time_s"] > e["old_time_s"] * (1 + margin) + MIN_SLOWER_S

def calibration(execs: Iterable[dict | None]) -> dict[str, dict[str, Any]]:
  """Per duration class: the same-code rows' count, the 99th percentile of their excess (the noise floor), how many of
  them the whole rule would have called slower, and the largest excess among those."""
  by: dict[str, list[dict]] = {}
  for e in _timed(execs):
    if e.get("same_code"): by.setdefault(duration_class(e["old_time_s"]), []).append(e)
  out: dict[str, dict[str, Any]] = {}
  for name, es in sorted(by.items()):
    xs = sorted(_excess(e) for e in es)
    q99 = xs[min(len(xs) - 1, int(0.99 * len(xs)))]
    alarms = [_excess(e) for e in es if e.get("aa_false_alarm")]
    out[name] = {"aa_rows": len(xs), "q99_excess": max(q99, 0.0), "whole_rule_fired": len(alarms), "max_alarm_excess": max(alarms, default=0.0)}
  return out

def _whole_rule(e: dict) -> bool: return (e.get("timing_runs") or 0) >= MIN_RANKED_RUNS

def margin(e: dict, gate_pct: float, calib: dict[str, dict[str, Any]]) -> float:
  """The excess a changed kernel must show to be slower: the gate, twice its own noise, and its class's A/A evidence
  (module docstring: the largest false alarm of the whole rule, or the 99th percentile for the margin rule alone)."""
  m = max(gate_pct / 100, 2 * (e.get("noise") or 0.0))
  c = calib.get(duration_class(e["old_time_s"]))
  if c and _whole_rule(e): m = max(m, c["max_alarm_excess"])
  elif c and c["aa_rows"] >= MIN_AA: m = max(m, c["q99_excess"])
  return m

def launch_bound(e: dict) -> bool: return e["old_time_s"] < CLASSES[0][1]

def _sign_p(k: int, n: int) -> float:
  """P(at least k of n fair coin flips come up heads): the sign test's one-sided p."""
  return sum(math.comb(n, i) for i in range(k, n + 1)) / 2 ** n

def group_verdict(execs: list[dict | None], gate_pct: float | None) -> dict[str, Any] | None:
  """The launch-bound changed rows judged together (module docstring), or None when there are too few of them (or the
  gate is off). `slower`: the group fails the gate; `rows`: indices into `execs` of its members."""
  if gate_pct is None: return None
  idx = [i for i, e in enumerate(execs) if e and e.get("old_time_s") and e.get("new_time_s") and launch_bound(e)]
  changed = [i for i in idx if not execs[i].get("same_code")]  # type: ignore[union-attr]
  if len(changed) < MIN_GROUP: return None
  ratio = lambda i: math.log(execs[i]["new_time_s"] / execs[i]["old_time_s"])  # type: ignore[index]  # noqa: E731
  lr, aa = [ratio(i) for i in changed], [ratio(i) for i in idx if execs[i].get("same_code")]  # type: ignore[union-attr]
  if len(aa) >= MIN_AA: p, base, against = rank_p(aa, lr), statistics.median(aa), f"{len(aa)} A/A rows"
  else: p, base, against = _sign_p(sum(x > 0 for x in lr), len(lr)), 0.0, "no change (sign test)"
  med = statistics.median(lr)
  old = sum(execs[i]["old_time_s"] for i in changed)  # type: ignore[index]
  new = sum(execs[i]["new_time_s"] for i in changed)  # type: ignore[index]
  slower = p < ALPHA and med - base > math.log(1 + gate_pct / 100) and new - old > MIN_SLOWER_S
  return {"rows": changed, "p": p, "median_excess": math.exp(med) - 1, "baseline_excess": math.exp(base) - 1, "against": against,
          "old_s": old, "new_s": new, "slower": slower}

def failures(execs: list[dict | None], gate_pct: float | None) -> list[int]:
  """Indices (into `execs`) of the changed-code kernels slower beyond the gate, their noise and the A/A margin, and
  slower by the worker's own verdict where it gave one (its rank test and confirmation: replay/execute/timing.py);
  launch-bound ones only as a slower group (`group_verdict`), then its members that measured slower beyond the gate."""
  if gate_pct is None: return []
  calib = calibration(execs)
  one_by_one = [i for i, e in enumerate(execs) if e and not e.get("same_code") and e.get("old_time_s") and e.get("new_time_s")
                and not launch_bound(e) and e.get("slower", True) and _fires(e, margin(e, gate_pct, calib))]
  g = group_verdict(execs, gate_pct)
  grouped = [i for i in g["rows"] if _fires(execs[i], gate_pct / 100)] if g and g["slower"] else []
  return sorted(one_by_one + (grouped or (g["rows"][:1] if g and g["slower"] else [])))

def group_line(execs: list[dict | None], gate_pct: float | None) -> str | None:
  """One line for the report: the launch-bound group's verdict."""
  if (g := group_verdict(execs, gate_pct)) is None: return None
  return (f"launch-bound kernels judged as a group: {len(g['rows'])} changed, median {100 * g['median_excess']:+.0f}% against "
          f"{100 * g['baseline_excess']:+.0f}% ({g['against']}; rank test p={g['p']:.3g}), {g['old_s'] * 1e6:.0f} us -> {g['new_s'] * 1e6:.0f} us: "
          + ("SLOWER as a group" if g["slower"] else "not slower"))

def false_alarms(execs: Iterable[dict | None], gate_pct: float) -> tuple[int, int]:
  """(A/A rows the plain rule would have flagged, A/A rows): the false-alarm rate of the gate without calibration."""
  aa = [e for e in _timed(execs) if e.get("same_code")]
  return sum(_fires(e, max(gate_pct / 100, 2 * (e.get("noise") or 0.0))) for e in aa), len(aa)

def summary(execs: list[dict | None], gate_pct: float | None) -> str | None:
  """One line for the report: the A/A rows, how often the plain rule and the whole rule fired on them, their spread."""
  fired, n = false_alarms(execs, gate_pct if gate_pct is not None else 10.0)
  if not n: return None
  calib = calibration(execs)
  ranked = sum(1 for e in _timed(execs) if e.get("same_code") and _whole_rule(e))
  whole = sum(c["whole_rule_fired"] for c in calib.values())
  parts = [f"{name}: {c['aa_rows']} rows, 99th percentile {100 * c['q99_excess']:+.0f}%"
           + (f", {c['whole_rule_fired']} whole-rule false alarm(s) up to {100 * c['max_alarm_excess']:+.0f}% (the class's bar)"
              if c["whole_rule_fired"] else "")
           for name, c in calib.items()]
  return (f"A/A (same code on both sides, never a finding): the plain {'--perf-gate ' + format(gate_pct, 'g') if gate_pct is not None else '10'}% "
          f"rule fired on {fired} of {n} ({100 * fired / n:.1f}%)"
          + (f", the whole rule (rank test and confirmation) on {whole} of {ranked} ({100 * whole / ranked:.1f}%)" if ranked else "")
          + ": the false-alarm rates here; " + "; ".join(parts))

__all__ = ["CLASSES", "MIN_AA", "MIN_GROUP", "MIN_SLOWER_S", "calibration", "duration_class", "failures", "false_alarms", "group_line",
           "group_verdict", "launch_bound", "margin", "summary"]
