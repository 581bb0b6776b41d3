"""Replay throughput: kernel-level captures replayed per second, on a realistic capture set.

  python bench/replay.py [--models mlp,cnn,gpt2,resnet18,mlp_adam] [--db PATH]

The capture set is the scheduling benchmark's models (bench/models.py) captured at kernel and schedule
level (GPT-2 small alone gives ~190 distinct kernels). Every row is replayed (no early stop); duplicates
of the same input inside one store are replayed once, as `replay check` does. Times are wall clock for the
whole `check` call, including opening the store and forking the workers.
"""
from __future__ import annotations
import argparse, os, platform, sys, tempfile, time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# this file is named like the `replay` package: keep its folder off the import path, import bench.models
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))

def _models():
  from bench.models import MODELS
  return MODELS

# several sizes per model, as users run them: distinct shapes make distinct kernels
SIZES = {"mlp": [{"batch": b} for b in (1, 16, 64, 128)], "cnn": [{"batch": b} for b in (1, 8)],
         "gpt2": [{"seq": n, "layers": 2} for n in (16, 32, 64, 128)], "resnet18": [{"size": n} for n in (64, 224)],
         "mlp_adam": [{"batch": b} for b in (16, 64)]}

def make_captures(db: Path, models: list[str], repeats: int) -> None:
  import gc
  import replay
  from tinysched import Tensor
  from tinysched.nn.optim import Adam
  MODELS = _models()
  for name in models:
    for kw in SIZES.get(name, [{}]):
      setup, forward = MODELS[name](Tensor, Adam, **kw)
      state = setup()
      for _ in range(repeats):  # every repeat is its own capture run, like captures from several CI jobs
        with replay.capture(db, label=name, levels=("kernel", "schedule")):
          outs = forward(state)
          outs[0].schedule(*outs[1:])
          del outs
          gc.collect()

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--models", default="mlp,cnn,gpt2,resnet18,mlp_adam")
  ap.add_argument("--db", help="reuse or create this capture store (default: a temporary file)")
  ap.add_argument("--repeats", type=int, default=2, help="capture each model this many times (separate runs add rows)")
  a = ap.parse_args()
  from replay import check
  from replay.store.sqlite import Store
  tmp = tempfile.TemporaryDirectory()
  db = Path(a.db) if a.db else Path(tmp.name) / "bench.db"
  if not db.exists(): make_captures(db, a.models.split(","), a.repeats)
  s = Store(db, readonly=True)
  n_kernel = s.conn.execute("SELECT count(*) FROM captures WHERE level='kernel'").fetchone()[0]
  n_distinct = s.conn.execute("SELECT count(DISTINCT input_key) FROM captures WHERE level='kernel'").fetchone()[0]
  n_sched = s.conn.execute("SELECT count(*) FROM captures WHERE level='schedule'").fetchone()[0]
  s.close()
  print(f"# replay throughput — {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}")
  print(f"capture set: {n_kernel} kernel-level rows ({n_distinct} distinct inputs), {n_sched} schedule-level rows, "
        f"{db.stat().st_size/1e6:.2f} MB\n")
  print("| level | jobs | rows | seconds | rows/s | outcome |")
  print("|---|---:|---:|---:|---:|---|")
  for level in ("kernel", "schedule"):
    for jobs in (1, 2):
      t0 = time.perf_counter()
      rep = check.run(check.Selection((str(db),), level=level), check.Options(jobs=jobs))
      dt = time.perf_counter() - t0
      c = rep.counts()
      print(f"| {level} | {jobs} | {len(rep.results)} | {dt:.2f} | {len(rep.results)/dt:.0f} | "
            + ", ".join(f"{k} {v}" for k, v in c.items() if v) + " |")

if __name__ == "__main__": main()
