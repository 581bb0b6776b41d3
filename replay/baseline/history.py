"""Perf history: each captured kernel's time at every commit the baseline was accepted at, kept in the stores themselves
(their optional `perf_history` table, replay/store/sqlite.py), so a slow drift over many small commits shows without a
server: `replay perf`.

- `record(stores)`: times every row of the stores on one device (`replay check --exec-all` through the library,
  `TIMING_RUNS` rounds, the least of them per kernel) and appends one *measurement* per store: when, at which commit,
  on which device and device class, and per timed capture input its level, input and output keys, seconds, FLOPs,
  bytes, GFLOP/s, GB/s and fraction of the device's peak (where the execution check knows the peak). Rows the device
  cannot time (a model call, a kernel too large to run) are left out. `replay accept` records one after it replaced
  the stores (`--no-perf` leaves it out).
- `carry(old, new)`: a full `replay accept` writes new store files; the old store's history is copied into the new one
  first, so the history outlives every re-capture.
- `history(stores)`: per capture input, its measurements oldest first, and its drift (below); `text` prints it.

Drift. Seconds compare only on one device: a row's time ratio is its newest time over its first time measured on the
newest measurement's device. The fraction of peak carries across devices of one class (what `device_class` names: the
kind of device and its vendor, never the host): its change is the newest fraction against the first on that class.
A row whose newest device has no earlier measurement drifts by its fraction of peak alone (first over newest, so above 1
means slower, like a time ratio). A change of less than `NOISE_FLOOR_S` in absolute time ranks below every larger one,
however large its ratio: one-microsecond kernels move by several times between runs on a busy machine. Where the output
key changed between two measurements of one input, the kernel itself changed at that commit: the point is marked.
"""
from __future__ import annotations
import datetime, json, platform
from dataclasses import dataclass, field, asdict
from pathlib import Path
from typing import Any, Callable, Iterable
from tinysched.device import Device
from replay import check, git as G
from replay.check import Options, Selection
from replay.errors import HintedError
from replay.execute.timing import MIN_SLOWER_S
from replay.report import escape as E
from replay.store.sqlite import Store, StoreError

Log = Callable[[str], None]
TIMING_RUNS = 3          # rounds per kernel: the least is recorded (a sweep's single round is too noisy for a history)
NOISE_FLOOR_S = MIN_SLOWER_S  # the least change in time that ranks as a drift (the execution check's own floor for "slower")
HINT = "run `replay accept`: it times every row and records a measurement at each accept (`--no-perf` skips it)"

class HistoryError(HintedError):
  """The perf history cannot be recorded or read as asked: the message and what to do next (exit 2)."""

def device_info(device: str) -> tuple[str, str]:
  """(device name, device class) of a canonical device name: the name tells one device from another (seconds compare
  only on one), the class is what a fraction of peak carries across (kind and vendor, never the host)."""
  t = getattr(Device[device], "target", None)
  if t is None:  # the NUMPY interpreter: its speed is the host's Python
    return f"{device} ({platform.machine() or 'unknown machine'})", device.split(":")[0]
  return t.name or device, f"{device.split(':')[0]} {'GPU' if t.is_gpu else 'CPU'} {t.vendor or 'unknown vendor'}"

def _rows_in(paths: list[str]) -> int:
  n = 0
  for p in paths:
    s = Store(p, readonly=True, allow_empty=True)
    try: n += int(s.conn.execute("SELECT count(*) FROM captures").fetchone()[0])
    finally: s.close()
  return n

@dataclass
class Recorded:
  db: str
  measurement: int | None   # None: nothing timed, nothing written
  rows: int
  untimed: int

