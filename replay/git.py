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
import tinysched

Where = Path | str | None  # the folder git runs in (None: the current directory)
# the checkout this replay package runs from (the folder holding replay/ and tinysched/): the "new" side of blame and
# minimize, and the code a `git bisect run` step runs its replay with
THIS_CHECKOUT = Path(__file__).resolve().parent.parent
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

def is_ancestor(root: Where, ancestor: str, commit: str) -> bool:
  """Is `ancestor` an ancestor of (or the same as) `commit`? (raises GitError when git cannot tell)"""
  try: git(["merge-base", "--is-ancestor", ancestor, commit], root)
  except GitError as e:
    if e.exit_code == 1: return False
    raise
  return True

def subject(root: Where, commit: str) -> str:
  """The first line of a commit's message, or "" when git cannot tell."""
  return query(["log", "-1", "--format=%s", commit], root, timeout=None) or ""

def checkout(tree: Path, commit: str) -> None:
  """Check `commit` out, detached, in the worktree `tree` (raises GitError)."""
  git(["checkout", "--quiet", "--detach", commit], tree)

# `git bisect` in a worktree: its state (BISECT_* files, refs/bisect/*) is per worktree, so a bisect in a temporary
# worktree never touches the user's checkout or a bisect they have going there, and goes with the worktree

def bisect_start(tree: Path, bad: str, good: str) -> None:
  """Start bisecting in `tree` between a bad and a good commit (checks out the first commit to test; raises GitError)."""
  git(["bisect", "start", bad, good], tree)

def bisect_run_argv(command: list[str]) -> list[str]:
  """The `git bisect run` command line. The caller runs it (in the worktree, in its own process group, so that git, the
  step command and whatever that starts can be stopped together) and reads its output with `first_bad`."""
  return ["git", "bisect", "run", *command]

def first_bad(output: str) -> str | None:
  """The commit `git bisect run` named as the first bad one in its output, or None."""
  for line in output.splitlines():
    words = line.split()
    if len(words) >= 2 and line.endswith(" is the first bad commit") and all(c in "0123456789abcdef" for c in words[0]): return words[0]
  return None

def bisect_candidates(output: str) -> list[str]:
  """When skipped commits left several candidates ("The first bad commit could be any of:"), their hashes."""
  lines = output.splitlines()
  for i, line in enumerate(lines):
    if "first bad commit could be any of" in line:
      return [ln.split()[0] for ln in lines[i + 1:]
              if ln.split() and len(ln.split()[0]) == 40 and all(c in "0123456789abcdef" for c in ln.split()[0])]
  return []

def bisect_reset(tree: Path) -> None:
  """End a bisect in `tree` (never raises: it runs while cleaning up, where there may be no bisect)."""
  query(["bisect", "reset"], tree, timeout=None)

def code_commit() -> tuple[str | None, int | None]:
  """The commit of the tinysched checkout this process imported, and whether it is dirty (None: not a git checkout)."""
  src = Path(tinysched.__file__).resolve().parent.parent
  sha = query(["rev-parse", "HEAD"], src)
  status = query(["status", "--porcelain", "--untracked-files=no"], src)
  return sha, (None if status is None else int(bool(status)))
