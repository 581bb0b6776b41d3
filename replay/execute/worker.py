"""The execution check's processes (started by replay.execute.pool, never imported by it):
  python -m replay.execute.worker worker DEVICE [TIMING_RUNS [SLOWER_THRESHOLD]]   jobs from stdin, verdicts to stdout
  python -m replay.execute.worker calibrate DEVICE                                 a tiny kernel: the time limits' yardstick
  python -m replay.execute.worker precompile DEVICE                                kernel items from stdin, compiled in a batch
Each profiles its device's queue whatever the caller set (the workers time kernels)."""
from __future__ import annotations
import json, os, sys, traceback
from tinysched import Tensor
from tinysched.device import Device
from replay.store.encode import decode_graph
from replay.execute.judge import run_job

def _worker_main(device: str, timing_runs: int, slower_threshold: float) -> None:
  # a fresh process lowering every captured kernel again: reuse what this very code rendered before (the cache keys on
  # the sources and on the code as loaded, planted bugs included: tinysched/codegen/program_cache.py)
  os.environ.setdefault("TINYSCHED_PROGRAM_CACHE", "1")
  for line in sys.stdin:
    job = json.loads(line)
    try: out = run_job(job, device, timing_runs, slower_threshold)
    except Exception as e: out = {"verdict": "failed", "error": f"{type(e).__name__}: {e}", "log": traceback.format_exc()[-4000:]}
    sys.stdout.write(json.dumps({"id": job["id"], **out}, default=str) + "\n")
    sys.stdout.flush()

def _calibrate_main(device: str) -> None:
  """A tiny kernel end to end on `device`: the yardstick for time limits, and a check that the device works."""
  Device.DEFAULT = device
  (Tensor.arange(64).reshape(8, 8).float().sum(1) + 1).numpy()

def _precompile_main(device: str) -> None:
  os.environ.setdefault("TINYSCHED_PROGRAM_CACHE", "1")  # what it renders, the workers then read (see _worker_main)
  asts, sources = [], []
  for line in sys.stdin:
    it = json.loads(line)
    if it[0] == "ast": asts.append(decode_graph(it[1].encode())[0])
    else: sources.append((it[1], it[2]))
  Device[device].prebuild(asts, sources)

if __name__ == "__main__":
  os.environ["TINYSCHED_PROFILE"] = "1"  # the workers and the calibration time kernels: a profiling queue, whatever the caller set
  if len(sys.argv) >= 3 and sys.argv[1] == "worker":
    _worker_main(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 5, float(sys.argv[4]) if len(sys.argv) > 4 else 0.10)
  elif len(sys.argv) >= 3 and sys.argv[1] == "calibrate": _calibrate_main(sys.argv[2])
  elif len(sys.argv) >= 3 and sys.argv[1] == "precompile": _precompile_main(sys.argv[2])
  else: raise SystemExit("usage: python -m replay.execute.worker worker DEVICE [TIMING_RUNS [SLOWER_THRESHOLD]] | calibrate DEVICE"
                         " | precompile DEVICE")
