"""A helper started by one thread (replay.process.spawn: its preexec_fn runs Python's fork hooks) while another thread
first imports a module that registers a lock as a pair of fork hooks: the release hook runs without its acquire, and
ThreadPoolExecutor.submit fails with "release unlocked lock" (seen once in CI, from the execution check's pool while
the calibration thread started its helper). replay.process loads those modules before any thread of ours forks.

The window is held open with events, not sleeps: a before-fork hook of the test's own waits until the other thread has
used the executor, so the outcome does not depend on the machine's speed."""
import os, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[2]

SCENARIO = r"""
import os, sys, threading
from replay import process
if sys.argv[1] == "plant":  # as before the fix: the executor's module not loaded until first used
  import concurrent.futures
  del sys.modules["concurrent.futures.thread"]
  concurrent.futures.__dict__.pop("ThreadPoolExecutor", None)
import concurrent.futures as cf
entered, proceed = threading.Event(), threading.Event()
def hold() -> None:  # registered last, so it runs first: no lock is held by this thread's fork yet
  if threading.current_thread().name == "forker":
    entered.set(); proceed.wait()
os.register_at_fork(before=hold)
t = threading.Thread(target=lambda: process.run_helper(["true"], timeout=60), name="forker")
t.start()
entered.wait()  # the forker is inside its fork's hooks now
with cf.ThreadPoolExecutor(2) as ex:
  fut = ex.submit(int, "7")
  proceed.set()
  assert fut.result() == 7
t.join()
print("done")
"""

@pytest.mark.parametrize("variant", ["fixed", "plant"])
def test_a_fork_from_one_thread_does_not_take_the_executors_lock_from_another(variant):
  env = {**os.environ, "PYTHONPATH": str(ROOT)}
  r = subprocess.run([sys.executable, "-c", SCENARIO, variant], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
  broken = r.returncode != 0 or "release unlocked lock" in r.stderr or "done" not in r.stdout
  if variant == "fixed": assert not broken, r.stderr[-2000:]
  else: assert broken and "release unlocked lock" in r.stderr, "the planted late import went unnoticed:\n" + r.stderr[-2000:]
