"""The HTML report (`--report-html FILE`, `replay show DB KEY --html FILE`): one self-contained page, inline CSS and JS,
nothing fetched from the network, for a CI run to upload as an artifact.

- At the top, the summary by verdict class, each with its own colour and icon; failures (wrong, mismatch, unstable,
  failed, timeout, errors, incompatible captures, perf regressions, unreadable stores) first and red, each failing
  capture named with the command to run next.
- Every group (failing groups first, then largest first: replay.report.text.ordered_groups) with its count and all its
  members; collapsible (`<details>`), and a search box that filters the groups by text.
- Per group: the deepdiff paths with full values, the old/new printed AST or program source side by side with
  intra-line highlights (difflib), exec statistics and timing per member; for each changed kernel- or schedule-level
  capture a drawing of the stored and the current AST with the changed nodes marked (replay/report/drawing.py: graphviz;
  where graphviz cannot draw, the page says why).

Deterministic: the same report, drawings and `generated` text give byte-identical HTML (no clock, no ids of objects,
no set order). The page runs a self-check when opened with `#selftest` (the result goes into `#selftest` and the body's
`data-selftest`), and `#search=TEXT` opens it filtered.
"""
from __future__ import annotations
import difflib, html, json
from typing import Any
from replay import levels
from replay.store.sqlite import Store
from replay.check.replayer import replay_row
from replay.check.results import Report
from replay.check.results import Result
from replay.report import drawing, text as R
from replay.report.drawing import result_key
from replay.report.info import find_row, input_text
from replay.execute.verdicts import FAIL_VERDICTS

# verdict classes: (icon, label, foreground, background), failures first
CLASSES: dict[str, tuple[str, str, str, str]] = {
  "fatal": ("☠", "unreadable store", "#ffffff", "#5c0011"),
  "wrong": ("✖", "wrong (off the reference)", "#ffffff", "#a50e0e"),
  "mismatch": ("≠", "mismatch (old ≠ new)", "#ffffff", "#d93025"),
  "unstable": ("↯", "unstable", "#ffffff", "#8e24aa"),
  "failed": ("⚠", "failed to run", "#ffffff", "#c5221f"),
  "timeout": ("⌛", "timeout", "#ffffff", "#9c4221"),
  "error": ("✖", "error (code raised)", "#ffffff", "#b31412"),
  "incompatible": ("⊘", "incompatible", "#ffffff", "#a04000"),
  "perf": ("▼", "slower (--perf-gate)", "#ffffff", "#b3541e"),
  "changed": ("△", "changed, to review", "#3c2a00", "#fbbc04"),
  "equivalent": ("≈", "changed, same numbers", "#ffffff", "#1967d2"),
  "skipped": ("–", "not executed", "#202124", "#dadce0"),
  "identical": ("✓", "identical", "#ffffff", "#188038"),
}
FAILING = ("fatal", *FAIL_VERDICTS, "error", "incompatible", "perf")
MEMBER_DETAILS = 200  # members of one group whose own diff and drawing are shown (after the example); the others: one table row each

def _e(x: Any) -> str: return html.escape(str(x), quote=True)

def _badge(cls: str, text: str | None = None) -> str:
  icon, label, _, _ = CLASSES[cls]
  return f'<span class="badge v-{cls}">{icon} {_e(text if text is not None else label)}</span>'

def class_counts(rep: Report) -> dict[str, int]:
  """Captures per verdict class, every class listed (zeros included), failures first."""
  c = rep.counts()
  out = {k: 0 for k in CLASSES}
  out["fatal"] = len(rep.fatal)
  out["error"], out["incompatible"], out["identical"] = c["error"], c["incompatible"], c["identical"]
  out["unstable"] = c["unstable"]  # the outcome (the determinism check); changed captures whose exec is unstable are added below
  for r in rep.results:
    v = (r.exec or {}).get("verdict")
    if r.outcome == "identical" and v in FAIL_VERDICTS: out["identical"] -= 1; out[v] += 1  # --exec all: unchanged, yet failing
    if r.outcome != "changed": continue
    out[v if v in out and v not in ("identical", "error", "incompatible", "fatal") else "changed"] += 1
  out["perf"] = len(rep.perf_failures())
  return out

