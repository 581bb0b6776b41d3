"""Execution check: old and new kernels run on the same seeded inputs; equivalent vs mismatch, with statistics."""
import json
import pytest
import numpy as np
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings, strategies as st
import replay
from replay.check.pool import check
from replay.cli.app import main as cli
from replay.check.execution import exec_report
from replay.execute.inputs import compare, seeded_fill
from tinysched import UOp, Ops, dtypes
from tinysched.rewrite import graph_rewrite, PatternMatcher, UPat
from tinysched.shape import View, ShapeTracker
from tests.replay.changes import patch_ast, plant_no_fusion, swap_commutative, double_consts
from tests.tinysched.test_interpreter import any_chain

DEVICE = "NUMPY"  # the logic under test; tests/tinysched/test_opencl.py runs kernels on OpenCL

def shift_loads(ast: UOp) -> UOp:
  """A planted index bug: every load of input buffer 1 reads one element further."""
  made: set = set()  # rewrite each load once (graph_rewrite would otherwise shift the shifted load again)
  def shift(x: UOp):
    if x in made or x.src[0].arg != 1 or len(x.src[1].arg.views) != 1: return None
    v = x.src[1].arg.views[0]
    ret = x.replace(src=(x.src[0], UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View(v.shape, v.strides, v.offset + 1, v.mask),)))))
    made.add(ret)
    return ret
  return graph_rewrite(ast, PatternMatcher([(UPat(Ops.LOAD, src=(UPat(Ops.DEFINE_GLOBAL), UPat(Ops.VIEW)), name="x"), shift)]))

def test_compare_semantics():
  a = np.array([1.0, np.nan, np.inf, 2.0], np.float32)
  assert compare(a, a.copy(), "float")["equal"]
  assert not compare(a, np.array([1.0, 1.0, np.inf, 2.0], np.float32), "float")["equal"]      # NaN moved
  assert not compare(a, np.array([1.0, np.nan, -np.inf, 2.0], np.float32), "float")["equal"]  # inf sign
  c = compare(a, np.array([1.0, np.nan, np.inf, 2.0001], np.float32), "float")
  assert c["equal"] and c["max_abs_err"] > 0                                                   # inside float32 tolerance
  c = compare(np.array([1, 2, 3]), np.array([1, 2, 4]), "int")
  assert not c["equal"] and c["n_diff"] == 1 and c["first_diff"] == [2]                       # ints are exact
  assert seeded_fill(16, dtypes.float32, 3).min() >= 0.5 and (seeded_fill(16, dtypes.float32, 3) == seeded_fill(16, dtypes.float32, 3)).all()

def test_identical_everything_equivalent(db):
  rep = check([str(db)], jobs=1)
  exec_report(rep, mode="all", device=DEVICE, timing_runs=1)
  verdicts = {r.exec["verdict"] for r in rep.results if r.exec}
  # (program-level captures, made when the suite runs on OpenCL, hold OpenCL source: NUMPY skips them and says so)
  assert verdicts - {"skipped"} == {"equivalent"} and rep.exit_code() == 0
  assert all(r.level == "program" and "OpenCL source" in r.exec["reason"] for r in rep.results if r.exec and r.exec["verdict"] == "skipped")

def test_equivalent_rewrite_is_changed_and_equivalent(db, monkeypatch):
  patch_ast(monkeypatch, lambda ast: graph_rewrite(ast, swap_commutative))
  rep = check([str(db)], level="kernel", jobs=1)
  exec_report(rep, device=DEVICE, timing_runs=1)
  changed = [r for r in rep.results if r.outcome == "changed"]
  assert changed and all(r.exec["verdict"] == "equivalent" for r in changed)

def test_constant_change_is_a_mismatch_with_statistics(db, monkeypatch):
  patch_ast(monkeypatch, double_consts)
  rep = check([str(db)], level="kernel", jobs=1)
  exec_report(rep, device=DEVICE, timing_runs=1)
  bad = [r for r in rep.results if r.exec and r.exec["verdict"] == "mismatch"]
  assert bad
  e = bad[0].exec
  assert e["max_abs_err"] > 0 and e["n_diff"] > 0 and e["first_diff"]
  assert e["where"] == "old vs new"  # (on NUMPY each side is its own per-kernel reference: tests/replay/test_exec_plants.py has the OpenCL cases)
  assert rep.exit_code() == 1

