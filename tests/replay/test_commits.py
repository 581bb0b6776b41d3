"""`replay commits` and `replay accept` on a temporary git repository holding commits of this project."""
from __future__ import annotations
import json, os, queue, shutil, signal, subprocess, sys, threading, time
from pathlib import Path
import pytest
from click.testing import CliRunner
from replay.cli.app import main as cli
import replay.baseline.accept as C
import replay.baseline.commits as commits
from replay.baseline.history import history as _history

ROOT = Path(__file__).resolve().parents[2]

# a fast stand-in for the real model suite: the real one is slower than these tests may be
FAKE_SUITE = '''"""Test model suite: a few small Tensor ops (and a model that only sleeps, for interrupt tests)."""
import os, time
from tinysched import Tensor

def tiny(quick: bool = True) -> dict:
  Tensor.manual_seed(0)
  x, w = Tensor.rand(4, 8), Tensor.rand(8, 3)
  (x * 3).realize()
  (x + 1).realize()
  (x @ w).relu().sum(1).realize()
  (x.exp() + x.max(1, keepdim=True)).realize()
  return {"kernels": 6}

def slow(quick: bool = True) -> dict:
  print("slow model started", flush=True)
  time.sleep(60)
  return {}

SUITE = {"tiny": tiny, "slow": slow}

def available(name: str):
  if name == "slow" and not os.environ.get("REPLAY_TEST_SLOW"): return "set REPLAY_TEST_SLOW=1 to run it"
  return None
'''

# the planted scheduler change: one more rule in views_down (a constant operand of ADD goes first)
PLANTED = '''

# planted by tests/replay/test_commits.py: a constant operand of ADD goes first
views_down = views_down + PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: x.replace(src=x.src[::-1])
  if x.src[1].op is Ops.WHERE and x.src[0].op is not Ops.WHERE else None, "planted_const_first")], name="planted")
'''

def git(repo: Path, *args: str) -> str:
  r = subprocess.run(["git", "-c", "user.name=replay-test", "-c", "user.email=test@example.com", *args], cwd=repo,
                     capture_output=True, text=True, check=True)
  return r.stdout.strip()

class History:
  """A temporary git repository built commit by commit: `commit(msg)` records the tree as it is, `note(i)` changes a
  file no code reads (a commit that changes nothing replay sees); `shas` in order."""
  def __init__(self, repo: Path) -> None:
    self.repo, self.shas = repo, []
    git(repo, "init", "-q")
  def commit(self, msg: str) -> None:
    git(self.repo, "add", "-A")
    git(self.repo, "commit", "-qm", msg)
    self.shas.append(git(self.repo, "rev-parse", "HEAD"))
  def note(self, i: int) -> None: (self.repo / "NOTES").write_text(f"note {i}\n")

def copy_project(repo: Path) -> None:
  """This checkout's tinysched/ (without its models), replay/ and pyproject.toml (the files git knows) into `repo`."""
  files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", "tinysched", "replay", "pyproject.toml"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\0")
  for f in files:
    src = ROOT / f
    if not f or not src.is_file() or f.startswith("tinysched/models/") or "__pycache__" in f: continue
    (repo / f).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, repo / f)

@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> dict:
  """c0: this project without a model suite; c1: + the fake suite; c2: + the planted scheduler rule (HEAD)."""
  repo = tmp_path_factory.mktemp("commits") / "repo"
  copy_project(repo)
  git(repo, "init", "-q")
  git(repo, "add", "-A")
  git(repo, "commit", "-qm", "c0: no model suite")
  (repo / "tinysched/models").mkdir()
  (repo / "tinysched/models/__init__.py").write_text("")
  (repo / "tinysched/models/suite.py").write_text(FAKE_SUITE)
  git(repo, "add", "-A")
  git(repo, "commit", "-qm", "c1: fake model suite")
  with open(repo / "tinysched/scheduling/kernel_ast.py", "a") as f: f.write(PLANTED)
  git(repo, "commit", "-qam", "c2: planted scheduler rule")
  return {"path": repo, "c0": git(repo, "rev-parse", "HEAD~2"), "c1": git(repo, "rev-parse", "HEAD~1"), "c2": git(repo, "rev-parse", "HEAD")}

