"""Changes grouped by cause (replay/check/causes.py, issue 41): a rule added across dozens of diff shapes is one group
named by the rule, two rules that change a kernel together are named as the pair (and neither alone), and a rule whose
behaviour changed is named by nothing it is not (its rows keep their shape groups). Plants: tests/replay/plants."""
import json, os, shutil, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[2]
PLANTS = ROOT / "tests" / "replay" / "plants"
STORES = ["captures/mlp_digits.db", "captures/cnn_train.db"]

def check(tmp_path: Path, plant: str, *extra: str) -> dict:
  out = tmp_path / f"{plant}.json"
  env = {**os.environ, "TINYSCHED_TEST_PLANT": plant, "PYTHONPATH": os.pathsep.join([str(PLANTS), str(ROOT)]),
         "TINYSCHED_CACHE": str(tmp_path / "cache")}
  # (a budget no loaded machine reaches: what is named must not hang on how busy the machine is)
  r = subprocess.run([sys.executable, "-m", "replay.cli", "check", *STORES, "--no-determinism", "--causes-budget", "600", "--report-json", str(out),
                      *extra],
                     cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
  assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
  doc = json.loads(out.read_text())
  doc["stdout"] = r.stdout
  return doc

def changed_groups(doc: dict) -> list[dict]: return [g for g in doc["groups"] if g["outcome"] == "changed"]

def test_one_added_rule_is_one_group_named_by_it(tmp_path):
  doc = check(tmp_path, "swap")
  groups = changed_groups(doc)
  changed = doc["summary"]["changed"]
  assert changed > 50
  top = groups[0]
  assert top["signature"].startswith("cause: ") and top["count"] == changed, [(g["count"], g["signature"][:60]) for g in groups]
  shapes = {r["signature"] for r in doc["results"] if r["outcome"] == "changed"}
  assert len(shapes) > 10  # by the diff's shape alone they were that many groups
  assert "without it the stored output comes back" in doc["stdout"] and "diff shape(s)" in doc["stdout"]
  again = check(tmp_path, "swap")  # the causes are cached by code, input and stored output: the second run replays nothing for them
  assert again["causes"]["cached"] == again["causes"]["groups"]
  assert changed_groups(again)[0]["signature"] == top["signature"]

def test_two_rules_that_change_a_kernel_together_are_named_as_the_pair(tmp_path):
  doc = check(tmp_path, "swap_pair")
  names = {g["signature"]: g["count"] for g in changed_groups(doc)}
  assert "cause: swap_add" in names and "cause: swap_mul" in names, names
  pair = [s for s in names if s.startswith("cause: ") and "swap_add" in s and "swap_mul" in s]
  assert pair, names
  assert sum(names[s] for s in names if s.startswith("cause: ")) == doc["summary"]["changed"], names

def test_the_pair_is_minimal(tmp_path):
  # the cause search from Python on one pair row: each rule alone leaves it changed, both together restore it
  env = {**os.environ, "TINYSCHED_TEST_PLANT": "swap_pair", "PYTHONPATH": os.pathsep.join([str(PLANTS), str(ROOT)]),
         "TINYSCHED_CACHE": str(tmp_path / "cache")}
  code = f"""
import json
from replay.check import run, Selection, Options, causes
from replay.store.sqlite import Store
rep = run(Selection({STORES!r}), Options(causes=True, causes_budget=600))
row = next(r for r in rep.results if r.cause and r.cause.get("rules") and len(r.cause["rules"]) == 2 and not r.cause["sampled"])
st = Store(row.db, readonly=True)
cap = next(x for x in st.captures(level=row.level, key=row.input_key) if x["input_key"] == row.input_key and x["seq"] == row.seq)
r = causes._Row(st, cap, False)
a, b = row.cause["rules"]
print(json.dumps([r.key_without([a]) == cap["output_key"], r.key_without([b]) == cap["output_key"], r.key_without([a, b]) == cap["output_key"]]))
"""
  r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
  assert r.returncode == 0, r.stderr[-2000:]
  assert json.loads(r.stdout.splitlines()[-1]) == [False, False, True]

def _changed_rule_check(tmp_path: Path, stores: list[Path]) -> dict:
  # view_of_const itself now doubles the float constants it meets (a copy of the project with the rule edited, as
  # tests/replay/test_triage.py plants it): no rule turned off gives the stored output back
  from tests.replay.test_commits import copy_project
  from tests.replay.test_triage import RULE, PLANTED
  tree = tmp_path / "tree"
  if not tree.exists():
    copy_project(tree)
    src = (tree / "tinysched/scheduling/kernel_ast.py").read_text()
    assert src.count(RULE) == 1
    (tree / "tinysched/scheduling/kernel_ast.py").write_text(src.replace(RULE, PLANTED))
  out = tmp_path / "r.json"
  r = subprocess.run([sys.executable, "-m", "replay.cli", "check", *[str(s) for s in stores], "--no-determinism", "--causes-budget", "600",
                      "--report-json", str(out)],
                     cwd=tree, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(tree),
                                                                                   "TINYSCHED_CACHE": str(tmp_path / "cache")})
  assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
  doc = json.loads(out.read_text())
  doc["stdout"] = r.stdout
  return doc