def test_index_offset_change_is_a_mismatch(db, monkeypatch):
  patch_ast(monkeypatch, shift_loads)
  rep = check([str(db)], level="kernel", jobs=1)
  exec_report(rep, device=DEVICE, timing_runs=1)
  assert any(r.exec and r.exec["verdict"] == "mismatch" for r in rep.results)

def test_fusion_change_at_schedule_level_is_equivalent(db, monkeypatch):
  plant_no_fusion(monkeypatch)
  rep = check([str(db)], level="schedule", jobs=1)
  exec_report(rep, device=DEVICE, timing_runs=1)
  changed = [r for r in rep.results if r.outcome == "changed"]
  assert changed and all(r.exec["verdict"] == "equivalent" for r in changed)
  assert all(r.exec["new_kernels"] > r.exec["old_kernels"] for r in changed)
  # which old kernel became which new ones: every old kernel's outputs are written by some new kernel
  for r in changed:
    km = r.exec["kernel_map"]
    assert len(km) == r.exec["old_kernels"] and all(m["new"] for m in km)
  # the input graph was evaluated, and the compared buffers include the schedule's outputs
  assert all("input graph" in r.exec["reference"] and r.exec["compared_buffers"] for r in changed)

def test_perf_gate_fails_only_beyond_noise():
  from replay.check.results import Report
  from replay.check.results import Result
  def res(old, new, noise):
    r = Result("x.db", 1, 1, "kernel", "m", "k" * 64, "s" * 64)
    r.exec = {"verdict": "equivalent", "old_time_s": old, "new_time_s": new, "noise": noise}
    return r
  rep = Report(results=[res(1e-3, 1.3e-3, 0.01)])
  assert rep.exit_code() == 0                               # off by default: timing never decides
  rep.perf_gate = 20.0
  assert rep.exit_code() == 1 and rep.perf_failures()        # 30% slower > 20% + noise
  rep.results = [res(1e-3, 1.3e-3, 0.2)]
  assert rep.exit_code() == 0                               # within 2x the measured noise (40%)

