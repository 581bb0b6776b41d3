"""The execution step of the check: which rows get an execution job, each job built by its level with the current
code (or read from two stores for `replay diff`), run by replay.execute, and each verdict attached to its results.

One job per distinct input, stored output and buffer map, in whichever store it is (keys name contents): its verdict is
reported for every capture that shares it."""
from __future__ import annotations
import json, traceback
from typing import Callable
from tinysched.device import Device
from replay import levels, process
from replay.store.encode import IncompatibleCapture, key_of, todays_bytes
from replay.store.sqlite import Store
from replay.execute import pool as exec_pool  # run_jobs looked up at call time: tests plant a stand-in there
from replay.execute.jobs import Sides
from replay.execute.pool import check_device, _workers_for

def build_job(db: str, level: str, input_key: str, stored_key: str, extra: str | None, var_vals: str | None,
              old_db: str | None = None, new_key: str | None = None, new_extra: str | None = None, current: dict | None = None,
              store=None) -> dict:
  """Everything the worker needs, computed here with the current code (or, with old_db/new_key, read from two stores).
  `current`: the current code's output for this input, already computed by the replay (its object under "output",
  plus what the level's `run` puts in `full`); `store`: `db` already open."""
  names = json.loads(var_vals or "{}")
  try: lv = levels.get(level)
  except IncompatibleCapture as e: return {"skip": str(e)}
  own = store is None
  if own: store = Store(db, readonly=True)
  old_store = Store(old_db, readonly=True) if old_db else None
  try:
    sides = Sides(store, input_key, stored_key, json.loads(extra or "{}"), old_store, new_key, json.loads(new_extra or "null"))
    sides.current = None if new_key else current
    job = lv.build_job(sides, names)
  finally:
    if own: store.close()
    if old_store is not None: old_store.close()
  if "skip" in job: return job
  return {**job, "level": level, "names": names, "seed": int(input_key[:8], 16)}

def job_key(db: str, level: str, input_key: str, stored_key: str, extra: str | None, var_vals: str | None,
            old_db: str | None = None, new_key: str | None = None, new_extra: str | None = None) -> tuple:
  """What makes two captures one job: keys name contents, so a check job is the same in whichever store its rows are;
  a paired job (replay diff) also depends on the new row and both stores."""
  return (level, input_key, stored_key, extra, var_vals) + ((db, old_db, new_key, new_extra) if new_key else ())

def build_failure(e: Exception) -> dict:
  return {"verdict": "failed", "error": f"cannot build the job with the current code: {type(e).__name__}: {e}", "log": traceback.format_exc()[-4000:]}

def prebuild(store, row: dict, current: dict) -> tuple[tuple, dict]:
  """(job_key, job) for a row `replay check` has just replayed, from the output it computed (see build_job)."""
  args = (str(store.path), row["level"], row["input_key"], row["output_key"], row.get("extra"), row.get("var_vals"))
  try: job = build_job(*args, current=current, store=store)
  except Exception as e: job = build_failure(e)
  return job_key(*args), job


def _same_input(old_db: str, old_key: str, new_db: str, new_key: str) -> bool:
  """Whether two stored inputs are one input written by two format versions (keys in today's form equal:
  replay/store/upgrade.py), as `replay diff` pairs them across an IR refactor."""
  keys = []
  for db, key in ((old_db, old_key), (new_db, new_key)):
    s = Store(db, readonly=True)
    try: keys.append(key_of(today) if (today := todays_bytes(s.blob(key))) is not None else key)
    except IncompatibleCapture: return False
    finally: s.close()
  return keys[0] == keys[1]

