"""Per-kernel accept (`replay accept --key/--group`): exactly the named rows take the current code's output, every other
row stays byte-identical, the store records who/why at which commit (schema version 2, old stores still read), `replay
check` then passes on them and still fails on the rest, and nothing is written when anything cannot be accepted."""
from __future__ import annotations
import hashlib, json, os, shutil, signal, sqlite3, subprocess, sys
from pathlib import Path
import pytest
from click.testing import CliRunner
from replay.cli.app import main as cli
from replay.store.sqlite import Store
from tinysched.rewrite import graph_rewrite
from tests.replay.changes import patch_ast, swap_commutative

ROOT = Path(__file__).resolve().parents[2]
PLANTS = Path(__file__).resolve().parent / "plants"

def invoke(*args):
  return CliRunner().invoke(cli, [str(a) for a in args])

def sha(p: Path) -> str: return hashlib.sha256(p.read_bytes()).hexdigest()

def table(db: Path, name: str) -> list[tuple]:
  c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
  try: return c.execute(f"SELECT * FROM {name} ORDER BY 1").fetchall()
  finally: c.close()

def report(db: Path, tmp: Path, *extra) -> tuple[int, dict, str]:
  # (a cause budget no loaded machine reaches: the groups must not hang on how busy the machine is)
  r = invoke("check", db, "-j", "1", "--causes-budget", "600", "--report-json", tmp / "r.json", *extra)
  return r.exit_code, json.loads((tmp / "r.json").read_text()), r.output

@pytest.fixture
def store(db, tmp_path, monkeypatch) -> Path:
  """A copy of the replay tests' store (schema version 1), with a planted change that reorders ADD/MUL sources."""
  p = tmp_path / "base.db"
  shutil.copy(db, p)
  patch_ast(monkeypatch, lambda ast: graph_rewrite(ast, swap_commutative))
  return p

def test_key_accept_updates_exactly_the_named_rows(store, tmp_path):
  rc, rep, _ = report(store, tmp_path)
  assert rc == 1
  changed = sorted({(r["level"], r["input_key"]) for r in rep["results"] if r["outcome"] == "changed" and r["level"] == "kernel"})
  assert len(changed) >= 3
  (_, k1), (_, k2) = changed[0], changed[1]
  new = {r["input_key"]: r["new_key"] for r in rep["results"]}
  before = {t: table(store, t) for t in ("captures", "graphs", "runs")}
  r = invoke("accept", store, "--key", k1[:16], "--key", k2[:12], "-m", "reordered operands: the same numbers")
  assert r.exit_code == 0, r.output
  assert f"accepted kernel {k1[:16]}" in r.output and f"accepted kernel {k2[:16]}" in r.output
  rows = table(store, "captures")
  cols = [c[1] for c in sqlite3.connect(store).execute("PRAGMA table_info(captures)")]
  ik, ok = cols.index("input_key"), cols.index("output_key")
  named = [x for x in rows if x[ik] in (k1, k2)]
  assert named and all(x[ok] == new[x[ik]] for x in named)  # the current code's output
  # every other row byte-identical; runs untouched; every old payload kept (the new ones added)
  assert [x for x in rows if x[ik] not in (k1, k2)] == [x for x in before["captures"] if x[ik] not in (k1, k2)]
  assert table(store, "runs") == before["runs"]
  assert set(before["graphs"]) <= set(table(store, "graphs"))
  # who/why/which commit, and the version bump
  s = Store(store, readonly=True)
  try: log, version = s.accepts(), s.version()
  finally: s.close()
  assert version == 2 and sorted(a["input_key"] for a in log) == sorted(x[ik] for x in named)
  assert all(a["message"] == "reordered operands: the same numbers" and a["who"] and a["time"] for a in log)
  assert all(a["old_output_key"] != a["new_output_key"] == new[a["input_key"]] for a in log)
  assert all(a["git_commit"] and len(a["git_commit"]) == 40 for a in log)  # this checkout's commit
  # check: the named rows pass now, the rest still fail, and the report lists what was accepted
  rc, rep, out = report(store, tmp_path, "--report-md", tmp_path / "r.md")
  assert rc == 1
  outcome = {r["input_key"]: r["outcome"] for r in rep["results"]}
  assert outcome[k1] == outcome[k2] == "identical"
  assert {ik_ for lv, ik_ in changed[2:]} <= {k for k, o in outcome.items() if o == "changed"}
  assert f"accepted per kernel since the last full capture: {len(named)} row(s)" in out and "reordered operands" in out
  assert k1[:16] in (tmp_path / "r.md").read_text() and len(rep["accepted"]) == len(named)

