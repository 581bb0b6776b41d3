"""`replay suite`: run the real-model suite (tinysched.models.suite) with capture on.

Every model runs in its own fresh process, so its captures do not depend on what ran before it (lazy
caches, buffer numbers) and the same suite captured twice gives the same keys. That process dies with the
command that started it (even a SIGKILLed one), and a new store appears whole or not at all.
"""
from __future__ import annotations
import json, os, subprocess, sys, time
from pathlib import Path
from tinysched.models.suite import SUITE, available
from replay.levels import HOOKED
from replay.baseline.checkouts import capture_tool_path, runner_module
from replay.process import parent_death_signal
from replay.store.sqlite import Store, StoreError, remove_stale_temps, replace_store

def _has_captures(db: Path) -> bool:
  try: Store(db, readonly=True).close()
  except StoreError: return False
  return True

def suite_models() -> list[str]:
  return list(SUITE)

def run_model(name: str, db: Path, quick: bool, levels: tuple[str, ...] = HOOKED, cwd: str | None = None,
              python: str = sys.executable, timeout: float | None = None, replace: bool = False, env: dict[str, str] | None = None) -> dict:
  """Capture one model into `db` in a subprocess; returns {"model", "ok", "seconds", "summary"|"error"|"skipped"}.

  When `db` does not exist yet, or with replace=True (which replaces it), the model captures into a hidden
  temporary file beside `db` that is renamed over it only once the model finished and captured something: a
  failed, killed or empty run leaves `db` as it was (absent, or the old baseline). Otherwise it appends to `db`.
  `env`: variables to set for the model's process (`replay suite --twice` sets PYTHONHASHSEED)."""
  target = Path(db)
  atomic = replace or not target.exists()
  if atomic: remove_stale_temps(target.parent, f".{target.name}.capture-*.tmp*")
  out_db = target.with_name(f".{target.name}.capture-{os.getpid()}.tmp") if atomic else target
  env = {**os.environ, **(env or {}), "TINYSCHED_CAPTURE": str(out_db.resolve()), "TINYSCHED_CAPTURE_LABEL": name,
         "TINYSCHED_CAPTURE_LEVELS": ",".join(levels), "TINYSCHED_CAPTURE_STRICT": "1"}  # (strict: a failed capture exits 2)
  tree = Path(cwd) if cwd is not None else None
  if (shim := capture_tool_path(tree)) is not None: env["PYTHONPATH"] = shim + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
  t0 = time.perf_counter()
  try:
    try:
      r = subprocess.run([python, "-m", runner_module(tree), name, "--quick" if quick else "--full"], env=env, cwd=cwd, capture_output=True,
                         text=True, timeout=timeout, preexec_fn=parent_death_signal())
    except subprocess.TimeoutExpired:
      return {"model": name, "ok": False, "seconds": time.perf_counter() - t0, "error": f"timed out after {timeout}s"}
    out = {"model": name, "seconds": round(time.perf_counter() - t0, 2)}
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
      return {**out, "ok": False, "error": (r.stderr.strip().splitlines() or ["(no output)"])[-1], "stderr": r.stderr[-4000:]}
    try: res = {**out, **json.loads(lines[-1])}
    except ValueError: return {**out, "ok": False, "error": f"unreadable result line {lines[-1][:200]!r}", "stderr": r.stderr[-4000:]}
    if atomic and res.get("ok") and not res.get("skipped") and _has_captures(out_db): replace_store(out_db, target)
    return res
  finally:
    if atomic:
      for suffix in ("", "-wal", "-shm", "-journal"): Path(f"{out_db}{suffix}").unlink(missing_ok=True)

def _worker(name: str, quick: bool) -> None:
  if name not in SUITE: raise SystemExit(f"unknown model {name!r}; the suite has {', '.join(SUITE)}")
  if (why := available(name)) is not None:
    print(json.dumps({"ok": True, "skipped": why}))
    return
  summary = SUITE[name](quick=quick)
  print(json.dumps({"ok": True, "summary": summary}, default=str))

if __name__ == "__main__":
  args = sys.argv[1:]
  if not args: raise SystemExit("usage: python -m replay.baseline.suite MODEL [--quick|--full]")
  _worker(args[0], "--full" not in args)
