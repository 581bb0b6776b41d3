"""Timing old against new: each side on its own warm buffers, in interleaved rounds so that a machine-wide slowdown
hits both alike; `slower`/`faster` only beyond the noise the two old series show. Throughput from what the new side's
lowered kernels execute (tinysched/cost.py), held to the device's measured peak (replay/execute/peak.py)."""
from __future__ import annotations
import math, statistics
from typing import TYPE_CHECKING, Any
from tinysched.cost import ProgramCost, throughput_cost
from tinysched.device import Device
from tinysched.ops import Ops
from tinysched.realize import kernel_vars
from tinysched.uop import sym_infer
from replay.store.encode import decode_graph
from replay.execute import peak
if TYPE_CHECKING: from replay.execute.launch import _Side

MIN_SLOWER_S = 20e-6  # a kernel is only "slower" if it also lost at least this much time
ALPHA = 0.05          # the rank test's one-sided level: slower (faster) needs p below it and an effect beyond the margin
MIN_RANKED_RUNS = 3   # fewer timing rounds than this: no rank test (a sweep's single run), the margin rule alone

EXACT_MAX = 400  # samples whose sizes multiply to more than this get the normal approximation (exact counting is cubic)

def rank_p(low: list[float], high: list[float]) -> float:
  """One-sided Mann-Whitney U: the probability, were both samples from one distribution, that `high` would rank above
  `low` at least as much as it does (exact: the U statistic's distribution by counting arrangements; ties count half;
  larger samples: the normal approximation with the tie correction and a continuity correction)."""
  m, n = len(high), len(low)
  if not m or not n: return 1.0
  if m * n > EXACT_MAX: return _rank_p_normal(low, high)
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

def _rank_p_normal(low: list[float], high: list[float]) -> float:
  m, n = len(high), len(low)
  pooled = sorted([(x, 1) for x in high] + [(x, 0) for x in low])
  rank_sum, ties, i = 0.0, 0.0, 0
  while i < len(pooled):  # average ranks over runs of equal values
    j = i
    while j < len(pooled) and pooled[j][0] == pooled[i][0]: j += 1
    avg = (i + j + 1) / 2
    rank_sum += avg * sum(h for _, h in pooled[i:j])
    ties += (j - i) ** 3 - (j - i)
    i = j
  u = rank_sum - m * (m + 1) / 2
  N = m + n
  var = m * n / 12 * ((N + 1) - ties / (N * (N - 1)))
  if var <= 0: return 1.0
  z = (u - m * n / 2 - 0.5) / math.sqrt(var)
  return 0.5 * math.erfc(z / math.sqrt(2))

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
  if runs >= MIN_RANKED_RUNS and (slower or faster):
    # the minima say slower (faster): only if the rounds also rank that way (the old rounds of both series pooled), and
    # again in as many rounds more, measured afresh (a confirmation: one burst of load on the machine makes no finding).
    # Same code on both sides goes through it too: what the whole rule says there is a false alarm, which the gate
    # counts and raises its bar by (replay/check/perf.py)
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
  if same_code and slower and runs >= MIN_RANKED_RUNS: out["aa_false_alarm"] = True  # (the whole rule ran: its false alarm)
  out["slower"], out["faster"] = slower and not same_code, faster and not same_code
  try: out.update(throughput(new, specs))
  except Exception as e: out["throughput_error"] = f"{type(e).__name__}: {e}"  # (the times stand without it)
  if n > 0 and "flops" in out: out.update(held_to_peak(out["flops"], out["bytes"], n, new.device, lambda: sum(new.run(bn, timed=True))))
  return out

RETIMES = 3  # a figure above the peak: times the kernel this many times more before it is refused

def held_to_peak(flops: int, bytes_: int, t: float, device: str, retime) -> dict[str, Any]:
  """GFLOP/s and GB/s of a launch that did `flops` and `bytes_` in `t` seconds, and its fraction of the device's measured
  peak (replay/execute/peak.py). A figure above the peak is a bug in the cost model or the timer, not a result: the
  peak is measured again (the cached one may come from a busy machine), the kernel timed again (`retime`: one misread
  event is no bug), and if the figures still exceed it they are refused: `throughput_refused` says why, and no figure
  is reported (the gate fails on it)."""
  figures = lambda t: {"gflops": flops / t / 1e9, "gbps": bytes_ / t / 1e9}  # noqa: E731
  out: dict[str, Any] = figures(t)
  if (pk := peak.peak(device)) is None: return out
  if pk.fraction(out["gflops"], out["gbps"]) > 1:
    pk = peak.peak(device, fresh=True)
    if pk is None: return out
    t = max(t, min(retime() for _ in range(RETIMES)))
    out = {**figures(t), "retimed_s": t}
    if pk.fraction(out["gflops"], out["gbps"]) > 1:
      return {"peak": pk.to_dict(), "throughput_refused":
              f"{out['gflops']:.2f} GFLOP/s, {out['gbps']:.2f} GB/s ({flops} FLOPs, {bytes_} bytes in {t * 1e6:.1f} us) is above the "
              f"peak measured on {device} ({pk.gflops:.1f} GFLOP/s, {pk.gbps:.1f} GB/s): the cost model (tinysched/cost.py) or the "
              "timer is wrong, not the kernel"}
  return {**out, "peak": pk.to_dict(), "peak_fraction": round(pk.fraction(out["gflops"], out["gbps"]), 6)}

def _at(x: Any, names: dict[str, int]) -> int:
  """A count of a kernel's executed cost at the job's Variables (named: the lowered kernel's own Variable nodes)."""
  if isinstance(x, dict): x = decode_graph(x["uop"].encode())[0]  # (a program row's cost, carried in its job)
  if isinstance(x, int): return x
  return int(sym_infer(x, {v: names[v.arg[0]] for v in x.toposort() if v.op is Ops.DEFINE_VAR}))

def throughput(new: _Side, specs) -> dict[str, Any]:
  """FLOPs and bytes the new side's launches did (tinysched/cost.py: executed FLOPs of the lowered kernels, bytes at
  most what their views reach and their loads touch), or nothing where they are not known: a backend without compiled
  programs (the interpreter), a stored source of unknown cost (a paired program row)."""
  if getattr(new, "device", None) is None: return {}
  sizes = {i: s for i, (s, _) in specs.items()}
  be = Device[new.device]
  flops = bytes_ = 0
  for it in new.items:
    if it[0] == "ast":
      _, ast, m = it
      if ast.op is not Ops.SINK: continue  # a copy: no FLOPs, and its time is not the device's
      if not hasattr(be, "program"): return {}
      cost = be.program(ast).cost
      sz, isz = {k: sizes[i] for k, i in enumerate(m)}, {k: specs[i][1].itemsize for k, i in enumerate(m)}
    else:
      if (c := getattr(new, "cost", None)) is None or (ast := getattr(new, "ast", None)) is None: return {}
      cost = {"flops": c["flops"], "accesses": c["accesses"]}
      sz, isz = sizes, {i: specs[i][1].itemsize for i in specs}
    if cost is None: return {}
    executed = ProgramCost(_at(cost["flops"] if isinstance(cost, dict) else cost.flops, new.names),
                           tuple(_at(a, new.names) for a in (cost["accesses"] if isinstance(cost, dict) else cost.accesses)))
    f, b = throughput_cost(ast, executed, sz, isz, {v: new.names[v.arg[0]] for v in kernel_vars(ast) if v.arg[0] in new.names})
    flops += f; bytes_ += b
  return {"flops": flops, "bytes": bytes_}
