"""Replay throughput on the committed captures (captures/*.db): what `replay check --level L -j N` runs, in a fresh
process, and the rows/s of the span the command reports (from opening the stores to the last verdict: replay.check.pool's
check(); process start and imports are not in it, the time to the first worker is), side by side with a baseline
commit in the same run. Each tree replays its own captures/ with its own code.

  python bench/replay_committed.py                              # this checkout, schedule level, -j2, 9 runs
  python bench/replay_committed.py --baseline 1f7566d --runs 9  # also that commit, from a temporary worktree, alternating
  python bench/replay_committed.py --baseline 68599fc           # the commit issue 21 was measured at: calibrates the box
  python bench/replay_committed.py --level kernel --jobs 1

The span is timed by a small driver around that tree's `check()` (the CLI's own "replayed N captures ... in Ss" line
reports the same span, but older commits do not print it), so any commit since check() took (paths, level, jobs) can
be the baseline. Runs alternate (this checkout, baseline, this checkout, ...) so a slow minute of the box falls on
both; each tree's code runs with its bytecode compiled first, as scripts/setup.sh does. This 2-core VM's speed drifts
by up to 2x within minutes and differs between VMs: the median and the range of the runs are printed, with the load
before and after, and a baseline commit measured in the same run is what makes numbers of two days comparable.
"""
from __future__ import annotations
import argparse, glob, os, platform, re, statistics, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from trees import side_by_side  # noqa: E402
_LINE = re.compile(r"^result (\d+) ([0-9.]+) (\d+) (.+)$", re.M)

# run in a fresh process with the tree's code first on sys.path: what `replay check --level L -j N DBS...` runs, timed as
# the CLI times it (check() stamps its own start and end: Report.elapsed), and the exit code the CLI would return
DRIVER = """
import sys
import tinysched
try: import replay.check.pool as M  # the replay step since replay/ has packages
except ImportError: import replay.check as M  # older trees: one flat module
level, jobs, dbs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rep = M.check(dbs, level=level, jobs=jobs)
print(f"result {len(rep.results)} {rep.elapsed:.6f} {rep.exit_code()} {M.__file__}|{tinysched.__file__}")
"""

def one(tree: Path, level: str, jobs: int) -> tuple[int, float, int]:
  """(rows, seconds check() took, the CLI's exit code) of one fresh replay of captures/ with that tree's code."""
  env = {**os.environ, "PYTHONPATH": str(tree)}
  dbs = sorted(glob.glob(str(tree / "captures" / "*.db")))
  if not dbs: sys.exit(f"{tree}: no captures/*.db to replay")  # (check([]) would report 0 rows in no time)
  r = subprocess.run([sys.executable, "-c", DRIVER, level, str(jobs), *dbs], cwd=tree, env=env, capture_output=True, text=True)
  m = _LINE.search(r.stdout)
  if m is None: sys.exit(f"{tree}: the replay driver printed no result (exit {r.returncode}):\n{(r.stdout + r.stderr)[-2000:]}")
  # the code that ran must be the tree's (an editable install elsewhere would answer an import the tree cannot)
  if not all(Path(f).resolve().is_relative_to(tree.resolve()) for f in m.group(4).split("|")):
    sys.exit(f"{tree}: the replay ran code from outside the tree ({m.group(4)})")
  return int(m.group(1)), float(m.group(2)), int(m.group(3))

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
