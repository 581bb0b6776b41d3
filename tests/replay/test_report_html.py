"""The HTML report (--report-html, replay show --html): one self-contained page with every group and member, failures on
top, side-by-side diffs and AST drawings; opened in headless Chromium (Debian's package) where it is installed."""
import json, os, re, shutil, subprocess, sys
from html.parser import HTMLParser
from pathlib import Path
import pytest
from click.testing import CliRunner
from replay.cli.app import main as cli
from replay.report import drawing
from replay.report import text as R
from replay.report import html as H
from tinysched.rewrite import graph_rewrite
from tests.replay.changes import patch_ast, double_consts, swap_commutative, capture_store, workload
from tests.replay.test_report_md import _report

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FAIL_BG, MISMATCH_BG = (0xfc, 0xe8, 0xe6), (0xd9, 0x30, 0x25)  # the failing summary's background, the mismatch badge (report_html.CSS)

def invoke(*args):
  return CliRunner().invoke(cli, [str(a) for a in args])

def plant(ast):
  """Half the kernels get their constants doubled (different numbers: mismatch), the others reordered operands (same
  numbers): failing and reviewable groups in one report."""
  return double_consts(ast) if ast.key < "8" else graph_rewrite(ast, swap_commutative)

class Groups(HTMLParser):
  """The groups of a page as a browser sees them: attributes, and the input keys in each one's members table."""
  def __init__(self):
    super().__init__()
    self.groups, self.order, self._stack, self._cell, self._row = [], [], [], None, None
  def handle_starttag(self, tag, attrs):
    a = dict(attrs)
    if tag in ("input", "meta", "br", "img"): return
    self._stack.append((tag, a.get("class", "")))
    if a.get("id"): self.order.append(a["id"])
    if tag == "details" and "group" in a.get("class", "").split(): self.groups.append({**a, "members": []})
    if tag == "tr" and any(t == "table" and "members" in c for t, c in self._stack): self._row = []
    if tag == "td" and self._row is not None: self._cell = []
  def handle_endtag(self, tag):
    while self._stack:
      t, _ = self._stack.pop()
      if t == tag: break
    if tag == "td" and self._cell is not None: self._row.append("".join(self._cell).strip()); self._cell = None
    if tag == "tr" and self._row is not None:
      if self._row: self.groups[-1]["members"].append(self._row[3])
      self._row = None
  def handle_data(self, data):
    if self._cell is not None: self._cell.append(data)

def parse(page: str) -> Groups:
  p = Groups(); p.feed(page); p.close()
  return p

@pytest.fixture(scope="module")
def planted(db, tmp_path_factory):
  """`replay check --exec --report-html` of the planted change, with its JSON report (the reference for the counts)."""
  mp = pytest.MonkeyPatch()
  out = tmp_path_factory.mktemp("html")
  try:
    patch_ast(mp, plant)
    # (groups by the diff's shape, several of them: the page's search is what is tested; causes: tests/replay/test_causes.py)
    r = invoke("check", db, "-j", "1", "--exec", "--device", "NUMPY", "--report-html", out / "report.html", "--report-json", out / "r.json",
               "--report-md", out / "r.md", "--no-causes")
  finally: mp.undo()
  assert r.exit_code == 1, r.output
  return out, json.loads((out / "r.json").read_text())

