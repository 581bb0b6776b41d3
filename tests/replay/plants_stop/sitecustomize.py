"""A plant for tests/replay/test_stop_signals.py, loaded by every Python process that has this folder on PYTHONPATH:
with PLANT_SLOW_JOBS=<folder> each execution-check job first writes a file there (so the test knows the workers are
busy) and then sleeps PLANT_SLOW_SECONDS (a long kernel). PLANT_NO_STOP=1 makes replay.process.stoppable a no-op (the
stop handling taken out), to show the test catches its absence."""
import os

if os.environ.get("PLANT_SLOW_JOBS"):
  import time
  import replay.execute.judge as _judge
  _real = _judge.run_job
  def _slow(job, *a, **k):
    with open(os.path.join(os.environ["PLANT_SLOW_JOBS"], f"job-{os.getpid()}-{job['id']}"), "w"): pass
    time.sleep(float(os.environ.get("PLANT_SLOW_SECONDS", "30")))
    return _real(job, *a, **k)
  _judge.run_job = _slow

if os.environ.get("PLANT_NO_STOP"):
  import contextlib
  import replay.process as _process
  _process.stoppable = contextlib.nullcontext
