"""Replay: planted changes in the scheduler are found, grouped, reported, with the right exit codes."""
import hashlib, json, sqlite3, zlib
import numpy as np
from pathlib import Path
import pytest
from click.testing import CliRunner
import replay
from replay.cli.app import main as cli
from replay.check.pool import check
from replay.store.encode import key_of
from replay.report import text as R
import tinysched.schedule as S
import tinysched.scheduling.kernel_ast as KA
from tinysched import Tensor, Ops
from tinysched.rewrite import graph_rewrite, PatternMatcher, UPat
from tests.replay.changes import workload, patch_ast, plant_no_fusion, swap_commutative, double_consts

def sha(p: Path) -> str: return hashlib.sha256(p.read_bytes()).hexdigest()

def invoke(*args):
  return CliRunner().invoke(cli, [str(a) for a in args])

def test_unmodified_code_is_identical(db):
  before = sha(db)
  r = invoke("check", db, "-j", "2")
  assert r.exit_code == 0, r.output
  assert "changed: 0" in r.output and "identical:" in r.output
  assert sha(db) == before

def test_equivalent_rewrite_is_changed_one_group(db, monkeypatch, tmp_path):
  patch_ast(monkeypatch, lambda ast: graph_rewrite(ast, swap_commutative))
  before = sha(db)
  rep = check([str(db)], level="kernel", jobs=1)
  assert rep.exit_code() == 1
  changed = [r for r in rep.results if r.outcome == "changed"]
  assert changed and all(r.text_diff and r.changes for r in changed)
  groups = [g for g in rep.groups() if g["outcome"] == "changed"]
  assert len({g["signature"] for g in groups}) == len(groups)
  # every planted swap shows up as reordered sources, never as a constant change
  assert all("arg" not in g["signature"] for g in groups)
  # the planted rule is named as the one that built the changed nodes
  assert all("swap_commutative" in r.rules for r in changed)
  r = invoke("check", db, "--level", "kernel", "-j", "1", "--report-json", tmp_path / "r.json", "--report-md", tmp_path / "r.md",
             "--junit", tmp_path / "r.xml")
  assert r.exit_code == 1
  doc = json.loads((tmp_path / "r.json").read_text())
  assert doc["schema"] == "tinysched-replay-report" and doc["summary"]["changed"] == len(changed)
  assert "<failure" in (tmp_path / "r.xml").read_text()
  assert "process replay" in (tmp_path / "r.md").read_text()
  assert sha(db) == before

def test_constant_change_is_a_different_group(db, monkeypatch):
  patch_ast(monkeypatch, lambda ast: graph_rewrite(ast, swap_commutative))
  swap_sigs = {g["signature"] for g in check([str(db)], level="kernel", jobs=1).groups()}
  monkeypatch.undo()
  patch_ast(monkeypatch, double_consts)
  rep = check([str(db)], level="kernel", jobs=1)
  assert rep.exit_code() == 1
  const_sigs = {g["signature"] for g in rep.groups()}
  assert const_sigs and not (const_sigs & swap_sigs)
  assert any("CONST.arg" in s for s in const_sigs)
  ex = next(r for r in rep.results if r.outcome == "changed")
  assert any(c["path"].endswith("CONST.arg") for c in ex.changes)

def test_schedule_level_sees_fusion_changes(db, monkeypatch):
  plant_no_fusion(monkeypatch)
  rep = check([str(db)], level="schedule", jobs=1)
  changed = [r for r in rep.results if r.outcome == "changed"]
  assert changed
  assert all(r.kernel_list and r.kernel_list["new_count"] > r.kernel_list["old_count"] for r in changed)
  assert all(r.signature.startswith("schedule: kernels") for r in changed)

def test_error_is_reported_and_run_goes_on(db, monkeypatch):
  orig = S.full_ast_rewrite
  def boom(pre, var_vals, assigned, memo=None):
    if any(x.op is Ops.REDUCE_AXIS for x in pre.toposort()): raise ZeroDivisionError("planted failure")
    return orig(pre, var_vals, assigned, memo)
  monkeypatch.setattr(S, "full_ast_rewrite", boom)
  rep = check([str(db)], level="kernel", jobs=1)
  c = rep.counts()
  assert c["error"] > 0 and c["identical"] > 0  # the run went on after the first error
  err = next(r for r in rep.results if r.outcome == "error")
  assert "planted failure" in err.reason and "Traceback" in err.traceback
  assert rep.exit_code() == 2
  r = invoke("check", db, "--level", "kernel", "-j", "1", "-v")
  assert r.exit_code == 2 and "planted failure" in r.output and "next:" in r.output