def test_every_group_and_member_failures_first(planted):
  out, doc = planted
  page = (out / "report.html").read_text()
  assert doc["summary"]["exec"].get("mismatch") and doc["summary"]["exec"].get("equivalent")
  groups = parse(page).groups
  want = {g["signature"]: g for g in doc["groups"]}
  assert len(groups) == len(want) and sum(int(g["data-count"]) for g in groups) == sum(g["count"] for g in want.values())
  shown = {}
  for g in groups:
    (sig,) = [s for s in want if H._e(s) in page and s.lower() in g["data-search"]][:1] or [None]
    assert sig is not None
    shown[sig] = g
    # every member, by its input key, in its own group's table
    assert sorted(g["members"]) == sorted(k[:16] for k in want[sig]["members"]) and int(g["data-count"]) == want[sig]["count"]
  assert set(shown) == set(want)
  # failing groups first; the page starts with the summary, whose first cards and table are the failures
  classes = [g["data-class"] for g in groups]
  n_fail = sum(c in H.FAILING for c in classes)
  assert n_fail and all(c in H.FAILING for c in classes[:n_fail]) and not any(c in H.FAILING for c in classes[n_fail:])
  body = page[page.index("<body>") + 6:].lstrip()
  assert body.startswith('<header id="summary" class="summary fail"')
  assert page.index('data-class="mismatch"') < page.index('data-class="equivalent"') < page.index('id="failures"') < page.index('id="groups"')
  n_mismatch = doc["summary"]["exec"]["mismatch"]
  assert f'<span class="n">{n_mismatch}</span><span class="label">mismatch (old ≠ new)</span>' in page
  assert page.count("<td><span class=\"badge v-mismatch\">≠ mismatch</span></td><td>") >= n_mismatch  # each named in the failures table
  # the Markdown report points at the page for the rest
  assert "report.html" in (out / "r.md").read_text() or "more groups" not in (out / "r.md").read_text()

def test_diffs_side_by_side_and_drawings(planted):
  out, doc = planted
  page = (out / "report.html").read_text()
  assert '<table class="sbs">' in page and "<del>" in page and "<ins>" in page
  assert "<code>SINK.src[0].STORE.src[" in page  # deepdiff paths
  assert "µs →" in page  # kernel time per member
  changed = {(r["level"], r["input_key"]) for r in doc["results"] if r["outcome"] == "changed"}
  if drawing.dot_status() is not None:
    assert "graphs not drawn: " in page
    pytest.skip(f"graphviz cannot draw here: {drawing.dot_status()}")
  svgs = re.findall(r"<svg\b.*?</svg>", page, re.S)
  assert len(svgs) >= 2 * len(changed)  # a stored and a current drawing of each changed capture (at least one kernel each)
  assert all('astnode changed"' in s for s in svgs)  # the changed nodes are marked, on both sides
  ids = re.findall(r'\bid="([^"]+)"', page)
  assert len(ids) == len(set(ids))  # many drawings, one page: ids stay unique

def test_self_contained_and_deterministic(planted, db, monkeypatch):
  out, doc = planted
  page = (out / "report.html").read_text()
  assert not re.search(r"<(link|img|iframe)\b|\bsrc=|@import|url\(", page)
  assert {u for u in re.findall(r"https?://[^\s\"'<>)]+", page)} <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}
  rep = R.from_json(doc)
  patch_ast(monkeypatch, plant)  # the drawings replay the inputs with the code that made the report
  assert H.render(rep, drawing.draw_results(rep.results)) == H.render(rep, drawing.draw_results(rep.results))
  # and in two processes with different string hashes (set order), from the JSON report
  render = ("import json, sys; from replay.report import text as R, html as H; "
            "sys.stdout.write(H.render(R.from_json(json.load(open(sys.argv[1]))), {}))")
  pages = {subprocess.run([sys.executable, "-c", render, str(out / "r.json")], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}).stdout for seed in ("1", "2")}
  assert len(pages) == 1 and "</html>" in pages.pop()

def test_all_200_groups_on_the_page():
  rep = _report(200, failing={7})
  page = H.render(rep, {})
  groups = parse(page).groups
  assert len(groups) == 200 and groups[0]["data-class"] == "mismatch"
  assert sum(len(g["members"]) for g in groups) == len(rep.results) == sum(int(g["data-count"]) for g in groups)
  assert sorted(k for g in groups for k in g["members"]) == sorted(r.input_key[:16] for r in rep.results)

