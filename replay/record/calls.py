"""Capturing model calls (tinysched/models/calls.py) at the model level: one row per call.

    python -m replay.record.calls DB [CALL ...]     # every registered call (or those named) into DB

Each call runs twice: on the default device with the front end traced (its graphs, host data and the functions it ran,
and the numbers stored, judged later on the execution check's device), and in float64 on NUMPY (the reference the stored
numbers are measured against, which sets each output's tolerance). `replay accept` makes `captures/frontend.db` this way
(replay/baseline/extras.py).
"""
from __future__ import annotations
import sys, time
from pathlib import Path
from typing import Callable
from tinysched.device import Device
from replay.execute.calls import REFERENCE_DEVICE, registry, run_call, spec_of
from replay.record.recorder import Capturer

class CallCaptureError(RuntimeError):
  """A model call that could not be captured (its run raised, or the store failed): the store is incomplete."""

def capture_calls(db: str | Path, names: list[str] | None = None, device: str | None = None,
                  log: Callable[[str], None] = lambda s: None) -> int:
  """Capture the named calls (default: all) into `db`; returns how many rows were written. Raises CallCaptureError."""
  calls = registry()
  names = list(calls) if not names else names
  if unknown := [n for n in names if n not in calls]:
    raise CallCaptureError(f"unknown model call(s) {unknown}: registered are {', '.join(calls)}")
  dev = Device.canonicalize(device) if device else Device.DEFAULT
  cap = Capturer(db, label="frontend", levels=("model",))
  try:
    for name in names:
      t0 = time.perf_counter()
      spec = spec_of(calls[name])
      run = run_call(spec, dev, trace=True)
      ref = run_call(spec, REFERENCE_DEVICE, dtype="float64", collect=False)
      cap.label = name
      cap("model", spec, run, {"reference": ref})
      if cap.failed: raise CallCaptureError(f"capturing model call {name} into {db} failed: {cap.failed}")
      log(f"  {name}: {len(run.graphs)} schedule(s), {len(run.functions or {})} front-end functions, "
          f"numbers on {dev}, {time.perf_counter() - t0:.1f}s")
    n = len(cap.rows) + cap.seq
  finally: cap.close()
  if cap.failed: raise CallCaptureError(f"capturing into {db} failed: {cap.failed}")
  return n

if __name__ == "__main__":
  if len(sys.argv) < 2: raise SystemExit("usage: python -m replay.record.calls DB [CALL ...]")
  try: print(f"{capture_calls(sys.argv[1], sys.argv[2:], log=print)} model call(s) captured into {sys.argv[1]}")
  except CallCaptureError as e: raise SystemExit(f"replay: {e}") from None
