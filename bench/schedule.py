"""Scheduling time and kernel counts per model: graph build and schedule() timed separately, median of runs.

  python bench/schedule.py                      # tinysched only
  python bench/schedule.py --baseline PYTHON    # also tinygrad 0.10.0 from another interpreter, side by side
  python bench/schedule.py --baseline PYTHON --rounds 5   # five fresh processes per library, alternating
  (make the baseline with: python -m venv /tmp/tgvenv && /tmp/tgvenv/bin/pip install tinygrad==0.10.0 numpy)

Each library runs in its own process with the same model code (bench/models.py); the parent prints the table.
With --rounds R the two libraries' processes alternate R times (ours, tinygrad, ours, ...), so a slow minute of a busy
machine falls on both; every column is the median over all rounds' samples, and the first call (one sample per process)
is the median over the R fresh processes. With a baseline and R > 1 a second table gives each ratio round by round
(our round's median over tinygrad's next process's): the box's speed drifts by up to 2x over minutes, and the two
processes of one round share its speed, so the median of the per-round ratios and their range say more than the
ratio of the two overall medians.
"""
from __future__ import annotations
import argparse, gc, json, os, platform, statistics, subprocess, sys, time
from pathlib import Path

HERE = Path(__file__).resolve().parent

def measure(lib: str, models: list[str], runs: int) -> dict:
  sys.path.insert(0, str(HERE.parent))  # for bench.models
  if lib == "tinygrad":
    os.environ.setdefault("GPU", "1")  # weights are made on PoCL; scheduling itself never touches the device
    from tinygrad import Tensor
    from tinygrad.nn.optim import Adam
  else:
    from tinysched import Tensor
    from tinysched.nn.optim import Adam
  from bench.models import MODELS
  out = {}
  for name in models:
    try: out[name] = _measure_one(Tensor, Adam, MODELS[name], runs)
    except Exception as e:  # a library that cannot schedule a model is a result too (tinygrad 0.10.0 crashes on some)
      out[name] = {"error": f"{type(e).__name__}: {str(e)[:80]}"}
  return out

def _measure_one(Tensor, Adam, model, runs: int) -> dict:
  setup, forward = model(Tensor, Adam)
  state = setup()
  builds, scheds, uncached, kernels = [], [], [], 0
  for i in range(2 * runs):
    if i >= runs: forget()  # the second half: every call as a new graph would be scheduled (no memo to serve it)
    t0 = time.perf_counter()
    outs = forward(state)
    t1 = time.perf_counter()
    sched = outs[0].schedule(*outs[1:])
    t2 = time.perf_counter()
    if i < runs: builds.append(t1 - t0); scheds.append(t2 - t1)
    else: uncached.append(t2 - t1)
    kernels = len([si for si in sched if si.ast.op.name == "SINK"])
    # drop this run's graph: the lazy cache would otherwise hand the next run the already-scheduled buffers
    del outs, sched
    gc.collect()
  return {"build_ms": [b * 1e3 for b in builds], "schedule_ms": [s * 1e3 for s in scheds], "first_ms": [scheds[0] * 1e3],
          "uncached_ms": [u * 1e3 for u in uncached], "kernels": kernels}

def merge(rounds: list[dict]) -> dict:
  """One library's rounds -> per model the median of every column over all rounds' samples (or the first error)."""
  out = {}
  for m in rounds[0]:
    if any("error" in r[m] for r in rounds):
      out[m] = next(r[m] for r in rounds if "error" in r[m])
      continue
    out[m] = {k: statistics.median([x for r in rounds for x in r[m][k]]) for k in ("build_ms", "schedule_ms", "first_ms", "uncached_ms")}
    out[m]["kernels"] = rounds[0][m]["kernels"]
  return out

