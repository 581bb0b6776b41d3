"""`replay bisect GOOD BAD` on a temporary git repository of nine commits of this project: it names the commit that
changed a rule, skips the commit whose code cannot run, refuses a GOOD that does not reproduce the stores, and leaves
no worktree and no bisect state behind, also when interrupted by SIGINT or SIGTERM."""
from __future__ import annotations
import os, signal, subprocess, sys, time
from pathlib import Path
import pytest
from replay.store.sqlite import Store
from tests.replay.changes import capture_store
from tests.replay.test_commits import ROOT, History, copy_project, git, worktrees, _procs_under

# test data of the temporary repository (never in this project's code): while BISECT_TEST_HANG names a file and the
# checked-out commit has a file HANG, importing tinysched creates that file and hangs, so a test can interrupt a step
HANG_HOOK = '''
import os as _os
if _os.environ.get("BISECT_TEST_HANG") and _os.path.exists(_os.path.join(_os.path.dirname(__file__), "..", "HANG")):
  open(_os.environ["BISECT_TEST_HANG"], "w").close()
  import time as _time
  _time.sleep(120)
'''
# the rule change: one line added to views_down (a constant operand of ADD goes first)
ANCHOR = '  (UPat(Ops.REDUCE_AXIS, src=(UPat(Ops.REDUCE_AXIS, name="inner"),), name="outer"), fuse_reduces, "fuse_reduces"),\n'
RULE = ('  (UPat(Ops.ADD, name="x"), lambda x: x.replace(src=x.src[::-1]) if x.src[1].op is Ops.WHERE and x.src[0].op is not Ops.WHERE '
        'else None, "const_first"),\n')
KERNEL_AST = "tinysched/scheduling/kernel_ast.py"

def workload():
  from tinysched import Tensor
  Tensor.manual_seed(0)
  x = Tensor.rand(4, 8)
  (x + 1).realize()            # the kernel (and schedule) the rule changes
  (x * 3).sum(1).realize()     # unchanged

@pytest.fixture(scope="module")
def project(tmp_path_factory) -> dict:
  d = tmp_path_factory.mktemp("bisect")
  repo = d / "repo"
  copy_project(repo)
  with open(repo / "tinysched/__init__.py", "a") as f: f.write(HANG_HOOK)
  h = History(repo)
  commit, note, shas = h.commit, h.note, h.shas
  commit("c0: the project")
  (repo / "HANG").write_text(""); note(1); commit("c1: notes")
  note(2); commit("c2: notes")
  note(3); commit("c3: notes")
  with open(repo / "tinysched/dtype.py", "a") as f: f.write("\nraise ImportError('c4 broke the import')\n")
  commit("c4: a commit that cannot run")
  text = (repo / "tinysched/dtype.py").read_text()
  (repo / "tinysched/dtype.py").write_text(text.replace("\nraise ImportError('c4 broke the import')\n", ""))
  commit("c5: the import fixed")
  src = (repo / KERNEL_AST).read_text()
  assert src.count(ANCHOR) == 1
  (repo / KERNEL_AST).write_text(src.replace(ANCHOR, ANCHOR + RULE))
  commit("c6: ADD puts a constant operand first")
  note(7); commit("c7: notes")
  (repo / "HANG").unlink(); note(8); commit("c8: notes")
  # the baseline: captured with this checkout's code, which is c0's (c0 is a copy of it)
  db = capture_store(d / "base.db", workload, "tiny")
  s = Store(db, readonly=True)
  try: add = sorted(r["input_key"][:16] for r in s.captures() if "add" in (r["metadata"] or "") and r["level"] in ("kernel", "schedule"))
  finally: s.close()
  assert len(add) == 2
  return {"repo": repo, "c": shas, "db": db, "add": add}

# run this checkout's replay CLI (not the temporary repository's copy) inside the temporary repository
BOOT = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from replay.cli.app import main; main()"

def cli(project: dict, *args: str, env: dict | None = None, **kw) -> subprocess.Popen:
  return subprocess.Popen([sys.executable, "-c", BOOT, "bisect", *args], cwd=project["repo"], env={**os.environ, **(env or {})},
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)

