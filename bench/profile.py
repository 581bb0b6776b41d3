"""Where a jitted forward call's device time goes, kernel by kernel: GPT-2 small (1 x 64, full logits) or ResNet-18
(1 x 3 x 224 x 224), recorded with TinyJit and replayed once with each launch's profiling event read.

  TINYSCHED_DEVICE=OPENCL python bench/profile.py --model gpt2|resnet18 [--top 25] [--dtype float16]

Prints one line per distinct kernel (name, opts, launch dims), slowest total first: launches, total and per-launch
microseconds, GFLOP/s and GB/s by tinysched/cost.py's model (bytes: every bound buffer once), then the sum of kernel
times beside the call's wall time, which is the launch overhead the kernels do not cover.
"""
from __future__ import annotations
import argparse, os, statistics, sys, time
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np

def _gpt2(dtype: str):
  from tinysched import Tensor, dtypes
  from tinysched.models.gpt2 import GPT2, GPT2Config, random_gpt2_weights
  c = GPT2Config()
  model = GPT2(c, random_gpt2_weights(c, seed=0), **({"dtype": dtypes.float16} if dtype == "float16" else {}))
  def fwd(tok: Tensor) -> Tensor:
    model.cache = []
    return model._head(model._hidden(tok, 0)).realize()
  rng = np.random.default_rng(7)
  return fwd, lambda: Tensor(rng.integers(0, c.vocab_size, (1, 64)).astype(np.int32), dtype=dtypes.int32).realize()

def _resnet18():
  from tinysched import Tensor
  from tinysched.nn.optim import Adam
  from bench.models import resnet18
  Tensor.manual_seed(0)
  setup, forward = resnet18(Tensor, Adam)
  s = setup()
  rng = np.random.default_rng(7)
  return (lambda x: forward({**s, "x": x})[0].realize()), lambda: Tensor(rng.random((1, 3, 224, 224), dtype=np.float32)).realize()

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--model", choices=("gpt2", "resnet18"), default="gpt2")
  ap.add_argument("--top", type=int, default=25)
  ap.add_argument("--dtype", choices=("float32", "float16"), default="float32", help="GPT-2's weights and activations")
  a = ap.parse_args()
  from tinysched import TinyJit, Device
  from tinysched.cost import buffers_cost
  fwd, make = _gpt2(a.dtype) if a.model == "gpt2" else _resnet18()
  dev = Device[Device.DEFAULT]
  jit = TinyJit(fwd)
  for _ in range(3): jit(make())
  dev.synchronize()
  rows: list[tuple] = []
  walls, hosts = [], []
  for _ in range(5):
    x = make()
    dev.synchronize()
    t0 = time.perf_counter()
    jit(x)
    t1 = time.perf_counter()
    dev.synchronize()
    walls.append(time.perf_counter() - t0); hosts.append(t1 - t0)
  wall_plain, host = statistics.median(walls), statistics.median(hosts)
  # the recorded launches once more, each as the replay runs it (prepared where it is), its profiling event kept
  assert jit.recording is not None
  inputs = [make().lazydata.base.realized]
  for ln in jit.recording.launches:
    bufs = ln.buffers(inputs)
    t = ln.prepared(bufs, {}) if ln.prepared is not None else ln.backend.exec_ast(ln.ast, list(bufs), {})
    if t is not None and hasattr(ln.backend, "dev"):
      prg = ln.backend.dev.program(ln.ast, None)
      gs, ls = prg.launch_dims({})
      rows.append((prg.name, prg.opts, gs, ls, *(ln.cost or buffers_cost(ln.ast, bufs, {})), t))
  dev.synchronize()
  by: dict[tuple, list] = {}
  for name, opts, gs, ls, fl, by_, t in rows:
    k = (name, tuple(str(o) for o in opts), gs, ls)
    e = by.setdefault(k, [0, 0.0, 0, 0])
    e[0] += 1; e[1] += t(); e[2] += fl; e[3] += by_
  total = sum(e[1] for e in by.values())
  what = f"{a.model} {a.dtype}" if a.model == "gpt2" else a.model
  print(f"# {what} jitted call on {Device.DEFAULT}, {time.strftime('%Y-%m-%d %H:%M')}: {len(rows)} launches, {len(by)} distinct kernels")
  print(f"{'us total':>9} {'n':>3} {'us each':>8} {'GFLOP/s':>8} {'GB/s':>7}  kernel  global/local  opts")
  for (name, opts, gs, ls), (n, t, fl, b) in sorted(by.items(), key=lambda kv: -kv[1][1])[:a.top]:
    print(f"{t * 1e6:9.1f} {n:3d} {t / n * 1e6:8.1f} {fl / t / 1e9:8.0f} {b / t / 1e9:7.0f}  {name}  {gs}/{ls}  {' '.join(opts)}")
  print(f"sum of kernel times {total * 1e3:.2f} ms; a replayed call (median of 5): wall {wall_plain * 1e3:.2f} ms, of which the "
        f"host took {host * 1e3:.2f} ms to enqueue it ({host / len(rows) * 1e6:.1f} us per launch); not hidden by the kernels: "
        f"{(wall_plain - total) * 1e3:.2f} ms")

if __name__ == "__main__":
  main()
