"""`replay check`: replay every stored capture of one or more stores, in parallel, and group the changes."""
from __future__ import annotations
import gc, hashlib, multiprocessing as mp, os, time
from typing import Any, Callable
from replay.store.sqlite import Store, StoreError
from replay import levels, process
from replay.check.execution import prebuild
from replay.check.replayer import replay_row
from replay.check.results import Report, Result
from tinysched.schedule import cycle_gc_paused
from tinysched.scheduling.kernel_ast import KernelMemo

def shard_of(key: str, n: int) -> int:
  """Deterministic shard of a capture: by its input key, so shards are stable across machines and runs."""
  return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % n

def _select(store: Store, level: str | None, label: str | None, key: str | None, shard: tuple[int, int] | None) -> list[dict]:
  rows = list(store.captures(level=level, label=label, key=key))
  if shard is not None: rows = [r for r in rows if shard_of(f"{r['level']}:{r['input_key']}", shard[1]) == shard[0]]
  return rows

# the kernel rewrites one process has done during one check(), shared by every chunk it replays (a chunk used to get a
# fresh memo: a store cut into several chunks, or two stores of one model, rewrote the same kernels again). KernelMemo is
# keyed by the canonical kernel, so sharing it across rows is what one chunk always did; a memo never outlives the
# check() that made it (a later call may run patched code the fingerprint does not see). It keeps no whole schedules:
# every row is a new input here (repeats are copied below), so they would only keep each row's graph alive, and a row
# of another store with the same input must be scheduled again.
_MEMO: Any = None

def _memo() -> Any:
  global _MEMO
  _MEMO = KernelMemo.kept(_MEMO, max_schedules=0)  # once per chunk: the rules cannot change in the middle of one
  return _MEMO

def _work(args: tuple[str, list[dict], bool, str | None, bool]) -> list[Result]:
  path, rows, detail, exec_mode, reoptimize = args
  kernels = _memo()
  store = Store(path, readonly=True)
  try:
    # no cycle collection while a chunk replays: decoding and scheduling build acyclic graphs, freed by refcount (the one
    # cycle scheduling makes, the walks kept on pre-sinks, is broken explicitly), so collections between rows found
    # nothing and only scanned the kernel memo's ASTs again as they aged (one second-generation pass 29 ms, ~5% of a
    # schedule-level check). Every COLLECT_EVERY rows the young generation is collected: whatever cycles those rows
    # made after all (code under test may make some) are freed within the chunk, and the memo is not scanned again
    with cycle_gc_paused(): return _replay_rows(store, rows, detail, exec_mode, reoptimize, kernels)
  finally: store.close()

COLLECT_EVERY = 256

def _replay_rows(store: Store, rows: list[dict], detail: bool, exec_mode: str | None, reoptimize: bool, kernels: Any) -> list[Result]:
  out: list[Result] = []
  memo: dict[tuple, Result] = {}
  for n, row in enumerate(rows, 1):
    if n % COLLECT_EVERY == 0 and not gc.isenabled(): gc.collect(0)
    try: extra = levels.get(row["level"]).replay_key(row, reoptimize)  # e.g. --reoptimize: the host facts the row recorded
    except Exception: extra = ()  # noqa: BLE001 (an unknown level: replay_row says it is incompatible)
    k: tuple = (row["level"], row["input_key"]) + extra
    if (m := memo.get(k)) is not None and m.stored_key == row["output_key"]:
      # the same input replayed once: copy the verdict for this row
      out.append(Result(**{**m.to_dict(), "run_id": row["run_id"], "seq": row["seq"], "label": row["label"] or "",
                           "metadata": row.get("metadata")}))
      continue
    full: dict | None = {} if exec_mode else None
    r = replay_row(store, row, detail, full, kernels, reoptimize)
    if full and (r.outcome == "changed" or (exec_mode == "all" and r.outcome == "identical")):
      # the execution check's job, from the output just computed; exec_report takes it (never in a report)
      r.exec_job = prebuild(store, row, {"output": full.pop("output"), **full, "identical": r.outcome == "identical"})  # type: ignore[attr-defined]
    memo[k] = r
    out.append(r)
  return out