def group_class(g: dict) -> str:
  """The class a group shows as: its worst failure, else changed-equivalent / changed-to-review / its outcome."""
  if f := R.group_failures(g): return f[0]
  verdicts = [(m.exec or {}).get("verdict") for m in g["members"]]
  if g["outcome"] == "changed" and verdicts and all(v == "equivalent" for v in verdicts): return "equivalent"
  return "changed" if g["outcome"] == "changed" else g["outcome"]

# *** side by side diffs ***

def _inline(a: str, b: str) -> tuple[str, str]:
  """Two lines with their differing parts marked (<del> in the old one, <ins> in the new one)."""
  sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
  oa, ob = [], []
  for tag, i1, i2, j1, j2 in sm.get_opcodes():
    if tag == "equal":
      oa.append(_e(a[i1:i2])); ob.append(_e(b[j1:j2]))
      continue
    if i2 > i1: oa.append(f"<del>{_e(a[i1:i2])}</del>")
    if j2 > j1: ob.append(f"<ins>{_e(b[j1:j2])}</ins>")
  return "".join(oa), "".join(ob)

def _parse_hunks(text_diff: str) -> list[tuple[int, int, list[str]]] | None:
  """A unified diff -> [(old start, new start, lines)], or None when it is not one."""
  hunks: list[tuple[int, int, list[str]]] = []
  for ln in text_diff.splitlines():
    if ln.startswith("@@"):
      try:
        old, new = ln.split()[1:3]
        hunks.append((int(old[1:].split(",")[0]), int(new[1:].split(",")[0]), []))
      except (ValueError, IndexError): return None
    elif hunks: hunks[-1][2].append(ln)
  return hunks or None

def side_by_side(text_diff: str, old_name: str = "stored", new_name: str = "current") -> str:
  """A unified diff as a two-column table: removed lines beside the added lines they became, with intra-line highlights."""
  hunks = _parse_hunks(text_diff)
  if hunks is None: return f'<pre class="note">{_e(text_diff)}</pre>'
  rows = [f'<table class="sbs"><thead><tr><th class="ln"></th><th>{_e(old_name)}</th><th class="ln"></th><th>{_e(new_name)}</th></tr></thead><tbody>']
  def row(cls: str, on: Any, ot: str, nn: Any, nt: str) -> None:
    rows.append(f'<tr class="{cls}"><td class="ln">{on}</td><td class="o">{ot}</td><td class="ln">{nn}</td><td class="n">{nt}</td></tr>')
  for o_no, n_no, lines in hunks:
    row("hunk", "", f"@@ line {o_no}", "", f"@@ line {n_no}")
    i = 0
    while i < len(lines):
      ln = lines[i]
      if ln.startswith("\\"): i += 1; continue  # "\ No newline at end of file"
      if not ln.startswith(("-", "+")):
        t = _e(ln[1:])
        row("same", o_no, t, n_no, t); o_no += 1; n_no += 1; i += 1
        continue
      dels, adds = [], []
      while i < len(lines) and lines[i].startswith("-"): dels.append(lines[i][1:]); i += 1
      while i < len(lines) and lines[i].startswith("+"): adds.append(lines[i][1:]); i += 1
      for k in range(max(len(dels), len(adds))):
        a, b = (dels[k] if k < len(dels) else None), (adds[k] if k < len(adds) else None)
        if a is not None and b is not None:
          ha, hb = _inline(a, b)
          row("chg", o_no, ha, n_no, hb); o_no += 1; n_no += 1
        elif a is not None: row("del", o_no, f"<del>{_e(a)}</del>", "", ""); o_no += 1
        else: row("add", "", "", n_no, f"<ins>{_e(b)}</ins>"); n_no += 1
  rows.append("</tbody></table>")
  return "\n".join(rows)

