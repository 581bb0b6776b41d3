"""`replay stats` and `replay show`: look inside a capture store without writing to it.

Both read stores that may be crafted: columns are shown as text whatever their type, and graphs too large
to print (see replay.levels.base.DETAIL_NODE_LIMIT) are summarized instead, since printing a deep chain is quadratic.
What they return is escaped for a terminal (replay.report.escape): a stored ESC or CR shows as `\\x1b`, `\\r`.
"""
from __future__ import annotations
import os
from collections import Counter
from typing import Any
from replay.store.sqlite import Store
from replay.store.encode import IncompatibleCapture, _brief
from replay import levels
from replay.levels.base import graphs_too_big
from replay.report import escape as E
from tinysched.uop import UOp

def _txt(x: Any, width: int = 40) -> str:
  """A column value for display: any SQLite type, bounded, on one line."""
  if x is None: return "-"
  s = x if isinstance(x, str) else _brief(x)
  return E.terminal_line(s if len(s) <= width else s[:width - 3] + "...")

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
    for (lv, lb), n in sorted(per.items()): lines.append(f"  {E.terminal_line(lv):9s} {E.terminal_line(lb):24s} {n}")
    kernel_rows = [r for r in rows if _one_kernel(r["level"])]
    lines.append(f"distinct kernel ASTs: {len({r['output_key'] for r in kernel_rows})}")
    ops = Counter(op for r in kernel_rows for op in (r["op_names"] or "").split()[:1000])
    lines.append("top ops (kernels containing them): " + ", ".join(f"{_txt(k)} {v}" for k, v in ops.most_common(12)))
    nbytes = s.conn.execute("SELECT coalesce(sum(length(data)),0), coalesce(sum(CASE WHEN typeof(size)='integer' THEN size END),0), "
                            "count(*) FROM graphs").fetchone()
    lines.append(f"payloads: {nbytes[2]} distinct, {nbytes[0]/1e6:.2f} MB stored ({nbytes[1]/1e6:.2f} MB uncompressed)")
    return E.terminal("\n".join(lines))
  finally: s.close()

def _one_kernel(level: str) -> bool:
  try: return levels.get(level).output_is_kernel
  except Exception: return False  # noqa: BLE001 (a row of an unknown level: counted per level above, nothing more)

def _graph_text(g: UOp) -> str:
  if (why := graphs_too_big([g])) is None: return g.pretty()
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
  level = levels.get(r["level"])
  return level.input_text(level.decode_input(s.blob(r["input_key"])), _graph_text)

def show(path: str, key: str) -> str:
  s = Store(path, readonly=True)
  try:
    r, n_runs = find_row(s, path, key)
    out = [f"{E.terminal_line(r['level'])} capture, label {E.terminal_line(r['label'] or '-')}, run {r['run_id']} #{r['seq']}",
           f"input  {E.terminal_line(r['input_key'])}", f"output {E.terminal_line(r['output_key'])}"]
    if n_runs > 1: out.append(f"(the same capture in {n_runs} runs; showing run {r['run_id']})")
    out += ["", input_text(s, r)]
    level = levels.get(r["level"])
    res = level.decode_output(s.blob(r["output_key"]))
    if r["metadata"]: out += ["", f"made by: {E.terminal_line(r['metadata'])}"]
    out += ["", "== output =="]
    out.append(level.output_text(res, _graph_text))
    return E.terminal("\n".join(out))  # the graphs and source print names and values from the payloads
  finally: s.close()
