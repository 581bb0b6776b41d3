"""The main job (`scripts/replay.sh`: replay captures/ and --exec-all on the default device), timed warm and cold,
each tree's own scripts/replay.sh command (its `replay check ...` line and exports) run with its own code,
side by side with a baseline commit in the same run.

  python bench/main_job.py                     # this checkout only
  python bench/main_job.py --baseline d34d273  # also that commit, from a temporary worktree, interleaved

Warm: OpenCL binaries in the disk caches (tinysched's and PoCL's), the venv set up; median of --runs. Cold: both disk
caches empty (a fresh machine's first run after set-up). The load average before and after each run is printed:
numbers taken at a load above ~1.5 on this 2-core machine are not comparable.

CPU seconds (user + system of the job and of every descendant that was waited for: replay and exec workers, compile
processes, the linker PoCL runs; getrusage(RUSAGE_CHILDREN), so a process nobody waits for would not count) are printed
beside the times. Cold minus warm CPU is the work only a cold run does (rendering
and compiling every distinct kernel, PoCL's work-group functions); divided by the cores it is a floor under the cold
run's extra wall time (most of it PoCL's compiler: README, issue 21's bars).
"""
from __future__ import annotations
import argparse, os, platform, resource, statistics, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from trees import side_by_side  # noqa: E402

def _script_args(tree: Path) -> list[str]:
  """The `replay ...` arguments of that tree's scripts/replay.sh (its last line: `exec replay check ... "$@"`)."""
  line = next(l for l in reversed((tree / "scripts/replay.sh").read_text().splitlines()) if l.startswith("exec replay "))
  return [a for a in line.split()[2:] if a != '"$@"']

def _script_env(tree: Path) -> dict[str, str]:
  """The `export NAME=value` lines of that tree's scripts/replay.sh."""
  out = {}
  for l in (tree / "scripts/replay.sh").read_text().splitlines():
    if l.startswith("export ") and "=" in l and "$" not in l:
      k, v = l[len("export "):].split("=", 1)
      out[k] = v
  return out

def _children_cpu() -> float:
  r = resource.getrusage(resource.RUSAGE_CHILDREN)
  return r.ru_utime + r.ru_stime

def one(tree: Path, cold: bool) -> tuple[float, str, int, float]:
  env = dict(os.environ)
  tmp = None
  if cold:
    tmp = tempfile.TemporaryDirectory()
    env.update(TINYSCHED_CACHE=f"{tmp.name}/ts", POCL_CACHE_DIR=f"{tmp.name}/pocl")
  load = os.getloadavg()[0]
  cpu0 = _children_cpu()
  t0 = time.perf_counter()
  # what scripts/replay.sh runs after its set-up, with that tree's code (set-up itself would re-point the venv's
  # editable install at the baseline's worktree; it is timed once, for this checkout, in main())
  env["PYTHONPATH"] = str(tree)
  env.update(_script_env(tree))
  r = subprocess.run([sys.executable, "-m", "replay.cli", *_script_args(tree)], cwd=tree, env=env, capture_output=True, text=True)
  dt = time.perf_counter() - t0
  cpu = _children_cpu() - cpu0
  if tmp: tmp.cleanup()
  return dt, f"{load:.2f}->{os.getloadavg()[0]:.2f}", r.returncode, cpu

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--baseline", help="git revision to compare with (checked out in a temporary worktree)")
  ap.add_argument("--runs", type=int, default=3)
  ap.add_argument("--no-cold", action="store_true")
  a = ap.parse_args()
  with side_by_side(ROOT, a.baseline) as trees:
    res: dict[str, dict] = {n: {"warm": [], "cpu": [], "loads": [], "rc": set()} for n in trees}
    for t in trees.values(): one(t, False)  # warm-up: set-up done, caches filled
    for _ in range(a.runs):
      for n, t in trees.items():  # interleaved: a slowdown of the machine hits both alike
        dt, load, rc, cpu = one(t, False)
        res[n]["warm"].append(dt); res[n]["cpu"].append(cpu); res[n]["loads"].append(load); res[n]["rc"].add(rc)
    if not a.no_cold:
      for n, t in trees.items():
        dt, load, rc, cpu = one(t, True)
        res[n]["cold"], res[n]["cold_load"], res[n]["cold_cpu"] = dt, load, cpu
        res[n]["rc"].add(rc)
  t0 = time.perf_counter()
  subprocess.run(["bash", "scripts/setup.sh"], cwd=ROOT, capture_output=True, env={**os.environ, "SETUP_BROWSER": "0"})
  setup_s = time.perf_counter() - t0
  print(f"# main job (scripts/replay.sh = set-up + {' '.join(['replay'] + _script_args(ROOT))}) — {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M')}\n")
  cores = os.cpu_count() or 1
  print("| code | warm s (median) | warm runs | warm CPU s | load (1-min avg, before->after) | cold s | cold CPU s | cold-only CPU s / cores "
        "| exit codes |")
  print("|---|---:|---|---:|---|---:|---:|---:|---|")
  nan = float("nan")
  for n, r in res.items():
    warm_cpu = statistics.median(r["cpu"])
    extra = r.get("cold_cpu", nan) - warm_cpu
    print(f"| {n} | {statistics.median(r['warm']):.1f} | {', '.join(f'{x:.1f}' for x in r['warm'])} | {warm_cpu:.1f} | {'; '.join(r['loads'])} | "
          f"{r.get('cold', nan):.1f} ({r.get('cold_load', '-')}) | {r.get('cold_cpu', nan):.1f} | {extra:.1f} / {cores} = {extra / cores:.1f} | "
          f"{sorted(r['rc'])} |")
  print(f"\nset-up (scripts/setup.sh, everything installed): {setup_s:.2f} s, on top of the times above")

if __name__ == "__main__": main()
