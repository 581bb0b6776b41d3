"""The perf history (replay/baseline/history.py, `replay perf`): measurements recorded into a store's `perf_history`
table, carried across a re-capture, read back with the drift of each kernel ranked first; readers of the store ignore
the table. Recording runs on the suite's device (NUMPY unless TINYSCHED_DEVICE says otherwise); the drift tests plant
their times, so what they check does not depend on the machine's noise."""
from __future__ import annotations
import json, shutil, sqlite3
from pathlib import Path
import pytest
from click.testing import CliRunner
from replay.cli.app import main as cli
from replay import check as C
from replay.check import Options, Selection
from replay.baseline import history as H
from replay.store.sqlite import Store, StoreError, compact

ROOT = Path(__file__).resolve().parents[2]
SHA = [f"{c}{i}" * 20 for i, c in enumerate("abcdef")]  # six 40-character commits, told apart by their first 7 characters

def invoke(*args):
  return CliRunner().invoke(cli, [str(a) for a in args])

def _fresh_copy(dst: Path) -> Path:
  """A copy of the committed mlp_digits store without its perf history (the committed baseline has one): a store as a
  capture writes it."""
  shutil.copy(ROOT / "captures/mlp_digits.db", dst)
  c = sqlite3.connect(dst)
  try:
    c.execute("DROP TABLE IF EXISTS perf_history")
    c.commit()
  finally: c.close()
  return dst

@pytest.fixture
def store(tmp_path) -> Path:
  return _fresh_copy(tmp_path / "mlp_digits.db")

def _measurements(db: Path) -> list[int]:
  c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
  try: return [r[0] for r in c.execute("SELECT DISTINCT measurement FROM perf_history ORDER BY measurement")]
  finally: c.close()

def test_record_twice_then_replay_perf_shows_both(store, tmp_path):
  a = H.record([store], log=lambda s: None, commit=(SHA[0], 0))
  b = H.record([store], log=lambda s: None, commit=(SHA[1], 1))
  assert [r.measurement for r in a + b] == [1, 2] and _measurements(store) == [1, 2]
  s = Store(store, readonly=True)
  try:
    rows, captures = s.perf_history(), list(s.captures())
  finally: s.close()
  timed = {(r["level"], r["input_key"]) for r in rows}
  assert a[0].rows == b[0].rows == len(timed) > 0 and len(rows) == 2 * len(timed)
  # every timed input is a stored row, with its stored output (the code replays it identically) and a positive time
  stored = {(r["level"], r["input_key"]): r["output_key"] for r in captures}
  assert all(stored[(r["level"], r["input_key"])] == r["output_key"] and r["seconds"] > 0 for r in rows)
  assert a[0].rows + a[0].untimed == len(stored)  # the rest the device could not time (program source on NUMPY), named as such
  assert {r["git_commit"] for r in rows} == {SHA[0], SHA[1]} and len({(r["device"], r["device_class"]) for r in rows}) == 1
  r = invoke("perf", store, "--top", "0", "--json", tmp_path / "p.json")
  assert r.exit_code == 0, r.output
  assert f"{store}: 2 measurement(s)" in r.output
  lines = [ln for ln in r.output.splitlines() if ln.startswith("  ") and "->" in ln]
  assert len(lines) == len(timed) and all(f"@{SHA[0][:7]} -> " in ln and f"@{SHA[1][:7]}-dirty" in ln for ln in lines)
  js = json.loads((tmp_path / "p.json").read_text())
  assert len(js["rows"]) == len(timed) and all([p["git_commit"] for p in row["points"]] == SHA[:2] for row in js["rows"])

def _planted(db: Path, drift: float = 1.1, n: int = 6, changed_at: int | None = 3) -> None:
  """n measurements at SHA[0..n-1]: kernel "b..." grows `drift`x per commit from 100us (its output key changes at
  `changed_at`), "a..." stays at 100us, "c..." goes from 1us to 5us (a large ratio inside the noise floor)."""
  s = Store(db)
  try:
    for i in range(n):
      rows = [{"level": "kernel", "label": "m", "input_key": "a" * 64, "output_key": "1" * 64, "seconds": 100e-6 * (1 + 0.001 * i),
               "peak_fraction": 0.2},
              {"level": "kernel", "label": "m", "input_key": "b" * 64,
               "output_key": ("3" if changed_at is not None and i >= changed_at else "2") * 64, "seconds": 100e-6 * drift ** i,
               "peak_fraction": 0.4 / drift ** i},
              {"level": "schedule", "label": "m", "input_key": "c" * 64, "output_key": "4" * 64, "seconds": 1e-6 * (1 + 0.8 * i)}]
      s.save_perf({"time": f"2026-01-0{i + 1}T00:00:00+00:00", "git_commit": SHA[i], "git_dirty": 0, "device": "gpu0",
                   "device_class": "OPENCL GPU V"}, rows)
  finally: s.close()

