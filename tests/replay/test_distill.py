"""`replay distill`: the few rows of a large capture set that exercise what a baseline does not (replay/baseline/distill.py)."""
import subprocess, sys
from pathlib import Path
import pytest
from tinysched import Tensor
from replay.baseline import coverage as C
from replay.baseline import distill as D
from replay.check.pool import check
from replay.store.sqlite import Store
from tests.replay.changes import capture_store

ROOT = Path(__file__).resolve().parents[2]
PAD = ("scheduling.stores.store_rules", "store_before_unsafe_pad")

def _baseline_work() -> None:
  x = Tensor.rand(8, 8).realize()
  (x @ x).relu().sum(1).realize()

def _test_work() -> None:
  """What a test suite captures: many small graphs, most firing what the baseline fires, one padding an exp."""
  x = Tensor.rand(8, 8).realize()
  for k in range(1, 5): ((x * k) @ x).relu().sum(1).realize()
  (x.exp().pad(((1, 1), (0, 0))) + 1).realize()
  x.sum(1).reshape(2, 4).sum(1).realize()
  (x.sum(1, keepdim=True) - x).realize()

@pytest.fixture(scope="module")
def stores(tmp_path_factory):
  d = tmp_path_factory.mktemp("distill")
  return capture_store(d / "base.db", _baseline_work, "base"), capture_store(d / "tests.db", _test_work, "tests")

def _per_rule(paths) -> dict[tuple[str, str], int]:
  return {(c.rule.where, c.rule.name): c.captures for c in C.coverage([str(p) for p in paths]).rules}

def _assert_covers(base, src, out, per_rule: int) -> None:
  """The property distilling promises: every rule has min(per_rule, what baseline + source can give) captures."""
  want = {k: min(per_rule, n) for k, n in _per_rule([base, src]).items()}
  have = _per_rule([base, out])
  short = {k: (have[k], n) for k, n in want.items() if have[k] < n}
  assert not short, short

def _keys(p) -> list[tuple[str, str]]:
  s = Store(p, readonly=True)
  try: return sorted((r["level"], r["input_key"]) for r in s.captures())
  finally: s.close()

def test_kept_rows_cover_every_rule_the_source_can_and_are_few(stores, tmp_path):
  base, src = stores
  for per_rule in (1, 3):
    out = tmp_path / f"d{per_rule}.db"
    res = D.distill([str(src)], str(out), against=[str(base)], per_rule=per_rule, log=lambda s: None)
    _assert_covers(base, src, out, per_rule)
    assert 0 < len(res.kept) < res.source_inputs and len(_keys(out)) == len(res.kept)
    assert PAD in {(rk.where, rk.name) for rk in res.newly_covered}  # the baseline never pads an exp
  # labels survive: a distilled row still names where it came from
  s = Store(tmp_path / "d3.db", readonly=True)
  try: assert {r["label"] for r in s.captures()} == {"tests"}
  finally: s.close()

def test_same_sources_same_selection(stores, tmp_path):
  base, src = stores
  for name in ("a.db", "b.db"): D.distill([str(src)], str(tmp_path / name), against=[str(base)], per_rule=2, log=lambda s: None)
  assert _keys(tmp_path / "a.db") == _keys(tmp_path / "b.db")

def test_planted_blind_spot_is_caught_by_the_property(stores, tmp_path, monkeypatch):
  # the check can fail: a selection that does not see the unsafe-pad firings drops the only row that has them
  base, src = stores
  real = D.fired_rules_of
  def blind(level, inputs):
    outcome, fired = real(level, inputs)
    return outcome, [f for f in fired if f[0] != PAD[1]]
  monkeypatch.setattr(D, "fired_rules_of", blind)
  D.distill([str(src)], str(tmp_path / "blind.db"), against=[str(base)], per_rule=1, log=lambda s: None)
  monkeypatch.undo()
  with pytest.raises(AssertionError, match="store_before_unsafe_pad"): _assert_covers(base, src, tmp_path / "blind.db", 1)

def test_distilled_rows_catch_can_pad_where_the_baseline_does_not(stores, tmp_path, monkeypatch):
  """The reason to distill a test suite into the baseline: a planted can_pad (every op zero-preserving) changes the
  distilled store's replay and leaves the model-like baseline identical."""
  base, src = stores
  out = tmp_path / "d.db"
  D.distill([str(src)], str(out), against=[str(base)], per_rule=1, log=lambda s: None)
  assert check([str(base), str(out)], jobs=1).exit_code() == 0
  from tinysched.scheduling import stores as ST
  monkeypatch.setattr(ST, "zero_preserving", lambda u: True)
  assert check([str(base)], jobs=1).exit_code() == 0
  rep = check([str(out)], jobs=1)
  assert rep.exit_code() == 1 and rep.counts().get("changed", 0) >= 1

def _cli(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", "replay.cli", "distill", *args], capture_output=True, text=True, cwd=ROOT)

def test_cli_summary_and_bad_input(stores, tmp_path):
  base, src = stores
  r = _cli(str(src), "--out", str(tmp_path / "o.db"), "--against", str(base))
  assert r.returncode == 0 and "distinct source inputs kept" in r.stdout and "store_before_unsafe_pad" in r.stdout, r.stdout + r.stderr
  r = _cli(str(src), "--out", str(src))
  assert r.returncode == 2 and "also an input" in r.stderr
  r = _cli(str(tmp_path / "missing.db"), "--out", str(tmp_path / "o2.db"))
  assert r.returncode == 2 and "missing.db" in r.stderr and not (tmp_path / "o2.db").exists()
  r = _cli(str(src), "--out", str(tmp_path / "o3.db"), "--per-rule", "0")
  assert r.returncode == 2 and "at least 1" in r.stderr

def test_a_huge_capture_loses_ties_to_a_small_one(tmp_path, monkeypatch):
  # two sources fire the same rules; the one past BIG_ELEMENTS is not kept (planted: sizes read backwards, and the huge
  # one is kept: the footprint is what decides)
  def work(n):
    def run(): (Tensor.empty(n) * 2).realize()
    return run
  small = capture_store(tmp_path / "small.db", work(64), "small")
  huge = capture_store(tmp_path / "huge.db", work(D.BIG_ELEMENTS * 2), "huge")
  from replay import levels
  s = Store(huge, readonly=True)
  assert D.footprint(levels.get("kernel").decode_input(s.blob(next(s.captures(level="kernel"))["input_key"]))) > D.BIG_ELEMENTS
  s.close()
  res = D.distill([str(huge), str(small)], str(tmp_path / "d.db"), per_rule=1, log=lambda s: None)
  assert res.kept and {r["label"] for _, r in res.kept} == {"small"}
  real = D.footprint
  monkeypatch.setattr(D, "footprint", lambda inputs: 0 if real(inputs) > D.BIG_ELEMENTS else 2 * D.BIG_ELEMENTS)
  res = D.distill([str(huge), str(small)], str(tmp_path / "e.db"), per_rule=1, log=lambda s: None)
  assert "huge" in {r["label"] for _, r in res.kept}
