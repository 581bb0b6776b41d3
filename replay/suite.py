"""`replay suite`: run the real-model suite (tinysched.models.suite) with capture on.

Every model runs in its own fresh process, so its captures do not depend on what ran before it (lazy
caches, buffer numbers) and the same suite captured twice gives the same keys.
"""
from __future__ import annotations
import json, os, subprocess, sys, time
from pathlib import Path
from replay.store import LEVELS

def suite_models() -> list[str]:
  from tinysched.models.suite import SUITE
  return list(SUITE)

def run_model(name: str, db: Path, quick: bool, levels: tuple[str, ...] = LEVELS, cwd: str | None = None,
              python: str = sys.executable, timeout: float | None = None) -> dict:
  """Capture one model into `db` in a subprocess; returns {"model", "ok", "seconds", "summary"|"error"|"skipped"}."""
  env = {**os.environ, "TINYSCHED_CAPTURE": str(Path(db).resolve()), "TINYSCHED_CAPTURE_LABEL": name,
         "TINYSCHED_CAPTURE_LEVELS": ",".join(levels)}
  t0 = time.perf_counter()
  try:
    r = subprocess.run([python, "-m", "replay.suite", name, "--quick" if quick else "--full"], env=env, cwd=cwd, capture_output=True,
                       text=True, timeout=timeout)
  except subprocess.TimeoutExpired:
    return {"model": name, "ok": False, "seconds": time.perf_counter() - t0, "error": f"timed out after {timeout}s"}
  out = {"model": name, "seconds": round(time.perf_counter() - t0, 2)}
  lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
  if r.returncode == 0 and lines: return {**out, **json.loads(lines[-1])}
  return {**out, "ok": False, "error": (r.stderr.strip().splitlines() or ["(no output)"])[-1], "stderr": r.stderr[-4000:]}

def _worker(name: str, quick: bool) -> None:
  from tinysched.models.suite import SUITE, available
  if name not in SUITE: raise SystemExit(f"unknown model {name!r}; the suite has {', '.join(SUITE)}")
  if (why := available(name)) is not None:
    print(json.dumps({"ok": True, "skipped": why}))
    return
  summary = SUITE[name](quick=quick)
  print(json.dumps({"ok": True, "summary": summary}, default=str))

if __name__ == "__main__":
  args = sys.argv[1:]
  if not args: raise SystemExit("usage: python -m replay.suite MODEL [--quick|--full]")
  _worker(args[0], "--full" not in args)
