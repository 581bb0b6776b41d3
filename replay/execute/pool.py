"""The parent's side of the execution check: the device chosen and opened, a calibration run that sets the time limits,
kernels compiled in batches ahead, and the jobs handed to worker processes (replay.execute.worker), one job per line,
so that a kernel that hangs or crashes the driver costs only its own job."""
from __future__ import annotations
import concurrent.futures as cf
import hashlib, json, os, re, select, signal, subprocess, sys, tempfile, threading, time
from pathlib import Path
from typing import Callable
from tinysched.codegen.program_cache import code_fingerprint
from tinysched.device import Device
from tinysched.helpers import cache_root, disk_cache_enabled, trusted_cache_dir, write_atomic
from replay.execute.jobs import job_size
from replay import process

MIN_TIMEOUT_S = 120.0        # the floor of a job's time limit; scaled up by the calibration run and the job's size
SECONDS_PER_ELEMENT = 2e-6   # added to a job's limit per buffer element (the reference's cost grows with it)

# *** batch compiles ahead of the jobs ***

def _job_kernels(jobs: list[dict]) -> list[str]:
  """The distinct kernel items of the jobs, both sides, in job order, as the JSON lines a compile process reads:
  ["ast", encoded] or ["src", name, source]."""
  out: dict[str, None] = {}  # insertion-ordered
  for j in sorted(jobs, key=lambda j: j["id"]):
    for it in list(j.get("old") or []) + list(j.get("new") or []):
      out.setdefault(json.dumps(["ast", it[1]] if it[0] == "ast" else ["src", it[1], it[2]]))
    for enc in j.get("kernels") or []: out.setdefault(json.dumps(["ast", enc]))  # a model call's kernels (its replay scheduled them)
  return list(out)

PRECOMPILE_MIN = 8  # fewer kernels than this: a compile process's start (~0.5 s) would cost about what batching saves

def _precompile_cmd(device: str) -> list[str]: return [sys.executable, "-m", "replay.execute.worker", "precompile", device]

def _precompile_marker(device: str, items: list[str]) -> Path | None:
  """A file that exists once these kernels were batch-compiled by this very code for this device: a warm run then
  starts no compile process. Only speed depends on it (a kernel whose cache entry is gone is compiled by its worker).
  None where the folder is not trusted (another user's, writable by others: tinysched.helpers.trusted_cache_dir)."""
  if (folder := trusted_cache_dir(cache_root() / "precompiled")) is None: return None
  h = hashlib.sha256()
  for part in [code_fingerprint(), device, *items]: h.update(part.encode() + b"\0")
  return folder / h.hexdigest()

