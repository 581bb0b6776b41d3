"""TinyJit's per-launch overhead: a function of N tiny kernels, per call, jitted (replay) vs unjitted, on one device.

  python bench/jit.py [--device OPENCL] [--kernels 1,8,32,128] [--calls 30] [--size 16] [--gpt2-steps 12]

The function is a chain of N elementwise kernels on a `size`-element float32 vector (`x = (x + 1).contiguous()`, so
each step is its own kernel: the kernel work is nothing, what is measured is the launch path). Each call is timed from
the call to the end of the device queue (`synchronize()`), median over `calls` calls after a warm-up; the jitted and
the unjitted calls alternate, so both see the same machine state. Per-launch cost is the slope of a least-squares line
through the per-call times over N, the per-call cost its intercept. "raw enqueue" is the floor under the jit on OpenCL:
the same N programs enqueued straight through pyopencl (set_args + enqueue_nd_range_kernel), no tinysched code.

A real workload after it: GPT-2 (the suite's tiny config: 2 layers, 64 wide, vocabulary 50257) decoding one token per
step with its KV cache at start_pos = Variable.bind(position), unjitted (`forward` + realize) and jitted (`TinyJit(
forward)` on a (1, 1) token Tensor), each step timed to the token read back, median over the steps after the jit's two.
"""
from __future__ import annotations
import argparse, os, platform, statistics, sys, time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# bench/replay.py is named like the `replay` package: keep this folder off the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))

def fit(ns: list[int], ts: list[float]) -> tuple[float, float]:
  """(slope, intercept) of the least-squares line through (ns, ts)."""
  mn, mt = statistics.fmean(ns), statistics.fmean(ts)
  slope = sum((n - mn) * (t - mt) for n, t in zip(ns, ts)) / sum((n - mn) ** 2 for n in ns)
  return slope, mt - slope * mn

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--device", default="OPENCL")
  ap.add_argument("--kernels", default="1,8,32,128")
  ap.add_argument("--calls", type=int, default=60)
  ap.add_argument("--size", type=int, default=16)
  ap.add_argument("--gpt2-steps", type=int, default=12, help="decode steps of the GPT-2 part (0: skip it)")
  ap.add_argument("--out", help="also write the report to this file")
  a = ap.parse_args()
  import numpy as np
  from tinysched import Tensor, TinyJit, Device
  dev = Device.canonicalize(a.device)
  backend = Device[dev]
  def chain(n: int):
    def f(x: Tensor) -> Tensor:
      for _ in range(n): x = (x + 1).contiguous()
      return x
    return f
  load0 = os.getloadavg()[0]
  rows = []
  for n in [int(k) for k in a.kernels.split(",")]:
    f = chain(n)
    jf = TinyJit(f)
    xs = [Tensor(np.full(a.size, i, np.float32), device=dev) for i in range(a.calls + 2)]
    for x in xs[:2]: jf(x)  # warm-up and record
    assert jf.recording is not None and len(jf.recording.launches) == n, f"expected {n} launches, recorded {len(jf.recording.launches)}"
    f(xs[0]).realize()      # compile everything the unjitted path needs
    backend.synchronize()
    raw = raw_enqueue(jf, backend, xs[0].lazydata.base.realized) if dev.startswith("OPENCL") else None
    tj, tu, tr = [], [], []
    for i, x in enumerate(xs[2:]):  # the three alternate, call by call
      t0 = time.perf_counter(); out = jf(x); backend.synchronize(); tj.append(time.perf_counter() - t0)
      assert out.numpy()[0] == i + 2 + n
      t0 = time.perf_counter(); f(x).realize(); backend.synchronize(); tu.append(time.perf_counter() - t0)
      if raw is not None: tr.append(raw())
    rows.append((n, statistics.median(tj), statistics.median(tu), statistics.median(tr) if tr else None))
  load1 = os.getloadavg()[0]
  ns = [r[0] for r in rows]
  sj, ij = fit(ns, [r[1] for r in rows])
  su, iu = fit(ns, [r[2] for r in rows])
  lines = [f"# TinyJit launch overhead on {dev} ({getattr(getattr(backend, 'target', None), 'name', dev)}) — {platform.machine()}, "
           f"{os.cpu_count()} cores, Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M')}, "
           f"load (1-min avg) {load0:.2f} -> {load1:.2f}",
           f"# python bench/jit.py --device {a.device} --kernels {a.kernels} --calls {a.calls} --size {a.size} --gpt2-steps {a.gpt2_steps}", "",
           "| kernels | jitted ms/call | unjitted ms/call | speed-up | jitted us/kernel | unjitted us/kernel | raw enqueue us/kernel |",
           "|---:|---:|---:|---:|---:|---:|---:|"]
  for n, tj_, tu_, raw in rows:
    lines.append(f"| {n} | {tj_*1e3:.3f} | {tu_*1e3:.3f} | {tu_/tj_:.1f}x | {tj_/n*1e6:.1f} | {tu_/n*1e6:.1f} | "
                 f"{'' if raw is None else f'{raw/n*1e6:.1f}'} |")
  lines += ["", f"fit over N: jitted {sj*1e6:.1f} us per launch + {ij*1e6:.1f} us per call; "
                f"unjitted {su*1e6:.1f} us per kernel + {iu*1e6:.1f} us per call"]
  if a.gpt2_steps: lines += ["", *gpt2_decode(dev, a.gpt2_steps)]
  text = "\n".join(lines)
  print(text)
  if a.out: Path(a.out).write_text(text + "\n")