def test_inputs_respect_domains():
  from replay.execute.inputs import domains
  from tinysched import Tensor, dtypes
  a, b, c = (Tensor([[7, -9, 4]], dtype=dtypes.int32) for _ in range(3))
  ast = (a // b + (a << c)).schedule()[-1].ast
  assert domains([ast]) == {2: "divisor", 3: "shift"}  # DEFINE_GLOBAL 1 (a) stays unrestricted
  x = seeded_fill(1000, dtypes.int32, 5, "divisor")
  assert x.min() >= 1 and seeded_fill(1000, dtypes.int32, 5, "shift").min() >= 0 and seeded_fill(1000, dtypes.int32, 5).min() < 0

def test_compare_counts_ulp_and_one_sided_nan():
  a = np.array([1.0, 2.0, np.nan], np.float32)
  c = compare(a, np.array([np.nextafter(np.float32(1), np.float32(2)), 2.0, 1.0], np.float32), "float")
  assert not c["equal"] and c["n_nonfinite"] == 1 and c["first_diff"] == [2] and c["max_ulp"] >= 1

def test_cli_exec_and_report(db, tmp_path, monkeypatch):
  patch_ast(monkeypatch, double_consts)
  r = CliRunner().invoke(cli, ["check", str(db), "--level", "kernel", "-j", "1", "--exec", "--device", DEVICE, "--report-md", str(tmp_path / "r.md")])
  assert r.exit_code == 1 and "mismatch" in r.output
  assert "mismatch" in (tmp_path / "r.md").read_text()

def test_stored_source_for_a_bigger_work_group_is_skipped_not_failed():
  from replay.execute.launch import _unlaunchable
  from tinysched.codegen.target import Target
  small = Target(name="small-gpu", max_work_group_size=256, max_work_item_sizes=(256, 256, 64), has_fp16=False)
  item = ("src", "k", "__kernel void k() {}", {"local": [1024], "global": [4096], "vars": [], "dtypes": []})
  assert "work-group of [1024]" in _unlaunchable(small, "GPU", [item])  # a CPU capture replayed next to a GPU
  fp16, fp64 = "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n", "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
  assert _unlaunchable(small, "GPU", [("src", "k", fp16 + "half x;", {"local": [64]})]).endswith("lacks")
  assert "double" in _unlaunchable(small, "GPU", [("src", "k", fp64 + "double x;", {"local": [64]})])
  # a name that merely contains "half" is not half precision
  assert _unlaunchable(small, "GPU", [("src", "k", "float half_width;", {"local": [64]})]) is None
  assert _unlaunchable(small, "GPU", [("src", "k", "float x;", {"local": [64]})]) is None

def test_program_inputs_do_not_depend_on_the_host():
  # a capture made with a different CPU name, vendor, driver or core count has the same program-level input
  from dataclasses import replace
  from replay.levels.program import target_to_json
  from tinysched.codegen.target import GENERIC_CPU
  here = replace(GENERIC_CPU, name="pthread-skylake-avx512-Intel(R) Xeon(R)", vendor="GenuineIntel", driver_version="3.1", compute_units=2)
  there = replace(GENERIC_CPU, name="pthread-haswell-AMD EPYC", vendor="AuthenticAMD", driver_version="6.0", compute_units=64)
  assert target_to_json(here) == target_to_json(there)
  assert target_to_json(here) != target_to_json(replace(here, max_work_group_size=256))  # a real codegen difference still counts

def test_a_variable_used_as_a_value_is_evaluated_by_the_graph_reference(tmp_path):
  # Tensor(bound Variable) broadcast into a reduce: the schedule-level reference reads the Variable's value (it raised
  # KeyError before, so every such capture was 'failed')
  from tinysched import Tensor, Variable
  db = tmp_path / "v.db"
  with replay.capture(db, label="var"):
    v = Variable("token", 0, 3).bind(2)
    Tensor(v).reshape(1, 1).expand(4, 3).sum(0).realize()
  rep = check([str(db)], jobs=1, level="schedule")
  exec_report(rep, mode="all", device=DEVICE, timing_runs=1)
  assert [r.exec["verdict"] for r in rep.results] == ["equivalent"], [r.exec for r in rep.results]


def test_undecidable_elements_follow_only_the_branch_taken():
  # WHERE(certain condition, tie-dependent value, plain value): where the plain branch is taken the element is decided;
  # marking it undecidable would leave a device error there unjudged
  from replay.execute.reference import uncertain_outputs
  from tinysched import Tensor
  x = np.random.default_rng(0).random(16).astype(np.float32)
  a, b = Tensor(x).realize(), Tensor(x.copy()).realize()
  data = {id(a.lazydata.base.buffer): x, id(b.lazydata.base.buffer): x.copy()}
  def doubt(t):
    si = [s for s in t.schedule() if s.ast.op is Ops.SINK][-1]
    bufs = [data.get(id(buf), np.zeros(buf.size, np.float32)) for buf in si.bufs]
    return uncertain_outputs(si.ast, bufs, {})[0]
  assert not doubt((a > 100).where((a == b).float(), a)).any()  # the tie a == b is never used
  assert doubt((a < 100).where((a == b).float(), a)).all()      # the tie decides every element

# *** buffer sizes of a program-level AST: how far its views reach ***

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_chain)
def test_reach_is_one_past_the_largest_valid_position(c):
  """reach() sizes program-level buffers: too small and a kernel reads past its buffer, so it must be exact (a
  single view in closed form, a stack by evaluation), checked against numpy's movement ops on an arange."""
  from replay.execute.reference import reach
  t, want = c
  event(f"views={len(t.views)}")
  valid = want[want != -1]
  assert reach(t, {}) == (int(valid.max()) + 1 if valid.size else 0)

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_chain)
def test_a_stack_past_the_exact_limit_is_bounded_from_above(c):
  """Past EXACT_REACH_ELEMENTS a stack is bounded by its innermost view (never evaluated: a 16e9-element view would take
  119 GiB): the bound is never below the exact reach, so a buffer sized by it is never too small."""
  from replay.execute import reference as RF
  t, want = c
  valid = want[want != -1]
  exact = int(valid.max()) + 1 if valid.size else 0
  if len(t.views) > 1:
    assert RF._view_reach(RF.I.resolve_views(t, {})[0]) >= exact

