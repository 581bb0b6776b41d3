"""`replay stats` and `replay show`: look inside a capture store without writing to it."""
from __future__ import annotations
import json, os
from collections import Counter
from replay.store import Store
from replay.encode import parse, decode_kernel_input, decode_schedule_input
from replay.runner import decode_output

def stats(path: str) -> str:
  s = Store(path, readonly=True)
  try:
    runs = s.runs()
    rows = list(s.captures())
    lines = [f"{path}: {os.path.getsize(path)/1e6:.2f} MB, {len(runs)} run(s), {len(rows)} capture(s)"]
    for r in runs:
      lines.append(f"  run {r['id']}: {r['started']} label={r['label'] or '-'} commit={(r['git_commit'] or '?')[:10]}"
                   f"{' (dirty)' if r['git_dirty'] else ''} device={r['device']} levels={r['levels']}")
    per = Counter((r["level"], r["label"] or "-") for r in rows)
    lines.append("captures per level and label:")
    for (lv, lb), n in sorted(per.items()): lines.append(f"  {lv:9s} {lb:24s} {n}")
    kernels = {r["output_key"] for r in rows if r["level"] == "kernel"}
    lines.append(f"distinct kernel ASTs: {len(kernels)}")
    ops = Counter(op for r in rows if r["level"] == "kernel" for op in (r["op_names"] or "").split())
    lines.append("top ops (kernels containing them): " + ", ".join(f"{k} {v}" for k, v in ops.most_common(12)))
    nbytes = s.conn.execute("SELECT coalesce(sum(length(data)),0), coalesce(sum(size),0), count(*) FROM graphs").fetchone()
    lines.append(f"payloads: {nbytes[2]} distinct, {nbytes[0]/1e6:.2f} MB stored ({nbytes[1]/1e6:.2f} MB uncompressed)")
    return "\n".join(lines)
  finally: s.close()

def show(path: str, key: str) -> str:
  s = Store(path, readonly=True)
  try:
    rows = list(s.captures(key=key))
    if not rows: raise KeyError(f"no capture in {path} has an input or output key starting with {key!r}")
    r = rows[0]
    out = [f"{r['level']} capture, label {r['label'] or '-'}, run {r['run_id']} #{r['seq']}",
           f"input  {r['input_key']}", f"output {r['output_key']}"]
    if len(rows) > 1: out.append(f"({len(rows)} captures match {key!r}; showing the first)")
    data = s.blob(r["input_key"])
    if r["level"] == "kernel":
      pre, vv, asg = decode_kernel_input(data)
      out += ["", "var_vals: " + json.dumps({v.arg[0]: x for v, x in vv.items()}), "assigns: " + json.dumps([b.arg[0] for b in asg]),
              "", "== input (pre-sink) ==", pre.pretty()]
    elif r["level"] == "schedule":
      g, vv = decode_schedule_input(data)
      out += ["", "var_vals: " + json.dumps({v.arg[0]: x for v, x in vv.items()}), "", "== input (big graph) ==", g.pretty()]
    else:
      d = parse(data)
      out += ["", "opts: " + json.dumps(d.doc.get("opts")), "target: " + json.dumps(d.doc.get("target")), "", "== input (AST) ==",
              d.roots()[0].pretty()]
    res = decode_output(r["level"], s.blob(r["output_key"]))
    if r["metadata"]: out += ["", f"made by: {r['metadata']}"]
    out += ["", "== output =="]
    if r["level"] == "kernel": out.append(res.pretty())
    elif r["level"] == "schedule": out += [f"-- kernel {i} --\n{a.pretty()}" for i, a in enumerate(res)]
    else: out.append(res)
    return "\n".join(out)
  finally: s.close()
