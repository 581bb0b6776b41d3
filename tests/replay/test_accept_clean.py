"""`replay accept` on a clean checkout (issue 37): it succeeds, and the baseline it writes is the committed one, row for
row: the same (label, level, input key, output key) in every store. It captures the model suite and the project's own
tests (`pytest --replay-capture` over tests/tinysched), so it also shows that capturing the tests changes no test's
outcome. A copy of this working tree (tracked and unignored files: what a clone of it holds) is the checkout.

The comparison is of capture rows, so the perf history that accept records (the stores' `perf_history` table: times,
different on every run) is outside it by construction; accept runs with the perf history on, as users run it, and the
test checks that the history the stores held is carried over whole and one measurement at the checkout's commit added."""
from __future__ import annotations
import os, shutil, sqlite3, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[2]

def _rows(db: Path) -> set[tuple]:
  c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
  try: return set(c.execute("SELECT label, level, input_key, output_key FROM captures"))
  finally: c.close()

def _perf(db: Path) -> list[tuple]:
  c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
  try:
    if not c.execute("SELECT 1 FROM sqlite_master WHERE name='perf_history'").fetchone(): return []
    return list(c.execute("SELECT measurement, time, git_commit, git_dirty, device, level, input_key, output_key, seconds FROM perf_history "
                          "ORDER BY measurement, id"))
  finally: c.close()

def _checkout(dst: Path) -> Path:
  files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
  for f in filter(None, files):
    src = ROOT / os.fsdecode(f)
    if src.is_file():
      (dst / os.fsdecode(f)).parent.mkdir(parents=True, exist_ok=True)
      shutil.copy2(src, dst / os.fsdecode(f))
  # a repository with everything committed, as a clone is (accept records the checkout's commit)
  for cmd in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "checkout"]):
    subprocess.run(["git", *cmd], cwd=dst, check=True)
  return dst

@pytest.mark.slow
def test_accept_on_a_clean_checkout_succeeds_and_changes_no_row(tmp_path):
  tree = _checkout(tmp_path / "main")
  before = {p.name: _rows(p) for p in sorted((tree / "captures").glob("*.db"))}
  perf_before = {p.name: _perf(p) for p in sorted((tree / "captures").glob("*.db"))}
  env = {k: v for k, v in os.environ.items() if not k.startswith(("TINYSCHED_", "REPLAY_"))} | {"PYTHONPATH": str(tree)}
  r = subprocess.run([sys.executable, "-m", "replay.cli", "accept"], cwd=tree, env=env, capture_output=True, text=True, timeout=1800)
  assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
  after = {p.name: _rows(p) for p in sorted((tree / "captures").glob("*.db"))}
  assert sorted(after) == sorted(before)
  changed = {name: (len(before[name] - after[name]), len(after[name] - before[name])) for name in before if before[name] != after[name]}
  assert not changed, f"rows only in the old / new baseline, per store: {changed}\n{r.stdout[-3000:]}"
  assert r.stdout.count("(unchanged)") == len(before), r.stdout
  # the perf history: what each store held is kept, and one measurement of the new baseline added at the checkout's commit
  head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True, check=True).stdout.strip()
  assert "rows for the perf history" in r.stdout, r.stdout[-3000:]
  added = {}
  for name, old in perf_before.items():
    new = _perf(tree / "captures" / name)
    assert new[:len(old)] == old, f"{name}: the perf history it held was not carried over whole"
    added[name] = new[len(old):]
    assert {(m, c, d) for m, _, c, d, *_ in added[name]} <= {(1 + max((x[0] for x in old), default=0), head, 0)}, name
    assert {(lv, ik, ok) for *_, lv, ik, ok, _ in added[name]} <= {(lv, ik, ok) for _, lv, ik, ok in after[name]}, name
    # (a store none of whose rows the device can time, as index_past_2_31's or a model-level store's, says so)
    assert added[name] or f"{name}: no row could be timed" in r.stdout, f"{name}: no measurement\n{r.stdout[-3000:]}"
  assert sum(bool(v) for v in added.values()) >= len(added) // 2, {k: len(v) for k, v in added.items()}