def test_group_accept_and_what_is_refused(store, tmp_path, monkeypatch):
  # by shape the planted rule's rows are several groups; by cause (replay/check/causes.py, the default) one, named by it
  assert len(report(store, tmp_path, "--level", "kernel", "--no-causes")[1]["groups"]) >= 2
  rc, rep, _ = report(store, tmp_path, "--level", "kernel")
  groups = rep["groups"]
  assert rc == 1 and groups[0]["signature"].startswith("cause: ")
  first = groups[0]
  untouched = sha(store)
  # refused, and the store is byte-identical afterwards: no message, an unknown, malformed or ambiguous key, a bad group
  for args, said in ((["--key", first["members"][0][:16]], "needs --message"), (["--key", "0" * 16, "-m", "x"], "no capture in"),
                     (["--key", "XYZ", "-m", "x"], "not a key prefix"), (["--group", "99", "-m", "x"], "there are"),
                     (["--group", "no such signature", "-m", "x"], "no group's signature"), (["--key", "a", "--models", "m", "-m", "x"], "--models")):
    r = invoke("accept", store, *args)
    assert r.exit_code == 2 and said in r.output and "next:" in r.output, (args, r.output)
  firsts = [k[0] for k in sorted({x["input_key"] for x in rep["results"]})]
  if shared := sorted({c for c in firsts if firsts.count(c) > 1}):
    r = invoke("accept", store, "--key", shared[0], "-m", "x")
    assert r.exit_code == 2 and "ambiguous" in r.output, r.output
  assert sha(store) == untouched
  # a group by its signature (the cause that names it) and by its number (the same group: named twice, accepted once)
  r = invoke("accept", store, "--level", "kernel", "--group", first["signature"], "--group", "1", "-m", "one cause")
  assert r.exit_code == 0, r.output
  rc, rep2, _ = report(store, tmp_path, "--level", "kernel")
  outcome = {x["input_key"]: x["outcome"] for x in rep2["results"]}
  assert all(outcome[k] == "identical" for k in first["members"])
  assert rc == (1 if len(groups) > 1 else 0)
  # a row the current code raises on is not accepted, and nothing is written
  accepted_state = sha(store)
  monkeypatch.undo()
  def broken(ast): raise RuntimeError("planted")
  patch_ast(monkeypatch, broken)
  r = invoke("accept", store, "--key", groups[-1]["members"][0][:16], "-m", "x")
  assert r.exit_code == 2 and "raises on it" in r.output, r.output
  assert sha(store) == accepted_state

def test_accept_killed_mid_transaction_changes_nothing(db, tmp_path):
  p = tmp_path / "base.db"
  shutil.copy(db, p)
  before = sha(p)
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PLANTS), str(ROOT), os.environ.get("PYTHONPATH", "")]),
         "TINYSCHED_TEST_PLANT": "swap", "REPLAY_PAUSE_AT": "accept:updated"}
  proc = subprocess.Popen([sys.executable, "-m", "replay.cli", "accept", str(p), "--level", "kernel", "--group", "1", "-m", "x"],
                          env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)
  try:
    assert "REPLAY-PAUSED accept:updated" in proc.stderr.readline()  # the rows are updated inside the open transaction
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
  finally:
    if proc.poll() is None: proc.kill()
  s = Store(p, readonly=True)
  try: assert s.version() == 1 and s.accepts() == []
  finally: s.close()
  c = sqlite3.connect(p); c.execute("PRAGMA journal_mode=DELETE"); c.close()  # the hot journal rolled back by the next open
  assert sha(p) == before

# *** a heuristic change, accepted row by row as the gate replays it (--reoptimize) ***

