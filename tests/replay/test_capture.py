"""Capture: canonical encoding round trips, cross-process determinism, concurrency and crash safety, bad input."""
import hashlib, json, os, signal, sqlite3, subprocess, sys, textwrap, time, zlib
from pathlib import Path
import pytest
from hypothesis import given, settings, strategies as st
from click.testing import CliRunner
import replay
from replay.store.encode import encode_graph, decode_graph, encode_kernel_input, decode_kernel_input, IncompatibleCapture, key_of
from replay.store.sqlite import Store, StoreError
from replay.cli.app import main as cli
from tinysched import Tensor, Variable, dtypes, UOp, Ops
from tinysched.shape import ShapeTracker
from tinysched.schedule import full_ast_rewrite
from tinysched import capture_hook

ROOT = Path(__file__).resolve().parents[2]

def workload(seed: int = 0):
  Tensor.manual_seed(seed)
  x, w = Tensor.rand(4, 8), Tensor.rand(8, 3)
  (x @ w).relu().sum(1).realize()
  e = (x - x.max(1, keepdim=True)).exp()
  (e / e.sum(1, keepdim=True)).realize()
  v = Variable("n", 1, 4)
  (x.shrink(((0, v.bind(2)), None)) * 3).sum(0).realize()
  y = Tensor.rand(8).realize()
  y.assign(y * 2 + 1).realize()

def rows(db):
  s = Store(db, readonly=True)
  try: return [(r["level"], r["input_key"], r["output_key"]) for r in s.captures()]
  finally: s.close()

# *** encoding ***

def test_round_trip_of_real_asts(tmp_path):
  captured = []
  capture_hook.HOOK = lambda level, inputs, output, info=None: captured.append((level, inputs, output))
  try: workload()
  finally: capture_hook.HOOK = None
  kernels = [c for c in captured if c[0] == "kernel"]
  assert len(kernels) >= 5
  for _, (pre, vv, asg), ast in kernels:
    data = encode_graph([ast])
    back = decode_graph(data)[0]
    assert back is ast  # interning: equal graphs are the same object
    assert encode_graph([back]) == data
    inp = encode_kernel_input(pre, vv, asg)
    pre2, vv2, asg2 = decode_kernel_input(inp)
    assert encode_kernel_input(pre2, vv2, asg2) == inp
    # the decoded input replays to the same AST
    assert full_ast_rewrite(pre2, vv2, asg2)[0] is ast

_floats = st.sampled_from([0.0, -0.0, 1.5, -2.25, float("inf"), float("-inf"), float("nan"), 1e-300, 3.141592653589793])
_index = st.builds(lambda s: UOp(Ops.VIEW, dtypes.void, (), ShapeTracker.from_shape(s)),
                   st.lists(st.integers(1, 5), min_size=0, max_size=3).map(tuple))
# float values, well typed as every decoded graph must be (tinysched/opspec.py): a node of each form some pass makes
_value = st.recursive(st.one_of(
  st.builds(lambda v: UOp.const(dtypes.float32, v), _floats),
  st.builds(lambda i: UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 0), i)), _index),
), lambda kids: st.one_of(
  st.builds(lambda a, b: UOp(Ops.ADD, a.dtype, (a, b)), kids, kids),
  st.builds(lambda a, b: UOp(Ops.WHERE, a.dtype, (UOp(Ops.CMPLT, dtypes.bool, (a, b)), a, b)), kids, kids),
  st.builds(lambda a, t: UOp(Ops.REDUCE_AXIS, a.dtype, (a,), (Ops.MAX, t)), kids, st.lists(st.integers(0, 3), max_size=2).map(tuple)),
  st.builds(lambda a, s: UOp(Ops.VIEW, a.dtype, (a,), ShapeTracker.from_shape(s).pad(tuple((1, 0) for _ in s))),
            kids, st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)),
), max_leaves=12)
# a SINK takes any roots: the other leaves (ints, bools, Variables, indices) go there
_graph = st.builds(lambda xs: UOp(Ops.SINK, dtypes.void, tuple(xs)), st.lists(st.one_of(
  _value, _index, st.builds(lambda v: UOp.const(dtypes.int32, v), st.integers(-2**31, 2**31 - 1)),
  st.builds(lambda v: UOp.const(dtypes.bool, v), st.booleans()),
  st.builds(lambda n, hi: Variable(n, 0, hi), st.sampled_from(["a", "b", "start_pos"]), st.integers(1, 64))), min_size=1, max_size=3))

