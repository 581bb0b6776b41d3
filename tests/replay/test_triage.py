"""Triage: `replay blame` names the rule behind a change, `replay minimize` shrinks the input and writes a repro.

The change under triage is planted as real code: a copy of this checkout with one scheduler rule edited (constants
doubled where a view meets them), so old and new run in probes of their own exactly as for two commits.
"""
import json, os, shutil, subprocess, sys
from pathlib import Path
import pytest
from click.testing import CliRunner
from tinysched import Tensor
from tests.replay.changes import capture_store

ROOT = Path(__file__).resolve().parents[2]
RULE = '  (UPat((Ops.CONST, Ops.DEFINE_VAR, Ops.BIND), name="c").view(), lambda c: c, "view_of_const"),'
PLANTED = ('  (UPat((Ops.CONST, Ops.DEFINE_VAR, Ops.BIND), name="c").view(), lambda c: c.replace(arg=c.arg * 2) if c.op is Ops.CONST '
           'and type(c.arg) is float and c.arg not in (0.0, 1.0) else c, "view_of_const"),')

def copy_tree(dst: Path) -> Path:
  files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", "tinysched", "replay"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\0")
  for f in files:
    src = ROOT / f
    if not f or not src.is_file() or "__pycache__" in f: continue
    (dst / f).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst / f)
  return dst

@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> Path:
  tree = copy_tree(tmp_path_factory.mktemp("planted"))
  p = tree / "tinysched/scheduling/kernel_ast.py"
  text = p.read_text()
  assert RULE in text, "the rule this test plants a change in has moved: update RULE"
  p.write_text(text.replace(RULE, PLANTED))
  return tree

def small_workload():
  Tensor.manual_seed(5)
  x = Tensor.rand(4, 8)
  ((x * 0.75 + 0.25).exp() * x).sum(1).realize()  # constants meet views: the planted rule changes this kernel
  (x.max(1) + 2.0).realize()

@pytest.fixture(scope="module")
def store(tmp_path_factory):
  return capture_store(tmp_path_factory.mktemp("triage") / "t.db", small_workload, "unit")

def changed_key(db: Path, tree: Path, level: str = "kernel") -> str:
  """A capture of `level` the planted tree replays differently."""
  from replay.store.sqlite import Store
  from replay.triage.probe import Probe, sha
  s = Store(db, readonly=True)
  try:
    with Probe(tree, "planted") as p:
      for row in s.captures(level=level):
        if p.ask(level, s.blob(row["input_key"])).get("key") != sha(s.blob(row["output_key"])): return row["input_key"]
  finally: s.close()
  raise AssertionError(f"the planted rule changes no {level}-level capture")

def test_blame_names_the_planted_rule(store, planted):
  from replay.store.sqlite import Store
  from replay.triage.blame import blame
  key = changed_key(store, planted)
  s = Store(store, readonly=True)
  try:
    res = blame(s, key[:16], ROOT, planted)
    assert res["verdict"] == "blamed" and res["rule"] == res["old_rule"] == "view_of_const", res
    # the application where they part: the same rule on the same node, with another result (0.75 vs 1.5)
    assert res["node"] == res["old_node"] and res["node"].startswith("VIEW") and res["result"] != res["old_result"]
    assert 0 < res["application"] <= res["applications_new"]
    assert blame(s, key[:16], ROOT, ROOT)["verdict"] == "identical"  # no change: nothing to blame
  finally: s.close()

