"""The Markdown report fits a GitHub PR comment and never lies: failures first with the command to run next, groups as
far as they fit, then one line that counts the groups and captures left out (no group silently missing), and long
values shown where they differ."""
import hashlib, re
from replay.report import text as R
from replay.check.results import Report
from replay.baseline.gate import summary_markdown
from replay.check.results import Result

GITHUB_COMMENT_LIMIT = 65_536
ROW = re.compile(r"^\| (\d+) \| (?:❌ )?(\w+) \| [^|]* \| (\d+) \| `(.*)` \|$")
MORE = re.compile(r"^\*\*(\d+) more groups \((\d+) captures\) in (.+?)\*\*")

def _key(*parts) -> str: return hashlib.sha256(repr(parts).encode()).hexdigest()

def _report(n_groups: int, failing: set[int] = frozenset()) -> Report:
  """n_groups changed groups of 1 to 5 members with long signatures and diffs; members of the groups in `failing`
  executed as mismatches."""
  results = []
  for g in range(n_groups):
    for m in range(1 + g % 5):
      diff = "--- stored\n+++ current\n@@ -1,40 +1,40 @@\n" + "".join(f"-  LOAD dtypes.float {g}.{m}.{i} {'x' * 90}\n"
                                                                  f"+  LOAD dtypes.float {g}.{m}.{i} {'y' * 90}\n" for i in range(40))
      exec_ = ({"verdict": "mismatch", "where": "old vs new", "max_abs_err": 0.5, "n_diff": 3, "first_diff": [1], "buffer": 0}
               if g in failing else {"verdict": "equivalent", "max_abs_err": 0.0})
      results.append(Result("stores/model.db", 1, len(results), "kernel", f"model{g % 7}", _key(g, m, "in"), _key(g, m, "old"),
                            _key(g, m, "new"), outcome="changed", signature=f"kernel: planted change {g:03d} " + "w" * 200,
                            changes=[{"kind": "values_changed", "path": "SINK.src[0].STORE.src[1].VIEW.arg", "old": "a" * 150, "new": "b" * 150}],
                            change_count=1, text_diff=diff, exec=exec_))
  return Report(results=results, sources=["stores/model.db"], elapsed=1.0)

def _table(md: str) -> list[tuple[int, str, int, str]]:
  return [(int(m[1]), m[2], int(m[3]), m[4]) for ln in md.splitlines() if (m := ROW.match(ln))]

def test_200_groups_fit_and_the_rest_is_counted():
  rep = _report(200, failing={150, 170})
  groups = R.ordered_groups(rep)
  assert len(groups) == 200 and sum(g["count"] for g in groups) == len(rep.results)
  md = R.markdown(rep, html_name="report.html")
  assert len(md) <= len(md.encode()) <= R.MD_LIMIT
  assert len(summary_markdown(False, "x" * 400, md, None)) <= GITHUB_COMMENT_LIMIT  # as `replay gate` posts it
  rows = _table(md)
  assert 20 <= len(rows) < 200
  # the rows are the first groups in order: none skipped in between
  assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
  assert [(r[2], r[3]) for r in rows] == [(g["count"], R._cell(g["signature"])) for g in groups[:len(rows)]]
  # the failing groups come first, whatever their size, and the failures section names them with the next command
  assert {rows[0][3], rows[1][3]} == {R._cell(f"kernel: planted change {g:03d} " + "w" * 200) for g in (150, 170)}
  assert md.index("### ❌ Failures") < md.index("### Groups")
  fail_rows = [ln for ln in md.splitlines() if ln.startswith("| **mismatch** |")]
  assert len(fail_rows) == 1 + 150 % 5 + 1 + 170 % 5 and all("`replay check stores/model.db --key " in ln for ln in fail_rows)
  # then one line with the right counts of what is left out
  (more,) = [m for ln in md.splitlines() if (m := MORE.match(ln))]
  left = groups[len(rows):]
  assert int(more[1]) == len(left) == 200 - len(rows)
  assert int(more[2]) == sum(g["count"] for g in left)
  assert more[3] == "`report.html`"

def test_few_groups_all_shown_with_details():
  rep = _report(6)
  md = R.markdown(rep)
  rows = _table(md)
  assert len(rows) == 6 and not any(MORE.match(ln) for ln in md.splitlines())
  assert md.count("<details>") == 6 and "did not fit" not in md
  assert "❌" not in md and md.startswith("## ⚠️")  # equivalent changes: reviewable, not failures

def test_details_that_do_not_fit_are_counted():
  rep = _report(40)
  md = R.markdown(rep, limit=20_000)
  assert len(md.encode()) <= 20_000
  shown, detailed = len(_table(md)), md.count("<details>")
  assert 0 < detailed < shown
  if shown < 40: assert any(MORE.match(ln) for ln in md.splitlines())
  assert f"_Details of groups {detailed + 1}–{shown} (above, in the table) did not fit here" in md

def test_long_values_show_where_they_differ():
  old = ("ShapeTracker(views=(View(shape=(2, 1, 5, 4, 16), strides=(0, 0, 192, 16, 1), offset=0, "
         "mask=((0, 2), (0, 1), (0, 5), (0, 4), (0, 16)), contiguous=False),))")
  new = old.replace("(0, 16)), contiguous", "(1, 16)), contiguous")
  assert old[:80] == new[:80]  # a cut at 80 characters would show the same text twice
  o, n = R.differing_parts(old, new)
  assert o != n and "(0, 16))" in o and "(1, 16))" in n and o.startswith("…") and len(o) <= 80 + 2 * 24 + 2
  rep = _report(1)
  rep.results[0].changes = [{"kind": "values_changed", "path": "SINK.src[0].STORE.src[1].VIEW.arg", "old": old, "new": new}]
  md = R.markdown(rep)
  (row,) = [ln for ln in md.splitlines() if ln.startswith("| values_changed |")]
  assert f"`{R._cell(o, 200)}` | `{R._cell(n, 200)}`" in row
  assert R.differing_parts("short", "shorter") == ("short", "shorter")
  o, n = R.differing_parts("x" * 500 + "A" + "y" * 500, "x" * 500 + "B" + "y" * 500)
  assert "A" in o and "B" in n and len(o) < 140

def test_every_failing_kind_is_named_first():
  rep = _report(8)
  kinds = ("wrong", "mismatch", "unstable", "failed", "timeout")
  for r, v in zip(rep.results[:5], kinds): r.exec = {"verdict": v, "error": f"planted {v}"}
  md = R.markdown(rep)
  fails = md[md.index("### ❌ Failures"):md.index("### Groups")]
  for r, v in zip(rep.results[:5], kinds): assert f"| **{v}** | {r.label} kernel `{r.input_key[:12]}` |" in fails  # timeouts too
  assert [ln.split("**")[1] for ln in fails.splitlines() if ln.startswith("| **")] == list(kinds)  # worst first
  from replay.report import html as H
  page = H.render(rep, {})
  head = page[:page.index('id="groups"')]
  assert all(f'class="card v-{v}"' in head and f'<span class="badge v-{v}">' in head for v in kinds)

def test_a_text_diff_keeps_every_line_apart():
  # the last line of a printout has no newline: its `-` line must not run into the `+` line after it
  from replay.levels.astdiff import text_diff
  d = text_diff("SINK\n  CONST dtypes.float 0.0", "SINK\n  CONST dtypes.float 1.0")
  lines = d.splitlines()
  assert "-  CONST dtypes.float 0.0" in lines and "+  CONST dtypes.float 1.0" in lines, d
  assert all(ln.count("CONST") <= 1 for ln in lines), d
