"""Perf figures that can be believed (issue 43): throughput held to the device's measured peak (replay/execute/peak.py,
timing.held_to_peak), launch-bound kernels judged as a group (replay/check/perf.py), and the gate catching a kernel
planted slower while passing unchanged code. Each defence is shown red with a planted bug."""
import json, math, os, random, subprocess, sys
from pathlib import Path
import pytest
from replay.baseline import gate as G
from replay.check import perf
from replay.check.results import Report, Result
from replay.execute import peak as P
from replay.execute import timing as T
from tests.replay.changes import opencl_here

ROOT = Path(__file__).resolve().parents[2]
PLANTS = ROOT / "tests" / "replay" / "plants"

needs_opencl = pytest.mark.skipif(not opencl_here(), reason="needs an OpenCL platform: timings and the peak come from its profiling events")

# *** the peak and the figures held to it ***

@pytest.fixture
def fake_peak(monkeypatch):
  """A device whose measured peak is 100 GFLOP/s and 50 GB/s; counts the measurements."""
  calls = []
  def peak(device, fresh=False):
    calls.append(fresh)
    return P.Peak(device, 100.0, 50.0)
  monkeypatch.setattr(P, "peak", peak)
  return calls

def test_a_figure_within_the_peak_is_reported_with_its_fraction(fake_peak):
  out = T.held_to_peak(flops=10**6, bytes_=10**5, t=1e-4, device="D", retime=lambda: 1e-4)
  assert out["gflops"] == pytest.approx(10.0) and out["gbps"] == pytest.approx(1.0) and out["peak_fraction"] == pytest.approx(0.1)
  assert fake_peak == [False] and "throughput_refused" not in out

def test_a_figure_above_the_peak_is_refused_after_a_fresh_peak_and_a_retime(fake_peak):
  times = []
  out = T.held_to_peak(flops=10**9, bytes_=10**3, t=1e-6, device="D", retime=lambda: times.append(1) or 1e-6)
  assert "gflops" not in out and "1000000.00 GFLOP/s" in out["throughput_refused"] and "cost model" in out["throughput_refused"]
  assert fake_peak == [False, True] and len(times) == T.RETIMES

def test_a_misread_time_is_no_bug(fake_peak):
  # the first timing read 1 us, the kernel really takes 1 ms: timed again, it is within the peak
  out = T.held_to_peak(flops=10**7, bytes_=10**3, t=1e-6, device="D", retime=lambda: 1e-3)
  assert "throughput_refused" not in out and out["gflops"] == pytest.approx(10.0) and out["retimed_s"] == 1e-3

def test_the_peak_only_rises(monkeypatch, tmp_path):
  monkeypatch.setenv("TINYSCHED_CACHE", str(tmp_path))
  monkeypatch.setattr(P, "_known", {})
  monkeypatch.setattr(P, "_ident", lambda d: f"ident of {d}")
  monkeypatch.setattr(P, "Device", {"X": type("B", (), {"run_source": None})()})  # a device that runs sources
  got = iter([P.Peak("X", 100.0, 80.0), P.Peak("X", 60.0, 90.0)])
  monkeypatch.setattr(P, "_measure", lambda d: next(got))
  assert P.peak("X") == P.Peak("X", 100.0, 80.0)
  assert P.peak("X") == P.Peak("X", 100.0, 80.0)               # cached: not measured again
  assert P.peak("X", fresh=True) == P.Peak("X", 100.0, 90.0)   # a busier machine's lower figure does not lower it
  P._known.clear()
  assert P.peak("X") == P.Peak("X", 100.0, 90.0)               # from the disk cache, in a new process

@needs_opencl
def test_the_measured_peak_is_physical():
  pk = P._measure("OPENCL")
  # a CPU core does at most a few hundred GFLOP/s and a memory system a few hundred GB/s; a GPU 100x more: a peak
  # outside those ranges is a measurement bug (a wrong FLOP count of the probe, a kernel the compiler removed)
  assert 0.5 < pk.gflops < (os.cpu_count() or 1) * 400 * (100 if "GPU" in str(P.Device["OPENCL"].target.name).upper() else 1)
  assert 0.5 < pk.gbps < 5e4

