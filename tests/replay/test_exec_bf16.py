"""The execution check on bfloat16 kernels: inputs are bfloat16 values in the float domain, the reference computes in
float32 and rounds where the spec (runtime/interpreter.py) rounds, and compare() judges in bfloat16 ULPs. Planted bugs
shown caught: a renderer that truncates on bfloat16 stores (tests/replay/plants/sitecustomize.py `bf16_truncate`,
run on OpenCL), and inputs drawn as raw bit patterns again (the domain guard)."""
import numpy as np
import pytest
import replay
from replay.check.pool import check
from replay.check.execution import exec_report
from replay.execute.inputs import compare, seeded_fill, judged_as
from tinysched import Tensor, dtypes
from tinysched.dtype import bf16_bits, bf16_float
from tests.replay.changes import capture_store, patch_ast, plant_no_fusion, double_consts

BF = dtypes.bfloat16

def workload():
  # each line one kind of bfloat16 kernel; also the OpenCL workload below (keep the two alike)
  Tensor.manual_seed(0)
  x = Tensor.rand(32, 16).cast(BF).realize()           # float -> bfloat16
  w = Tensor.rand(16, 8).cast(BF).realize()
  (x * 3 + 1).realize()                                # elementwise, rounded at the store
  (x * 1.3).realize()                                  # a constant rounded to bfloat16
  x.exp().realize()
  x.sum(1).realize()                                   # a sum
  (x @ w).realize()                                    # a matmul
  Tensor.rand(20000).cast(BF).sum().realize()          # a long sum
  x.float().exp().realize()                            # bfloat16 -> float
  (x.float() * 1.3).cast(BF).realize()                 # float -> bfloat16 of computed values
  (Tensor.arange(300) * 7).cast(BF).realize()          # int -> bfloat16 (inexact above 256)
  (x * 4).cast(dtypes.int32).realize()                 # bfloat16 -> int (a float decision)
  e = (x - x.max(1, keepdim=True)).exp()
  (e / e.sum(1, keepdim=True)).realize()               # softmax: reduces realized between kernels
  x.bitcast(dtypes.uint16).realize()

@pytest.fixture(scope="module")
def db(tmp_path_factory):
  return capture_store(tmp_path_factory.mktemp("bf16") / "bf16.db", workload, "bf16")

# *** inputs ***

def assert_bf16_domain(fill) -> None:
  """The guard on bfloat16 inputs: bit patterns of bfloat16 values in the float domain [0.5, 2), seeded, spread."""
  x = fill(4096, BF, 11)
  assert x.dtype == np.uint16 and x.shape == (4096,)
  v = bf16_float(x)
  assert np.isfinite(v).all() and v.min() >= 0.5 and v.max() < 2.0, "bfloat16 inputs outside the float domain"
  assert (bf16_bits(v) == x).all()                              # each is its own nearest bfloat16
  assert len(np.unique(x)) > 200                               # most of the 256 values of [0.5, 2)
  assert (fill(4096, BF, 11) == x).all() and not (fill(4096, BF, 12) == x).all()

def test_bf16_inputs_are_bfloat16_values_in_the_float_domain():
  assert_bf16_domain(seeded_fill)

def raw_bits_fill(size, dtype, seed, domain=None):
  """Planted: bfloat16 inputs as uniform uint16 bit patterns (what seeded_fill did before it knew bfloat16)."""
  if dtype == BF: return np.random.default_rng(seed).integers(0, 1 << 16, size, dtype=np.uint16)
  return seeded_fill(size, dtype, seed, domain)

def test_raw_bit_inputs_fail_the_domain_guard():
  with pytest.raises(AssertionError, match="outside the float domain"): assert_bf16_domain(raw_bits_fill)
  # why it matters: from such inputs exp gives mostly inf, 0 or NaN, where every side agrees whatever it computes
  with np.errstate(all="ignore"): y = np.exp(bf16_float(raw_bits_fill(4096, BF, 11)))
  assert (~np.isfinite(y) | (y == 0) | (y == 1)).mean() > 0.5

# *** compare ***

def _bf(x) -> np.ndarray: return bf16_bits(np.asarray(x, np.float32))

