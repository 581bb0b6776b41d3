"""Reports that cannot be broken from the data (issue 38 item 5): whatever a store (or a merged JSON report) holds, the
JUnit file is well-formed XML, the Markdown keeps its tables, code and <details> blocks, the terminal gets no control
character, a label stored as invalid UTF-8 is read and shown, and a report file is replaced whole or not at all.

Each check is also run against a plant of the bug it exists to catch (the escape made the identity, the old writer, the
default text decoder), and must fail there: a check that passes on the bug proves nothing."""
import errno, os, re, shutil, sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path
from xml.sax.saxutils import escape as sax_escape, quoteattr as sax_quoteattr
import pytest
from click.testing import CliRunner
from replay.check.results import Report, Result
from replay.cli import common
from replay.cli.app import main as cli
from replay.report import escape as E, files as F, html as H, text as R
from replay.store import sqlite as S
from replay.store.sqlite import Store
from tests.replay.changes import plant_no_fusion

# every character class that has broken an output: C0 (ESC, BEL, CR, NUL...), DEL, C1 (0x9b: CSI), lone surrogates (a
# payload's JSON can spell them), XML non-characters, XML/HTML/Markdown syntax, a fence, and lines that forge a row
NASTY = ("".join(map(chr, range(0x20))) + "\x7f" + "".join(map(chr, range(0x80, 0xa0))) + "\ud800\udfff\ufffe\uffff"
         + "\x1b[31mred\x1b[0m\x1b]0;title\x07 ]]> \"q\" 'a' <b>&amp; </details> </summary> | `code` ``` [x](http://e) **b** \\"
         + "\n\n| x | y |\n<details>\n```\n</details>\nOK: every capture replays identically.\n")  # a line that closes a fence
ONE_LINE = "".join(c for c in NASTY if len(f"a{c}b".splitlines()) == 1)  # NASTY less what str.splitlines() splits at
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")  # what must not reach a terminal (\n and \t may)

def _key(s: str, i: int) -> str: return s + f"{i:064x}"[len(s):]

def _report(x: str = "", identical_only: bool = False) -> Report:
  """Results of every outcome whose stored strings are `x`-laced (x="": the same report with clean strings)."""
  def t(s: str) -> str: return s + x
  ex = {"verdict": "mismatch", "where": t("old vs new"), "max_abs_err": 0.5, "n_diff": 1, "first_diff": [0], "buffer": 0, "error": t("e")}
  rs = [Result(t("db.db"), 1, 0, t("kernel"), t("label"), _key(x[:8], 1), _key("", 2), _key("", 2), metadata=t("made by"))]
  if not identical_only:
    rs += [Result(t("db.db"), 1, 1, t("kernel"), t("label"), _key(x[:8], 3), _key("", 4), _key("", 5), outcome="changed", signature=t("sig"),
                  changes=[{"kind": t("values_changed"), "path": t("SINK.arg"), "old": t("o"), "new": t("n")}], change_count=1,
                  text_diff=t("--- a\n+++ b\n-x\n+y"), rules=[t("rule")], metadata=t("made by"), exec=ex),
           Result(t("db.db"), 1, 2, t("schedule"), t("label"), _key(x[:8], 6), _key("", 7), outcome="error", reason=t("raised"),
                  traceback=t("Traceback:\n  line")),
           Result(t("db.db"), 1, 3, t("program"), t("label"), _key(x[:8], 8), _key("", 9), outcome="incompatible", reason=t("old format"))]
  acc = [{"id": 1, "level": t("kernel"), "input_key": _key(x[:8], 1), "label": t("label"), "db": t("db.db"), "old_output_key": _key("", 2),
          "new_output_key": _key("", 3), "git_commit": t("abc"), "git_dirty": 0, "who": t("me"), "time": t("now"), "message": t("why")}]
  return Report(results=rs, sources=[t("db.db")], elapsed=1.0, fatal=[] if identical_only else [t("fatal")],
                accepted=[] if identical_only else acc)

# *** JUnit ***