def exec_report(rep, mode: str = "changed", device: str | None = None, slower_threshold: float = 0.10, timing_runs: int = 5,
                timeout_s: float | None = None, progress: Callable[[int, int], None] | None = None) -> None:
  """Attach `exec` verdicts to a replay Report: changed captures (mode "changed") or every capture ("all")."""
  chosen = [r for r in rep.results if r.outcome == "changed" or (mode == "all" and r.outcome == "identical")]
  if not chosen: return
  dev = check_device(device)
  rows: dict[tuple, dict] = {}
  for db in sorted({r.db for r in chosen} | {r.pair["old_db"] for r in chosen if r.pair}):
    s = Store(db, readonly=True)
    try:
      for x in s.captures(): rows[(db, x["run_id"], x["seq"], x["level"])] = x
    finally: s.close()
  runs_source = hasattr(Device[dev], "run_source")
  # jobs `replay check` built while it replayed (from the outputs it had just computed, not computed again)
  prebuilt: dict[tuple, dict] = {}
  for r in rep.results:
    if (pj := r.__dict__.pop("exec_job", None)) is not None: prebuilt.setdefault(pj[0], pj[1])
  jobs: list[dict] = []
  by_key: dict[tuple, int] = {}
  job_of: dict[int, int] = {}  # index in chosen -> job id
  for n, r in enumerate(chosen):
    if levels.get(r.level).runs_stored_source and not runs_source:
      r.exec = {"verdict": "skipped", "reason": f"program-level captures hold OpenCL source: {dev} cannot run it (use --device OPENCL)"}
      continue
    if rep.paired and not r.pair:
      r.exec = {"verdict": "skipped", "reason": "in one store only: nothing to run it against"}
      continue
    new_row: dict | None = None
    if r.pair:  # replay diff: old row in the old store, new row in this one
      row = rows.get((r.pair["old_db"], *r.pair["old"], r.level))
      new_row = rows.get((r.db, *r.pair["new"], r.level))
      if row is None or new_row is None: continue
      if new_row["input_key"] != row["input_key"] and not _same_input(r.pair["old_db"], row["input_key"], r.db, new_row["input_key"]):
        r.exec = {"verdict": "skipped", "reason": "the two captures have different inputs (the front end changed): their kernels' numbers are "
                  "not comparable; model-level rows compare whole calls' numbers across such a change (the `frontend` baseline member, "
                  "python -m replay.record.calls)"}
        continue
    else:
      row = rows.get((r.db, r.run_id, r.seq, r.level))
      if row is None: continue
    # one job per distinct input, stored output and buffer map, in whichever store it is (keys name contents): its
    # verdict is reported for every capture that shares it. Paired jobs also depend on the new row and both stores.
    k = job_key(r.db, r.level, r.input_key, r.stored_key, row.get("extra"), row.get("var_vals"),
                *((r.pair["old_db"], r.new_key, new_row.get("extra")) if new_row is not None else ()))
    if k not in by_key:
      by_key[k] = len(jobs)
      if (job := prebuilt.get(k)) is None:
        try: job = build_job(r.db, r.level, r.input_key, r.stored_key, row.get("extra"), row.get("var_vals"),
                             *((r.pair["old_db"], r.new_key, new_row.get("extra")) if new_row is not None else ()))
        except Exception as e: job = build_failure(e)
      jobs.append({"id": len(jobs), "group": r.db, **job})  # group: which worker should prefer it (see run_jobs)
    job_of[n] = by_key[k]
  runnable = [j for j in jobs if "skip" not in j and "verdict" not in j]
  out = exec_pool.run_jobs(runnable, dev, timing_runs, timeout_s, progress, workers=_workers_for(dev, timing_runs), slower_threshold=slower_threshold)
  for j in jobs:
    if "skip" in j: out[j["id"]] = {"verdict": "skipped", "reason": j["skip"]}
    elif "verdict" in j: out[j["id"]] = {k: v for k, v in j.items() if k != "id"}
  stop = process.stopped()
  # a job without a result was not run because the user stopped the run: not a kernel's failure
  missing = {"verdict": "skipped", "reason": f"not run: the check was stopped ({stop.name})"} if stop else {"verdict": "failed", "error": "no result"}
  for n, r in enumerate(chosen):
    if n in job_of: r.exec = dict(out.get(job_of[n], missing))
