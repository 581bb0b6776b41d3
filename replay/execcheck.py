"""The execution check: run the stored (old) and the current (new) kernels on a device with the same seeded
inputs, and the stored AST on the NUMPY interpreter as the reference; decide `equivalent` or `mismatch`
and time both.

Kernels run in a worker process (`python -m replay.execcheck worker`) fed one job per line, so a kernel that
hangs or crashes the driver is reported (`timeout` / `failed`) and the check goes on with a fresh worker.

Inputs: every buffer of the kernel is filled from a seed derived from the capture's input key, with values
safe for the dtype (floats in [0.5, 2): exp/log/recip/sqrt stay finite; small ints; random bools). Outputs are
compared with tolerances by dtype (exact for ints and bools); NaN and inf must sit at the same positions.
"""
from __future__ import annotations
import json, os, select, statistics, subprocess, sys, tempfile, threading, time, traceback
from dataclasses import dataclass
from typing import Any, Callable
import numpy as np

TOLERANCES = {"half": (1e-2, 1e-2), "float": (1e-3, 1e-4), "double": (1e-7, 1e-9)}  # (rtol, atol) by dtype name
DEFAULT_TIMEOUT_S = 60.0
MIN_SLOWER_S = 20e-6  # a kernel is only "slower" if it also lost at least this much time

def seeded_fill(size: int, dtype, seed: int) -> np.ndarray:
  from tinysched.dtype import dtypes
  rng = np.random.default_rng(seed)
  npd = dtype.np
  if dtypes.is_float(dtype): return rng.uniform(0.5, 2.0, size).astype(npd)
  if dtypes.is_bool(dtype): return rng.integers(0, 2, size).astype(np.bool_)
  lo = 0 if dtypes.is_unsigned(dtype) else -8
  return rng.integers(lo, 9, size).astype(npd)

def compare(a: np.ndarray, b: np.ndarray, dtype_name: str) -> dict[str, Any]:
  """How b differs from a: {"equal", "max_abs_err", "max_rel_err", "n_diff", "first_diff"}; NaN/inf by position."""
  if a.dtype.kind in "biu" or a.dtype == np.bool_:
    diff = a != b
    ae = np.abs(a.astype(np.float64) - b.astype(np.float64))
    return {"equal": not diff.any(), "max_abs_err": float(ae.max()) if ae.size else 0.0, "max_rel_err": None, "n_diff": int(diff.sum()),
            "first_diff": np.flatnonzero(diff)[:5].tolist()}
  rtol, atol = TOLERANCES.get(dtype_name, (1e-3, 1e-4))
  a64, b64 = a.astype(np.float64), b.astype(np.float64)
  nan_a, nan_b = np.isnan(a64), np.isnan(b64)
  inf_mismatch = (np.isinf(a64) | np.isinf(b64)) & (a64 != b64) & ~(nan_a | nan_b)
  finite = ~(nan_a | nan_b | np.isinf(a64) | np.isinf(b64))
  with np.errstate(all="ignore"):
    ae = np.where(finite, np.abs(a64 - b64), 0.0)
    re = np.where(finite, ae / np.maximum(np.abs(a64), 1e-30), 0.0)
  bad = (nan_a != nan_b) | inf_mismatch | (finite & (ae > atol + rtol * np.abs(a64)))
  return {"equal": not bad.any(), "max_abs_err": float(ae.max()) if ae.size else 0.0, "max_rel_err": float(re.max()) if re.size else 0.0,
          "n_diff": int(bad.sum()), "first_diff": np.flatnonzero(bad)[:5].tolist(), "rtol": rtol, "atol": atol}

# *** inside the worker ***

@dataclass
class _Kernel:
  ast: Any
  bufs: list[int]   # DEFINE_GLOBAL i -> canonical buffer number

