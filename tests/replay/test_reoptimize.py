"""`replay check --reoptimize` (issue 16 item 3) and named targets without devices (item 4).

Plain `check` replays the opts stored with a program capture (a renderer check): a heuristic change is invisible to it.
`--reoptimize` chooses the opts again with the current heuristic for the stored AST and target; the host facts the
heuristic reads (compute_units), kept out of the keyed input, come from the row's extra["host"]."""
import json, os, sqlite3, subprocess, sys
import pytest
from click.testing import CliRunner
import replay
from replay.check.pool import check
from replay.cli.app import main as cli
from replay.levels.program import NO_HOST_NOTE
from tinysched import Tensor
from tinysched.codegen import heuristic as H
from tinysched.codegen import program as P
from tinysched.codegen.target import TARGETS, named_target, UnknownTargetError

GPU, CPU = TARGETS["nvidia-like-gpu"], TARGETS["pocl-cpu"]

def _asts():
  Tensor.manual_seed(7)
  x, w, big = Tensor.rand(64, 128), Tensor.rand(128, 64), Tensor.rand(4096, 256)
  # a matmul (tiles), elementwise (upcast, work-group), row and column reduces, and a reduce whose GPU choice depends
  # on compute_units (4096 outputs: fewer than 132 * 256, more than 1 * 256)
  outs = [(x @ w).relu(), x * 2 + 1, x.sum(1), x.sum(0), big.sum(1), (big * 3).exp()]
  return [si.ast for o in outs for si in o.schedule()]

@pytest.fixture(scope="module")
def prog_db(tmp_path_factory):
  db = tmp_path_factory.mktemp("reopt") / "prog.db"
  asts = _asts()
  with replay.capture(db, label="reopt", levels=("program",)):
    for ast in asts:
      for t in (GPU, CPU): P.to_program(ast, None, t)
  return str(db)

def _changed(rep): return [r for r in rep.results if r.outcome == "changed"]

def test_identical_without_a_plant(prog_db):
  plain, reopt = check([prog_db], jobs=1), check([prog_db], jobs=1, reoptimize=True)
  assert plain.exit_code() == 0 and reopt.exit_code() == 0, (plain.counts(), reopt.counts(), [r.signature for r in _changed(reopt)])
  assert len(reopt.results) == 12 and not any(r.note for r in reopt.results)

def test_host_facts_are_in_extra_not_in_the_key(prog_db):
  with sqlite3.connect(prog_db) as c: extras = [json.loads(e) for (e,) in c.execute("select extra from captures")]
  assert sorted(e["host"]["compute_units"] for e in extras) == [2] * 6 + [132] * 6
  assert all("compute_units" not in e["target"] for e in extras)  # the keyed input stays host-independent