def _parses(xml: str) -> bool:
  try: ET.fromstring(xml.encode("utf-8"))
  except (ET.ParseError, UnicodeEncodeError): return False
  return True

def _old_xml_escapes(monkeypatch) -> None:
  """The plant: the escapes JUnit had (saxutils: quotes and <>&, nothing for characters XML 1.0 does not allow)."""
  monkeypatch.setattr(E, "xml_attr", sax_quoteattr)
  monkeypatch.setattr(E, "xml_text", sax_escape)

@pytest.mark.parametrize("x", [NASTY, "\x1b[31m", "\x00", "\ud800", "\uffff", "]]>\"'<&\n\r\t"])
def test_junit_is_well_formed_for_any_stored_string(x, monkeypatch):
  for rep in (_report(x, identical_only=True), _report(x)):  # an all-identical run too: its testcase names carry the label
    xml = R.junit(rep)
    root = ET.fromstring(xml.encode("utf-8"))
    cases = root.findall(".//testcase")
    assert len(cases) == len(rep.results)
    # the value is kept, its illegal characters shown: a reader sees what the store holds
    assert cases[0].get("name") == E.visible(f"label{x}:kernel{x}:{_key(x[:8], 1)[:16]}")
  if x in ("]]>\"'<&\n\r\t",): return  # legal XML already: nothing for the plant to break
  _old_xml_escapes(monkeypatch)
  assert not _parses(R.junit(_report(x, identical_only=True)))  # the check goes red on the bug

def test_junit_failure_bodies_keep_their_text():
  root = ET.fromstring(R.junit(_report(NASTY)).encode("utf-8"))
  bodies = [f.text or "" for f in root.iter() if f.tag in ("failure", "error")]
  assert any("\\x1b[31mred" in b and "]]>" in b and "<b>&amp;" in b for b in bodies)

# *** Markdown ***

CODE_SPAN = re.compile(r"`[^`\n]*`")

def _md_shape(md: str) -> dict:
  """What a value must not change: whether the fences close, the table rows and their cell counts, and the HTML tags
  outside code (GitHub splits cells before it reads code spans, so pipes are counted on the whole line)."""
  fence, rows, tags = False, [], []
  for ln in md.splitlines():
    if ln.lstrip().startswith("```"): fence = not fence; continue
    if fence: continue
    if ln.startswith("|"): rows.append(len(re.findall(r"(?<!\\)\|", ln)))
    tags += re.findall(r"</?[A-Za-z][^>\s]*", CODE_SPAN.sub("", ln))
  return {"fence_open": fence, "rows": rows, "tags": tags}

def test_markdown_structure_does_not_depend_on_the_values(monkeypatch):
  clean, nasty = R.markdown(_report()), R.markdown(_report(NASTY))
  shape = _md_shape(nasty)
  assert shape == _md_shape(clean)
  assert not shape["fence_open"] and shape["tags"].count("<details") == shape["tags"].count("</details") == 3
  assert not RAW_CONTROL.search(nasty) and "\\x1b[31mred" in nasty
  # the values are there, shown: the label in the summary and the failure row, as entities GitHub renders as the text
  assert "label" in nasty and "&#60;/details&#62;" in nasty and "&#124; x &#124; y &#124;" in nasty
  # plants: each escape made the identity breaks the shape (rows, tags or fences); without the surrogates, which would
  # make the plant crash before it could show that
  encodable = re.sub("[\ud800-\udfff]", "", NASTY)
  for name in ("md_text", "md_code", "md_block"):
    with monkeypatch.context() as m:
      m.setattr(E, name, lambda s, *a, **k: str(s))
      assert _md_shape(R.markdown(_report(encodable))) != shape, name

def test_markdown_label_cannot_escape_details():
  """The brief's case: a label with newlines, </details> and | renders with as many <details> as </details> and the
  table rows of a clean label."""
  label = "m\n\n</details>\n\n| a | b |\n|---|---|\n| c | d |\n"
  clean, rep = _report(), _report()
  for r in rep.results: r.label = label
  md, md0 = R.markdown(rep), R.markdown(clean)
  assert md.count("<details>") == md.count("</details>") == md0.count("</details>")
  assert sum(ln.startswith("|") for ln in md.splitlines()) == sum(ln.startswith("|") for ln in md0.splitlines())
  assert _md_shape(md) == _md_shape(md0)

