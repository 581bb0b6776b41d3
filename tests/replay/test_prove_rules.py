"""replay.prove.rules: the symbolic simplifier's and the closed-form reduces' rules proven with z3 on the corpus, and
planted rule bugs of the edge-value class (negatives, boundaries, zero, one, wrap-around) refuted with a counterexample,
without running any kernel. Plants replace one rule in the matcher (the matcher holds function objects: patching the
module attribute alone would not change what the compiler runs) with the real function edited at one place."""
import inspect, math, random, struct
import pytest
from tinysched import symbolic as SYM
from tinysched.codegen import lowerer, folds as FOLDS
from tinysched.dtype import dtypes
from tinysched.ops import Ops
from tinysched.rewrite import PatternMatcher
from tinysched.uop import UOp, Variable, sym_infer
from replay.prove import rules, smt

pytest.importorskip("z3", reason="the proofs need z3 (pip install z3-solver, the `proofs` extra)")

# real bugs of the simplifier these proofs found, fixed in tinysched/symbolic.py (each counterexample confirmed by exec_alu,
# which shares no code with z3); test_the_wrap_around_guards_are_needed puts each bug back and sees it refuted:
#   fold_div, fold_mod: an unsigned sum that wraps around has the full range [0, max], so the `x.vmin < 0` guard, which
#     catches a wrapped signed sum, let it through: ((i*3)//3 -> i for i near 2**32); now `no_wrap` guards the split
#   combine_terms (_merge_divmod): c*((x//c)%e) + x%c -> x%(c*e) with c*e wrapped around (int32 2147483647*2 = -2)
KNOWN_BUGS: dict[tuple[str, str], str] = {}

@pytest.fixture(scope="module")
def clean():
  return {(p.matcher, p.rule): p for p in rules.prove_rules()}

def _edited(fn, old: str, new: str, **names):
  """`fn` with one edit of its source (none for old == ""), defined in its own module's namespace plus `names`."""
  src = inspect.getsource(fn)
  assert old == "" or src.count(old) == 1, f"{fn.__name__}: {old!r} must occur once (the rule's source changed: update the plant)"
  ns = {**vars(inspect.getmodule(fn)), **names}
  exec(compile(src.replace(old, new), f"<planted {fn.__name__}>", "exec"), ns)
  return ns[fn.__name__]

def _plant(monkeypatch, **fns):
  """SYM.symbolic with the named rules' functions replaced (same names, same order)."""
  pm = SYM.symbolic
  assert set(fns) <= set(pm.rule_names())
  monkeypatch.setattr(SYM, "symbolic", PatternMatcher([(p, fns.get(n, f), n) for p, f, n, _ in pm.rules], name=pm.name))

def _prove(rule: str) -> rules.RuleProof:
  return {p.rule: p for p in rules.prove_rules(only=[rule])}[rule]

def _refuted(p: rules.RuleProof, clean, dtype: str | None = None) -> dict:
  """p is refuted by more instances than the clean rule (a known bug may refute it already), with a counterexample
  exec_alu reproduces; the counterexample."""
  base = clean[(p.matcher, p.rule)]
  assert p.status == "counterexample" and p.refuted > base.refuted, (p, rules.format_counterexample(p))
  ce = p.counterexample
  assert ce["confirmed"] is True and ce["before_exec"] != ce["after_exec"], ce
  if dtype is not None: assert ce["dtype"] == dtype, rules.format_counterexample(p)
  return ce

# *** the clean compiler ***

def test_every_rule_is_proven_or_listed(clean):
  names = {("symbolic", n) for n in SYM.symbolic.rule_names()} | {("reduce_folds", n) for n in lowerer.reduce_folds.rule_names()}
  assert names | {("uop", "vmin_vmax")} == set(clean)
  for key, p in clean.items():
    if key in KNOWN_BUGS:
      assert p.status == "counterexample" and p.counterexample["confirmed"] and p.counterexample["dtype"] == KNOWN_BUGS[key], \
        f"{key}: fixed? then remove it from KNOWN_BUGS\n{rules.format_counterexample(p)}"
      continue
    assert p.status in ("proven", "listed"), rules.format_counterexample(p)
    assert (p.status == "listed") == (key in rules.LISTED), p
    if p.status == "proven": assert p.instances >= 8 and p.proven == p.instances and not p.unknown, p
  assert all(p.reason.startswith("bounded") for k, p in clean.items() if k[0] == "reduce_folds")

