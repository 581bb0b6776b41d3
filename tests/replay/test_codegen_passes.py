"""The lowering as named passes: the pass list, node provenance, and program-level replay naming the codegen rule behind a change."""
import numpy as np
import pytest
import replay
from replay.check.pool import check
from replay.store.sqlite import Store
from replay.levels.program import program_rules_behind
from tinysched import Tensor
from tinysched.ops import Ops
from tinysched.uop import UOp
from tinysched.rewrite import PatternMatcher
from tinysched.codegen import program as P, lowerer, folds, Kernel, GENERIC_GPU, GENERIC_CPU, default_opts
from tinysched.codegen.provenance import trace_lowering

def _sum_ast() -> UOp: return (Tensor(np.arange(64, dtype=np.float32).reshape(8, 8)) * 2).sum(1).schedule()[-1].ast
def _arange_ast() -> UOp: return Tensor.arange(100).schedule()[-1].ast

def test_pass_order_is_data():
  assert [p.name for p in lowerer.LOWERING_PASSES] == ["placeholders", "thread_ids", "loops", "closed_form_reduces", "reduce_loops",
                                                      "stores", "linearize", "narrow_indices", "local_memory_limit"]
  ast = _sum_ast()
  k = Kernel(ast, default_opts(ast, GENERIC_GPU))
  assert lowerer.run_passes(k, GENERIC_GPU).lowered() == lowerer.lower(k, GENERIC_GPU)

@pytest.mark.parametrize("make", [_sum_ast, _arange_ast])
@pytest.mark.parametrize("target", [GENERIC_GPU, GENERIC_CPU])
def test_every_node_has_a_maker(make, target):
  ast = make()
  k = Kernel(ast, default_opts(ast, target))
  traced, labels = trace_lowering(k, target)
  assert traced == lowerer.lower(k, target)  # tracing changes nothing
  passes = {f"pass:{p.name}" for p in lowerer.LOWERING_PASSES}
  rules = set(lowerer.ast_lowering.rule_names()) | set(lowerer.reduce_folds.rule_names())
  assert set(labels) == set(traced.uops) and all(lbl in passes | rules for lbl in labels.values()), set(labels.values()) - passes - rules

def _capture(tmp_path, ast) -> str:
  db = tmp_path / "prog.db"
  with replay.capture(db, label="p", levels=("program",)):
    P.to_program(ast, None, GENERIC_GPU)
    P.to_program(ast, (), GENERIC_GPU)
  assert check([str(db)], jobs=1).exit_code() == 0
  return str(db)

def _rules_of_changes(db: str) -> list[list[str]]:
  rep = check([db], jobs=1)
  changed = [r for r in rep.results if r.outcome == "changed"]
  assert changed and rep.exit_code() == 1
  s = Store(db, readonly=True)
  try: direct = [program_rules_behind(s.blob(r.input_key), s.blob(r.stored_key).decode()) for r in changed]
  finally: s.close()
  assert [r.rules for r in changed] == direct  # replay check's report names the same rules
  return direct

def _planted(pm: PatternMatcher, rule: str, fn) -> PatternMatcher:
  assert rule in pm.rule_names()
  return PatternMatcher([(p, fn if n == rule else f, n) for p, f, n, _ in pm.rules], name=f"planted_{rule}")

def test_unchanged_program_names_nothing(tmp_path):
  db = _capture(tmp_path, _sum_ast())
  s = Store(db, readonly=True)
  try:
    rows = list(s.captures(level="program"))
    assert rows and all(program_rules_behind(s.blob(r["input_key"]), s.blob(r["output_key"]).decode()) == [] for r in rows)
  finally: s.close()

def test_planted_elementwise_rule_is_named(tmp_path, monkeypatch):
  db = _capture(tmp_path, _sum_ast())
  def swapped(ctx, x):  # a product with its operands swapped: same value, different source
    if x.op is Ops.MUL: return UOp(x.op, x.dtype, ctx._srcs(x)[::-1], x.arg)
    return ctx._elementwise(x)
  monkeypatch.setattr(lowerer, "ast_lowering", _planted(lowerer.ast_lowering, "elementwise", swapped))
  for rules in _rules_of_changes(db): assert rules[:1] == ["elementwise"], rules

def test_planted_fold_rule_is_named(tmp_path, monkeypatch):
  db = _capture(tmp_path, _arange_ast())
  def padded(red, cond, c, z):  # the closed form plus a zero that nothing folds away
    if (v := folds.fold_masked_const(red, cond, c, z)) is None: return None
    body = v.src[0]
    return UOp(v.op, v.dtype, (UOp(Ops.ADD, body.dtype, (body, UOp.const(body.dtype, 0))), *v.src[1:]), v.arg)
  monkeypatch.setattr(lowerer, "reduce_folds", _planted(lowerer.reduce_folds, "reduce_masked_const_to_count", padded))
  for rules in _rules_of_changes(db): assert rules[:1] == ["reduce_masked_const_to_count"], rules