def worktrees(repo: Path) -> list[str]:
  return [ln for ln in git(repo, "worktree", "list", "--porcelain").splitlines() if ln.startswith("worktree ")]

def assert_clean(repo: Path, tmp: Path) -> None:
  assert worktrees(repo) == [f"worktree {repo}"], "a temporary worktree was left behind"
  assert not (repo / ".git/worktrees").exists() or not any((repo / ".git/worktrees").iterdir())
  assert tmp.is_dir() and not any(tmp.iterdir()), f"left in the temp dir: {list(tmp.iterdir())}"

def invoke(repo: Path, monkeypatch, *args: str):
  monkeypatch.chdir(repo)
  return CliRunner().invoke(cli, [str(a) for a in args])

def test_commits_report_shows_exactly_the_planted_change(repo, tmp_path, monkeypatch):
  tmp = tmp_path / "wt"; tmp.mkdir()
  r = invoke(repo["path"], monkeypatch, "commits", repo["c1"], repo["c2"], "--tmp-dir", tmp, "--report-json", tmp_path / "r.json",
             "--report-md", tmp_path / "r.md", "--junit", tmp_path / "r.xml")
  assert r.exit_code == 1, r.output
  assert "capturing tiny" in r.output and "slow: skipped" in r.output  # the whole suite of HEAD, skips said
  doc = json.loads((tmp_path / "r.json").read_text())
  changed = [x for x in doc["results"] if x["outcome"] == "changed"]
  # exactly the kernel made by `x + 1` and the schedule holding it: nothing else moved, nothing appeared or vanished
  assert sorted(x["level"] for x in changed) == ["kernel", "schedule"]
  assert all("add" in (x["metadata"] or "") and not x["reason"] for x in changed)
  k = next(x for x in changed if x["level"] == "kernel")
  assert {c["path"].split("STORE.src[2].")[-1] for c in k["changes"]} == {"ADD.src[0]", "ADD.src[1]"}
  assert "WHERE" in k["text_diff"] and "LOAD" in k["text_diff"]
  assert doc["summary"]["identical"] >= 6 and doc["summary"]["error"] == doc["summary"]["incompatible"] == 0
  assert "kernel 6 -> 6" in r.output and "changed: 2" in r.output
  assert "process replay" in (tmp_path / "r.md").read_text() and "<failure" in (tmp_path / "r.xml").read_text()
  assert_clean(repo["path"], tmp)

def test_commits_same_code_is_identical_and_keep(repo, tmp_path, monkeypatch):
  tmp = tmp_path / "wt"; tmp.mkdir()
  r = invoke(repo["path"], monkeypatch, "commits", repo["c1"], repo["c1"], "--models", "tiny", "--tmp-dir", tmp, "--keep")
  assert r.exit_code == 0, r.output
  assert "every capture replays identically" in r.output and "kept worktrees" in r.output
  assert len(worktrees(repo["path"])) == 3 and list(tmp.iterdir())
  kept = next(tmp.iterdir())
  for w in ("base", "head"): git(repo["path"], "worktree", "remove", "--force", str(kept / w))
  shutil.rmtree(kept)
  assert_clean(repo["path"], tmp)

def test_commits_without_runner_uses_current_checkout(repo, tmp_path, monkeypatch):
  tmp = tmp_path / "wt"; tmp.mkdir()
  r = invoke(repo["path"], monkeypatch, "commits", repo["c0"], "HEAD", "--models", "tiny", "--tmp-dir", tmp)
  assert r.exit_code == 1, r.output
  assert "BASE" in r.output and "has no suite runner (tinysched/models/suite.py missing)" in r.output
  assert "using the current checkout's runner" in r.output and "tinysched/models/suite.py" in r.output
  assert "changed: 2" in r.output
  assert_clean(repo["path"], tmp)