def _changes_table(changes: list[dict], count: int) -> str:
  if not changes: return ""
  out = ['<table class="changes"><thead><tr><th>change</th><th>deepdiff path</th><th>stored</th><th>current</th></tr></thead><tbody>']
  for ch in changes:
    o, n = _inline(str(ch["old"]), str(ch["new"])) if ch["old"] is not None and ch["new"] is not None else (_e(ch["old"]), _e(ch["new"]))
    out.append(f'<tr><td>{_e(ch["kind"])}</td><td><code>{_e(ch["path"])}</code></td><td class="o"><code>{o}</code></td>'
               f'<td class="n"><code>{n}</code></td></tr>')
  out.append("</tbody></table>")
  if count > len(changes):
    out.append(f'<p class="note">{count - len(changes)} more structural changes (the report keeps the first {len(changes)})</p>')
  return "\n".join(out)

# *** execution statistics ***

def _fmt(x: Any, unit: str = "") -> str:
  if x is None: return "–"
  if isinstance(x, float): return f"{x:.3g}{unit}"
  return f"{x}{unit}"

def _us(s: float | None) -> str: return "–" if not s else f"{s * 1e6:.1f} µs"

def _exec_cells(r: Result) -> str:
  e = r.exec or {}
  if not e: return '<td>–</td><td>–</td><td>–</td><td>–</td><td>–</td>'
  v = e.get("verdict", "?")
  badge = _badge(v if v in CLASSES else "skipped", v)
  err = f'{_fmt(e.get("max_abs_err"))} / {_fmt(e.get("max_rel_err"))}'
  diff = f'{_fmt(e.get("n_diff"))} at {_e(e.get("first_diff"))}' if e.get("n_diff") else "–"
  t = f'{_us(e.get("old_time_s"))} → {_us(e.get("new_time_s"))}' if e.get("old_time_s") or e.get("new_time_s") else "–"
  flag = " SLOWER" if e.get("slower") else (" faster" if e.get("faster") else "")
  noise = f' (noise {100 * (e.get("noise") or 0):.0f}%){flag}' if t != "–" else ""
  return f'<td>{badge}</td><td>{err}</td><td>{diff}</td><td>{t}{_e(noise)}</td><td class="detail">{_e(R._exec_line(r))}</td>'

def _kernel_times(r: Result) -> str:
  e = r.exec or {}
  o, n = e.get("old_kernel_times_s") or [], e.get("new_kernel_times_s") or []
  if len(o) + len(n) <= 1: return ""
  rows = "".join(f"<tr><td>{i}</td><td>{_us(o[i] if i < len(o) else None)}</td><td>{_us(n[i] if i < len(n) else None)}</td></tr>"
                 for i in range(max(len(o), len(n))))
  return f'<table class="times"><thead><tr><th>kernel</th><th>stored</th><th>current</th></tr></thead><tbody>{rows}</tbody></table>'

# *** one change: facts, diffs, drawings ***

def _drawing_html(d) -> str:
  if d is None: return ""
  out = []
  if d.note: out.append(f'<p class="note drawing-note">{_e(d.note)}</p>')
  for title, a, b in d.pairs:
    legend = '<span class="legend"><span class="sw changed"></span> changed here <span class="sw affected"></span> differs (above a change)</span>'
    out.append(f'<div class="drawing"><div class="dtitle">{_e(title)} {legend}</div><div class="dpair">'
               f'<figure><figcaption>stored</figcaption>{a or "<p class=note>(no such kernel)</p>"}</figure>'
               f'<figure><figcaption>current</figcaption>{b or "<p class=note>(no such kernel)</p>"}</figure></div></div>')
  return "\n".join(out)

