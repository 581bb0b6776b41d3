"""replay/git.py: how git is run, and what a failure looks like to each kind of caller."""
import subprocess
from pathlib import Path
import pytest
from replay import git as G
from replay.baseline.checkouts import CommitsError, repo_root, resolve

def _repo(tmp_path: Path) -> Path:
  repo = tmp_path / "repo"
  repo.mkdir()
  c = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
  subprocess.run([*c, "init", "-q"], cwd=repo, check=True)
  subprocess.run([*c, "commit", "-q", "--allow-empty", "-m", "first\n\nbody"], cwd=repo, check=True)
  return repo

def test_inside_a_repository(tmp_path):
  repo = _repo(tmp_path)
  (repo / "sub").mkdir()
  assert G.toplevel(repo / "sub") == repo.resolve()
  sha = G.commit_of(repo, "HEAD")
  assert sha is not None and len(sha) == 40 and G.git(["rev-parse", "HEAD"], repo) == sha
  assert G.query(["log", "-1", "--format=%B"], repo) == "first\n\nbody"  # stripped
  assert G.common_dir(repo) == repo / ".git"
  assert repo_root(repo / "sub") == repo.resolve() and resolve(repo, "HEAD") == sha

def test_outside_a_repository(tmp_path):
  assert G.toplevel(tmp_path) is None and G.commit_of(tmp_path, "HEAD") is None and G.query(["status"], tmp_path) is None
  with pytest.raises(G.GitError, match=r"`git status` failed in .*: fatal: not a git repository") as e: G.git(["status"], tmp_path)
  assert e.value.exit_code not in (None, 0)
  with pytest.raises(CommitsError, match="is not inside a git repository"): repo_root(tmp_path)

def test_unknown_ref(tmp_path):
  repo = _repo(tmp_path)
  assert G.commit_of(repo, "no-such-branch") is None
  with pytest.raises(CommitsError, match="'no-such-branch' is not a commit of"): resolve(repo, "no-such-branch")

def test_git_missing(tmp_path, monkeypatch):
  monkeypatch.setenv("PATH", str(tmp_path / "empty"))
  assert G.query(["status"], tmp_path) is None  # metadata: no git, no answer, no exception
  with pytest.raises(G.GitError, match=r"cannot run `git status`") as e: G.git(["status"], tmp_path)
  assert e.value.exit_code is None
  with pytest.raises(CommitsError, match="cannot run `git rev-parse --show-toplevel`") as ce: repo_root(tmp_path)
  assert "git is installed" in (ce.value.hint or "")

def test_timeout(tmp_path, monkeypatch):
  def slow(*a, **kw): raise subprocess.TimeoutExpired(a[0], kw["timeout"])
  monkeypatch.setattr(G.subprocess, "run", slow)
  assert G.query(["status"], tmp_path, timeout=0.5) is None
  with pytest.raises(G.GitError, match=r"`git status` took over 0.5s"): G.git(["status"], tmp_path, timeout=0.5)

def test_query_has_a_time_limit(monkeypatch, tmp_path):
  repo, seen = _repo(tmp_path), []
  real = subprocess.run
  monkeypatch.setattr(G.subprocess, "run", lambda *a, **kw: seen.append(kw.get("timeout")) or real(*a, **kw))
  G.query(["status"], tmp_path)
  G.git(["status", "--porcelain"], repo)
  assert seen == [G.QUERY_TIMEOUT, None]

def test_worktrees(tmp_path):
  repo = _repo(tmp_path)
  wt = tmp_path / "wt"
  G.add_worktree(repo, wt, G.commit_of(repo, "HEAD"))
  assert (wt / ".git").exists()
  with pytest.raises(G.GitError, match="worktree add"): G.add_worktree(repo, wt, "HEAD")  # already there
  G.remove_worktree(repo, wt)
  G.remove_worktree(repo, wt)  # gone already: no error while cleaning up
  G.prune_worktrees(repo)
  assert not wt.exists() and G.git(["worktree", "list", "--porcelain"], repo).count("worktree ") == 1

def test_this_checkout_is_the_folder_holding_replay_and_tinysched():
  # blame's new side and bisect's step run this checkout's code: a path one level off (replay/ itself) still imported
  # through an editable install, so only the path can tell
  from pathlib import Path
  from replay.triage import bisect
  root = Path(__file__).resolve().parents[2]
  assert G.THIS_CHECKOUT == root and (G.THIS_CHECKOUT / "replay" / "git.py").is_file() and (G.THIS_CHECKOUT / "tinysched").is_dir()
  assert bisect.step_command(Path("p"), Path("l"), Path("e"), 1, None)[3] == str(root)