def test_the_wrap_around_guards_are_needed(monkeypatch):
  # the three bugs put back one at a time (the guards that fixed them removed): each is refuted through wrap-around
  split_guard = "  if not no_wrap(terms, const, x.dtype): return None\n"
  mod_guard = "  if not no_wrap(terms, const, x.dtype) or any(t.vmin < 0 for t, _ in terms): return None\n"
  merge_guard = " \\\n           and c.arg*u.src[1].arg <= dtypes.max(t.dtype):"
  plants = {"fold_div": dict(fold_div=_edited(SYM.fold_div, split_guard, "")),
            "fold_mod": dict(fold_mod=_edited(SYM.fold_mod, mod_guard, "  if any(t.vmin < 0 for t, _ in terms): return None\n")),
            "combine_terms": dict(combine_terms=_edited(SYM.combine_terms, "", "", _merge_divmod=_edited(SYM._merge_divmod, merge_guard, ":")))}
  for rule, fns in plants.items():
    with monkeypatch.context() as m:
      _plant(m, **fns)
      p = _prove(rule)
      assert p.status == "counterexample" and p.counterexample["confirmed"], (rule, p)

def test_deterministic(clean):
  again = {(p.matcher, p.rule): p for p in rules.prove_rules()}
  assert again == clean

def test_corpus_reaches_the_edges():
  nodes = rules.corpus(SYM.symbolic)
  assert len(nodes) > 10000 and {u.dtype for u in nodes} >= {dtypes.int32, dtypes.int64, dtypes.uint32, dtypes.bool}
  ranges = {u.arg[1:] for n in nodes for u in n.src if u.op is Ops.DEFINE_VAR}
  assert {(0, 4), (-4, 4), (-1, -1), (2**31 - 9, 2**31 - 1), (-2**31, -2**31 + 8), (2**63 - 9, 2**63 - 1), (2**32 - 9, 2**32 - 1)} <= ranges

# *** the two planted bugs of the brief ***

def test_fold_mod_of_a_negative_sum_is_refuted(monkeypatch, clean):
  # Python's % on a sum that may be negative: (4*i - 1) % 4 -> 3, but C gives -1 at i = 0
  _plant(monkeypatch, fold_mod=_edited(SYM.fold_mod, "if d <= 0 or x.vmin < 0: return None", "if d <= 0: return None"))
  ce = _refuted(_prove("fold_mod"), clean, "int32")
  assert min(ce["values"].values()) < 0 and ce["after_exec"] != ce["before_exec"]  # where the dividend is negative
  i = Variable("i", 0, 10)
  p = rules.prove_instances([(i*4 - 1) % 4], "fold_mod")
  assert p.status == "counterexample" and p.counterexample["values"] == {"i": 0}
  assert (p.counterexample["before_exec"], p.counterexample["after_exec"]) == (-1, 3)
  text = rules.format_counterexample(p)
  assert "symbolic/fold_mod" in text and "i=0 (in [0, 10])" in text and "= -1" in text and "after:  3 = 3" in text, text

