"""The perf gate's false-alarm rate and power, measured (issue 43): `replay gate --exec-all --perf-gate PCT` on the
committed baseline, N times on unchanged code and N times with one kernel planted 2x slower (the renderer emitting its
body twice: tests/replay/plants `renders_twice`), each beside a CPU-heavy process (a busy-loop per --burners), in
alternation so that the machine's state hits both alike.

  python bench/perf_gate.py                  # 10 + 10 runs, 1 burner, the default kernel
  python bench/perf_gate.py --runs 3 --out bench/results/perf-gate-$(date +%F).txt

Unchanged runs must PASS (a FAIL is a false alarm); planted runs must FAIL on the perf gate (anything else is a miss).
Beside each unchanged run the A/A rows' own numbers are printed: how often the plain rule (--perf-gate and twice the
job's noise, what the gate did before issue 43) fired on them, and the 99th percentile per duration class.
"""
from __future__ import annotations
import argparse, json, os, platform, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLANTED_KERNEL = "r_3_96_384_8_16"  # minilm's FFN matmul, ~1.6 ms on the 2-core CI machine (a long kernel)

def _gate(pct: float, plant: bool, report: Path) -> tuple[int, str]:
  env = {**os.environ, "TINYSCHED_PROGRAM_CACHE": "1"}
  if plant:
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT / "tests/replay/plants"), str(ROOT)]), TINYSCHED_TEST_PLANT="renders_twice",
               TINYSCHED_TEST_PLANT_KERNEL=PLANTED_KERNEL)
  # --accept: the planted change is an equivalent one (the same numbers), which the marker would let through: only the
  # perf gate can fail it
  r = subprocess.run([sys.executable, "-m", "replay.cli", "gate", "--exec-all", "--perf-gate", str(pct), "--no-prove", "--accept",
                      "--report-json", str(report)], cwd=ROOT, env=env, capture_output=True, text=True)
  last = next((ln for ln in reversed(r.stdout.splitlines()) if ln.startswith("replay gate:")), r.stdout[-300:] + r.stderr[-300:])
  return r.returncode, last

def _aa(report: Path, pct: float) -> str:
  from replay.check import perf  # (after the run: the report's rows)
  execs = [x.get("exec") for x in json.loads(report.read_text())["results"]]
  fired, n = perf.false_alarms(execs, pct)
  cal = perf.calibration(execs)
  whole = sum(c["whole_rule_fired"] for c in cal.values())
  return (f"A/A rows: plain rule fired on {fired}/{n}, the whole rule on {whole}; 99th pct "
          + ", ".join(f"{k.split(' ')[0]} {100 * c['q99_excess']:+.0f}% ({c['aa_rows']})" for k, c in cal.items()))

def _rev() -> str:
  run = lambda *a: subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()  # noqa: E731
  return run("rev-parse", "--short", "HEAD") + (" with uncommitted changes" if run("status", "--porcelain", "--untracked-files=no") else "")

def _cpu() -> str:
  try: return next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
  except (OSError, StopIteration): return platform.processor() or "unknown CPU"

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--runs", type=int, default=10)
  ap.add_argument("--pct", type=float, default=10.0)
  ap.add_argument("--burners", type=int, default=1)
  ap.add_argument("--out", type=Path, default=None)
  a = ap.parse_args()
  sys.path.insert(0, str(ROOT))
  lines = [f"# bench/perf_gate.py --runs {a.runs} --pct {a.pct:g} --burners {a.burners}",
           f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {_cpu()} ({platform.machine()}), {os.cpu_count()} cores, Python "
           f"{platform.python_version()}, git {_rev()}"]
  def say(s: str) -> None:
    print(s, flush=True)
    lines.append(s)
  for ln in lines: print(ln)
  burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.burners)]
  ok = {"unchanged": 0, "planted": 0}
  plain_cried = 0  # unchanged runs where the plain rule (the gate before issue 43) fired on an A/A row: a FAIL it would have given
  try:
    with tempfile.TemporaryDirectory() as tmp:
      for i in range(a.runs):
        for plant in (False, True):
          t0, rep = time.perf_counter(), Path(tmp) / f"r{i}{int(plant)}.json"
          code, last = _gate(a.pct, plant, rep)
          good = (code != 0 and "slower" in last) if plant else code == 0
          ok["planted" if plant else "unchanged"] += good
          extra = _aa(rep, a.pct) if rep.exists() else "no report"
          if not plant and rep.exists(): plain_cried += not extra.startswith("A/A rows: plain rule fired on 0/")
          say(f"run {i + 1:2d} {'planted  ' if plant else 'unchanged'} exit {code} {'ok  ' if good else 'BAD '} {time.perf_counter() - t0:5.1f}s "
              f"load {os.getloadavg()[0]:.1f}: {last} | {extra}")
  finally:
    for b in burners: b.kill()
  say(f"unchanged: {ok['unchanged']}/{a.runs} passed (the plain rule would have failed {plain_cried} of them); "
      f"planted 2x: {ok['planted']}/{a.runs} failed on the perf gate")
  if a.out: a.out.write_text("\n".join(lines) + "\n")

if __name__ == "__main__":
  main()
