"""Other commits' code, checked out beside this one: temporary git worktrees, and running a checkout's model suite.

`replay commits`, `replay accept` and `replay bisect` run the model suite or the replay of another commit with that
commit's own code: a worktree first on PYTHONPATH, one fresh process per model. A commit without the suite runner gets
the current checkout's runner files copied into its worktree (never over files it has). Worktrees are removed after
success, failure, Ctrl-C or SIGTERM (SIGTERM is turned into the same exception as Ctrl-C, so every `finally` runs).
"""
from __future__ import annotations
import atexit, contextlib, json, os, shutil, signal, subprocess, sys, tempfile, threading
from pathlib import Path
from typing import Callable, Iterator
from replay import git as G
from replay.errors import HintedError

HOOK_FILE = "tinysched/capture_hook.py"
RUNNER_FILES = ("replay/baseline/suite.py", "tinysched/models/suite.py")
MODELS_DIR = "tinysched/models"
Log = Callable[[str], None]
# a checkout from before replay/ had packages (flat modules: replay/suite.py, replay/recorder.py) runs its models with
# its own runner and records with its own recorder
FLAT_RUNNER, FLAT_RECORDER = "replay/suite.py", "replay/recorder.py"

def has_runner_file(tree: Path, rel: str) -> bool:
  """`tree` has runner file `rel`, or, for the replay runner, the flat one of an older checkout."""
  return (tree / rel).exists() or (rel == RUNNER_FILES[0] and (tree / FLAT_RUNNER).exists())

def runner_module(tree: Path | None) -> str:
  """The module a checkout runs one model with (`python -m MODULE NAME`): today's, or the flat one of an older checkout."""
  if tree is not None and (tree / FLAT_RUNNER).is_file() and not (tree / RUNNER_FILES[0]).is_file(): return "replay.suite"
  return "replay.baseline.suite"

_ENTRY_POINTS: dict[str, str] = {}  # recorder module -> a folder whose metadata names it (made once per process)

def capture_tool_path(tree: Path | None) -> str | None:
  """A folder to put first on PYTHONPATH for a model process in `tree` when that checkout's recorder is not where the
  installed `tinysched.capture` entry point says (replay.record.recorder): there a `tinysched` distribution's metadata
  names the checkout's own (replay.recorder), and the first distribution of a name on the path is the one whose entry
  points count. None when the checkout has today's recorder."""
  if tree is None or not (tree / FLAT_RECORDER).is_file() or (tree / "replay/record/recorder.py").is_file(): return None
  module = "replay.recorder"
  if module not in _ENTRY_POINTS:
    d = Path(tempfile.mkdtemp(prefix="replay-entry-points-"))
    info = d / "tinysched-0.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tinysched\nVersion: 0.0.0\n")
    (info / "entry_points.txt").write_text(f"[tinysched.capture]\nreplay = {module}:install_from_env\n")
    atexit.register(shutil.rmtree, d, True)
    _ENTRY_POINTS[module] = str(d)
  return _ENTRY_POINTS[module]

class CommitsError(HintedError):
  """A failure the user can act on: the message and what to do next."""

class Interrupted(KeyboardInterrupt):
  """Ctrl-C or SIGTERM: a KeyboardInterrupt, so code that already cleans up after Ctrl-C handles both."""
  def __init__(self, signum: int):
    super().__init__(signal.Signals(signum).name)
    self.signum = signum

def _main_thread() -> bool: return threading.current_thread() is threading.main_thread()

@contextlib.contextmanager
def interruptible() -> Iterator[None]:
  """Within the block SIGTERM raises Interrupted (like Ctrl-C raises KeyboardInterrupt)."""
  if not _main_thread():  # signal handlers can only be set from the main thread
    yield
    return
  def on_term(signum: int, frame) -> None: raise Interrupted(signum)
  old = signal.signal(signal.SIGTERM, on_term)
  try: yield
  finally: signal.signal(signal.SIGTERM, old)

@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
  """Cleanup must finish: a second Ctrl-C/SIGTERM during it is ignored rather than leaving half-removed worktrees."""
  if not _main_thread():
    yield
    return
  old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
  try: yield
  finally:
    for s, h in old.items(): signal.signal(s, h)

def repo_root(cwd: Path | str | None = None) -> Path:
  cwd = Path(cwd or os.getcwd())
  try: root = G.toplevel(cwd)
  except G.GitError as e: raise CommitsError(str(e), "check that git is installed and on PATH and that the folder exists") from None
  if root is None:
    raise CommitsError(f"{cwd} is not inside a git repository", "run this from a checkout of the project (git clone ...)")
  return root

