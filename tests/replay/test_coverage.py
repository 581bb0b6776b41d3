"""`replay coverage`: which named rules the captures exercise (replay/baseline/coverage.py), counted through rewrite.FIRED."""
import json, os, subprocess, sys
from pathlib import Path
import pytest
from tinysched import Tensor, Variable, dtypes, rewrite
from tinysched.ops import Ops
from tinysched.uop import UOp
from tinysched.rewrite import PatternMatcher, UPat
from tinysched.scheduling import kernel_ast
from tinysched import symbolic as SYM
from replay.baseline import coverage as C
from replay.store.sqlite import Store
from tinysched.codegen import program as P, GENERIC_GPU
from tests.replay.changes import capture_store, workload

ROOT = Path(__file__).resolve().parents[2]

def _render(t: Tensor) -> None:
  """Codegen for every kernel of `t`'s schedule on a GPU target: program-level captures on any device (the suite runs on
  NUMPY too, where realize renders nothing)."""
  for item in t.schedule_with_vars()[0]:
    for opts in (None, ()): P.to_program(item.ast, opts, GENERIC_GPU)  # the default choice, and none

def _workload_and_codegen() -> None:
  workload()
  Tensor.manual_seed(4)
  x, w = Tensor.rand(4, 8), Tensor.rand(8, 3)
  v = Variable("n", 1, 4).bind(3)
  for t in ((x @ w).relu().sum(1), (x - x.max(1, keepdim=True)).exp(), x.pad(((1, 1), (0, 0))).sum(1),
            (x.shrink(((0, v), None)) * 2).sum(0), (x.reshape(32).shrink(((0, v * 8),)) + 1),
            # attention over a symbolic length (as in GPT-2's decode): its 64-bit sizes simplify (1*(n+1)), memoized by the lowerer
            (Tensor.rand(1, 4, 1, 1, 16) * Tensor.rand(1, 4, 1, 9, 16).shrink((None, None, None, (0, v + 1), None))).sum(-1)): _render(t)

@pytest.fixture(scope="module")
def db(tmp_path_factory):
  """`workload`'s store, plus program-level captures (GPU target) of a few more kernels."""
  return capture_store(tmp_path_factory.mktemp("coverage") / "cov.db", _workload_and_codegen, "cov")

def _by_name(cov: C.Coverage) -> dict[tuple[str, str], C.RuleCount]: return {(c.rule.where, c.rule.name): c for c in cov.rules}

def _levels(db) -> dict[str, int]:
  s = Store(db, readonly=True)
  try:
    out: dict[str, int] = {}
    for r in s.captures(): out[r["level"]] = out.get(r["level"], 0) + 1
    return out
  finally: s.close()

def test_workload_rules_counted_and_unreachable_ones_uncovered(db):
  cov = C.coverage([str(db)])
  rows = _by_name(cov)
  assert cov.captures == sum(_levels(db).values()) and cov.outcomes == {"ran": cov.captures}
  # what the workload must fire: the kernel rewrite, the store plan, the lowering, the renderer
  for where, name in [("scheduling.kernel_ast.inline_rules", "inline_computed"), ("scheduling.kernel_ast.number_rules", "define_global"),
                      ("scheduling.stores.store_rules", "store_meta_op"), ("codegen.lowerer.ast_lowering", "elementwise"),
                      ("codegen.opencl.opencl_rules", "alu"), ("symbolic.symbolic", "add_zero")]:
    c = rows[(where, name)]
    assert 0 < c.captures <= c.firings, (where, name, c)
  # one device, no bitcast: no COPY source is stored and nothing renders a bitcast
  for where, name in [("scheduling.stores.store_rules", "store_copy_source"), ("codegen.opencl.opencl_rules", "bitcast")]:
    assert rows[(where, name)].captures == rows[(where, name)].firings == 0
    assert rows[(where, name)] in cov.uncovered
  # uncovered first, every rule of the inventory listed once
  n = len(cov.uncovered)
  assert all(c.captures == 0 for c in cov.rules[:n]) and all(c.captures > 0 for c in cov.rules[n:])
  assert [c.rule for c in cov.rules] and len({c.rule for c in cov.rules}) == len(C.rule_inventory()[0]) == len(cov.rules)

