"""Where the OpenCL device has no tensor cores (PoCL here), the execution check does not run the committed tensor-core
kernels (captures/gpu_target.db, label `tensor_cores`): each is `skipped`, saying so, and the check passes. Without that
(replay/execute/launch.py `_unlaunchable`) PoCL would try to build inline PTX and every such row would fail."""
import json, os, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[2]

def _opencl() -> bool:
  try:
    from tinysched.runtime.opencl import opencl_available
    return opencl_available()
  except Exception: return False

@pytest.mark.skipif(not _opencl(), reason="needs an OpenCL platform (PoCL)")
def test_tensor_core_rows_are_skipped_with_the_reason_on_a_device_without_them(tmp_path):
  from tinysched.runtime.opencl import _all_devices, target_of
  if any(target_of(d).tensor_cores for d in _all_devices()): pytest.skip("this device has tensor cores: tests/replay/test_tc_gpu.py runs them")
  js = tmp_path / "r.json"
  r = subprocess.run([sys.executable, "-m", "replay.cli", "check", "captures/gpu_target.db", "--label", "tensor_cores", "--exec-all",
                      "--no-determinism", "--report-json", str(js)], cwd=ROOT, env={**os.environ, "TINYSCHED_DEVICE": "OPENCL"},
                     capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stdout + r.stderr
  rows = json.loads(js.read_text())["results"]
  tc = [x for x in rows if x["exec"] and "uses tensor cores" in str(x["exec"].get("reason") or "")]
  assert len(tc) >= 9 and all(x["exec"]["verdict"] == "skipped" for x in tc), r.stdout
