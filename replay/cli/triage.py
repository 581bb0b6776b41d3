"""Triage commands of the `replay` CLI: blame, minimize (replay/cli/app.py adds them to the main group).

Exit codes: 0 done (blame: the culprit named; minimize: the repro written); 1 blame found old and new code giving the
same output (and the same source for every program-level capture of its kernels): nothing to blame in the code
generation this checkout changed; 2 bad usage or a capture that cannot be triaged (the old code does not reproduce it,
no commit recorded...), with what to do next.
"""
from __future__ import annotations
import contextlib, json, signal, sys
from pathlib import Path
from typing import Iterator
import click
from replay import git as G
from replay.store.sqlite import Store, StoreError
from replay.baseline.checkouts import CommitsError, Worktrees
from replay.triage.blame import TriageError, blame, capture_commit, find_row, minimize, repro_test
from replay.triage.probe import ProbeError
from replay.cli.common import Command, _fail

def _old_options(f):
  for opt in reversed([
      click.option("--old", "old_rev", help="git revision of the old code (default: the commit the capture was made at)"),
      click.option("--old-tree", type=click.Path(file_okay=False, exists=True), help="a checkout of the old code, used as it is")]):
    f = opt(f)
  return f

@contextlib.contextmanager
def _sides(db: str, key: str, old_rev: str | None, old_tree: str | None) -> Iterator[tuple[object, Path, Path]]:
  """(open store, old checkout, new checkout): the old one a temporary worktree unless --old-tree names one."""
  try: store = Store(db, readonly=True)
  except StoreError as e: _fail(str(e), "pass a .db file written by `replay capture` or `replay suite`")
  new_tree = G.THIS_CHECKOUT
  # SIGTERM/SIGHUP stop it like Ctrl-C: the worktree and the probes are removed on the way out
  def on_signal(signum: int, frame) -> None: raise KeyboardInterrupt(signal.Signals(signum).name)
  old_handlers = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGHUP)}
  try:
    if old_tree:
      yield store, Path(old_tree).resolve(), new_tree
      return
    root = G.toplevel(new_tree)
    if root is None: _fail(f"{new_tree} is not a git checkout: the old code cannot be checked out", "pass --old-tree DIR")
    try:
      rev = old_rev or capture_commit(store, find_row(store, key))
    except TriageError as e: _fail(str(e))
    sha = G.commit_of(root, rev)
    if sha is None: _fail(f"revision {rev!r} is not in {root}", "fetch it, or pass --old REV / --old-tree DIR")
    with Worktrees(root) as wt:
      try: old = wt.add("old", sha)
      except CommitsError as e: _fail(str(e))
      yield store, old, new_tree
  except KeyboardInterrupt as e: _fail(f"interrupted ({e or 'SIGINT'}); the temporary worktree and the probes were removed")
  finally:
    store.close()
    for sig, h in old_handlers.items(): signal.signal(sig, h)

@click.command("blame", cls=Command)
@click.argument("db")
@click.argument("key")
@_old_options
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
def blame_cmd(db, key, old_rev, old_tree, as_json) -> None:
  """Name the rule application that first makes capture KEY differ between the old code and this checkout."""
  with _sides(db, key, old_rev, old_tree) as (store, old, new):
    try: res = blame(store, key, old, new)
    except (TriageError, ProbeError) as e: _fail(str(e))
  if as_json:
    click.echo(json.dumps(res, indent=1, sort_keys=True))
    return
  if res.get("via"):
    click.echo(f"capture {key} ({res['via']['level']}): old and new code give it the same output; its program-level capture "
               f"{res['input_key'][:16]} differs (code generation): blaming that")
  if res["verdict"] == "identical":
    n = res.get("program_rows", 0)
    click.echo(f"capture {key}: old and new code give the same output" + (f", and the same source for its {n} program-level capture(s)" if n
               else "; the store has no program-level capture of its kernels (capture with the program level to blame code generation)"))
    click.echo("  a wrong number here is not made by a change between these two versions: look below them (the runtime, the device), "
               "or compare with another --old")
    sys.exit(1)
  elif res["verdict"] in ("outside rules", "blamed pass"): click.echo(f"capture {res['input_key'][:16]}: {res['why']}")
  else:
    click.echo(f"capture {res['input_key'][:16]} ({res['level']}): first differs at rule application #{res['application']} of "
               f"{res['applications_new']} ({res['probes']} probes, {res['seconds']} s)")
    click.echo(f"  new code: rule {res['rule']!r} rewrote\n" + _indent(res["node"]) + "\n    into\n" + _indent(res["result"]))
    if res["old_rule"] is None: click.echo(f"  old code: stopped after {res['applications_old']} applications")
    else: click.echo(f"  old code: rule {res['old_rule']!r} rewrote\n" + _indent(res["old_node"]) + "\n    into\n" + _indent(res["old_result"]))

def _indent(text: str | None) -> str: return "\n".join("      " + ln for ln in (text or "(none)").splitlines()[:30])

@click.command("minimize", cls=Command)
@click.argument("db")
@click.argument("key")
@_old_options
@click.option("-o", "--out", type=click.Path(dir_okay=False), help="write the repro test here (default: test_repro_<key>.py)")
@click.option("--time-limit", type=float, default=60.0, show_default=True, help="seconds to spend shrinking")
def minimize_cmd(db, key, old_rev, old_tree, out, time_limit) -> None:
  """Shrink capture KEY's input (kernel, schedule or program level) while old and new code still differ on it the same way
  (blame names the same rule or pass); write a pytest repro. A kernel or schedule capture that old and new agree on is
  minimized through its program-level capture that differs."""
  with _sides(db, key, old_rev, old_tree) as (store, old, new):
    try: res = minimize(store, key, old, new, time_limit, progress=click.echo)
    except (TriageError, ProbeError) as e: _fail(str(e))
  path = Path(out or f"test_repro_{key[:12]}.py")
  try: path.write_text(repro_test(res, db, key))
  except OSError as e: _fail(f"cannot write {path}: {e}", "pass a writable path with -o")
  click.echo(f"{res['nodes_before']} -> {res['nodes']} nodes in {res['seconds']} s ({res['candidates_tried']} candidates"
             f"{', time limit reached' if res['timed_out'] else ''}); repro: {path}")
  click.echo(f"same failure kept: blame names {res['failure']}" if res.get("failure") else "same failure kept: old and new still differ")
  if res.get("rejected_other_failures"):
    click.echo(f"  ({res['rejected_other_failures']} smaller candidate(s) differed for another reason: left out)")
  click.echo(res["pretty"])