@pytest.fixture
def program_store(tmp_path) -> Path:
  """Program rows of two matmuls and an elementwise kernel, rendered for the NVIDIA-like target (its heuristic tiles the
  matmuls), with the host facts --reoptimize needs."""
  import replay
  from tinysched import Tensor
  from tinysched.codegen.target import NVIDIA_LIKE_GPU
  p = tmp_path / "programs.db"
  with replay.capture(p, label="mm", levels=("program",), target=NVIDIA_LIKE_GPU):
    Tensor.manual_seed(5)
    a, b = Tensor.rand(64, 128), Tensor.rand(128, 64)
    (a @ b).realize()
    (b @ a).realize()
    (a * 2 + 1).realize()
  return p

@pytest.mark.parametrize("stored_opts", [False, True])
def test_a_heuristic_change_is_accepted_by_group_as_the_gate_replays_it(program_store, tmp_path, monkeypatch, stored_opts):
  """The gate replays program rows with --reoptimize: a heuristic change shows there (not with the stored opts), and
  `replay accept --group 1` accepts exactly that group's rows, with the launch sizes of the new source, so the gate passes
  afterwards (and the execution check runs the accepted source as it was launched). Planted: the accept replaying with
  the stored opts (--stored-opts, the behaviour before) finds nothing to accept."""
  from tinysched.codegen import heuristic
  from tinysched.codegen.program import to_program
  from tinysched.codegen.target import NVIDIA_LIKE_GPU
  from replay import levels
  from replay.levels.program import launch_json
  monkeypatch.setattr(heuristic, "_gpu_matmul", lambda *a: False)  # the planted heuristic change: no matmul tiles
  rc, rep, _ = report(program_store, tmp_path)
  assert rc == 0 and {r["outcome"] for r in rep["results"]} == {"identical"}  # the stored opts render as before
  rc, rep, out = report(program_store, tmp_path, "--reoptimize")
  changed = {r["input_key"] for r in rep["results"] if r["outcome"] == "changed"}
  assert rc == 1 and len(changed) == 2 and "opts changed" in out, out
  groups = [g for g in rep["groups"] if g["outcome"] == "changed"]
  first = set(groups[0]["members"])
  untouched = {r["input_key"]: r for r in rep["results"] if r["input_key"] not in changed}
  r = invoke("accept", program_store, "--group", "1", "-m", "no matmul tiles", *(["--stored-opts"] if stored_opts else []))
  if stored_opts:  # as before: the gate's change cannot be accepted, by group or by key
    assert r.exit_code == 2 and "there are 0 group(s)" in r.output, r.output
    r = invoke("accept", program_store, "--key", sorted(changed)[0][:16], "-m", "no matmul tiles", "--stored-opts")
    assert r.exit_code == 0 and "nothing to accept" in r.output, r.output
    assert report(program_store, tmp_path, "--reoptimize")[0] == 1
    return
  assert r.exit_code == 0 and r.output.count("accepted program") == len(first) >= 1, r.output
  rc, rep, out = report(program_store, tmp_path, "--reoptimize")  # exactly the group's rows were accepted
  assert {x["input_key"] for x in rep["results"] if x["outcome"] == "changed"} == changed - first, out
  while rc == 1:  # the next group is group 1 now
    assert invoke("accept", program_store, "--group", "1", "-m", "no matmul tiles").exit_code == 0
    rc, rep, out = report(program_store, tmp_path, "--reoptimize")
  assert rc == 0 and {x["outcome"] for x in rep["results"]} == {"identical"}, out
  assert {x["input_key"]: x["new_key"] for x in rep["results"] if x["input_key"] in untouched} == \
         {k: x["new_key"] for k, x in untouched.items()}
  s = Store(program_store, readonly=True)
  try:
    for row in s.captures(level="program"):
      if row["input_key"] not in changed: continue
      doc = levels.get("program").decode_input(s.blob(row["input_key"]))
      assert json.loads(row["extra"])["launch"] == launch_json(to_program(doc.roots()[0], None, NVIDIA_LIKE_GPU))
  finally: s.close()
