"""Triage that reaches code generation (issue 41): a lowering bug planted in a copy of the project (the unrolled lanes of
a reduce combined in a tree that drops the last lane of an odd count). From the check's failure, with the commands its
report prints: `replay blame` names the lowering pass, and `replay minimize` shrinks the program-level capture to a
small repro that fails the same way. A kernel-level row whose AST old and new code agree on is triaged through its
program-level row, never "nothing to blame" while the numbers are wrong."""
from __future__ import annotations
import os, re, subprocess, sys
from pathlib import Path
import pytest
from tests.replay.changes import opencl_here
from tests.replay.test_commits import ROOT, copy_project

LOWERER = "tinysched/codegen/lowerer.py"
TREE_LINE = "        while len(xs) > 1: xs = [alu(r.arg[0], adt, (xs[i], xs[i+1])) if i + 1 < len(xs) else xs[i] for i in range(0, len(xs), 2)]\n"
BUG_LINE = "        while len(xs) > 1: xs = [alu(r.arg[0], adt, (xs[i], xs[i+1])) for i in range(0, len(xs) - 1, 2)]\n"

WORKLOAD = """
import sys, numpy as np
import replay
from tinysched import Tensor
from tinysched.ops import Ops
from tinysched.codegen.kernel import Opt, OptOps
from tinysched.codegen.program import to_program
from tinysched.codegen.target import GENERIC_GPU
a, b = Tensor(np.ones((4, 9), np.float32)).realize(), Tensor(np.ones((4, 9), np.float32)).realize()
with replay.capture(sys.argv[1], label="odd_unroll", levels=("kernel", "program")):
  for si in ((a * b + 1).sum(1).relu() * 2).schedule():
    if si.ast.op is Ops.SINK: to_program(si.ast, (Opt(OptOps.UNROLL, 0, 3),), GENERIC_GPU)  # 3 lanes: odd
"""

@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> dict:
  d = tmp_path_factory.mktemp("triage_program")
  new = d / "new"
  copy_project(new)
  src = (new / LOWERER).read_text()
  assert src.count(TREE_LINE) == 1, "the lowering's tree of unrolled lanes moved: update the plant"
  (new / LOWERER).write_text(src.replace(TREE_LINE, BUG_LINE))
  db = d / "odd.db"
  r = subprocess.run([sys.executable, "-c", WORKLOAD, str(db)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                     env={**os.environ, "PYTHONPATH": str(ROOT)})
  assert r.returncode == 0, r.stderr[-2000:]
  return {"new": new, "db": db}

def replay_in(tree: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
  """The `replay` CLI of `tree` (the new code: its triage compares it with --old-tree)."""
  return subprocess.run([sys.executable, "-m", "replay.cli", *args], cwd=tree, capture_output=True, text=True, timeout=timeout,
                        env={**os.environ, "PYTHONPATH": str(tree), "TINYSCHED_DEVICE": "OPENCL"})

@pytest.mark.skipif(not opencl_here(), reason="the planted bug is in code generation: it shows where kernels are compiled")
def test_from_the_check_to_a_small_repro_and_the_blamed_pass(trees, tmp_path):
  new, db = trees["new"], trees["db"]
  chk = replay_in(new, "check", str(db), "--exec-all", "--no-determinism")
  assert chk.returncode == 1, chk.stdout[-3000:] + chk.stderr[-2000:]
  m = re.search(r"triage: `replay blame (\S+) (\w+)` .*`replay minimize (\S+) (\w+) -o test_repro.py`", chk.stdout)
  assert m, chk.stdout[-3000:]
  store, key = m.group(1), m.group(2)
  # the commands as printed, with the old code named (the store was made from this checkout, not a commit of `new`)
  bl = replay_in(new, "blame", store, key, "--old-tree", str(ROOT), "--json")
  assert bl.returncode == 0, bl.stdout[-3000:] + bl.stderr[-2000:]
  import json
  res = json.loads(bl.stdout)
  assert res["level"] == "program" and res["verdict"] == "blamed pass" and res["pass"] == "reduce_loops", res
  out = tmp_path / "test_repro.py"
  mn = replay_in(new, "minimize", store, key, "--old-tree", str(ROOT), "-o", str(out), "--time-limit", "120")
  assert mn.returncode == 0, mn.stdout[-3000:] + mn.stderr[-2000:]
  n = int(re.search(r"-> (\d+) nodes", mn.stdout).group(1))
  assert n <= 15, mn.stdout
  assert "same failure kept: blame names pass reduce_loops" in mn.stdout
  text = out.read_text()
  assert "blame names pass reduce_loops" in text
  # the repro passes on the old code and fails on the new
  for tree, ok in ((ROOT, True), (new, False)):
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(out)], cwd=tree, capture_output=True,
                       text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(tree)})
    assert (r.returncode == 0) == ok, r.stdout[-2000:]

@pytest.mark.skipif(not opencl_here(), reason="the planted bug is in code generation: it shows where kernels are compiled")
def test_a_kernel_row_old_and_new_agree_on_is_blamed_through_its_program_row(trees):
  new, db = trees["new"], trees["db"]
  import sqlite3
  c = sqlite3.connect(db)
  kernel_key = c.execute("SELECT input_key FROM captures WHERE level='kernel'").fetchone()[0][:16]
  c.close()
  bl = replay_in(new, "blame", str(db), kernel_key, "--old-tree", str(ROOT))
  assert bl.returncode == 0 and "its program-level capture" in bl.stdout and "reduce_loops" in bl.stdout, bl.stdout + bl.stderr
  assert "nothing to blame" not in bl.stdout
  # with the bug taken out of `new`, old and new agree everywhere: exit 1 and why, not a silent 0
  clean = replay_in(ROOT, "blame", str(db), kernel_key, "--old-tree", str(ROOT))
  assert clean.returncode == 1 and "the same output" in clean.stdout, clean.stdout + clean.stderr