def resolve(root: Path, ref: str) -> str:
  if (sha := G.commit_of(root, ref)) is None:
    raise CommitsError(f"{ref!r} is not a commit of {root}",
                       "pass a commit, branch or tag (e.g. `replay commits main HEAD`); `git fetch` it first if it is remote")
  return sha

def _ask(args: list[str], root: Path) -> str:
  """A git query whose failure only costs information: its answer, or "" (no time limit, as every git call here)."""
  return G.query(args, root, timeout=None) or ""

def head_state(root: Path, exclude: str | None = None) -> tuple[str | None, bool]:
  """(HEAD commit, dirty flag) of a checkout; tracked changes only, optionally ignoring one folder."""
  sha = _ask(["rev-parse", "HEAD"], root) or None
  spec = ["--", ".", f":(exclude){exclude}"] if exclude else []
  dirty = bool(_ask(["status", "--porcelain", "--untracked-files=no", *spec], root))
  return sha, dirty

@contextlib.contextmanager
def pythonpath(first: Path) -> Iterator[None]:
  """Put `first` in front of PYTHONPATH for the subprocesses started inside (run_model inherits os.environ)."""
  old = os.environ.get("PYTHONPATH")
  os.environ["PYTHONPATH"] = str(first) + (os.pathsep + old if old else "")
  try: yield
  finally:
    if old is None: os.environ.pop("PYTHONPATH", None)
    else: os.environ["PYTHONPATH"] = old

def subprocess_env(first: Path) -> dict[str, str]:
  env = {k: v for k, v in os.environ.items() if not k.startswith("TINYSCHED_CAPTURE")}  # listing models must not capture
  env["PYTHONPATH"] = str(first) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
  return env

def list_models(tree: Path, timeout: float = 300) -> list[str]:
  """The model names of the suite in checkout `tree`, imported with that checkout's code in a fresh process."""
  code = "import json; from tinysched.models.suite import SUITE; print(json.dumps(list(SUITE)))"
  try:
    r = subprocess.run([sys.executable, "-c", code], cwd=tree, env=subprocess_env(tree), capture_output=True, text=True, timeout=timeout)
  except subprocess.TimeoutExpired: raise CommitsError(f"importing the model suite in {tree} took over {timeout}s") from None
  if r.returncode != 0:
    last = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
    raise CommitsError(f"cannot import the model suite in {tree}: {last}", "fix tinysched/models/suite.py there, or pass --models")
  return list(json.loads(r.stdout.strip().splitlines()[-1]))

def add_runner(tree: Path, checkout: Path) -> list[str]:
  """Copy the suite runner files `tree` lacks from `checkout` (never over files `tree` has); returns what was copied."""
  copied: list[str] = []
  for rel in RUNNER_FILES:
    if has_runner_file(tree, rel): continue
    if not (checkout / rel).exists():
      raise CommitsError(f"{rel} is missing both in {tree.name}'s commit and in the current checkout {checkout}",
                         "run this from a checkout that has the model suite (tinysched/models/suite.py)")
    # the suite imports its model modules: bring the models folder's files git knows (not ignored weights or caches)
    files = [checkout / f for f in _ask(["ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", MODELS_DIR], checkout
                                        ).split("\0") if f] if rel.startswith(MODELS_DIR) else [checkout / rel]
    for src in sorted(p for p in files if p.is_file()):
      dst = tree / src.relative_to(checkout)
      if dst.exists(): continue
      dst.parent.mkdir(parents=True, exist_ok=True)
      shutil.copy2(src, dst)
      copied.append(str(src.relative_to(checkout)))
  return copied

class Worktrees:
  """Temporary detached worktrees of one repository in one temp folder; removed on exit unless kept."""
  def __init__(self, root: Path, tmp_dir: str | None = None, prefix: str = "replay-commits-"):
    self.root = root
    self.tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=tmp_dir))
    self.paths: list[Path] = []
    self.keep = False  # set after a completed run with --keep; an interrupted run never keeps anything
  def add(self, name: str, sha: str) -> Path:
    path = self.tmp / name
    self.paths.append(path)  # recorded first: a `worktree add` interrupted halfway is removed as well
    try: G.add_worktree(self.root, path, sha)
    except G.GitError as e: raise CommitsError(str(e)) from None
    return path
  def remove(self) -> None:
    with signals_deferred():
      for p in self.paths: G.remove_worktree(self.root, p)
      shutil.rmtree(self.tmp, ignore_errors=True)  # what `worktree remove` left, then git forgets those worktrees
      G.prune_worktrees(self.root)
  def __enter__(self) -> Worktrees: return self
  def __exit__(self, *exc) -> None:
    if not self.keep: self.remove()
