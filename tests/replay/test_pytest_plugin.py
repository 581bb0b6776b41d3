"""The pytest plugin: `pytest --replay DIR` gives the same verdicts as `replay check`, with xdist, -k and --junitxml."""
from __future__ import annotations
import json, os, shutil, sqlite3, subprocess, sys
import xml.etree.ElementTree as ET
from importlib.metadata import entry_points
from pathlib import Path
import pytest
from click.testing import CliRunner
import replay
from replay.cli.app import main as cli
from tinysched import Tensor

ROOT = Path(__file__).resolve().parents[2]

def workload(shift: float):
  Tensor.manual_seed(7)
  x, w = Tensor.rand(4, 8), Tensor.rand(8, 3)
  (x @ w).relu().sum(1).realize()
  (x * 2 + shift).realize()
  (x - x.max(1, keepdim=True)).exp().realize()

@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> Path:
  """caps/models.db (labels alpha, beta) and caps/other.db (unlabelled); one beta kernel's stored output is
  swapped for another kernel's output: a valid AST, just not the one the code makes (a planted change)."""
  caps = tmp_path_factory.mktemp("plugin") / "caps"
  caps.mkdir()
  with replay.capture(caps / "models.db", label="alpha"): workload(1.0)
  with replay.capture(caps / "models.db", label="beta"): workload(3.0)
  with replay.capture(caps / "other.db"): (Tensor.rand(3, 3) + 2).realize()
  for p in ("models.db", "other.db"):
    c = sqlite3.connect(caps / p); c.execute("PRAGMA journal_mode=DELETE"); c.close()
  c = sqlite3.connect(caps / "models.db")
  rows = c.execute("SELECT id, output_key FROM captures WHERE level='kernel' AND label='beta' ORDER BY seq").fetchall()
  victim, other = rows[0], next(r for r in rows if r[1] != rows[0][1])
  with c: c.execute("UPDATE captures SET output_key=? WHERE id=?", (other[1], victim[0]))
  c.close()
  return caps

