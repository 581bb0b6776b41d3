"""Replay throughput on the committed captures (captures/*.db), as a user runs it: `replay check --level L -j N` in a
fresh process, the rows/s the command itself reports (from opening the stores to the last verdict; process start and
imports are not in it, the time to the first worker is), side by side with a baseline commit in the same run.

  python bench/replay_committed.py                              # this checkout, schedule level, -j2, 9 runs
  python bench/replay_committed.py --baseline 1f7566d --runs 9  # also that commit, from a temporary worktree, alternating
  python bench/replay_committed.py --level kernel --jobs 1

Runs alternate (this checkout, baseline, this checkout, ...) so a slow minute of the box falls on both; each tree's code
runs with its bytecode compiled first, as scripts/setup.sh does. This 2-core VM's speed drifts by up to 2x within
minutes: the median and the range of the runs are printed, with the load before and after.
"""
from __future__ import annotations
import argparse, glob, os, platform, re, statistics, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from trees import side_by_side  # noqa: E402
_LINE = re.compile(r"replayed (\d+) captures from \d+ store\(s\) in ([0-9.]+)s")

def one(tree: Path, level: str, jobs: int) -> tuple[int, float, int]:
  """(rows, seconds the command reports, exit code) of one fresh `replay check` of captures/ with that tree's code."""
  env = {**os.environ, "PYTHONPATH": str(tree)}
  dbs = sorted(glob.glob(str(tree / "captures" / "*.db")))
  r = subprocess.run([sys.executable, "-m", "replay.cli", "check", "--level", level, "-j", str(jobs), *dbs], cwd=tree, env=env,
                     capture_output=True, text=True)
  m = _LINE.search(r.stdout + r.stderr)
  if m is None: sys.exit(f"{tree}: no 'replayed N captures ... in Ss' line (exit {r.returncode}):\n{(r.stdout + r.stderr)[-2000:]}")
  return int(m.group(1)), float(m.group(2)), r.returncode

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--baseline", help="git revision to compare with (checked out in a temporary worktree)")
  ap.add_argument("--level", default="schedule", choices=["kernel", "schedule", "program"])
  ap.add_argument("--jobs", type=int, default=2)
  ap.add_argument("--runs", type=int, default=9)
  a = ap.parse_args()
  loads = [os.getloadavg()[0]]
  with side_by_side(ROOT, a.baseline) as trees:
    res: dict[str, dict] = {n: {"s": [], "rows": set(), "rc": set()} for n in trees}
    for t in trees.values(): one(t, a.level, a.jobs)  # warm-up (file caches)
    for _ in range(a.runs):
      for n, t in trees.items():
        rows, s, rc = one(t, a.level, a.jobs)
        res[n]["s"].append(s); res[n]["rows"].add(rows); res[n]["rc"].add(rc)
  loads.append(os.getloadavg()[0])
  print(f"# `replay check --level {a.level} -j {a.jobs}` on captures/ — {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M')}, load {loads[0]:.2f}->{loads[1]:.2f}\n")
  print("| code | rows | rows/s (median) | rows/s [min-max] | seconds (median) | exit codes |")
  print("|---|---:|---:|---|---:|---|")
  for n, r in res.items():
    rows = max(r["rows"])
    rates = sorted(rows / s for s in r["s"])
    print(f"| {n} | {rows} | {statistics.median(rates):.0f} | [{rates[0]:.0f}-{rates[-1]:.0f}] | {statistics.median(r['s']):.2f} | "
          f"{sorted(r['rc'])} |")

if __name__ == "__main__": main()
