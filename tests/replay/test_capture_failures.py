"""Capture never changes the program it observes (replay/record/recorder.py): a full disk, a read-only or locked store,
an encoding error make capture stop with one warning naming the store, and the program goes on and exits as it would
have. replay's own runners (TINYSCHED_CAPTURE_STRICT=1) exit 2 at the end instead, so an incomplete store is never taken
for a whole one; and the replay commands turn a storage error into a message and exit 2. A compiler that calls exit()
while tinysched probes a device ends a child process, not the program."""
import os, sqlite3, subprocess, sys, textwrap
from pathlib import Path
import pytest
from click.testing import CliRunner
from replay.cli.app import main as cli

ROOT = Path(__file__).resolve().parents[2]
ENV = {k: v for k, v in os.environ.items() if not k.startswith(("TINYSCHED_CAPTURE", "PLANT_"))}
ENV.update({"TINYSCHED_DEVICE": "NUMPY", "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"})

# the user's program: prints what it computes and exits 3 (its own code), whatever capture does
PROGRAM = textwrap.dedent("""
  import os, sys
  sys.path.insert(0, {root!r})
  {plant}
  from tinysched import Tensor
  import numpy as np
  acc = []
  for i in range(40):
    x = Tensor(np.arange(4 * (i + 1), dtype=np.float32).reshape(4, i + 1))  # a new shape each time: new kernels to capture
    acc.append(float((x @ x.T).relu().sum().numpy()) + i)
  print("result", sum(acc), flush=True)
  sys.exit(3)
""")

def _run(tmp: Path, db: Path | None, plant: str = "", **env: str) -> subprocess.CompletedProcess:
  e = {**ENV, **({"TINYSCHED_CAPTURE": str(db)} if db else {}), **env}
  return subprocess.run([sys.executable, "-c", PROGRAM.format(root=str(ROOT), plant=plant)], env=e, cwd=tmp, capture_output=True,
                        text=True, timeout=300)

@pytest.fixture(scope="module")
def uncaptured(tmp_path_factory) -> subprocess.CompletedProcess:
  r = _run(tmp_path_factory.mktemp("plain"), None)
  assert r.returncode == 3 and r.stdout.startswith("result"), r.stderr
  return r

# a store that fails the way a full disk does, after a few writes (portable: no tmpfs needed)
DISK_FULL_AFTER = """
import sqlite3, replay.store.sqlite as S
_real, _n = S.Store.write_batch, [0]
def _write(self, *a, **k):
  _n[0] += 1
  if _n[0] > {after}: raise sqlite3.OperationalError("database or disk is full")
  return _real(self, *a, **k)
S.Store.write_batch = _write
import replay.record.recorder as rc; rc.FLUSH_EVERY = 4
"""
# the capture's failure handling taken out: what the user saw before (the error raised out of realize())
NO_HANDLING = "import replay.record.recorder as rc2; rc2.Capturer._fail = lambda self, e, doing: (_ for _ in ()).throw(e)\n"

def _same_as_uncaptured(r, uncaptured, db: Path) -> None:
  assert (r.returncode, r.stdout) == (uncaptured.returncode, uncaptured.stdout), (r.returncode, r.stdout, r.stderr)
  assert r.stderr.count("replay: warning: capture into") == 1 and str(db) in r.stderr and "Traceback" not in r.stderr, r.stderr

def test_a_full_disk_under_a_capturing_program_changes_nothing_it_does(tmp_path, uncaptured):
  db = tmp_path / "x.db"
  r = _run(tmp_path, db, plant=DISK_FULL_AFTER.format(after=2))
  _same_as_uncaptured(r, uncaptured, db)
  assert "database or disk is full" in r.stderr and "kept: the 8 capture(s) written before" in r.stderr, r.stderr
  # what was written before the failure is a readable store
  assert sqlite3.connect(db).execute("SELECT count(*) FROM captures").fetchone()[0] == 8
  # planted: without the handling the program dies in its own realize() (the bug)
  bad = _run(tmp_path, tmp_path / "y.db", plant=DISK_FULL_AFTER.format(after=2) + NO_HANDLING)
  assert bad.returncode != 3 and "database or disk is full" in bad.stderr and "Traceback" in bad.stderr, bad.stderr

def test_an_encoding_error_stops_capture_not_the_program(tmp_path, uncaptured):
  db = tmp_path / "x.db"
  plant = ("import replay.levels as L\n"
           "def _boom(*a, **k): raise ValueError('cannot encode')\n"
           "for _n in L.LEVELS: type(L.get(_n)).write = _boom\n")
  r = _run(tmp_path, db, plant=plant)
  _same_as_uncaptured(r, uncaptured, db)
  assert "cannot encode" in r.stderr

def test_a_strict_runner_exits_2_after_the_program_ran_on(tmp_path, uncaptured):
  r = _run(tmp_path, tmp_path / "x.db", plant=DISK_FULL_AFTER.format(after=2), TINYSCHED_CAPTURE_STRICT="1")
  assert r.returncode == 2 and r.stdout == uncaptured.stdout, (r.returncode, r.stderr)

