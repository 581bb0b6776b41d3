"""Proofs in the loop: `replay check --prove` and the gate prove every integer rule and the changed captures' indexing,
a counterexample fails like a wrong number (marker or not), and the proof cache never serves a result for other code."""
from __future__ import annotations
import json, shutil, subprocess, sys
from pathlib import Path
import pytest
from tinysched import shape as SH, symbolic as SYM
from tinysched.rewrite import PatternMatcher
from replay.baseline import gate as G
from replay.check import Options, Selection, run
from replay.prove.cache import ProofCache
from replay.report import text as R

pytest.importorskip("z3", reason="the proofs need z3 (pip install z3-solver, the `proofs` extra)")
ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "captures" / "mlp_digits.db"

@pytest.fixture
def fresh_caches():
  """The shape algebra's and the lowerer's memo tables forgotten before and after a plant (they would outlive it and hand
  planted index expressions to later tests)."""
  from tinysched.codegen import lowerer
  SH.clear_caches(); lowerer._WIDE_CACHE.clear()
  yield
  SH.clear_caches(); lowerer._WIDE_CACHE.clear()

@pytest.fixture
def db(tmp_path, monkeypatch):
  monkeypatch.setenv("REPLAY_PROOF_CACHE", str(tmp_path / "proofs"))
  p = tmp_path / "mlp.db"
  shutil.copy(STORE, p)
  return p

def _buggy_fold_mod(monkeypatch):
  # plant: fold_mod without its `x.vmin < 0` guard, so a sum that may be negative is folded with Python's % ((4*i-1)%4 -> 3)
  import inspect
  src = inspect.getsource(SYM.fold_mod).replace("  if d <= 0 or x.vmin < 0: return None\n", "  if d <= 0: return None\n", 1)
  ns = dict(vars(SYM))
  exec(compile(src, "<planted fold_mod>", "exec"), ns)
  pm = SYM.symbolic
  monkeypatch.setattr(SYM, "symbolic", PatternMatcher([(p, ns["fold_mod"] if n == "fold_mod" else f, n) for p, f, n, _ in pm.rules],
                                                      name=pm.name))

def test_clean_code_is_proven_and_a_planted_rule_bug_fails_the_gate_with_the_marker(db, monkeypatch, fresh_caches):
  rep = run(Selection((str(db),), level="kernel"), Options(prove=True))
  assert rep.exit_code() == 0 and rep.refuted() == [], R.terminal(rep)
  counts = rep.proofs["counts"]
  assert counts["rules"].get("counterexample", 0) == 0 and counts["rules"]["proven"] >= 25 and counts["views"] == {"proven": len(rep.proofs["views"])}
  passed, _ = G.decide(R.to_json(rep), rep.exit_code(), accept=True)
  assert passed
  # the bug: no stored capture reaches its values (every kernel still replays identically), the proof does
  _buggy_fold_mod(monkeypatch)
  rep = run(Selection((str(db),), level="kernel"), Options(prove=True))
  assert rep.counts()["changed"] == 0 and rep.exit_code() == 1
  (bad,) = [x for x in rep.refuted() if x.get("rule") == "fold_mod"]
  assert bad["counterexample"]["confirmed"] and "fold_mod" in R.terminal(rep) and "COUNTEREXAMPLE" in R.terminal(rep)
  passed, reason = G.decide(R.to_json(rep), rep.exit_code(), accept=True)  # [replay:accept] cannot waive it
  assert not passed and "counterexample" in reason

def test_a_planted_index_bug_in_codegen_is_refuted_on_the_changed_program_rows(db, monkeypatch, fresh_caches):
  # plant: every view's index one past where it should be (codegen reads it; the interpreter, the reference, does not)
  orig = SH.View.to_indexed_uops
  def off_by_one(self, idxs, vexpr=None):
    i, v = orig(self, idxs, vexpr)
    return i + 1, v
  monkeypatch.setattr(SH.View, "to_indexed_uops", off_by_one)
  # one small program row (the plant makes lowering slow: every index grows a term the simplifier works on)
  import sqlite3
  c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
  try: (key,) = c.execute("SELECT input_key FROM captures WHERE level='program' ORDER BY node_count, input_key LIMIT 1").fetchone()
  finally: c.close()
  rep = run(Selection((str(db),), level="program", key=key), Options(prove=True))
  assert rep.counts()["changed"] == 1 and rep.exit_code() == 1
  caps = [x for x in rep.refuted() if "input_key" in x]
  assert caps and all(x["level"] == "program" for x in caps)
  cex = caps[0]["counterexample"]
  assert cex["index"] >= cex["size"], cex  # one past the end, named with its buffer and the values that reach it

def test_the_cache_keys_on_the_code_as_loaded_and_refuses_a_swapped_entry(tmp_path, monkeypatch):
  c1 = ProofCache(tmp_path / "p")
  c1.put("rules+views", ["x"], {"ok": 1})
  assert ProofCache(tmp_path / "p").get("rules+views", ["x"]) == {"ok": 1}
  # a patched function is other code: another key, so a "proven" of the clean code is never served to it
  _buggy_fold_mod(monkeypatch)
  assert ProofCache(tmp_path / "p").get("rules+views", ["x"]) is None
  monkeypatch.undo()
  # an entry copied under another key's name is a miss, not a result
  c = ProofCache(tmp_path / "p")
  k_good, k_other = c.key("rules+views", ["x"]), c.key("rules+views", ["y"])
  src = tmp_path / "p" / k_good[:2] / f"{k_good}.json"
  (tmp_path / "p" / k_other[:2]).mkdir(exist_ok=True)
  shutil.copy(src, tmp_path / "p" / k_other[:2] / f"{k_other}.json")
  assert c.get("rules+views", ["y"]) is None and c.misses == 1
  (tmp_path / "p").chmod(0o777)  # a folder others can write to is not used
  assert ProofCache(tmp_path / "p").unusable and "writable by others" in ProofCache(tmp_path / "p").status()

def test_replay_prove_command_cold_then_warm(db, tmp_path):
  env = {**__import__("os").environ, "REPLAY_PROOF_CACHE": str(tmp_path / "cli-proofs")}
  def prove(*args):
    return subprocess.run([sys.executable, "-m", "replay.cli", "prove", str(db), "--level", "kernel", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
  cold = prove("--report-json", str(tmp_path / "p.json"))
  assert cold.returncode == 0, cold.stdout + cold.stderr
  assert "captures: proven: 21" in cold.stdout and "0 hit(s)" in cold.stdout
  doc = json.loads((tmp_path / "p.json").read_text())
  assert doc["counts"]["captures"] == {"proven": 21} and all(c["accesses"] > 0 for c in doc["captures"])
  warm = prove()
  assert warm.returncode == 0 and "22 hit(s), 0 miss(es)" in warm.stdout, warm.stdout
