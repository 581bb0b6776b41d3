"""Determinism in the default gate: `replay gate`, `replay check` (and so ci/replay-gate and the workflow's shards) replay
the changed captures, the errors and a sample of the identical ones again in a fresh process with another PYTHONHASHSEED
and a perturbed allocation order, without being asked (replay/check/determinism.py); outputs that differ are `unstable`
and fail the gate whatever [replay:accept] says, with the perturbation that exposed them.

The plants (tests/replay/plants_order/sitecustomize.py, applied in every process: the CLI, its workers and the determinism
check's processes) order ADD/MUL sources by iterating a set: `id_order` a set of the source UOps (a UOp hashes by identity:
the order follows addresses), `str_order` a set of their keys (the order follows PYTHONHASHSEED). Each is first shown to be
what it says, then caught: id_order in 10 of 10 gate runs and blamed on the allocation order, str_order blamed on the hash
seed; clean code passes 10 of 10."""
from __future__ import annotations
import json, os, subprocess, sys
from pathlib import Path
import pytest
from tinysched import Tensor
from replay.baseline import gate as G
from replay.check import Options, Selection, run
from replay.check import determinism as D
from replay.check.results import Report, Result
from replay.report import text as R
import tinysched.schedule as S
from tests.replay.changes import capture_store

ROOT = Path(__file__).resolve().parents[2]
PLANTS = Path(__file__).resolve().parent / "plants_order"
ACCEPT_TITLE = "Refactor view pushing [replay:accept]"
RUNS = 10

def workload():
  """Kernels with many ADD and MUL nodes: each one a chance for two processes to order a planted set differently."""
  Tensor.manual_seed(7)
  x, w1, w2, b = Tensor.rand(8, 16), Tensor.rand(16, 16), Tensor.rand(16, 4), Tensor.rand(16)
  ((x @ w1 + b).relu() @ w2).softmax(1).realize()
  ((x * 3 + 2) * (x + 5) + x * x).sum(0).realize()
  x.layernorm().realize()
  (x.exp() * 2 + x.sin() * 3 + 1).realize()
  ((x - x.mean(1, keepdim=True)) * (x + 1)).max(1).realize()
  (x[:, :8] * x[:, 8:] + x[:, :8]).sum(1).realize()

@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
  """`workload`'s store (kernel and schedule captures, ~18 rows)."""
  return capture_store(tmp_path_factory.mktemp("determinism") / "rich.db", workload, "rich")