def gpt2_decode(dev: str, steps: int) -> list[str]:
  import numpy as np
  import tinysched.models.gpt2 as G
  from tinysched import Tensor, TinyJit, Device
  Device.DEFAULT = dev
  c, prompt = G.GPT2_TINY, [5, 17, 300, 42]
  sd = G.random_gpt2_weights(c)
  times: dict[str, list[float]] = {}
  ids: dict[str, list[int]] = {}
  launches = 0
  for mode in ("unjitted", "jitted"):
    m = G.GPT2(c, sd)
    logits, tok = m.forward(prompt, 0)
    G.realize(logits, tok)
    ids[mode] = [int(tok.numpy()[0])]
    step = TinyJit(m.forward) if mode == "jitted" else None
    ts = []
    for i in range(steps):
      sp = m.start_pos_var.bind(len(prompt) + i)
      t0 = time.perf_counter()
      if step is None:
        logits, tok = m.forward([ids[mode][-1]], sp)
        G.realize(logits, tok)
      else: logits, tok = step(Tensor(np.array([[ids[mode][-1]]], np.int32)), sp)
      ids[mode].append(int(tok.numpy()[0]))
      ts.append(time.perf_counter() - t0)
    times[mode] = ts[2:]
    if step is not None and step.recording is not None: launches = len(step.recording.launches)
  assert ids["jitted"] == ids["unjitted"], "jitted decoding chose other tokens"
  uj, jj = statistics.median(times["unjitted"]), statistics.median(times["jitted"])
  return [f"GPT-2 tiny decode step ({launches} launches, {steps - 2} steps timed, same tokens): unjitted {uj*1e3:.2f} ms, "
          f"jitted {jj*1e3:.2f} ms ({uj/jj:.1f}x)"]

def raw_enqueue(jf, backend, inp):
  """A function that enqueues the recorded programs straight through pyopencl, finishes the queue, returns seconds."""
  import pyopencl as cl
  d = backend.dev
  ks = []
  for ln in jf.recording.launches:
    prg = d.program(ln.ast, None)
    k = d.kernel(prg.name, prg.src)
    ks.append((k, [d.mem(b) for b in ln.buffers([inp])], prg.launch_dims({})))
  def once() -> float:
    t0 = time.perf_counter()
    for k, args, (gs, ls) in ks:
      k.set_args(*args)
      cl.enqueue_nd_range_kernel(d.queue, k, gs, ls)
    d.queue.finish()
    return time.perf_counter() - t0
  return once

if __name__ == "__main__": main()
