"""Triage against the reference (replay/triage/reference.py, issue 41): a codegen bug older than the capture is in the
old code and the new alike, so blame finds no application where they part; it blames the rule after which the program
computes something else than its AST means, and minimize shrinks the input while it stays wrong the same way.

Plants (tests/replay/plants): `lt_edge`, an index rule wrong at an edge value (x + 2 < 5 made x < 4), found by a z3
proof of the lowering's integer rewrites; `mul_one`, a float identity (x * 1.0 made x + x) that no proof states, found
by turning rules off, and not confused with the sound rule whose output it rewrites. Each store is a copy whose row was
accepted with the plant in: the capture itself was made by the buggy code."""
from __future__ import annotations
import json, os, shutil, subprocess, sys
from pathlib import Path
import pytest
from tests.replay.changes import opencl_here

ROOT = Path(__file__).resolve().parents[2]
PLANTS = ROOT / "tests" / "replay" / "plants"
EDGE_PROGRAM = "e287fe2a096e63d6"   # cnn_train: a padded conv window whose upper edge the plant moves
EDGE_KERNEL = "4d6d4fafb125ef4d"    # the kernel-level row of the same kernel AST
MUL_ONE_PROGRAM = "a1cdf3e5ee530eed"  # tests.db: a cumsum kernel with x * 1.0

needs_opencl = pytest.mark.skipif(not opencl_here(), reason="the reference triage runs programs on OpenCL")

def run(cwd: Path, cache: Path, plant: str | None, *args: str) -> subprocess.CompletedProcess:
  # (the tests' processes default to NUMPY, the interpreter itself: the programs run on OpenCL here)
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PLANTS), str(ROOT)]), "TINYSCHED_CACHE": str(cache), "TINYSCHED_DEVICE": "OPENCL"}
  env.pop("TINYSCHED_TEST_PLANT", None)
  if plant: env["TINYSCHED_TEST_PLANT"] = plant
  return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=env)

def captured_with(tmp: Path, plant: str, src: str, key: str) -> Path:
  """A copy of captures/`src` whose row `key` was accepted with the plant in (the bug is in the capture's own code)."""
  db = tmp / f"{plant}.db"
  shutil.copy(ROOT / "captures" / src, db)
  r = run(ROOT, tmp / "cache", plant, "-m", "replay.cli", "accept", str(db), "--key", key, "-m", f"captured with plant {plant}")
  assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
  return db

@pytest.fixture(scope="module")
def edge(tmp_path_factory) -> tuple[Path, Path]:
  pytest.importorskip("z3")
  tmp = tmp_path_factory.mktemp("ref_edge")
  return tmp, captured_with(tmp, "lt_edge", "cnn_train.db", EDGE_PROGRAM)

@needs_opencl
def test_the_check_finds_it_wrong_and_old_and_new_agree(edge):
  tmp, db = edge
  r = run(ROOT, tmp / "cache", "lt_edge", "-m", "replay.cli", "check", str(db), "--level", "program", "--exec-all", "--no-determinism",
          "--no-causes")
  assert r.returncode == 1
  # WRONG (or MISMATCH, UNSTABLE: what the program reads past the edge may differ between runs): both sides run the
  # stored program, which is the buggy code's
  assert any(EDGE_PROGRAM in ln and any(v in ln for v in ("WRONG:", "MISMATCH:", "UNSTABLE:")) for ln in r.stdout.splitlines()), r.stdout[-3000:]
  assert f"triage: `replay blame {db} {EDGE_PROGRAM}`" in r.stdout or "triage: `replay blame" in r.stdout

@needs_opencl
def test_blame_names_the_edge_rule_with_a_counterexample(edge):
  tmp, db = edge
  r = run(ROOT, tmp / "cache", "lt_edge", "-m", "replay.cli", "blame", str(db), EDGE_PROGRAM, "--old-tree", str(ROOT), "--json")
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
  res = json.loads(r.stdout)
  assert res["old_agrees"] and res["against"] == "reference" and res["verdict"] == "blamed"
  assert res["rule"] == "lt_move_const" and res["counterexample"]["before"] != res["counterexample"]["after"]
  assert "without the rule the output is right again" in res["how"]
  # the same from the kernel-level row (through its program-level capture), and with no program-level capture at all
  # (the program the heuristic makes of its kernel AST for the device)
  k = run(ROOT, tmp / "cache", "lt_edge", "-m", "replay.cli", "blame", str(db), EDGE_KERNEL, "--reference")
  assert k.returncode == 0 and "rule 'lt_move_const'" in k.stdout and "through its program-level capture" in k.stdout, k.stdout + k.stderr
  bare = tmp / "no_program_rows.db"
  shutil.copy(db, bare)
  import sqlite3  # (only this test edits a store by hand)
  with sqlite3.connect(bare) as c: c.execute("delete from captures where level = 'program'")
  k = run(ROOT, tmp / "cache", "lt_edge", "-m", "replay.cli", "blame", str(bare), EDGE_KERNEL, "--reference")
  assert k.returncode == 0 and "rule 'lt_move_const'" in k.stdout and "the heuristic makes of its kernel" in k.stdout, k.stdout + k.stderr

