"""Timing old against new: each side on its own warm buffers, in interleaved rounds so that a machine-wide slowdown
hits both alike; `slower`/`faster` only beyond the noise the two old series show; FLOPs and bytes from the AST."""
from __future__ import annotations
import statistics
from typing import TYPE_CHECKING, Any
from tinysched.cost import kernel_cost
if TYPE_CHECKING: from replay.execute.launch import _Side

MIN_SLOWER_S = 20e-6  # a kernel is only "slower" if it also lost at least this much time
ALPHA = 0.05          # the rank test's one-sided level: slower (faster) needs p below it and an effect beyond the margin
MIN_RANKED_RUNS = 3   # fewer timing rounds than this: no rank test (a sweep's single run), the margin rule alone

def rank_p(low: list[float], high: list[float]) -> float:
  """One-sided Mann-Whitney U: the probability, were both samples from one distribution, that `high` would rank above
  `low` at least as much as it does (exact: the U statistic's distribution by counting arrangements; ties count half)."""
  m, n = len(high), len(low)
  if not m or not n: return 1.0
  u2 = sum(2 if h > l else 1 if h == l else 0 for h in high for l in low)  # 2U, an int
  # ways[k]: arrangements of m "high" among m+n ranks whose U is k (the standard recursion, row by row)
  ways = [[1] + [0] * (m * n) for _ in range(n + 1)]  # ways with 0 highs: U = 0
  for i in range(1, m + 1):
    new = [[0] * (m * n + 1) for _ in range(n + 1)]
    for j in range(n + 1):
      for k in range(m * n + 1):
        # the largest element is a high (it beats all j lows) or a low
        new[j][k] = (ways[j][k - j] if k - j >= 0 else 0) + (new[j - 1][k] if j else 0)
    ways = new
  total = sum(ways[n])
  at_least = sum(c for k, c in enumerate(ways[n]) if 2 * k >= u2)
  return at_least / total

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
  slower = bool(base and n > base * (1 + margin) + MIN_SLOWER_S)
  faster = bool(base and n * (1 + margin) + MIN_SLOWER_S < base)
  if runs >= MIN_RANKED_RUNS and (slower or faster) and not same_code:
    # the minima say slower (faster): only if the rounds also rank that way (the old rounds of both series pooled), and
    # again in as many rounds more, measured afresh (a confirmation: one burst of load on the machine makes no finding)
    old_r, new_r = [sum(x) for x in so] + [sum(x) for x in so2], [sum(x) for x in sn]
    out["rank_p"] = rank_p(old_r, new_r) if slower else rank_p(new_r, old_r)
    if out["rank_p"] >= ALPHA: slower = faster = False
    else:
      co, cn = [], []
      for _ in range(runs):
        co.append(sum(old.run(bo, timed=True))); cn.append(sum(new.run(bn, timed=True))); co.append(sum(old.run(bo, timed=True)))
      out["confirmed_with_runs"] = runs
      out["confirm_rank_p"] = p = rank_p(co, cn) if slower else rank_p(cn, co)
      mo, mn = statistics.median(co), statistics.median(cn)
      if slower: slower = p < ALPHA and mn > mo * (1 + margin) + MIN_SLOWER_S
      else: faster = p < ALPHA and mn * (1 + margin) + MIN_SLOWER_S < mo
  out["slower"], out["faster"] = slower and not same_code, faster and not same_code
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
