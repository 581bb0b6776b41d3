"""Triage commands of the `replay` CLI: blame, minimize (replay/cli/app.py adds them to the main group).

Exit codes: 0 done (blame: the culprit named; minimize: the repro written); 1 blame found old and new code giving the
same output (and the same source for every program-level capture of its kernels), and every program of it computing
what its AST means on the device: nothing to blame; 2 bad usage or a capture that cannot be triaged (the old code does not reproduce it,
no commit recorded...), with what to do next.
"""
from __future__ import annotations
import contextlib, json, signal, sys
from pathlib import Path
from typing import Iterator
import click
from replay import git as G, levels
from replay.store.sqlite import Store, StoreError
from replay.baseline.checkouts import CommitsError, Worktrees
from replay.triage import reference as R
from replay.triage.blame import (TriageError, blame, blame_against_reference, capture_commit, find_row, minimize,
                                 minimize_against_reference, repro_test)
from replay.triage.probe import ProbeError
from replay.cli.common import Command, _fail

def _old_options(f):
  for opt in reversed([
      click.option("--old", "old_rev", help="git revision of the old code (default: the commit the capture was made at)"),
      click.option("--old-tree", type=click.Path(file_okay=False, exists=True), help="a checkout of the old code, used as it is"),
      click.option("--reference", "against_reference", is_flag=True,
                   help="against the reference only, no old code: where the current code's program computes something else "
                        "than its AST means (what is done anyway when old and new code agree)"),
      click.option("--device", default=None, help="the compiled device the reference triage judges on (default: TINYSCHED_DEVICE)")]):
    f = opt(f)
  return f

@contextlib.contextmanager
def _store_row(db: str, key: str) -> Iterator[tuple[object, dict]]:
  try: store = Store(db, readonly=True)
  except StoreError as e: _fail(str(e), "pass a .db file written by `replay capture` or `replay suite`")
  try:
    try: row = find_row(store, key)
    except TriageError as e: _fail(str(e))
    yield store, row
  finally: store.close()

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
def blame_cmd(db, key, old_rev, old_tree, against_reference, device, as_json) -> None:
  """Name the rule application that first makes capture KEY differ between the old code and this checkout; where they
  agree and the capture's program is wrong on the device, the rule application that makes it wrong."""
  if against_reference:
    with _store_row(db, key) as (store, row):
      try: res = blame_against_reference(store, row, device, None if as_json else click.echo)
      except (TriageError, R.ReferenceError) as e: _fail(str(e))
  else:
    with _sides(db, key, old_rev, old_tree) as (store, old, new):
      try: res = blame(store, key, old, new, device, None if as_json else click.echo)
      except (TriageError, ProbeError, R.ReferenceError) as e: _fail(str(e))
  if as_json:
    click.echo(json.dumps(res, indent=1, sort_keys=True))
    sys.exit(1 if res["verdict"] in ("identical", "right", "not wrong") else 0)
  if res.get("against") == "reference":
    _echo_reference(key, res)
    return
  if res.get("via"):
    click.echo(f"capture {key} ({res['via']['level']}): old and new code give it the same output; its program-level capture "
               f"{res['input_key'][:16]} differs (code generation): blaming that")
  if res["verdict"] == "identical":
    n = res.get("program_rows", 0)
    click.echo(f"capture {key}: old and new code give the same output" + (f", and the same source for its {n} program-level capture(s)" if n
               else "") + (f"; not judged against the reference: {res['not_judged']}" if res.get("not_judged")
                           else f"; on {res.get('device')} all {res.get('judged', 0)} of what it replays to compute what they mean"))
    click.echo("  a wrong number here is not made by code generation: look below it (the runtime, the device), or compare with another --old")
    sys.exit(1)
  elif res["verdict"] in ("outside rules", "blamed pass"): click.echo(f"capture {res['input_key'][:16]}: {res['why']}")
  else:
    click.echo(f"capture {res['input_key'][:16]} ({res['level']}): first differs at rule application #{res['application']} of "
               f"{res['applications_new']} ({res['probes']} probes, {res['seconds']} s)")
    click.echo(f"  new code: rule {res['rule']!r} rewrote\n" + _indent(res["node"]) + "\n    into\n" + _indent(res["result"]))
    if res["old_rule"] is None: click.echo(f"  old code: stopped after {res['applications_old']} applications")
    else: click.echo(f"  old code: rule {res['old_rule']!r} rewrote\n" + _indent(res["old_node"]) + "\n    into\n" + _indent(res["old_result"]))