@needs_opencl
def test_clean_code_has_nothing_to_blame(edge):
  # the plant out: today's code makes this kernel's program right, so the triage does not cry wolf (exit 1)
  tmp, db = edge
  r = run(ROOT, tmp / "cache", None, "-m", "replay.cli", "blame", str(db), EDGE_PROGRAM, "--reference")
  assert r.returncode == 1 and "compute what they mean" in r.stdout, r.stdout + r.stderr

@needs_opencl
def test_minimize_keeps_the_failure_and_writes_a_repro_that_fails_only_with_the_bug(edge):
  tmp, db = edge
  out = tmp / "test_repro_edge.py"
  r = run(ROOT, tmp / "cache", "lt_edge", "-m", "replay.cli", "minimize", str(db), EDGE_PROGRAM, "--old-tree", str(ROOT), "-o", str(out),
          "--time-limit", "120")
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
  assert "same failure kept: wrong on" in r.stdout and "lt_move_const" in r.stdout
  nodes = int(r.stdout.split(" nodes in ")[0].split("-> ")[-1])
  assert nodes <= 10, r.stdout
  with_bug = run(tmp, tmp / "cache", "lt_edge", "-m", "pytest", "-q", "-p", "no:cacheprovider", str(out))
  without = run(tmp, tmp / "cache", None, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(out))
  assert with_bug.returncode == 1 and without.returncode == 0, with_bug.stdout[-1500:] + without.stdout[-1500:]

@pytest.fixture(scope="module")
def mul_one(tmp_path_factory) -> tuple[Path, Path]:
  tmp = tmp_path_factory.mktemp("ref_mul_one")
  return tmp, captured_with(tmp, "mul_one", "tests.db", MUL_ONE_PROGRAM)

BLAME_IN_PYTHON = """
import json, sys
from replay.store.sqlite import Store
from replay.triage import reference as R
if sys.argv[2] == "no-proof":  # the plant: nothing proven sound, so every rule that fired is a suspect
  R.first_unsound_here = lambda data, budget_s=0: {"skipped": "planted"}
st = Store(sys.argv[1], readonly=True)
row = next(r for r in st.captures(level="program") if r["input_key"].startswith(sys.argv[3]))
res = R.blame_reference(st.blob(row["input_key"]), R.judging_device(None), int(row["input_key"][:8], 16))
print(json.dumps({"verdict": res["verdict"], "rules": res.get("rules")}))
"""

@needs_opencl
def test_a_value_rule_is_found_by_turning_rules_off_not_the_sound_rule_upstream(mul_one):
  pytest.importorskip("z3")
  tmp, db = mul_one
  r = run(ROOT, tmp / "cache", "mul_one", "-c", BLAME_IN_PYTHON, str(db), "proof", MUL_ONE_PROGRAM)
  assert r.returncode == 0, r.stderr[-2000:]
  assert json.loads(r.stdout.splitlines()[-1]) == {"verdict": "blamed", "rules": ["mul_one_float"]}
  # with no rule proven sound, turning off fold_mod (whose output the planted identity rewrites) hides the bug too,
  # and it fires first: the proof is what keeps the blame on the rule that computes something else
  r = run(ROOT, tmp / "cache", "mul_one", "-c", BLAME_IN_PYTHON, str(db), "no-proof", MUL_ONE_PROGRAM)
  assert json.loads(r.stdout.splitlines()[-1]) == {"verdict": "blamed", "rules": ["fold_mod"]}, r.stderr[-2000:]

DOUBLE_SCHEDULE = "3febb443e3d7b166"  # mlp_digits: a schedule whose kernels hold float constants

def test_a_scheduler_rule_older_than_the_capture_is_blamed_against_the_graph(tmp_path):
  # the plant `double` (an AST rule doubling float constants) captured in: the schedule's kernels are wrong against its
  # input graph on the interpreter itself, no compiled device needed; blame names the rule and its first application
  db = captured_with(tmp_path, "double", "mlp_digits.db", DOUBLE_SCHEDULE)
  r = run(ROOT, tmp_path / "cache", "double", "-m", "replay.cli", "blame", str(db), DOUBLE_SCHEDULE, "--reference", "--device", "NUMPY", "--json")
  assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
  res = json.loads(r.stdout)
  assert res["level"] == "schedule" and res["verdict"] == "blamed" and res["rule"].startswith("sitecustomize:"), res
  assert res["application"] == 1 and "CONST" in res["node"] and res["node"] != res["result"]
  # the plant out: the same stored kernels are no fault of today's code, and nothing is blamed
  r = run(ROOT, tmp_path / "cache", None, "-m", "replay.cli", "blame", str(db), DOUBLE_SCHEDULE, "--reference", "--device", "NUMPY")
  assert r.returncode == 1 and "compute what they mean" in r.stdout, r.stdout + r.stderr
