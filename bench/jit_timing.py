"""Per-call timing shared by the model benches (bench/gpt2_jit.py, bench/resnet18_jit.py): a function called unjitted
and through TinyJit on fresh inputs, each call synchronized, the jitted outputs checked against unjitted calls."""
from __future__ import annotations
import statistics, time
from typing import Any, Callable
import numpy as np

def timed(dev, f: Callable, make_input: Callable[[], Any], runs: int) -> tuple[list[float], list]:
  """Seconds per call of f on fresh inputs (synchronized before and after), and (input, output as numpy) per call."""
  ts, outs = [], []
  for _ in range(runs):
    x = make_input()
    dev.synchronize()
    t0 = time.perf_counter()
    out = f(x)
    dev.synchronize()
    ts.append(time.perf_counter() - t0)
    outs.append((x, out.numpy()))
  return ts, outs

def unjitted_vs_jit(dev, fwd: Callable, jit: Callable, make_input: Callable[[], Any], runs: int, title: str) -> list:
  """Print the first call, the unjitted and the jitted medians and the largest |jit - unjitted|; returns the jitted
  calls' (input, output) pairs."""
  t_first = timed(dev, fwd, make_input, 1)[0][0]
  timed(dev, fwd, make_input, 1)
  t_plain, _ = timed(dev, fwd, make_input, runs)
  timed(dev, jit, make_input, 3)  # warm-up, record, first replay
  t_jit, outs = timed(dev, jit, make_input, runs)
  err = max(float(np.abs(o - fwd(x).numpy()).max()) for x, o in outs[:3])
  print(f"# {title}, {time.strftime('%Y-%m-%d %H:%M')}")
  print(f"first call (schedule + compile): {t_first * 1e3:.0f} ms")
  print(f"unjitted: median {statistics.median(t_plain) * 1e3:.2f} ms, min {min(t_plain) * 1e3:.2f} ms")
  print(f"TinyJit:  median {statistics.median(t_jit) * 1e3:.2f} ms, min {min(t_jit) * 1e3:.2f} ms; max |jit - unjitted| = {err:.2e}")
  return outs