def change_html(rep: Report, r: Result, drawings: dict | None) -> str:
  """Everything the report knows about one non-identical capture."""
  out = [f'<dl class="facts"><dt>capture</dt><dd>{_e(r.label or "-")} {_e(r.level)} input <code>{_e(r.input_key)}</code> in '
         f'<code>{_e(r.db)}</code> (run {r.run_id} #{r.seq})</dd>',
         f'<dt>output</dt><dd>stored <code>{_e(r.stored_key[:16] or "–")}</code> → current <code>{_e((r.new_key or "–")[:16])}</code></dd>',
         f'<dt>next</dt><dd><code>{_e(R.next_command(rep, r))}</code></dd>']
  if r.metadata: out.append(f"<dt>made by</dt><dd><code>{_e(r.metadata)}</code></dd>")
  if r.rules: out.append(f"<dt>rules</dt><dd><code>{_e(', '.join(r.rules))}</code></dd>")
  if r.kernel_list and (r.kernel_list.get("removed") or r.kernel_list.get("added")):
    kl = r.kernel_list
    out.append(f"<dt>kernels</dt><dd>{kl['old_count']} → {kl['new_count']}; only stored: {_e([k['outputs'] for k in kl['removed']])}; "
               f"only current: {_e([k['outputs'] for k in kl['added']])}</dd>")
  if r.exec: out.append(f"<dt>exec</dt><dd>{_e(R._exec_line(r))}</dd>")
  out.append("</dl>")
  out.append(_kernel_times(r))
  if r.reason: out.append(f'<pre class="reason">{_e(r.reason)}</pre>')
  if r.traceback: out.append(f'<details class="tb"><summary>traceback</summary><pre>{_e(r.traceback)}</pre></details>')
  if (log := (r.exec or {}).get("log")): out.append(f'<details class="tb"><summary>exec log</summary><pre>{_e(log)}</pre></details>')
  out.append(_changes_table(r.changes, r.change_count))
  if r.text_diff:
    what = _output_words(r.level)
    out.append(f'<h4>{what}, stored vs current</h4>' + side_by_side(r.text_diff))
  if drawings is not None: out.append(_drawing_html(drawings.get(result_key(r))))
  return "\n".join(x for x in out if x)

def _output_words(level: str) -> str:
  try: return levels.get(level).output_words
  except Exception: return "printed output"  # noqa: BLE001 (a row of an unknown level)

def _graph_output(level: str) -> bool:
  try: return levels.get(level).graph_output
  except Exception: return False  # noqa: BLE001 (a row of an unknown level has no graph)

# *** the page ***

def _search_text(g: dict) -> str:
  parts = [g["outcome"], g["signature"], group_class(g)]
  for m in g["members"]:
    parts += [m.label, m.level, m.input_key[:16], m.db, (m.exec or {}).get("verdict") or "", m.metadata or "", " ".join(m.rules)]
  seen, out = set(), []
  for p in parts:
    if p and p not in seen: seen.add(p); out.append(p)
  return " ".join(out).lower()

def _group_html(rep: Report, i: int, g: dict, drawings: dict | None) -> str:
  cls = group_class(g)
  fail = cls in FAILING
  ex: Result = g["example"]
  vs = R.verdict_summary(g)
  head = (f'<summary><span class="gno">#{i}</span> {_badge(cls)} <span class="count">×{g["count"]}</span> '
          f'<span class="outcome">{_e(g["outcome"])}</span> <code class="sig">{_e(g["signature"])}</code>'
          + (f' <span class="vs">exec: {_e(vs)}</span>' if vs else "") + "</summary>")
  body = [f'<div class="example"><h3>example</h3>{change_html(rep, ex, drawings)}</div>']
  rows = []
  for k, m in enumerate(g["members"]):
    rows.append(f'<tr><td>{k + 1}</td><td>{_e(m.label or "-")}</td><td>{_e(m.level)}</td><td><code>{_e(m.input_key[:16])}</code></td>'
                f'<td><code>{_e(m.db)}</code> {m.run_id}#{m.seq}</td>'
                f'<td><code>{_e(m.stored_key[:12])}</code>→<code>{_e((m.new_key or "–")[:12])}</code></td>'
                f'{_exec_cells(m)}</tr>')
  body.append(f'<h3>members ({g["count"]})</h3><table class="members"><thead><tr><th>#</th><th>label</th><th>level</th><th>input</th>'
              f'<th>store, run#seq</th><th>stored→current</th><th>exec</th><th>max abs / rel err</th><th>elements differ</th>'
              f'<th>kernel time</th><th>exec detail</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')
  seen = {result_key(ex)}
  shown = 0
  extra = []
  for k, m in enumerate(g["members"]):
    if result_key(m) in seen: continue
    seen.add(result_key(m))
    if shown >= MEMBER_DETAILS:
      extra.append(m)
      continue
    shown += 1
    body.append(f'<details class="member"><summary>member {k + 1}: {_e(m.label or "-")} <code>{_e(m.input_key[:16])}</code> '
                f'{_e((m.exec or {}).get("verdict") or "")}</summary>{change_html(rep, m, drawings)}</details>')
  if extra: body.append(f'<p class="note">{len(extra)} more distinct members are listed in the table above only: '
                        f'<code>replay show DB KEY --html FILE</code> shows one</p>')
  return (f'<details class="group{" fail" if fail else ""}" id="group-{i}" data-count="{g["count"]}" data-class="{cls}" '
          f'data-search="{_e(_search_text(g))}"{" open" if fail and i <= 3 else ""}>{head}<div class="gbody">{"".join(body)}</div></details>')

