"""CI commands of the `replay` CLI: commits, bisect, accept, gate (replay/cli/app.py adds them to the main group).

Same exit codes as every replay command: 0 nothing changed / passed; 1 changes or mismatches (gate: failed
on changes); 2 errors, incompatible captures, interrupted runs or bad usage. Every failure says what to do next.
"""
from __future__ import annotations
import contextlib, os, shutil, signal, sys
from pathlib import Path
from typing import Iterator
import click
from replay.git import GitError, common_dir
from replay.levels import HOOKED, LEVELS
from replay.check import CheckError, Options, Selection
from replay.report import escape as E
from replay.cli.common import Command, _fail, _dbs, exec_device, run_check, report_options, terminal_progress, write_reports, report_paths_writable
from replay.report.files import html_drawings
from replay.report import text as R
from replay.prove import smt
from replay.report.files import ReportPaths
from replay.baseline import gate as G
from replay.baseline.accept import AcceptError, accept_rows, reoptimize_default, run_accept, select_groups, select_keys
from replay.baseline.checkouts import CommitsError, repo_root
from replay.baseline.commits import counts_table, run_commits
from replay.triage.bisect import UNTIL, BisectError, run_bisect
from replay.triage import old_causes

def _echo(s: str) -> None:
  """A progress line, shown at once (the commands it reports run for minutes)."""
  click.echo(s)
  sys.stdout.flush()

def _models(s: str | None) -> list[str] | None:
  names = [m.strip() for m in (s or "").split(",") if m.strip()]
  return names or None

def _levels(s: str) -> tuple[str, ...]:
  lv = tuple(x.strip() for x in s.split(",") if x.strip())
  if bad := [x for x in lv if x not in LEVELS]: _fail(f"unknown level(s) {bad}; choose from {', '.join(LEVELS)}")
  return lv

@contextlib.contextmanager
def _accept_process(captures_dir: str) -> Iterator[None]:
  """What `replay accept` needs around run_accept so that no way of stopping it leaves anything behind:
  - SIGTERM and SIGHUP raise KeyboardInterrupt during the whole command, like Ctrl-C (run_accept then removes its
    temporary folder; subprocess.run kills the model process it waits for);
  - one accept per repository at a time, through an flock in the git directory that the kernel releases whenever the
    process dies, SIGKILL included. Whoever holds it may therefore remove `.replay-accept-*` folders left by a killed
    run (their model processes die with it: replay.baseline.suite arms a parent-death signal)."""
  def on_signal(signum: int, frame) -> None: raise KeyboardInterrupt(signal.Signals(signum).name)
  old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGHUP)}
  lock = None
  try:
    try:
      root = repo_root()
      lock = open(common_dir(root) / "replay-accept.lock", "w")
    except (CommitsError, GitError, OSError): root = None  # run_accept reports a missing repository itself
    if lock is not None:
      import fcntl  # POSIX only (like SIGHUP above): imported here so the rest of the CLI loads where it is missing
      try: fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except BlockingIOError: _fail("another `replay accept` is running in this repository", "wait for it to finish, then run this again")
      assert root is not None
      for d in (root / captures_dir).parent.glob(".replay-accept-*"):
        if d.is_dir(): shutil.rmtree(d, ignore_errors=True)
    yield
  finally:
    if lock is not None: lock.close()
    for sig, h in old.items(): signal.signal(sig, h)