def test_unstable_outcome_alone_is_a_failure():
  """A report whose only result is `unstable` (`replay check --twice`: its output depends on the hash seed) exits 1 and
  fails the gate whatever [replay:accept] says: the page says failure, lists it, and says what to do next."""
  from replay.check.results import Report
  from replay.check.results import Result
  r = Result("stores/model.db", 1, 0, "kernel", "model0", "a" * 64, "b" * 64, "c" * 64, outcome="unstable",
             reason="the output depends on the hash seed: PYTHONHASHSEED=1 gives cccc, PYTHONHASHSEED=2 gives dddd",
             signature="unstable kernel: planted")
  rep = Report(results=[r], sources=["stores/model.db"], elapsed=1.0)
  assert rep.exit_code() == 1 and R.group_failures(rep.groups()[0]) == ["unstable"]
  page = H.render(rep, {})
  assert H.class_counts(rep)["unstable"] == 1
  assert '<header id="summary" class="summary fail" data-status="fail" data-exit="1">' in page and "changes to review" not in page
  fails = page[page.index('<section id="failures">'):page.index('id="groups"')]
  assert '<td><span class="badge v-unstable">↯ unstable</span></td><td>model0 kernel <code>' + "a" * 16 in fails
  assert H._e(R.NEXT_STEPS["unstable_output"]) in fails
  assert parse(page).groups[0]["data-class"] == "unstable"

def test_no_graphviz_is_said_not_a_crash(db, tmp_path, monkeypatch):
  patch_ast(monkeypatch, plant)
  monkeypatch.setenv("PATH", str(tmp_path))  # no `dot` on PATH
  r = invoke("check", db, "--level", "kernel", "-j", "1", "--report-html", tmp_path / "r.html")
  assert r.exit_code == 1, r.output
  page = (tmp_path / "r.html").read_text()
  assert "graphs not drawn: graphviz&#x27;s `dot` program is not on PATH; install graphviz" in page and "<svg" not in page
  monkeypatch.setitem(__import__("sys").modules, "graphviz", None)  # nor the Python package
  assert "the graphviz Python package is not installed" in drawing.dot_status()

def test_unwritable_report_path_is_exit_2(db, tmp_path):
  r = invoke("check", db, "-j", "1", "--report-html", tmp_path / "no-such-folder" / "r.html")
  assert r.exit_code == 2 and "replay: error: cannot write the report" in r.output and "does not exist" in r.output and "next:" in r.output
  r = invoke("check", db, "-j", "1", "--report-html", tmp_path)  # click's own check of the option
  assert r.exit_code == 2 and "is a directory" in r.output
  r = invoke("report", "merge", tmp_path / "none.json", "-o", tmp_path / "m.json", "--report-html", tmp_path / "no-such-folder" / "m.html")
  assert r.exit_code == 2 and "cannot write the report" in r.output
  r = invoke("show", db, "0", "--html", tmp_path / "no-such-folder" / "x.html")
  assert r.exit_code == 2 and "cannot write the report" in r.output

def test_show_html_one_capture(db, tmp_path, monkeypatch):
  import sqlite3
  keys = dict(sqlite3.connect(db).execute("SELECT level, input_key FROM captures GROUP BY level").fetchall())
  r = invoke("show", db, keys["kernel"][:12], "--html", tmp_path / "same.html")
  assert r.exit_code == 0 and "== output ==" in r.output, r.output
  page = (tmp_path / "same.html").read_text()
  assert "capture " + keys["kernel"][:16] + ": identical with the current code" in page and "== input (pre-sink) ==" in page
  assert drawing.dot_status() is not None or page.count("<svg") == 1
  patch_ast(monkeypatch, plant)
  for level in ("kernel", "schedule"):
    r = invoke("show", db, keys[level][:12], "--html", tmp_path / f"{level}.html")
    assert r.exit_code == 0, r.output
    page = (tmp_path / f"{level}.html").read_text()
    assert ": changed with the current code" in page and '<table class="sbs">' in page and len(parse(page).groups) == 1
    assert drawing.dot_status() is not None or page.count("<svg") >= 2