def run_pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess:
  (cwd / "pytest.ini").write_text("[pytest]\n")  # isolated from this repository's configuration and conftest
  # only the plugins under test (autoloading every installed plugin costs seconds per run; xdist workers inherit this)
  env = {**os.environ, "PYTHONPATH": str(ROOT), "TINYSCHED_DEVICE": "NUMPY", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
  env.pop("PYTEST_ADDOPTS", None)
  return subprocess.run([sys.executable, "-m", "pytest", "-c", str(cwd / "pytest.ini"), "-p", "no:cacheprovider", "-p", "xdist.plugin",
                         "-p", "replay.baseline.pytest_plugin", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)

def check_verdicts(caps: Path, tmp: Path) -> dict[str, bool]:
  """replay check's verdicts as {item name: failed}."""
  r = CliRunner().invoke(cli, ["check", *map(str, sorted(caps.glob("*.db"))), "-j", "1", "--report-json", str(tmp / "check.json")])
  assert r.exit_code == 1, r.output
  out: dict[str, bool] = {}
  for res in json.loads((tmp / "check.json").read_text())["results"]:
    name = f"replay[{Path(res['db']).name}::{res['label'] or '-'}::{res['level']}]"
    out[name] = out.get(name, False) or res["outcome"] != "identical"
  return out

def test_plugin_with_xdist_matches_replay_check(stores, tmp_path):
  work = tmp_path / "work"
  shutil.copytree(stores, work / "caps")
  want = check_verdicts(work / "caps", tmp_path)
  assert sum(want.values()) == 1 and want["replay[models.db::beta::kernel]"]
  r = run_pytest(work, "--replay", "caps", "-n", "2", "--junitxml", str(tmp_path / "j.xml"))
  assert r.returncode == 1, r.stdout + r.stderr
  cases = {tc.get("name"): tc for tc in ET.parse(tmp_path / "j.xml").getroot().iter("testcase")}
  got = {name: tc.find("failure") is not None or tc.find("error") is not None for name, tc in cases.items()}
  assert got == want
  # the failure carries the grouped report, with what to do next
  fail = cases["replay[models.db::beta::kernel]"].find("failure")
  assert "[changed] x1" in fail.text and "exit 1: changes found" in fail.text and "next:" in fail.text
  props = {p.get("name"): p.get("value") for p in cases["replay[models.db::alpha::kernel]"].iter("property")}
  assert props["changed"] == "0" and int(props["identical"]) > 0
  assert "1 failed, 5 passed" in r.stdout

def test_plugin_k_selects_and_order_is_fixed(stores, tmp_path):
  r = run_pytest(tmp_path, "--replay", str(stores), "--collect-only", "-q")
  assert r.returncode == 0, r.stdout + r.stderr
  ids = [ln for ln in r.stdout.splitlines() if "::replay[" in ln]
  assert [i.split("::", 1)[1] for i in ids] == [
    "replay[models.db::alpha::kernel]", "replay[models.db::alpha::schedule]", "replay[models.db::beta::kernel]",
    "replay[models.db::beta::schedule]", "replay[other.db::-::kernel]", "replay[other.db::-::schedule]"]
  r = run_pytest(tmp_path, "--replay", str(stores / "models.db"), "-k", "beta and kernel", "-v")
  assert r.returncode == 1 and "1 failed, 3 deselected" in r.stdout, r.stdout + r.stderr

def test_plugin_bad_input(tmp_path):
  r = run_pytest(tmp_path, "--replay", str(tmp_path / "nope"))
  assert r.returncode == 4 and "no such file or directory" in r.stderr
  (tmp_path / "caps").mkdir()
  (tmp_path / "caps" / "junk.db").write_bytes(b"junk" * 100)
  r = run_pytest(tmp_path, "--replay", "caps")
  assert r.returncode == 2 and "not a capture store" in r.stdout, r.stdout + r.stderr

def test_plugin_is_a_pytest11_entry_point():
  tomllib = pytest.importorskip("tomllib")
  doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
  assert doc["project"]["entry-points"]["pytest11"]["replay.baseline.pytest_plugin"] == "replay.baseline.pytest_plugin"
  assert "pytest-xdist" in doc["project"]["optional-dependencies"]["dev"]
  eps = [ep for ep in entry_points(group="pytest11") if ep.name == "replay.baseline.pytest_plugin"]
  if not eps: pytest.skip("the package is installed without the pytest11 entry point: run `pip install -e .` again")
  import replay.baseline.pytest_plugin
  assert eps[0].load() is replay.baseline.pytest_plugin

# *** pytest --replay-capture: a project's own tests as replay inputs ***

CAPTURED_TESTS = '''
import replay
from tinysched import Tensor
from tinysched.scheduling import kernel_ast as KA

def test_plain():
  Tensor.manual_seed(1)
  (Tensor.rand(4, 8).sum(1) * 3).realize()

def test_patched_rule(monkeypatch):
  # a test that plants a bug in a scheduler rule: what it schedules is no baseline
  monkeypatch.setattr(KA, "rewrite_kernel", lambda pre, assigned, orig=KA.rewrite_kernel: orig(pre, assigned))
  (Tensor.rand(5, 7).max(1) + 9).realize()

def test_its_own_capture(tmp_path):
  with replay.capture(tmp_path / "own.db", label="own"): (Tensor.rand(3, 3) * 5).realize()
  import sqlite3
  assert sqlite3.connect(tmp_path / "own.db").execute("SELECT count(*) FROM captures").fetchone()[0] > 0

def test_after():
  (Tensor.rand(6, 2).exp().sum()).realize()
'''

@pytest.mark.parametrize("workers", [0, 2])
def test_replay_capture_records_the_tests_by_node_id(tmp_path, workers):
  """Every scheduler call of a test run, labelled with its test; nothing from a test that patched the rules; a test
  that captures on its own still does (the session capture pauses) and the session goes on after it. The store then
  replays as identical."""
  (tmp_path / "test_some.py").write_text(CAPTURED_TESTS)
  db = tmp_path / "tests.db"
  r = run_pytest(tmp_path, "test_some.py", "--replay-capture", str(db), *(["-n", str(workers)] if workers else []))
  assert r.returncode == 0, r.stdout + r.stderr
  c = sqlite3.connect(db)
  labels = {lbl for (lbl,) in c.execute("SELECT DISTINCT label FROM captures")}
  assert labels == {"test_some.py::test_plain", "test_some.py::test_after"}, labels
  assert c.execute("SELECT count(*) FROM runs").fetchone()[0] == max(workers, 1)  # one run per test process
  c.close()
  if not workers: assert "call(s) not captured" in r.stderr + r.stdout and "rules were patched" in r.stderr + r.stdout  # said, not silent
  res = CliRunner().invoke(cli, ["check", str(db), "-j", "1"])
  assert res.exit_code == 0, res.output
  bad = run_pytest(tmp_path, "test_some.py", "--replay-capture", str(db), "--replay-capture-levels", "kernel,bogus")
  assert bad.returncode != 0 and "unknown level" in bad.stdout + bad.stderr