def test_commits_bad_ref_says_what_to_do(repo, tmp_path, monkeypatch):
  tmp = tmp_path / "wt"; tmp.mkdir()
  r = invoke(repo["path"], monkeypatch, "commits", "no-such-branch", "HEAD", "--tmp-dir", tmp)
  assert r.exit_code == 2 and "is not a commit" in r.output and "next:" in r.output
  r = invoke(repo["path"], monkeypatch, "commits", repo["c1"], "HEAD", "--models", "nope", "--tmp-dir", tmp)
  assert r.exit_code == 2 and "unknown model(s) ['nope']" in r.output and "HEAD's has tiny, slow" in r.output, r.output
  assert_clean(repo["path"], tmp)

def test_commits_that_compare_nothing_fail(repo, tmp_path, monkeypatch):
  # every model skipped at both commits (a missing optional package): nothing was compared, which must not pass
  tmp = tmp_path / "wt"; tmp.mkdir()
  monkeypatch.delenv("REPLAY_TEST_SLOW", raising=False)
  r = invoke(repo["path"], monkeypatch, "commits", repo["c1"], repo["c2"], "--models", "slow", "--tmp-dir", tmp)
  assert r.exit_code == 2 and "nothing was compared" in r.output and "skipped: slow (set REPLAY_TEST_SLOW=1" in r.output, r.output
  assert_clean(repo["path"], tmp)

def test_commits_ctrl_c_removes_worktrees(repo, tmp_path, monkeypatch):
  tmp = tmp_path / "wt"; tmp.mkdir()
  calls = []
  def interrupted(name, db, **kw):  # BASE is captured, then Ctrl-C arrives while HEAD is being captured
    calls.append(kw["cwd"])
    assert Path(kw["cwd"]).is_dir() and len(worktrees(repo["path"])) == 3
    raise KeyboardInterrupt
  monkeypatch.setattr(commits, "run_model", interrupted)
  r = invoke(repo["path"], monkeypatch, "commits", repo["c1"], repo["c2"], "--models", "tiny", "--tmp-dir", tmp)
  assert r.exit_code == 2 and "interrupted" in r.output and "worktrees were removed" in r.output, r.output
  assert calls
  assert_clean(repo["path"], tmp)

def _procs_under(tmp: Path) -> list[int]:
  out = []
  for p in Path("/proc").iterdir():
    if not p.name.isdigit(): continue
    try: cwd = os.readlink(p / "cwd")
    except OSError: continue
    if cwd.startswith(str(tmp)): out.append(int(p.name))
  return out

@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to find leftover processes")
def test_commits_sigterm_removes_worktrees_and_stops_the_model(repo, tmp_path):
  tmp = tmp_path / "wt"; tmp.mkdir()
  env = {**os.environ, "REPLAY_TEST_SLOW": "1", "PYTHONUNBUFFERED": "1"}
  proc = subprocess.Popen([sys.executable, "-m", "replay.cli", "commits", repo["c1"], repo["c2"], "--models", "slow", "--tmp-dir", str(tmp)],
                          cwd=repo["path"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  lines: queue.Queue = queue.Queue()
  threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout], daemon=True).start()
  out, deadline = [], time.monotonic() + 60
  try:
    while not any("capturing slow" in ln for ln in out):
      assert time.monotonic() < deadline and proc.poll() is None, "".join(out)
      try: out.append(lines.get(timeout=0.2))
      except queue.Empty: pass
    time.sleep(0.5)  # the model process is running inside the BASE worktree now
    assert len(worktrees(repo["path"])) == 3 and _procs_under(tmp)
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=30)
  finally:
    if proc.poll() is None: proc.kill()
  time.sleep(0.2)
  while not lines.empty(): out.append(lines.get())
  text = "".join(out)
  assert rc == 2, text
  assert "interrupted (SIGTERM)" in text and "worktrees were removed" in text
  assert not _procs_under(tmp), "the model process survived"
  assert_clean(repo["path"], tmp)

def history(db: Path):
  return _history([db])