def _drift_surfaced(out: str, key: str, ratio: str, since: str) -> bool:
  """The check of a planted drift: the first row printed is `key`'s, with its ratio since the first commit."""
  rows = [ln for ln in out.splitlines() if ln.startswith("  kernel ") or ln.startswith("  schedule ")]
  return bool(rows) and rows[0].startswith(f"  kernel {key[:16]} ") and f"({ratio} since {since[:7]};" in rows[0]

def test_a_planted_drift_is_shown_first_with_its_ratio_and_the_commit_the_kernel_changed(store):
  _planted(store)
  r = invoke("perf", store)
  assert r.exit_code == 0, r.output
  assert _drift_surfaced(r.output, "b" * 64, f"{1.1 ** 5:.2f}x", SHA[0]), r.output
  rows = [ln for ln in r.output.splitlines() if ln.startswith("  kernel ") or ln.startswith("  schedule ")]
  assert rows[0] == (f"  kernel {'b' * 16} m ({store}): 100us @{SHA[0][:7]} -> 110us @{SHA[1][:7]} -> 121us @{SHA[2][:7]} -> "
                     f"133us @{SHA[3][:7]}* -> 146us @{SHA[4][:7]} -> 161us @{SHA[5][:7]} (1.61x since {SHA[0][:7]}; peak 40% -> 24.8%)")
  assert "* the kernel changed at that commit" in r.output
  # the 1us -> 5us row has the largest ratio, but moved less than the noise floor: it ranks below the drift, and says so
  assert rows[1].startswith(f"  schedule {'c' * 16} ") and "(5.00x since" in rows[1] and "noise floor" in rows[1]
  assert rows[2].startswith(f"  kernel {'a' * 16} ") and "(1.00x since" in rows[2] and "noise floor" in rows[2]
  h = H.history([store])
  assert [s.input_key[0] for s in h.series] == ["b", "c", "a"] and h.series[0].points[3].kernel_changed
  assert [p.kernel_changed for p in h.series[0].points] == [False, False, False, True, False, False]
  assert json.loads(h.to_json())["rows"][0]["kernel_changed_at"] == [SHA[3]]

def test_the_drift_check_fails_when_the_drift_is_not_surfaced(tmp_path, monkeypatch):
  # no drift planted: the same check fails
  flat = tmp_path / "flat.db"
  _fresh_copy(flat)
  _planted(flat, drift=1.0)
  assert not _drift_surfaced(invoke("perf", flat).output, "b" * 64, f"{1.1 ** 5:.2f}x", SHA[0])
  # the drift planted, but rows ranked by key instead of drift (the ranking taken out): it fails too
  planted = tmp_path / "planted.db"
  _fresh_copy(planted)
  _planted(planted)
  monkeypatch.setattr(H, "_rank", lambda s: (s.db, s.level, s.input_key))
  assert not _drift_surfaced(invoke("perf", planted).output, "b" * 64, f"{1.1 ** 5:.2f}x", SHA[0])

def test_a_kernel_2x_slower_at_the_second_record_tops_the_list(store, monkeypatch):
  # recorded through the real pipeline; the times replaced by fixed ones so that the machine's noise cannot reorder them
  real, calls = C.run, []
  victim = {}
  def timed(selection, options):
    rep = real(selection, options)
    calls.append(options)
    for r in rep.results:
      if r.exec and r.exec.get("new_time_s"):
        victim.setdefault("key", r.input_key)
        r.exec["new_time_s"] = 200e-6 * (2 if len(calls) == 2 and r.input_key == victim["key"] else 1)
    return rep
  monkeypatch.setattr(H.check, "run", timed)
  H.record([store], log=lambda s: None, commit=(SHA[0], 0))
  H.record([store], log=lambda s: None, commit=(SHA[1], 0))
  assert [o.exec for o in calls] == ["all", "all"] and all(o.timing_runs == H.TIMING_RUNS for o in calls)
  r = invoke("perf", store, "--top", "0")
  assert r.exit_code == 0, r.output
  first = next(ln for ln in r.output.splitlines() if ln.startswith("  ") and "->" in ln)
  assert victim["key"][:16] in first and f"200us @{SHA[0][:7]} -> 400us @{SHA[1][:7]} (2.00x since {SHA[0][:7]}" in first, r.output
  assert r.output.count("(1.00x since") == len(H.history([store]).series) - 1  # every other row: unchanged
  assert invoke("perf", store, "--top", "3").output.count(" -> ") == 3