def _echo_reference(key: str, res: dict) -> None:
  """A blame against the reference, as text (exit 1 when nothing is wrong)."""
  via = res.get("via")
  where = f"capture {key}" + (f" ({via['level']}): through {res.get('from')} {res['input_key'][:16]}" if via else f" ({res['level']})")
  if res["verdict"] in ("right", "not wrong"):
    click.echo(f"{where}: on {res['device']} all {res.get('judged', 1)} of what it replays to compute what they mean: nothing to blame "
               "against the reference" + (" (old and new code agree on it)" if res.get("old_agrees") else ""))
    sys.exit(1)
  f = res.get("finding") or {}
  what = "program" if levels.get(res["level"]).lowers else f"{res['level']} output"
  click.echo(f"{where}: " + ("old and new code agree on it, and " if res.get("old_agrees") else "")
             + f"its {what} is wrong on {res['device']} (buffer {f.get('buffer')}, {f.get('n_diff')} element(s), max abs err "
             f"{f.get('max_abs_err')}): blamed against the reference ({res['runs']} judged runs, {res['seconds']} s)")
  if res["verdict"] == "outside rules":
    click.echo(f"  {res['why']}")
    return
  if len(res["rules"]) > 1:
    click.echo(f"  rules {', '.join(res['rules'])}: {res['how']}")
    return
  app = (f"application #{res['application']}" + (f" of {res['applications']} in the lowering" if res.get("applications") else
         f" of its {res.get('applications_of_rule')}")) if res.get("application") else "an application that could not be pinned"
  click.echo(f"  rule {res['rule']!r}, {app}: {res['how']}")
  if res.get("node"): click.echo("  rewrote\n" + _indent(res["node"]) + "\n    into\n" + _indent(res["result"]))
  if (ce := res.get("counterexample")):
    vals = ", ".join(f"{k}={v}" for k, v in ce.get("values", {}).items())
    click.echo(f"  counterexample: {vals or 'any values'}: before {ce.get('before')}, after {ce.get('after')}")

def _indent(text: str | None) -> str: return "\n".join("      " + ln for ln in (text or "(none)").splitlines()[:30])

@click.command("minimize", cls=Command)
@click.argument("db")
@click.argument("key")
@_old_options
@click.option("-o", "--out", type=click.Path(dir_okay=False), help="write the repro test here (default: test_repro_<key>.py)")
@click.option("--time-limit", type=float, default=60.0, show_default=True, help="seconds to spend shrinking")
def minimize_cmd(db, key, old_rev, old_tree, against_reference, device, out, time_limit) -> None:
  """Shrink capture KEY's input (kernel, schedule or program level) while old and new code still differ on it the same way
  (blame names the same rule or pass); write a pytest repro. A kernel or schedule capture that old and new agree on is
  minimized through its program-level capture that differs; where none differs, against the reference (its program stays
  wrong on the device, and the blamed rule turned off still makes it right)."""
  if against_reference:
    with _store_row(db, key) as (store, row):
      try: res = minimize_against_reference(store, row, device, time_limit, click.echo)
      except (TriageError, R.ReferenceError) as e: _fail(str(e))
  else:
    with _sides(db, key, old_rev, old_tree) as (store, old, new):
      try: res = minimize(store, key, old, new, time_limit, progress=click.echo, device=device)
      except (TriageError, ProbeError, R.ReferenceError) as e: _fail(str(e))
  path = Path(out or f"test_repro_{key[:12]}.py")
  text = R.repro_test(res, db, key) if res.get("against") == "reference" else repro_test(res, db, key)
  try: path.write_text(text)
  except OSError as e: _fail(f"cannot write {path}: {e}", "pass a writable path with -o")
  click.echo(f"{res['nodes_before']} -> {res['nodes']} nodes in {res['seconds']} s ({res['candidates_tried']} candidates"
             f"{', time limit reached' if res['timed_out'] else ''}); repro: {path}")
  if res.get("against") == "reference": click.echo(f"same failure kept: wrong on {res['device']}, {res['failure']}")
  else:
    click.echo(f"same failure kept: blame names {res['failure']}" if res.get("failure") else "same failure kept: old and new still differ")
    if res.get("verdict"): click.echo(f"  and the numbers: {res['verdict']}")
  if res.get("rejected_other_failures"):
    click.echo(f"  ({res['rejected_other_failures']} smaller candidate(s) differed for another reason: left out)")
  click.echo(res["pretty"])