def check(paths: list[str], level: str | None = None, label: str | None = None, key: str | None = None, jobs: int | None = None,
          shard: tuple[int, int] | None = None, detail: bool = True, progress: Callable[[int, int], None] | None = None,
          exec_mode: str | None = None, reoptimize: bool = False) -> Report:
  """Replay every selected row of `paths` with the current code. `exec_mode` ("changed" or "all", as exec_report will
  be called): also build the execution check's jobs while the current outputs are at hand. `reoptimize`: program rows
  choose their opts with the current heuristic instead of replaying the stored ones (replay/check/replayer.py replay_row)."""
  global _MEMO
  rep = Report(sources=[str(p) for p in paths], shard=f"{shard[0]}/{shard[1]}" if shard else None)
  t0 = time.perf_counter()
  selected: list[tuple[str, list[dict]]] = []
  for p in paths:
    try: store = Store(p, readonly=True)
    except StoreError as e:
      rep.fatal.append(str(e))
      continue
    try:
      selected.append((str(p), _select(store, level, label, key, shard)))
      rep.accepted += [{**a, "db": str(p)} for a in store.accepts()]
    finally: store.close()
  jobs = max(1, jobs or os.cpu_count() or 1)
  tasks = _plan(selected, jobs, detail, exec_mode, reoptimize)
  total = sum(len(t[1]) for t in tasks)
  rep.workers = min(jobs, max(1, len(tasks)))
  done = 0
  _MEMO = None  # (see _memo: one per check() and process)
  try:
    # (a caller that froze objects itself keeps them frozen: then nothing is frozen or unfrozen here)
    freeze = gc.get_freeze_count() == 0
    if rep.workers == 1:
      # what is alive now (modules, the caller's objects) is not scanned again by each full collection during the replay,
      # as in forked workers (below); it returns to the collector afterwards
      if freeze: gc.freeze()
      try:
        for t in tasks:
          rep.results += _work(t)
          done += len(t[1])
          if progress: progress(done, total)
      finally:
        if freeze: gc.unfreeze()
    else:
      # the memo made here (its fingerprint imports the scheduler's and codegen's modules) is inherited by the workers:
      # each would otherwise import (compile, without .pyc files) those modules again. Without cycle collection: an
      # import allocates enough to set off a full collection of everything the CLI has loaded (~25 ms, a tenth of a
      # schedule-level check), which finds nothing; what is alive is frozen for the workers right after
      with cycle_gc_paused(): _memo()
      # the workers are forked: objects the collector never moves stay shared with this process, instead of being
      # copied page by page into each worker when its first collections touch them
      if freeze: gc.freeze()
      try: pool = mp.get_context("fork").Pool(rep.workers, initializer=process.ignore_in_forked_worker)
      finally:
        if freeze: gc.unfreeze()
      with pool:  # a stop (process.Stopped, below) leaves the block by terminating the workers
        for res in pool.imap_unordered(_work, tasks):
          rep.results += res
          done += len(res)
          if progress: progress(done, total)
  except process.Stopped as e: rep.stopped = e.name  # what was replayed stands; the rest is counted as not replayed
  finally: _MEMO = None
  rep.selected = total
  rep.results.sort(key=lambda r: (r.db, r.run_id, r.seq, r.level, r.input_key))
  rep.elapsed = time.perf_counter() - t0
  return rep

def _plan(selected: list[tuple[str, list[dict]]], jobs: int, detail: bool, exec_mode: str | None,
          reoptimize: bool) -> list[tuple[str, list[dict], bool, str | None, bool]]:
  """The chunks of (store path, its selected rows), in the order they are handed out: about four per worker by
  estimated cost, whatever the stores' sizes (one store per chunk left one worker with most of 65 rows), the costliest
  first (so none is left alone for the end)."""
  budget = sum(_cost(r) for _, rows in selected for r in rows) / (4 * jobs)
  tasks = [t for p, rows in selected for t in _chunks(p, rows, detail, budget, exec_mode, reoptimize)]
  tasks.sort(key=lambda t: (-sum(_cost(r) for r in t[1]), t[0], t[1][0]["level"], t[1][0]["input_key"]))
  return tasks

def _cost(row: dict) -> int:
  """A row's replay cost in arbitrary units, to balance chunks (Level.replay_cost)."""
  try: return levels.get(row["level"]).replay_cost(row)
  except Exception: return 120  # noqa: BLE001 (an unknown level: replay_row says it is incompatible, at no cost)

def _chunks(path: str, rows: list[dict], detail: bool, budget: float, exec_mode: str | None = None,
            reoptimize: bool = False) -> list[tuple[str, list[dict], bool, str | None, bool]]:
  """Chunks of about `budget` estimated cost (see _cost), never splitting rows of one input."""
  # rows with the same input go to one chunk so they are replayed once
  rows = sorted(rows, key=lambda r: (r["level"], r["input_key"], r["run_id"], r["seq"]))
  out: list[tuple[str, list[dict], bool, str | None, bool]] = []
  cur: list[dict] = []
  cost = 0
  for r in rows:
    if cur and cost >= budget and (cur[-1]["level"], cur[-1]["input_key"]) != (r["level"], r["input_key"]):
      out.append((path, cur, detail, exec_mode, reoptimize)); cur, cost = [], 0
    cur.append(r)
    cost += _cost(r)
  if cur: out.append((path, cur, detail, exec_mode, reoptimize))
  return out