def test_compare_judges_bfloat16_values_in_ulps():
  rng = np.random.default_rng(0)
  exact = (rng.random(256, dtype=np.float32) * 3 + 0.5).astype(np.float32)
  ref = _bf(exact)
  assert compare(ref, ref.copy(), "bfloat16")["equal"]
  one = ref.copy(); one[7] += 1                                  # one element one ULP off: a rounding tie, tolerated
  c = compare(ref, one, "bfloat16")
  assert c["equal"] and c["max_ulp"] == 1.0 and c["n_one_ulp"] == 1
  two = ref.copy(); two[7] += 2                                  # two ULPs: wrong
  c = compare(ref, two, "bfloat16")
  assert not c["equal"] and c["first_diff"] == [7] and c["max_ulp"] == 2.0
  trunc = (exact.view(np.uint32) >> 16).astype(np.uint16)        # truncation: about half the elements one ULP low
  c = compare(ref, trunc, "bfloat16")
  assert not c["equal"] and c["n_diff"] > 64 and c["max_ulp"] == 1.0
  # where rounding points may differ (graph level, regrouped kernels) one ULP is never a finding: that is why the
  # per-kernel check, whose rounding points are the kernel's own, is the one to catch a rounding bug
  assert compare(ref, trunc, "bfloat16", intermediate_rounding=True)["equal"]
  assert not compare(ref, _bf(exact * 1.1), "bfloat16", intermediate_rounding=True)["equal"]
  # one step down across a power of two is one ULP (measured on the smaller magnitude), not half of one
  c = compare(_bf([1.0] * 8), _bf([1.0 - 2 ** -8] * 8), "bfloat16")
  assert not c["equal"] and c["max_ulp"] == 1.0
  # NaN by position, inf by sign, as for the other floats
  nan = ref.copy(); nan[3] = 0x7FC0
  assert not compare(ref, nan, "bfloat16")["equal"] and compare(nan, nan.copy(), "bfloat16")["equal"]
  inf = _bf([np.inf, 1.0]); assert not compare(inf, _bf([-np.inf, 1.0]), "bfloat16")["equal"]
  # a float32 output of a kernel that computes in bfloat16 is judged in bfloat16 ULPs: float32 noise is equal
  assert compare(exact, exact * np.float32(1 + 2 ** -20), "bfloat16")["equal"]

def test_float_judging_ignores_the_bfloat16_options():
  a = np.array([1.0, 2.0, np.nan, 3.0], np.float32)
  b = np.array([1.0, 2.0005, np.nan, 3.1], np.float32)
  for dt in ("half", "float", "double"):
    npdt = {"half": np.float16, "float": np.float32, "double": np.float64}[dt]
    x, y = a.astype(npdt), b.astype(npdt)
    assert compare(x, y, dt, intermediate_rounding=True) == compare(x, y, dt)
  ast_f = (Tensor.rand(4) * 2).schedule()[-1].ast
  ast_b = (Tensor.rand(4).cast(BF).float() * 2).schedule()[-1].ast
  assert judged_as("float", [ast_f]) == "float" and judged_as("float", [ast_b]) == "bfloat16" and judged_as("int", [ast_b]) == "int"

# *** the reference ***

def test_graph_reference_rounds_at_the_spec_points(tmp_path):
  # evaluated on the scheduler's input graph, without the interpreter: the constant, the cast and the store round
  from replay.store.sqlite import Store
  from replay.store.encode import decode_schedule_input
  from replay.execute import reference as REF
  from tinysched.ops import Ops
  x = Tensor(np.linspace(0.5, 2, 64, dtype=np.float32)).cast(BF).realize()
  db = tmp_path / "r.db"
  with replay.capture(db, label="ref"):
    ((x * 1.3).float() * 1.01).cast(BF).realize()
  s = Store(str(db), readonly=True)
  try: blob = s.blob(next(r for r in s.captures() if r["level"] == "schedule")["input_key"])
  finally: s.close()
  graph, vv, _ = decode_schedule_input(blob)
  out = sorted({v.src[0].arg[0] for v in graph.src if v.op is Ops.VIEW})
  made = {v.src[0].arg[0] for v in graph.toposort() if v.op is Ops.VIEW and len(v.src) == 2 and v.src[0].op is Ops.BUFFER}
  (inp,) = [u.arg[0] for u in graph.toposort() if u.op is Ops.BUFFER and u.arg[0] not in made]  # x, the one buffer only read
  xb = seeded_fill(64, BF, 5)
  written, _ = REF.evaluate(graph, {inp: xb}, REF.graph_vars(graph, {}))  # (it allocates the intermediates)
  r = lambda v: bf16_float(bf16_bits(np.asarray(v, np.float32)))
  xv = bf16_float(xb)
  want = bf16_bits(r(xv * r(1.3)) * np.float32(1.01))  # CONST rounded, CAST from bfloat16 rounds the product, store rounds
  assert written[out[0]].dtype == np.uint16 and (written[out[0]] == want).all()
  assert not (bf16_bits(xv * np.float32(1.3) * np.float32(1.01)) == want).all()  # the rounding points matter here

# *** whole checks on the interpreter (NUMPY): the graph reference and the judging of old vs new ***

def test_identical_bf16_code_is_equivalent_on_numpy(db):
  rep = check([str(db)], jobs=1)
  exec_report(rep, mode="all", device="NUMPY", timing_runs=1)
  verdicts = {r.exec["verdict"] for r in rep.results if r.exec}
  assert verdicts - {"skipped"} == {"equivalent"}, [r.exec for r in rep.results if r.exec and r.exec["verdict"] not in ("equivalent", "skipped")][:2]
  assert rep.exit_code() == 0