def test_unknown_op_is_incompatible(db, tmp_path):
  copy = tmp_path / "copy.db"
  copy.write_bytes(db.read_bytes())
  c = sqlite3.connect(copy)
  (key,) = c.execute("SELECT input_key FROM captures WHERE level='kernel' LIMIT 1").fetchone()
  doc = json.loads(zlib.decompress(c.execute("SELECT data FROM graphs WHERE key=?", (key,)).fetchone()[0]))
  doc["nodes"][-1][0] = "TELEPORT"
  data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
  c.execute("INSERT INTO graphs (key, kind, data, size) VALUES (?,?,?,?)", (key_of(data), "kernel_input", zlib.compress(data), len(data)))
  c.execute("UPDATE captures SET input_key=? WHERE input_key=?", (key_of(data), key))
  c.commit(); c.close()
  before = sha(copy)
  r = invoke("check", copy, "-j", "1")
  assert r.exit_code == 2
  assert "incompatible: 1" in r.output and "TELEPORT" in r.output
  assert sha(copy) == before

def test_diff_two_stores(db, tmp_path, monkeypatch):
  r = invoke("diff", db, db)
  assert r.exit_code == 0, r.output
  new = tmp_path / "new.db"
  # a rule inside the code under capture (wrapping full_ast_rewrite would change what it returns, not what it captures)
  monkeypatch.setattr(KA, "views_down", KA.views_down + swap_commutative)
  with replay.capture(new, label="unit"): workload()
  r = invoke("diff", db, new, "--level", "kernel")
  assert r.exit_code == 1 and "changed:" in r.output and "SINK.src[0].STORE" in r.output
  # a capture only one side has is reported with the store that holds it
  from replay.check.pairs import compare
  part = tmp_path / "part.db"
  with replay.capture(part, label="unit"): Tensor([[1.0, 2.0], [3.0, 4.0]]).exp().sum(1).realize()  # a kernel the workload never made
  rep = compare(str(db), str(part), level="kernel")
  only = [x for x in rep.results if x.reason in ("only in the old capture", "only in the new capture")]
  assert only and all(x.db == (str(db) if x.reason == "only in the old capture" else str(part)) for x in only)
  assert {x.reason for x in only} == {"only in the old capture", "only in the new capture"}

def test_diff_names_the_rule_behind_a_change(tmp_path, monkeypatch):
  """`replay diff` describes a change as `replay check` does, with the rules that built the changed nodes, as long
  as the current code is the code that made the new store; other code cannot explain that store's change."""
  from replay.check.pairs import compare
  def capture(path):  # the same kernels under two labels: each pair is described, not just the first of its kind
    for label in ("one", "two"):
      with replay.capture(path, label=label): workload()
  old, new, last_pass = tmp_path / "old.db", tmp_path / "new.db", KA.number_rules
  capture(old)
  monkeypatch.setattr(KA, "number_rules", last_pass + swap_commutative)  # the last pass: the nodes it makes reach the AST
  capture(new)
  changed = [x for x in compare(str(old), str(new), level="kernel").results if x.outcome == "changed"]
  assert len(changed) >= 4 and {x.label for x in changed} == {"one", "two"}
  assert all(x.pair and x.changes and x.text_diff for x in changed)
  assert all(x.rules == ["swap_commutative"] for x in changed)
  other_way = PatternMatcher([(UPat((Ops.ADD, Ops.MUL), name="x"),
                               lambda x: x.replace(src=x.src[::-1]) if x.src[0].key > x.src[1].key else None, "swap_other_way")])
  monkeypatch.setattr(KA, "number_rules", last_pass + other_way)
  again = [x for x in compare(str(old), str(new), level="kernel").results if x.outcome == "changed"]
  assert [x.input_key for x in again] == [x.input_key for x in changed] and all(x.rules == [] for x in again)

def test_shards_partition_and_merge(db, tmp_path):
  whole = check([str(db)], jobs=1)
  parts = [check([str(db)], jobs=1, shard=(i, 3)) for i in range(3)]
  keys = [(r.level, r.input_key, r.run_id, r.seq) for p in parts for r in p.results]
  assert len(keys) == len(set(keys)) == len(whole.results)
  paths = []
  for i, p in enumerate(parts):
    R.write_json(p, tmp_path / f"s{i}.json"); paths.append(tmp_path / f"s{i}.json")
  r = invoke("report", "merge", *paths, "-o", tmp_path / "m.json")
  assert r.exit_code == 0, r.output
  merged = json.loads((tmp_path / "m.json").read_text())
  full = json.loads(json.dumps(R.to_json(whole)))  # through JSON as the merged one went (tuples become lists)
  # the merged report is the whole run's, except what depends on how it ran: the time taken and the worker count
  run_dependent = {"elapsed_s", "workers"}
  assert run_dependent <= merged.keys() & full.keys()
  strip = lambda d: {k: v for k, v in d.items() if k not in run_dependent}
  assert strip(merged) == strip(full)
  assert merged["results"] and merged["sources"] == [str(db)]

