"""How `replay check` cuts its rows into chunks for the workers, and the kernel memo the chunks of one check() share:
chunks never split one input, balance two workers on the committed captures, and do not change a verdict; the memo
is one per check() and process, never kept for the next call; the collector is unfrozen after the workers fork."""
import gc, glob, weakref
from pathlib import Path
import pytest
import replay.check.pool as C
from replay.check.pool import check
from replay.store.sqlite import Store

ROOT = Path(__file__).resolve().parents[2]

def _rows(spec: list[tuple[str, int]]) -> list[dict]:
  return [{"level": "schedule", "input_key": k, "run_id": 1, "seq": i, "node_count": n} for i, (k, n) in enumerate(spec)]

def _cost(rows) -> int: return sum(C._cost(r) for r in rows)

def test_chunks_keep_one_input_together_and_stay_near_the_budget():
  spec = [(f"{i % 7:064x}", 10 + 37 * i % 300) for i in range(40)]  # 7 inputs, repeated
  rows = _rows(spec)
  for budget in (1, 100, 500, 10**6):
    chunks = C._chunks("x.db", rows, True, budget)
    assert sorted(r["seq"] for _, rs, *_ in chunks for r in rs) == list(range(40))
    where = {}
    for n, (_, rs, *_) in enumerate(chunks):
      for r in rs: assert where.setdefault(r["input_key"], n) == n  # one input: one chunk
    biggest_input = max(_cost([r for r in rows if r["input_key"] == k]) for k in where)
    for _, rs, *_ in chunks: assert _cost(rs) < budget + biggest_input

def _selected(level="schedule"):
  out = []
  for p in sorted(glob.glob(str(ROOT / "captures" / "*.db"))):
    s = Store(p, readonly=True)
    try: out.append((p, C._select(s, level, None, None, None)))
    finally: s.close()
  return out

def _makespan(tasks, workers: int) -> int:
  # the pool hands chunks out in order to whichever worker is free first
  loads = [0] * workers
  for t in tasks: loads[loads.index(min(loads))] += _cost(t[1])
  return max(loads)

def test_two_workers_share_the_committed_rows_evenly():
  sel = _selected(None)  # every level: the model level's calls cost 20x their nodes (Level.replay_cost)
  total = sum(_cost(rs) for _, rs in sel)
  tasks = C._plan(sel, 2, True, None, False)
  assert _makespan(tasks, 2) <= 0.55 * total
  # (one chunk per store, in store order, as before: 0.73 of the total for one of the two; 0.50 with the chunks)

def test_plant_one_chunk_per_store_goes_red(monkeypatch):
  monkeypatch.setattr(C, "_chunks", lambda path, rows, detail, budget, *a: [(path, rows, detail, *a)] if rows else [])
  monkeypatch.setattr(C, "_plan", lambda sel, jobs, detail, exec_mode, reopt:
                      [t for p, rs in sel for t in C._chunks(p, rs, detail, 0, exec_mode, reopt)])
  with pytest.raises(AssertionError): test_two_workers_share_the_committed_rows_evenly()

def _verdicts(rep):
  return [(r.db, r.run_id, r.seq, r.level, r.input_key, r.outcome, r.new_key) for r in rep.results]

def test_chunking_does_not_change_a_verdict(db, monkeypatch):
  whole = check([str(db)], jobs=1)
  assert whole.results and whole.counts()["identical"] == len(whole.results)
  assert _verdicts(check([str(db)], jobs=2)) == _verdicts(whole)  # the default chunks, two workers
  monkeypatch.setattr(C, "_cost", lambda row: 10**9)  # every input its own chunk
  assert _verdicts(check([str(db)], jobs=1)) == _verdicts(whole)
  assert _verdicts(check([str(db)], jobs=2)) == _verdicts(whole)

def _memos_seen(monkeypatch) -> list:
  seen = []
  orig = C._memo
  monkeypatch.setattr(C, "_memo", lambda: seen.append(m := orig()) or m)
  return seen

def test_one_memo_per_check_never_kept_for_the_next(db, monkeypatch):
  seen = _memos_seen(monkeypatch)
  monkeypatch.setattr(C, "_cost", lambda row: 10**9)  # several chunks in this process
  check([str(db)], jobs=1)
  first = list(seen)
  assert len(first) > 1 and all(m is first[0] for m in first)  # the chunks of one check share it
  assert not first[0].schedules and first[0].max_schedules == 0  # no whole schedules kept (they only hold graphs alive)
  assert C._MEMO is None  # nothing kept once check() returns
  seen.clear()
  check([str(db)], jobs=1)
  assert seen and all(m is not first[0] for m in seen)

def test_plant_a_memo_kept_across_checks_goes_red(db, monkeypatch):
  kept = []
  orig = C._memo
  monkeypatch.setattr(C, "_memo", lambda: kept[0] if kept else kept.append(orig()) or kept[0])
  with pytest.raises(AssertionError): test_one_memo_per_check_never_kept_for_the_next(db, monkeypatch)

