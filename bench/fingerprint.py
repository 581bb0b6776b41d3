"""The cost of the rules fingerprint (scheduling/kernel_ast.py `rules_fingerprint`), asked on every schedule, against the
one it replaced (issue 37 item 5: it now reads every module the memoized work runs, ~1,850 namespace values where it
read ~620), side by side in one process: the baseline is the fingerprint code of a commit read with `git show` and run
on this process's modules.

  python bench/fingerprint.py                       # baseline: 68cbc5e (the fingerprint before issue 37 item 5)
  python bench/fingerprint.py --baseline REV --models mlp,cnn --rounds 7

Measured, each arm alternating with the other in blocks (a busy box's speed drifts by up to 2x over minutes):
- per call, nothing changed (the common case: the answer kept), and after GlobalCounters moved (what every realize does;
  the new fingerprint reads helpers.py, the old one did not);
- a full read (the first call of a process, and the first after a patch);
- a warm schedule of small models (bench/models.py, the Tensor front end's memo warm: every kernel and the whole
  schedule served from it), the graph build not timed, with each fingerprint installed in turn.

Results, 2026-12-07 03:29 UTC, x86_64 AMD EPYC, 2 cores shared with other sessions (load 5-6.5 throughout: absolute
numbers are slow and noisy, compare within a row), Python 3.11.7, median of 7 rounds (raw: bench/results/fingerprint-2026-12-07.txt):

| measure                  | new       | baseline 68cbc5e | difference |
|--------------------------|----------:|-----------------:|-----------:|
| call (nothing changed)   | 32.1 us   | 16.4 us          | +15.7 us   |
| call after a realize     | 34.4 us   | 17.4 us          | +16.9 us   |
| full read                | 603 us    | 80 us            | +523 us    |
| mlp warm schedule        | 0.279 ms  | 0.262 ms         | +0.017 ms  |
| cnn warm schedule        | 0.437 ms  | 0.423 ms         | +0.013 ms  |
| program key (per lookup) | 48 us     | 0.04 us          | +48 us     |
| program cache hit        | 119 us    | 56 us            | +63 us     |

The fingerprint reads 1,868 namespace values where it read 625 (rules: 1,038 where 420): +~16 us a schedule, ~1% of an
mlp step's graph build and schedule (1.5 ms + 0.5 ms in bench/results/schedule-2026-12-02.txt), ~6% of a schedule served
whole from the memo. A full read (first schedule of a process, first after a patch) is ~0.6 ms. The program
cache's key is checked on every lookup (it was taken once: a patch after the first use was not seen), +~50 us a lookup,
which happens once per distinct kernel and process (the runtime keeps programs in memory).
"""
from __future__ import annotations
import argparse, ast, gc, itertools, operator, os, platform, statistics, subprocess, sys, time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASELINE = "68cbc5e"  # the last commit whose rules_fingerprint read the 15 namespaces of before issue 37 item 5
OLD_NAMES = ("_MODULES", "_rule_namespaces", "_namespaces_of", "_last_fingerprint", "_is_rule", "rules_fingerprint", "_same_rules")

def old_fingerprint(rev: str):
  """rev's rules_fingerprint (and the definitions it uses), run against this process's modules."""
  sys.path.insert(0, str(HERE.parent))
  from tinysched.scheduling import kernel_ast as KA, bigraph, stores, fusion, order
  from tinysched import rewrite as RW, shape as SH
  src = subprocess.run(["git", "-C", str(HERE.parent), "show", f"{rev}:tinysched/scheduling/kernel_ast.py"], capture_output=True, text=True,
                       check=True).stdout
  tree = ast.parse(src)
  keep = [n for n in tree.body if (isinstance(n, ast.FunctionDef) and n.name in OLD_NAMES) or
          (isinstance(n, (ast.Assign, ast.AnnAssign)) and any(isinstance(t, ast.Name) and t.id in OLD_NAMES
                                                               for t in (n.targets if isinstance(n, ast.Assign) else [n.target])))]
  ns = {"__name__": KA.__name__, "__builtins__": __builtins__, "itertools": itertools, "operator": operator, "sys": sys,
        "PatternMatcher": KA.PatternMatcher, "bigraph": bigraph, "stores": stores, "fusion": fusion, "order": order, "RW": RW, "SH": SH}
  exec(compile(ast.Module(body=keep, type_ignores=[]), f"{rev}:kernel_ast.py", "exec"), ns)
  return ns

