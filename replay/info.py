"""`replay stats` and `replay show`: look inside a capture store without writing to it.

Both read stores that may be crafted: columns are shown as text whatever their type, and graphs too large
to print (see replay.runner.DETAIL_NODE_LIMIT) are summarized instead, since printing a deep chain is quadratic.
"""
from __future__ import annotations
import json, os
from collections import Counter
from typing import Any
from replay.store import Store
from replay.encode import IncompatibleCapture, _brief
from replay.runner import decode_input, decode_output, _too_big
from tinysched.uop import UOp

def _txt(x: Any, width: int = 40) -> str:
  """A column value for display: any SQLite type, bounded."""
  if x is None: return "-"
  s = x if isinstance(x, str) else _brief(x)
  return s if len(s) <= width else s[:width - 3] + "..."

def stats(path: str) -> str:
  s = Store(path, readonly=True, allow_empty=True)
  try:
    runs = s.runs()
    rows = list(s.captures())
    lines = [f"{path}: {os.path.getsize(path)/1e6:.2f} MB, {len(runs)} run(s), {len(rows)} capture(s)"]
    if not rows: lines.append("  no captures: `replay check` refuses this store; capture again (`replay suite`, `replay capture`)")
    for r in runs:
      lines.append(f"  run {_txt(r['id'])}: {_txt(r['started'])} label={_txt(r['label'])} commit={_txt(r['git_commit'], 10)}"
                   f"{' (dirty)' if r['git_dirty'] == 1 else ''} device={_txt(r['device'])} levels={_txt(r['levels'])}")
    if bad := sum(1 for r in rows if r.get("_invalid")):
      lines.append(f"  {bad} malformed capture row(s): `replay check` reports them as incompatible")
    per = Counter((r["level"], r["label"] or "-") for r in rows)
    lines.append("captures per level and label:")
    for (lv, lb), n in sorted(per.items()): lines.append(f"  {lv:9s} {lb:24s} {n}")
    kernels = {r["output_key"] for r in rows if r["level"] == "kernel"}
    lines.append(f"distinct kernel ASTs: {len(kernels)}")
    ops = Counter(op for r in rows if r["level"] == "kernel" for op in (r["op_names"] or "").split()[:1000])
    lines.append("top ops (kernels containing them): " + ", ".join(f"{_txt(k)} {v}" for k, v in ops.most_common(12)))
    nbytes = s.conn.execute("SELECT coalesce(sum(length(data)),0), coalesce(sum(CASE WHEN typeof(size)='integer' THEN size END),0), "
                            "count(*) FROM graphs").fetchone()
    lines.append(f"payloads: {nbytes[2]} distinct, {nbytes[0]/1e6:.2f} MB stored ({nbytes[1]/1e6:.2f} MB uncompressed)")
    return "\n".join(lines)
  finally: s.close()

def _graph_text(g: UOp) -> str:
  if (why := _too_big([g])) is None: return g.pretty()
  ops = Counter(u.op.name for u in g.toposort())
  return f"(a graph with {why}: not printed; ops: " + ", ".join(f"{k} {v}" for k, v in ops.most_common(8)) + ")"

def find_row(s: Store, path: str, key: str) -> tuple[dict, int]:
  """The one capture whose input or output key starts with `key`, and in how many runs it is (KeyError: none, or several
  different captures match; IncompatibleCapture: a malformed row)."""
  rows = list(s.captures(key=key))
  if not rows: raise KeyError(f"no capture in {path} has an input or output key starting with {key!r}")
  distinct = sorted({(x["level"], x["input_key"], x["output_key"]) for x in rows})
  if len(distinct) > 1:  # like an ambiguous git revision: name the candidates, never guess
    shown = ", ".join(f"{lv} {i[:12]}->{o[:12]}" for lv, i, o in distinct[:10]) + (" ..." if len(distinct) > 10 else "")
    raise KeyError(f"key prefix {key!r} is ambiguous in {path}: {len(distinct)} different captures match ({shown}); give more characters")
  r = rows[0]
  if r.get("_invalid"): raise IncompatibleCapture(r["_invalid"])
  return r, len(rows)

def input_text(s: Store, r: dict) -> str:
  """A capture's input, printed: var_vals, assigns or flags, and the graph (raises IncompatibleCapture)."""
  inputs = decode_input(r["level"], s.blob(r["input_key"]))
  if r["level"] == "kernel":
    pre, vv, asg = inputs
    return "\n".join(["var_vals: " + json.dumps({v.arg[0]: x for v, x in vv.items()}), "assigns: " + json.dumps([b.arg[0] for b in asg]),
                      "", "== input (pre-sink) ==", _graph_text(pre)])
  if r["level"] == "schedule":
    g, vv, flags = inputs
    return "\n".join(["var_vals: " + json.dumps({v.arg[0]: x for v, x in vv.items()})] + ([f"flags: {json.dumps(flags)}"] if flags else []) +
                     ["", "== input (big graph) ==", _graph_text(g)])
  return "\n".join(["opts: " + json.dumps(inputs.doc.get("opts")), "target: " + json.dumps(inputs.doc.get("target")), "",
                    "== input (AST) ==", _graph_text(inputs.roots()[0])])

def show(path: str, key: str) -> str:
  s = Store(path, readonly=True)
  try:
    r, n_runs = find_row(s, path, key)
    out = [f"{r['level']} capture, label {r['label'] or '-'}, run {r['run_id']} #{r['seq']}",
           f"input  {r['input_key']}", f"output {r['output_key']}"]
    if n_runs > 1: out.append(f"(the same capture in {n_runs} runs; showing run {r['run_id']})")
    out += ["", input_text(s, r)]
    res = decode_output(r["level"], s.blob(r["output_key"]))
    if r["metadata"]: out += ["", f"made by: {r['metadata']}"]
    out += ["", "== output =="]
    if r["level"] == "kernel": out.append(_graph_text(res))
    elif r["level"] == "schedule": out += [f"-- kernel {i} --\n{_graph_text(a)}" for i, a in enumerate(res)]
    else: out.append(res)
    return "\n".join(out)
  finally: s.close()