def _summary_html(rep: Report, counts: dict[str, int]) -> str:
  code = rep.exit_code()
  fails = R.exec_failures(rep)
  probs = [r for r in rep.results if r.outcome in R.FAIL_OUTCOMES]
  failing = bool(rep.fatal or fails or probs or rep.perf_failures())  # what exits non-zero whatever [replay:accept] says
  status = "fail" if failing or code == 2 else ("review" if code == 1 else "ok")
  title = {"fail": "✖ failures found: not waivable by [replay:accept]", "review": "△ changes to review",
           "ok": "✓ every capture replays identically"}[status]
  cards = []
  for k, (icon, label, _, _) in CLASSES.items():
    n = counts[k]
    if not n and k not in ("identical", "changed", "equivalent"): continue
    cards.append(f'<div class="card v-{k}{" zero" if not n else ""}" data-class="{k}"><span class="icon">{icon}</span>'
                 f'<span class="n">{n}</span><span class="label">{_e(label)}</span></div>')
  out = [f'<header id="summary" class="summary {status}" data-status="{status}" data-exit="{code}">',
         f'<h1>{_e(title)}</h1>',
         f'<p class="sub">process replay of {len(rep.results)} captures from {len(rep.sources)} store(s); exit code {code}</p>',
         f'<div class="cards">{"".join(cards)}</div>']
  if failing:
    out.append('<section id="failures"><h2>Failures</h2><div class="scroll"><table class="fails">'
               '<thead><tr><th>what</th><th>capture</th><th>detail</th>'
               '<th>next</th></tr></thead><tbody>')
    for f in rep.fatal: out.append(f'<tr><td>{_badge("fatal", "fatal")}</td><td>–</td><td>{_e(f)}</td><td>fix or re-capture the store</td></tr>')
    for r, is_exec in [*((r, True) for r in fails), *((r, False) for r in probs)]:
      v = R.verdict_of(r) if is_exec else r.outcome
      detail = R._exec_line(r) if is_exec else (r.reason or "")
      out.append(f'<tr><td>{_badge(v, v)}</td><td>{_e(r.label or "-")} {_e(r.level)} <code>{_e(r.input_key[:16])}</code> '
                 f'<code>{_e(r.db)}</code></td><td>{_e(detail)}</td><td><code>{_e(R.next_command(rep, r))}</code></td></tr>')
    for r in rep.perf_failures():
      out.append(f'<tr><td>{_badge("perf", "slower")}</td><td>{_e(r.label or "-")} {_e(r.level)} <code>{_e(r.input_key[:16])}</code></td>'
                 f'<td>{_e(R._exec_line(r))}</td><td><code>{_e(R.next_command(rep, r))}</code></td></tr>')
    out.append("</tbody></table></div><ul class='next'>")
    out += [f"<li><b>{_e(v)}</b>: {_e(R.NEXT_STEPS[v])}</li>" for v in R._failing_kinds(rep)]
    c = rep.counts()
    out += [f"<li><b>{o}</b>: {_e(R.NEXT_STEPS[o])}</li>" for o in ("error", "incompatible") if c[o]]
    if c["unstable"]: out.append(f"<li><b>unstable</b>: {_e(R.NEXT_STEPS['unstable_output'])}</li>")
    out.append("</ul></section>")
  out.append("</header>")
  return "\n".join(out)