def precompile(jobs: list[dict], device: str, workers: int, progress: bool = False) -> int:
  """Compile every kernel the jobs will launch, in batches, in `workers` processes, before the jobs run: a cold run
  then pays each compiler start once per batch instead of once per kernel (tinysched.runtime.opencl: prebuild). This
  only fills the disk caches; the jobs compile (or find) each kernel themselves as before. A compile process that
  fails or hangs costs only its speed-up. Returns the number of kernel items handed out (0: nothing to do)."""
  if not disk_cache_enabled() or os.environ.get("REPLAY_PRECOMPILE", "1") == "0": return 0
  try: compiles = getattr(Device[device], "compiles", False)
  except Exception: return 0  # opening the device is the jobs' business: they report it
  if not compiles: return 0
  items = _job_kernels(jobs)
  if len(items) < PRECOMPILE_MIN: return 0
  marker = _precompile_marker(device, items)
  if marker is not None and marker.exists(): return 0
  if progress: sys.stderr.write(f"  compiling {len(items)} kernels in batches (first run of this code on {device}) ...\n"); sys.stderr.flush()
  n = max(1, min(workers, len(items)))
  shares = [items[i * len(items) // n:(i + 1) * len(items) // n] for i in range(n)]  # contiguous: one model's kernels together
  procs = []
  with process.no_raise():  # a stop ends the compile processes (process.spawn): the waits below then return at once
    for share in shares:
      f = tempfile.TemporaryFile(mode="w+")
      f.write("".join(it + "\n" for it in share)); f.seek(0)
      try: procs.append((process.spawn(_precompile_cmd(device), stdin=f, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), f))
      except process.Stopped:
        f.close()
        break
    deadline = time.monotonic() + MIN_TIMEOUT_S + 2.0 * max(len(s) for s in shares)
    ok = True
    for p, f in procs:
      try: ok &= p.wait(timeout=max(1.0, deadline - time.monotonic())) == 0
      except subprocess.TimeoutExpired:
        p.kill(); p.wait(); ok = False
      process.release(p)
      f.close()
  if ok and marker is not None and len(procs) == len(shares) and process.stopped() is None: write_atomic(marker, b"")
  return len(items)

# *** the device, the time limits, the workers ***

def default_device() -> str:
  return Device.DEFAULT

def check_device(device: str | None) -> str:
  """The device name, canonical, or a ValueError saying which devices exist (before any job runs)."""
  try:
    name = Device.canonicalize(device) if device else default_device()
    Device[name]
  except Exception as e:
    what = f"device {device!r}" if device else f"the default device (TINYSCHED_DEVICE={os.environ.get('TINYSCHED_DEVICE')!r})"
    raise ValueError(f"{what} cannot be opened: {e}") from None
  return name

class DeviceUnusable(RuntimeError):
  """The device opened but cannot run the execution check's calibration kernel (a broken driver, a missing compiler)."""

def calibrate(device: str) -> float:
  """Seconds a worker needs for a tiny job end to end (start, imports, one compile): how slow this machine is now."""
  t0 = time.perf_counter()
  r = process.run_helper([sys.executable, "-m", "replay.execute.worker", "calibrate", device], timeout=600)
  if r.returncode != 0:
    lines = r.stderr.strip().splitlines()
    # the exception's own line (a compiler's log may follow it), else the last one; a silent exit says so
    why = next((ln for ln in reversed(lines) if re.match(r"[\w.]*(Error|Exception)\b[^ ]*: ", ln)), lines[-1] if lines else "")
    raise DeviceUnusable(f"the execution check cannot run on {device}: its calibration kernel "
                         + (f"failed: {why.strip()[:300]}" if why else f"process exited with {r.returncode} without a message"
                            " (a compiler that called exit()? a full disk under the compiler's cache?)"))
  return time.perf_counter() - t0

def timeout_for(job: dict, calibration_s: float) -> float:
  """A job's limit: never below MIN_TIMEOUT_S, scaled by how slow the machine is now and by the job's size."""
  return max(MIN_TIMEOUT_S, 30 * calibration_s) + SECONDS_PER_ELEMENT * job_size(job) * max(1.0, calibration_s)

# a worker that dies of one of these was stopped from outside (a user's kill, a terminal's signal), not by its kernel
EXTERNAL_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

def _run_serial(take: Callable[[], dict | None], device: str, timing_runs: int, limit: Callable[[dict], float], slower_threshold: float,
                progress: Callable[[], None] | None) -> dict[int, dict]:
  """Run the jobs `take()` hands out (None: no more) one at a time in a worker process; a worker that hangs past a
  job's limit is killed (the job is `timeout`), one that dies blames its job (`failed`); either way a fresh worker
  takes the next job. A worker killed by an external signal (EXTERNAL_SIGNALS) blames nothing: its job is run again
  once in a fresh worker, then `skipped`. When the run is stopped (replay.process) no job is started and the one in
  flight is left without a verdict: the caller reports what finished."""
  results: dict[int, dict] = {}
  proc, errf = None, None
  killed: set[int] = set()  # jobs whose worker an external signal killed once
  again: list[dict] = []     # such a job, run next in a fresh worker
  def stop() -> None:
    nonlocal proc
    if proc is not None:
      proc.kill(); proc.wait()
      process.release(proc)
      proc = None
  try:
    while process.stopped() is None and (job := (again.pop() if again else take())) is not None:
      if proc is None:
        # stderr goes to a file: a full pipe (compiler warnings) must never block the worker while we wait on stdout
        errf = tempfile.TemporaryFile(mode="w+")
        try: proc = process.spawn([sys.executable, "-m", "replay.execute.worker", "worker", device, str(timing_runs), str(slower_threshold)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errf, text=True, bufsize=1)
        except process.Stopped: break
      assert proc.stdin and proc.stdout and errf
      try:
        proc.stdin.write(json.dumps(job) + "\n")
        proc.stdin.flush()
      except (BrokenPipeError, OSError): pass  # it died: reading below says so
      ready, _, _ = select.select([proc.stdout], [], [], limit(job))
      if not ready:
        results[job["id"]] = {"verdict": "timeout", "error": f"no result within {limit(job):.0f}s (kernel hung, or the machine is overloaded)"}
        stop()
      elif not (line := proc.stdout.readline()):  # the worker died (a driver crash): blame the job it was running
        proc.wait()
        process.release(proc)
        code, proc = proc.returncode, None
        if process.stopped() is not None: break  # ended by the run's stop, not by its job
        if -code in EXTERNAL_SIGNALS:
          if job["id"] not in killed:
            killed.add(job["id"])
            again.append(job)  # this job once more, first
            continue
          results[job["id"]] = {"verdict": "skipped", "reason": f"its worker was killed twice by {signal.Signals(-code).name} from outside "
                                "(not by the kernel): not verified"}
        else:
          errf.seek(0)
          results[job["id"]] = {"verdict": "failed", "error": f"the worker process exited with {code}", "log": errf.read()[-2000:]}
      else:
        out = json.loads(line)
        results[out["id"]] = out
      if progress: progress()
    if proc is not None and process.stopped() is None:
      proc.stdin.close()  # type: ignore[union-attr]
      proc.wait()
      process.release(proc)
      proc = None
  finally: stop()
  return results

def _job_queue(jobs: list[dict], workers: int, lock: threading.Lock) -> Callable[[int], dict | None]:
  """take(worker) -> the next job for that worker, or None when all are handed out. Biggest first, so the run ends soon
  after its longest job rather than after one worker's unlucky share. Jobs of one group (one store: one model, whose
  kernel- and schedule-level jobs share kernels) go to one worker, which compiles each kernel once; a worker whose
  groups are done takes the biggest job left anywhere."""
  groups: dict[str, list[dict]] = {}
  for j in sorted(jobs, key=lambda j: (-job_size(j), j["id"])): groups.setdefault(str(j.get("group", "")), []).append(j)
  load = [0] * workers
  owner: dict[str, int] = {}
  for g in sorted(groups, key=lambda g: (-sum(job_size(j) + (1 << 16) for j in groups[g]), g)):  # biggest group to the least loaded
    w = min(range(workers), key=lambda w: (load[w], w))
    owner[g] = w
    load[w] += sum(job_size(j) + (1 << 16) for j in groups[g])
  def take(worker: int) -> dict | None:
    with lock:
      mine = [g for g in groups if groups[g] and owner[g] == worker] or [g for g in groups if groups[g]]
      if not mine: return None
      g = min(mine, key=lambda g: (-job_size(groups[g][0]), groups[g][0]["id"]))
      return groups[g].pop(0)
  return take

def run_jobs(jobs: list[dict], device: str | None = None, timing_runs: int = 5, timeout_s: float | None = None,
             progress: Callable[[int, int], None] | None = None, workers: int = 1, slower_threshold: float = 0.10) -> dict[int, dict]:
  """Run jobs in `workers` worker processes. `timeout_s` None: each job's limit comes from a calibration run and
  its size (timeout_for); the calibration runs beside the first jobs, and when it fails (DeviceUnusable) no further
  job is started and the failure is raised. A job that times out is run again alone with twice its limit before it
  counts."""
  device = device or default_device()
  # the calibration runs beside the first jobs (it only sets limits): until it is known, limits assume a machine
  # of normal speed (cal 1 s); a job that times out meanwhile on a slow machine is retried with the measured limit
  cal: list = []
  def calibrate_bg() -> None:
    try: cal.append(calibrate(device))
    except BaseException as e: cal.append(e)  # noqa: BLE001 (a stop too: the thread must not die with a traceback)
  cal_thread = threading.Thread(target=calibrate_bg, daemon=True, name="replay-calibration")
  if timeout_s is None and jobs: cal_thread.start()
  def limit(j: dict) -> float:
    if timeout_s is not None: return timeout_s
    return timeout_for(j, cal[0] if cal and isinstance(cal[0], float) else 1.0)
  done = [0]
  lock = threading.Lock()
  def tick() -> None:
    with lock:
      done[0] += 1
      if progress: progress(min(done[0], len(jobs)), len(jobs))
  n = max(1, min(workers, len(jobs)))
  precompile(jobs, device, max(n, min(2, os.cpu_count() or 1)), progress=progress is not None)
  queue = _job_queue(jobs, n, lock)
  def take(w: int) -> dict | None: return None if cal and not isinstance(cal[0], float) else queue(w)  # unusable: stop
  out: dict[int, dict] = {}
  # a stop (replay.process) ends the workers; each thread then returns the verdicts it has: a partial result, not none
  with process.no_raise():
    if n > 1:
      with cf.ThreadPoolExecutor(n) as ex:  # threads only wait on worker processes
        # (the lambda's default binds each worker's w: mypy cannot infer its type)
        futs = [ex.submit(_run_serial, lambda w=w: take(w), device, timing_runs, limit, slower_threshold, tick)  # type: ignore[misc]
                for w in range(n)]
        for f in futs: out.update(f.result())
    else: out = _run_serial(lambda: take(0), device, timing_runs, limit, slower_threshold, tick)
    if cal_thread.is_alive() or cal: cal_thread.join()
  if process.stopped() is not None: return out
  if cal and isinstance(cal[0], Exception): raise cal[0]
  for j in jobs:  # a timeout under load is retried alone before it counts
    if out.get(j["id"], {}).get("verdict") == "timeout":
      alone = [j]
      with process.no_raise():
        again = _run_serial(lambda: alone.pop() if alone else None, device, timing_runs, lambda x: 2 * limit(x), slower_threshold, None)
      if j["id"] in again: out[j["id"]] = {**again[j["id"]], "retried": True}
  return out

def _workers_for(device: str, timing_runs: int = 5) -> int:
  """Worker processes: two on a CPU device (its kernels share the cores with the reference). On a GPU one while
  timings matter (kernels of other workers would share the device and blur them), and for a correctness sweep
  (--exec-all: one timing run) one per four cores up to four, since the CPU reference is then most of the work."""
  cores = os.cpu_count() or 1
  if device == "NUMPY": return min(2, cores)
  try:
    if not Device[device].target.is_gpu: return min(2, cores)  # type: ignore[attr-defined]
    return 1 if timing_runs > 1 else max(1, min(4, cores // 4))
  except Exception: return 1