# *** terminal ***

def test_terminal_summary_escapes_everything_stored(monkeypatch):
  rep = _report(NASTY)
  out = R.terminal(rep, verbose=True)
  assert not RAW_CONTROL.search(out)
  assert "\\x1b[31mred" in out and "\\x9b" in out and "\\ud800" in out
  out.encode("utf-8")  # nothing that fails to print
  # stored values cannot add lines (forge "OK: ..." or a group) where one value fills one field
  assert len(R.terminal(_report(ONE_LINE), verbose=True).splitlines()) == len(R.terminal(_report(), verbose=True).splitlines())
  assert "OK: every capture replays identically." not in out.splitlines()
  monkeypatch.setattr(E, "terminal", str)
  monkeypatch.setattr(E, "terminal_line", str)
  assert "\x1b[31m" in R.terminal(rep, verbose=True)  # the plant: the raw ESC reaches the terminal

def test_escapes_are_idempotent_and_keep_plain_text():
  plain = "kernel mlp_small 0123abcd (db/x.db): max abs err 0.5, ünïcode ✓"
  for f in (E.terminal, E.terminal_line, E.visible):
    assert f(plain) == plain and f(f(NASTY)) == f(NASTY)
  assert E.md_code(plain) == plain and E.md_text("values_changed") == "values_changed"
  assert E.terminal("a\nb\tc") == "a\nb\tc" and E.terminal_line("a\nb") == "a\\nb"

# *** the store: invalid UTF-8 and control characters, through the CLI ***

@pytest.fixture
def nasty_db(db, tmp_path):
  """A copy of the workload store whose run and capture labels are invalid UTF-8 with escape sequences, and whose
  metadata and device hold C0 and C1 controls."""
  p = tmp_path / "nasty.db"
  shutil.copy(db, p)
  c = sqlite3.connect(p)
  c.execute("UPDATE runs SET label = CAST(X'ff411b5b33316d0d07' AS TEXT), device = ?", ("\x1b]0;pwned\x07CPU",))
  c.execute("UPDATE captures SET label = CAST(X'ff421b5b324a0a9b' AS TEXT), metadata = ?", ("\x1b[31mmeta\u009b[0m",))
  c.commit(); c.close()
  return p

def _run(*args):
  r = CliRunner().invoke(cli, [str(a) for a in args])
  for stream in (r.stdout_bytes, r.stderr_bytes):
    stream.decode("utf-8")  # strict: well-formed UTF-8
    assert not re.search(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]", stream), stream[:2000]
  return r

def _first_key(p) -> str:
  c = sqlite3.connect(p)
  try: return c.execute("SELECT input_key FROM captures ORDER BY run_id, seq, id LIMIT 1").fetchone()[0]
  finally: c.close()

def test_cli_reads_and_shows_a_hostile_store(db, nasty_db, tmp_path):
  clean = tmp_path / "clean.db"
  shutil.copy(db, clean)
  for p in (clean, nasty_db):  # exit codes as for a clean store
    assert _run("check", p, "-j", "1").exit_code == 0
    assert _run("stats", p).exit_code == 0
    assert _run("show", p, _first_key(p)[:16]).exit_code == 0
  st = _run("stats", nasty_db).stdout
  assert "label=\\xffA\\x1b[31m\\r\\x07" in st and "\\x1b]0;pwned\\x07CPU" in st and "\\xffB\\x1b[2J\\n\\x9b" in st
  sh = _run("show", nasty_db, _first_key(nasty_db)[:16]).stdout
  assert "label \\xffB\\x1b[2J\\n\\x9b," in sh and "made by: \\x1b[31mmeta\\x9b[0m" in sh

