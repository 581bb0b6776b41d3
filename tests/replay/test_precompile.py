"""Batch compiles ahead of the execution check's jobs (replay.execute.pool.precompile): the verdicts are those of a run
without them, a warm run starts no compile process, and a compile process that dies costs only speed. Needs OpenCL."""
import json, sys
import pytest
from replay.execute import pool
from replay.check.execution import exec_report
from replay.check.pool import check

def _opencl() -> bool:
  try:
    from tinysched.runtime.opencl import opencl_available
    return opencl_available()
  except Exception: return False

pytestmark = pytest.mark.skipif(not _opencl(), reason="needs an OpenCL platform (PoCL)")

def _verdicts(db) -> tuple[dict, list]:
  rep = check([str(db)], exec_mode="all", jobs=1)
  exec_report(rep, mode="all", device="OPENCL", timing_runs=1)
  return {(r.run_id, r.seq, r.level): r.exec["verdict"] for r in rep.results}, rep.results

@pytest.fixture
def counted(monkeypatch):
  calls = []
  real = pool._precompile_cmd
  monkeypatch.setattr(pool, "_precompile_cmd", lambda device: calls.append(device) or real(device))
  return calls

def test_job_kernels_are_distinct_and_in_job_order():
  jobs = [{"id": 1, "old": [["src", "k", "S", {}]], "new": [["ast", "B", [0]]]},
          {"id": 0, "old": [["ast", "A", [0, 1]]], "new": [["ast", "A", [1, 0]]]}]
  assert [json.loads(x) for x in pool._job_kernels(jobs)] == [["ast", "A"], ["src", "k", "S"], ["ast", "B"]]

def test_cold_run_compiles_in_batches_and_gives_the_same_verdicts(db, tmp_path, monkeypatch, counted):
  monkeypatch.setenv("TINYSCHED_CACHE", str(tmp_path / "cold"))
  monkeypatch.setenv("POCL_CACHE_DIR", str(tmp_path / "pocl"))
  cold, results = _verdicts(db)
  assert counted and set(cold.values()) == {"equivalent"}
  assert list((tmp_path / "cold" / "opencl").glob("batch-*.src")) and list((tmp_path / "cold" / "precompiled").iterdir())
  counted.clear()
  warm, _ = _verdicts(db)  # the marker: no compile process
  assert warm == cold and not counted
  # without batch compiles, from empty caches: the same verdicts
  monkeypatch.setenv("TINYSCHED_CACHE", str(tmp_path / "plain"))
  monkeypatch.setenv("REPLAY_PRECOMPILE", "0")
  plain, _ = _verdicts(db)
  assert plain == cold and not counted

def test_a_compile_process_that_dies_costs_only_speed(db, tmp_path, monkeypatch):
  monkeypatch.setenv("TINYSCHED_CACHE", str(tmp_path / "c"))
  monkeypatch.setattr(pool, "_precompile_cmd", lambda device: [sys.executable, "-c", "import os; os.abort()"])
  got, _ = _verdicts(db)
  assert set(got.values()) == {"equivalent"}
  assert not list((tmp_path / "c" / "precompiled").glob("*"))  # not marked done: the next run tries again (the folder may exist)

def test_a_few_kernels_start_no_compile_process(counted, tmp_path, monkeypatch):
  monkeypatch.setenv("TINYSCHED_CACHE", str(tmp_path))
  for v in ("TINYSCHED_DISK_CACHE", "REPLAY_PRECOMPILE"): monkeypatch.delenv(v, raising=False)
  jobs = lambda n: [{"id": i, "old": [["src", f"k{i}", f"__kernel void k{i}(__global float* d) {{ d[0] = {i}.0f; }}\n", {}]],
                     "new": []} for i in range(n)]
  assert pool.precompile(jobs(pool.PRECOMPILE_MIN - 1), "OPENCL", 2) == 0 and not counted
  assert pool.precompile(jobs(pool.PRECOMPILE_MIN), "OPENCL", 2) == pool.PRECOMPILE_MIN and counted  # one more: compiled
