"""Capture overhead: scheduling time with capture off vs on, side by side in one run, and the store size.

  python bench/capture.py [--models ...] [--runs 5] [--levels kernel,schedule]

Each round schedules the model's graph once with capture off and once on (alternating, so both see the
same machine state); medians are reported. "on" includes encoding and queueing every capture; the batched
SQLite writes happen in the flush at the end of each capture run, which is timed separately.
"""
from __future__ import annotations
import argparse, gc, os, platform, statistics, sys, tempfile, time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# bench/replay.py is named like the `replay` package: keep this folder off the import path, import bench.models
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--models", default="mlp,cnn,gpt2,resnet18,mlp_adam")
  ap.add_argument("--runs", type=int, default=5)
  ap.add_argument("--levels", default="kernel,schedule")
  a = ap.parse_args()
  from tinysched import Tensor
  from tinysched.nn.optim import Adam
  from replay.record import recorder
  from bench.models import MODELS
  levels = tuple(a.levels.split(","))
  tmp = tempfile.TemporaryDirectory()
  print(f"# capture overhead ({','.join(levels)}) — {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d')}\n")
  print("| model | kernels | schedule off ms | schedule on ms | overhead | flush ms | store size |")
  print("|---|---:|---:|---:|---:|---:|---:|")
  for name in a.models.split(","):
    setup, forward = MODELS[name](Tensor, Adam)
    state = setup()
    db = Path(tmp.name) / f"{name}.db"
    off, on, flush = [], [], []
    kernels = 0
    for i in range(a.runs + 1):
      for capture in (False, True):
        outs = forward(state)
        c = recorder.start(db, label=name, levels=levels) if capture else None
        t0 = time.perf_counter()
        sched = outs[0].schedule(*outs[1:])
        t1 = time.perf_counter()
        if c is not None:
          recorder.stop()
          flush.append(time.perf_counter() - t1)
        if i > 0: (on if capture else off).append(t1 - t0)  # round 0 warms caches for both
        kernels = len(sched)
        del outs, sched
        gc.collect()
    m_off, m_on = statistics.median(off), statistics.median(on)
    print(f"| {name} | {kernels} | {m_off*1e3:.1f} | {m_on*1e3:.1f} | {100*(m_on/m_off - 1):+.1f}% | {statistics.median(flush)*1e3:.1f} | "
          f"{db.stat().st_size/1e3:.0f} kB |")

if __name__ == "__main__": main()