@click.command("commits", cls=Command)
@click.argument("base")
@click.argument("head", default="HEAD")
@click.option("--models", help="comma-separated model names (default: HEAD's whole suite)")
@click.option("--level", type=click.Choice(LEVELS), help="compare only this capture level")
@click.option("--levels", default=",".join(HOOKED), show_default=True, help="capture levels to record")
@click.option("--full", is_flag=True, help="full-size models (default: the quick versions CI runs)")
@click.option("--keep", is_flag=True, help="keep the worktrees and both capture stores after a completed run (paths are printed)")
@click.option("--tmp-dir", type=click.Path(file_okay=False), help="where to make the temporary worktrees (default: the system temp dir)")
@click.option("--timeout", type=float, default=None, help="seconds per model and commit before it counts as failed")
@click.option("--exec", "exec_mode", flag_value="changed", default=None, help="run the changed kernels BASE vs HEAD vs the reference")
@click.option("--exec-all", "exec_mode", flag_value="all", help="run every paired kernel BASE vs HEAD vs the reference")
@click.option("--device", default=None, help="device for --exec (default: Device.DEFAULT)")
@report_options(report_md="write a Markdown report", verbose="print diffs")
def commits_cmd(base, head, models, level, levels, full, keep, tmp_dir, timeout, exec_mode, device, report_md, report_json, junit,
                report_html, verbose) -> None:
  """Capture the model suite at BASE and at HEAD (default HEAD) in temporary git worktrees, each with its own
  code, and show what changed in between (same report and exit codes as `replay diff`)."""
  lv = _levels(levels)
  report_paths_writable(report_md, report_json, junit, report_html)
  options = Options(exec=exec_mode, device=exec_device(exec_mode, device), progress=terminal_progress())
  drawings: dict = {}
  def after_compare(rep) -> None:  # while both commits' stores exist: the HTML report's drawings
    if report_html: drawings.update(html_drawings(rep))
  try:
    res = run_commits(base, head, models=_models(models), quick=not full, levels=lv, level=level, keep=keep, tmp_dir=tmp_dir,
                      timeout=timeout, log=_echo, options=options, after_compare=after_compare)
  except (CommitsError, CheckError) as e: _fail(str(e), e.hint)
  except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM (replay.baseline.checkouts.Interrupted): the worktrees are already gone
    _fail(f"interrupted ({e or 'SIGINT'}); the temporary worktrees were removed", "run `replay commits` again")
  click.echo(counts_table(res))
  for n in res.notes: click.echo(f"note: {n}")
  click.echo(R.terminal(res.report, verbose=verbose))
  write_reports(res.report, report_md, report_json, junit, report_html, drawings=drawings)
  if failed := res.failures():
    for side, r in failed: click.echo(f"replay: {side.name} {side.sha[:8]}: model {r['model']} failed: {r.get('error')}", err=True)
    _fail(f"{len(failed)} model run(s) failed, so the comparison above is incomplete",
          "fix the failing model at that commit, or leave it out with --models")
  sys.exit(res.report.exit_code())

@click.command("bisect", cls=Command)
@click.argument("good")
@click.argument("bad")
@click.argument("dbs", nargs=-1)
@click.option("--level", type=click.Choice(LEVELS), help="only captures of this level")
@click.option("--label", help="only captures with this label (model)")
@click.option("-j", "--jobs", type=int, default=1, show_default=True, help="replay workers per commit")
@click.option("--timeout", type=float, default=None, help="seconds one commit's replay may take before the commit is skipped")
@click.option("--tmp-dir", type=click.Path(file_okay=False), help="where to make the temporary worktree (default: the system temp dir)")
@click.option("--until", type=click.Choice(UNTIL), default=None, help="the verdict to find the first commit of (default: the worst seen at "
              "BAD; `changed`: the first divergence): wrong and mismatch run the execution check at every step")
def bisect_cmd(good, bad, dbs, level, label, jobs, timeout, tmp_dir, until) -> None:
  """Find the first commit between GOOD and BAD where the stored captures (DBS, default captures/*.db) show the worst
  verdict BAD shows (or --until's): wrong numbers, a mismatch, unstable output, or a divergence (`--until changed`).
  `git bisect run` in a temporary worktree, replaying at each commit only the captures that show it at BAD.
  Exit 0 with the commit found; 2 when it cannot be decided (say why and what to do)."""
  if jobs < 1: _fail(f"-j {jobs}: needs at least one worker")
  try: res = run_bisect(good, bad, _dbs(dbs), level=level, label=label, jobs=jobs, timeout=timeout, tmp_dir=tmp_dir,
                        log=_echo, until=until)
  except BisectError as e: _fail(str(e), e.hint)
  except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: the worktree and the bisect state are already gone
    _fail(f"interrupted ({str(e) or 'SIGINT'}); the temporary worktree and its bisect state were removed", "run `replay bisect` again")
  for n in res.left_out: click.echo(f"note: {n}")
  click.echo("commits tested:")
  for s in res.steps:
    click.echo(f"  {s.sha[:10]} {s.subject[:60]!r}: {({0: 'good', 1: 'bad', 125: 'skip'})[s.replay.verdict]} ({s.replay.reason})")
  if res.until == "changed":
    click.echo(f"\nfirst bad commit: {res.first_bad} {res.subject}")
    click.echo(f"diverging captures there ({len(res.diverging)} of the {res.probe_count} that diverge at BAD):")
  else:
    click.echo(f"\nfirst {res.until} commit: {res.first_bad} {res.subject}")
    click.echo(f"captures {res.until} or worse there ({len(res.diverging)} of the {res.probe_count} at BAD):")
  for lv, ik, outcome, where in res.diverging: click.echo(f"  {lv} {ik[:16]} {outcome}  ({', '.join(where)})")
  stores = ' '.join(sorted({w for d in res.diverging for w in d[3]}))
  if res.until == "changed":
    click.echo(f"next: `git show {res.first_bad[:10]}`; `replay check {stores} --key <key> -v` at that commit shows the diff")
  else: click.echo(f"next: `git show {res.first_bad[:10]}`; `replay check {stores} --key <key> --exec-all -v` at that commit shows the numbers")
  sys.exit(0)