def test_fold_div_off_by_one_is_refuted(monkeypatch, clean):
  # x // d -> 0 for x in [0, d]: x = d gives 1
  _plant(monkeypatch, fold_div=_edited(SYM.fold_div, "if x.vmax < d:", "if x.vmax <= d:"))
  ce = _refuted(_prove("fold_div"), clean, "int32")
  assert ce["after"] == "0" and ce["before_exec"] == 1
  i = Variable("i", 0, 4)
  p = rules.prove_instances([i // 4], "fold_div")
  assert p.counterexample["values"] == {"i": 4} and (p.counterexample["before_exec"], p.counterexample["after_exec"]) == (1, 0)

# *** more plants of the class ***

def test_fold_mod_without_remainder_check_is_refuted_through_wraparound(monkeypatch, clean):
  # the remainder sum's range check only matters where the remainder wraps around: a wide sum d*i - k*j
  _plant(monkeypatch, fold_mod=_edited(SYM.fold_mod, "  if rem.vmin < 0: return None\n", ""))
  p = _prove("fold_mod")
  ce = _refuted(p, clean)
  assert ce["dtype"] in ("int32", "int64") and max(hi for _, hi in ce["ranges"].values()) > 2**30, rules.format_counterexample(p)

def test_lt_move_const_without_wraparound_guard_is_refuted(monkeypatch, clean):
  _plant(monkeypatch, lt_move_const=_edited(SYM.lt_move_const, "return None\n  return UOp", "pass\n  return UOp"))
  ce = _refuted(_prove("lt_move_const"), clean)
  assert ce["values"]["i"] in (2**31 - 1, -2**31), ce  # refuted only at an int32 bound: x + c1 wraps there
  assert ce["before_exec"] is True and ce["after_exec"] is False

def test_max_by_range_off_by_one_is_refuted_and_a_stricter_test_is_proven(monkeypatch, clean):
  _plant(monkeypatch, max_by_range=lambda a, b: a if a.vmin >= b.vmax - 1 else (b if b.vmin >= a.vmax - 1 else None))
  ce = _refuted(_prove("max_by_range"), clean, "int32")
  assert ce["before"].startswith("max(")
  # `>` for `>=` only fires less: still correct, and the prover does not cry wolf
  _plant(monkeypatch, max_by_range=lambda a, b: a if a.vmin > b.vmax else (b if b.vmin > a.vmax else None))
  p = _prove("max_by_range")
  assert p.status == "proven" and p.instances > 100

def test_fold_div_gcd_branch_with_a_negative_constant(monkeypatch, clean):
  # taking the gcd branch for a negative constant is sound (the gcd divides it: the quotient is exact) ...
  _plant(monkeypatch, fold_div=_edited(SYM.fold_div, " and const >= 0:", ":"))
  p = _prove("fold_div")
  assert p.refuted == clean[("symbolic", "fold_div")].refuted and p.instances > clean[("symbolic", "fold_div")].instances
  # ... but leaving the constant out of the gcd and dividing it by truncation is not
  gcd = "g = math.gcd(d, const, *(k for _, k in terms))\n  if g > 1 and all(k > 0 for _, k in terms) and const >= 0:\n" \
        "    return UOp(Ops.IDIV, x.dtype, (build_sum(x.dtype, [(t, k//g) for t, k in terms], const//g)"
  trunc = "g = math.gcd(d, *(k for _, k in terms))\n  if g > 1 and all(k > 0 for _, k in terms):\n" \
          "    return UOp(Ops.IDIV, x.dtype, (build_sum(x.dtype, [(t, k//g) for t, k in terms], int(const/g))"
  _plant(monkeypatch, fold_div=_edited(SYM.fold_div, gcd, trunc))
  _refuted(_prove("fold_div"), clean, "int32")

def test_a_patched_module_attribute_is_seen(monkeypatch, clean):
  # the matcher holds the original function object; a monkeypatched module attribute is what a test means to prove
  monkeypatch.setattr(SYM, "fold_mod", _edited(SYM.fold_mod, "if x.vmax < d: return x", "if x.vmax <= d: return x"))
  _refuted(_prove("fold_mod"), clean, "int32")

def test_a_rule_that_raises_or_builds_a_bad_constant_is_refuted(monkeypatch, clean):
  _plant(monkeypatch, fold_mod=_edited(SYM.fold_mod, "if d <= 0 or", "if d < 0 or"))  # a zero divisor reaches `k % d`
  p = _prove("fold_mod")
  assert p.status == "counterexample" and "ZeroDivisionError" in p.counterexample["error"] and "%0)" in p.counterexample["before"]
  _plant(monkeypatch, mul_mul_const=lambda x, c1, c2: UOp(Ops.MUL, x.dtype, (x, UOp(Ops.CONST, x.dtype, (), c1.arg*c2.arg))))  # not wrapped
  p = _prove("mul_mul_const")
  assert p.status == "counterexample" and "not a value of" in p.counterexample["error"], p

def test_closed_form_reduce_plant_is_refuted(monkeypatch):
  # an empty interval's count without max(0, ...): negative
  fn = _edited(FOLDS.fold_masked_const, "(hi - lo).maximum(0)", "(hi - lo)")
  pm = lowerer.reduce_folds
  monkeypatch.setattr(lowerer, "reduce_folds", PatternMatcher([(p, fn if n == "reduce_masked_const_to_count" else f, n) for p, f, n, _ in pm.rules],
                                                              name=pm.name))
  p = _prove("reduce_masked_const_to_count")
  assert p.status == "counterexample" and p.matcher == "reduce_folds", p
  assert p.counterexample["before_value"] != p.counterexample["after_value"] and "for r0 in [0, " in p.counterexample["before"]

# *** the encodings themselves ***

def test_encodings_agree_with_exec_alu():
  # z3's value of a node at concrete Variable values equals tinysched's own constant folding there, in both forms
  rng = random.Random(5)
  for u in rng.sample(rules.corpus(), 400):
    vs = [v for v in u.toposort() if v.op is Ops.DEFINE_VAR]
    vals = {v: rng.choice((v.arg[1], v.arg[2], rng.randint(v.arg[1], v.arg[2]))) for v in vs}
    want = sym_infer(u, vals)
    pinned = u.substitute({v: UOp.const(v.dtype, x) for v, x in vals.items()})
    for enc in ("int", "bv"):
      v = smt.prove_equal(pinned, UOp.const(u.dtype, want), 5000, encoding=enc)
      assert v.status == "proven" or (enc == "int" and v.status == "unknown" and "no integer-arithmetic form" in v.reason), (u, vals, want, enc, v)

def test_int_encoding_states_what_bit_vectors_time_out_on():
  i, j = Variable("i", 0, 100000), Variable("j", 0, 70000)
  before, after = (i*26 + j*13 + j % 13) // 13, i*2 + j + (j % 13) // 13
  assert smt.prove_equal(before, after, 5000, encoding="int").status == "proven"
  v = smt.prove_equal(before, after + 1, 5000, encoding="int")
  assert v.status == "counterexample" and v.lhs + 1 == v.rhs

def test_float_identities_listed_for_their_ieee_corners():
  # why they are LISTED, concretely: x * 1.0 is x bit for bit (NaN, -0.0, infinities), x + 0.0 is not (-0.0)
  bits = lambda x: struct.pack("<d", x)  # noqa: E731
  for x in (-0.0, 0.0, math.inf, -math.inf, math.nan, 5e-324, 1.7976931348623157e308):
    assert bits(x * 1.0) == bits(x)
  assert bits(-0.0 + 0.0) != bits(-0.0)
  assert set(rules.LISTED) == {("symbolic", "add_zero_float"), ("symbolic", "mul_one_float")}

def test_format_of_a_proven_rule(clean):
  assert rules.format_counterexample(clean[("symbolic", "add_zero")]) == "symbolic/add_zero: proven"

def test_contradictory_ranges_are_never_proven():
  # an int32 thread id whose launch size is past 2**31: a bound that wrapped would make the facts contradictory, and then
  # every claim (here a false one) would be "proven"
  sp = UOp(Ops.SPECIAL, dtypes.int32, (), ("gidx0", 2**31 + 8, "global"))
  v = smt.prove_equal(sp, UOp.const(dtypes.int32, 0))
  assert v.status == "counterexample", v
  enc = smt.Encoding()
  x = enc.add(Variable("x", 0, 3))
  enc.facts.append(x > 5)  # facts no value meets
  assert smt.prove(x == 7, enc).status == "unknown"