def test_a_changed_rule_is_named_by_blame_with_the_old_code(tmp_path):
  # no rule turned off explains it; blame against the capture's commit (a worktree of the repository that holds the
  # stores: the copy has no .git) names the rule whose behaviour changed, and the shape groups merge under it
  doc = _changed_rule_check(tmp_path, [ROOT / s for s in STORES])
  changed = [x for x in doc["results"] if x["outcome"] == "changed"]
  causes = {tuple((x.get("cause") or {}).get("rules") or ()) for x in changed}
  assert ("view_of_const (changed)",) in causes and causes <= {("view_of_const (changed)",), ()}, causes
  top = changed_groups(doc)[0]
  assert top["signature"] == "cause: view_of_const (changed)" and top["count"] >= 0.9 * len(changed), changed_groups(doc)
  assert "blame with the old code" in doc["stdout"] and doc["causes"]["old_code"]["named"] >= 1
  assert any("view_of_const" in (x.get("rules") or []) for x in changed)  # the rules that built the changed nodes name it too

def test_a_changed_rule_is_given_no_false_cause_without_the_old_code(tmp_path):
  # the same change, the stores' commit unknown to every repository: no old code, so no cause is claimed at all
  import sqlite3  # (this test edits the copies' run records by hand)
  stores = []
  for s in STORES:
    shutil.copy(ROOT / s, dst := tmp_path / Path(s).name)
    with sqlite3.connect(dst) as c: c.execute("update runs set git_commit = ?", ("0" * 40,))
    stores.append(dst)
  doc = _changed_rule_check(tmp_path, stores)
  changed = [x for x in doc["results"] if x["outcome"] == "changed"]
  assert changed and not any((x.get("cause") or {}).get("rules") for x in changed), [x["cause"] for x in changed][:3]
  assert not any(g["signature"].startswith("cause: ") for g in changed_groups(doc))

@pytest.mark.parametrize("off", [True])
def test_the_step_can_be_turned_off(tmp_path, off):
  doc = check(tmp_path, "swap", "--no-causes")
  assert doc["causes"] is None and not any(g["signature"].startswith("cause: ") for g in changed_groups(doc))

IN_MEMORY = """
import json
from tinysched import schedule as S
from tinysched.ops import Ops
from replay.check import run, Selection, Options
from replay.triage import old_causes
orig = S.full_ast_rewrite
def doubled(u, memo):  # (rebuilt by hand: no rule, so no rule turned off gives the stored output back)
  if u not in memo:
    src = tuple(doubled(s, memo) for s in u.src)
    memo[u] = (u.replace(arg=u.arg * 2) if u.op is Ops.CONST and isinstance(u.arg, float) and u.arg not in (0.0, 1.0)
               else u.replace(src=src) if src != u.src else u)
  return memo[u]
def patched(pre, var_vals, assigned, memo=None):  # a change in memory only: every float constant of a kernel doubled
  ast, ctx = orig(pre, var_vals, assigned, memo)
  return doubled(ast, {}), ctx
S.full_ast_rewrite = patched
rep = run(Selection(["captures/mlp_digits.db"], level="kernel"), Options(determinism=False, causes_budget=600,
                                                                         old_code_causes=old_causes.attribute))
print(json.dumps({"changed": rep.counts()["changed"], "old_code": (rep.causes or {}).get("old_code"),
                  "named": sum(1 for r in rep.results if r.cause and r.cause.get("rules"))}))
"""

def test_a_change_in_memory_makes_no_worktree_and_no_cause(tmp_path):
  # the probes run this checkout's files, which do not make the output the check made: the old-code step stops before
  # any worktree (git worktree list is unchanged) and names nothing
  before = subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True).stdout
  r = subprocess.run([sys.executable, "-c", IN_MEMORY], cwd=ROOT, capture_output=True, text=True, timeout=600,
                     env={**os.environ, "TINYSCHED_CACHE": str(tmp_path / "cache")})
  assert r.returncode == 0, r.stderr[-2000:]
  got = json.loads(r.stdout.splitlines()[-1])
  assert got["changed"] > 0 and got["named"] == 0 and got["old_code"] and got["old_code"].get("in_memory") == 1, got
  assert subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True).stdout == before