def test_bad_usage_exit_2(tmp_path):
  assert invoke("check", tmp_path / "missing.db").exit_code == 2
  assert invoke("check", "--shard", "5/2", tmp_path / "x.db").exit_code == 2
  assert invoke("check", "--level", "nope").exit_code == 2
  assert invoke("show", tmp_path / "missing.db", "abc").exit_code == 2

def test_show_and_stats(db):
  r = invoke("stats", db)
  assert r.exit_code == 0 and "distinct kernel ASTs" in r.output
  s = sqlite3.connect(db)
  (key,) = s.execute("SELECT input_key FROM captures WHERE level='kernel' LIMIT 1").fetchone()
  s.close()
  r = invoke("show", db, key[:10])
  assert r.exit_code == 0 and "== output ==" in r.output and "DEFINE_GLOBAL" in r.output
  (skey,) = sqlite3.connect(db).execute("SELECT input_key FROM captures WHERE level='schedule' LIMIT 1").fetchone()
  r = invoke("show", db, skey[:10])  # a schedule capture: its input is (big graph, var_vals, flags)
  assert r.exit_code == 0 and "== input (big graph) ==" in r.output and "-- kernel 0 --" in r.output, r.output
  r = invoke("show", db, "")  # every capture matches: ambiguous, never a guess
  assert r.exit_code == 2 and "ambiguous" in r.output and "give more characters" in r.output

def test_program_level_sees_codegen_changes(tmp_path, monkeypatch):
  pytest.importorskip("pyopencl")
  from tinysched.codegen import program as P
  from tinysched.codegen.target import GENERIC_GPU
  db = tmp_path / "prog.db"
  x = Tensor(np.arange(64, dtype=np.float32).reshape(8, 8))
  ast = (x * 2).sum(1).schedule()[-1].ast
  with replay.capture(db, label="p", levels=("program",)):
    P.to_program(ast, None, GENERIC_GPU)
    P.to_program(ast, (), GENERIC_GPU)
  assert check([str(db)], jobs=1).exit_code() == 0
  orig = P.render
  monkeypatch.setattr(P, "render", lambda lw, t: orig(lw, t).replace("{", "{ /* planted */", 1))
  rep = check([str(db)], jobs=1)
  assert rep.exit_code() == 1 and rep.counts()["changed"] == 2
  r = rep.results[0]
  assert "planted" in r.text_diff and r.signature.startswith("program:")

def test_diff_pairs_schedule_calls_by_input_before_call_order(tmp_path):
  """The new side makes one schedule call more, first: the calls both sides make must still pair with each other
  (by input key), not shift by one and all look changed."""
  from replay.check.pairs import compare
  from tinysched import Tensor
  def a(): (Tensor.arange(12).reshape(3, 4).float().sum(1) + 1).realize()
  def b(): (Tensor.arange(6).float().exp() * 2).realize()
  def c(): (Tensor.arange(8).float().max() - 3).realize()
  with replay.capture(tmp_path / "old.db", label="m", levels=("schedule",)): a(); b()
  with replay.capture(tmp_path / "new.db", label="m", levels=("schedule",)): c(); a(); b()
  rep = compare(str(tmp_path / "old.db"), str(tmp_path / "new.db"))
  got = sorted((r.outcome, r.reason or "") for r in rep.results)
  assert got == [("changed", "only in the new capture"), ("identical", ""), ("identical", "")], got

def test_a_run_that_replays_nothing_fails(db, tmp_path):
  # every filter that can empty a run: exit 2, naming the filter; --allow-empty makes the empty run a result (exit 0)
  for args, named in ((["--label", "no-such-model"], "--label no-such-model"), (["--key", "ffffffffffff"], "--key ffffffffffff"),
                      (["--level", "program", "--label", "no-such-model"], "--level program --label no-such-model")):
    r = invoke("check", db, *args)
    assert r.exit_code == 2 and "nothing to replay" in r.output and named in r.output, r.output
    assert invoke("check", db, *args, "--allow-empty").exit_code == 0
  # a shard that holds no row: with more shards than rows one of them is empty
  from replay.store.sqlite import Store
  s = Store(db, readonly=True)
  try: n = len(list(s.captures()))
  finally: s.close()
  outs = [invoke("check", db, "--shard", f"{i}/{n + 1}") for i in range(n + 1)]
  empty = [r for r in outs if "nothing to replay" in r.output]
  assert empty and all(r.exit_code == 2 and "--shard" in r.output for r in empty)
  # the same through the library: CheckError, never an empty Report that passes

  from replay.check import CheckError, Selection, run
  with pytest.raises(CheckError, match="--label no-such-model selects no capture"): run(Selection((str(db),), label="no-such-model"))
  assert run(Selection((str(db),), label="no-such-model", allow_empty=True)).exit_code() == 0
  # replay diff of two stores filtered to nothing
  r = invoke("diff", db, db, "--label", "no-such-model")
  assert r.exit_code == 2 and "nothing to replay" in r.output