def test_carry_keeps_the_history_across_a_re_capture(store, tmp_path):
  H.record([store], log=lambda s: None, commit=(SHA[0], 0))
  new = tmp_path / "new" / "mlp_digits.db"  # what a re-capture writes: a new file with the same rows and no history
  new.parent.mkdir()
  _fresh_copy(new)
  before = Store(store, readonly=True).perf_history()
  assert H.carry(store, new) == len(before) > 0
  assert H.carry(store, new) == 0  # copied once: a second carry adds nothing
  strip = lambda rows: [{k: v for k, v in r.items() if k != "id"} for r in rows]
  assert strip(Store(new, readonly=True).perf_history()) == strip(before)
  compact(new)  # (what accept does to the new store afterwards: the table survives it)
  H.record([new], log=lambda s: None, commit=(SHA[1], 0))
  assert _measurements(new) == [1, 2]
  assert [[p.git_commit for p in s.points] for s in H.history([new]).series] == [[SHA[0], SHA[1]]] * len(H.history([store]).series)
  assert H.carry(tmp_path / "missing.db", new) == 0  # a model new to the baseline has nothing to carry
  bad = tmp_path / "bad.db"
  bad.write_bytes(b"not a store")
  with pytest.raises(StoreError): H.carry(bad, new)

def test_no_history_exits_2_with_the_hint(store, tmp_path):
  r = invoke("perf", store)
  assert r.exit_code == 2 and "no perf history" in r.output and "replay accept" in r.output, r.output
  # one store with a history among stores without: those are named, the command succeeds
  other = tmp_path / "other.db"
  shutil.copy(store, other)
  _planted(other)
  r = invoke("perf", store, other)
  assert r.exit_code == 0 and f"{store}: no perf history yet (run `replay accept`" in r.output, r.output
  # filters that select nothing are an error too
  for args in (("--key", "ffff"), ("--level", "program")):
    r = invoke("perf", other, *args)
    assert r.exit_code == 2 and "selects no row" in r.output, r.output
  assert invoke("perf", other, "--level", "schedule").output.count("  schedule ") == 1

def test_stores_with_the_table_still_open_and_check(store):
  H.record([store], log=lambda s: None, commit=(SHA[0], 0))
  s = Store(store, readonly=True)
  try: assert s.perf_history() and s.version() in (1, 2)
  finally: s.close()
  rep = C.run(Selection((str(store),)), Options(jobs=1))
  assert rep.exit_code() == 0 and rep.counts()["identical"] == len(rep.results) > 0
  r = invoke("check", store, "--no-determinism", "-j", "1")
  assert r.exit_code == 0 and "OK: every capture replays identically" in r.output, r.output
  assert invoke("stats", store).exit_code == 0
  # a perf_history table without its columns (written by something else) fails `replay perf` clearly, and nothing else
  c = sqlite3.connect(store)
  c.executescript("DROP TABLE perf_history; CREATE TABLE perf_history (id INTEGER PRIMARY KEY, measurement INTEGER);")
  c.close()
  r = invoke("perf", store)
  assert r.exit_code == 2 and "lacks column(s)" in r.output and "Traceback" not in r.output, r.output
  assert invoke("check", store, "--no-determinism", "-j", "1").exit_code == 0

def test_a_fraction_of_peak_carries_across_devices_of_one_class(store):
  s = Store(store)
  try:
    for i, (dev, sec, frac) in enumerate((("gpu-a", 100e-6, 0.5), ("gpu-a", 105e-6, 0.48), ("gpu-b", 60e-6, 0.25))):
      s.save_perf({"time": "t", "git_commit": SHA[i], "git_dirty": 0, "device": dev, "device_class": "OPENCL GPU V"},
                  [{"level": "kernel", "label": "m", "input_key": "a" * 64, "output_key": "1" * 64, "seconds": sec, "peak_fraction": frac}])
  finally: s.close()
  (sr,) = H.history([store]).series
  # seconds on gpu-b have nothing to compare with; its fraction of peak halved against gpu-a's first (one class)
  assert sr.time_ratio is None and (sr.peak_from, sr.peak_to) == (0.5, 0.25) and sr.drift == 2.0 and sr.since == 0
  out = H.text(H.history([store]))
  assert "2.00x slower by fraction of peak since" in out and "[gpu-a]" in out and "[gpu-b]" in out and "peak 50% -> 25%" in out

def test_device_info_names_a_class_without_the_host():
  name, klass = H.device_info("NUMPY")
  assert klass == "NUMPY" and name.startswith("NUMPY (")

def test_a_long_series_prints_its_first_and_last_points(store):
  s = Store(store)
  try:
    for i in range(9):
      s.save_perf({"time": "t", "git_commit": f"{i:07d}" + "0" * 33, "git_dirty": 0, "device": "d", "device_class": "c"},
                  [{"level": "kernel", "label": "m", "input_key": "a" * 64, "output_key": "1" * 64, "seconds": (i + 1) * 1e-4}])
  finally: s.close()
  line = next(ln for ln in H.text(H.history([store])).splitlines() if ln.startswith("  kernel"))
  assert line.endswith("100us @0000000 -> ... (4 more) -> 600us @0000005 -> 700us @0000006 -> 800us @0000007 -> 900us @0000008 (9.00x since 0000000)")