def _run_list(device: str, kernels: list[_Kernel], host: dict[int, np.ndarray], specs: dict[int, tuple[int, Any]], names: dict[str, int],
              timing_runs: int = 0) -> tuple[dict[int, np.ndarray], list[float]]:
  """Run kernels in order on fresh device copies of `host`; return the final contents and per-kernel median times."""
  from tinysched.device import Buffer, Device
  from tinysched.ops import Ops
  from tinysched.realize import kernel_vars
  bufs = {i: Buffer(device, specs[i][0], specs[i][1]).copyin(host[i]) for i in host}
  be = Device[device]
  for k in kernels:
    args = [bufs[i] for i in k.bufs]
    if k.ast.op is not Ops.SINK:
      if k.ast.op is Ops.COPY: args[0].copyin(args[1].numpy().view(args[0].dtype.np)[:args[0].size])
      continue
    be.exec_ast(k.ast, args, {v: names[v.arg[0]] for v in kernel_vars(k.ast)})
    be.synchronize()
  out = {i: b.numpy() for i, b in bufs.items()}
  times: list[float] = []
  for k in kernels if timing_runs else []:
    if k.ast.op is not Ops.SINK: continue
    vv = {v: names[v.arg[0]] for v in kernel_vars(k.ast)}
    args = [bufs[i] for i in k.bufs]
    ts = []
    for r in range(timing_runs + 2):  # two warm-up runs
      if hasattr(be, "run"): t = be.run(k.ast, args, vv)  # profiling-event time where the backend has it
      else:
        t0 = time.perf_counter(); be.exec_ast(k.ast, args, vv); be.synchronize(); t = time.perf_counter() - t0
      if r >= 2: ts.append(t)
    times.append(statistics.median(ts))
  return out, times

def build_job(db: str, level: str, input_key: str, stored_key: str, extra: str | None, var_vals: str | None) -> dict:
  """Everything the worker needs, computed here with the current code: both kernel lists (encoded ASTs with
  their buffer maps), the buffers, the Variables' values, which buffers to compare."""
  from replay.store import Store
  from replay.runner import decode_output
  from replay.encode import decode_kernel_input, decode_schedule_input, encode_graph, bound_values
  from tinysched.ops import Ops
  from tinysched.schedule import full_ast_rewrite, schedule_graph
  ex = json.loads(extra or "{}")
  names = json.loads(var_vals or "{}")
  store = Store(db, readonly=True)
  try:
    if level == "kernel":
      pre, vv, asg = decode_kernel_input(store.blob(input_key))
      names.update(bound_values(pre, vv))  # from the input itself: older rows' summary may lack some
      new_ast, ctx = full_ast_rewrite(pre, vv, asg)
      new = [(new_ast, [b.arg[0] for b in ctx.bufs])]
      old = [(decode_output("kernel", store.blob(stored_key)), list(ex.get("bufs") or new[0][1]))]  # no map stored: same signature
      graph, outputs = pre, None
    elif level == "schedule":
      graph, vv = decode_schedule_input(store.blob(input_key))
      names.update(bound_values(graph, vv))
      kernels, vv2 = schedule_graph(graph, vv)
      names.update({v.arg[0]: x for v, x in {**vv, **vv2}.items()})
      new = [(k.ast, [b.arg[0] for b in k.bufs]) for k in kernels]
      old_asts = decode_output("schedule", store.blob(stored_key))
      maps = ex.get("bufs")
      if not maps or len(maps) != len(old_asts): return {"skip": "the capture has no buffer map for its kernels"}
      old = list(zip(old_asts, maps))
      outputs = sorted({s.buf_uop.arg[0] for s in graph.src if s.op is Ops.VIEW})  # the schedule's results
    else: return {"skip": f"no execution check at {level} level"}
  finally: store.close()
  specs = {u.arg[0]: [u.arg[1][1], u.arg[1][2].name] for u in graph.toposort() if u.op is Ops.BUFFER}
  def enc(ks): return [[encode_graph([a]).decode(), list(m)] for a, m in ks]
  return {"specs": specs, "old": enc(old), "new": enc(new), "outputs": outputs, "names": names, "seed": int(input_key[:8], 16)}

def _written(ast, bufs: list[int]) -> list[int]:
  from tinysched.ops import Ops
  if ast.op is not Ops.SINK: return [bufs[0]] if bufs else []
  return [bufs[s.src[0].arg] for s in ast.src if s.op is Ops.STORE]