def test_a_rule_the_workload_cannot_fire_is_covered_where_it_fires(tmp_path):
  # the same rule, reached: a bitcast renders through opencl_rules' `bitcast` (so its 0 above is the workload's, not the counter's)
  other = capture_store(tmp_path / "bitcast.db", lambda: _render((Tensor.rand(4, 4) + 1).bitcast(dtypes.int32)), "bitcast")
  assert _by_name(C.coverage([str(other)]))[("codegen.opencl.opencl_rules", "bitcast")].captures >= 1

def _pm_with(pm: PatternMatcher, rules) -> PatternMatcher: return PatternMatcher(rules, name=pm.name)

def test_planted_rename_and_removal_change_coverage(db, monkeypatch):
  before = _by_name(C.coverage([str(db)]))
  old = before[("scheduling.kernel_ast.finish_rules", "preload_to_load")]
  assert old.captures > 0 and before[("symbolic.symbolic", "add_zero")].captures > 0
  # planted: one scheduler rule renamed (same pattern and function), one symbolic rule removed
  fr = kernel_ast.finish_rules
  renamed = [(p, f, "preload_renamed" if n == "preload_to_load" else n) for p, f, n, _ in fr.rules]
  monkeypatch.setattr(kernel_ast, "finish_rules", _pm_with(fr, renamed))
  monkeypatch.setattr(SYM, "symbolic", _pm_with(SYM.symbolic, [(p, f, n) for p, f, n, _ in SYM.symbolic.rules if n != "add_zero"]))
  after = _by_name(C.coverage([str(db)]))
  assert ("scheduling.kernel_ast.finish_rules", "preload_to_load") not in after
  new = after[("scheduling.kernel_ast.finish_rules", "preload_renamed")]
  assert (new.captures, new.firings) == (old.captures, old.firings)
  assert ("symbolic.symbolic", "add_zero") not in after
  assert set(after) == (set(before) - {("scheduling.kernel_ast.finish_rules", "preload_to_load"), ("symbolic.symbolic", "add_zero")}) | \
    {("scheduling.kernel_ast.finish_rules", "preload_renamed")}

def test_direct_rewrite_firings_are_counted(db):
  # PatternMatcher.rewrite outside graph_rewrite (the renderer's way) reports to FIRED
  fn = lambda x: UOp.const(x.dtype, 0)  # noqa: E731
  pm = PatternMatcher([(UPat(Ops.MUL, name="x"), fn, "to_zero")], name="direct")
  a = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("a", 0, 9))
  fired: list = []
  prev, rewrite.FIRED = rewrite.FIRED, fired
  try: assert pm.rewrite(UOp(Ops.MUL, dtypes.int32, (a, a))) is not None and pm.rewrite(a) is None
  finally: rewrite.FIRED = prev
  assert fired == [("to_zero", fn)]
  # and in coverage: every program-level capture renders through opencl_rules.rewrite, one `store` per kernel at least
  rows = _by_name(C.coverage([str(db)]))
  n_prog = _levels(db)["program"]
  assert n_prog > 0 and rows[("codegen.opencl.opencl_rules", "store")].captures == n_prog
  assert rows[("codegen.opencl.opencl_rules", "global_buffer")].captures == n_prog

def test_combined_matchers_listed_once_under_their_own_matcher():
  rules, _ = C.rule_inventory()
  keys = [(r.module, r.matcher, r.name) for r in rules]
  assert keys == sorted(keys) and len(keys) == len(set(keys))
  # compose_rules is part of views_up and views_down (compose_rules + ...): its rule is compose_rules' alone
  assert [r.matcher for r in rules if r.name == "compose_views"] == ["compose_rules"]
  # reduce_folds is imported by the lowerer: listed where it is defined
  assert {r.module for r in rules if r.matcher == "reduce_folds"} == {"tinysched.codegen.folds"}