def test_diff_gate_merge_write_html(planted, db, tmp_path, monkeypatch):
  with monkeypatch.context() as m:
    patch_ast(m, plant)
    new = capture_store(tmp_path / "new.db", workload, "unit")
  r = invoke("diff", db, new, "--report-html", tmp_path / "diff.html")
  assert r.exit_code == 1, r.output
  page = (tmp_path / "diff.html").read_text()
  assert parse(page).groups and "replay show " in page
  assert drawing.dot_status() is not None or ('astnode changed"' in page and "graphs not drawn" not in page)  # from both stores
  r = invoke("gate", db, "--no-exec", "--no-accept", "--report-json", tmp_path / "g.json", "--report-html", tmp_path / "gate.html")
  assert r.exit_code == 0 and (tmp_path / "gate.html").read_text().count('class="summary ok"') == 1, r.output
  # from the planted check's JSON report: the gate's and the merge's pages show its groups
  out, doc = planted
  r = invoke("gate", "--from-report", out / "r.json", "--no-accept", "--report-html", tmp_path / "from.html")
  assert r.exit_code == 1 and len(parse((tmp_path / "from.html").read_text()).groups) == len(doc["groups"]), r.output
  r = invoke("report", "merge", out / "r.json", "-o", tmp_path / "m.json", "--report-html", tmp_path / "m.html")
  assert r.exit_code == 1 and len(parse((tmp_path / "m.html").read_text()).groups) == len(doc["groups"]), r.output

# *** in a browser ***

def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
  if CHROMIUM is None: pytest.skip("chromium is not installed (Debian: apt-get install chromium)")
  cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run", "--disable-extensions",
         f"--user-data-dir={tmp_path / 'profile'}", *args]
  p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
  assert p.returncode == 0, p.stderr[-2000:]
  return p

def test_in_chromium_selftest_search_and_screenshot(planted, tmp_path):
  out, doc = planted
  url = (out / "report.html").resolve().as_uri()
  # the page's own check on load: summary first and visible, every group and member there, search filters and clears
  dom = _chromium(tmp_path, "--dump-dom", url + "#selftest").stdout
  (result,) = re.findall(r'<pre id="selftest">(.*?)</pre>', dom, re.S)
  res = json.loads(result.replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
  assert res["ok"] and len(res["checks"]) >= 8, res
  assert 'data-selftest="pass"' in dom
  # a search typed into the box (#search=TEXT dispatches it as input): the groups the browser hides are exactly
  # those whose text lacks it, as read back from its DOM here
  groups = parse((out / "report.html").read_text()).groups
  term = "const.arg"
  expect = [term in g["data-search"] for g in groups]
  assert 0 < sum(expect) < len(groups)
  dom = _chromium(tmp_path, "--dump-dom", url + "#search=" + term).stdout
  seen = parse(dom).groups
  assert [("hidden" not in g) for g in seen] == expect
  assert f'<span id="shown">{sum(expect)} of {len(groups)} groups</span>' in dom
  # what a person sees first: the red failure summary with the mismatch card, at the top of the window
  _chromium(tmp_path, "--window-size=1280,800", f"--screenshot={tmp_path / 'top.png'}", url)
  Image = pytest.importorskip("PIL.Image")
  img = Image.open(tmp_path / "top.png").convert("RGB")
  top = img.crop((0, 0, img.width, 160))
  colors = {c for _, c in top.getcolors(maxcolors=1 << 20)}
  assert FAIL_BG in colors and MISMATCH_BG in colors

def test_every_committed_kernel_can_be_drawn():
  """Symbolic shapes and offsets (the KV cache's start_pos), masks, multi-view trackers: the DOT of every kernel AST of
  two committed stores is made, and dot lays out a sample of them."""
  from replay.store.sqlite import Store
  from replay import levels
  dots = []
  for name in ("gpt2_tiny", "smollm2"):
    s = Store(str(ROOT / "captures" / f"{name}.db"), readonly=True)
    try: asts = {r["output_key"]: levels.get("kernel").decode_output(s.blob(r["output_key"])) for r in s.captures(level="kernel")}
    finally: s.close()
    dots += [drawing.ast_dot(a, {}, f"k{i}") for i, a in enumerate(asts.values())]
  assert len(dots) > 50 and any("start_pos" in d for d in dots)
  if drawing.dot_status() is None: assert len(drawing.render_svgs(dots[::10])) == len(dots[::10])