def run_job(job: dict, device: str, timing_runs: int) -> dict:
  """Run a built job (see build_job) on `device`, the old kernels on the NUMPY interpreter as the reference, and compare."""
  from replay.encode import decode_graph
  from tinysched.dtype import dtypes
  specs = {int(i): (size, dtypes.from_name(dt)) for i, (size, dt) in job["specs"].items()}
  old = [_Kernel(decode_graph(a.encode())[0], m) for a, m in job["old"]]
  new = [_Kernel(decode_graph(a.encode())[0], m) for a, m in job["new"]]
  compare_bufs = job["outputs"] or sorted({i for k in old + new for i in _written(k.ast, k.bufs)})
  host = {i: seeded_fill(size, dt, job["seed"] + i) for i, (size, dt) in specs.items()}
  names = job["names"]
  try: got_old, t_old = _run_list(device, old, host, specs, names, timing_runs)
  except Exception as e: return {"verdict": "failed", "side": "old", "error": f"{type(e).__name__}: {e}", "log": traceback.format_exc()[-4000:]}
  if job["old"] == job["new"]: got_new, t_new = got_old, t_old  # the same kernels: run them once
  else:
    try: got_new, t_new = _run_list(device, new, host, specs, names, timing_runs)
    except Exception as e: return {"verdict": "failed", "side": "new", "error": f"{type(e).__name__}: {e}", "log": traceback.format_exc()[-4000:]}
  ref = _run_list("NUMPY", old, host, specs, names)[0] if device != "NUMPY" else got_old
  diffs: list[dict[str, Any]] = []
  disagree: set[str] = set()
  max_abs = 0.0
  for i in compare_bufs:
    name = specs[i][1].name
    c = compare(got_old[i], got_new[i], name)
    max_abs = max(max_abs, c["max_abs_err"] or 0.0)
    if not c["equal"]: diffs.append({**c, "buffer": i})
    if not compare(ref[i], got_old[i], name)["equal"]: disagree.add("old")
    if not compare(ref[i], got_new[i], name)["equal"]: disagree.add("new")
  worst = max(diffs, key=lambda d: d["max_abs_err"]) if diffs else {}
  res: dict[str, Any] = {"device": device, "verdict": "mismatch" if diffs else "equivalent", "max_abs_err": worst.get("max_abs_err", max_abs),
                         "max_rel_err": worst.get("max_rel_err"), "n_diff": sum(d["n_diff"] for d in diffs),
                         "first_diff": worst.get("first_diff", []), "buffer": worst.get("buffer"),
                         "disagrees_with_reference": sorted(disagree) or None, "old_kernels": len(old), "new_kernels": len(new)}
  if t_old and t_new: res.update(old_time_s=sum(t_old), new_time_s=sum(t_new))
  return res

def _worker_main(device: str, timing_runs: int) -> None:
  for line in sys.stdin:
    job = json.loads(line)
    try: out = run_job(job, device, timing_runs)
    except Exception as e: out = {"verdict": "failed", "error": f"{type(e).__name__}: {e}", "log": traceback.format_exc()[-4000:]}
    sys.stdout.write(json.dumps({"id": job["id"], **out}, default=str) + "\n")
    sys.stdout.flush()

# *** in the parent ***

def default_device() -> str:
  from tinysched.device import Device
  return Device.DEFAULT

