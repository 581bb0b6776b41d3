"""The execution verdict of one input's old and new outputs, for `replay minimize`'s "same failure" (issue 41).

A smaller input on which old and new code still differ, and blame still names the same rule, can still be another
failure: a rule that makes some kernels compute wrong numbers and only reorders others would shrink a wrong-number
capture to a cosmetic one. So where the capture's own verdict is a number failure (`mismatch`: old and new compute
different numbers; `wrong`: a side is off the reference), a candidate is kept only if its old and new outputs get the
same verdict at the same output buffer.

The verdict is the execution check's own (replay/execute/judge.run_job on the job the level builds: the old output as
given with what its row would record beside it (the old probe's Level.extra_of: launch sizes, buffer maps), the new one
by this process's code, which is the new code of a minimize), run in a forked child (the device is opened there, never
here). A job that cannot be built answers `skipped`, and then only the blame decides.
"""
from __future__ import annotations
from typing import Any
from replay import levels
from replay.process import forked
from replay.execute.jobs import Sides
from replay.execute.judge import run_job

NUMBER_FAILURES = ("wrong", "mismatch")

def verdict_here(level: str, data: bytes, old_output: bytes, old_extra: dict, device: str, seed: int) -> dict[str, Any]:
  """{"verdict", "buffer"} of input `data` with old output `old_output` (its row's `extra`: launch sizes, buffer map)
  and the current code's, on `device`."""
  lv = levels.get(level)
  names: dict[str, int] = {}
  job = lv.build_job(Sides.given(data, old_output, dict(old_extra)), names)  # (the new side: this process's code)
  if "skip" in job: return {"verdict": "skipped", "why": job["skip"]}
  res = run_job({**job, "level": level, "names": names, "seed": seed}, device, timing_runs=0)
  return {"verdict": res.get("verdict"), "buffer": res.get("buffer"), "why": res.get("error") or res.get("reason")}

def verdict(level: str, data: bytes, old_output: bytes, old_extra: dict, device: str, seed: int) -> dict[str, Any]:
  """verdict_here in a forked child (compiler complaints silenced); a child that died is `failed`."""
  got = forked(lambda: verdict_here(level, data, old_output, old_extra, device, seed), quiet=True)
  return got if isinstance(got, dict) else {"verdict": "failed", "why": "the judging process died"}

__all__ = ["verdict", "verdict_here", "NUMBER_FAILURES"]
