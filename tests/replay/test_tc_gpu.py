"""On a GPU with tensor cores (an NVIDIA OpenCL device whose compiler takes sm_80's instructions), the execution check
judges the committed tensor-core kernels (captures/gpu_target.db) against the reference, and a wrong fragment layout
planted in the code generator (tests/replay/plants, `tc_fragment`: A read with its rows and columns swapped) is
caught: the new side off the reference (`mismatch`, as the stored source is right), exit 1. Skipped where no such
device is (the CPU model of tests/tinysched/test_tensor_core.py covers the layout there). Run on an H100 with
`OCL_ICD_VENDORS=/usr/local/nvidia/lib64/libnvidia-opencl.so.1 python -m pytest tests/replay/test_tc_gpu.py`."""
import json, os, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[2]
PLANTS = Path(__file__).resolve().parent / "plants"
STORE = ROOT / "captures" / "gpu_target.db"

def _tensor_core_device() -> bool:
  try:
    from tinysched.runtime.opencl import opencl_available, _all_devices, target_of
    return opencl_available() and any(target_of(d).tensor_cores for d in _all_devices())
  except Exception: return False

pytestmark = pytest.mark.skipif(not _tensor_core_device(), reason="needs an OpenCL GPU with tensor cores (NVIDIA, sm_80 or later)")

def run_check(tmp_path, plant: str | None) -> tuple[int, dict, str]:
  env = {k: v for k, v in os.environ.items() if k != "TINYSCHED_TEST_PLANT"}
  env["TINYSCHED_DEVICE"] = "OPENCL"
  env["PYTHONPATH"] = os.pathsep.join([str(PLANTS), str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
  if plant: env["TINYSCHED_TEST_PLANT"] = plant
  js = tmp_path / f"r-{plant}.json"
  r = subprocess.run([sys.executable, "-m", "replay.cli", "check", str(STORE), "--exec-all", "--report-json", str(js)], env=env, cwd=ROOT,
                     capture_output=True, text=True, timeout=900)
  return r.returncode, json.loads(js.read_text()) if js.exists() else {}, r.stdout + r.stderr

def test_tensor_core_kernels_replay_equivalent_on_the_gpu(tmp_path):
  rc, rep, out = run_check(tmp_path, None)
  assert rc == 0, out
  assert set(rep["summary"]["exec"]) <= {"equivalent", "skipped"}, out
  ran = [r for r in rep["results"] if r["label"] == "tensor_cores" and r["exec"] and r["exec"]["verdict"] == "equivalent"]
  # the tensor-core kernels ran (measured on an H100 with 9 of them: 12 rows of the label equivalent; the 11 skipped were
  # other kernels rendered with native half, which NVIDIA's OpenCL lacks)
  assert len(ran) >= 9, out

def test_a_swapped_fragment_layout_is_wrong_on_the_gpu(tmp_path):
  # measured on an H100 (the store then held 9 tensor-core kernels): 9 changed rows, each `mismatch` (old and new differ:
  # that verdict comes first) with the new side off the reference by a relative error of 0.12-0.32, exit 1
  rc, rep, out = run_check(tmp_path, "tc_fragment")
  assert rc == 1, out
  changed = [r for r in rep["results"] if r["outcome"] == "changed"]
  assert len(changed) >= 9 and all(r["label"] == "tensor_cores" for r in changed), out  # only tensor-core sources change
  assert all(r["exec"]["verdict"] in ("wrong", "mismatch") and r["exec"]["wrong_sides"] == ["new"] for r in changed), out