def _cli(*args: str, seed: str = "1") -> subprocess.CompletedProcess:
  env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
  return subprocess.run([sys.executable, "-m", "replay.cli", "coverage", *args], capture_output=True, text=True, env=env, cwd=ROOT)

def test_cli_output_deterministic_json_and_exit_codes(db, tmp_path):
  runs = [_cli(str(db), "--json", str(tmp_path / f"c{s}.json"), seed=s) for s in ("1", "2")]
  assert [r.returncode for r in runs] == [0, 0], runs[0].stderr
  assert runs[0].stdout == runs[1].stdout
  j1, j2 = ((tmp_path / f"c{s}.json").read_bytes() for s in ("1", "2"))
  assert j1 == j2
  doc = json.loads(j1)
  assert doc["totals"]["uncovered"] == sum(1 for r in doc["rules"] if r["captures"] == 0) > 0
  only = _cli(str(db), "--uncovered-only")
  listed = [ln.split()[0] for ln in only.stdout.split("\n\n")[0].splitlines()[2:] if not ln.startswith("  why: ")]
  assert only.returncode == 0 and listed == [r["rule"] for r in doc["rules"] if r["captures"] == 0]
  bad = tmp_path / "bad.db"
  bad.write_bytes(b"not a store")
  r = _cli(str(db), str(bad))
  assert r.returncode == 2 and "bad.db" in r.stderr and "next:" in r.stderr

_FIRED_BY_INPUT = """
import json, sys
from replay.baseline import coverage as C
from replay.store.sqlite import Store
s = Store(sys.argv[1], readonly=True)
inputs = list(dict.fromkeys((r["level"], r["input_key"]) for r in s.captures()))
data = [(lvl, s.blob(k)) for lvl, k in inputs]
out = {}
for lvl, d in (data[::-1] if sys.argv[2] == "reversed" else data):
  outcome, fired = C.fired_rules(lvl, d)
  out[f"{lvl}:{data.index((lvl, d))}"] = [outcome, sorted(n for n, _ in fired)]
print(json.dumps(out, sort_keys=True))
"""

def test_counts_do_not_depend_on_what_was_replayed_before(db):
  # process-wide memos (view algebra, the lowerer's index cache) would make a replay after another fire fewer rules: each
  # input's firings, replayed in file order in one process and in reverse order in another, are the same
  def run(order: str) -> dict:
    r = subprocess.run([sys.executable, "-c", _FIRED_BY_INPUT, str(db), order], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)
  fwd, rev = run("forward"), run("reversed")
  assert fwd == rev and all(v[0] == "ran" for v in fwd.values()) and any(v[1] for v in fwd.values())

def test_grouping_choices_and_the_unsafe_pad_store_are_counted(tmp_path):
  # fusion decides without rewriting: its named choices are in the inventory and counted like rules
  names = {r.name for r in C.rule_inventory()[0] if r.where == "scheduling.fusion.grouping"}
  from tinysched.scheduling.fusion import grouping
  assert names == set(grouping.names()) and "alone_reduce_reader" in names
  def work():
    x = Tensor.rand(8, 8).realize()
    (x.exp().pad(((1, 1), (0, 0))) + 1).realize()  # pad over exp: exp's result is stored before the padding view
    (x.sum(1, keepdim=True) - x).realize()  # the sum broadcast back: stored before the expanding view
    x.sum(1).reshape(2, 4).sum(1).realize()  # a reduce read by a reduce: stored alone
  rows = _by_name(C.coverage([str(capture_store(tmp_path / "g.db", work, "g"))]))
  assert rows[("scheduling.stores.store_rules", "store_before_unsafe_pad")].captures >= 1
  assert rows[("scheduling.stores.store_rules", "store_before_expand")].captures >= 1  # the keepdim sum broadcast back
  assert rows[("scheduling.fusion.grouping", "alone_reduce_reader")].captures >= 1

