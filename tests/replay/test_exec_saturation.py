"""Outputs that saturate (inf or NaN everywhere on both sides) prove nothing: the execution check's inputs are in
[0.5, 2), so a matmul over 128 terms feeding exp overflows everywhere, and any change to that kernel compared equal. Seen
on an H100: the planted tensor-core fragment layout was `equivalent` on `(a @ b).exp()` (tests/replay/test_tc_gpu.py).
The check now reruns such a job on inputs scaled down by powers of two (replay/execute/judge.py, INPUT_SCALES) and calls
what stays saturated `skipped`, saying why, instead of `equivalent`."""
import json, os, subprocess, sys
from pathlib import Path
import pytest
import replay.execute.judge as J
from tests.helpers import needs_opencl

ROOT = Path(__file__).resolve().parents[2]
PLANTS = Path(__file__).resolve().parent / "plants"


pytestmark = needs_opencl

WORKLOAD = r'''
import sys, replay
from tinysched import Tensor
with replay.capture(sys.argv[1], label="saturation", levels=("kernel",)):
  Tensor.manual_seed(1)
  x, w = Tensor.rand(4, 128), Tensor.rand(128, 3)
  (x @ w).exp().realize()          # overflows on [0.5, 2) inputs, finite on smaller ones
  ((x + 3e38) * 10).realize()      # inf on any positive input: never verifiable
'''

def _env(plant: str | None) -> dict:
  env = {k: v for k, v in os.environ.items() if k != "TINYSCHED_TEST_PLANT"}
  env["TINYSCHED_DEVICE"] = "OPENCL"
  env["PYTHONPATH"] = os.pathsep.join([str(PLANTS), str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
  if plant: env["TINYSCHED_TEST_PLANT"] = plant
  return env

@pytest.fixture(scope="module")
def db(tmp_path_factory):
  d = tmp_path_factory.mktemp("saturation")
  (d / "w.py").write_text(WORKLOAD)
  subprocess.run([sys.executable, str(d / "w.py"), str(d / "s.db")], env=_env(None), check=True, cwd=ROOT)
  return d / "s.db"

def _check(db: Path, tmp_path: Path, plant: str | None, blind: bool = False) -> tuple[int, dict[str, dict]]:
  """Exit code and each row's exec result. `blind`: the worker processes as the check was before this (no saturation
  test: one run at the usual inputs), through a sitecustomize of the test's own."""
  env = _env(plant)
  if blind:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text("import replay.execute.judge as J\nJ._saturated = lambda got, specs: []\n"
                                           f"exec(open({str(PLANTS / 'sitecustomize.py')!r}).read())\n")
    env["PYTHONPATH"] = os.pathsep.join([str(site), env["PYTHONPATH"]])
  js = tmp_path / "r.json"
  r = subprocess.run([sys.executable, "-m", "replay.cli", "check", str(db), "--exec-all", "--device", "OPENCL", "-j", "1",
                      "--no-determinism", "--report-json", str(js)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
  rep = json.loads(js.read_text())
  return r.returncode, {str(n): row["exec"] for n, row in enumerate(rep["results"]) if row.get("exec")}

def _by_kind(rows: dict[str, dict]) -> tuple[dict, dict]:
  """(the exp row, the always-inf row): the exp row is the one rescaled to finite numbers or found different."""
  sat = [e for e in rows.values() if e.get("verdict") == "skipped"]
  other = [e for e in rows.values() if e.get("verdict") != "skipped"]
  assert len(sat) == 1 and len(other) == 1, rows
  return other[0], sat[0]

def test_saturated_outputs_are_rerun_smaller_or_called_unverified(db, tmp_path):
  rc, rows = _check(db, tmp_path, None)
  exp_row, inf_row = _by_kind(rows)
  assert rc == 0 and exp_row["verdict"] == "equivalent" and exp_row["input_scale"] < 1, rows
  assert "not verified" in inf_row["reason"] and "inf or NaN" in inf_row["reason"]

def test_a_change_hidden_by_saturation_is_caught(db, tmp_path):
  # the scheduler doubles every float constant: exp(x) becomes exp(2x) (exp is exp2 of x times log2(e)), inf either way on
  # the check's usual inputs
  rc, rows = _check(db, tmp_path, "double")
  exp_row, _ = _by_kind(rows)
  assert rc == 1 and exp_row["verdict"] == "mismatch", rows
  # the check as it was (saturation not looked at): the same change passed, every row equivalent
  rc, rows = _check(db, tmp_path, "double", blind=True)
  assert {e["verdict"] for e in rows.values()} == {"equivalent"}, rows

def test_scaling_keeps_values_in_their_domain():
  import numpy as np
  from tinysched.dtype import dtypes, bf16_float
  from replay.execute.inputs import seeded_fill
  for dt in (dtypes.float16, dtypes.float32, dtypes.bfloat16):
    x = J._scaled(seeded_fill(1000, dt, 0), dt, 2.0 ** -12)
    v = bf16_float(x) if dt == dtypes.bfloat16 else x.astype(np.float64)
    assert (v > 0).all() and v.max() < 2.0 ** -11  # positive (log, sqrt, 1/x stay defined), and smaller
  i = seeded_fill(100, dtypes.int32, 0)
  assert (J._scaled(i, dtypes.int32, 2.0 ** -4) == i).all()  # integers keep their values (divisors, shifts)