def test_cli_check_verbose_and_reports_of_a_hostile_store(nasty_db, tmp_path, monkeypatch):
  plant_no_fusion(monkeypatch)  # changed captures: their label, metadata and diff reach the summary and the reports
  xml, md = tmp_path / "r.xml", tmp_path / "r.md"
  r = _run("check", nasty_db, "-v", "-j", "1", "--no-determinism", "--junit", xml, "--report-md", md)
  assert r.exit_code == 1, r.output
  assert "example: \\xffB\\x1b[2J\\n\\x9b" in r.stdout and "made by: \\x1b[31mmeta\\x9b[0m" in r.stdout
  root = ET.parse(xml).getroot()
  assert int(root.get("tests")) > 0 and any("\\xffB\\x1b[2J" in (c.get("name") or "") for c in root.iter("testcase"))
  text = md.read_text(encoding="utf-8")
  assert not RAW_CONTROL.search(text) and text.count("<details>") == text.count("</details>") > 0

def test_cli_plant_default_decoder_fails(nasty_db, monkeypatch):
  """The plant: the default text decoder (strict UTF-8) cannot read the store: stats and check fail on it (a crash,
  or a storage error), where the fixed code reads it like a clean store."""
  monkeypatch.setattr(S, "_decode_text", str)
  for args in (("stats", nasty_db), ("check", nasty_db, "-j", "1", "--no-determinism")):
    r = CliRunner().invoke(cli, [str(a) for a in args])
    assert r.exit_code != 0 and "decode" in r.output + repr(r.exception), (args, r.output)

def test_cli_plant_unescaped_terminal(nasty_db, monkeypatch):
  monkeypatch.setattr(E, "terminal", str)
  monkeypatch.setattr(E, "terminal_line", str)
  r = CliRunner().invoke(cli, ["stats", str(nasty_db)])
  # the raw sequence (one that sets the window title) reaches the terminal; click strips only the colour ones, and only
  # when the output is not a terminal
  assert b"\x1b]0;pwned\x07" in r.stdout_bytes

def test_valid_text_reads_back_exactly(db):
  """The lenient decoder changes nothing for valid UTF-8: keys and labels are the same str objects' values as a plain
  connection gives."""
  c = sqlite3.connect(db)
  raw = [tuple(r) for r in c.execute("SELECT input_key, output_key, label, level FROM captures ORDER BY run_id, seq, id")]
  raw_runs = c.execute("SELECT * FROM runs ORDER BY id").fetchall()
  c.close()
  s = Store(db, readonly=True)
  try:
    got = [(r["input_key"], r["output_key"], r["label"], r["level"]) for r in s.captures()]
    runs = [tuple(r.values()) for r in s.runs()]
  finally: s.close()
  assert got == raw and runs == raw_runs and all(type(v) is str for row in got for v in row)

# *** report files: whole or not at all ***

def _paths(d: Path) -> F.ReportPaths:
  return F.ReportPaths(md=str(d / "r.md"), json=str(d / "r.json"), junit=str(d / "r.xml"), html=str(d / "r.html"))

def _damage(d: Path, before: dict[str, str]) -> list[str]:
  """What a failed write left wrong: a report file no longer as it was, or a file that was not there."""
  now = {p.name: p.read_text(encoding="utf-8", errors="replace") for p in d.iterdir()}
  return [f"{n} changed" for n in before if now.get(n) != before[n]] + [f"{n} left behind" for n in now if n not in before]

def _old_files(d: Path) -> dict[str, str]:
  before = {}
  for n in ("r.md", "r.json", "r.xml", "r.html"):
    (d / n).write_text(f"previous {n}\n" * 50)
    before[n] = (d / n).read_text()
  return before