def test_a_huge_stack_is_sized_without_enumerating_it(monkeypatch):
  from tinysched.shape import ShapeTracker
  from replay.execute import reference as RF
  st = ShapeTracker.from_shape((40000, 400000)).permute((1, 0)).pad(((0, 1), (0, 0))).reshape((400001 * 40000,))  # 16e9 elements
  assert len(st.views) == 2
  def refuse(*a): raise AssertionError("enumerated 16e9 positions")
  monkeypatch.setattr(RF, "_positions", refuse)
  assert RF.reach(st, {}) == 40000 * 400000  # (here the bound is exact: the pad's row is invalid)
  monkeypatch.setattr(RF, "EXACT_REACH_ELEMENTS", 1 << 62)  # planted: no limit, every position evaluated
  with pytest.raises(AssertionError, match="enumerated"): RF.reach(st, {})

# *** jobs built by `replay check` while it replays (from the outputs it computed) ***

def _opencl() -> bool:
  from replay.execute.pool import check_device
  try: return check_device("OPENCL") == "OPENCL"
  except ValueError: return False

def _jobs(rep, device: str) -> dict:
  from replay.execute import pool as P
  got: list = []
  real = P.run_jobs
  P.run_jobs = lambda jobs, *a, **k: (got.extend(jobs), {})[1]
  try: exec_report(rep, mode="all", device=device, timing_runs=1)
  finally: P.run_jobs = real
  return {(j["level"], j["seed"], json.dumps(j["old"])): j for j in got}

def test_jobs_built_during_replay_equal_jobs_built_after(db):
  """The jobs `check(exec_mode=...)` builds from the outputs it has just computed are exactly those exec_report builds
  by running the current code again; every level the store has is covered (program level where a device runs OpenCL
  source)."""
  device = "OPENCL" if _opencl() else DEVICE
  rep = check([str(db)], jobs=1)
  levels = {r.level for r in rep.results} - (set() if device == "OPENCL" else {"program"})
  before, after = _jobs(rep, device), _jobs(check([str(db)], jobs=2, exec_mode="all"), device)
  assert before == after and {k[0] for k in before} == levels >= {"kernel", "schedule"}

def test_planted_change_is_caught_through_jobs_built_during_replay(db, monkeypatch):
  """The same planted constant change as above, with the jobs built inside the replay's forked workers: their new side
  is the patched code's output (a job built from the stored output would pass)."""
  patch_ast(monkeypatch, double_consts)
  rep = check([str(db)], level="kernel", jobs=2, exec_mode="changed")
  assert any(getattr(r, "exec_job", None) for r in rep.results)
  exec_report(rep, device=DEVICE, timing_runs=1)
  assert any(r.exec and r.exec["verdict"] == "mismatch" for r in rep.results) and rep.exit_code() == 1