@needs_opencl
def test_a_planted_wrong_flop_count_is_refused_and_fails_the_gate(tmp_path):
  for plant, refused in ((None, False), ("flops_inflated", True)):
    report = tmp_path / f"{plant}.json"
    env = {**os.environ, "TINYSCHED_DEVICE": "OPENCL", "TINYSCHED_PROGRAM_CACHE": "1"}
    if plant: env.update(TINYSCHED_TEST_PLANT=plant, PYTHONPATH=os.pathsep.join([str(PLANTS), str(ROOT)]))
    r = subprocess.run([sys.executable, "-m", "replay.cli", "check", "--exec-all", "--no-determinism", "captures/mlp_digits.db",
                        "--report-json", str(report)], cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    rj = json.loads(report.read_text())
    n_refused = sum(1 for x in rj["results"] if (x.get("exec") or {}).get("throughput_refused"))
    passed, reason = G.decide(rj, r.returncode, accept=True)
    if refused:
      assert r.returncode == 1 and "THROUGHPUT REFUSED" in r.stdout and n_refused > 0, r.stdout[-3000:]
      assert not passed and "above the device's measured peak" in reason
    else:
      assert r.returncode == 0 and n_refused == 0 and " 0 refused" in r.stdout, r.stdout[-3000:]
      assert passed
      timed = [x["exec"] for x in rj["results"] if (x.get("exec") or {}).get("gflops") is not None]
      assert timed and all(0 <= e["peak_fraction"] <= 1 for e in timed)

# *** launch-bound kernels judged as a group ***

def _rows(n_aa: int, n_changed: int, slow: float, seed: int) -> list[Result]:
  """Launch-bound rows (5 us) whose times scatter like the A/A rows of a loaded machine (log-normal, +/- 2x), the
  changed ones `slow` times slower on top."""
  rng = random.Random(seed)
  out = []
  for i in range(n_aa + n_changed):
    r = Result("x.db", 1, i, "program", "m", f"{i:064d}", "s" * 64)
    old, new = 5e-6 * math.exp(rng.gauss(0, 0.7)), 5e-6 * math.exp(rng.gauss(0, 0.7)) * (slow if i >= n_aa else 1.0)
    r.exec = {"verdict": "equivalent", "old_time_s": old, "new_time_s": new, "noise": 0.02, **({"same_code": True} if i < n_aa else {})}
    out.append(r)
  return out

def test_a_slower_group_of_launch_bound_kernels_fails_as_a_group():
  rep = Report(results=_rows(200, 60, 2.0, seed=1), perf_gate=10.0)
  g = perf.group_verdict([r.exec for r in rep.results], 10.0)
  assert g["slower"] and g["p"] < 1e-3 and len(g["rows"]) == 60
  assert rep.perf_failures() and rep.exit_code() == 1
  assert "SLOWER as a group" in perf.group_line([r.exec for r in rep.results], 10.0)

def test_one_by_one_a_slower_group_of_launch_bound_kernels_is_missed(monkeypatch):
  slow = _rows(200, 60, 2.0, seed=1)
  monkeypatch.setattr(perf, "launch_bound", lambda e: False)                     # the group out: each judged alone
  # each lost a few microseconds, under MIN_SLOWER_S and within the scatter its own class shows: none is slower alone,
  # though all 60 take twice as long
  assert Report(results=slow, perf_gate=10.0).perf_failures() == []

def test_an_unchanged_group_is_not_slower_on_many_seeds():
  fired = sum(bool(Report(results=_rows(200, 40, 1.0, seed=s), perf_gate=10.0).perf_failures()) for s in range(200))
  assert fired <= 200 * 0.05  # the rank test's level, and the effect size on top

def test_without_a_a_rows_the_group_takes_a_sign_test():
  g = perf.group_verdict([r.exec for r in _rows(0, 30, 3.0, seed=3)], 10.0)
  assert g["slower"] and "sign test" in g["against"]
  g = perf.group_verdict([r.exec for r in _rows(0, 30, 1.0, seed=4)], 10.0)
  assert not g["slower"]

def test_the_large_sample_rank_test_agrees_with_the_exact_one():
  rng = random.Random(5)
  for _ in range(20):
    a, b = [rng.random() for _ in range(18)], [rng.random() + 0.2 for _ in range(18)]
    assert T._rank_p_normal(a, b) == pytest.approx(T.rank_p(a, b), abs=0.02)

# *** the gate: a kernel planted slower fails it, unchanged code passes it ***

@needs_opencl
def test_a_kernel_planted_slower_fails_the_perf_gate_unchanged_code_passes():
  # Beside the suite's other worker (a CPU-heavy process). A timing must not decide a test, so the plant is large: the
  # kernel's work done 4 times, beyond what preempting one of PoCL's 2 threads does to a launch (2x). The 2x plant's
  # 10-of-10 under a busy-loop is measured by bench/perf_gate.py (bench/results/perf-gate-2026-12-07.txt)
  for plant in (False, True, True):
    env = {**os.environ, "TINYSCHED_DEVICE": "OPENCL", "TINYSCHED_PROGRAM_CACHE": "1"}
    if plant: env.update(TINYSCHED_TEST_PLANT="renders_twice", TINYSCHED_TEST_PLANT_KERNEL="r_3_96_384_8_16", TINYSCHED_TEST_PLANT_ROUNDS="4",
                         PYTHONPATH=os.pathsep.join([str(PLANTS), str(ROOT)]))
    # --accept: the planted change computes the same numbers, which the marker lets through: only the perf gate fails it
    r = subprocess.run([sys.executable, "-m", "replay.cli", "gate", "--exec-all", "--perf-gate", "10", "--no-prove", "--no-determinism",
                        "--accept", "captures/minilm.db"], cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    if plant:
      assert r.returncode == 1 and "got slower beyond --perf-gate" in r.stdout, r.stdout[-3000:]
      assert "SLOWER (--perf-gate): minilm program 6856480017e9a802" in r.stdout
    else: assert r.returncode == 0 and "PASS" in r.stdout, r.stdout[-3000:]

def test_a_whole_rule_false_alarm_is_counted_only_where_the_whole_rule_ran():
  # the same code measured 2x apart every round: under the whole rule (5 rounds, rank test, confirmation) that is a
  # false alarm the class's bar must rise to; timed once (a sweep), only the margin rule judged it: not one
  from tests.replay.test_perf_aa import _FakeSide
  five = T._timing(_FakeSide([100e-6]), _FakeSide([200e-6]), {}, {}, {}, 5, 0.10, same_code=True)
  once = T._timing(_FakeSide([100e-6]), _FakeSide([200e-6]), {}, {}, {}, 1, 0.10, same_code=True)
  assert five.get("aa_false_alarm") and not five["slower"]
  assert not once.get("aa_false_alarm") and not once["slower"]
  calib = perf.calibration([{**five, "same_code": True, "old_time_s": 5e-4, "new_time_s": 1e-3}])
  assert calib["short (50 us - 1 ms)"]["whole_rule_fired"] == 1 and calib["short (50 us - 1 ms)"]["max_alarm_excess"] == pytest.approx(1.0)
