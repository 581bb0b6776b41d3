"""The model level (replay/levels/model.py): the front end in the loop. Every check is shown failing on a planted
front-end change (tests/replay/plants_frontend/sitecustomize.py, loaded by every process of the `replay` CLI and its
workers, as a user's edit would be), and passing on clean code, twice; keys are the same in every process and on every
device; `replay diff` compares numbers across a front-end change; bad stored inputs are incompatible, not crashes."""
import json, os, subprocess, sys
from pathlib import Path
import numpy as np
import pytest
from replay import levels
from replay.baseline.gate import decide
from replay.execute import numbers as N
from replay.execute.calls import changed_functions, check_spec, function_name, run_call, spec_of, CallError
from replay.levels.model import encode_input
from replay.store.encode import IncompatibleCapture
from replay.store.sqlite import Store
from tinysched.models.calls import CALLS

ROOT = Path(__file__).resolve().parents[2]
PLANTS = Path(__file__).resolve().parent / "plants_frontend"
CALLS_NUMPY = ("mlp_backward_f16", "block_forward_bf16", "adam_step", "cnn_train_step_unfused")

def _opencl() -> bool:
  try:
    from tinysched.runtime.opencl import opencl_available
    return opencl_available()
  except Exception: return False

def _env(plant: str | None, device: str = "NUMPY", seed: str | None = None) -> dict:
  env = {k: v for k, v in os.environ.items() if k not in ("TINYSCHED_TEST_PLANT", "TINYSCHED_CAPTURE")}
  env["TINYSCHED_DEVICE"] = device
  env["PYTHONPATH"] = os.pathsep.join([str(PLANTS), str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
  if plant: env["TINYSCHED_TEST_PLANT"] = plant
  if seed is not None: env["PYTHONHASHSEED"] = seed
  return env

def capture(db: Path, names: tuple[str, ...], plant: str | None = None, device: str = "NUMPY", seed: str | None = None) -> Path:
  subprocess.run([sys.executable, "-m", "replay.record.calls", str(db), *names], env=_env(plant, device, seed), cwd=ROOT, check=True,
                 capture_output=True, text=True, timeout=600)
  return db

def replay_cli(*args: str, plant: str | None = None, device: str = "NUMPY", tmp: Path) -> tuple[int, dict, str]:
  js = tmp / f"r-{plant}-{len(list(tmp.iterdir()))}.json"
  r = subprocess.run([sys.executable, "-m", "replay.cli", *args, "--report-json", str(js)], env=_env(plant, device), cwd=ROOT,
                     capture_output=True, text=True, timeout=900)
  return r.returncode, (json.loads(js.read_text()) if js.exists() else {}), r.stdout + r.stderr

def model_rows(report: dict) -> list[dict]: return [r for r in report["results"] if r["level"] == "model"]

@pytest.fixture(scope="module")
def db(tmp_path_factory):
  return capture(tmp_path_factory.mktemp("model") / "calls.db", CALLS_NUMPY)

# *** clean code: identical and equivalent, every time, whatever the process ***

def test_clean_code_replays_identically_and_equivalent_twice(db, tmp_path):
  for _ in range(2):
    code, rep, out = replay_cli("check", str(db), "--exec-all", "--device", "NUMPY", tmp=tmp_path)
    assert code == 0, out
    rows = model_rows(rep)
    assert len(rows) == len(CALLS_NUMPY) and all(r["outcome"] == "identical" for r in rows)
    assert {r["exec"]["verdict"] for r in rows} == {"equivalent"}, [r["exec"] for r in rows]
    assert all(r["exec"]["judged"] == "model call" and r["exec"]["compared_outputs"] for r in rows)
    assert decide(rep, code, accept=False)[0]

def test_keys_are_the_same_in_every_process_and_on_every_device(tmp_path):
  """Another hash seed, another process, another device (OpenCL where there is one): the same input and output keys."""
  a = capture(tmp_path / "a.db", ("gpt2_decode_step",), seed="1")
  b = capture(tmp_path / "b.db", ("gpt2_decode_step",), seed="7", device="OPENCL" if _opencl() else "NUMPY")
  keys = []
  for p in (a, b):
    s = Store(p, readonly=True)
    try: keys.append([(r["input_key"], r["output_key"]) for r in s.captures()])
    finally: s.close()
  assert keys[0] == keys[1] and len(keys[0]) == 1

# *** planted front-end changes ***

@pytest.mark.parametrize("plant, call, verdict", [
  ("sum_via_half", "adam_step", "wrong"),               # float32 sums through float16: off its own float64 twin
  ("sum_via_half", "cnn_train_step_unfused", "wrong"),  # (BatchNorm's statistics, the loss)
  ("adam_eps", "adam_step", "mismatch"),        # the reference moves with the code: caught against the stored numbers
])
def test_a_front_end_change_that_moves_numbers_fails_the_gate(db, tmp_path, plant, call, verdict):
  code, rep, out = replay_cli("check", str(db), "--exec", "--device", "NUMPY", plant=plant, tmp=tmp_path)
  row = next(r for r in model_rows(rep) if r["label"] == call)
  assert code == 1, out
  assert row["outcome"] == "changed" and row["exec"]["verdict"] == verdict, row["exec"]
  assert row["exec"]["output"] and row["exec"]["max_rel_err"] > row["exec"]["tolerance"]
  assert call in out and row["exec"]["output"] in out  # the report names the model call and the output
  ok, reason = decide(rep, code, accept=True)  # [replay:accept] does not wave it through
  assert not ok and "model call" in reason

def test_an_equivalent_refactor_is_changed_equivalent_and_named(db, tmp_path):
  code, rep, out = replay_cli("check", str(db), "--exec", "--device", "NUMPY", plant="gelu_rewritten", tmp=tmp_path)
  row = next(r for r in model_rows(rep) if r["label"] == "block_forward_bf16")
  assert code == 1 and row["outcome"] == "changed" and row["exec"]["verdict"] == "equivalent", out
  assert "tinysched.tensor:Tensor.gelu" in row["rules"] and "Tensor.gelu" in row["signature"]
  untouched = [r for r in model_rows(rep) if r["label"] in ("adam_step", "cnn_train_step_unfused")]
  assert all(r["outcome"] == "identical" for r in untouched)  # calls that run no GELU build the same graphs
  assert decide(rep, code, accept=True)[0] and not decide(rep, code, accept=False)[0]

def test_accepting_a_model_change_records_its_numbers(tmp_path):
  db = capture(tmp_path / "one.db", ("block_forward_bf16",))
  code, rep, _ = replay_cli("check", str(db), tmp=tmp_path, plant="gelu_rewritten")
  assert code == 1
  key = model_rows(rep)[0]["input_key"][:16]
  r = subprocess.run([sys.executable, "-m", "replay.cli", "accept", str(db), "--key", key, "-m", "gelu rewritten, same function"],
                     env=_env("gelu_rewritten"), cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stdout + r.stderr
  code, rep, out = replay_cli("check", str(db), "--exec-all", "--device", "NUMPY", plant="gelu_rewritten", tmp=tmp_path)
  assert code == 0 and model_rows(rep)[0]["exec"]["verdict"] == "equivalent", out

@pytest.mark.skipif(not _opencl(), reason="needs an OpenCL platform: the NUMPY interpreter's float16 contractions hide the narrow accumulator")
def test_float16_sums_accumulated_in_float16_fail_the_gate_on_opencl(tmp_path):
  db = capture(tmp_path / "f16.db", ("mlp_forward_f16",), device="OPENCL")
  for _ in range(2):  # clean code passes, repeatedly
    code, rep, out = replay_cli("check", str(db), "--exec-all", "--device", "OPENCL", device="OPENCL", tmp=tmp_path)
    assert code == 0 and model_rows(rep)[0]["exec"]["verdict"] == "equivalent", out
  code, rep, out = replay_cli("check", str(db), "--exec", "--device", "OPENCL", plant="f16_acc_in_f16", device="OPENCL", tmp=tmp_path)
  row = model_rows(rep)[0]
  assert code == 1 and row["exec"]["verdict"] == "wrong" and row["exec"]["output"] == "logits", out
  assert "tinysched.reduce:acc_dtype" in row["rules"]
  assert not decide(rep, code, accept=True)[0]

def test_replay_diff_compares_numbers_across_a_front_end_change(db, tmp_path):
  """Two captures of one call before and after a front-end change: the other levels' inputs differ there, the model
  level compares the two runs' numbers, each against its own float64 twin."""
  new = capture(tmp_path / "new.db", ("adam_step", "cnn_train_step_unfused"), plant="sum_via_half")
  code, rep, out = replay_cli("diff", str(db), str(new), "--exec", "--device", "NUMPY", tmp=tmp_path)
  rows = {r["label"]: r for r in model_rows(rep) if r.get("pair")}
  assert code == 1, out
  assert rows["adam_step"]["exec"]["verdict"] == "wrong", rows["adam_step"]["exec"]
  assert "new capture vs the float64 reference" in rows["adam_step"]["exec"]["where"]
  clean = capture(tmp_path / "clean.db", ("adam_step",))
  code, rep, out = replay_cli("diff", str(db), str(clean), "--exec", "--device", "NUMPY", "--allow-empty", tmp=tmp_path)
  assert all(r["outcome"] == "identical" for r in model_rows(rep) if r.get("pair")), out

# *** stored inputs and outputs this code cannot run or read ***

def test_a_spec_this_code_cannot_run_is_incompatible():
  lv = levels.get("model")
  good = spec_of(CALLS["adam_step"])
  assert lv.decode_input(encode_input(good)) == good
  for bad in ({**good, "call": "no_such_call"}, {**good, "dtype": "int8"}, {**good, "seed": -1}, {**good, "flags": {"NOOPT": 1}},
              {k: v for k, v in good.items() if k != "seed"}):
    with pytest.raises(IncompatibleCapture): lv.decode_input(encode_input(bad))
  with pytest.raises(IncompatibleCapture): lv.decode_input(b"\xff not json")
  with pytest.raises(CallError): check_spec({"call": 3})

def test_a_malformed_model_record_is_incompatible(db):
  lv = levels.get("model")
  s = Store(db, readonly=True)
  try: data = s.blob(next(iter(s.captures()))["output_key"])
  finally: s.close()
  lv.decode_output(data)
  doc = json.loads(data)
  for bad in ({"calls": [], "host": []}, {"calls": "x", "host": []}, {"calls": doc["model"]["calls"], "host": [["f", "not a shape", "x"]]}):
    with pytest.raises(IncompatibleCapture): lv.decode_output(json.dumps({**doc, "model": bad}).encode())

# *** the numbers' summaries and verdicts ***

def test_summaries_sample_large_outputs_and_keep_small_ones_whole():
  small, big = np.arange(10.0), np.arange(100_000.0).reshape(100, 1000)
  s, b = N.summarize(small, "float32"), N.summarize(big, "float32")
  assert s["stride"] == 1 and np.array_equal(N.values(s), small)
  assert b["stride"] > 1 and len(N.values(b)) <= N.SAMPLE and b["quantiles"][-1] == 99_999.0
  assert N.values(N.summarize(np.array([3, 1]), "int32")).tolist() == [3, 1]

def test_relative_error_sees_nan_moved_and_a_scaled_output():
  a = np.array([1.0, 2.0, np.nan])
  assert N.rel_err(a, a) == 0.0
  assert N.rel_err(np.array([1.0, np.nan, 3.0]), a) == float("inf")
  assert N.rel_err(a * 1.01, a) == pytest.approx(0.01)

def test_verdicts_of_one_output():
  ref = np.linspace(1, 2, 100)
  stored = N.summarize(ref * (1 + 1e-4), "float16")
  stored["policy"] = N.policy("float16", stored, 1e-4)
  ok = N.judge({"dtype": "float16"}, {"y": stored}, {"y": N.summarize(ref, "float16")}, {"y": N.summarize(ref, "float64")})
  assert ok["verdict"] == "equivalent"
  off = N.judge({"dtype": "float16"}, {"y": stored}, {"y": N.summarize(ref * 1.05, "float16")}, {"y": N.summarize(ref, "float64")})
  assert off["verdict"] == "wrong" and off["output"] == "y"
  moved = N.judge({"dtype": "float16"}, {"y": stored}, {"y": N.summarize(ref * 1.05, "float16")}, {"y": N.summarize(ref * 1.05, "float64")})
  assert moved["verdict"] == "mismatch"
  tok = N.summarize(np.array([5]), "int32")
  assert N.judge({"dtype": "float32"}, {"t": tok}, {"t": N.summarize(np.array([6]), "int32")}, {"t": tok})["verdict"] == "wrong"
  gone = N.judge({"dtype": "float32"}, {"t": tok}, {}, None)
  assert gone["verdict"] == "mismatch" and "no longer returned" in gone["where"]

# *** which front-end functions the calls run, and which changed ***

def test_the_trace_names_front_end_functions_and_sees_their_source_change(monkeypatch):
  run = run_call(spec_of(CALLS["adam_step"]), "NUMPY", trace=True)
  fns = run.functions or {}
  assert "tinysched.tensor:Tensor.sparse_categorical_crossentropy" in fns and "tinysched.nn.optim:LAMB._step" in fns
  assert function_name("nn/optim.py", "LAMB.__init__.<locals>.f") == "tinysched.nn.optim:LAMB.__init__"
  assert changed_functions(fns) == []
  import tinysched.tensor as T
  monkeypatch.setattr(T.Tensor, "sparse_categorical_crossentropy", lambda self, *a, **k: None)  # (its source: this lambda)
  assert changed_functions(fns) == ["tinysched.tensor:Tensor.sparse_categorical_crossentropy"]

def test_coverage_lists_the_front_end_functions_the_model_rows_run(db, tmp_path):
  r = subprocess.run([sys.executable, "-m", "replay.cli", "coverage", str(db), "--json", str(tmp_path / "c.json")], env=_env(None), cwd=ROOT,
                     capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr
  fe = json.loads((tmp_path / "c.json").read_text())["front_end"]
  assert fe["functions"]["tinysched.tensor:Tensor.backward"] > 0 and fe["run"] > 100 and "front end (" in r.stdout

def test_the_diff_says_what_changed_beside_the_graphs(db):
  from replay.levels.model import ModelOutput
  lv = levels.get("model")
  s = Store(db, readonly=True)
  try: out = lv.decode_output(s.blob(next(r for r in s.captures() if r["label"] == "block_forward_bf16")["output_key"]))
  finally: s.close()
  assert len(out.graphs) == 1 and out.host
  assert lv.diff(out, ModelOutput(out.graphs, out.calls, out.host[:-1])).signature == "model: host data changed"
  twice = lv.diff(out, ModelOutput(out.graphs * 2, out.calls * 2, out.host))
  assert twice.signature == "model: 2 schedule(s) now, 1 stored" and "-- schedule 1" in twice.text_diff

def test_a_model_job_hands_the_pool_only_its_kernels(db, monkeypatch):
  """The batch compile reads kernel items from every job: a model job adds the kernels its replay scheduled, and
  nothing of its numbers (an output named `y` once became a bogus source item)."""
  from replay.check import Options, Selection, run
  from replay.execute import pool as exec_pool
  from replay.store.encode import decode_graph
  seen: list[dict] = []
  monkeypatch.setattr(exec_pool, "run_jobs", lambda jobs, *a, **k: seen.extend(jobs) or {})
  run(Selection((str(db),), level="model"), Options(exec="all", device="NUMPY"))
  assert len(seen) == len(CALLS_NUMPY) and all(j["kind"] == "model" and j["kernels"] for j in seen)
  items = [json.loads(x) for x in exec_pool._job_kernels(seen)]
  assert items and all(it[0] == "ast" and decode_graph(it[1].encode()) for it in items)