def _naive_write(path, text) -> None:
  """The plant: the old writer (open, write, then the disk fills), which leaves a truncated file."""
  with open(path, "w", encoding="utf-8") as f: f.write(text[:len(text) // 2])
  raise OSError(errno.ENOSPC, "No space left on device")

def test_report_files_are_written_whole_or_not_at_all(tmp_path, monkeypatch):
  rep = _report(NASTY)
  F.write_reports(rep, _paths(tmp_path), drawings={})  # every kind, from hostile values: written, valid
  ET.parse(tmp_path / "r.xml")
  assert sorted(os.listdir(tmp_path)) == ["r.html", "r.json", "r.md", "r.xml"]
  assert "&lt;/details&gt;" in (tmp_path / "r.html").read_text(encoding="utf-8")  # the HTML stays inert
  # the disk fails midway (at the flush): the previous files stay, no temporary file, the documented error
  before = _old_files(tmp_path)
  def full(fd): raise OSError(errno.ENOSPC, "No space left on device")
  with monkeypatch.context() as m:
    m.setattr(os, "fsync", full)
    with pytest.raises(F.ReportWriteError, match="No space left"): F.write_reports(rep, _paths(tmp_path), drawings={})
  assert _damage(tmp_path, before) == []
  # a renderer raises midway: no file is touched (all are rendered before any is written), exit 2 through the CLI
  with monkeypatch.context() as m:
    m.setattr(R, "junit", lambda rep: 1 / 0)
    with pytest.raises(F.ReportWriteError, match="ZeroDivisionError"): F.write_reports(rep, _paths(tmp_path), drawings={})
    with pytest.raises(SystemExit) as e: common.write_reports(rep, *(str(tmp_path / n) for n in ("r.md", "r.json", "r.xml", "r.html")), drawings={})
    assert e.value.code == 2
  assert _damage(tmp_path, before) == []
  # the plant: the old, non-atomic writer; the check sees the truncated file
  with monkeypatch.context() as m:
    m.setattr(F, "write_atomic", _naive_write)
    with pytest.raises(F.ReportWriteError): F.write_reports(rep, _paths(tmp_path), drawings={})
  assert _damage(tmp_path, before) == ["r.md changed"]

def test_report_with_lone_surrogates_is_written(tmp_path):
  """A merged JSON report can carry lone surrogates (JSON spells them): every file is still written, as UTF-8."""
  rep = _report("\ud83d")
  F.write_reports(rep, _paths(tmp_path), drawings={})
  for n in ("r.md", "r.json", "r.xml", "r.html"): (tmp_path / n).read_bytes().decode("utf-8")
  assert "\\ud83d" in (tmp_path / "r.html").read_text(encoding="utf-8")
  assert H.render(rep, {})  # the renderer itself never encodes

def test_bidirectional_controls_are_shown_not_obeyed():
  # "Trojan Source": an override reorders what a terminal or a review page shows, so one label could display as another
  from replay.report import escape as E
  for s in ("safe\u202eexe.txt", "a\u2066b\u2069c"):
    for out in (E.terminal(s), E.terminal_line(s), E.xml_text(s)):
      assert not any(0x202a <= ord(c) <= 0x202e or 0x2066 <= ord(c) <= 0x2069 for c in out), out
  assert E.terminal("safe\u202eexe") == "safe\\u202eexe"

def test_the_gate_line_shows_a_stored_label_escaped(tmp_path):
  # the gate's decision quotes rows (their labels) of the report it reads: a crafted label must not reach the terminal raw
  import json as _json
  from click.testing import CliRunner
  from replay.cli.app import main as cli
  row = {"db": "x.db", "run_id": 1, "seq": 1, "level": "kernel", "label": "m\x1b]0;pwned\x07", "input_key": "ab" * 32,
         "stored_key": "cd" * 32, "outcome": "changed", "exec": {"verdict": "skipped", "reason": "no device"}}
  doc = {"schema": "tinysched-replay-report", "version": 1, "sources": ["x.db"], "summary": {"total": 1, "changed": 1},
         "exit_code": 1, "results": [row], "determinism": {"skipped": None}}
  (tmp_path / "r.json").write_text(_json.dumps(doc))
  r = CliRunner().invoke(cli, ["gate", "--from-report", str(tmp_path / "r.json"), "--accept"])  # (unverified: the rows are listed)
  assert r.exit_code == 1 and "FAIL" in r.output and "pwned" in r.output, r.output
  assert "\x1b" not in r.output and "\x07" not in r.output and "\\x1b" in r.output
