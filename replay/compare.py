"""`replay diff OLD.db NEW.db`: compare two capture stores made by different code.

Kernel and program captures are matched by (label, input key): the same input seen by both versions;
schedule captures by (label, call order), since a changed front end changes the schedule's input too.
A capture present on one side only is reported as `changed` with a note, because the work itself changed.
"""
from __future__ import annotations
import time
from replay.check import Report
from replay.runner import Result, decode_output
from replay.store import Store
from replay import diff as D

def _index(store: Store) -> dict[tuple, dict]:
  out: dict[tuple, dict] = {}
  sched_pos: dict[str, int] = {}
  for row in store.captures():
    label = row["label"] or ""
    if row["level"] == "schedule":
      pos = sched_pos.get(label, 0)
      sched_pos[label] = pos + 1
      out.setdefault(("schedule", label, pos), row)
    else: out.setdefault((row["level"], label, row["input_key"]), row)
  return out

def compare(old_path: str, new_path: str, level: str | None = None, label: str | None = None, allow_empty: bool = False) -> Report:
  """`allow_empty`: a side with no captures is compared (everything shows as added/removed) instead of refused; `replay
  commits` makes such a side when a commit's suite lacks the models. `replay diff` refuses it: usually a broken store."""
  t0 = time.perf_counter()
  rep = Report(sources=[old_path, new_path], paired=True)
  old, new = Store(old_path, readonly=True, allow_empty=allow_empty), Store(new_path, readonly=True, allow_empty=allow_empty)
  try:
    oi, ni = _index(old), _index(new)
    keys = list(oi) + [k for k in ni if k not in oi]
    for k in keys:
      if (level and k[0] != level) or (label and k[1] != label): continue
      o, n = oi.get(k), ni.get(k)
      row = o or n
      assert row is not None
      # a row only the old store has lives in the old store: name that one in reports
      r = Result(new_path if n is not None else old_path, row["run_id"], row["seq"], k[0], k[1], row["input_key"], o["output_key"] if o else "",
                 new_key=n["output_key"] if n else None, metadata=row.get("metadata"))
      if o is not None and n is not None: r.pair = {"old_db": old_path, "old": [o["run_id"], o["seq"]], "new": [n["run_id"], n["seq"]]}
      if o is None or n is None:
        r.outcome = "changed"
        r.reason = "only in the new capture" if o is None else "only in the old capture"
        r.signature = f"{k[0]}: {r.reason}"
      elif o["output_key"] != n["output_key"]:
        r.outcome = "changed"
        try:
          a, b = decode_output(k[0], old.blob(o["output_key"])), decode_output(k[0], new.blob(n["output_key"]))
          _describe(r, a, b)
        except Exception as e:  # an unreadable side is itself a finding
          r.outcome, r.reason = "incompatible", f"cannot decode: {e}"
      rep.results.append(r)
  finally:
    old.close(); new.close()
  rep.elapsed = time.perf_counter() - t0
  return rep

def _describe(r: Result, a, b) -> None:
  if r.level == "kernel":
    r.changes = D.structural_diff(a, b); r.change_count = len(r.changes)
    r.text_diff = D.text_diff(a.pretty(), b.pretty(), "old", "new")
    r.signature = D.signature("kernel", r.changes)
  elif r.level == "schedule":
    r.kernel_list = D.kernel_list_diff(a, b)
    r.text_diff = D.text_diff("\n\n".join(x.pretty() for x in a), "\n\n".join(x.pretty() for x in b), "old", "new")
    changes: list[dict] = []
    if len(a) == len(b):
      for i, (x, y) in enumerate(zip(a, b)):
        if x is not y: changes += [{**c, "path": f"kernel[{i}].{c['path']}"} for c in D.structural_diff(x, y)]
    r.changes, r.change_count = changes[:50], len(changes)
    r.signature = D.signature("schedule", [{**c, "path": c["path"].split(".", 1)[-1]} for c in changes], r.kernel_list)
  else:
    r.text_diff = D.text_diff(a, b, "old", "new")
    r.signature = "program: source changed"