def test_accept_replaces_baseline_and_writes_readme(repo, tmp_path, monkeypatch):
  r = invoke(repo["path"], monkeypatch, "accept", "--models", "tiny")
  assert r.exit_code == 0, r.output
  cap = repo["path"] / "captures"
  assert (cap / "tiny.db").is_file() and not list(cap.glob(".replay-accept-*")) and not list(repo["path"].glob(".replay-accept-*"))
  assert "tiny: new store" in r.output and "git add captures/tiny.db captures/README.md" in r.output
  readme = (cap / "README.md").read_text()
  assert repo["c2"] in readme and "(clean working tree)" in readme and "| `tiny.db` | tiny |" in readme and "replay accept" in readme
  assert f"`{repo['c2'][:10]}`" in readme
  # the store is self-contained (no WAL beside it) and holds the suite's captures
  assert not (cap / "tiny.db-wal").exists()
  assert C.store_info(cap / "tiny.db")["levels"]["kernel"] == 6
  # the new baseline was timed for the perf history, at the accepted commit (the new stores do not make it dirty)
  assert "timing" in r.output and "perf history measurement 1" in r.output, r.output
  points = [(p.git_commit, p.git_dirty) for s in history(cap / "tiny.db").series for p in s.points]
  assert len(points) >= 6 and set(points) == {(repo["c2"], 0)}  # (each kernel at least; program source only on OpenCL)
  # accepting the same code again: nothing changed against the new baseline; the history is carried over and grows
  r = invoke(repo["path"], monkeypatch, "accept", "--models", "tiny")
  assert r.exit_code == 0 and "(unchanged)" in r.output, r.output
  assert "perf history carried over" in r.output and "perf history measurement 2" in r.output, r.output
  assert {len(s.points) for s in history(cap / "tiny.db").series} == {2}
  # --no-perf: carried over, nothing timed
  r = invoke(repo["path"], monkeypatch, "accept", "--models", "tiny", "--no-perf")
  assert r.exit_code == 0 and "perf history carried over" in r.output and "timing" not in r.output, r.output
  assert {len(s.points) for s in history(cap / "tiny.db").series} == {2}
  shutil.rmtree(cap)

def test_accept_failure_keeps_the_baseline(repo, tmp_path, monkeypatch):
  cap = repo["path"] / "captures"
  cap.mkdir(exist_ok=True)
  (cap / "tiny.db").write_bytes(b"old baseline")
  r = invoke(repo["path"], monkeypatch, "accept", "--models", "tiny,nope")
  assert r.exit_code == 2 and "nope" in r.output and "baseline" in r.output and "next:" in r.output, r.output
  assert (cap / "tiny.db").read_bytes() == b"old baseline" and not list(repo["path"].glob(".replay-accept-*"))
  shutil.rmtree(cap)

LAST_FLAT = "5946e77"  # the last commit whose replay/ was flat modules (replay/suite.py, replay/recorder.py)

def test_a_checkout_from_before_the_packages_captures_with_its_own_runner_and_recorder(tmp_path):
  # `replay commits` across the re-layout: the old checkout has no replay.baseline.suite, and the installed entry point
  # names replay.record.recorder, which it lacks; its models must still run and record with its own modules
  root = Path(__file__).resolve().parents[2]
  if subprocess.run(["git", "cat-file", "-e", f"{LAST_FLAT}^{{commit}}"], cwd=root, capture_output=True).returncode != 0:
    pytest.skip(f"{LAST_FLAT} is not in this clone's history")
  from replay.baseline.checkouts import Worktrees, capture_tool_path, runner_module
  from replay.baseline.suite import run_model
  from replay.store.sqlite import Store
  with Worktrees(root, str(tmp_path)) as wt:
    old = wt.add("old", LAST_FLAT)
    (old / "tinysched/models/suite.py").write_text(FAKE_SUITE)
    assert runner_module(old) == "replay.suite" and capture_tool_path(old) is not None
    assert runner_module(root) == "replay.baseline.suite" and capture_tool_path(root) is None
    r = run_model("tiny", tmp_path / "old.db", quick=True, cwd=str(old), env={"PYTHONPATH": str(old)})
    assert r.get("ok") and not r.get("skipped"), r
    s = Store(tmp_path / "old.db", readonly=True)
    try: assert {"kernel", "schedule"} <= {row["level"] for row in s.captures()}  # (program rows too on an OpenCL device)
    finally: s.close()