@click.command("accept", cls=Command)
@click.argument("dbs", nargs=-1)
@click.option("--models", help="comma-separated model names (default: the whole suite)")
@click.option("--dir", "captures_dir", default="captures", show_default=True, help="the baseline folder, relative to the repository root")
@click.option("--levels", default=",".join(HOOKED), show_default=True, help="capture levels to record")
@click.option("--timeout", type=float, default=None, help="seconds per model before it counts as failed")
@click.option("--key", "keys", multiple=True, help="per-kernel accept: only the capture whose input key starts with this (repeatable)")
@click.option("--group", "groups", multiple=True,
              help="per-kernel accept: the rows of this changed group of `replay check` (its # or signature; repeatable)")
@click.option("-m", "--message", help="with --key/--group (required): why these outputs are right, recorded in the store")
@click.option("--level", type=click.Choice(LEVELS), help="with --key/--group: only captures of this level")
@click.option("--label", help="with --key/--group: only captures with this label (model)")
@click.option("-j", "--jobs", type=int, default=None, help="with --group: parallel workers of the check that finds the groups")
@click.option("--reoptimize/--stored-opts", default=None,
              help="with --key/--group: program rows choose their opts again with the current heuristic, as the gate replays them "
                   "(default: on, unless REPLAY_REOPTIMIZE=0 as for ci/replay-gate), or keep their stored opts")
@click.option("--no-perf", is_flag=True, help="do not time the new baseline for the perf history (`replay perf`); the history the "
              "stores hold is carried over either way")
def accept_cmd(dbs, models, captures_dir, levels, timeout, keys, groups, message, level, label, jobs, reoptimize, no_perf) -> None:
  """Re-capture the suite as the new baseline: show what changed against captures/, then replace
  captures/<model>.db and captures/README.md, ready to commit.

  With --key/--group (per-kernel accept): update only those rows of the stores DBS (default: DIR/*.db, relative to the
  current directory as for `replay check`) to the current code's outputs, recording the commit, who and --message."""
  if keys or groups:
    _accept_rows(dbs, captures_dir, keys, groups, message, level, label, jobs, reoptimize,
                 {"models": models, "levels": levels, "timeout": timeout, "no_perf": no_perf})
    return
  if given := [f"--{n}" for n, v in (("message", message), ("level", level), ("label", label), ("jobs", jobs), ("reoptimize", reoptimize))
               if v is not None] + (["DB"] if dbs else []):
    _fail(f"{', '.join(given)} go(es) with --key/--group (a per-kernel accept); a full accept re-captures the suite",
          "name the captures with --key K or --group G, or leave those out")
  lv = _levels(levels)
  try:
    with _accept_process(captures_dir):
      res = run_accept(_models(models), captures_dir, lv, timeout=timeout, log=_echo, perf=not no_perf)
  except CommitsError as e: _fail(str(e), e.hint)
  except KeyboardInterrupt as e: _fail(f"interrupted ({e or 'SIGINT'}); the baseline is unchanged", "run `replay accept` again")
  rel = lambda p: os.path.relpath(p, Path.cwd())
  for m in res.skipped: click.echo(f"note: {m}: skipped, its old baseline (if any) is kept")
  for n in res.notes: click.echo(f"note: {n}")
  for p in res.stale: click.echo(f"note: {rel(p)} is not a model of the suite any more: remove it with `git rm {rel(p)}`")
  click.echo(f"replaced {len(res.replaced)} store(s) in {rel(res.captures)}; updated {rel(res.readme)}")
  click.echo("ready to commit:\n  git add " + " ".join(rel(p) for p in [*res.replaced, res.readme]))

