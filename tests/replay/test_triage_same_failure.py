"""Minimize keeps the same failure (issue 41): a rule that makes some kernels compute other numbers and only reorders
others must not shrink a wrong-number capture into a cosmetic one. The plant, in a copy of the project: one new
scheduler rule, `swap_operands`, swaps the sources of ADD and MUL (the same numbers) and of CMPLT (x < 0.5 becomes
0.5 < x: other numbers). The capture's kernel has both; blame names the rule for any candidate that keeps either, so
only the execution verdict (mismatch at the same output buffer, replay/triage/verdict.py) keeps the comparison in."""
from __future__ import annotations
import json, os, subprocess, sys
from pathlib import Path
import pytest
from tinysched import Tensor
from tests.replay.changes import capture_store
from tests.replay.test_triage import ROOT, RULE, copy_tree

# (a comparison with a constant on its right gets it on its left; ADD and MUL get their sources in key order: both are
# fixed points)
SWAP = ('  (UPat((Ops.ADD, Ops.MUL, Ops.CMPLT), name="x"), lambda x: x.replace(src=x.src[::-1]) if len(x.src) == 2 and '
        '((x.op is Ops.CMPLT and x.src[1].op is Ops.WHERE and x.src[0].op is not Ops.WHERE) or '
        '(x.op is not Ops.CMPLT and x.src[0].key < x.src[1].key)) else None, "swap_operands"),')

@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> Path:
  tree = copy_tree(tmp_path_factory.mktemp("swap_tree"))
  p = tree / "tinysched/scheduling/kernel_ast.py"
  text = p.read_text()
  assert RULE in text, "the matcher this test adds a rule to has moved: update RULE"
  p.write_text(text.replace(RULE, RULE + "\n" + SWAP))
  return tree

def workload():
  Tensor.manual_seed(3)
  x = Tensor.rand(6, 8)
  ((x < 0.5).where(x * 3.0, x + 1.0) * 2.0).sum(1).realize()

@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
  return capture_store(tmp_path_factory.mktemp("swap_store") / "s.db", workload, "unit")

MINIMIZE = """
import json, sys
from pathlib import Path
from replay.store.sqlite import Store
from replay.triage import blame as B, verdict as V
from replay.triage.probe import Probe, sha
db, old_tree, new_tree, mode, level = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4], sys.argv[5]
if mode == "blame-only":  # the plant: the verdict check gone, as minimize was before
  V.verdict = lambda *a, **k: {"verdict": "skipped"}
s = Store(db, readonly=True)
with Probe(new_tree, "new") as p:
  key = next(r["input_key"] for r in s.captures(level=level) if "CMPLT" in (r.get("op_names") or "")
             and p.ask(level, s.blob(r["input_key"])).get("key") != sha(s.blob(r["output_key"])))
res = B.minimize(s, key[:16], old_tree, new_tree, time_limit=120)
print(json.dumps({k: res[k] for k in ("nodes_before", "nodes", "failure", "verdict", "rejected_other_failures", "pretty")}))
"""

def minimized(store: Path, planted: Path, mode: str, level: str = "kernel") -> dict:
  # run from the planted copy: this process's code is the new code (the verdict's new side), as for `replay minimize`
  r = subprocess.run([sys.executable, "-c", MINIMIZE, str(store), str(ROOT), str(planted), mode, level], cwd=planted, capture_output=True,
                     text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(planted)})
  assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
  return json.loads(r.stdout.splitlines()[-1])

@pytest.mark.parametrize("level", ["kernel", "schedule"])
def test_minimize_keeps_the_number_failure(store, planted, level):
  # (a schedule's job needs the old kernels' buffer maps: the old probe gives them with its output, Level.extra_of)
  res = minimized(store, planted, "verdict", level)
  assert res["failure"] == "rule swap_operands" and res["verdict"] and res["verdict"].startswith("mismatch at output buffer")
  assert "CMPLT" in res["pretty"], res["pretty"]  # the comparison that makes the numbers differ stayed in
  assert res["nodes"] < res["nodes_before"] and res["rejected_other_failures"] >= 1

def test_without_the_verdict_it_drifts_to_a_cosmetic_repro(store, planted):
  # the same search without the verdict check (as before issue 41's item 3): the blame alone accepts a candidate whose
  # only change is a reordered ADD or MUL, which computes the same numbers
  res = minimized(store, planted, "blame-only")
  assert res["failure"] == "rule swap_operands" and "CMPLT" not in res["pretty"], res["pretty"]