def render(rep: Report, drawings: dict | None = None, title: str = "process replay", generated: str | None = None,
           extra_html: str = "") -> str:
  """The page for a report. `drawings`: replay.report.drawing.draw_results(...) (None: the page says they were not made);
  `generated`: a line (a time, a commit) to print in the header, the only such text; `extra_html` goes before the groups."""
  groups = R.ordered_groups(rep)
  counts = class_counts(rep)
  meta = [f"stores: {', '.join(rep.sources) or '–'}", f"replayed in {rep.elapsed:.2f}s with {rep.workers} worker(s)"]
  if rep.shard: meta.append(f"shard {rep.shard}")
  if et := R.exec_timing(rep): meta.append(et)
  if generated: meta.append(generated)
  if drawings is None and any(r.outcome == "changed" and _graph_output(r.level) for r in rep.results):
    meta.append("graphs were not drawn for this page")
  n_members = sum(g["count"] for g in groups)
  parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', '<meta name="viewport" content="width=device-width">',
           f"<title>{_e(title)}</title>", f"<style>{CSS}</style></head><body>", _summary_html(rep, counts),
           f'<p class="meta">{" · ".join(_e(m) for m in meta)}</p>', extra_html,
           f'<section id="groups" data-groups="{len(groups)}" data-captures="{n_members}">',
           f'<div class="toolbar"><h2>Groups</h2> <input id="search" type="search" placeholder="filter groups: signature, label, key, verdict, op…" '
           f'aria-label="filter groups"> <span id="shown">{len(groups)} of {len(groups)} groups</span> '
           '<button type="button" id="open-all">expand all</button> <button type="button" id="close-all">collapse all</button></div>',
           f'<p class="note">{len(groups)} group(s), {n_members} non-identical capture(s); failing groups first, then largest first.</p>' if groups
           else '<p class="note">No group: nothing changed.</p>']
  parts += [_group_html(rep, i + 1, g, drawings) for i, g in enumerate(groups)]
  parts += ["</section>", '<pre id="selftest" hidden></pre>', f"<script>{JS}</script>", "</body></html>"]
  return "\n".join(p for p in parts if p) + "\n"

def capture_page(db: str, key: str) -> str:
  """`replay show DB KEY --html`: one capture replayed with the current code, its input and outputs printed, and its
  stored and current graphs drawn (raises what replay.report.info.find_row raises)."""
  s = Store(db, readonly=True)
  try:
    row, n_runs = find_row(s, db, key)
    res = replay_row(s, row)
    inp = input_text(s, row)
    level = levels.get(row["level"])
    stored = level.decode_output(s.blob(row["output_key"]))
  finally: s.close()
  rep = Report(results=[res], sources=[db])
  drawings = drawing.draw_results([res]) if res.outcome == "changed" else {}
  extra = [f'<section id="capture"><h2>{_e(row["level"])} capture {_e(row["input_key"][:16])}: {_e(res.outcome)} with the current code</h2>']
  if n_runs > 1: extra.append(f'<p class="note">the same capture is in {n_runs} runs; this is run {row["run_id"]}</p>')
  if res.outcome == "identical":
    extra.append(change_html(rep, res, None))
    if level.output_is_kernel and (why := drawing.dot_status()) is None:
      (svg,) = drawing.render_svgs([drawing.ast_dot(stored, {}, "stored")])
      extra.append(f'<div class="drawing"><div class="dtitle">kernel AST</div><div class="dpair"><figure>{svg}</figure></div></div>')
    elif level.output_is_kernel: extra.append(f'<p class="note drawing-note">graph not drawn: {_e(why)}</p>')
  extra.append(f'<details><summary>input</summary><pre>{_e(inp)}</pre></details>')
  out_text = stored if isinstance(stored, str) else ("\n\n".join(f"-- kernel {i} --\n{a.pretty()}" for i, a in enumerate(stored))
                                                     if isinstance(stored, list) else stored.pretty())
  extra.append(f'<details><summary>stored output</summary><pre>{_e(out_text)}</pre></details></section>')
  return render(rep, drawings, title=f"replay show {key}", extra_html="\n".join(extra))