@settings(max_examples=150, deadline=None)
@given(_graph)
def test_round_trip_random_graphs(g):
  data = encode_graph([g])
  back = decode_graph(data)[0]
  assert encode_graph([back]) == data
  assert back.key == g.key

def test_symbolic_views_round_trip():
  v = Variable("i", 1, 10)
  st_ = ShapeTracker.from_shape((v, 4)).shrink(((0, v), (1, 3)))
  u = UOp(Ops.VIEW, dtypes.void, (), st_)
  assert decode_graph(encode_graph([u]))[0] is u

def test_buffer_numbers_are_canonical():
  a = UOp(Ops.BUFFER, dtypes.float.ptr(), (), (17, ("NUMPY", 4, dtypes.float)))
  b = UOp(Ops.BUFFER, dtypes.float.ptr(), (), (3, ("NUMPY", 4, dtypes.float)))
  s1 = UOp.sink_of(UOp.store(a, UOp(Ops.VIEW, dtypes.void, (), ShapeTracker.from_shape((4,))), UOp.const(dtypes.float, 1.0)))
  s2 = UOp.sink_of(UOp.store(b, UOp(Ops.VIEW, dtypes.void, (), ShapeTracker.from_shape((4,))), UOp.const(dtypes.float, 1.0)))
  assert encode_graph([s1]) == encode_graph([s2])

@pytest.mark.parametrize("bad, why", [
  (b'{"format":"tinysched-uop","version":1,"nodes":[["FOO",{"dt":"float"},[],null]],"roots":[0]}', "unknown op 'FOO'"),
  (b'{"format":"tinysched-uop","version":99,"nodes":[],"roots":[0]}', "version 99"),
  (b'{"format":"tinysched-uop","version":1,"nodes":[["CONST",{"dt":"float7"},[],1]],"roots":[0]}', "unknown dtype"),
  (b'{"format":"tinysched-uop","version":1,"nodes":[["ADD",{"dt":"int"},[3],null]],"roots":[0]}', "not an earlier node"),
  (b'{"format":"tinysched-uop","version":1,"nodes":[["CONST",{"dt":"int"},[],{"pickle":"x"}]],"roots":[0]}', "malformed argument"),
  (b'{"format":"tinysched-uop","version":1,"nod', "not valid JSON"),
  (b'\x00\x01garbage', "not valid JSON"),
])
def test_decode_rejects_bad_documents(bad, why):
  with pytest.raises(IncompatibleCapture, match=why): decode_graph(bad)

# *** the store ***

def test_capture_context_manager_and_schema(tmp_path):
  db = tmp_path / "c.db"
  with replay.capture(db, label="unit"):
    workload()
  s = Store(db, readonly=True)
  try:
    rs = list(s.captures())
    levels = {r["level"] for r in rs}
    assert {"kernel", "schedule"} <= levels
    assert all(r["label"] == "unit" for r in rs)
    run = s.runs()[0]
    assert run["finished"] and run["label"] == "unit" and run["python"]
    k = [r for r in rs if r["level"] == "kernel" and "n" in json.loads(r["var_vals"])]
    assert k and json.loads(k[0]["var_vals"]) == {"n": 2}
    # summary columns are queryable without decoding
    assert all(r["op_names"] and r["node_count"] > 0 for r in rs)
    assert s.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
  finally: s.close()

CAPTURE_SCRIPT = textwrap.dedent("""
  import os, sys
  sys.path.insert(0, {root!r})
  from tests.replay.test_capture import workload
  workload()
""")

def _env(db, label="m", **extra):
  return {**os.environ, "TINYSCHED_DEVICE": "NUMPY", "TINYSCHED_CAPTURE": str(db), "TINYSCHED_CAPTURE_LABEL": label, **extra}

