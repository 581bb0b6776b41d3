"""Replaying one stored capture through the current code.

Outcomes: `identical` (same output key), `changed` (a different output: diffs attached), `error` (the
current code raised: the traceback is kept), `incompatible` (the stored input cannot be decoded by this
code: the reason is kept), `unstable` (set by replay/check/determinism.py, on by default
for changed rows and a sample, every row with --twice: the same input gave different outputs in another process with
another PYTHONHASHSEED and allocation order). Replaying never writes to the store.

Blame: only an exception raised while running the current code on a decoded input is an `error` (a regression
to fix). A stored input or output that cannot be read or decoded, for whatever reason, is `incompatible`: a bad
capture must never read as the user's bug, nor as a reviewable change that `[replay:accept]` could wave through.
"""
from __future__ import annotations
import traceback
from typing import Any
from tinysched import capture_hook
from replay import levels
from replay.levels import Change, Level
from replay.store.encode import IncompatibleCapture, in_todays_form, key_of
from replay.store.sqlite import Store
from replay.check.results import Result

def replay_row(store: Store, row: dict, detail: bool = True, full: dict | None = None, memo: Any = None, reoptimize: bool = False) -> Result:
  """Replay one stored row with the current code. `full`, `memo`: see Level.run (`full` is filled when the current
  code ran). `reoptimize`: rows of a level that can choose its optimizations again do so (Level.reoptimizes); one that
  cannot says why in `note`; a changed row names the stored and the chosen choices first in its diff and signature."""
  res = Result(str(store.path), row["run_id"], row["seq"], row["level"], row["label"] or "", row["input_key"], row["output_key"],
               metadata=row.get("metadata"))
  def incompatible(why: str) -> Result:
    res.outcome, res.reason = "incompatible", why
    return res
  if row.get("_invalid"): return incompatible(row["_invalid"])
  try: level = levels.get(row["level"])
  except IncompatibleCapture as e: return incompatible(str(e))
  with capture_hook.paused():  # replaying must not capture itself
    try: inputs = level.decode_input(data := store.blob(row["input_key"]))
    except IncompatibleCapture as e: return incompatible(str(e))
    except Exception as e:  # noqa: BLE001 (the decoder raises only IncompatibleCapture; anything else is still the input's fault)
      return incompatible(f"stored input cannot be decoded ({type(e).__name__}: {e})")
    if level.wants_row: full = {} if full is None else full
    if full is not None: full["inputs"] = inputs  # the execution check's job builder needs them too (replay.check.execution)
    if level.wants_row: full["row_extra"] = row.get("extra")  # type: ignore[index]
    reopt = level.reoptimizes(row, reoptimize)[0]
    if reopt and full is None: full = {}  # the chosen choices are in what `run` fills (described below)
    try: new, new_bytes, res.note = level.run_row(inputs, row, reoptimize, full, memo)
    except IncompatibleCapture as e: return incompatible(str(e))
    except Exception as e:  # the code under test raised: that is the finding, keep going
      res.outcome, res.reason, res.traceback = "error", f"{type(e).__name__}: {e}", traceback.format_exc()
      return res
    if full is not None: full["output"] = new
    res.new_key = key_of(new_bytes)
    if res.new_key == row["output_key"]: return res
    # a different output is only a reviewable change if the stored one can be read: otherwise nobody can say what changed
    try:
      stored = store.blob(res.stored_key)
      # written by an older format version: the same output in today's form is identical (replay/store/upgrade.py)
      if (today := in_todays_form(stored)) is not None and key_of(today) == res.new_key: return res
      old = level.decode_output(stored)
    except Exception as e:  # noqa: BLE001 (as for inputs)
      why = str(e) if isinstance(e, IncompatibleCapture) else f"{type(e).__name__}: {e}"
      res.signature = f"{res.level}: stored output unreadable"
      return incompatible(f"stored output unreadable: {why}")
    res.outcome = "changed"
    if detail: describe_change(res, level, data, old, new, reopt, full)
    return res

TOO_BIG = ("(no detailed diff: the stored or the current output has {why}; stored output {stored}, current {current}; look at both "
           "with `replay show`)")

def describe_change(res: Result, level: Level, data: bytes, old: Any, new: Any, reoptimized: bool = False, full: dict | None = None) -> None:
  """Diffs of a changed capture and the rules behind it: `old` is the decoded stored output (the callers have read it:
  one that cannot be read is `incompatible`, never described)."""
  too_big = TOO_BIG.replace("{stored}", res.stored_key[:16]).replace("{current}", (res.new_key or "")[:16])
  ch, rules = level.describe(data, old, new, full, reoptimized, ("stored", "current"), too_big)
  take(res, ch)
  res.rules = rules

def take(res: Result, ch: Change) -> None:
  """A level's description of a change, into the result that reports it."""
  res.signature, res.text_diff, res.changes, res.change_count = ch.signature, ch.text_diff, ch.changes, ch.change_count
  res.kernel_list = ch.kernel_list

def describe_diff(res: Result, level: Level, old: Any, new: Any, names: tuple[str, str] = ("stored", "current"), prefix: str = "") -> None:
  """The diff from output `old` to output `new` into `res` (no rules), bounded in size as a changed row's is."""
  take(res, level.bounded_diff(old, new, names, prefix)[0])
