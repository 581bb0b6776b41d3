"""Capture stores under faults: many writers creating one store at once, SIGKILL at every step of store creation,
compaction and baseline replacement, crafted stores, size bombs under a memory cap, and read-only commands
that must leave the store's directory byte-identical.

Crash points are named steps in replay (REPLAY_PAUSE_AT=<step> makes the process wait there, see
replay.store.sqlite.pause_point), so each test kills exactly where it means to."""
import hashlib, json, os, shutil, signal, sqlite3, subprocess, sys, textwrap, time, zlib
from pathlib import Path
import pytest
from click.testing import CliRunner
import replay
from replay.cli.app import main as cli
from replay.store.encode import key_of
from replay.store.sqlite import Store
from tinysched import Tensor

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "decoder_corpus"
ENV = {**os.environ, "TINYSCHED_DEVICE": "NUMPY", "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
for k in [k for k in ENV if k.startswith(("TINYSCHED_CAPTURE", "REPLAY_PAUSE"))]: del ENV[k]

def workload():
  Tensor.manual_seed(0)
  x = Tensor.rand(4, 8)
  ((x * 2).sum(1) + 1).realize()
  (x - x.max(1, keepdim=True)).exp().realize()

CAPTURE = "import sys; sys.path.insert(0, %r); from tests.replay.test_store_faults import workload; workload()" % str(ROOT)

def capture_proc(db: Path, pause: str | None = None, **env) -> subprocess.Popen:
  e = {**ENV, "TINYSCHED_CAPTURE": str(db), "TINYSCHED_CAPTURE_LABEL": "t", **env}
  if pause: e["REPLAY_PAUSE_AT"] = pause
  return subprocess.Popen([sys.executable, "-c", CAPTURE], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

def wait_paused(p: subprocess.Popen, step: str) -> None:
  line = p.stderr.readline()
  assert line.strip() == f"REPLAY-PAUSED {step}", f"{line!r} {p.stderr.read() if p.poll() is not None else ''}"

def kill(p: subprocess.Popen) -> None:
  p.send_signal(signal.SIGKILL)
  p.wait()

def invoke(*args):
  r = CliRunner().invoke(cli, [str(a) for a in args])
  assert r.exception is None or isinstance(r.exception, SystemExit), f"crashed: {r.exception!r}\n{r.output}"
  assert "Traceback" not in r.output, r.output
  return r

def n_captures(db: Path) -> int:
  s = Store(db, readonly=True)
  try: return s.conn.execute("SELECT count(*) FROM captures").fetchone()[0]
  finally: s.close()

@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
  """A compacted store of the workload (what the committed baselines look like)."""
  db = tmp_path_factory.mktemp("good") / "good.db"
  with replay.capture(db, label="g"): workload()
  replay.store.sqlite.compact(db)
  return db

def copy_of(db: Path, d: Path) -> Path:
  d.mkdir(parents=True, exist_ok=True)
  shutil.copy(db, d / db.name)
  return d / db.name

# *** many writers creating one store ***

WRITERS = textwrap.dedent("""
  import json, os, sys, traceback
  sys.path.insert(0, {root!r})
  import replay, replay.record.recorder as rc
  from tests.replay.test_store_faults import workload
  tmp, rounds, writers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
  def child(db, label, gate):
    try:
      os.read(gate, 1)  # every writer waits here, then all open the store (which does not exist yet) at once
      os.environ.update(TINYSCHED_CAPTURE=db, TINYSCHED_CAPTURE_LABEL=label)
      rc.install_from_env()
      workload()
      replay.stop()
      os._exit(0)
    except BaseException:
      traceback.print_exc(); sys.stderr.flush(); os._exit(1)
  def run(db, n):
    r, w = os.pipe()
    pids = []
    for i in range(n):
      pid = os.fork()
      if pid == 0:
        os.close(w); child(db, f"w{{i}}", r)
      pids.append(pid)
    os.close(r); os.close(w)  # EOF on the pipe releases them together
    return [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids]
  # forked from one process that has imported everything: 200 writers cost seconds, not minutes of imports
  out = {{"solo": run(os.path.join(tmp, "solo.db"), 1), "rounds": [run(os.path.join(tmp, f"r{{k}}.db"), writers) for k in range(rounds)]}}
  print(json.dumps(out))
""")

def test_twenty_writers_create_one_store_lose_nothing(tmp_path):
  t0 = time.time()
  r = subprocess.run([sys.executable, "-c", WRITERS.format(root=str(ROOT)), str(tmp_path), "10", "20"], env=ENV, capture_output=True,
                     text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "Traceback" not in r.stderr and "locked" not in r.stderr, r.stderr[-3000:]
  out = json.loads(r.stdout.strip().splitlines()[-1])
  assert out["solo"] == [0]
  c = sqlite3.connect(tmp_path / "solo.db")
  want = c.execute("SELECT count(*) FROM captures").fetchone()[0]
  c.close()
  assert want >= 4
  for k, codes in enumerate(out["rounds"]):
    assert codes == [0] * 20, f"round {k}: exit codes {codes}"
    s = Store(tmp_path / f"r{k}.db", readonly=True)
    try:
      per_label = dict(s.conn.execute("SELECT label, count(*) FROM captures GROUP BY label").fetchall())
      assert per_label == {f"w{i}": want for i in range(20)}, f"round {k}: {per_label}"
      assert s.conn.execute("SELECT count(*) FROM runs WHERE finished IS NOT NULL").fetchone()[0] == 20
      assert s.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally: s.close()
  assert time.time() - t0 < 120

# *** SIGKILL during store creation ***

CREATE_STEPS = ["create:opened", "create:wal", "create:begun", "create:tables", "create:version", "create:committed", "run:started"]

@pytest.mark.parametrize("step", CREATE_STEPS)
def test_sigkill_during_creation_leaves_a_usable_store(tmp_path, step):
  db = tmp_path / "c.db"
  p = capture_proc(db, step)
  wait_paused(p, step)
  kill(p)
  # nothing was captured: a clear refusal (exit 2), never a traceback, and nothing that would pass
  r = invoke("check", db, "-j", "1")
  assert r.exit_code == 2 and "FATAL" in r.output, r.output
  # the next capture into the same file works and the store then replays
  p = capture_proc(db)
  _, err = p.communicate(timeout=120)
  assert p.returncode == 0 and not err.strip(), err
  assert n_captures(db) >= 4
  r = invoke("check", db, "-j", "1")
  assert r.exit_code == 0, r.output

def test_store_half_made_by_an_older_version_is_finished_by_the_next_capture(tmp_path):
  db = tmp_path / "old.db"
  c = sqlite3.connect(db)
  c.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")  # killed before the version row and other tables
  c.commit(); c.close()
  r = invoke("check", db)
  assert r.exit_code == 2 and "table 'runs' is missing" in r.output, r.output
  with replay.capture(db, label="again"): workload()
  assert invoke("check", db, "-j", "1").exit_code == 0

# *** SIGKILL during compaction and baseline replacement ***

COMPACT = "import sys; from replay.store.sqlite import compact; compact(sys.argv[1])"
COMPACT_STEPS = ["compact:opened", "compact:copied", "compact:verified", "compact:replaced"]

@pytest.fixture(scope="module")
def wal_store(tmp_path_factory) -> Path:
  db = tmp_path_factory.mktemp("wal") / "w.db"
  p = capture_proc(db)
  assert p.wait(timeout=120) == 0
  return db

@pytest.mark.parametrize("step", COMPACT_STEPS)
def test_sigkill_during_compaction_keeps_the_store(tmp_path, wal_store, step):
  db = copy_of(wal_store, tmp_path)
  before = n_captures(db)
  p = subprocess.Popen([sys.executable, "-c", COMPACT, str(db)], env={**ENV, "REPLAY_PAUSE_AT": step}, stderr=subprocess.PIPE, text=True)
  wait_paused(p, step)
  kill(p)
  assert not Path(f"{db}-journal").exists()
  r = invoke("check", db, "-j", "1")
  assert r.exit_code == 0 and f"replayed {before} captures" in r.output, r.output
  replay.store.sqlite.compact(db)  # the next compaction works and removes what the killed one left
  assert sorted(os.listdir(tmp_path)) == [db.name]
  assert n_captures(db) == before and invoke("check", db, "-j", "1").exit_code == 0

SUITE = textwrap.dedent("""
  import sys
  from pathlib import Path
  from replay.baseline.suite import run_model
  r = run_model("mlp_digits", Path(sys.argv[1]), quick=True, levels=("kernel",), replace=True)
  print(r.get("ok"), r.get("error"))
""")

def test_sigkill_of_the_suite_keeps_the_baseline_and_leaves_no_model_process(tmp_path, good):
  from tinysched.models.suite import available
  if (why := available("mlp_digits")) is not None: pytest.skip(why)
  target = copy_of(good, tmp_path / "captures")
  old = target.read_bytes()
  note = tmp_path / "paused.txt"
  # the model process pauses right after it created its store; then its parent (the suite runner) is SIGKILLed
  p = subprocess.Popen([sys.executable, "-c", SUITE, str(target)], env={**ENV, "REPLAY_PAUSE_AT": "run:started",
                                                                         "REPLAY_PAUSE_NOTIFY": str(note)})
  deadline = time.time() + 120
  while not note.exists() and time.time() < deadline: time.sleep(0.05)
  child = int(note.read_text().split()[1])
  kill(p)
  deadline = time.time() + 30
  while time.time() < deadline:  # the parent-death signal ends it
    try: os.kill(child, 0)
    except ProcessLookupError: break
    time.sleep(0.05)
  else:
    os.kill(child, signal.SIGKILL)  # never leave it behind, even when the test fails
    pytest.fail(f"model process {child} outlived the suite runner")
  assert target.read_bytes() == old
  assert invoke("check", target, "-j", "1").exit_code == 0
  # a run that completes replaces the baseline and removes what the killed one left behind
  r = subprocess.run([sys.executable, "-c", SUITE, str(target)], env=ENV, capture_output=True, text=True, timeout=300)
  assert r.stdout.startswith("True"), r.stdout + r.stderr
  assert sorted(os.listdir(target.parent)) == [target.name]
  assert n_captures(target) > 0 and target.read_bytes() != old

def test_accept_takes_a_lock_removes_stale_folders_and_turns_sigterm_into_an_interrupt(tmp_path, monkeypatch):
  from replay.cli.ci import _accept_process
  repo = tmp_path / "repo"
  (repo / "captures").mkdir(parents=True)
  subprocess.run(["git", "init", "-q", str(repo)], check=True)
  stale = repo / ".replay-accept-dead1"
  (stale / "x.db").parent.mkdir()
  (stale / "x.db").write_bytes(b"")
  monkeypatch.chdir(repo)
  with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
    with _accept_process("captures"):
      assert not stale.exists()  # its creator is dead: the lock proves it
      holder = subprocess.run([sys.executable, "-c", "from replay.cli.ci import _accept_process\nwith _accept_process('captures'): pass"],
                              env=ENV, cwd=repo, capture_output=True, text=True)
      assert holder.returncode == 2 and "another `replay accept` is running" in holder.stderr, holder.stderr
      os.kill(os.getpid(), signal.SIGTERM)
      time.sleep(5)
  assert signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None) or callable(signal.getsignal(signal.SIGTERM))

# *** crafted stores: incompatible with a reason, exit 2, never a traceback ***

def _sql(*stmts):
  def go(db: Path) -> None:
    c = sqlite3.connect(db)
    for s in stmts: c.execute(s)
    c.commit(); c.close()
  return go

def _first_kernel(c) -> tuple[int, str, str]:
  return c.execute("SELECT id, input_key, output_key FROM captures WHERE level='kernel' ORDER BY id LIMIT 1").fetchone()

def _payload(data: bytes, column: str = "input_key", raw: bytes | None = None, store: bool = True):
  """Point the first kernel capture's input (or output) at `data`, stored consistently (the checksum matches)
  unless `raw` gives the stored bytes, or not stored at all."""
  def go(db: Path) -> None:
    c = sqlite3.connect(db)
    rid, _, _ = _first_kernel(c)
    k = key_of(data)
    if store:
      c.execute("INSERT OR REPLACE INTO graphs (key, kind, data, size) VALUES (?,?,?,?)", (k, "kernel_input", raw or zlib.compress(data), len(data)))
    c.execute(f"UPDATE captures SET {column}=? WHERE id=?", (k, rid))
    c.commit(); c.close()
  return go

def _corpus(name: str): return _payload((CORPUS / f"{name}.json").read_bytes())

DEEP = b'{"format":"tinysched-uop","version":1,"nodes":[["CONST",{"dt":"int"},[],' + b'{"t":[' * 100_000 + b"1" + b"]}" * 100_000 + \
       b'],["SINK",{"dt":"void"},[0],null]],"roots":[1],"var_vals":[],"assigns":[]}'

ROW_CASES = {  # name: (how to craft it, what the reason says)
  "input_key NULL": (_sql("UPDATE captures SET input_key=NULL WHERE id=(SELECT min(id) FROM captures)"), "input_key is NULL"),
  "level unknown": (_sql("UPDATE captures SET level='bogus' WHERE id=(SELECT min(id) FROM captures)"), "level is 'bogus'"),
  "metadata BLOB": (_sql("UPDATE captures SET metadata=X'00ff' WHERE id=(SELECT min(id) FROM captures)"), "metadata holds a blob"),
  "var_vals 5": (_corpus("var_vals_int"), "var_vals is not a list"),
  "assigns -1": (_corpus("assigns_int"), "expected a list of node references"),
  "DEFINE_VAR int arg": (_corpus("define_var_int_arg"), "DEFINE_VAR needs an integer dtype"),
  "unhashable dtype": (_corpus("unhashable_dtype"), "malformed dtype"),
  "dtype extra key": (_corpus("dtype_extra_key"), "malformed dtype"),
  "buffer size string": (_corpus("buffer_size_string"), "BUFFER needs"),
  "negative view shape": (_corpus("view_negative_shape"), "view dimension -4 out of range"),
  "10^30 view shape": (_corpus("view_huge_shape"), "out of range"),
  "view ref to a float": (_corpus("view_ref_to_float"), "refers to a dtypes.float node"),
  "REDUCE axis 99": (_corpus("reduce_axis_99"), "REDUCE_AXIS needs"),
  "vector width 2^62": (_corpus("vector_width_2_62"), "bad vector width"),
  "100k-deep nesting": (_payload(DEEP), "nested too deeply"),
  "not zlib": (_payload(b"{}", raw=b"plain bytes"), "corrupted"),
  "stored output unreadable": (_payload(b"[1, 2", "output_key"), "stored output unreadable: not valid JSON"),
  "stored output missing": (_payload(b"not stored", "output_key", store=False), "stored output unreadable: payload"),
}

@pytest.mark.parametrize("case", list(ROW_CASES))
def test_crafted_rows_are_incompatible_with_a_reason(tmp_path, good, case):
  craft, why = ROW_CASES[case]
  db = copy_of(good, tmp_path)
  craft(db)
  total = n_captures(db)
  r = invoke("check", db, "-j", "1", "--report-json", tmp_path / "r.json")
  assert r.exit_code == 2, r.output
  assert "incompatible: 1" in r.output and "changed: 0" in r.output and "error: 0" in r.output, r.output
  assert why in r.output, r.output
  rep = json.loads((tmp_path / "r.json").read_text())  # the report is complete, whatever the store held
  assert len(rep["results"]) == total and rep["exit_code"] == 2
  assert [x["reason"] for x in rep["results"] if x["outcome"] == "incompatible"][0].find(why) >= 0
  # the look-inside commands say what is wrong, exit 0 or 2, and never crash
  assert invoke("stats", db).exit_code == 0
  key = json.loads((tmp_path / "r.json").read_text())["results"][0]["input_key"] or "0"
  assert invoke("show", db, key).exit_code in (0, 2)

def _empty_runs(db: Path) -> None:
  _sql("DELETE FROM captures")(db)

STORE_CASES = {
  "no captures table": (_sql("DROP TABLE captures"), "incompatible capture store: table 'captures' is missing"),
  "no graphs table": (_sql("DROP TABLE graphs"), "incompatible capture store: table 'graphs' is missing"),
  "no runs table": (_sql("DROP TABLE captures", "DROP TABLE runs", "CREATE TABLE captures (x)"), "table 'runs' is missing"),
  "no captures at all": (_empty_runs, "no captures in this store"),
  "no schema version": (_sql("DELETE FROM meta"), "without a schema version"),
  "directory": (lambda db: (db.unlink(), db.mkdir()), "is a directory, not a capture store"),
  "empty file": (lambda db: db.write_bytes(b""), "empty file, not a capture store"),
  "text file": (lambda db: db.write_text("notes\n" * 100), "not an SQLite file"),
}

@pytest.mark.parametrize("case", list(STORE_CASES))
def test_crafted_stores_are_refused_with_a_reason(tmp_path, good, case):
  craft, why = STORE_CASES[case]
  db = copy_of(good, tmp_path)
  craft(db)
  r = invoke("check", db, "-j", "1", "--report-json", tmp_path / "r.json")
  assert r.exit_code == 2 and "FATAL" in r.output and why in r.output, r.output
  assert json.loads((tmp_path / "r.json").read_text())["fatal"]
  for cmd in (["stats", db], ["show", db, "00"], ["diff", db, good]):
    r = invoke(*cmd)
    assert r.exit_code == 2 or (case == "no captures at all" and cmd[0] == "stats"), (cmd, r.output)

# *** size bombs under a memory cap ***

CAPPED = textwrap.dedent("""
  import resource, sys
  cap = int(sys.argv[1])
  if cap: resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
  def peak():
    for ln in open("/proc/self/status"):
      if ln.startswith("VmPeak:"): return int(ln.split()[1]) * 1024
  import atexit; atexit.register(lambda: sys.stderr.write(f"VMPEAK {peak()}\\n"))
  from replay.cli.app import main
  main(sys.argv[2:], prog_name="replay")
""")

def _capped(cap: int, *args) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-c", CAPPED, str(cap), *map(str, args)], env=ENV, capture_output=True, text=True, timeout=300)

def _streamed_payload(head: bytes, fill: bytes, n: int, tail: bytes) -> tuple[str, bytes, int]:
  """(key, compressed, size) of head + fill*n + tail without holding the whole thing in memory."""
  h, z, out = hashlib.sha256(), zlib.compressobj(9), []
  for part in (head, *([fill] * n), tail):
    h.update(part); out.append(z.compress(part))
  out.append(z.flush())
  return h.hexdigest(), b"".join(out), len(head) + len(fill) * n + len(tail)

def _bomb(head, fill, n, tail, column="input_key"):
  def go(db: Path) -> None:
    k, data, size = _streamed_payload(head, fill, n, tail)
    c = sqlite3.connect(db)
    rid, _, _ = _first_kernel(c)
    c.execute("INSERT INTO graphs (key, kind, data, size) VALUES (?,?,?,?)", (k, "kernel_input", data, size))
    c.execute(f"UPDATE captures SET {column}=? WHERE id=?", (k, rid))
    c.commit(); c.close()
  return go

def _chain(n: int) -> bytes:
  nodes = [["CONST", {"dt": "float"}, [], {"f": "0x1p+0"}]] + [["NEG", {"dt": "float"}, [i], None] for i in range(n - 1)]
  return json.dumps({"format": "tinysched-uop", "version": 1, "nodes": nodes + [["SINK", {"dt": "void"}, [n - 1], None]], "roots": [n]},
                    separators=(",", ":")).encode()

H = b'{"format":"tinysched-uop","version":1,'
BOMBS = {  # name: (craft, expected exit code, what the output says)
  "1 GiB of JSON whitespace": (_bomb(H + b'"nodes":[', b" " * 2**20, 1024, b'],"roots":[]}'), 2, "decompresses to more than"),
  "256 MB string constant": (_bomb(H + b'"nodes":[["DEFINE_VAR",{"dt":"int"},[],{"t":["', b"a" * 2**20, 256, b'",1,4]}]],"roots":[0]}'),
                             2, "decompresses to more than"),
  "16 MB string constant": (_bomb(H + b'"nodes":[["DEFINE_VAR",{"dt":"int"},[],{"t":["', b"a" * 2**20, 16, b'",1,4]}]],"roots":[0]}'),
                            2, "string argument of 16777216 characters"),
  "100k-node chain as the stored output": (lambda db: _payload(_chain(100_000), "output_key")(db), 1, "too large for a detailed diff"),
}

def test_size_bombs_fail_clearly_within_a_memory_cap(tmp_path, good):
  base = _capped(0, "check", good, "-j", "1")
  assert base.returncode == 0, base.stderr
  cap = int(base.stderr.split("VMPEAK ")[1].split()[0]) + 512 * 2**20  # what a normal check needs, plus 512 MiB
  for name, (craft, code, says) in BOMBS.items():
    db = copy_of(good, tmp_path / name.replace(" ", "_"))
    craft(db)
    r = _capped(cap, "check", db, "-j", "1", "-v")
    assert r.returncode == code and says in r.stdout, f"{name}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    assert "MemoryError" not in r.stdout + r.stderr and "Traceback" not in r.stderr, name

# *** read-only commands touch nothing ***

def _state(d: Path) -> dict[str, tuple]:
  return {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns) for p in sorted(d.iterdir())}

KILLED_WRITER = textwrap.dedent("""
  import sys, time
  sys.path.insert(0, {root!r})
  import replay.record.recorder as rc
  rc.FLUSH_EVERY = 1   # every capture committed (into the WAL) before the kill
  from tests.replay.test_store_faults import workload
  workload()
  print("committed", flush=True)
  time.sleep(600)
""")

def _killed_writer_store(d: Path) -> Path:
  d.mkdir()
  db = d / "k.db"
  p = subprocess.Popen([sys.executable, "-c", KILLED_WRITER.format(root=str(ROOT))], env={**ENV, "TINYSCHED_CAPTURE": str(db)},
                       stdout=subprocess.PIPE, text=True)
  assert p.stdout.readline().strip() == "committed"
  kill(p)
  assert os.path.getsize(f"{db}-wal") > 32 and os.path.exists(f"{db}-shm")  # the committed rows are only in the WAL
  return db

HOT_JOURNAL = textwrap.dedent("""
  import sqlite3, sys, time
  c = sqlite3.connect(sys.argv[1], isolation_level=None)
  c.execute("PRAGMA cache_size=2")  # a tiny cache: the transaction spills changed pages into the file itself
  c.execute("BEGIN")
  c.execute("UPDATE graphs SET data = zeroblob(length(data))")
  print("ready", flush=True)
  time.sleep(600)
""")

def _hot_journal_store(d: Path, good: Path) -> Path:
  """A compacted (rollback-journal) store whose writer was killed mid-transaction: a hot -journal beside it, which a
  read-only connection cannot roll back (the old reader called this `not a capture store`)."""
  db = copy_of(good, d)
  p = subprocess.Popen([sys.executable, "-c", HOT_JOURNAL, str(db)], stdout=subprocess.PIPE, text=True)
  assert p.stdout.readline().strip() == "ready"
  kill(p)
  assert os.path.getsize(f"{db}-journal") > 0
  return db

@pytest.mark.parametrize("kind", ["compacted", "wal closed", "wal of a killed writer", "hot journal of a killed writer"])
def test_read_only_commands_leave_the_directory_byte_identical(tmp_path, good, wal_store, kind):
  if kind == "compacted": db = copy_of(good, tmp_path / "s")
  elif kind == "wal closed": db = copy_of(wal_store, tmp_path / "s")
  elif kind == "wal of a killed writer": db = _killed_writer_store(tmp_path / "s")
  else: db = _hot_journal_store(tmp_path / "s", good)
  other = copy_of(good, tmp_path / "o")
  before, before_other = _state(db.parent), _state(other.parent)
  r = invoke("check", db, "-j", "1")
  assert r.exit_code in (0, 1) and "replayed 0 " not in r.output, r.output
  assert invoke("check", db, "-j", "2").exit_code == r.exit_code  # forked workers open the store too
  assert invoke("stats", db).exit_code == 0
  key = Store(db, readonly=True).captures().__next__()["input_key"]
  assert invoke("show", db, key[:12]).exit_code == 0
  assert invoke("diff", other, db).exit_code in (0, 1)
  assert _state(db.parent) == before and _state(other.parent) == before_other
  if kind == "wal of a killed writer": assert n_captures(db) >= 4  # read through the WAL, not around it
  if kind == "hot journal of a killed writer": assert r.exit_code == 0 and "identical: " in r.output  # the rolled-back content

def test_reading_while_a_writer_is_active(tmp_path, wal_store):
  db = copy_of(wal_store, tmp_path)
  before = n_captures(db)
  p = capture_proc(db, "write:graphs")  # holds an open write transaction
  wait_paused(p, "write:graphs")
  try:
    r = invoke("check", db, "-j", "1")
    assert r.exit_code == 0 and f"replayed {before} captures" in r.output, r.output
  finally: kill(p)
  assert invoke("check", db, "-j", "1").exit_code == 0

# *** misconfiguration fails at the first capture point, naming the variable ***

@pytest.mark.parametrize("var, value, says", [
  ("TINYSCHED_CAPTURE", "notes.txt", "not an SQLite file"),
  ("TINYSCHED_CAPTURE", "sub", "is a directory"),
  ("TINYSCHED_CAPTURE", "nonexistent/dir/x.db", "does not exist (replay does not create it)"),
  ("TINYSCHED_CAPTURE_LEVELS", "bogus", "unknown capture level(s) bogus"),
  ("TINYSCHED_CAPTURE_LEVELS", ",", "names no capture level"),
])
def test_misconfigured_capture_stops_with_the_variable_named(tmp_path, var, value, says):
  (tmp_path / "notes.txt").write_text("my notes\n")
  (tmp_path / "sub").mkdir()
  env = {**ENV, "TINYSCHED_CAPTURE": "x.db", var: value}
  script = CAPTURE.replace("workload()", "print('before', flush=True); workload(); print('after', flush=True)")
  r = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
  assert r.returncode == 2 and "after" not in r.stdout, r.stdout + r.stderr
  assert f"replay: error: {var}={value!r}: " in r.stderr and says in r.stderr and "Traceback" not in r.stderr, r.stderr
  assert not (tmp_path / "nonexistent").exists() and (tmp_path / "notes.txt").read_text() == "my notes\n"

LOSES_LAST_BATCH = textwrap.dedent("""
  import sqlite3, sys
  sys.path.insert(0, {root!r})
  import replay.record.recorder as rc
  rc.FLUSH_EVERY = 10**9  # everything waits for the flush at exit
  from tests.replay.test_store_faults import workload
  workload()
  c = sqlite3.connect(sys.argv[1]); c.execute("DROP TABLE captures"); c.commit(); c.close()  # the flush at exit cannot write
""")

@pytest.mark.parametrize("strict", [False, True])
def test_a_capture_whose_last_flush_fails_warns_and_strict_runners_exit_2(tmp_path, strict):
  # the user's program exits as it would have (0), with the warning; replay's own runners (strict) must not take the
  # incomplete store for a whole one: exit 2
  db = tmp_path / "x.db"
  env = {**ENV, "TINYSCHED_CAPTURE": str(db), **({"TINYSCHED_CAPTURE_STRICT": "1"} if strict else {})}
  r = subprocess.run([sys.executable, "-c", LOSES_LAST_BATCH.format(root=str(ROOT)), str(db)], env=env, capture_output=True, text=True, timeout=120)
  assert r.returncode == (2 if strict else 0) and "stopped while writing its last captures" in r.stderr, (r.returncode, r.stderr)
  assert r.stderr.count("replay: warning: capture into") == 1 and "Traceback" not in r.stderr, r.stderr

@pytest.mark.parametrize("var, value", [("TINYSCHED_CAPTURE", "notes.txt"), ("TINYSCHED_CAPTURE", "nonexistent/dir/x.db"),
                                        ("TINYSCHED_CAPTURE_LEVELS", "bogus")])
def test_misconfiguration_stops_at_import_before_any_user_code(tmp_path, var, value):
  (tmp_path / "notes.txt").write_text("my notes\n")
  env = {**ENV, "TINYSCHED_CAPTURE": "x.db", var: value}
  r = subprocess.run([sys.executable, "-c", "import tinysched; print('user code ran', flush=True)"], env=env, cwd=tmp_path,
                     capture_output=True, text=True, timeout=120)
  assert r.returncode == 2 and "user code ran" not in r.stdout, r.stdout + r.stderr
  assert f"replay: error: {var}={value!r}: " in r.stderr and "Traceback" not in r.stderr, r.stderr
  assert not (tmp_path / "x.db").exists() and (tmp_path / "notes.txt").read_text() == "my notes\n"