def test_bf16_fusion_change_is_equivalent(db, monkeypatch):
  # every intermediate stored (rounded to bfloat16) where the old kernels kept it in float: a few ULPs, like half
  plant_no_fusion(monkeypatch)
  rep = check([str(db)], level="schedule", jobs=1)
  exec_report(rep, device="NUMPY", timing_runs=1)
  changed = [r for r in rep.results if r.outcome == "changed"]
  assert changed and all(r.exec["verdict"] == "equivalent" for r in changed), [r.exec for r in changed if r.exec["verdict"] != "equivalent"][:2]

def test_bf16_constant_change_is_a_mismatch(db, monkeypatch):
  patch_ast(monkeypatch, double_consts)
  rep = check([str(db)], level="kernel", jobs=1)
  exec_report(rep, device="NUMPY", timing_runs=1)
  assert any(r.exec and r.exec["verdict"] == "mismatch" for r in rep.results) and rep.exit_code() == 1

# *** on OpenCL, through the CLI (the plants reach the exec workers) ***

from tests.replay.test_exec_plants import _env, run_check, verdicts as exec_verdicts, gate  # noqa: E402
from tests.helpers import has_opencl as _opencl  # noqa: E402

OPENCL_WORKLOAD = "\n".join(["import sys, numpy as np, replay", "from tinysched import Tensor, dtypes",
                             "BF = dtypes.bfloat16", *__import__("inspect").getsource(workload).splitlines(),
                             "with replay.capture(sys.argv[1], label='bf16'): workload()"])

@pytest.fixture(scope="module")
def cl_db(tmp_path_factory):
  if not _opencl(): pytest.skip("needs an OpenCL platform (PoCL)")
  import subprocess, sys
  from tests.replay.test_exec_plants import ROOT
  d = tmp_path_factory.mktemp("bf16cl")
  (d / "w.py").write_text(OPENCL_WORKLOAD)
  subprocess.run([sys.executable, str(d / "w.py"), str(d / "bf16.db")], env=_env(None), check=True, cwd=ROOT)
  return d / "bf16.db"

def test_identical_bf16_code_is_equivalent_on_opencl(cl_db, tmp_path):
  rc, rep, out = run_check(cl_db, tmp_path, None)
  assert rc == 0 and set(exec_verdicts(rep)) == {"equivalent"}, out
  assert {r["level"] for r in rep["results"]} == {"kernel", "schedule", "program"}  # the stored sources ran too
  assert gate(rep, rc) == (True, True)

def test_truncating_bf16_store_is_caught(cl_db, tmp_path):
  rc, rep, out = run_check(cl_db, tmp_path, "bf16_truncate")
  assert rc == 1, out
  res = [r for r in rep["results"] if r["exec"]]
  # kernel and schedule captures: the ASTs did not change, both sides render with the bug, and the per-kernel reference
  # (the interpreter, which rounds) says wrong
  wrong = [r for r in res if r["exec"]["verdict"] == "wrong"]
  assert wrong and all(r["outcome"] == "identical" and r["level"] in ("kernel", "schedule") for r in wrong), out
  assert any(r["exec"]["max_ulp"] == 1.0 for r in wrong)      # never more than one ULP off, yet caught
  # program captures: the stored source rounds, today's truncates
  mism = [r for r in res if r["level"] == "program" and r["exec"]["verdict"] == "mismatch"]
  assert mism and all(r["exec"]["wrong_sides"] == ["new"] for r in mism), out
  # stores of values that are already bfloat16 (a rounded cast, a load) truncate to the same bits: rightly equivalent
  assert exec_verdicts(rep).get("equivalent", 0) > 0
  assert gate(rep, rc) == (False, False)

def test_bf16_padded_unsafe_op_is_caught_by_the_graph_reference(tmp_path, monkeypatch):
  # the graph check's looser bfloat16 judge (it cannot place intermediate roundings) still sees a realize bug: exp of
  # the padding is 1, not 0
  db = capture_store(tmp_path / "pad.db", lambda: (Tensor.rand(8, 16).cast(BF).exp().pad(((1, 1), (0, 0))) + 1).realize(), "pad")
  clean = check([str(db)], level="schedule", jobs=1)
  exec_report(clean, mode="all", device="NUMPY", timing_runs=1)
  assert [r.exec["verdict"] for r in clean.results] == ["equivalent"]  # the unplanted scheduler passes
  from tinysched.scheduling import stores as ST
  monkeypatch.setattr(ST, "zero_preserving", lambda u: True)
  rep = check([str(db)], level="schedule", jobs=1)
  exec_report(rep, device="NUMPY", timing_runs=1)
  bad = [r for r in rep.results if r.exec and r.exec["verdict"] in ("wrong", "mismatch")]
  assert bad and all(r.exec["wrong_sides"] == ["new"] for r in bad), [r.exec for r in rep.results]
