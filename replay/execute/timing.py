"""Timing old against new: each side on its own warm buffers, in interleaved rounds so that a machine-wide slowdown
hits both alike; `slower`/`faster` only beyond the noise the two old series show; FLOPs and bytes from the AST."""
from __future__ import annotations
from typing import TYPE_CHECKING, Any
from tinysched.cost import kernel_cost
if TYPE_CHECKING: from replay.execute.launch import _Side

MIN_SLOWER_S = 20e-6  # a kernel is only "slower" if it also lost at least this much time

def _timing(old: _Side, new: _Side, bo: dict[int, Any], bn: dict[int, Any], specs, runs: int, threshold: float,
            same_code: bool = False) -> dict:
  """Each side timed on its own buffers, which have been run once already (compiled, caches warm). `same_code`: both
  sides run the same kernels, so neither can be slower or faster (an A/A sample: replay/check/perf.py)."""
  so, sn, so2 = [], [], []
  for _ in range(runs):  # interleaved: a machine-wide slowdown hits both sides alike
    so.append(old.run(bo, timed=True)); sn.append(new.run(bn, timed=True)); so2.append(old.run(bo, timed=True))
  t_old = [min(x) for x in zip(*so)] if so and so[0] else []
  t_old2 = [min(x) for x in zip(*so2)] if so2 and so2[0] else []
  t_new = [min(x) for x in zip(*sn)] if sn and sn[0] else []
  o, o2, n = sum(t_old), sum(t_old2), sum(t_new)
  noise = abs(o - o2) / max(min(o, o2), 1e-12) if o and o2 else 0.0
  margin = max(threshold, 2 * noise)
  out: dict[str, Any] = {"old_time_s": min(o, o2) if o2 else o, "new_time_s": n, "noise": noise, "timing_runs": runs,
                         "old_kernel_times_s": t_old, "new_kernel_times_s": t_new}
  base = out["old_time_s"]
  out["slower"] = bool(base and n > base * (1 + margin) + MIN_SLOWER_S) and not same_code
  out["faster"] = bool(base and n * (1 + margin) + MIN_SLOWER_S < base) and not same_code
  sizes = {i: s for i, (s, _) in specs.items()}
  flops = bytes_ = 0
  for it in new.items:
    if it[0] != "ast": continue
    _, ast, m = it
    f, b = kernel_cost(ast, {k: sizes[i] for k, i in enumerate(m)}, {k: specs[i][1].itemsize for k, i in enumerate(m)})
    flops += f; bytes_ += b
  if not any(it[0] == "ast" for it in new.items) and getattr(new, "ast", None) is not None:
    flops, bytes_ = kernel_cost(new.ast, sizes, {i: specs[i][1].itemsize for i in specs})
  out.update(flops=flops, bytes=bytes_)
  if n > 0: out.update(gflops=flops / n / 1e9, gbps=bytes_ / n / 1e9)
  return out
