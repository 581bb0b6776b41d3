"""Codegen applies the symbolic simplifier's exact identities to kernel values (tinysched/codegen/rebuild.py alu,
VALUE_IDENTITIES): work whose result is known does not reach the program, and the numbers stay the interpreter's."""
from __future__ import annotations
import numpy as np
import pytest
from tinysched import Tensor, dtypes
from tinysched.codegen import GENERIC_CPU, to_program
from tinysched.codegen import rebuild
from tests.tinysched.kernels import needs_cl, _kernels

A = np.array([[-3.0, -1.5, -0.0], [0.0, 2.5, 7.0]], np.float32)

def _src(t: Tensor) -> str:
  ks = _kernels(t)
  assert len(ks) == 1, len(ks)
  return to_program(ks[0].ast, (), GENERIC_CPU).src.split("{", 1)[1]  # the body: the signature names the buffers

CASES = {  # name: (graph from a loaded tensor, numpy reference, text the body must not hold)
  "max_self": (lambda a: a.maximum(a), lambda n: n, "?"),  # MAX renders as a NaN-propagating select
  "where_same": (lambda a: (a > 0).where(a, a), lambda n: n, "?"),
  "double_neg": (lambda a: -(-a), lambda n: n, "-(-"),
  "int_mod_one": (lambda a: a.cast(dtypes.int32) % 1, lambda n: np.zeros(n.shape, np.int32), "%"),
  "int_compare_self": (lambda a: (a.cast(dtypes.int32) < a.cast(dtypes.int32)), lambda n: np.zeros(n.shape, bool), "<"),
  "or_true": (lambda a: ((a > 0) | True), lambda n: np.ones(n.shape, bool), "|"),
  "or_false": (lambda a: ((a > 0) | False), lambda n: n > 0, "|"),
  "and_true": (lambda a: ((a > 0) & True), lambda n: n > 0, "&"),
}

@pytest.mark.parametrize("name", sorted(CASES))
def test_identity_leaves_no_trace_in_the_program(name):
  build, _, gone = CASES[name]
  assert gone not in _src(build(Tensor(A)))

@pytest.mark.parametrize("device", ["NUMPY", pytest.param("OPENCL", marks=needs_cl)])
@pytest.mark.parametrize("name", sorted(CASES))
def test_identity_keeps_the_numbers(name, device):
  build, ref, _ = CASES[name]
  got = build(Tensor(A, device=device)).numpy()
  want = ref(A)
  assert got.dtype == want.dtype and np.array_equal(got, want)
  if name in ("max_self", "where_same", "double_neg"): assert np.array_equal(np.signbit(got), np.signbit(want))  # -0.0 stays -0.0

def test_planted_empty_identity_set_leaves_the_work_in(monkeypatch):
  # the check can fail: without the identities, max(a,a) and where(c,a,a) are rendered
  monkeypatch.setattr(rebuild, "VALUE_IDENTITIES", ())
  rebuild._value_cache.clear()
  try:
    a = Tensor(A)
    assert "?" in _src(a.maximum(a)) and "?" in _src((a > 0).where(a, a)) and "-(-" in _src(-(-a))
  finally: rebuild._value_cache.clear()

def test_identities_are_symbolics_own_rules():
  from tinysched import symbolic as SYM
  names = {n for _, _, n, _ in SYM.symbolic.rules}
  assert set(rebuild.VALUE_IDENTITIES) <= names and "add_zero_float" not in rebuild.VALUE_IDENTITIES
  fns = {f for _, f, n, _ in SYM.symbolic.rules if n in rebuild.VALUE_IDENTITIES}
  assert {f for _, f, _, _ in rebuild.value_rules().rules} == fns

def _samples():
  """One node per VALUE_IDENTITIES rule that the rule rewrites (built with UOp directly: no rebuild, no fold)."""
  from tinysched.ops import Ops
  from tinysched.uop import UOp
  f = UOp(Ops.DEFINE_VAR, dtypes.float32, (), ("f", 0, 1))
  i = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("i", 0, 9))
  b = UOp(Ops.CMPLT, dtypes.bool, (i, UOp.const(dtypes.int32, 5)))
  c = lambda dt, v: UOp.const(dt, v)  # noqa: E731
  T, F = c(dtypes.bool, True), c(dtypes.bool, False)
  return {
    "add_zero": (Ops.ADD, dtypes.int32, (i, c(dtypes.int32, 0))), "mul_one": (Ops.MUL, dtypes.int32, (i, c(dtypes.int32, 1))),
    "mul_one_float": (Ops.MUL, dtypes.float32, (f, c(dtypes.float32, 1.0))), "mul_zero": (Ops.MUL, dtypes.int32, (i, c(dtypes.int32, 0))),
    "div_one": (Ops.IDIV, dtypes.int32, (i, c(dtypes.int32, 1))), "mod_one": (Ops.MOD, dtypes.int32, (i, c(dtypes.int32, 1))),
    "and_true": (Ops.AND, dtypes.bool, (b, T)), "and_false": (Ops.AND, dtypes.bool, (b, F)), "or_false": (Ops.OR, dtypes.bool, (b, F)),
    "or_true": (Ops.OR, dtypes.bool, (b, T)), "idempotent": (Ops.MAX, dtypes.float32, (f, f)),
    "compare_self": (Ops.CMPLT, dtypes.bool, (i, i)), "where_true": (Ops.WHERE, dtypes.float32, (T, f, c(dtypes.float32, 2.0))),
    "where_false": (Ops.WHERE, dtypes.float32, (F, f, c(dtypes.float32, 2.0))), "where_same": (Ops.WHERE, dtypes.float32, (b, f, f)),
    "double_neg": (Ops.NEG, dtypes.float32, (UOp(Ops.NEG, dtypes.float32, (f,)),)),
  }

def test_every_identity_applies_through_alu():
  # each VALUE_IDENTITIES rule has a sample here (a new one without a sample fails), and rebuild.alu folds each sample
  from tinysched.uop import UOp
  samples = _samples()
  assert set(samples) == set(rebuild.VALUE_IDENTITIES)
  for name, (op, dt, srcs) in samples.items():
    built = UOp(op, dt, srcs)
    assert rebuild.alu(op, dt, srcs) is not built, name

def test_planted_alu_that_skips_some_identities_is_caught(monkeypatch):
  # the check above can fail: an alu that leaves MAX and WHERE alone leaves their samples unfolded
  from tinysched.uop import UOp
  from tinysched.ops import Ops
  real = rebuild.alu
  monkeypatch.setattr(rebuild, "alu", lambda op, dt, srcs, arg=None:
                      UOp(op, dt, srcs, arg) if op in (Ops.MAX, Ops.WHERE) else real(op, dt, srcs, arg))
  with pytest.raises(AssertionError): test_every_identity_applies_through_alu()