CSS = """
:root{--fg:#202124;--muted:#5f6368;--line:#dadce0;--bg:#fff;--del:#fbe0de;--delx:#f5a49c;--ins:#dcf5e1;--insx:#8fd8a0}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);margin:0 0 4em;background:#f8f9fa}
code,pre,.sbs td{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12px}
header.summary{padding:14px 20px;border-bottom:4px solid var(--line);background:#fff}
header.summary.fail{border-color:#d93025;background:#fce8e6}header.summary.review{border-color:#f9ab00;background:#fef7e0}
header.summary.ok{border-color:#188038;background:#e6f4ea}
header h1{margin:0 0 4px;font-size:22px}header.fail h1{color:#a50e0e}header.review h1{color:#8a5a00}header.ok h1{color:#137333}
.sub,.meta,.note{color:var(--muted)}.meta{padding:0 20px}
.cards{display:flex;flex-wrap:wrap;gap:8px;margin:10px 0}
.card{display:flex;align-items:center;gap:6px;padding:6px 12px;border-radius:8px;font-weight:600}
.card .icon{font-size:20px}.card .n{font-size:20px}.card.zero{opacity:.55}
""" + "".join(f".v-{k}{{color:{fg};background:{bg}}}" for k, (_, _, fg, bg) in CLASSES.items()) + """
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-weight:600;font-size:12px;white-space:nowrap}
#failures h2{margin:12px 0 6px;color:#a50e0e}#failures .scroll{max-height:40vh;overflow:auto;border:1px solid var(--line)}
table{border-collapse:collapse;background:#fff}td,th{border:1px solid var(--line);padding:3px 6px;vertical-align:top;text-align:left}
table.fails{width:100%}table.members{font-size:12px;width:100%}td.detail{max-width:420px;word-break:break-word}
#groups{padding:0 20px}.toolbar{position:sticky;top:0;background:#f8f9fa;padding:8px 0;display:flex;align-items:center;gap:10px;z-index:2}
.toolbar h2{margin:0}#search{flex:0 1 420px;padding:6px 10px;font-size:14px;border:1px solid #9aa0a6;border-radius:6px}
details.group{background:#fff;border:1px solid var(--line);border-left:6px solid #f9ab00;border-radius:6px;margin:6px 0}
details.group.fail{border-left-color:#d93025}details.group[data-class=equivalent]{border-left-color:#1967d2}
details.group>summary{cursor:pointer;padding:6px 10px;list-style-position:outside}
.gno{color:var(--muted)}.count{font-weight:700}.sig{word-break:break-word}.vs{color:var(--muted);font-size:12px}
.gbody{padding:0 12px 12px}details.member{margin:6px 0;border:1px solid var(--line);border-radius:4px;padding:2px 8px}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px}dl.facts dt{color:var(--muted)}dl.facts dd{margin:0;word-break:break-word}
table.sbs{width:100%;table-layout:fixed}
table.sbs td{white-space:pre-wrap;word-break:break-all;border:none;border-bottom:1px solid #f1f3f4;padding:0 6px}
table.sbs th.ln,table.sbs td.ln{width:44px;color:var(--muted);text-align:right}
tr.hunk td{background:#e8f0fe;color:#1967d2}tr.chg td.o,tr.del td.o{background:var(--del)}tr.chg td.n,tr.add td.n{background:var(--ins)}
del{background:var(--delx);text-decoration:none}ins{background:var(--insx);text-decoration:none}
table.changes td.o code del,table.changes td.n code ins{font-weight:700}table.changes td{word-break:break-all}
.drawing{margin:10px 0}.dtitle{font-weight:600}.dpair{display:flex;gap:10px;align-items:flex-start;overflow-x:auto}
.dpair figure{margin:0;border:1px solid var(--line);background:#fff;padding:4px;flex:1 1 0;min-width:0}
.dpair figure svg{max-width:100%;height:auto}figcaption{color:var(--muted);font-size:12px}
.legend{font-weight:400;color:var(--muted);font-size:12px;margin-left:12px}
.sw{display:inline-block;width:12px;height:12px;border:1px solid #555;vertical-align:middle}
.sw.changed{background:#f6b4ae;border-color:#b3261e}.sw.affected{background:#fdf0c8;border-color:#a07a00}
pre{white-space:pre-wrap;word-break:break-all;background:#fff;border:1px solid var(--line);padding:6px}
"""