def run(project: dict, *args: str) -> tuple[int, str]:
  p = cli(project, *args)
  out, _ = p.communicate(timeout=300)
  return p.returncode, out

def assert_clean(repo: Path, tmp: Path) -> None:
  assert worktrees(repo) == [f"worktree {repo}"], "a temporary worktree was left behind"
  assert not (repo / ".git/worktrees").exists() or not any((repo / ".git/worktrees").iterdir())
  assert not list((repo / ".git").glob("BISECT_*")) and git(repo, "for-each-ref", "refs/bisect") == "", "bisect state was left behind"
  assert subprocess.run(["git", "bisect", "log"], cwd=repo, capture_output=True).returncode != 0  # "We are not bisecting"
  assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
  assert tmp.is_dir() and not any(tmp.iterdir()), f"left in the temp dir: {list(tmp.iterdir())}"

def test_bisect_names_the_rule_commit_and_skips_the_broken_one(project, tmp_path):
  tmp = tmp_path / "wt"; tmp.mkdir()
  c = project["c"]
  rc, out = run(project, c[0], c[8], str(project["db"]), "--tmp-dir", str(tmp))
  assert rc == 0, out
  assert f"first bad commit: {c[6]} c6: ADD puts a constant operand first" in out
  shown = sorted(ln.split()[1] for ln in out.split("diverging captures there")[1].splitlines()[1:] if ln.startswith("  "))
  assert shown == project["add"], out  # exactly the kernel and the schedule of `x + 1`
  assert "2 capture(s) diverge at BAD" in out
  tested = {ln.split()[0]: ln for ln in out.split("commits tested:")[1].split("first bad commit")[0].splitlines() if ln.strip()}
  assert "skip (no report" in tested[c[4][:10]] and "c4 broke the import" in tested[c[4][:10]], out  # exit 125, with why
  assert ": good (" in tested[c[5][:10]] and ": bad (" in tested[c[6][:10]]
  assert c[0][:10] not in tested and c[8][:10] not in tested
  assert_clean(project["repo"], tmp)

def test_bisect_refuses_what_it_cannot_decide(project, tmp_path):
  tmp = tmp_path / "wt"; tmp.mkdir()
  c = project["c"]
  rc, out = run(project, c[7], c[8], str(project["db"]), "--tmp-dir", str(tmp))  # GOOD already has the rule change
  assert rc == 2 and "does not reproduce the stored outputs" in out and "the captures were made at" in out and "next:" in out, out
  assert_clean(project["repo"], tmp)
  rc, out = run(project, c[0], c[3], str(project["db"]), "--tmp-dir", str(tmp))  # nothing changed up to c3
  assert rc == 2 and "nothing diverges at BAD" in out and "next:" in out, out
  rc, out = run(project, c[8], c[0], str(project["db"]), "--tmp-dir", str(tmp))
  assert rc == 2 and "is not an ancestor of BAD" in out, out
  rc, out = run(project, c[0], c[8], str(tmp_path / "missing.db"), "--tmp-dir", str(tmp))
  assert rc == 2 and "missing.db" in out and "next:" in out, out
  assert_clean(project["repo"], tmp)

@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to find leftover processes")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_bisect_interrupted_cleans_up(project, tmp_path, sig):
  tmp = tmp_path / "wt"; tmp.mkdir()
  marker = tmp_path / "hanging"
  c = project["c"]
  p = cli(project, c[0], c[8], str(project["db"]), "--tmp-dir", str(tmp), env={"BISECT_TEST_HANG": str(marker)})
  try:
    deadline = time.monotonic() + 120
    while not marker.exists():  # a bisect step's replay has started (and hangs) in the worktree
      assert p.poll() is None and time.monotonic() < deadline, p.communicate()[0]
      time.sleep(0.1)
    assert len(worktrees(project["repo"])) == 2 and _procs_under(tmp)
    p.send_signal(sig)
    out, _ = p.communicate(timeout=60)
  finally:
    if p.poll() is None: p.kill()
  assert p.returncode == 2, out
  assert f"interrupted ({sig.name})" in out and "were removed" in out, out
  assert not _procs_under(tmp), "a replay or git process of the bisect survived"
  assert_clean(project["repo"], tmp)
