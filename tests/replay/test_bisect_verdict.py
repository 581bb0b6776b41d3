"""`replay bisect` by verdict (issue 41): six commits, #2 an equivalent refactor (ADD's operands reordered: changed
ASTs, the same numbers), #4 a codegen bug (float ADD rendered as a subtraction: wrong numbers). By default the bisect
looks for the worst verdict BAD shows (`wrong`) and names #4; `--until changed` names #2, the first divergence (what
bisect named before it looked at verdicts)."""
from __future__ import annotations
import pytest
from replay.triage import bisect as B
from tests.replay.test_bisect import ANCHOR, KERNEL_AST, RULE, cli, assert_clean
from tests.replay.test_commits import History, copy_project
from tests.replay.changes import capture_store, opencl_here

RENDER = "tinysched/codegen/opencl.py"
ADD_LINE = '  if op is Ops.ADD: return f"({a[0]}|{a[1]})" if isb else w(f"({a[0]}+{a[1]})")\n'
BUG = '  if op is Ops.ADD and dtypes.is_float(dt): return w(f"({a[0]}-{a[1]})")\n'

def workload():
  from tinysched import Tensor
  Tensor.manual_seed(0)
  x = Tensor.rand(4, 8)
  (x + 1).realize()            # ADD: reordered at #2, miscompiled at #4
  (x * 3).sum(1).realize()     # a reduce: its accumulation is an ADD too

@pytest.fixture(scope="module")
def history(tmp_path_factory) -> dict:
  d = tmp_path_factory.mktemp("bisect_verdict")
  repo = d / "repo"
  copy_project(repo)
  h = History(repo)
  commit, note, shas = h.commit, h.note, h.shas
  commit("c0: the project")
  note(1); commit("c1: notes")
  src = (repo / KERNEL_AST).read_text()
  assert src.count(ANCHOR) == 1
  (repo / KERNEL_AST).write_text(src.replace(ANCHOR, ANCHOR + RULE)); commit("c2: ADD puts a constant operand first (equivalent)")
  note(3); commit("c3: notes")
  src = (repo / RENDER).read_text()
  assert src.count(ADD_LINE) == 1
  (repo / RENDER).write_text(src.replace(ADD_LINE, BUG + ADD_LINE)); commit("c4: render float ADD (a codegen bug)")
  note(5); commit("c5: notes")
  return {"repo": repo, "c": shas, "db": capture_store(d / "base.db", workload, "tiny")}

def test_verdict_classes_rank_worst_first():
  assert B.verdict_class({"outcome": "changed", "exec": {"verdict": "equivalent"}}) == "changed"
  assert B.verdict_class({"outcome": "identical", "exec": {"verdict": "wrong"}}) == "wrong"
  assert B.verdict_class({"outcome": "changed", "exec": {"verdict": "mismatch"}}) == "mismatch"
  assert B.verdict_class({"outcome": "identical", "exec": {"verdict": "equivalent"}}) is None
  assert B.at_least("wrong", "mismatch") and B.at_least("mismatch", "changed") and not B.at_least("changed", "mismatch")
  doc = {"results": [{"level": "kernel", "input_key": "a", "outcome": "changed", "exec": {"verdict": "equivalent"}},
                     {"level": "kernel", "input_key": "b", "outcome": "identical", "exec": {"verdict": "wrong"}}]}
  assert B.judge(doc, {("kernel", "b")}, "wrong").verdict == B.BAD
  assert B.judge({"results": doc["results"][:1]}, {("kernel", "a")}, "wrong").verdict == B.GOOD   # changed, numbers right
  assert B.judge({"results": doc["results"][:1]}, {("kernel", "a")}, "changed").verdict == B.BAD

def run(history: dict, *args: str) -> tuple[int, str]:
  p = cli(history, *args, env={"TINYSCHED_DEVICE": "OPENCL"})  # the execution check on compiled kernels (the suite's default is NUMPY)
  out, _ = p.communicate(timeout=600)
  return p.returncode, out

@pytest.mark.skipif(not opencl_here(), reason="a codegen bug shows only where kernels are compiled (OpenCL)")
def test_bisect_follows_the_worst_verdict_not_the_first_divergence(history, tmp_path):
  tmp = tmp_path / "wt"; tmp.mkdir()
  c = history["c"]
  rc, out = run(history, c[0], c[5], str(history["db"]), "--tmp-dir", str(tmp))
  assert rc == 0, out
  assert "worst verdict at BAD: wrong" in out and f"first wrong commit: {c[4]} c4: render float ADD" in out, out
  assert c[2][:10] not in out.split("first wrong commit")[1]
  rc, out = run(history, c[0], c[5], str(history["db"]), "--tmp-dir", str(tmp), "--until", "changed")
  assert rc == 0, out
  assert f"first bad commit: {c[2]} c2: ADD puts a constant operand first" in out, out
  assert_clean(history["repo"], tmp)