def test_planted_can_pad_always_true_leaves_the_unsafe_pad_store_uncovered(tmp_path, monkeypatch):
  # the check can fail: with every op declared zero-preserving, the unsafe-pad store never fires
  from tinysched.scheduling import stores
  db = capture_store(tmp_path / "p.db", lambda: (Tensor.rand(8, 8).realize().exp().pad(((1, 1), (0, 0))) + 1).realize(), "p")
  assert _by_name(C.coverage([str(db)]))[("scheduling.stores.store_rules", "store_before_unsafe_pad")].captures == 1
  monkeypatch.setattr(stores, "zero_preserving", lambda u: True)
  assert _by_name(C.coverage([str(db)]))[("scheduling.stores.store_rules", "store_before_unsafe_pad")].captures == 0

def test_an_undeclared_choice_is_an_error_only_while_counting():
  from tinysched.rewrite import Decisions
  d = Decisions("t", {"a": "the one choice"})
  d.note("b")  # not counting: free, nothing checked
  prev, rewrite.FIRED = rewrite.FIRED, []
  try:
    d.note("a")
    assert rewrite.FIRED == [("a", d)]
    with pytest.raises(KeyError, match="undeclared decision 'b'"): d.note("b")
  finally: rewrite.FIRED = prev

def test_save_appends_a_measurement_per_store(db, tmp_path):
  import shutil
  p = tmp_path / "saved.db"
  shutil.copy(db, p)
  r = _cli(str(p), "--save")
  assert r.returncode == 0 and "coverage saved" in r.stdout, r.stdout + r.stderr
  C.save(str(p), log=lambda s: None)
  s = Store(p, readonly=True)
  try:
    runs = s.coverage_runs()
    assert len(runs) == 2 and len(list(s.captures())) == _levels(db)["kernel"] + _levels(db)["schedule"] + _levels(db)["program"]
  finally: s.close()
  want = {(c.rule.module, c.rule.matcher, c.rule.name): (c.captures, c.firings) for c in C.coverage([str(p)]).rules}
  for run in runs:
    assert run["captures_total"] == sum(_levels(db).values()) and run["git_commit"]
    assert {(x["module"], x["matcher"], x["rule"]): (x["captures"], x["firings"]) for x in run["rules"]} == want
  assert not Path(f"{p}-wal").exists()  # compacted again: one file to commit
  assert C.coverage([str(p)]).captures == C.coverage([str(db)]).captures  # the rows are untouched

def test_every_stated_reason_names_a_rule_and_is_printed(db):
  keys = {(r.where, r.name) for r in C.rule_inventory()[0]}
  assert set(C.WHY_UNREACHED) <= keys, set(C.WHY_UNREACHED) - keys
  cov = C.coverage([str(db)])
  text = C.table(cov, uncovered_only=True)
  for (where, name), why in C.WHY_UNREACHED.items():
    if any(c.rule.where == where and c.rule.name == name for c in cov.uncovered): assert f"why: {why}" in text

def test_replaying_under_an_active_capture_captures_nothing(db, tmp_path, monkeypatch):
  # replay's re-runs go through capture_hook.paused(): a capture open around them records nothing of them. Planted: a
  # paused() that does not pause lets the replayed calls into the open store
  import contextlib
  import replay as R
  from replay.check.pool import check
  from tinysched import capture_hook
  def rows(p):
    try: s = Store(p, readonly=True)
    except Exception: return 0  # noqa: BLE001 (nothing was written: no store)
    try: return sum(1 for _ in s.captures())
    finally: s.close()
  with R.capture(tmp_path / "outer.db", label="outer"):
    assert check([str(db)], jobs=1).exit_code() == 0
  assert rows(tmp_path / "outer.db") == 0
  monkeypatch.setattr(capture_hook, "paused", contextlib.nullcontext)
  with R.capture(tmp_path / "planted.db", label="outer"):
    check([str(db)], jobs=1)
  assert rows(tmp_path / "planted.db") > 0