def _accept_rows(dbs, captures_dir, keys, groups, message, level, label, jobs, reoptimize, full_only: dict) -> None:
  """`replay accept --key/--group`: replay/baseline/accept.py does the work; exit 2 (nothing written) when anything cannot be accepted."""
  ctx = click.get_current_context()
  if given := [f"--{n}" for n in full_only if ctx.get_parameter_source(n) is not click.core.ParameterSource.DEFAULT]:
    _fail(f"{', '.join(given)} go(es) with a full accept (re-capturing the suite), not with --key/--group", "leave them out")
  if not message: _fail("a per-kernel accept needs --message", "say why the new outputs are right, e.g. -m 'ADD operands reordered: same numbers'")
  paths = list(dbs) or sorted(str(p) for p in Path(captures_dir).glob("*.db"))
  if not paths: _fail(f"no capture stores given and none match {captures_dir}/*.db in {os.getcwd()}", "pass the stores to accept in (DB ...)")
  reoptimize = reoptimize_default() if reoptimize is None else reoptimize  # the groups and outputs the gate sees
  try:
    rows = select_keys(paths, list(keys), level, label) if keys else []
    if groups:
      # the groups `replay check` showed: named by the same cause steps (their results cached by that check)
      rep = run_check(Selection(tuple(paths), level=level, label=label), Options(jobs=jobs, reoptimize=reoptimize,
                                                                                 old_code_causes=old_causes.attribute))
      if rep.fatal: _fail(rep.fatal[0], "pass capture stores written by `replay capture` or `replay suite`")
      seen = {(r.db, r.row["id"]) for r in rows}
      rows += [r for r in select_groups(rep, list(groups)) if (r.db, r.row["id"]) not in seen]
    res = accept_rows(rows, message, log=click.echo, reoptimize=reoptimize)
  except AcceptError as e: _fail(str(e), e.hint)
  except KeyboardInterrupt: _fail("interrupted; every store is as it was, or fully updated (one transaction each)", "run `replay check` to see which")
  for r in res.unchanged: click.echo(f"note: {r.row['level']} {r.row['input_key'][:16]} ({r.db}) already replays identically: nothing to accept")
  for a in res.accepted:
    click.echo(f"accepted {a['level']} {a['input_key'][:16]} ({E.terminal_line(a['label'] or '-')}, {a['db']}): "
               f"{a['old_output_key'][:12]} -> {a['new_output_key'][:12]}")
  if res.accepted: click.echo("ready to commit:\n  git add " + " ".join(sorted({a["db"] for a in res.accepted})))
  else: click.echo("nothing to accept: the named captures already replay identically")

@click.command("gate", cls=Command)
@click.argument("dbs", nargs=-1)
@click.option("--from-report", "from_report", type=click.Path(dir_okay=False),
              help="decide on this JSON report (from `replay check` or `replay report merge`) instead of running the check")
@click.option("--exit-code", type=int, default=None, help="with --from-report: exit status of the command that wrote it (default: the report's)")
@click.option("--exec/--no-exec", "do_exec", default=True, show_default=True, help="run changed kernels old vs new on the device")
@click.option("--exec-all", "exec_all", is_flag=True, default=False, help="run every captured kernel, not only the changed ones (the "
              "identical ones are the A/A rows that calibrate --perf-gate)")
@click.option("--perf-gate", type=float, default=None, metavar="PCT", help="fail when changed kernels are slower by more than PCT%% beyond "
              "their noise and the A/A rows' spread (timed in 5 rounds, each confirmed)")
@click.option("--device", default=None, help="device for --exec")
@click.option("-j", "--jobs", type=int, default=None, help="parallel replay workers")
@click.option("--prove/--no-prove", "do_prove", default=None, help="prove every integer rule and the changed captures' indexing with "
              "z3 (default: when z3 is installed; a counterexample fails)")