def test_program_jobs_built_during_replay_equal_jobs_built_after():
  """As above for program level, on a committed store (the unit store has no program rows on NUMPY)."""
  import pytest
  from pathlib import Path
  if not _opencl(): pytest.skip("program-level jobs are built only for a device that runs OpenCL source")
  path = str(Path(__file__).resolve().parents[2] / "captures" / "mlp_digits.db")
  before = _jobs(check([path], level="program", jobs=1), "OPENCL")
  after = _jobs(check([path], level="program", jobs=2, exec_mode="all"), "OPENCL")
  assert before == after and len(before) >= 10 and {k[0] for k in before} == {"program"}

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_chain)
def test_reference_view_reads_what_numpy_movement_ops_give(c):
  """The reference reads a view as a strided window (one view) or by positions (a stack): both must give numpy's
  movement ops on an arange, zero where masked, as a fresh array (a later in-place store must not change it)."""
  from replay.execute.reference import _view
  t, want = c
  event(f"views={len(t.views)}")
  flat = np.arange(int(want.max(initial=0)) + 1, dtype=np.int64)  # exactly as large as the furthest valid position
  got = _view(t, flat, {})
  np.testing.assert_array_equal(got, np.where(want == -1, 0, want))
  assert got.size == 0 or not np.shares_memory(got, flat)

def test_a_dead_or_hung_worker_costs_only_its_own_job(tmp_path, monkeypatch):
  """The parent's side of the worker protocol, against a stand-in worker: a job that kills its worker is `failed`, one
  that hangs is `timeout` (after a retry alone), and every other job still gets its own answer from a fresh worker."""
  import sys
  from replay.execute import pool as P
  fake = tmp_path / "worker"
  fake.write_text(f"#!{sys.executable}\n" + "\n".join([
    "import json, os, sys, time",
    "for line in sys.stdin:",
    "  j = json.loads(line)",
    "  if j.get('plant') == 'die': os._exit(3)",
    "  if j.get('plant') == 'hang': time.sleep(60)",
    "  print(json.dumps({'id': j['id'], 'verdict': 'equivalent'}), flush=True)"]) + "\n")
  fake.chmod(0o755)
  monkeypatch.setattr(P.sys, "executable", str(fake))
  jobs = [{"id": 0}, {"id": 1, "plant": "die"}, {"id": 2}, {"id": 3, "plant": "hang"}, {"id": 4}, {"id": 5}]
  for workers in (1, 2):
    out = P.run_jobs(jobs, device="STANDIN", timeout_s=1.0, workers=workers)
    assert sorted(out) == [0, 1, 2, 3, 4, 5]
    assert {i: out[i]["verdict"] for i in out} == {0: "equivalent", 1: "failed", 2: "equivalent", 3: "timeout", 4: "equivalent", 5: "equivalent"}
    assert "exited with 3" in out[1]["error"] and out[3]["retried"]

def test_a_float_sum_stored_as_double_is_judged_by_float_tolerance(tmp_path):
  """Found by capturing the test suite: sum(1) in float32, cast to double. The device sums in float32, the reference in
  float64 rounded once; both are right to float32 precision, and double's tolerance called the kernel wrong. The
  output is judged by the narrowest float the kernel computes in."""
  import pytest
  if not _opencl(): pytest.skip("the kernel's float32 rounding on a device is the case (no OpenCL device here)")
  from tinysched import Tensor
  from tinysched.device import Device
  db = tmp_path / "c.db"
  prev, Device.DEFAULT = Device.DEFAULT, "OPENCL"
  try:
    with replay.capture(db, label="unit"):
      Tensor.manual_seed(0)
      for n in (8, 1000, 4096):
        (Tensor.rand(64, n).sum(1).cast(dtypes.float64) * 2).realize()
  finally: Device.DEFAULT = prev
  rep = check([str(db)], jobs=1)
  exec_report(rep, mode="all", device="OPENCL", timing_runs=1)
  verdicts = {r.exec["verdict"] for r in rep.results if r.exec}
  assert verdicts == {"equivalent"}, [r.exec for r in rep.results if r.exec and r.exec["verdict"] != "equivalent"][:2]

_vals = st.sampled_from([0.0, -0.0, 1.0, 1.0000001, -2.5, 1e-30, 3e38, float("inf"), float("-inf"), float("nan"), 1e-3, 7.0])

