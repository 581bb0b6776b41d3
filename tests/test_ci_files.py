"""The CI files agree with each other: the GitHub workflow's shards run what the main job runs (scripts/replay.sh) and keep
their compiled kernels in a cache keyed by the captures and the code; the slow tests run in CI (.ci/run after the test
command) and nightly (ci/github/slow.yml). tests/replay/test_gate.py checks the rest of the workflow's wiring."""
from __future__ import annotations
import re, shlex, subprocess
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
yaml = pytest.importorskip("yaml")

def _workflow(name: str) -> dict:
  doc = yaml.safe_load((ROOT / "ci/github" / name).read_text())
  doc["on"] = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` key as True
  return doc

def _step(job: dict, pred) -> tuple[int, dict]:
  return next((i, s) for i, s in enumerate(job["steps"]) if pred(s))

def _commands(path: str) -> list[str]:
  """The lines of a shell script that are not comments or blank."""
  return [l.strip() for l in (ROOT / path).read_text().splitlines() if l.strip() and not l.strip().startswith("#")]

# *** the shards' kernel cache (ci/github/replay.yml) ***

def test_shards_run_what_the_main_job_runs():
  doc = _workflow("replay.yml")
  main = next(l for l in _commands("scripts/replay.sh") if l.startswith("exec replay check"))
  flags = [a for a in shlex.split(main)[3:] if a.startswith("--")]
  assert flags and shlex.split(doc["env"]["REPLAY_EXEC_ARGS"]) == flags
  _, shard = _step(doc["jobs"]["replay"], lambda s: "replay check" in str(s.get("run", "")))
  assert "$REPLAY_EXEC_ARGS" in shard["run"] and "--shard" in shard["run"]
  assert doc["jobs"]["replay"]["env"]["TINYSCHED_PROGRAM_CACHE"] == "1"

def test_shards_restore_their_kernels_keyed_by_captures_and_code():
  job = _workflow("replay.yml")["jobs"]["replay"]
  i_cache, cache = _step(job, lambda s: str(s.get("uses", "")).startswith("actions/cache@"))
  i_check, _ = _step(job, lambda s: "replay check" in str(s.get("run", "")))
  assert i_cache < i_check, "the caches must be restored before the shard compiles"
  # the cached folders are the ones the shard's processes use
  paths = set(cache["with"]["path"].split())
  assert paths == {"~/.cache/tinysched", "~/.cache/pocl"}
  _, folders = _step(job, lambda s: "GITHUB_ENV" in str(s.get("run", "")))
  for var, path in (("TINYSCHED_CACHE", "~/.cache/tinysched"), ("POCL_CACHE_DIR", "~/.cache/pocl")):
    assert f'echo "{var}={path.replace("~", "$HOME")}" >> "$GITHUB_ENV"' in folders["run"]
  # keyed by the captures and the code (tinysched's and replay's sources), per shard, with partial hits
  key = cache["with"]["key"]
  assert "hashFiles('captures/*.db')" in key
  code = re.search(r"hashFiles\(([^)]*)\)", key[key.index("-code-"):])
  assert code and {"'tinysched/**/*.py'", "'replay/**/*.py'"} <= {p.strip() for p in code.group(1).split(",")}
  assert "shard" in folders["run"] and "matrix.shard" in str(folders.get("env"))
  restore = [l for l in cache["with"]["restore-keys"].splitlines() if l.strip()]
  assert len(restore) == 2 and all(key.startswith(r.strip()) for r in restore)
  assert "hashFiles('captures/*.db')" in restore[0] and "hashFiles" not in restore[1]

# *** the slow tests ***

def test_ci_runs_the_slow_tests_after_the_test_command():
  cmds = _commands(".ci/run")
  assert cmds.index("bash scripts/test.sh") < cmds.index("bash scripts/test-slow.sh")
  slow = _commands("scripts/test-slow.sh")
  assert "set -euo pipefail" in slow and any(l.startswith("python -m pytest tests -m slow ") for l in slow)
  for script in (".ci/run", "scripts/test-slow.sh", "scripts/replay.sh"):
    r = subprocess.run(["bash", "-n", str(ROOT / script)], capture_output=True, text=True)
    assert r.returncode == 0, f"{script}: {r.stderr}"

def test_slow_tests_run_nightly_on_github():
  doc = _workflow("slow.yml")
  assert doc["on"]["schedule"] and all(len(s["cron"].split()) == 5 for s in doc["on"]["schedule"])
  assert "workflow_dispatch" in doc["on"]
  (job,) = doc["jobs"].values()
  assert job["timeout-minutes"] <= 90
  runs = "\n".join(str(s.get("run", "")) for s in job["steps"])
  assert "pocl-opencl-icd" in runs and "bash scripts/test-slow.sh" in runs