def test_the_collector_is_unfrozen_after_the_workers_fork(db, monkeypatch):
  before = gc.get_freeze_count()
  frozen = []
  real_freeze = gc.freeze
  monkeypatch.setattr(C.gc, "freeze", lambda: frozen.append(1) or real_freeze())  # (C.gc is the gc module)
  rep = check([str(db)], jobs=2)
  assert rep.workers == 2 and rep.counts()["identical"] == len(rep.results)
  assert frozen == [1] and gc.get_freeze_count() == before  # frozen for the fork, and unfrozen after

@pytest.mark.parametrize("planted", [False, True])
def test_one_process_check_freezes_and_unfreezes_the_collector(db, monkeypatch, planted):
  """-j1: what is alive when check() starts is frozen for the replay (full collections do not scan it again) and
  unfrozen after it; each row runs with cycle collection paused, and collection is on again afterwards. Planted: the
  unfreeze left out, which the freeze count shows."""
  before, real_unfreeze = gc.get_freeze_count(), gc.unfreeze
  if planted: monkeypatch.setattr(C.gc, "unfreeze", lambda: None)
  seen = []
  real = C.replay_row
  monkeypatch.setattr(C, "replay_row", lambda *a, **k: seen.append((gc.isenabled(), gc.get_freeze_count() > before)) or real(*a, **k))
  try:
    rep = check([str(db)], jobs=1)
    assert rep.workers == 1 and rep.counts()["identical"] == len(rep.results) > 0
    assert seen and all(s == (False, True) for s in seen) and gc.isenabled()
    assert (gc.get_freeze_count() == before) is not planted
  finally: real_unfreeze()  # (the planted one would leave this whole test session frozen)

@pytest.mark.parametrize("jobs", [1, 2])
def test_a_callers_own_freeze_is_kept(db, jobs):
  """A process that froze objects itself (before forking workers of its own) finds them still frozen after check()."""
  gc.freeze()
  try:
    frozen = gc.get_freeze_count()
    assert frozen > 0
    rep = check([str(db)], jobs=jobs)
    # (a frozen object freed by refcount meanwhile leaves the count: an unfreeze would have taken it to 0)
    assert rep.counts()["identical"] == len(rep.results) > 0 and gc.get_freeze_count() > frozen // 2
  finally: gc.unfreeze()

def test_replaying_makes_no_sqlite_utils_database(db, monkeypatch):
  # read-only stores make theirs on first use (replay reads through plain SQL; the first one loads plugins)
  import replay.store.sqlite as S
  def refuse(conn): raise AssertionError("a sqlite_utils.Database was made for a read-only replay")
  monkeypatch.setattr(S.sqlite_utils, "Database", refuse)
  rep = check([str(db)], jobs=1)
  assert rep.counts()["identical"] == len(rep.results) > 0
  monkeypatch.undo()
  s = Store(db, readonly=True)
  try: assert s.db.table_names()  # (still there when asked for)
  finally: s.close()

@pytest.mark.parametrize("planted", [False, True])
def test_cycles_rows_make_are_freed_within_a_chunk(monkeypatch, planted):
  """Collection is paused for a whole chunk, not only per row; whatever cycles rows make after all (code under test
  may make some) are collected every COLLECT_EVERY rows, so a long chunk does not keep them all. Planted: the in-chunk
  collection left out, and every row's cycle is still alive at the chunk's end."""
  class Cycle:
    def __init__(self): self.me = self
  alive = weakref.WeakSet()
  def row_making_a_cycle(store, row, *a, **k):
    assert not gc.isenabled()
    alive.add(Cycle())
    return C.Result("x.db", row["run_id"], row["seq"], row["level"], "", row["input_key"], "o")
  monkeypatch.setattr(C, "replay_row", row_making_a_cycle)
  monkeypatch.setattr(C, "COLLECT_EVERY", 4)
  if planted: monkeypatch.setattr(C.gc, "collect", lambda generation=2: 0)
  rows = [{**r, "output_key": "o"} for r in _rows([(f"{i:064x}", 10) for i in range(20)])]
  gc.disable()
  try: out = C._replay_rows(None, rows, True, None, False, None)
  finally: gc.enable()
  assert len(out) == 20
  assert (len(alive) > 4) is planted  # at most the rows since the last collection

@pytest.mark.parametrize("planted", [False, True])
def test_the_workers_memo_is_made_without_cycle_collection(db, monkeypatch, planted):
  """-j2: the memo the workers inherit is made in the parent with cycle collection paused (its imports would set off a
  full collection of everything loaded, ~25 ms, a tenth of a schedule-level check). Planted: the pause left out."""
  import os
  parent, seen = os.getpid(), []
  real = C._memo
  monkeypatch.setattr(C, "_memo", lambda: (seen.append(gc.isenabled()) if os.getpid() == parent else None) or real())
  if planted: monkeypatch.setattr(C, "cycle_gc_paused", __import__("contextlib").nullcontext)
  rep = check([str(db)], jobs=2)
  assert rep.workers == 2 and rep.counts()["identical"] == len(rep.results)
  assert seen == [planted] and gc.isenabled()
