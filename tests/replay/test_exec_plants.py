"""The execution check must be able to fail: each bug it exists to catch is planted (tests/replay/plants/sitecustomize.py, loaded
by every process of the `replay` CLI, its exec workers included, as a user's change would be) and shown caught, with the
verdict, the exit code and the gate's decision with and without [replay:accept]. Runs on OpenCL (PoCL here)."""
import json, os, subprocess, sys
from pathlib import Path
import pytest
from replay.baseline.gate import decide
from tests.helpers import needs_opencl

ROOT = Path(__file__).resolve().parents[2]
PLANTS = Path(__file__).resolve().parent / "plants"


pytestmark = needs_opencl

WORKLOAD = r'''
import sys, replay
from tinysched import Tensor, Variable, dtypes
from tinysched.nn import Embedding
def workload():
  Tensor.manual_seed(3)
  x, w = Tensor.rand(4, 8), Tensor.rand(8, 3)
  (x @ w).relu().sum(1).realize()
  e = (x - x.max(1, keepdim=True)).exp()
  (e / e.sum(1, keepdim=True)).realize()
  (x.pad(((1, 1), (0, 0))) * 3).sum(1).realize()
  (x.exp().pad(((1, 1), (0, 0))) + 1).realize()           # a padded unsafe op: must be realized before the pad
  (Tensor.rand(100000) + 1).sum().realize()               # many work-groups
  Tensor([-1.0, 2.0, -3.0]).relu().realize()
  (x - x.flip(1)).log().realize()                         # NaN where the difference is negative: no false alarm
  emb = Embedding(50, 6)
  emb(Tensor([[1, 7, 3]], dtype=dtypes.int32)).realize()  # a gather
  a, b = Tensor([[7, -9, 4]], dtype=dtypes.int32), Tensor.randint(1, 3, low=-3, high=4, dtype=dtypes.int32)
  (a // (b * b + 1)).realize()                             # an integer divisor derived from an input
  v = Variable("n", 1, 4)
  (x.shrink(((0, v.bind(3)), None)) + 1).sum(0).realize()
with replay.capture(sys.argv[1], label="plants"): workload()
'''