def run_jobs(jobs: list[dict], device: str | None = None, timing_runs: int = 5, timeout_s: float = DEFAULT_TIMEOUT_S,
             progress: Callable[[int, int], None] | None = None, workers: int = 1) -> dict[int, dict]:
  """Run jobs in `workers` worker processes; a job that exceeds `timeout_s` is marked `timeout` and a fresh worker
  continues. Several workers only help on a CPU device; on a GPU they would share (and disturb the timing of) one chip."""
  device = device or default_device()
  if workers > 1 and len(jobs) > 1:
    import concurrent.futures as cf
    parts = [jobs[i::workers] for i in range(workers)]
    done = [0]
    def prog(_: int, __: int) -> None:
      done[0] += 1
      if progress: progress(done[0], len(jobs))
    with cf.ThreadPoolExecutor(workers) as ex:  # threads only wait on worker processes
      futs = [ex.submit(run_jobs, p, device, timing_runs, timeout_s, prog, 1) for p in parts if p]
      out: dict[int, dict] = {}
      for f in futs: out.update(f.result())
    return out
  results: dict[int, dict] = {}
  pending = list(jobs)
  while pending:
    # stderr goes to a file and stdin is fed by a thread: a full pipe (compiler warnings on stderr, big jobs on
    # stdin) must never block the worker while we wait on its stdout
    errf = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen([sys.executable, "-m", "replay.execcheck", "worker", device, str(timing_runs)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=errf, text=True, bufsize=1)
    assert proc.stdin and proc.stdout
    def feed(stdin=proc.stdin, todo=list(pending)) -> None:
      try:
        for j in todo: stdin.write(json.dumps(j) + "\n")
        stdin.close()
      except (BrokenPipeError, ValueError, OSError): pass  # the worker died or was killed: the loop below reports it
    threading.Thread(target=feed, daemon=True).start()
    while pending:
      ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
      if not ready:
        stuck = pending.pop(0)
        results[stuck["id"]] = {"verdict": "timeout", "error": f"no result within {timeout_s:.0f}s (kernel hung?)"}
        proc.kill(); proc.wait()
        break
      line = proc.stdout.readline()
      if not line:  # the worker died (a driver crash): blame the job it was running
        proc.wait()
        errf.seek(0)
        err = errf.read()[-2000:]
        dead = pending.pop(0)
        results[dead["id"]] = {"verdict": "failed", "error": f"worker exited with {proc.returncode}", "log": err}
        break
      out = json.loads(line)
      results[out["id"]] = out
      pending = [p for p in pending if p["id"] != out["id"]]
      if progress: progress(len(results), len(jobs))
    else:
      proc.wait()
  return results

def _workers_for(device: str) -> int:
  if device == "NUMPY": return min(2, os.cpu_count() or 1)
  try:
    from tinysched.device import Device
    return 1 if Device[device].target.is_gpu else min(2, os.cpu_count() or 1)  # type: ignore[attr-defined]
  except Exception: return 1

def exec_report(rep, mode: str = "changed", device: str | None = None, slower_threshold: float = 0.10, timing_runs: int = 5,
                timeout_s: float = DEFAULT_TIMEOUT_S, progress: Callable[[int, int], None] | None = None) -> None:
  """Attach `exec` verdicts to a replay Report: changed captures (mode "changed") or every capture ("all")."""
  from replay.store import Store
  chosen = [r for r in rep.results if r.level in ("kernel", "schedule") and (r.outcome == "changed" or (mode == "all" and r.outcome == "identical"))]
  if not chosen: return
  rows: dict[tuple, dict] = {}
  for db in sorted({r.db for r in chosen}):
    s = Store(db, readonly=True)
    try:
      for row in s.captures(): rows[(db, row["run_id"], row["seq"], row["level"])] = row
    finally: s.close()
  jobs, by_key = [], {}
  for r in chosen:
    row = rows.get((r.db, r.run_id, r.seq, r.level))
    if row is None: continue
    k = (r.db, r.level, r.input_key, r.stored_key)
    if k not in by_key:  # the same input and stored output is run once
      by_key[k] = len(jobs)
      try: job = build_job(r.db, r.level, r.input_key, r.stored_key, row.get("extra"), row.get("var_vals"))
      except Exception as e: job = {"skip": f"cannot build the job: {type(e).__name__}: {e}"}
      jobs.append({"id": len(jobs), **job})
  dev = device or default_device()
  out = run_jobs([j for j in jobs if "skip" not in j], dev, timing_runs, timeout_s, progress, workers=_workers_for(dev))
  for j in jobs:
    if "skip" in j: out[j["id"]] = {"verdict": "skipped", "reason": j["skip"]}
  for r in chosen:
    k = (r.db, r.level, r.input_key, r.stored_key)
    if k in by_key:
      e = dict(out.get(by_key[k], {"verdict": "failed", "error": "no result"}))
      if e.get("old_time_s") and e.get("new_time_s"):
        # relative threshold, plus an absolute floor: tiny kernels are dominated by launch noise
        e["slower"] = e["new_time_s"] > e["old_time_s"] * (1 + slower_threshold) + MIN_SLOWER_S
      r.exec = e

if __name__ == "__main__":
  if len(sys.argv) >= 2 and sys.argv[1] == "worker": _worker_main(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 5)
  else: raise SystemExit("usage: python -m replay.execcheck worker DEVICE [TIMING_RUNS]")