JS = r"""
(function () {
  var FAILING = @FAILING@;
  var q = document.getElementById('search'), shown = document.getElementById('shown');
  var groups = Array.prototype.slice.call(document.querySelectorAll('details.group'));
  function apply() {
    var t = q.value.trim().toLowerCase(), n = 0;
    groups.forEach(function (g) { var ok = !t || g.getAttribute('data-search').indexOf(t) >= 0; g.hidden = !ok; if (ok) n++; });
    shown.textContent = n + ' of ' + groups.length + ' groups';
    document.body.setAttribute('data-visible-groups', String(n));
    return n;
  }
  q.addEventListener('input', apply);
  document.getElementById('open-all').addEventListener('click', function () { groups.forEach(function (g) { g.open = true; }); });
  document.getElementById('close-all').addEventListener('click', function () { groups.forEach(function (g) { g.open = false; }); });
  function type(text) { q.value = text; q.dispatchEvent(new Event('input')); return groups.filter(function (g) { return !g.hidden; }).length; }
  function selftest() {
    var checks = [], sec = document.getElementById('groups'), summary = document.getElementById('summary');
    function check(name, ok, got) { checks.push({name: name, ok: !!ok, got: got}); }
    var box = summary.getBoundingClientRect();
    check('summary first and visible at the top', document.body.firstElementChild === summary && box.top <= 1 && box.height > 20, box.top);
    var cards = Array.prototype.slice.call(summary.querySelectorAll('.card')).map(function (c) { return c.getAttribute('data-class'); });
    check('failure classes before the others', summary.getAttribute('data-status') !== 'fail' || FAILING.indexOf(cards[0]) >= 0, cards.join(','));
    check('every group is on the page', groups.length === Number(sec.getAttribute('data-groups')), groups.length);
    var members = groups.reduce(function (s, g) { return s + g.querySelectorAll('table.members tbody tr').length; }, 0);
    check('every member is listed', members === Number(sec.getAttribute('data-captures')), members);
    var counted = groups.reduce(function (s, g) { return s + Number(g.getAttribute('data-count')); }, 0);
    check('group counts add up', counted === members, counted);
    if (groups.length) {
      var last = groups[groups.length - 1], word = last.querySelector('code.sig').textContent.toLowerCase();
      var n = type(word);
      check('a search keeps the groups that contain it', n >= 1 && !last.hidden, n);
      check('a search hides the others', groups.every(function (g) { return g.hidden === (g.getAttribute('data-search').indexOf(word) < 0); }), n);
      check('a search for nothing that exists hides every group', type('no such text \u2603') === 0, 0);
      check('clearing the search shows every group', type('') === groups.length, groups.length);
    }
    var ok = checks.every(function (c) { return c.ok; });
    var out = document.getElementById('selftest');
    out.textContent = JSON.stringify({ok: ok, checks: checks});
    out.hidden = false;
    document.body.setAttribute('data-selftest', ok ? 'pass' : 'fail');
  }
  var h = decodeURIComponent(location.hash.slice(1));
  if (h === 'selftest') selftest();
  else if (h.indexOf('search=') === 0) type(h.slice(7));
  else apply();
})();
""".replace("@FAILING@", json.dumps(list(FAILING)))