def _env(plant: str | None) -> dict:
  env = {k: v for k, v in os.environ.items() if k not in ("TINYSCHED_TEST_PLANT",)}
  env["TINYSCHED_DEVICE"] = "OPENCL"
  # as the main job runs (scripts/replay.sh): every plant must be caught with rendered programs read from the disk
  # cache, which the clean run fills first
  env["TINYSCHED_PROGRAM_CACHE"] = "1"
  env["PYTHONPATH"] = os.pathsep.join([str(PLANTS), str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
  if plant: env["TINYSCHED_TEST_PLANT"] = plant
  return env

@pytest.fixture(scope="module")
def db(tmp_path_factory):
  d = tmp_path_factory.mktemp("plants")
  (d / "w.py").write_text(WORKLOAD)
  p = d / "base.db"
  subprocess.run([sys.executable, str(d / "w.py"), str(p)], env=_env(None), check=True, cwd=ROOT)
  return p

def run_check(db, tmp_path, plant: str | None, *extra: str) -> tuple[int, dict, str]:
  js = tmp_path / f"r-{plant}.json"
  r = subprocess.run([sys.executable, "-m", "replay.cli", "check", str(db), "--exec-all", "--device", "OPENCL", "-j", "1",
                      "--report-json", str(js), *extra], env=_env(plant), cwd=ROOT, capture_output=True, text=True, timeout=600)
  report = json.loads(js.read_text()) if js.exists() else {}
  return r.returncode, report, r.stdout + r.stderr

def verdicts(report: dict) -> dict[str, int]: return report["summary"]["exec"]

def gate(report: dict, rc: int) -> tuple[bool, bool]:
  """(passes without the marker, passes with it)."""
  return decide(report, rc, accept=False)[0], decide(report, rc, accept=True)[0]

def test_clean_code_is_all_equivalent(db, tmp_path):
  rc, rep, out = run_check(db, tmp_path, None)
  assert rc == 0, out
  assert set(verdicts(rep)) == {"equivalent"}, out
  levels = {r["level"] for r in rep["results"] if r["exec"] and r["exec"]["verdict"] == "equivalent"}
  assert levels == {"kernel", "schedule", "program"}  # the stored OpenCL sources ran too
  assert all(r["exec"]["old_time_s"] is not None and "noise" in r["exec"] for r in rep["results"] if r["exec"].get("old_time_s"))
  assert gate(rep, rc) == (True, True)

@pytest.mark.parametrize("plant", ["launch", "fmin", "mask"])
def test_device_and_codegen_bugs_are_wrong_numbers(db, tmp_path, plant):
  # the runtime drops a work-group / the renderer writes fmin for MAX / the shared view -> index code is off by one:
  # kernel ASTs barely change, so only the independent reference (and the stored sources) can tell
  rc, rep, out = run_check(db, tmp_path, plant)
  v = verdicts(rep)
  assert rc == 1, out
  assert v.get("wrong", 0) + v.get("mismatch", 0) > 0, out
  if plant == "launch": assert v.get("wrong", 0) > 0 and not rep["summary"]["changed"]  # nothing changed, yet wrong
  assert gate(rep, rc) == (False, False)  # [replay:accept] never waives wrong numbers

def test_fmin_is_caught_at_program_level_against_the_stored_source(db, tmp_path):
  rc, rep, out = run_check(db, tmp_path, "fmin", "--level", "program")
  bad = [r for r in rep["results"] if r["exec"] and r["exec"]["verdict"] == "mismatch"]
  assert bad and all(r["outcome"] == "changed" for r in bad), out  # old = the stored source, which computed MAX right
  assert bad[0]["exec"]["wrong_sides"] == ["new"]

def test_scheduler_stops_realizing_a_padded_unsafe_op(db, tmp_path):
  rc, rep, out = run_check(db, tmp_path, "can_pad", "--level", "schedule")
  bad = [r for r in rep["results"] if r["exec"] and r["exec"]["verdict"] in ("wrong", "mismatch")]
  assert rc == 1 and bad, out
  assert all(r["exec"]["wrong_sides"] == ["new"] for r in bad)   # the big graph, evaluated op by op, says new is off
  assert gate(rep, rc) == (False, False)

def test_scheduler_change_that_alters_numbers(db, tmp_path):
  rc, rep, out = run_check(db, tmp_path, "double")
  v = verdicts(rep)
  assert rc == 1 and v.get("mismatch", 0) > 0, out
  assert gate(rep, rc) == (False, False)

def test_equivalent_scheduler_change_is_accepted_only_with_the_marker(db, tmp_path):
  rc, rep, out = run_check(db, tmp_path, "swap")
  assert rc == 1 and rep["summary"]["changed"] > 0, out
  assert set(verdicts(rep)) == {"equivalent"}, out
  assert gate(rep, rc) == (False, True)

def test_codegen_change_that_only_alters_speed(db, tmp_path):
  rc, rep, out = run_check(db, tmp_path, "stores_twice", "--level", "program")
  changed = [r for r in rep["results"] if r["outcome"] == "changed"]
  assert rc == 1 and changed, out
  assert all(r["exec"]["verdict"] == "equivalent" for r in changed), out
  e = changed[0]["exec"]
  assert e["old_time_s"] > 0 and e["new_time_s"] > 0 and "noise" in e and e["bytes"] > 0   # timed, never decided by time here
  assert gate(rep, rc) == (False, True)

def test_a_timeout_is_retried_then_fails_with_exit_2(db, tmp_path):
  rc, rep, out = run_check(db, tmp_path, None, "--level", "kernel", "--timeout", "0.001")
  assert rc == 2, out
  t = [r["exec"] for r in rep["results"] if r["exec"] and r["exec"]["verdict"] == "timeout"]
  assert t and all(e.get("retried") for e in t)
  assert "TIMEOUT" in out
  assert gate(rep, rc) == (False, False)

def test_an_unknown_device_fails_at_the_start(db, tmp_path):
  r = subprocess.run([sys.executable, "-m", "replay.cli", "check", str(db), "--exec", "--device", "BOGUS"], env=_env(None), cwd=ROOT,
                     capture_output=True, text=True, timeout=120)
  assert r.returncode == 2 and "BOGUS" in r.stderr and "Traceback" not in r.stderr
  r = subprocess.run([sys.executable, "-m", "replay.cli", "check", str(db), "--exec-all"], env={**_env(None), "TINYSCHED_DEVICE": "BOGUS"},
                     cwd=ROOT, capture_output=True, text=True, timeout=120)
  assert r.returncode == 2 and "TINYSCHED_DEVICE='BOGUS'" in r.stderr and "Traceback" not in r.stderr

def _diff(db, tmp_path, plant: str) -> tuple[int, dict, str]:
  new = tmp_path / f"new-{plant}.db"
  subprocess.run([sys.executable, str(db.parent / "w.py"), str(new)], env=_env(plant), check=True, cwd=ROOT)
  js = tmp_path / f"d-{plant}.json"
  r = subprocess.run([sys.executable, "-m", "replay.cli", "diff", str(db), str(new), "--exec", "--device", "OPENCL", "--report-json", str(js)],
                     env=_env(None), cwd=ROOT, capture_output=True, text=True, timeout=600)
  return r.returncode, json.loads(js.read_text()), r.stdout + r.stderr

def test_diff_exec_runs_both_stored_sides(db, tmp_path):
  # a store captured with a numbers-changing scheduler: kernel and schedule captures pair by input, old vs new as stored
  rc, rep, out = _diff(db, tmp_path, "double")
  assert rc == 1 and verdicts(rep).get("mismatch", 0) > 0, out
  assert gate(rep, rc) == (False, False)
  # a store captured with a broken renderer: program captures pair by AST, and each store's own source is launched
  rc, rep, out = _diff(db, tmp_path, "fmin")
  bad = [x for x in rep["results"] if x["level"] == "program" and x["exec"] and x["exec"]["verdict"] == "mismatch"]
  assert rc == 1 and bad, out
  assert bad[0]["exec"]["wrong_sides"] == ["new"]
