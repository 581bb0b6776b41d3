"""Perf verdicts that do not cry wolf: every captured kernel whose old and new sides run the same code is a free A/A test.

A job whose two sides are the same kernels (the same ASTs, or the same OpenCL source: every identical row of an
`--exec-all` sweep) is timed like any other, but a time difference there is noise by definition: it is never a perf
finding. Those rows measure the noise instead, per duration class (launch-bound, short, long kernels), and the margin a
changed kernel must exceed to be `slower` is at least the 99th percentile of what the A/A rows of its class showed in the
same run (when the run has at least MIN_AA of them), so the same rule would have fired on at most 1% of them. The
report prints how often the plain rule (`--perf-gate` and twice the job's own noise) fired on the A/A rows: the false-alarm
rate the gate would have had on this machine, in this run.
"""
from __future__ import annotations
from typing import Any, Iterable
from replay.execute.timing import MIN_SLOWER_S  # (one floor for the worker's verdict and the gate)

MIN_AA = 20           # A/A rows a class needs before their spread sets its margin
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
  """Per duration class: the same-code rows' count and the 99th percentile of their excess (the noise floor)."""
  by: dict[str, list[float]] = {}
  for e in _timed(execs):
    if e.get("same_code"): by.setdefault(duration_class(e["old_time_s"]), []).append(_excess(e))
  out: dict[str, dict[str, Any]] = {}
  for name, xs in sorted(by.items()):
    xs.sort()
    q99 = xs[min(len(xs) - 1, int(0.99 * len(xs)))]
    out[name] = {"aa_rows": len(xs), "q99_excess": max(q99, 0.0)}
  return out

def margin(e: dict, gate_pct: float, calib: dict[str, dict[str, Any]]) -> float:
  """The excess a changed kernel must show to be slower: the gate, twice its own noise, and its class's A/A spread."""
  m = max(gate_pct / 100, 2 * (e.get("noise") or 0.0))
  c = calib.get(duration_class(e["old_time_s"]))
  if c and c["aa_rows"] >= MIN_AA: m = max(m, c["q99_excess"])
  return m

def failures(execs: list[dict | None], gate_pct: float | None) -> list[int]:
  """Indices (into `execs`) of the changed-code kernels slower beyond the gate, their noise and the A/A margin, and
  slower by the worker's own verdict where it gave one (its rank test and confirmation: replay/execute/timing.py)."""
  if gate_pct is None: return []
  calib = calibration(execs)
  return [i for i, e in enumerate(execs) if e and not e.get("same_code") and e.get("old_time_s") and e.get("new_time_s")
          and e.get("slower", True) and _fires(e, margin(e, gate_pct, calib))]

def false_alarms(execs: Iterable[dict | None], gate_pct: float) -> tuple[int, int]:
  """(A/A rows the plain rule would have flagged, A/A rows): the false-alarm rate of the gate without calibration."""
  aa = [e for e in _timed(execs) if e.get("same_code")]
  return sum(_fires(e, max(gate_pct / 100, 2 * (e.get("noise") or 0.0))) for e in aa), len(aa)

def summary(execs: list[dict | None], gate_pct: float | None) -> str | None:
  """One line for the report: the A/A rows, how often the plain rule fired on them, the margins they set."""
  fired, n = false_alarms(execs, gate_pct if gate_pct is not None else 10.0)
  if not n: return None
  calib = calibration(execs)
  parts = [f"{name}: {c['aa_rows']} rows, 99th percentile {100 * c['q99_excess']:+.0f}%" for name, c in calib.items()]
  return (f"A/A (same code on both sides, never a finding): the {'--perf-gate ' + format(gate_pct, 'g') if gate_pct is not None else '10'}% "
          f"rule fired on {fired} of {n} ({100 * fired / n:.1f}%): the false-alarm rate it would have here; " + "; ".join(parts))

__all__ = ["CLASSES", "MIN_AA", "MIN_SLOWER_S", "calibration", "duration_class", "failures", "false_alarms", "margin", "summary"]