@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_vals, _vals, st.booleans()), min_size=0, max_size=40), st.sampled_from(["half", "float", "double"]))
def test_compare_judges_only_differing_elements_with_the_same_result(pairs, dt):
  """compare() looks only at the elements that differ: every statistic must be what judging all of them gives."""
  from replay.execute.inputs import _compare_floats, TOLERANCES
  npd = {"half": np.float16, "float": np.float32, "double": np.float64}[dt]
  with np.errstate(all="ignore"):
    ref = np.array([a for a, _, _ in pairs], npd)
    got = np.array([a if same else b for a, b, same in pairs], npd)
  fast, full = compare(ref, got, dt), _compare_floats(ref, got, ref.dtype, *TOLERANCES[dt])
  assert fast == full

def test_worker_count_by_device_kind_and_timing(monkeypatch):
  """CPU devices: two workers (their kernels share the cores); a GPU: one while timings matter, and for a correctness
  sweep one per four cores up to four."""
  import types
  from replay.execute import pool as P
  class Registry:
    def __getitem__(self, name):
      return types.SimpleNamespace(target=types.SimpleNamespace(is_gpu=name == "GPU"))
  monkeypatch.setattr(P, "Device", Registry())
  monkeypatch.setattr(P.os, "cpu_count", lambda: 16)
  assert (P._workers_for("GPU", 5), P._workers_for("GPU", 1), P._workers_for("CPU", 1), P._workers_for("NUMPY", 1)) == (1, 4, 2, 2)
  monkeypatch.setattr(P.os, "cpu_count", lambda: 2)
  assert P._workers_for("GPU", 1) == 1

def test_only_an_unusable_device_is_reported_as_a_device_problem(db, monkeypatch):
  """exit 2 with the device hint for a device that cannot run the calibration kernel; any other RuntimeError from the
  check (a ShapeError is one) is a bug and must not be dressed up as a device problem."""
  from replay.check import execution as X
  from replay.execute import pool as P
  from tinysched.errors import ShapeError
  def unusable(device): raise P.DeviceUnusable("the execution check cannot run on NUMPY: planted")
  monkeypatch.setattr(P, "calibrate", unusable)
  r = CliRunner().invoke(cli, ["check", str(db), "--level", "kernel", "--exec-all", "--device", "NUMPY", "-j", "1"])
  assert r.exit_code == 2 and "planted" in r.output and "check the device" in r.output, r.output
  def bug(*a, **k): raise ShapeError("planted shape bug")
  monkeypatch.setattr(X, "exec_report", bug)
  r = CliRunner().invoke(cli, ["check", str(db), "--level", "kernel", "--exec-all", "--device", "NUMPY", "-j", "1"])
  assert isinstance(r.exception, ShapeError) and "check the device" not in r.output

def test_a_job_over_the_memory_budget_is_skipped_and_says_why(db, monkeypatch):
  # a capture of buffers past what this machine can hold (a test past 2**31 elements) would be killed for memory and
  # say nothing: it is skipped with its size and the budget instead, and runs again under a budget that fits
  monkeypatch.setenv("REPLAY_EXEC_MEM_MB", "0")
  rep = check([str(db)], jobs=1)
  exec_report(rep, mode="all", device=DEVICE, timing_runs=1)
  judged = [r for r in rep.results if r.exec and r.level != "program"]
  assert judged and all(r.exec["verdict"] == "skipped" and "REPLAY_EXEC_MEM_MB" in r.exec["reason"] for r in judged)
  assert rep.exit_code() == 0
  monkeypatch.setenv("REPLAY_EXEC_MEM_MB", "4096")
  rep = check([str(db)], jobs=1)
  exec_report(rep, mode="all", device=DEVICE, timing_runs=1)
  assert {r.exec["verdict"] for r in rep.results if r.exec and r.level != "program"} == {"equivalent"}