def record(stores: Iterable[str | Path], log: Log = print, *, device: str | None = None, commit: tuple[str | None, int | None] | None = None,
           timing_runs: int = TIMING_RUNS, jobs: int | None = None) -> list[Recorded]:
  """Time every row of `stores` on `device` (default: the default device) and append one measurement to each store that
  had a row timed (module docstring). `commit`: (sha, dirty) to record, default the commit of the code that runs
  (replay.git.code_commit). Nothing is written for a run that was stopped. Raises HistoryError."""
  paths = [str(p) for p in stores]
  if not paths: return []
  try:
    dev = check.validate(Selection(()), Options(exec="all", device=device))
    assert dev is not None  # (exec is on)
    name, klass = device_info(dev)
    log(f"  timing {_rows_in(paths)} rows for the perf history on {name} ({timing_runs} round(s) each) ...")
    rep = check.run(Selection(tuple(paths), allow_empty=True), Options(exec="all", device=dev, timing_runs=timing_runs, jobs=jobs))
  except check.CheckError as e: raise HistoryError(str(e), e.hint) from None
  except StoreError as e: raise HistoryError(str(e), "pass capture stores written by `replay capture`, `replay suite` or `replay accept`") from None
  if rep.stopped: raise HistoryError(f"stopped by {rep.stopped}: no measurement was written", "run it again")
  for f in rep.fatal: log(f"  perf history: {f}")
  sha, dirty = commit if commit is not None else G.code_commit()
  now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
  measured = {"time": now, "git_commit": sha, "git_dirty": dirty, "device": name, "device_class": klass}
  per: dict[str, dict[tuple[str, str], dict]] = {p: {} for p in paths}
  untimed: dict[str, set[tuple[str, str]]] = {p: set() for p in paths}
  for r in sorted(rep.results, key=lambda r: (r.db, r.level, r.input_key, r.run_id, r.seq)):
    if r.db not in per: continue
    ex, k = r.exec or {}, (r.level, r.input_key)
    if not ex.get("new_time_s"):
      untimed[r.db].add(k)
      continue
    # one row per input: rows of several runs that share an input share its execution job (replay/check/execution.py)
    peak = ex.get("peak") or {}
    per[r.db].setdefault(k, {"level": r.level, "label": r.label, "input_key": r.input_key, "output_key": r.new_key or r.stored_key,
                             "seconds": ex["new_time_s"], "flops": ex.get("flops"), "bytes": ex.get("bytes"), "gflops": ex.get("gflops"),
                             "gbps": ex.get("gbps"), "peak_fraction": ex.get("peak_fraction"), "peak_gflops": peak.get("gflops"),
                             "peak_gbps": peak.get("gbps")})
  out = []
  for p in paths:
    rows = [per[p][k] for k in sorted(per[p])]
    left = len(untimed[p] - set(per[p]))
    if not rows:
      log(f"  {p}: no row could be timed on {name}: no measurement recorded")
      out.append(Recorded(p, None, 0, left))
      continue
    s = Store(p)
    try: n = s.save_perf(measured, rows)
    finally: s.close()
    log(f"  {p}: perf history measurement {n}: {len(rows)} input(s) timed" + (f", {left} not timed (the device cannot run them)" if left else ""))
    out.append(Recorded(p, n, len(rows), left))
  return out

def carry(old_db: str | Path, new_db: str | Path) -> int:
  """Copy the perf history of `old_db` (if it exists and has one) into `new_db`, measurement numbers kept; returns the
  rows copied. Raises StoreError when the old store cannot be read or the new one written."""
  if not Path(old_db).exists(): return 0
  old = Store(old_db, readonly=True, allow_empty=True)
  try: rows = old.perf_history()
  finally: old.close()
  if not rows: return 0
  new = Store(new_db)
  try: return new.copy_perf(rows)
  finally: new.close()

# *** reading it back ***

@dataclass
class Point:
  measurement: int
  time: str
  git_commit: str | None
  git_dirty: int | None
  device: str
  device_class: str
  output_key: str
  seconds: float
  gflops: float | None
  gbps: float | None
  peak_fraction: float | None
  kernel_changed: bool  # the output key differs from the measurement before: the kernel changed at this commit

@dataclass
class Series:
  db: str
  level: str
  label: str
  input_key: str
  points: list[Point]
  time_ratio: float | None = None       # newest seconds / the first on the newest point's device
  since: int | None = None              # index of the point the drift is measured from
  peak_from: float | None = None        # fraction of peak: the first on the newest point's class, and the newest
  peak_to: float | None = None
  drift: float | None = None            # time_ratio, or (without one) peak_from / peak_to
  significant: bool = False             # the time moved by NOISE_FLOOR_S or more between the two points
  def to_json(self) -> dict[str, Any]:
    d = asdict(self)
    d["since_commit"] = self.points[self.since].git_commit if self.since is not None else None
    d["kernel_changed_at"] = [p.git_commit for p in self.points if p.kernel_changed]
    return d

@dataclass
class History:
  series: list[Series]                                     # largest drift first (`_rank`)
  stores: dict[str, int] = field(default_factory=dict)     # store -> measurements it holds
  no_history: list[str] = field(default_factory=list)      # stores without a perf history
  def to_json(self) -> str:
    return json.dumps({"stores": self.stores, "no_history": self.no_history, "noise_floor_s": NOISE_FLOOR_S,
                       "rows": [s.to_json() for s in self.series]}, indent=1, sort_keys=True)

def _drift(s: Series) -> None:
  pts, last = s.points, s.points[-1]
  base = next(i for i, p in enumerate(pts) if p.device == last.device)
  pb = next((i for i, p in enumerate(pts) if p.device_class == last.device_class and p.peak_fraction), None)
  if pb is not None and pb < len(pts) - 1 and last.peak_fraction: s.peak_from, s.peak_to = pts[pb].peak_fraction, last.peak_fraction
  if base < len(pts) - 1 and pts[base].seconds > 0:
    s.since, s.time_ratio = base, last.seconds / pts[base].seconds
    s.drift = s.time_ratio
  elif s.peak_from and s.peak_to:
    s.since, s.drift = pb, s.peak_from / s.peak_to
  if s.since is not None: s.significant = abs(last.seconds - pts[s.since].seconds) >= NOISE_FLOOR_S

def _rank(s: Series) -> tuple:
  return (s.drift is None, not s.significant, -(s.drift or 0.0), s.db, s.level, s.input_key)