def forget() -> None:
  """Drop tinysched's kernel/schedule memo (tinygrad 0.10.0 keeps none across schedule calls: nothing to drop)."""
  if (S := sys.modules.get("tinysched.schedule")) is not None: S._TENSOR_MEMO = S.KernelMemo()

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--models", default="mlp,cnn,gpt2,resnet18,mlp_adam")
  ap.add_argument("--runs", type=int, default=5)
  ap.add_argument("--rounds", type=int, default=1, help="fresh processes per library, alternating between the libraries")
  ap.add_argument("--baseline", help="python interpreter with tinygrad==0.10.0 installed")
  ap.add_argument("--worker", choices=["tinysched", "tinygrad"], help=argparse.SUPPRESS)
  a = ap.parse_args()
  models = a.models.split(",")
  if a.worker:
    print(json.dumps(measure(a.worker, models, a.runs)))
    return
  def run(py: str, lib: str) -> dict:
    env = {**os.environ, "TINYSCHED_DEVICE": os.environ.get("TINYSCHED_DEVICE", "NUMPY")}
    r = subprocess.run([py, __file__, "--worker", lib, "--models", a.models, "--runs", str(a.runs)], capture_output=True, text=True, env=env)
    if r.returncode != 0: sys.exit(f"{lib} worker failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])
  ours_r, base_r = [], []
  for i in range(a.rounds):
    print(f"round {i + 1}/{a.rounds}", file=sys.stderr, flush=True)
    ours_r.append(run(sys.executable, "tinysched"))
    if a.baseline: base_r.append(run(a.baseline, "tinygrad"))
  ours, base = merge(ours_r), (merge(base_r) if base_r else None)
  load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
  print(f"# scheduling time, median of {a.runs} runs x {a.rounds} rounds (first call: median of {a.rounds} fresh processes) — "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}, load {load:.2f} at the end\n")
  hdr = "| model | kernels | build ms | schedule ms | uncached ms | first schedule ms |"
  sep = "|---|---:|---:|---:|---:|---:|"
  if base:
    hdr += " tinygrad kernels | tinygrad build ms | tinygrad schedule ms | schedule ratio | uncached ratio | first-call ratio | total ratio |"
    sep += "---:|---:|---:|---:|---:|---:|---:|"
  print(hdr); print(sep)
  for m in models:
    o = ours[m]
    if "error" in o:
      print(f"| {m} | failed: {o['error']} |")
      continue
    row = f"| {m} | {o['kernels']} | {o['build_ms']:.1f} | {o['schedule_ms']:.1f} | {o['uncached_ms']:.1f} | {o['first_ms']:.1f} |"
    if base and "error" in base[m]: row += f" tinygrad failed: {base[m]['error']} |"
    elif base:
      b = base[m]
      row += (f" {b['kernels']} | {b['build_ms']:.1f} | {b['schedule_ms']:.1f} | {o['schedule_ms']/b['schedule_ms']:.2f}x |"
              f" {o['uncached_ms']/b['uncached_ms']:.2f}x | {o['first_ms']/b['first_ms']:.2f}x |"
              f" {(o['schedule_ms']+o['build_ms'])/(b['schedule_ms']+b['build_ms']):.2f}x |")
    print(row)
  if base and a.rounds > 1: _per_round(models, ours_r, base_r)

def _per_round(models: list[str], ours_r: list[dict], base_r: list[dict]) -> None:
  cols = (("schedule_ms", "schedule"), ("uncached_ms", "uncached"), ("first_ms", "first call"))
  print(f"\nper-round ratios, ours / tinygrad of the same round: median [min-max] over {len(ours_r)} rounds\n")
  print("| model | " + " | ".join(c for _, c in cols) + " |")
  print("|---|" + "---:|" * len(cols))
  for m in models:
    if any("error" in r[m] for r in ours_r + base_r): continue
    cells = []
    for k, _ in cols:
      rs = sorted(statistics.median(o[m][k]) / statistics.median(b[m][k]) for o, b in zip(ours_r, base_r))
      cells.append(f"{statistics.median(rs):.2f}x [{rs[0]:.2f}-{rs[-1]:.2f}]")
    print(f"| {m} | " + " | ".join(cells) + " |")

if __name__ == "__main__": main()