def per_call_us(f, n: int) -> float:
  t = time.perf_counter()
  for _ in range(n): f()
  return (time.perf_counter() - t) / n * 1e6

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--baseline", default=BASELINE)
  ap.add_argument("--models", default="mlp,cnn")
  ap.add_argument("--rounds", type=int, default=7)
  ap.add_argument("--steps", type=int, default=20, help="warm schedules timed per round and arm")
  a = ap.parse_args()
  os.environ.setdefault("TINYSCHED_DEVICE", "NUMPY")
  old_ns = old_fingerprint(a.baseline)
  from tinysched import Tensor
  from tinysched.nn.optim import Adam
  from tinysched.helpers import GlobalCounters
  from tinysched.scheduling import kernel_ast as KA
  from bench.models import MODELS
  new_fp, old_fp = KA.rules_fingerprint, old_ns["rules_fingerprint"]
  new_fp(); old_fp()
  print(f"namespace values read: new {sum(map(len, KA._rule_namespaces()))}, baseline {sum(map(len, old_ns['_rule_namespaces']()))}; "
        f"rules in the fingerprint: new {len(new_fp())}, baseline {len(old_fp())}", file=sys.stderr)

  def bump() -> None: GlobalCounters.kernel_count += 1
  def new_full() -> None: KA._READS.clear(); new_fp()
  def old_full() -> None: old_ns["_last_fingerprint"][:] = [(), (), (), ()]; old_fp()
  rows: dict[str, dict[str, list[float]]] = {k: {"new": [], "old": []} for k in ("call", "call after a realize", "full read")}
  for r in range(a.rounds):
    for arm, fp, full in (("new", new_fp, new_full), ("old", old_fp, old_full)):
      fp(); fp()
      rows["call"][arm].append(statistics.median(per_call_us(fp, 2000) for _ in range(5)))
      rows["call after a realize"][arm].append(statistics.median(per_call_us(lambda: (bump(), fp()), 2000) for _ in range(5)))
      rows["full read"][arm].append(statistics.median(per_call_us(full, 20) for _ in range(3)))
  new_fp()

  # warm schedules: the model's step built anew each time (not timed), its schedule timed, with each fingerprint in turn
  for name in a.models.split(","):
    setup, forward = MODELS[name](Tensor, Adam)
    state = setup()
    rows[f"{name} warm schedule (ms)"] = {"new": [], "old": []}
    for r in range(a.rounds):
      for arm, fp in (("new", new_fp), ("old", old_fp)):
        KA.rules_fingerprint = fp  # (KernelMemo.kept reads the module's name at each call)
        times = []
        for i in range(a.steps + 3):
          outs = forward(state)
          t0 = time.perf_counter()
          outs[0].schedule(*outs[1:])
          if i >= 3: times.append((time.perf_counter() - t0) * 1e3)  # (a switch of fingerprint drops the memo: 3 steps to warm it)
          del outs
          gc.collect()
        rows[f"{name} warm schedule (ms)"][arm].append(statistics.median(times))
    KA.rules_fingerprint = new_fp

  # the program cache's key (codegen/program_cache.py code_fingerprint): checked on every lookup now, taken once before.
  # A hit of cached_program (the entry read from disk) with each, on a small kernel
  import functools, tempfile
  import tinysched.codegen.program_cache as PC
  from tinysched.codegen.target import GENERIC_GPU
  from tinysched.ops import Ops
  os.environ["TINYSCHED_CACHE"], os.environ["TINYSCHED_PROGRAM_CACHE"] = tempfile.mkdtemp(), "1"
  kernel = next(si.ast for si in (Tensor.empty(96) * 5 + 1).schedule() if si.ast.op is Ops.SINK)
  PC.cached_program(kernel, None, GENERIC_GPU)
  checked, once = PC.code_fingerprint, functools.lru_cache(maxsize=1)(PC.code_fingerprint)
  rows["program key"] = {"new": [], "old": []}
  rows["program cache hit"] = {"new": [], "old": []}
  for r in range(a.rounds):
    for arm, key in (("new", checked), ("old", once)):
      PC.code_fingerprint = key  # (PC's own names are not checked: program_cache._NOT_CHECKED)
      rows["program key"][arm].append(statistics.median(per_call_us(key, 500) for _ in range(5)))
      rows["program cache hit"][arm].append(statistics.median(per_call_us(lambda: PC.cached_program(kernel, None, GENERIC_GPU), 200)
                                                              for _ in range(5)))
  PC.code_fingerprint = checked

  load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
  print(f"# rules_fingerprint, new (working tree) vs baseline {a.baseline}, median over {a.rounds} rounds (arms alternating) — "
        f"{platform.machine()} {platform.processor() or ''}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}, load {load:.2f} at the end\n")
  print("| measure | new | baseline | new - baseline | ratio | per-round ratio min-max |")
  print("|---|---:|---:|---:|---:|---:|")
  for k, v in rows.items():
    n, o = statistics.median(v["new"]), statistics.median(v["old"])
    rs = sorted(x / y for x, y in zip(v["new"], v["old"]))
    unit = "" if "ms" in k else " us"
    print(f"| {k} | {n:.3f}{unit} | {o:.3f}{unit} | {n - o:+.3f}{unit} | {n / o:.2f}x | {rs[0]:.2f}-{rs[-1]:.2f} |")

if __name__ == "__main__": main()