def history(stores: Iterable[str | Path], key_prefix: str | None = None, level: str | None = None) -> History:
  """Every capture input's measurements in `stores` (oldest first) and its drift (module docstring), largest drift first;
  `key_prefix` keeps inputs whose input key, or an output key of theirs, starts with it; `level` one capture level.
  Raises HistoryError for a store that cannot be read."""
  out = History([])
  for db in (str(p) for p in stores):
    try:
      st = Store(db, readonly=True, allow_empty=True)
      try: rows = st.perf_history()
      finally: st.close()
    except StoreError as e: raise HistoryError(str(e), "pass capture stores (default captures/*.db)") from None
    if not rows:
      out.no_history.append(db)
      continue
    out.stores[db] = len({r["measurement"] for r in rows})
    by: dict[tuple[str, str], list[dict]] = {}
    for r in rows: by.setdefault((r["level"], r["input_key"]), []).append(r)  # rows come oldest measurement first
    for (lv, ik), rs in sorted(by.items()):
      if level is not None and lv != level: continue
      if key_prefix and not (ik.startswith(key_prefix) or any((r["output_key"] or "").startswith(key_prefix) for r in rs)): continue
      pts = [Point(r["measurement"], r["time"] or "", r["git_commit"], r["git_dirty"], r["device"] or "?", r["device_class"] or "?",
                   r["output_key"] or "", float(r["seconds"]), r["gflops"], r["gbps"], r["peak_fraction"],
                   i > 0 and r["output_key"] != rs[i - 1]["output_key"]) for i, r in enumerate(rs)]
      s = Series(db, lv, rs[-1]["label"] or "", ik, pts)
      _drift(s)
      out.series.append(s)
  out.series.sort(key=_rank)
  return out

# *** text ***

def _t(s: float) -> str:
  if s >= 1: return f"{s:.3g}s"
  if s >= 1e-3: return f"{s * 1e3:.3g}ms"
  return f"{s * 1e6:.3g}us"

def _at(p: Point) -> str:
  return "@" + ((p.git_commit or "unknown")[:7]) + ("-dirty" if p.git_dirty else "")

def _pct(x: float) -> str: return f"{100 * x:.3g}%"

MAX_POINTS = 6  # a longer series prints its first point, then its last ones

def _series_text(s: Series) -> str:
  pts = s.points
  def one(i: int) -> str:
    p = pts[i]
    mark = "*" if p.kernel_changed else ""
    # the device beside a point where it differs from the one before (and at the first point of a series that moves)
    moves = p.device != pts[i - 1].device if i else any(q.device != p.device for q in pts)
    dev = f" [{E.terminal_line(p.device)}]" if moves else ""
    return f"{_t(p.seconds)} {_at(p)}{mark}{dev}"
  shown = [one(i) for i in range(len(pts))] if len(pts) <= MAX_POINTS else \
          [one(0), f"... ({len(pts) - MAX_POINTS + 1} more)", *(one(i) for i in range(len(pts) - MAX_POINTS + 2, len(pts)))]
  notes = []
  if s.time_ratio is not None and s.since is not None: notes.append(f"{s.time_ratio:.2f}x since {_at(pts[s.since])[1:]}")
  elif s.drift is not None and s.since is not None: notes.append(f"{s.drift:.2f}x slower by fraction of peak since {_at(pts[s.since])[1:]}")
  if s.peak_from is not None and s.peak_to is not None: notes.append(f"peak {_pct(s.peak_from)} -> {_pct(s.peak_to)}")
  elif pts[-1].peak_fraction is not None: notes.append(f"peak {_pct(pts[-1].peak_fraction)}")
  if s.drift is not None and not s.significant: notes.append(f"within the {_t(NOISE_FLOOR_S)} noise floor")
  return " -> ".join(shown) + (f" ({'; '.join(notes)})" if notes else "")

def text(h: History, top: int = 20) -> str:
  """What `replay perf` prints: per store its measurements, then the `top` rows (0: all), largest drift first."""
  lines = []
  for db in h.no_history: lines.append(f"{E.terminal_line(db)}: no perf history yet ({HINT})")
  for db, n in sorted(h.stores.items()): lines.append(f"{E.terminal_line(db)}: {n} measurement(s)")
  if not h.series: return "\n".join(lines)
  shown = h.series if top <= 0 else h.series[:top]
  lines.append(f"\nperf history of {len(h.series)} capture input(s), largest drift first"
               + (f" (top {len(shown)}; --top 0 lists all)" if len(shown) < len(h.series) else "") + ":")
  for s in shown:
    lab = f" {E.terminal_line(s.label)}" if s.label else ""
    lines.append(f"  {s.level} {s.input_key[:16]}{lab} ({E.terminal_line(s.db)}): {_series_text(s)}")
  if any(p.kernel_changed for s in shown for p in s.points): lines.append("  * the kernel changed at that commit (another output for the same input)")
  return "\n".join(lines)

__all__ = ["HistoryError", "History", "Series", "Point", "Recorded", "record", "carry", "history", "text", "device_info", "TIMING_RUNS",
           "NOISE_FLOOR_S", "HINT"]