def test_gpu_work_group_change_shows_under_reoptimize_only(prog_db, monkeypatch):
  orig = H._locals
  monkeypatch.setattr(H, "_locals", lambda k, opts, t, budget: orig(k, opts, t, budget // 2))  # plant: half the work-group
  assert check([prog_db], jobs=1).exit_code() == 0  # the stored opts: the renderer did not change
  rep = check([prog_db], jobs=1, reoptimize=True)
  changed = _changed(rep)
  assert changed and rep.exit_code() == 1
  for r in changed:
    assert r.text_diff.startswith("opts changed: ") and "LOCAL(" in r.text_diff.splitlines()[0], r.text_diff[:200]
    assert r.signature.startswith("program: opts changed: ") and " -> " in r.signature
    assert "--- stored" in r.text_diff  # and the source diff follows
  assert "opts changed: LOCAL(0,256) -> LOCAL(0,128)" in {r.text_diff.splitlines()[0] for r in changed}

def test_cpu_tiling_change_shows_under_reoptimize(prog_db, monkeypatch):
  monkeypatch.setattr(H, "_matmul_axes", lambda k: None)  # plant: the heuristic no longer sees matmuls (no register tiles)
  assert check([prog_db], jobs=1).exit_code() == 0
  sigs = [r.signature for r in _changed(check([prog_db], jobs=1, reoptimize=True))]
  assert any(s.startswith("program: opts changed: UPCAST(0,8), UPCAST(1,16) -> ") for s in sigs), sigs  # the CPU tiles

def test_compute_units_from_extra_reproduce_the_gpu_choice(prog_db, monkeypatch):
  from replay.levels import program as runner  # the program level reads the recorded host facts
  assert check([prog_db], jobs=1, reoptimize=True).exit_code() == 0
  monkeypatch.setattr(runner, "row_host", lambda row: {})  # plant: ignore the recorded host facts (compute_units=1)
  changed = _changed(check([prog_db], jobs=1, reoptimize=True))
  assert changed, "without the recorded compute_units the GPU choice should differ (a false change)"
  assert all(json.loads(sqlite3.connect(prog_db).execute("select extra from captures where seq=?", (r.seq,)).fetchone()[0])["host"]
             ["compute_units"] == 132 for r in changed)

def test_rows_without_host_facts_are_replayed_with_stored_opts_and_say_so(prog_db, tmp_path, monkeypatch):
  old = tmp_path / "old.db"
  with sqlite3.connect(prog_db) as src, sqlite3.connect(old) as dst: src.backup(dst)
  with sqlite3.connect(old) as c:  # as captured before extra["host"] was recorded
    for rid, seq, e in c.execute("select run_id, seq, extra from captures").fetchall():
      d = json.loads(e); d.pop("host")
      c.execute("update captures set extra=? where run_id=? and seq=?", (json.dumps(d), rid, seq))
  orig = H._locals
  monkeypatch.setattr(H, "_locals", lambda k, opts, t, budget: orig(k, opts, t, budget // 2))
  rep = check([str(old)], jobs=1, reoptimize=True)
  assert rep.exit_code() == 0 and all(r.note == NO_HOST_NOTE for r in rep.results)
  r = CliRunner().invoke(cli, ["check", str(old), "-j", "1", "--reoptimize"])
  assert r.exit_code == 0 and f"12 program row(s) {NO_HOST_NOTE}" in r.output, r.output

def test_cli_reoptimize(prog_db, monkeypatch):
  assert CliRunner().invoke(cli, ["check", prog_db, "-j", "1", "--reoptimize"]).exit_code == 0
  orig = H._locals
  monkeypatch.setattr(H, "_locals", lambda k, opts, t, budget: orig(k, opts, t, budget // 2))
  r = CliRunner().invoke(cli, ["check", prog_db, "-j", "1", "--reoptimize"])
  assert r.exit_code == 1 and "opts changed: LOCAL(0,256) -> LOCAL(0,128)" in r.output, r.output
  assert CliRunner().invoke(cli, ["check", prog_db, "-j", "1"]).exit_code == 0

# *** named targets (item 4) ***

def test_registry_and_unknown_names():
  assert {"pocl-cpu", "nvidia-like-gpu"} <= set(TARGETS) and all(TARGETS[n].name == n for n in TARGETS)
  assert GPU.is_gpu and GPU.has_fp16 and GPU.local_mem_size == 49152 and GPU.max_work_group_size == 1024 and not CPU.is_gpu
  with pytest.raises(UnknownTargetError, match="'nope'.*known targets: pocl-cpu, nvidia-like-gpu"): named_target("nope")

@pytest.mark.parametrize("cmd", [["suite", "--models", "mlp_digits", "--db", "{db}", "--target", "nope"],
                                 ["capture", "--db", "{db}", "--target", "nope", "--", sys.executable, "-c", "raise SystemExit(0)"]])
def test_unknown_target_fails_at_the_start(cmd, tmp_path):
  db = tmp_path / "x.db"
  r = CliRunner().invoke(cli, [c.replace("{db}", str(db)) for c in cmd])
  assert r.exit_code == 2 and "unknown target 'nope'" in r.output and "pocl-cpu, nvidia-like-gpu" in r.output, r.output
  assert not db.exists()  # nothing ran

def test_unknown_target_in_the_environment_exits_2(tmp_path):
  env = {**os.environ, "TINYSCHED_CAPTURE": str(tmp_path / "e.db"), "TINYSCHED_CAPTURE_TARGET": "nope"}
  r = subprocess.run([sys.executable, "-c", "import tinysched"], env=env, capture_output=True, text=True, timeout=120)
  assert r.returncode == 2 and "TINYSCHED_CAPTURE_TARGET='nope'" in r.stderr and "nvidia-like-gpu" in r.stderr, r.stderr

def _model():
  Tensor.manual_seed(3)
  x, w = Tensor.rand(32, 64), Tensor.rand(64, 16)
  return ((x @ w).relu().sum(1) + x.mean(1)).numpy(), (x * 2).exp().numpy()

def test_gpu_target_capture_on_this_machine(tmp_path, monkeypatch):
  db = tmp_path / "gpu.db"
  with replay.capture(db, label="gpu", levels=("program",), target=GPU): _model()  # runs on this machine's device
  with sqlite3.connect(db) as c: extras = [json.loads(e) for (e,) in c.execute("select extra from captures")]
  gpu_rows = [e for e in extras if e["host"]["name"] == "nvidia-like-gpu"]
  assert len(gpu_rows) >= 3 and all(e["target"]["local_mem_size"] == 49152 and e["target"]["is_gpu"] for e in gpu_rows)
  assert any(e["launch"]["local"] for e in gpu_rows)  # work-groups were chosen for the GPU
  assert check([str(db)], jobs=1).exit_code() == 0 and check([str(db)], jobs=1, reoptimize=True).exit_code() == 0
  orig = H._locals
  monkeypatch.setattr(H, "_locals", lambda k, opts, t, budget: orig(k, opts, t, budget // 4))  # plant: the GPU local size
  assert check([str(db)], jobs=1).exit_code() == 0
  changed = _changed(check([str(db)], jobs=1, reoptimize=True))
  assert changed and all("LOCAL(" in r.signature for r in changed)

def test_capture_target_from_the_environment(tmp_path):
  db = tmp_path / "env.db"
  code = "from tinysched import Tensor; Tensor.manual_seed(1); (Tensor.rand(64, 64).sum(1) * 2).numpy()"
  env = {**os.environ, "TINYSCHED_CAPTURE": str(db), "TINYSCHED_CAPTURE_TARGET": "nvidia-like-gpu", "TINYSCHED_CAPTURE_LEVELS": "program"}
  r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  with sqlite3.connect(db) as c: names = [json.loads(e)["host"]["name"] for (e,) in c.execute("select extra from captures")]
  assert "nvidia-like-gpu" in names
  assert check([str(db)], jobs=1).exit_code() == 0 and check([str(db)], jobs=1, reoptimize=True).exit_code() == 0

def test_one_input_two_hosts_are_replayed_apart(prog_db, tmp_path):
  """Rows with one input key but different host facts (two captures on two machines, one store) are replayed each with
  its own facts under --reoptimize, never one verdict copied to the other."""
  two = tmp_path / "two.db"
  with sqlite3.connect(prog_db) as src, sqlite3.connect(two) as dst: src.backup(dst)
  with sqlite3.connect(two) as c:
    rcols = [r[1] for r in c.execute("pragma table_info(runs)") if r[1] != "id"]
    c.execute(f"insert into runs ({', '.join(rcols)}) select {', '.join(rcols)} from runs")  # a second capture run
    (run2,) = c.execute("select max(id) from runs").fetchone()
    cols = [r[1] for r in c.execute("pragma table_info(captures)") if r[1] != "id"]
    rows = c.execute(f"select {', '.join(cols)} from captures").fetchall()
    for row in rows:
      d = dict(zip(cols, row))
      e = json.loads(d["extra"])
      if e["host"]["compute_units"] != 132: continue
      e["host"]["compute_units"] = 1  # the same GPU kind with one compute unit: another host
      d.update(run_id=run2, seq=d["seq"] + 1000, extra=json.dumps(e))
      c.execute(f"insert into captures ({', '.join(cols)}) values ({', '.join('?' * len(cols))})", [d[k] for k in cols])
  rep = check([str(two)], jobs=1, reoptimize=True)
  changed = _changed(rep)
  assert changed and all(r.seq > 1000 for r in changed), [(r.seq, r.signature) for r in changed]

def test_a_kernel_the_target_cannot_take_is_named_not_raised(tmp_path, capsys):
  import dataclasses
  from tinysched import dtypes
  no_fp64 = dataclasses.replace(GPU, name="gpu-without-fp64", has_fp64=False)
  db = tmp_path / "f64.db"
  with replay.capture(db, label="f64", levels=("program",), target=no_fp64):
    out = (Tensor.ones(8, 8, dtype=dtypes.float64) * 2).sum(1).numpy()  # the user's program runs on
  assert float(out[0]) == 16.0
  err = capsys.readouterr().err
  assert "capture target gpu-without-fp64:" in err and "could not be rendered for it" in err and "float64" in err, err

def test_opts_a_caller_gave_are_replayed_as_given(tmp_path, monkeypatch):
  """A test or a search that passes its own opts did not run the heuristic: --reoptimize must not re-choose them (that would
  report a 'heuristic change' nobody made), while the same kernel's heuristic row is re-chosen."""
  from tinysched.codegen import Opt, OptOps
  db = str(tmp_path / "given.db")
  ast = [si.ast for si in (Tensor.rand(4096, 256) * 3).exp().schedule() if si.ast.op.name == "SINK"][-1]  # GPU work-group: 256
  with replay.capture(db, label="given", levels=("program",)):
    P.to_program(ast, (Opt(OptOps.UPCAST, 0, 4),), GPU)  # given
    P.to_program(ast, None, GPU)                          # chosen by the heuristic
  with sqlite3.connect(db) as c: flags = sorted(bool(json.loads(e).get("opts_given")) for (e,) in c.execute("select extra from captures"))
  assert flags == [False, True]
  assert check([db], jobs=1, reoptimize=True).exit_code() == 0
  orig = H._locals
  monkeypatch.setattr(H, "_locals", lambda k, opts, t, budget: orig(k, opts, t, budget // 2))  # plant: a heuristic change
  changed = _changed(check([db], jobs=1, reoptimize=True))
  assert len(changed) == 1 and changed[0].text_diff.startswith("opts changed: ")  # only the heuristic's row