def test_no_job_starts_once_the_calibration_finds_the_device_unusable(monkeypatch):
  # the calibration runs beside the first jobs; once it fails, the remaining jobs are not started (they would each run
  # and fail on the same device before the one error that matters is raised)
  import threading
  from replay.execute import pool as P
  failed = threading.Event()
  def unusable(device):
    failed.set()
    raise P.DeviceUnusable("planted")
  started: list[int] = []
  def run_serial(take, device, timing_runs, limit, thr, tick):
    failed.wait(5)
    for t in threading.enumerate():  # until the failure is recorded (it is raised after the event is set)
      if t.name == "replay-calibration": t.join(5)
    out = {}
    while (j := take()) is not None:
      started.append(j["id"])
      out[j["id"]] = {"verdict": "equivalent"}
    return out
  monkeypatch.setattr(P, "calibrate", unusable)
  monkeypatch.setattr(P, "_run_serial", run_serial)
  jobs = [{"id": i, "level": "kernel", "old": [], "new": [], "specs": {}} for i in range(6)]
  monkeypatch.setattr(P, "job_size", lambda j: 1)
  with pytest.raises(P.DeviceUnusable): P.run_jobs(jobs, device="NUMPY", workers=1)
  assert started == []

def _stored(tmp_path, work, level: str):
  from replay.store.sqlite import Store
  db = tmp_path / f"{level}.db"
  with replay.capture(db, label="cow"): work()
  s = Store(str(db), readonly=True)
  try: return [s.blob(r["input_key"]) for r in s.captures() if r["level"] == level]
  finally: s.close()

def test_the_graph_reference_never_writes_the_callers_arrays(tmp_path):
  """evaluate() copies a buffer only before writing it in place (inputs can be a whole embedding table): the caller's
  arrays keep their contents, for a pre-sink's STOREs and for a big graph's assigns alike."""
  from tinysched import Tensor
  from replay.store.encode import decode_kernel_input, decode_schedule_input
  from replay.execute import reference as REF
  x = Tensor(np.arange(6, dtype=np.float32)).realize()
  def work():
    (x + 1).realize()
    x.assign(x * 2).realize()
  (pre, vv, _), = [decode_kernel_input(b) for b in _stored(tmp_path, work, "kernel")][:1]
  bufs = {u.arg[0]: np.full(int(u.arg[1][1]), 7, np.float32) for u in pre.toposort() if u.op is Ops.BUFFER}
  before = {i: a.copy() for i, a in bufs.items()}
  written, _ = REF.evaluate(pre, bufs, REF.graph_vars(pre, vv))
  assert written and all((bufs[i] == before[i]).all() for i in bufs) and not all((written[i] == before[i]).all() for i in written)
  for blob in _stored(tmp_path, work, "schedule"):
    graph, vv, _ = decode_schedule_input(blob)
    bufs = {u.arg[0]: np.arange(int(u.arg[1][1]), dtype=np.float32) for u in graph.toposort() if u.op is Ops.BUFFER}
    before = {i: a.copy() for i, a in bufs.items()}
    written, _ = REF.evaluate(graph, bufs, REF.graph_vars(graph, vv))
    assert written and all((bufs[i] == before[i]).all() for i in bufs)

def test_the_schedule_check_leaves_the_job_inputs_as_they_were(db):
  """_graph_check interprets each side on copies of only the buffers the side writes (the rest is read in place):
  the job's inputs must come out unchanged, or the next side would start from another side's outputs."""
  from replay.store.sqlite import Store
  from replay.check.execution import build_job
  from replay.execute import judge as J
  from replay.execute.launch import _Side
  s = Store(str(db), readonly=True)
  try: rows = [r for r in s.captures() if r["level"] == "schedule"]
  finally: s.close()
  checked = 0
  for row in rows:
    job = build_job(str(db), "schedule", row["input_key"], row["output_key"], row.get("extra"), row.get("var_vals"))
    if "skip" in job: continue
    names = dict(job["names"])
    sides = {k: _Side(DEVICE, job[k], names) for k in ("old", "new")}
    specs = {int(i): (size, J._dtype(dt)) for i, (size, dt) in job["specs"].items()}
    host = {i: seeded_fill(size, dt, job["seed"] + i) for i, (size, dt) in specs.items()}
    before = {i: a.copy() for i, a in host.items()}
    J._graph_check(job, sides, host, specs, names)
    assert all(np.array_equal(host[i], before[i], equal_nan=True) for i in host), row["label"]
    checked += 1
  assert checked
