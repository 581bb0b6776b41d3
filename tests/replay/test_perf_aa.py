"""Perf verdicts that do not cry wolf (replay/check/perf.py): a kernel timed against the same code is an A/A test, never
a finding; the A/A rows of a run set the margin of their duration class and measure the plain rule's false-alarm rate.
Each rule is shown going red with its defence taken out, and the committed baseline with --perf-gate passes repeatedly
beside a CPU-heavy process."""
import os, subprocess, sys
from pathlib import Path
import pytest
from replay.check import perf
from replay.check.results import Report, Result

ROOT = Path(__file__).resolve().parents[2]

def res(old: float, new: float, noise: float = 0.0, same_code: bool = False) -> Result:
  r = Result("x.db", 1, 1, "kernel", "m", "k" * 64, "s" * 64)
  r.exec = {"verdict": "equivalent", "old_time_s": old, "new_time_s": new, "noise": noise, **({"same_code": True} if same_code else {})}
  return r

def test_same_code_is_never_slower_a_changed_kernel_is():
  rep = Report(results=[res(1e-3, 4e-3, same_code=True)], perf_gate=10.0)
  assert rep.perf_failures() == [] and rep.exit_code() == 0      # 4x on the same code: noise, by definition
  rep.results[0].exec.pop("same_code")                             # the defence out: the same numbers from changed code
  assert rep.perf_failures() and rep.exit_code() == 1

def test_the_a_a_spread_of_a_class_sets_its_margin(monkeypatch):
  aa = [res(5e-4, 5e-4 * (1 + 0.3 * i / 24), same_code=True) for i in range(25)]  # short kernels, up to +30% on the same code
  at_25, at_50 = res(5e-4, 6.25e-4), res(5e-4, 7.5e-4)
  rep = Report(results=[*aa, at_25, at_50], perf_gate=10.0)
  assert rep.perf_failures() == [at_50]                            # +25% is within what the A/A rows showed, +50% is not
  monkeypatch.setattr(perf, "MIN_AA", 10**6)                       # the calibration out: the plain 10% rule
  assert rep.perf_failures() == [at_25, at_50]
  assert perf.false_alarms([r.exec for r in rep.results], 10.0) == (sum(r.exec["new_time_s"] > 5.5e-4 + 20e-6 for r in aa), 25)

def test_a_class_with_few_a_a_rows_keeps_the_plain_rule():
  rep = Report(results=[res(5e-4, 7e-4, same_code=True), res(5e-4, 6.25e-4)], perf_gate=10.0)
  assert len(rep.perf_failures()) == 1                             # one A/A row says nothing about a class
  assert "fired on 1 of 1" in perf.summary([r.exec for r in rep.results], 10.0)

def _opencl() -> bool:
  try:
    from tinysched.runtime.opencl import opencl_available
    return opencl_available()
  except Exception: return False

@pytest.mark.skipif(not _opencl(), reason="needs an OpenCL platform: timings come from its profiling events")
def test_unchanged_code_passes_the_perf_gate_beside_a_cpu_heavy_process(tmp_path):
  burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
  try:
    for _ in range(3):
      r = subprocess.run([sys.executable, "-m", "replay.cli", "check", "--exec-all", "--reoptimize", "--perf-gate", "10", "--no-determinism",
                          "captures/mlp_digits.db"], cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TINYSCHED_DEVICE": "OPENCL", "TINYSCHED_PROGRAM_CACHE": "1"})
      assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
      assert "A/A (same code on both sides, never a finding)" in r.stdout and "0 slower" in r.stdout
  finally: burner.kill()

# *** the verdict of one job's timing rounds (replay/execute/timing.py) ***

class _FakeSide:
  """A side whose every timed run takes the next time of `times` (seconds, round and round), for one kernel."""
  items: list = []
  def __init__(self, times: list[float]): self.times, self.i = times, 0
  def run(self, bufs, timed: bool = False) -> list[float]:
    t = self.times[self.i % len(self.times)]
    self.i += 1
    return [t]

def _judge(old_times: list[float], new_times: list[float], same_code: bool = False) -> dict:
  from replay.execute.timing import _timing
  return _timing(_FakeSide(old_times), _FakeSide(new_times), {}, {}, {}, 5, 0.10, same_code)

def test_a_steady_2x_slowdown_is_slower_and_confirmed():
  out = _judge([100e-6], [200e-6])
  assert out["slower"] and out["rank_p"] < 0.05 and out["confirm_rank_p"] < 0.05 and out["confirmed_with_runs"] == 5

def test_minima_apart_but_rounds_not_is_not_slower():
  # each old series had one lucky round far below its others: the minima say +50%, the rounds do not (old and old2 runs
  # alternate through this list)
  old = [100e-6, 100e-6, 400e-6, 410e-6, 420e-6, 440e-6, 450e-6, 460e-6, 430e-6, 405e-6]
  out = _judge(old, [150e-6, 155e-6, 160e-6, 152e-6, 158e-6])
  assert not out["slower"] and out["rank_p"] >= 0.05

def test_a_burst_of_load_is_not_confirmed():
  # the first five rounds of the new side ran during a burst of load; the confirmation rounds did not
  out = _judge([100e-6], [250e-6] * 5 + [100e-6] * 5)
  assert out["rank_p"] < 0.05 and out["confirmed_with_runs"] == 5 and not out["slower"]

def test_the_rank_test_is_exact():
  from replay.execute.timing import rank_p
  assert rank_p([1.0] * 10, [2.0] * 5) == pytest.approx(1 / 3003)  # 5 of 15 rounds, all above: one arrangement in C(15, 5)
  assert rank_p([1.0, 2.0], [3.0]) == pytest.approx(1 / 3)
  assert rank_p([2.0] * 4, [1.0] * 4) == 1.0

def test_without_the_rank_test_and_the_confirmation_the_lucky_round_is_a_false_alarm(monkeypatch):
  from replay.execute import timing
  monkeypatch.setattr(timing, "ALPHA", 2.0)                          # the defences out: every p passes,
  monkeypatch.setattr(timing.statistics, "median", min)              # and the confirmation compares minima again
  old = [100e-6, 100e-6, 400e-6, 410e-6, 420e-6, 440e-6, 450e-6, 460e-6, 430e-6, 405e-6]
  assert _judge(old, [150e-6, 155e-6, 160e-6, 152e-6, 158e-6] * 2)["slower"]

def test_the_gate_takes_the_workers_rank_verdict(monkeypatch):
  # the minima are 30% apart, but the worker's rank test (or its confirmation) said not slower: no perf failure
  r = res(1e-3, 1.3e-3)
  r.exec.update(slower=False, rank_p=0.4)
  rep = Report(results=[r], perf_gate=10.0)
  assert rep.perf_failures() == []
  monkeypatch.setattr(perf, "failures", lambda execs, gate: [i for i, e in enumerate(execs) if e and perf._fires(e, gate / 100)])
  assert rep.perf_failures() == [r]  # the plant: the gate's own margin rule alone
