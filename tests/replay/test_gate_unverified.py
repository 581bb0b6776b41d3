"""No accepted change unverified: [replay:accept] waives a changed capture only when the execution check found its kernels
`equivalent`. A change whose verdict is `skipped` (program-level OpenCL source on the NUMPY fallback, where OpenCL is
missing), or that has none (--no-exec, REPLAY_EXEC=0), fails the gate, which names the rows, why, and what to do.

Planted changes (tests/replay/plants/sitecustomize.py, in every process): `stores_twice` (codegen: every global store
written twice; program-level captures change, the same numbers), `swap` (commutative sources swapped; kernel and schedule
captures change, the same numbers)."""
from __future__ import annotations
import json, os, subprocess, sys
from pathlib import Path
import pytest
import replay
from replay.baseline import gate as G
from tinysched.codegen.target import TARGETS
from tinysched.runtime.opencl import list_devices
from tests.replay.changes import workload

ROOT = Path(__file__).resolve().parents[2]
PLANTS = Path(__file__).resolve().parent / "plants"
ACCEPT_TITLE = "Refactor the store emitter [replay:accept]"
SKIPPED = "program-level captures hold OpenCL source: NUMPY cannot run it (use --device OPENCL)"

def _opencl() -> bool:
  try: return bool(list_devices())
  except Exception: return False  # noqa: BLE001 (no platform, no ICD: the OpenCL half is skipped)

# *** decide() on reports ***

def report(*rows: tuple[str, str | None]) -> dict:
  """A replay report of three identical rows and the given (outcome, exec verdict) rows."""
  res = [{"outcome": "identical", "exec": None, "level": "kernel", "input_key": "0" * 64, "label": "m", "db": "m.db"}] * 3
  for n, (outcome, verdict) in enumerate(rows):
    e = None if verdict is None else {"verdict": verdict, **({"reason": SKIPPED} if verdict == "skipped" else {})}
    res.append({"outcome": outcome, "exec": e, "level": "program", "input_key": f"{n + 1:x}" * 64, "label": "m", "db": "m.db"})
  ex: dict[str, int] = {}
  for _, v in rows:
    if v: ex[v] = ex.get(v, 0) + 1
  changed = sum(o == "changed" for o, _ in rows)
  return {"schema": "tinysched-replay-report", "version": 1, "summary": {"total": len(res), "identical": 3, "changed": changed, "error": 0,
          "incompatible": 0, "unstable": 0, "exec": ex}, "exit_code": 1 if changed else 0, "fatal": [], "results": res, "groups": []}

def test_only_equivalent_changes_are_accepted():
  ok, why = G.decide(report(("changed", "equivalent"), ("changed", "equivalent")), 1, True)
  assert ok and "2 changed capture(s) (2 checked numerically equivalent) accepted" in why

@pytest.mark.parametrize("verdict,said", [("skipped", f"1 exec skipped: {SKIPPED}"), (None, "1 not executed")])
def test_an_unverified_change_is_not_accepted(verdict, said):
  rep = report(("changed", "equivalent"), ("changed", verdict))
  ok, why = G.decide(rep, 1, True)
  assert not ok and G.failure_exit(rep, 1) == 1
  # which rows (only the unverified one), why, and what to do
  assert why.startswith("1 changed capture(s) have no `equivalent` execution verdict") and said in why, why
  assert f"program {'2' * 16} (m, m.db)" in why and f"program {'1' * 16}" not in why
  assert "OpenCL" in why and "`replay accept`" in why
  # without the marker it fails as any change does
  ok, why = G.decide(rep, 1, False)
  assert not ok and "review the diffs" in why

def test_a_change_the_report_does_not_list_is_unverified():
  rep = report(("changed", "equivalent"))
  rep["summary"]["changed"] = 3  # (a hand-made or cut report: two changed rows it does not show)
  ok, why = G.decide(rep, 1, True)
  assert not ok and why.startswith("2 changed capture(s) have no `equivalent` execution verdict"), why

# *** real gates: the plants run in every process ***

@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
  """`workload`'s store with program-level captures too (rendered for the CPU target: the tests run on the NUMPY device)."""
  path = tmp_path_factory.mktemp("unverified") / "base.db"
  with replay.capture(path, label="unit", target=TARGETS["pocl-cpu"]): workload()
  return path

def gate(db: Path, tmp: Path, plant: str, *args: str) -> tuple[int, dict, str]:
  e = {k: v for k, v in os.environ.items() if k not in ("TINYSCHED_TEST_PLANT", "GITHUB_EVENT_PATH", "GITHUB_STEP_SUMMARY")}
  e.update({"PYTHONPATH": os.pathsep.join([str(PLANTS), str(ROOT)]), "TINYSCHED_TEST_PLANT": plant, "TINYSCHED_DEVICE": "NUMPY",
            "REPLAY_PR_TITLE": ACCEPT_TITLE, "GIT_CEILING_DIRECTORIES": str(tmp.parent)})
  js = tmp / f"r-{len(list(tmp.iterdir()))}.json"
  r = subprocess.run([sys.executable, "-m", "replay.cli", "gate", str(db), "-j", "1", "--no-prove", "--report-json", str(js), *args], env=e,
                     cwd=tmp, capture_output=True, text=True, timeout=600)
  return r.returncode, (json.loads(js.read_text()) if js.exists() else {}), r.stdout + r.stderr

def test_skipped_program_verdicts_are_not_accepted_on_the_numpy_fallback(db, tmp_path):
  rc, rep, out = gate(db, tmp_path, "stores_twice", "--device", "NUMPY")
  changed = [r for r in rep["results"] if r["outcome"] == "changed"]
  assert changed and all(r["level"] == "program" and r["exec"]["verdict"] == "skipped" for r in changed), out
  assert rc == 1 and "replay gate: FAIL" in out and "no `equivalent` execution verdict" in out and "exec skipped" in out, out
  assert f"program {changed[0]['input_key'][:16]}" in out and "OpenCL" in out and "replay accept" in out
  assert rep["summary"]["unstable"] == 0 and rep["determinism"]["skipped"] is None  # a deterministic change: only unverified

@pytest.mark.skipif(not _opencl(), reason="no OpenCL device (PoCL): the program-level kernels cannot be run")
def test_the_same_change_is_accepted_where_opencl_runs_it(db, tmp_path):
  rc, rep, out = gate(db, tmp_path, "stores_twice", "--device", "OPENCL")
  assert rc == 0 and "replay gate: PASS" in out and rep["summary"]["exec"] == {"equivalent": rep["summary"]["changed"]}, out

def test_equivalent_kernels_are_accepted_and_unexecuted_ones_are_not(db, tmp_path):
  rc, rep, out = gate(db, tmp_path, "swap", "--device", "NUMPY")
  assert rc == 0 and "replay gate: PASS" in out and "checked numerically equivalent" in out, out
  rc, rep, out = gate(db, tmp_path, "swap", "--no-exec")
  assert rc == 1 and "replay gate: FAIL" in out and "not executed" in out and "--no-exec" in out, out