def test_a_locked_store_stops_capture_not_the_program(tmp_path, uncaptured):
  db = tmp_path / "x.db"
  # another writer holds the store's write lock for the whole run (past the store's busy timeout)
  plant = "import replay.store.sqlite as S; S.BUSY_TIMEOUT_S, S.LOCK_DEADLINE_S = 0.2, 1.0  # (not minutes of waiting in a test)\n"
  hold = textwrap.dedent(f"""
    import replay
    with replay.capture({str(db)!r}, label="first"): pass
    import sqlite3, time, sys
    c = sqlite3.connect({str(db)!r}, isolation_level=None); c.execute("BEGIN IMMEDIATE")
    print("locked", flush=True); time.sleep(600)
  """)
  holder = subprocess.Popen([sys.executable, "-c", hold], env=ENV, cwd=tmp_path, stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == "locked"
    r = _run(tmp_path, db, plant=plant)
  finally: holder.kill(); holder.wait()
  _same_as_uncaptured(r, uncaptured, db)
  assert "locked" in r.stderr

def _mount(path: Path, size: str) -> bool:
  path.mkdir(exist_ok=True)
  return os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True).returncode == 0

def test_a_real_full_tmpfs_and_a_read_only_one(tmp_path, uncaptured):
  full, ro = tmp_path / "full", tmp_path / "ro"
  if not _mount(full, "160k"): pytest.skip("needs root and tmpfs mounts")
  try:
    r = _run(tmp_path, full / "x.db")
    _same_as_uncaptured(r, uncaptured, full / "x.db")
    assert "full" in r.stderr, r.stderr
    assert _mount(ro, "1m")
    subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
    r = _run(tmp_path, ro / "x.db")
    _same_as_uncaptured(r, uncaptured, ro / "x.db")
    # the replay commands: `replay capture` refuses a store it cannot write before it runs anything (exit 2)
    res = CliRunner().invoke(cli, ["capture", "--db", str(ro / "x.db"), "--", sys.executable, "-c", "open('ran', 'w')"])
    assert res.exit_code == 2 and ("not writable" in res.output or "cannot be opened for writing" in res.output), res.output
    assert not (tmp_path / "ran").exists() and "Traceback" not in res.output
  finally:
    for m in (ro, full): subprocess.run(["umount", str(m)], capture_output=True)

def test_the_replay_commands_turn_storage_errors_into_exit_2(tmp_path, monkeypatch):
  import replay
  from tinysched import Tensor
  db = tmp_path / "s.db"
  with replay.capture(db, label="s"): (Tensor.arange(6).float() * 2).realize()
  import replay.cli.app as app
  def full(*a, **k): raise sqlite3.OperationalError("database or disk is full")
  monkeypatch.setattr(app, "stats", full)  # (any command: the group handles it)
  r = CliRunner().invoke(cli, ["stats", str(db)])
  assert r.exit_code == 2 and "database or disk is full" in r.output and str(db) in r.output and "next:" in r.output, r.output
  monkeypatch.setattr(app, "stats", lambda *a, **k: (_ for _ in ()).throw(OSError(28, "No space left on device", str(db))))
  r = CliRunner().invoke(cli, ["stats", str(db)])
  assert r.exit_code == 2 and "No space left on device" in r.output, r.output
  # an error text (SQLite's, a path's) is shown escaped: it cannot act on the terminal
  monkeypatch.setattr(app, "stats", lambda *a, **k: (_ for _ in ()).throw(sqlite3.OperationalError("disk \x1b]0;pwned\x07 full")))
  r = CliRunner().invoke(cli, ["stats", str(db)])
  assert r.exit_code == 2 and "\x1b" not in r.output and "\\x1b]0;pwned" in r.output, r.output
  # planted: the group's handling taken out, the raw error escapes (click: exit 1 and a traceback)
  monkeypatch.setattr(app, "stats", full)
  from replay.cli import common
  monkeypatch.setattr(common.Commands, "invoke", lambda self, ctx: common.click.Group.invoke(self, ctx))
  r = CliRunner().invoke(cli, ["stats", str(db)])
  assert r.exit_code == 1 and isinstance(r.exception, sqlite3.Error)

PROBE_EXITS = "import tinysched.runtime.opencl as O; O._probe_here = lambda d: __import__('os')._exit(1)\n"

def test_a_compiler_that_exits_while_probing_the_device_ends_only_a_child(tmp_path):
  pytest.importorskip("pyopencl")
  from tinysched.runtime.opencl import list_devices
  if not list_devices(): pytest.skip("no OpenCL device")
  # PoCL calls exit(1) when its cache disk is full; the plant does the same in the probe, wherever it runs
  code = "import sys; sys.path.insert(0, %r)\n%s\nfrom tinysched.device import Device\nDevice['OPENCL']\nprint('opened', flush=True)\n"
  plant_dir = tmp_path / "plant"
  plant_dir.mkdir()
  (plant_dir / "sitecustomize.py").write_text(PROBE_EXITS)  # (loaded by the probe's child too)
  env = {**ENV, "TINYSCHED_CACHE": str(tmp_path / "cache"), "PYTHONPATH": os.pathsep.join([str(plant_dir), str(ROOT)])}
  r = subprocess.run([sys.executable, "-c", code % (str(ROOT), "")], env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0 and "opened" in r.stdout, (r.returncode, r.stdout, r.stderr)
  # planted: the probe asked in this process, as before: the program is gone, exit 1, without a word
  inproc = "import tinysched.runtime.opencl as O; O._run_fp16_probe = O._probe_here"
  r = subprocess.run([sys.executable, "-c", code % (str(ROOT), inproc)], env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 1 and "opened" not in r.stdout, (r.returncode, r.stdout)
