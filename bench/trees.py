"""The trees a side-by-side benchmark runs: this checkout, and a baseline commit checked out in a temporary worktree
(removed afterwards), each with its bytecode compiled as scripts/setup.sh does (PYTHONDONTWRITEBYTECODE may be set)."""
from __future__ import annotations
import contextlib, subprocess, sys, tempfile
from pathlib import Path
from typing import Iterator

@contextlib.contextmanager
def side_by_side(root: Path, baseline: str | None) -> Iterator[dict[str, Path]]:
  """{"current": root} and, with a baseline revision, {"baseline REV": its worktree}."""
  trees, wt = {"current": root}, None
  if baseline:
    wt = Path(tempfile.mkdtemp(prefix="bench-")) / "base"
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(wt), baseline], cwd=root, check=True)
    trees[f"baseline {baseline}"] = wt
  try:
    for t in trees.values(): subprocess.run([sys.executable, "-m", "compileall", "-q", "tinysched", "replay"], cwd=t, capture_output=True)
    yield trees
  finally:
    if wt is not None: subprocess.run(["git", "worktree", "remove", "--force", str(wt)], cwd=root)