def env(plant: str | None = None, **extra: str) -> dict[str, str]:
  drop = ("TINYSCHED_TEST_PLANT", "TINYSCHED_TEST_ORDER_PLANT", "PYTHONHASHSEED", "REPLAY_PR_TITLE", "GITHUB_EVENT_PATH", "GITHUB_STEP_SUMMARY")
  e = {k: v for k, v in os.environ.items() if k not in drop}
  e["PYTHONPATH"] = os.pathsep.join([str(PLANTS), str(ROOT)] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
  e["TINYSCHED_DEVICE"] = "NUMPY"
  if plant: e["TINYSCHED_TEST_ORDER_PLANT"] = plant
  return {**e, **extra}

def replay_cli(tmp: Path, plant: str | None, *args: str, **extra: str) -> tuple[int, dict, str]:
  """`replay ARGS --report-json` in a fresh process (the plant reaches it and every process it starts): exit code, report, output."""
  js = tmp / f"r-{len(list(tmp.iterdir()))}.json"
  e = env(plant, GIT_CEILING_DIRECTORIES=str(tmp.parent), **extra)  # no git repository: the marker only where a test puts it
  r = subprocess.run([sys.executable, "-m", "replay.cli", *args, "--report-json", str(js)], env=e, cwd=tmp, capture_output=True, text=True,
                     timeout=600)
  return r.returncode, (json.loads(js.read_text()) if js.exists() else {}), r.stdout + r.stderr

def gate(db: Path, tmp: Path, plant: str | None, *args: str, **extra: str) -> tuple[int, dict, str]:
  """The default gate (no --twice) with [replay:accept] in the PR title, without the execution check and the proofs (not what
  is tested here, and slow): a change it does not call unstable then fails as unverified, never passes."""
  return replay_cli(tmp, plant, "gate", str(db), "-j", "1", "--no-exec", "--no-prove", *args, REPLAY_PR_TITLE=ACCEPT_TITLE, **extra)

def test_the_plants_are_real(db, tmp_path, monkeypatch):
  # id_order: processes with one seed that differ in their allocation order disagree; str_order: the allocation order
  # changes nothing, another seed does
  rows = [r for r in run(Selection((str(db),)), Options(jobs=1)).results if r.outcome == "identical"]
  monkeypatch.setenv("PYTHONPATH", env()["PYTHONPATH"])
  ref, moved, moved_too, other_seed = D.Proc(1), D.Proc(1, 11), D.Proc(1, 12), D.Proc(2)
  for plant in ("id_order", "str_order"):
    monkeypatch.setenv("TINYSCHED_TEST_ORDER_PLANT", plant)
    got = D.run_workers([(p, rows) for p in (ref, moved, moved_too, other_seed)], tmp_path / plant, False, 600)
    keys = {p: got[p][0] for p in got}
    assert all(v[0] == "output" for k in keys.values() for v in k.values())  # the plants reorder, never raise
    if plant == "id_order": assert keys[moved] != keys[ref] or keys[moved_too] != keys[ref]
    else: assert keys[moved] == keys[ref] == keys[moved_too] and keys[other_seed] != keys[ref]

def test_id_order_passes_with_the_marker_when_determinism_is_off(db, tmp_path):
  # the issue: without the determinism check the planted nondeterminism reads as a reviewable change (numbers equivalent)
  rc, rep, out = replay_cli(tmp_path, "id_order", "gate", str(db), "-j", "1", "--device", "NUMPY", "--no-prove", "--no-determinism",
                            REPLAY_PR_TITLE=ACCEPT_TITLE)
  assert rc == 0 and "replay gate: PASS" in out and rep["summary"]["changed"] > 0, out
  assert "determinism was not checked" in out

def test_id_order_fails_the_default_gate_with_the_marker_every_time(db, tmp_path):
  for i in range(RUNS):
    rc, rep, out = gate(db, tmp_path, "id_order")
    d = rep["determinism"]
    assert rc == 1 and "replay gate: FAIL" in out and "unstable" in out.split("replay gate: FAIL")[1], (i, out)
    assert d["unstable"] > 0 and d["skipped"] is None and rep["summary"]["unstable"] == d["unstable"], (i, d)
    # blamed on the allocation order (a row only another seed changed is possible by chance: the seed changes allocations too)
    by = d["exposed_by"]
    assert by.get("allocation order", 0) > by.get("hash seed", 0), (i, by)
    assert "Exposed by: allocation order" in out and "id() order" in out, (i, out)
    ex = next(r for r in rep["results"] if r["outcome"] == "unstable" and r["unstable"]["exposed_by"] == "allocation order")
    assert "allocation perturbed" in ex["reason"] and ex["signature"].startswith("unstable ") and ex["text_diff"], ex

def test_clean_code_passes_the_default_gate_every_time(db, tmp_path):
  for i in range(RUNS):
    rc, rep, out = gate(db, tmp_path, None)
    d = rep["determinism"]
    assert rc == 0 and "replay gate: PASS" in out, (i, out)
    assert d["rows"] > 0 and d["unstable"] == 0 and d["skipped"] is None and "note:" not in out, (i, d)

def test_str_order_is_caught_and_blamed_on_the_hash_seed(db, tmp_path):
  for i in range(3):
    rc, rep, out = gate(db, tmp_path, "str_order")
    by = rep["determinism"]["exposed_by"]
    assert rc == 1 and "unstable" in out.split("replay gate: FAIL")[1], (i, out)
    # the allocation order alone never changes a str order: no row may be blamed on it
    assert by.get("hash seed", 0) > 0 and "allocation order" not in by, (i, by)
    assert "Exposed by: hash seed" in out, (i, out)

def test_equal_seeds_vary_the_allocation_order_only(db, tmp_path):
  # --hash-seeds 1,1 (refused before allocation was perturbed too): every process has seed 1, so a str order is stable and an
  # id() order is still caught, and nothing is blamed on the seed
  rc, rep, out = replay_cli(tmp_path, "id_order", "check", str(db), "-j", "1", "--hash-seeds", "1,1", PYTHONHASHSEED="1")
  assert rc == 1 and rep["summary"]["unstable"] > 0, out
  assert rep["determinism"]["processes"] and all(p.startswith("PYTHONHASHSEED=1,") for p in rep["determinism"]["processes"])
  assert set(rep["determinism"]["exposed_by"]) <= {"allocation order", D.UNVARIED, "not attributed"}, rep["determinism"]
  assert all("exposed by: hash seed" not in r["reason"] for r in rep["results"] if r["outcome"] == "unstable")
  rc, rep, out = replay_cli(tmp_path, "str_order", "check", str(db), "-j", "1", "--hash-seeds", "1,1", PYTHONHASHSEED="1")
  assert rc == 1 and rep["summary"]["changed"] > 0 and rep["summary"]["unstable"] == 0, out

def test_twice_every_row_with_reoptimize(db, tmp_path):
  # --twice is the same check on every row (two processes); it now combines with --reoptimize
  rc, rep, out = replay_cli(tmp_path, None, "check", str(db), "-j", "1", "--twice", "--reoptimize")
  d = rep["determinism"]
  assert rc == 0 and d["mode"] == "every row" and d["rows"] == rep["summary"]["total"] and len(d["processes"]) == 2, out

def test_replay_gate_script_catches_id_order(db, tmp_path):
  # ci/replay-gate runs `replay check` (its determinism check on by default) and `replay gate --from-report`
  e = env("id_order", REPLAY_REPORT_DIR=str(tmp_path / "out"), REPLAY=f"{sys.executable} -m replay.cli", REPLAY_EXEC="0",
          REPLAY_PROVE="0", REPLAY_PR_TITLE=ACCEPT_TITLE, GIT_CEILING_DIRECTORIES=str(tmp_path.parent))
  r = subprocess.run(["bash", str(ROOT / "ci/replay-gate"), str(db), "-j", "1"], cwd=tmp_path, env=e, capture_output=True, text=True, timeout=600)
  assert r.returncode == 1 and "unstable" in r.stdout.split("replay gate: FAIL")[1], r.stdout + r.stderr

# *** in one process: the sample, code patched in memory, reports ***

def test_code_patched_in_memory_is_not_compared(db, monkeypatch):
  # the fresh processes load the files: a monkeypatch here would make every change look unstable, so nothing is compared
  rep = run(Selection((str(db),)), Options(jobs=1, determinism=True))
  assert rep.determinism and rep.determinism["skipped"] is None and rep.determinism["rows"] > 0  # (pytest's assert rewriting is no patch)
  orig = S.full_ast_rewrite
  monkeypatch.setattr(S, "full_ast_rewrite", lambda pre, vv, asg, memo=None: orig(pre, vv, asg, memo))
  rep = run(Selection((str(db),)), Options(jobs=1, determinism=True))
  assert rep.counts()["unstable"] == 0 and "tinysched.schedule.full_ast_rewrite" in rep.determinism["skipped"]
  assert "patched in memory" in G.determinism_note(R.to_json(rep))

def result(db: str, level: str, key: str, outcome: str = "identical") -> Result:
  return Result(db, 1, int(key, 16) % 1000, level, "m", key, "0" * 64, outcome=outcome, new_key="0" * 64,
                reason="E: x" if outcome == "error" else None)

def test_the_sample_is_fixed_and_covers_every_store_and_level():
  keys = [f"{i:064x}" for i in range(400)]
  res = [result(db, lv, k) for db in ("a.db", "b.db") for lv in ("kernel", "schedule", "program") for k in keys[:120]]
  res += [result("c.db", "kernel", keys[300]), result("c.db", "schedule", keys[301], "changed"), result("c.db", "program", keys[302], "error"),
          result("c.db", "kernel", keys[303], "incompatible")]
  rep = Report(results=res)
  picked = D.chosen(rep, every_row=False)
  assert [(r.db, r.level, r.input_key) for r in picked] == [(r.db, r.level, r.input_key) for r in D.chosen(rep, every_row=False)]
  assert {(r.db, r.level) for r in picked} == {(r.db, r.level) for r in res if r.outcome != "incompatible"}
  assert all(r in picked for r in res if r.outcome in ("changed", "error")) and not any(r.outcome == "incompatible" for r in picked)
  assert 0.06 < sum(r.db != "c.db" for r in picked) / 720 < 0.2  # about 1 in SAMPLE (8) of the identical rows
  assert len(D.chosen(rep, every_row=True)) == len(res) - 1

def test_reports_carry_the_determinism_record():
  rec = {"mode": "m", "this_process": "p", "processes": ["PYTHONHASHSEED=2, allocation perturbed (#1)"], "rows": 3, "inputs": 3,
         "by_outcome": {"identical": 3}, "unstable": 1, "exposed_by": {"allocation order": 1}, "skipped": None}
  rep = Report(results=[result("a.db", "kernel", "1" * 64)], determinism=rec)
  doc = R.to_json(rep)
  assert doc["determinism"] == rec and R.from_json(doc).determinism == rec
  assert "determinism: 3 rows" in R.terminal(rep) and "determinism: 3 rows" in R.markdown(rep)
  merged = R.merge([R.from_json(doc), R.from_json(doc)])
  assert merged.determinism and merged.determinism["rows"] == 6 and merged.determinism["exposed_by"] == {"allocation order": 2}
  # a shard checked without it leaves the merged report unchecked, and the gate says so
  assert R.merge([R.from_json(doc), Report(results=[])]).determinism is None
  assert G.determinism_note(doc) is None and "not checked" in G.determinism_note({**doc, "determinism": None})