def test_blame_and_minimize_from_the_cli(store, planted, tmp_path):
  """minimize: <= 10 nodes within the time limit; the repro passes on the old code and fails on the new."""
  from replay.cli.app import main as cli
  key = changed_key(store, planted)[:16]
  # the CLI always takes this checkout as the new code: run it from the planted copy
  env = {**os.environ, "PYTHONPATH": str(planted)}
  r = subprocess.run([sys.executable, "-m", "replay.cli", "blame", str(store), key, "--old-tree", str(ROOT), "--json"],
                     cwd=planted, env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  assert json.loads(r.stdout)["rule"] == "view_of_const"
  out = tmp_path / "test_repro.py"
  r = subprocess.run([sys.executable, "-m", "replay.cli", "minimize", str(store), key, "--old-tree", str(ROOT), "-o", str(out),
                      "--time-limit", "60"], cwd=planted, env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  nodes = int(r.stdout.split(" -> ")[1].split()[0])
  assert nodes <= 10, r.stdout
  def run_repro(tree: Path) -> int:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(out)], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True, timeout=300).returncode
  assert run_repro(ROOT) == 0 and run_repro(planted) == 1
  # bad input: exit 2 with what to do
  res = CliRunner().invoke(cli, ["blame", str(store), "ffffffff", "--old-tree", str(ROOT)])
  assert res.exit_code == 2 and "no capture" in res.output

def test_blame_works_for_an_old_checkout_without_the_limit(store, planted, tmp_path):
  """Captures made before rewrite_limit existed: the probe puts the same limit around rewrite_named, and blame says
  the same."""
  from replay.store.sqlite import Store
  from replay.triage.blame import blame
  old = copy_tree(tmp_path / "old")
  p = old / "tinysched/rewrite.py"
  p.write_text(p.read_text().replace("def rewrite_limit(", "def _not_yet_rewrite_limit("))
  key = changed_key(store, planted)[:16]
  s = Store(store, readonly=True)
  try: a, b = blame(s, key, ROOT, planted), blame(s, key, old, planted)
  finally: s.close()
  assert a["verdict"] == "blamed" and {k: v for k, v in a.items() if k not in ("seconds", "probes")} == \
    {k: v for k, v in b.items() if k not in ("seconds", "probes")}

PROGRAM_RULE = '  (UPat(Ops.ADD, src=(UPat.var("x"), UPat.const(None, 0))), lambda x: x, "add_zero"),'

def test_blame_at_program_level(tmp_path):
  """A planted index simplification change (x + 0 -> x + 1) in codegen, blamed on a program-level capture made
  without any device (codegen for the generic GPU target)."""
  import replay
  from replay.store.sqlite import Store
  from replay.triage.blame import blame
  from tinysched.codegen import to_program, GENERIC_GPU
  tree = copy_tree(tmp_path / "planted")
  p = tree / "tinysched/symbolic.py"
  assert PROGRAM_RULE in p.read_text(), "the rule this test plants a change in has moved: update PROGRAM_RULE"
  p.write_text(p.read_text().replace(PROGRAM_RULE, PROGRAM_RULE.replace("lambda x: x,", "lambda x: x + 1,")))
  db = tmp_path / "p.db"
  Tensor.manual_seed(1)
  x = Tensor.rand(6, 10)
  items = [si for si in (x.pad(((1, 1), (0, 2))) * 2).sum(1).schedule() if si.ast.op.name == "SINK"]
  with replay.capture(db, label="unit", levels=("program",)):
    for si in items: to_program(si.ast, None, GENERIC_GPU)
  key = changed_key(db, tree, "program")[:16]
  s = Store(db, readonly=True)
  try: res = blame(s, key, ROOT, tree)
  finally: s.close()
  assert res["level"] == "program" and res["verdict"] == "blamed" and res["rule"] == "add_zero", res

def test_minimize_a_schedule_level_capture(store, planted, tmp_path):
  """The same planted rule seen through a whole schedule: the big graph shrinks, and its repro tells old from new."""
  from replay.store.sqlite import Store
  from replay.triage.blame import minimize, repro_test
  key = changed_key(store, planted, "schedule")[:16]
  s = Store(store, readonly=True)
  try: res = minimize(s, key, ROOT, planted, time_limit=60)
  finally: s.close()
  assert res["level"] == "schedule" and res["nodes"] <= 10 < res["nodes_before"] and not res["timed_out"], res["pretty"]
  out = tmp_path / "test_repro_schedule.py"
  out.write_text(repro_test(res, str(store), key))
  def run_repro(tree: Path) -> int:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(out)], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True, timeout=300).returncode
  assert run_repro(ROOT) == 0 and run_repro(planted) == 1
