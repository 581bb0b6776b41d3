"""Nondeterminism is its own outcome: `replay check --twice` replays every capture in two more processes (PYTHONHASHSEED
A, and B with the allocation order perturbed) and calls the captures whose outputs differ `unstable` (exit 1, a gate
failure that [replay:accept] never waives); `replay suite --twice` reports models whose two captures differ. The planted
bug (tests/replay/plants/sitecustomize.py `set_order`: a rewrite that orders ADD/MUL sources by iterating a set of their
keys) is first shown to give different outputs under the two seeds, then caught; without it nothing is unstable. The
default check (a sample, in one more process) and the gate: tests/replay/test_gate_determinism.py."""
from __future__ import annotations
import json, os, subprocess, sys
from pathlib import Path
from replay.baseline.gate import decide, failure_exit
from tests.replay.test_commits import copy_project

ROOT = Path(__file__).resolve().parents[2]
PLANTS = Path(__file__).resolve().parent / "plants"

def env(plant: str | None = None, **extra) -> dict:
  e = {k: v for k, v in os.environ.items() if k not in ("TINYSCHED_TEST_PLANT", "PYTHONHASHSEED")}
  e["PYTHONPATH"] = os.pathsep.join([str(PLANTS), str(ROOT)] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
  e["TINYSCHED_DEVICE"] = "NUMPY"
  if plant: e["TINYSCHED_TEST_PLANT"] = plant
  return {**e, **extra}

def check(db: Path, tmp: Path, plant: str | None, *args: str, **extra) -> tuple[int, dict, str]:
  js = tmp / f"r-{plant}-{len(list(tmp.iterdir()))}.json"
  r = subprocess.run([sys.executable, "-m", "replay.cli", "check", str(db), "-j", "1", "--report-json", str(js), *args], env=env(plant, **extra),
                     cwd=ROOT, capture_output=True, text=True, timeout=300)
  return r.returncode, (json.loads(js.read_text()) if js.exists() else {}), r.stdout + r.stderr

def keys(rep: dict) -> dict[tuple[str, str], str | None]: return {(r["level"], r["input_key"]): r["new_key"] for r in rep["results"]}

def test_planted_set_order_is_unstable(db, tmp_path):
  # the plant is real: under seed 1 and seed 2 it makes different outputs, each reproducible
  _, one, _ = check(db, tmp_path, "set_order", PYTHONHASHSEED="1")
  _, two, _ = check(db, tmp_path, "set_order", PYTHONHASHSEED="2")
  _, one_again, _ = check(db, tmp_path, "set_order", PYTHONHASHSEED="1")
  differ = {k for k in keys(one) if keys(one)[k] != keys(two)[k]}
  assert differ and keys(one) == keys(one_again)
  # (this process with seed 1 too: its outputs are the first worker's, so exactly the rows the two seeds disagree on differ)
  rc, rep, out = check(db, tmp_path, "set_order", "--twice", "--report-md", str(tmp_path / "r.md"), PYTHONHASHSEED="1")
  assert rc == 1, out
  unstable = {(r["level"], r["input_key"]) for r in rep["results"] if r["outcome"] == "unstable"}
  assert unstable == differ and rep["summary"]["unstable"] == len(differ)
  assert rep["determinism"]["mode"] == "every row" and rep["determinism"]["rows"] == rep["summary"]["total"]
  ex = next(r for r in rep["results"] if r["outcome"] == "unstable" and r["level"] == "kernel")
  assert "PYTHONHASHSEED=1" in ex["reason"] and "PYTHONHASHSEED=2, allocation perturbed" in ex["reason"]
  assert "PYTHONHASHSEED=1" in ex["text_diff"].splitlines()[0] and ex["signature"].startswith("unstable kernel:")
  assert "unstable: " in out and "next (unstable)" in out and "unstable" in (tmp_path / "r.md").read_text()
  assert set(rep["determinism"]["exposed_by"]) <= {"hash seed", "neither alone"} and "hash seed" in rep["determinism"]["exposed_by"]
  # a determinism bug fails the gate, with or without [replay:accept]
  assert decide(rep, rc, accept=False)[0] is False and decide(rep, rc, accept=True)[0] is False
  assert "Exposed by: hash seed" in decide(rep, rc, accept=True)[1] and failure_exit(rep, rc) == 1

def test_deterministic_code_is_never_unstable(db, tmp_path):
  rc, rep, out = check(db, tmp_path, None, "--twice")
  assert rc == 0 and rep["summary"]["unstable"] == 0, out
  # a change that is the same in every process is `changed`, not `unstable`
  rc, rep, out = check(db, tmp_path, "swap", "--twice")
  assert rc == 1 and rep["summary"]["unstable"] == 0 and rep["summary"]["changed"] > 0, out
  # equal seeds: the two processes still differ in their allocation order (`replay suite --twice` varies the seed alone)
  rc, rep, out = check(db, tmp_path, None, "--twice", "--hash-seeds", "3,3")
  assert rc == 0 and [p.split(",")[0] for p in rep["determinism"]["processes"]] == ["PYTHONHASHSEED=3"] * 2, out
  r = subprocess.run([sys.executable, "-m", "replay.cli", "suite", "--twice", "--hash-seeds", "3,3"], env=env(), cwd=ROOT,
                     capture_output=True, text=True)
  assert r.returncode == 2 and "must differ" in r.stderr

def test_unstable_alone_fails_the_check_and_every_report():
  from replay.report import text as R
  from replay.check.results import Report
  from replay.check.results import Result
  res = lambda outcome: Result("s.db", 1, 1, "kernel", "m", "a" * 64, "b" * 64, outcome=outcome, signature=f"{outcome} kernel: x",
                               reason="the output depends on the hash seed")
  assert Report(results=[res("identical")]).exit_code() == 0
  rep = Report(results=[res("identical"), res("unstable")])
  assert rep.exit_code() == 1 and rep.counts()["unstable"] == 1
  assert "unstable outputs found" in R.terminal(rep) and "next (unstable)" in R.terminal(rep)
  assert "- unstable:" in R.markdown(rep) and 'failures="1"' in R.junit(rep)
  doc = R.to_json(rep)
  assert doc["summary"]["unstable"] == 1 and R.from_json(doc).exit_code() == 1
  assert decide(doc, 1, accept=True) == (False, decide(doc, 1, accept=False)[1]) and "(unstable)" in decide(doc, 1, accept=True)[1]
  assert failure_exit(doc, 1) == 1

# *** replay suite --twice ***

SUITE = '''"""Test model suite: one model whose graph depends on the hash seed, one that does not."""
from tinysched import Tensor

def steady(quick: bool = True) -> dict:
  Tensor.manual_seed(0)
  x = Tensor.rand(4, 4)
  (x * 2 + 1).sum(1).realize()
  return {}

def seeded(quick: bool = True) -> dict:
  Tensor.manual_seed(0)
  x = Tensor.rand(4)
  steps = {"bias": lambda t: t + 1, "gain": lambda t: t * 3, "shift": lambda t: t.exp()}
  for name in {"bias", "gain", "shift"}:  # the planted bug: a set of str decides the order of the steps
    x = steps[name](x)
  x.realize()
  return {}

SUITE = {"steady": steady, "seeded": seeded}

def available(name: str): return None
'''

def test_suite_twice_reports_key_sets_that_differ(tmp_path):
  proj = tmp_path / "proj"
  copy_project(proj)
  (proj / "tinysched/models").mkdir()
  (proj / "tinysched/models/__init__.py").write_text("")
  (proj / "tinysched/models/suite.py").write_text(SUITE)
  e = {k: v for k, v in env().items() if k != "PYTHONPATH"}  # the copied project's code, from its folder
  r = subprocess.run([sys.executable, "-m", "replay.cli", "suite", "--models", "steady,seeded", "--out", str(tmp_path / "caps"), "--twice",
                      "--levels", "kernel,schedule"], env=e, cwd=proj, capture_output=True, text=True, timeout=300)
  out = r.stdout + r.stderr
  assert r.returncode == 1, out
  assert "steady: captured again under PYTHONHASHSEED=2: the same keys" in out
  assert "seeded: UNSTABLE" in out and "model(s) seeded:" in out and "next:" in out
  assert "steady: UNSTABLE" not in out
  assert (tmp_path / "caps/steady.db").is_file() and (tmp_path / "caps/seeded.db").is_file()