def test_same_program_two_processes_same_keys(tmp_path):
  sets = []
  for i, seed in enumerate(("1", "2")):
    db = tmp_path / f"p{i}.db"
    r = subprocess.run([sys.executable, "-c", CAPTURE_SCRIPT.format(root=str(ROOT))], env=_env(db, PYTHONHASHSEED=seed),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    sets.append(set(rows(db)))
  assert sets[0] == sets[1] and len(sets[0]) >= 6

def test_twenty_concurrent_writers(tmp_path):
  db = tmp_path / "many.db"
  Store(db).close()
  procs = [subprocess.Popen([sys.executable, "-c", CAPTURE_SCRIPT.format(root=str(ROOT))], env=_env(db, label=f"w{i}"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for i in range(20)]
  for p in procs: assert p.wait(timeout=240) == 0, p.stderr.read()
  s = Store(db, readonly=True)
  try:
    per_label = s.conn.execute("SELECT label, count(*) FROM captures GROUP BY label").fetchall()
    assert len(per_label) == 20
    counts = {n for _, n in per_label}
    assert len(counts) == 1 and counts.pop() >= 6  # every process wrote every one of its captures
    assert s.conn.execute("SELECT count(*) FROM runs WHERE finished IS NOT NULL").fetchone()[0] == 20
    assert s.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
  finally: s.close()

KILL_SCRIPT = textwrap.dedent("""
  import os, sys, time
  sys.path.insert(0, {root!r})
  import replay.record.recorder as rc
  rc.FLUSH_EVERY = 1   # commit every capture, so the test knows what was committed before the kill
  from tests.replay.test_capture import workload
  workload()
  print("committed", flush=True)
  from tinysched import Tensor
  i = 0
  while True:  # keep capturing until killed
    i += 1
    (Tensor.rand(3, i % 7 + 1) * i).sum().realize()
""")

def test_sigkill_leaves_a_valid_file(tmp_path):
  db = tmp_path / "killed.db"
  p = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT.format(root=str(ROOT))], env=_env(db), stdout=subprocess.PIPE, text=True)
  assert p.stdout.readline().strip() == "committed"
  time.sleep(1.0)
  p.send_signal(signal.SIGKILL)
  p.wait()
  s = Store(db, readonly=True)
  try:
    assert s.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    n = s.conn.execute("SELECT count(*) FROM captures").fetchone()[0]
    assert n >= 6
    # everything committed replays
  finally: s.close()
  r = CliRunner().invoke(cli, ["check", str(db), "-j", "1"])
  assert r.exit_code == 0, r.output

def test_sigterm_flushes(tmp_path):
  db = tmp_path / "term.db"
  script = KILL_SCRIPT.replace("rc.FLUSH_EVERY = 1", "rc.FLUSH_EVERY = 10**9")
  p = subprocess.Popen([sys.executable, "-c", script.format(root=str(ROOT))], env=_env(db), stdout=subprocess.PIPE, text=True)
  assert p.stdout.readline().strip() == "committed"
  time.sleep(0.5)
  p.send_signal(signal.SIGTERM)
  try: p.wait(timeout=60)
  finally:
    if p.poll() is None: p.kill()  # never leave a capturing child behind
  assert p.returncode == 128 + signal.SIGTERM
  assert len(rows(db)) >= 6  # nothing had been flushed before SIGTERM: the handler wrote it all

# *** corrupted and foreign inputs ***

def _sha(p: Path) -> str: return hashlib.sha256(p.read_bytes()).hexdigest()

@pytest.fixture
def good_db(tmp_path):
  db = tmp_path / "good.db"
  with replay.capture(db, label="g"): workload()
  c = sqlite3.connect(db); c.execute("PRAGMA journal_mode=DELETE"); c.close()
  return db

def test_not_sqlite_file(tmp_path):
  bad = tmp_path / "notes.db"
  bad.write_text("this is not a database\n" * 100)
  before = _sha(bad)
  r = CliRunner().invoke(cli, ["check", str(bad)])
  assert r.exit_code == 2 and "not a capture store" in r.output
  r = CliRunner().invoke(cli, ["stats", str(bad)])
  assert r.exit_code == 2 and "not a capture store" in r.output
  assert _sha(bad) == before

def test_newer_schema_refused(good_db):
  c = sqlite3.connect(good_db); c.execute("UPDATE meta SET value='999' WHERE key='schema_version'"); c.commit(); c.close()
  before = _sha(good_db)
  r = CliRunner().invoke(cli, ["check", str(good_db)])
  assert r.exit_code == 2 and "newer" in r.output
  assert _sha(good_db) == before
  with pytest.raises(StoreError, match="newer"): Store(good_db)

def test_bitflipped_blob_is_incompatible(good_db):
  c = sqlite3.connect(good_db)
  key, data = c.execute("SELECT key, data FROM graphs WHERE kind='kernel_input' LIMIT 1").fetchone()
  raw = bytearray(zlib.decompress(data)); raw[len(raw) // 2] ^= 0x20
  c.execute("UPDATE graphs SET data=? WHERE key=?", (zlib.compress(bytes(raw)), key)); c.commit(); c.close()
  before = _sha(good_db)
  r = CliRunner().invoke(cli, ["check", str(good_db), "-j", "1"])
  assert r.exit_code == 2 and "incompatible: 1" in r.output and "checksum" in r.output
  assert _sha(good_db) == before

def test_truncated_and_unknown_op_inputs(good_db):
  c = sqlite3.connect(good_db)
  rows_ = c.execute("SELECT input_key FROM captures WHERE level='kernel' LIMIT 2").fetchall()
  for (key,), payload in zip(rows_, [b'{"format":"tinysched-uop","version":1,"nod',
                                     b'{"format":"tinysched-uop","version":1,"nodes":[["FROB",{"dt":"void"},[],null]],"roots":[0]}']):
    # a consistent row (checksum matches): the content itself is what the current code can't read
    newkey = key_of(payload)
    c.execute("INSERT INTO graphs (key, kind, data, size) VALUES (?,?,?,?)", (newkey, "kernel_input", zlib.compress(payload), len(payload)))
    c.execute("UPDATE captures SET input_key=? WHERE input_key=?", (newkey, key))
  c.commit(); c.close()
  r = CliRunner().invoke(cli, ["check", str(good_db), "-j", "1"])
  assert r.exit_code == 2
  assert "incompatible: 2" in r.output and "unknown op 'FROB'" in r.output

def test_capture_cli_runs_a_command(tmp_path):
  db = tmp_path / "cli.db"
  r = CliRunner().invoke(cli, ["capture", "--db", str(db), "--label", "cmd", "--", sys.executable, "-c", CAPTURE_SCRIPT.format(root=str(ROOT))])
  assert r.exit_code == 0, r.output
  assert {lv for lv, _, _ in rows(db)} >= {"kernel", "schedule"}
  r = CliRunner().invoke(cli, ["capture", "--db", str(db), "--levels", "bogus", "--", "true"])
  assert r.exit_code == 2 and "unknown level" in r.output

# *** capture keeps nothing alive that the program drops ***

@pytest.mark.parametrize("plant", [None, "strong_repeats", "inputs_until_flush"])
def test_capture_holds_no_reference_to_what_it_is_shown(tmp_path, monkeypatch, plant):
  """A program under capture frees its graphs exactly when it would without capture (a test of freeing passes under
  pytest --replay-capture; a training loop's memory is the same): after a kernel rewrite and a rendering under capture,
  recorded but not yet written, the pre-sink and the kernel AST have the reference counts they have without capture, and
  nothing the capture keeps holds them. Planted: repeats remembered by strong references (the set of
  identities before), and the shown inputs held until the flush (the queue before)."""
  import gc
  from replay.record import recorder
  from tinysched.codegen.program import to_program
  from tinysched.codegen.target import NVIDIA_LIKE_GPU
  from tinysched.scheduling.kernel_ast import KernelMemo
  if plant == "strong_repeats":
    monkeypatch.setattr(recorder, "weakref", type("W", (), {"WeakKeyDictionary": dict, "WeakSet": set, "ref": staticmethod(lambda x: x)}))
  if plant == "inputs_until_flush":
    held: list = []
    orig = recorder.Capturer._record
    def record(self, level, inputs, output, info):
      held.append((inputs, output))
      return orig(self, level, inputs, output, info)
    monkeypatch.setattr(recorder.Capturer, "_record", record)
    monkeypatch.setattr(recorder.Capturer, "flush", lambda self, orig=recorder.Capturer.flush: (held.clear(), orig(self))[1])
  pres: list = []
  monkeypatch.setattr(capture_hook, "HOOK", lambda level, inputs, output, info=None: pres.append(inputs) if level == "kernel" else None)
  (Tensor.rand(6, 5).contiguous().realize() * 7 + 2).sum(1).schedule()
  monkeypatch.setattr(capture_hook, "HOOK", None)
  pre, var_vals, assigned = pres.pop()
  pres.clear()
  def work() -> tuple[int, int]:
    ast, _ = full_ast_rewrite(pre, var_vals, assigned, KernelMemo())
    to_program(ast, None, NVIDIA_LIKE_GPU)
    return sys.getrefcount(pre), sys.getrefcount(ast)
  gc.collect()
  gc.disable()
  try:
    without = work()
    with replay.capture(tmp_path / "c.db", label="free", levels=("kernel", "program")) as c:
      c.accept = lambda: True
      under = work()
      assert len(c.rows) == 2  # recorded, not written yet
  finally: gc.enable()
  assert (under == without) == (plant is None), (under, without)
  assert sorted(lv for lv, _, _ in rows(tmp_path / "c.db")) == ["kernel", "program"]