@click.option("--determinism/--no-determinism", default=True, show_default=True, help="replay the changed captures and a sample of the "
              "identical ones again in a fresh process (another PYTHONHASHSEED, a perturbed allocation order): `unstable` fails")
@report_options(leave_out=("verbose",), report_md="Markdown report (written by the check, or read with --from-report)",
                report_json="where the check writes its JSON report", junit="JUnit XML of the check")
@click.option("--accept/--no-accept", "accept", default=None,
              help="override: treat changes as accepted (or not) instead of looking for [replay:accept]")
@click.option("--summary", "summary_path", type=click.Path(dir_okay=False), default=None,
              help="append the decision and the Markdown report here (default: $GITHUB_STEP_SUMMARY when set)")
def gate_cmd(dbs, from_report, exit_code, do_exec, exec_all, perf_gate, device, jobs, do_prove, determinism, report_md, report_json, junit,
             report_html, accept, summary_path) -> None:
  """Gate CI on process replay: run `replay check` (default captures/*.db, with --exec) or read a report, then
  pass when nothing changed, or when changes are accepted with [replay:accept] in the PR title or head commit
  message. Errors, incompatible captures, numerical mismatches and unstable outputs always fail, and the marker
  accepts only changes whose numbers the execution check found `equivalent`."""
  if from_report and dbs: _fail("pass either capture stores to check or --from-report, not both")
  report_paths_writable(report_html, *(() if from_report else (report_md, report_json, junit)))  # --from-report reads its --report-md
  if from_report:
    report = G.load_report(from_report)
    code = exit_code if exit_code is not None else int((report or {}).get("exit_code", 2))
    if report_html:  # the page of the report the gate decides on (drawn from the stores it names, where they are)
      try: rep = R.from_json(report) if report is not None else None
      except (ValueError, KeyError, TypeError): rep = None
      if rep is None: _fail(f"--report-html: {from_report} is not a replay JSON report", "pass the file `replay check --report-json` wrote")
      write_reports(rep, None, None, None, report_html)
  else:
    if exit_code is not None: _fail("--exit-code goes with --from-report")
    if (exec_all or perf_gate is not None) and not do_exec: _fail("--exec-all and --perf-gate run kernels", "drop --no-exec")
    if do_exec and not G.exec_available():
      _fail("the execution check (replay.execute.pool) is not available in this installation",
            "update replay, or gate without it: --no-exec (numerical mismatches are then not detected)")
    paths = ReportPaths(report_md, report_json, junit, report_html)
    for p in paths.given():  # a stale report must never decide this run
      Path(p).unlink(missing_ok=True)
    selection = Selection(tuple(_dbs(dbs)))
    if do_prove and not smt.available(): _fail("--prove needs z3", "pip install z3-solver (the `proofs` extra), or --no-prove")
    if do_prove is None and not smt.available(): click.echo("replay gate: note: z3 is not installed: no proofs in this run", err=True)
    options = Options(jobs=jobs, exec=("all" if exec_all else "changed") if do_exec else None, device=device, progress=terminal_progress(),
                      perf_gate=perf_gate, old_code_causes=old_causes.attribute,
                      prove=smt.available() if do_prove is None else do_prove, determinism=determinism)
    report, code = G.run_check(selection, options, paths, log=lambda s: click.echo(s, err=True), show=click.echo)
  accepted_by = None
  if accept is None: accepted_by = G.accept_marker()
  elif accept: accepted_by = "--accept"
  passed, reason = G.decide(report, code, accepted_by is not None)
  if report is None and not G.exec_available():
    reason += " (replay.execute.pool is missing, so `replay check --exec` cannot run: update replay, or set REPLAY_EXEC=0 / --no-exec)"
  click.echo(f"\nreplay gate: {'PASS' if passed else 'FAIL'}: {E.terminal(reason)}")  # (the reason may quote stored labels)
  if accepted_by and (report or {}).get("summary", {}).get("changed"): click.echo(f"  {G.MARKER} found in {accepted_by}")
  if note := G.determinism_note(report): click.echo(f"  note: {note}")
  md = G.report_markdown(report, report_md)
  if where := G.write_step_summary(G.summary_markdown(passed, reason, md, accepted_by, note), summary_path):
    click.echo(f"  summary written to {where}")
  sys.exit(0 if passed else G.failure_exit(report, code))
