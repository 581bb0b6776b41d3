"""The first forward call of a model in a fresh process, with the OpenCL program disk cache empty and then filled by that
first process: what compiling the distinct kernels costs, and what the disk cache (runtime/opencl.py) saves.

  TINYSCHED_DEVICE=OPENCL python bench/cold_call.py [--model gpt2|resnet18] [--runs 2]

Each measurement is its own process (so no in-memory cache helps) with TINYSCHED_CACHE pointing at one temporary
folder: run 1 finds it empty, runs 2+ find the binaries run 1 stored. Prints the first call's time (graph, schedule,
codegen, compile or load, run) and the number of distinct programs the process built or loaded.
"""
from __future__ import annotations
import argparse, json, os, subprocess, sys, tempfile, time

CHILD = r"""
import json, sys, time
sys.path.insert(0, %(root)r)
from bench.profile import _gpt2, _resnet18
from tinysched import Device
fwd, make = _gpt2() if %(model)r == "gpt2" else _resnet18()
x = make()
dev = Device[Device.DEFAULT]
dev.synchronize()
t0 = time.perf_counter()
fwd(x)
dev.synchronize()
t = time.perf_counter() - t0
print(json.dumps({"first_s": t, "programs": len(getattr(dev, "dev", None).kernels) if hasattr(dev, "dev") else 0}))
"""

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--model", choices=("gpt2", "resnet18"), default="gpt2")
  ap.add_argument("--runs", type=int, default=2)
  a = ap.parse_args()
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  with tempfile.TemporaryDirectory() as cache:
    env = {**os.environ, "TINYSCHED_CACHE": cache, "POCL_CACHE_DIR": os.path.join(cache, "pocl")}
    print(f"# {a.model}: first call in a fresh process, {os.environ.get('TINYSCHED_DEVICE', 'default device')}, {time.strftime('%Y-%m-%d %H:%M')}")
    for i in range(a.runs):
      r = subprocess.run([sys.executable, "-c", CHILD % {"root": root, "model": a.model}], env=env, capture_output=True, text=True, timeout=1800)
      if r.returncode != 0: raise SystemExit(f"run {i + 1} failed:\n{r.stderr[-2000:]}")
      d = json.loads(r.stdout.strip().splitlines()[-1])
      print(f"run {i + 1} ({'disk cache empty' if i == 0 else 'disk cache filled by run 1'}): first call {d['first_s'] * 1e3:.0f} ms, "
            f"{d['programs']} distinct programs")

if __name__ == "__main__":
  main()
