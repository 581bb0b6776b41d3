"""`replay diff OLD.db NEW.db`: compare two capture stores made by different code.

Kernel and program captures are matched by (label, input key): the same input seen by both versions. Schedule
captures first by (label, input key) too (the same big graph: a scheduler change), and those left by (label, call
order among the unmatched), since a changed front end changes the schedule's input as well: so one schedule call
more or less on one side does not shift every later pair.
A capture present on one side only is reported as `changed` with a note, because the work itself changed.
"""
from __future__ import annotations
import time
from replay.check.results import Report
from tinysched import capture_hook
from replay.store.encode import IncompatibleCapture, key_of, todays_bytes
from replay import levels
from replay.check.replayer import Result, describe_change
from replay.store.sqlite import Store

def _index(store: Store) -> tuple[dict[tuple, dict], list[tuple[str, dict]]]:
  """(kernel/program rows by (level, label, input key), schedule rows in call order as (label, row))."""
  out: dict[tuple, dict] = {}
  sched: list[tuple[str, dict]] = []
  for row in store.captures():
    label = row["label"] or ""
    # paired by the input's key in today's format (a store written before an IR refactor: replay/store/upgrade.py); outputs
    # are compared that way only where their stored keys differ (below)
    row = {**row, "pair_input": _todays_key(store, row["input_key"])}
    if _paired_by_call(row["level"]): sched.append((label, row))
    else: out.setdefault((row["level"], label, row["pair_input"]), row)
  return out, sched

def _todays_key(store: Store, key: str) -> str:
  """A payload's key in today's format version: its own unless written by an older one (or unreadable: compared as is)."""
  try: today = todays_bytes(store.blob(key))
  except IncompatibleCapture: return key
  return key if today is None else key_of(today)

def _pair_schedules(old: list[tuple[str, dict]], new: list[tuple[str, dict]]) -> tuple[dict[tuple, dict], dict[tuple, dict]]:
  """Keys for both sides' schedule rows: the same (label, input key) pairs first; the rest of a label pair up in call
  order. Keys are ("schedule", label, ("input", key)) or ("schedule", label, ("call", n)); deterministic."""
  def keyed(rows: list[tuple[str, dict]], common: set) -> dict[tuple, dict]:
    out: dict[tuple, dict] = {}
    pos: dict[str, int] = {}
    for label, row in rows:
      if (label, row["pair_input"]) in common:
        out.setdefault(("schedule", label, ("input", row["pair_input"])), row)
        continue
      n = pos.get(label, 0)
      pos[label] = n + 1
      out[("schedule", label, ("call", n))] = row
    return out
  # membership only: the order comes from the rows' call order
  common = {(lb, r["pair_input"]) for lb, r in old} & {(lb, r["pair_input"]) for lb, r in new}
  return keyed(old, common), keyed(new, common)

def compare(old_path: str, new_path: str, level: str | None = None, label: str | None = None, allow_empty: bool = False) -> Report:
  """`allow_empty`: a side with no captures is compared (everything shows as added/removed) instead of refused; `replay
  commits` makes such a side when a commit's suite lacks the models. `replay diff` refuses it: usually a broken store."""
  t0 = time.perf_counter()
  rep = Report(sources=[old_path, new_path], paired=True)
  old, new = Store(old_path, readonly=True, allow_empty=allow_empty), Store(new_path, readonly=True, allow_empty=allow_empty)
  try:
    (oi, os_), (ni, ns) = _index(old), _index(new)
    osk, nsk = _pair_schedules(os_, ns)
    oi, ni = {**oi, **osk}, {**ni, **nsk}
    keys = list(oi) + [k for k in ni if k not in oi]
    for k in keys:
      if (level and k[0] != level) or (label and k[1] != label): continue
      o, n = oi.get(k), ni.get(k)
      row = n if n is not None else o  # (the store the result names: its keys are the ones to read there)
      assert row is not None
      # a row only the old store has lives in the old store: name that one in reports
      r = Result(new_path if n is not None else old_path, row["run_id"], row["seq"], k[0], k[1], row["input_key"], o["output_key"] if o else "",
                 new_key=n["output_key"] if n else None, metadata=row.get("metadata"))
      if o is not None and n is not None: r.pair = {"old_db": old_path, "old": [o["run_id"], o["seq"]], "new": [n["run_id"], n["seq"]]}
      if o is None or n is None:
        r.outcome = "changed"
        r.reason = "only in the new capture" if o is None else "only in the old capture"
        r.signature = f"{k[0]}: {r.reason}"
      elif o["output_key"] != n["output_key"] and _todays_key(old, o["output_key"]) != _todays_key(new, n["output_key"]):
        r.outcome = "changed"
        try: _describe(r, old, o, new, n)
        except Exception as e:  # an unreadable side is itself a finding
          r.outcome, r.reason = "incompatible", f"cannot decode: {e}"
      rep.results.append(r)
  finally:
    old.close(); new.close()
  rep.elapsed = time.perf_counter() - t0
  return rep

def _describe(r: Result, old: Store, o: dict, new: Store, n: dict) -> None:
  """The diffs of a changed pair, described as `replay check` describes a changed capture (replayer.describe_change).
  Its rule attribution re-runs the kernel with the current code, so it only names rules when the current code is
  the code that made the new capture (it reproduces the new output); otherwise they would explain another change."""
  level = levels.get(r.level)
  a, b = level.decode_output(old.blob(o["output_key"])), level.decode_output(new.blob(n["output_key"]))
  data = new.blob(n["input_key"])
  with capture_hook.paused():  # the re-runs must not capture themselves
    describe_change(r, level, data, a, b)
    if r.rules and not _reproduces(level, data, n["output_key"]): r.rules = []

def _paired_by_call(name: str) -> bool:
  try: return levels.get(name).paired_by_call
  except Exception: return False  # noqa: BLE001 (an unknown level pairs by its input key, and replays as incompatible)

def _reproduces(level: levels.Level, data: bytes, output_key: str) -> bool:
  try: return key_of(level.replay_output(data)[1]) == output_key
  except Exception: return False  # noqa: BLE001 (the current code cannot even run it: certainly not the new side's code)
