"""Running git for replay: the one place that knows how git is called, how long it may take and what a failure says.

Two kinds of call:
- `git(args, cwd)`: a step that must work (make a worktree, read the git directory); any failure raises GitError,
  whose message names the command, the folder and git's own complaint;
- `query(args, cwd)`: metadata that is nice to have (the commit a capture was made at, a commit's message); any
  failure (not a repository, no git installed, too slow) gives None, never an exception.

On top of those, the few questions replay asks: where the checkout's root is, which commit a ref names, and the
temporary worktrees of `replay commits`.
"""
from __future__ import annotations
import subprocess
from pathlib import Path

Where = Path | str | None  # the folder git runs in (None: the current directory)
QUERY_TIMEOUT = 10.0       # seconds: a metadata query slower than this is treated as failed

class GitError(RuntimeError):
  """git could not be started or ran past its time limit (`exit_code` None), or exited non-zero."""
  def __init__(self, msg: str, exit_code: int | None = None):
    super().__init__(msg)
    self.exit_code = exit_code

def _spawn(args: list[str], cwd: Where, timeout: float | None) -> subprocess.CompletedProcess:
  shown = f"`git {' '.join(args)}`"
  try: return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
  except subprocess.TimeoutExpired: raise GitError(f"{shown} took over {timeout}s in {cwd}") from None
  except (OSError, subprocess.SubprocessError) as e: raise GitError(f"cannot run {shown} in {cwd}: {e}") from None

def git(args: list[str], cwd: Where, timeout: float | None = None) -> str:
  """git's stripped stdout; raises GitError with git's complaint when it fails."""
  done = _spawn(args, cwd, timeout)
  if done.returncode != 0:
    raise GitError(f"`git {' '.join(args)}` failed in {cwd}: {done.stderr.strip() or done.stdout.strip()}", done.returncode)
  return done.stdout.strip()

def query(args: list[str], cwd: Where, timeout: float | None = QUERY_TIMEOUT) -> str | None:
  """git's stripped stdout, or None when it fails in any way."""
  try: return git(args, cwd, timeout)
  except GitError: return None

def toplevel(cwd: Where) -> Path | None:
  """The root of the checkout `cwd` lies in, or None outside a git repository (raises GitError when git cannot run)."""
  try: return Path(git(["rev-parse", "--show-toplevel"], cwd))
  except GitError as e:
    if e.exit_code is None: raise
    return None

def commit_of(root: Where, ref: str) -> str | None:
  """The full hash of the commit `ref` (a branch, tag, hash...) names, or None when it names no commit."""
  return query(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], cwd=root, timeout=None) or None

def common_dir(root: Path) -> Path:
  """The git directory shared by all worktrees of the repository at `root` (raises GitError)."""
  d = Path(git(["rev-parse", "--git-common-dir"], root))
  return d if d.is_absolute() else root / d

def add_worktree(root: Path, path: Path, commit: str) -> None:
  """A detached checkout of `commit` at `path` (raises GitError)."""
  git(["worktree", "add", "--detach", "--quiet", str(path), commit], root)

# the two below run while cleaning up, where a worktree that was never made or is already gone is no error: they never raise

def remove_worktree(root: Path, path: Path) -> None:
  """Remove the worktree at `path`, changes in it and all."""
  query(["worktree", "remove", "--force", str(path)], root, timeout=None)

def prune_worktrees(root: Path) -> None:
  """Forget the worktrees whose folders are gone."""
  query(["worktree", "prune"], root, timeout=None)
