"""The `replay` command line (click).

Exit codes, for every command: 0 nothing changed / success; 1 changes or mismatches found; 2 errors,
incompatible captures or bad usage. Every failure says what to do next.
"""
from __future__ import annotations
import json, os, subprocess, sys
from pathlib import Path
import click
from tinysched.codegen.target import TARGETS
from replay.levels import HOOKED, LEVELS
from replay.record.recorder import RENDERED
from replay.store.sqlite import Store, StoreError, compact
from replay.store.encode import VERSION, IncompatibleCapture
from replay.store.migrate import upgrade_store
from replay.check import Options, Selection
from replay.check.determinism import parse_seeds
from replay.report import escape as E, text as R
from replay.report.atomic import write_atomic
from replay.report.html import capture_page
from replay.report.info import show, stats
from replay.baseline import coverage as C, history as H, twice as D
from replay.baseline.distill import distill, summary
from replay.prove import run as prove_run, smt
from replay.prove.cache import ProofCache
from replay.baseline.suite import run_model, suite_models
from replay.cli.common import Commands, _fail, _dbs, exec_options, report_options, write_reports, report_paths_writable, run_check, terminal_progress
from replay.cli.ci import commits_cmd, accept_cmd, gate_cmd, bisect_cmd
from replay.cli.triage import blame_cmd, minimize_cmd
from replay.triage import old_causes

def _shard(s: str | None) -> tuple[int, int] | None:
  if s is None: return None
  try:
    i, n = (int(x) for x in s.split("/"))
    if not (n >= 1 and 0 <= i < n): raise ValueError
    return i, n
  except ValueError: _fail(f"--shard {s!r}: expected I/N with 0 <= I < N, e.g. 0/4"); raise

@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
  """Process replay for tinysched: capture, replay, diff and gate scheduler/codegen changes."""

@main.command("check")
@click.argument("dbs", nargs=-1)
@click.option("--level", type=click.Choice(LEVELS), help="only this capture level")
@click.option("--label", help="only captures with this label (model)")
@click.option("--key", help="only captures whose input or output key starts with this")
@click.option("-j", "--jobs", type=int, default=None, help="parallel workers (default: all cores)")
@click.option("--shard", help="replay only shard I of N (I/N), split deterministically by capture key")
@click.option("--slower-threshold", type=float, default=0.10, show_default=True, help="flag kernels slower by more than this fraction")
@click.option("--determinism/--no-determinism", default=True, show_default=True,
              help="replay the changed captures, the errors and a sample of the identical ones (1 in 8, by key) again in a fresh "
              "process with another PYTHONHASHSEED and a perturbed allocation order: outputs that differ are `unstable`")
@click.option("--twice", is_flag=True, help="the determinism check on every capture, in two processes (PYTHONHASHSEED A, and B with the "
              "allocation order perturbed)")
@click.option("--hash-seeds", default="1,2", show_default=True, metavar="A,B",
              help="the determinism check's PYTHONHASHSEED values (its process gets B; with --twice, A and B); may be equal")
@click.option("--reoptimize", is_flag=True, help="program level: choose the opts again with the current heuristic (stored AST and "
              "target) instead of rendering the stored opts, so a heuristic change shows as changed opts and source")
@click.option("--allow-empty", is_flag=True, help="a selection of no capture exits 0 (by default it is an error, exit 2: a run that "
              "checked nothing must not pass)")
@click.option("--prove", is_flag=True, help="also prove every integer rule and the changed captures' indexing with z3 (a counterexample "
              "fails like a wrong number); needs z3-solver")
@click.option("--causes/--no-causes", default=True, show_default=True, help="group the changes by their cause: the rules without which "
              "a sample of each group gets its stored output back (replay/check/causes.py), else blame with the old code")
@click.option("--causes-budget", type=float, default=None, help="seconds for each cause step (default: the replay's own time, at least "
              "0.5 s for the rules turned off and 5 s for blame with the old code; what is not named in time is named by a later check)")
@exec_options
@report_options()
def check_cmd(dbs, level, label, key, jobs, shard, exec_mode, device, slower_threshold, determinism, twice, hash_seeds, reoptimize, allow_empty,
              prove, causes, causes_budget, timeout, perf_gate, report_md, report_json, junit, report_html, verbose) -> None:
  """Replay the stored captures (default captures/*.db) through the current code."""
  report_paths_writable(report_md, report_json, junit, report_html)
  selection = Selection(tuple(_dbs(dbs)), level=level, label=label, key=key, shard=_shard(shard), allow_empty=allow_empty)
  options = Options(jobs=jobs, reoptimize=reoptimize, determinism=determinism, twice=twice, hash_seeds=_seeds(twice or determinism, hash_seeds, True),
                    exec=exec_mode, device=device, timeout=timeout, slower_threshold=slower_threshold, perf_gate=perf_gate,
                    progress=terminal_progress(), prove=prove, causes=causes, causes_budget=causes_budget,
                    old_code_causes=old_causes.attribute if causes else None)
  if prove and not smt.available(): _fail("--prove needs z3", "pip install z3-solver (the `proofs` extra), or leave out --prove")
  rep = run_check(selection, options)
  if reoptimize: _say_not_reoptimized(rep, verbose)
  _emit(rep, report_md, report_json, junit, report_html, verbose)

def _say_not_reoptimized(rep, verbose: bool) -> None:
  """--reoptimize: the program rows replayed with their stored opts (no host facts recorded), counted per store; each
  row with --verbose (and in --report-json: the result's `note`)."""
  skipped = [r for r in rep.results if r.note]
  if not skipped: return
  per_db: dict[str, int] = {}
  for r in skipped: per_db[r.db] = per_db.get(r.db, 0) + 1
  click.echo(f"replay: --reoptimize: {len(skipped)} program row(s) {skipped[0].note}:", err=True)
  for db, n in per_db.items(): click.echo(f"  {db}: {n}", err=True)
  if verbose:
    for r in skipped: click.echo(f"    {r.db} run {r.run_id} seq {r.seq} {r.label} {r.input_key[:16]}", err=True)

def _emit(rep, report_md, report_json, junit, report_html, verbose) -> None:
  click.echo(R.terminal(rep, verbose=verbose))  # escaped for the terminal by the renderer (replay/report/escape.py)
  write_reports(rep, report_md, report_json, junit, report_html)
  sys.exit(rep.exit_code())

def _seeds(twice: bool, hash_seeds: str, perturbed: bool = False) -> tuple[int, int]:
  """--hash-seeds A,B. `perturbed`: the processes also differ in their allocation order (replay check's determinism
  check), so two equal seeds still compare two processes; `replay suite --twice` varies the seed alone."""
  if hash_seeds != "1,2" and not twice:
    _fail("--hash-seeds goes with --twice" + (" or the determinism check (--no-determinism is given)" if perturbed else ""))
  try: return parse_seeds(hash_seeds, allow_equal=perturbed)
  except ValueError as e: _fail(f"--hash-seeds {e}"); raise

@main.command("prove")
@click.argument("dbs", nargs=-1)
@click.option("--rules", "only_rules", is_flag=True, help="only the integer rules and the view algebra (no captures)")
@click.option("--level", type=click.Choice(LEVELS), help="captures of this level only")
@click.option("--label", help="captures with this label (model) only")
@click.option("--key", help="captures whose input or output key starts with this only")
@click.option("--timeout-ms", type=int, default=10_000, show_default=True, help="the solver's limit per claim (then: unknown)")
@click.option("--no-cache", is_flag=True, help="prove everything again (the cache keys on the code and the capture contents)")
@click.option("--report-json", type=click.Path(dir_okay=False), help="write every proof result as JSON")
@click.option("-v", "--verbose", is_flag=True, help="also list unknown, unreached and listed rules with their reasons")
def prove_cmd(dbs, only_rules, level, label, key, timeout_ms, no_cache, report_json, verbose) -> None:
  """Prove with z3, for every value rather than the values a test reaches: each integer rewrite rule (symbolic
  simplifier, closed-form folds) and the view algebra, and each capture's indexing (every load and store in bounds,
  every int32-narrowed index fits) in the stores (default captures/*.db). Exit 1 on a counterexample."""
  if not smt.available(): _fail("z3 is not installed", "pip install z3-solver (the `proofs` extra)")
  report_paths_writable(report_json)
  paths = [] if only_rules and not dbs else _dbs(dbs)
  cache = None if no_cache else ProofCache()
  if cache is not None and cache.unusable: click.echo(f"replay: {cache.status()}", err=True)
  rep = prove_run.run(paths, do_captures=not only_rules, level=level, label=label, key=key, timeout_ms=timeout_ms, cache=cache,
                      progress=terminal_progress())
  click.echo(prove_run.text(rep, verbose))
  if report_json:
    try: Path(report_json).write_text(json.dumps(rep.to_json(), indent=1, sort_keys=True, default=str), encoding="utf-8")
    except OSError as e: _fail(f"cannot write the report {report_json}: {e.strerror or e}", "name a file in a folder you can write")
  sys.exit(rep.exit_code())

@main.command("diff")
@click.argument("old_db")
@click.argument("new_db")
@click.option("--level", type=click.Choice(LEVELS))
@click.option("--label")
@click.option("--allow-empty", is_flag=True, help="no capture to compare exits 0 (by default an error, exit 2)")
@exec_options
@report_options()
def diff_cmd(old_db, new_db, level, label, allow_empty, exec_mode, device, timeout, perf_gate, report_md, report_json, junit, report_html,
             verbose) -> None:
  """Compare two capture stores produced by different code (--exec: run the paired kernels old vs new vs the reference)."""
  report_paths_writable(report_md, report_json, junit, report_html)
  rep = run_check(Selection((new_db,), level=level, label=label, against=old_db, allow_empty=allow_empty),
                  Options(exec=exec_mode, device=device, timeout=timeout, perf_gate=perf_gate, progress=terminal_progress()))
  _emit(rep, report_md, report_json, junit, report_html, verbose)

@main.command("capture", context_settings={"ignore_unknown_options": True})
@click.option("--db", required=True, type=click.Path(dir_okay=False), help="capture store to write (created if missing)")
@click.option("--label", default="", help="label for this run (e.g. the model name)")
@click.option("--levels", default=",".join(HOOKED), show_default=True, help="comma-separated capture levels")
@click.option("--target", "target_name", metavar="NAME", help="also render every scheduled kernel for this named target "
              "(tinysched/codegen/target.py TARGETS), program level, without the device")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def capture_cmd(db, label, levels, target_name, command) -> None:
  """Run COMMAND with capture on: replay capture --db x.db --label mlp -- python train.py"""
  lv = [x for x in levels.split(",") if x]
  if bad := [x for x in lv if x not in LEVELS]: _fail(f"unknown level(s) {bad}; choose from {', '.join(LEVELS)}")
  _check_target(target_name, lv)
  try: Store(db).close()  # fail early, before running anything, if the file is not a usable store
  except StoreError as e: _fail(str(e), "choose a new file name or an existing capture store")
  folder = Path(db).resolve().parent
  if not os.access(folder, os.W_OK) or not os.access(db, os.W_OK):  # (a read-only disk too): SQLite writes beside the store
    _fail(f"cannot capture into {db}: {'the store' if not os.access(db, os.W_OK) else 'its folder'} is not writable "
          f"(read-only disk or permissions)", "name a store in a folder you can write")
  env = {**os.environ, "TINYSCHED_CAPTURE": str(Path(db).resolve()), "TINYSCHED_CAPTURE_LABEL": label, "TINYSCHED_CAPTURE_LEVELS": ",".join(lv),
         "TINYSCHED_CAPTURE_STRICT": "1",  # a capture that failed (full disk...) exits 2 here, after its warning
         **({"TINYSCHED_CAPTURE_TARGET": target_name} if target_name else {})}
  try: rc = subprocess.call(list(command), env=env)
  except OSError as e: _fail(f"cannot run {command[0]!r}: {e}")
  except KeyboardInterrupt: rc = 130
  if rc != 0: click.echo(f"replay: the command exited with {rc}; what it captured before is kept in {db}", err=True)
  sys.exit(rc if rc in (0,) else (rc if rc < 128 else 2))

def _check_target(name: str | None, levels) -> None:
  """--target NAME: exit 2 at the start, naming it and the known targets, when TARGETS has no such name."""
  if name is None: return
  if name not in TARGETS: _fail(f"unknown target {name!r}; known targets: {', '.join(TARGETS)}", "pass one of those names to --target")
  if RENDERED not in levels: _fail(f"--target {name} renders {RENDERED}-level captures, but the levels leave {RENDERED} out",
                                   f"add {RENDERED} to --levels")

@main.command("upgrade")
@click.argument("dbs", nargs=-1, required=True)
def upgrade_cmd(dbs) -> None:
  """Rewrite capture stores written by older format versions in today's form, in place and atomically (keys that change
  are followed in the rows, the accept log and the store's `format_upgrades` record). Reading an old store needs no
  upgrade: the format's steps apply on every read (replay/store/upgrade.py)."""
  for db in dbs:
    try: res = upgrade_store(db)
    except StoreError as e: _fail(E.terminal(e), "pass a capture store; a payload no step can carry is incompatible (see `replay check`)")
    found = ", ".join(f"version {v}: {n}" for v, n in sorted(res.versions.items())) or "no graph payload"
    click.echo(f"{db}: {res.payloads} payload(s) ({found}); {len(res.rewritten)} rewritten in version {VERSION}"
               + (f", {res.kept} unchanged" if res.kept else "") + ("" if res.rewritten else ": nothing to do, the store is as it was"))

@main.command("stats")
@click.argument("db")
def stats_cmd(db) -> None:
  """Summarize a capture store: runs, captures per level and label, distinct kernels, top ops, size."""
  try: click.echo(stats(db))  # escaped by the renderer
  except StoreError as e: _fail(E.terminal(e))

@main.command("show")
@click.argument("db")
@click.argument("key")
@click.option("--html", "html_path", type=click.Path(dir_okay=False),
              help="also write one HTML page: the capture replayed with the current code, diffs and AST drawings")
def show_cmd(db, key, html_path) -> None:
  """Print one capture: input graph, output AST, var_vals, assigns (KEY: a prefix of its input or output key)."""
  report_paths_writable(html_path)
  try:
    click.echo(show(db, key))  # escaped by the renderer; the messages below may quote stored text, escaped here
    if html_path:
      page = capture_page(db, key)
      try: write_atomic(html_path, page)
      except OSError as e: _fail(E.terminal(f"cannot write the report {html_path}: {e.strerror or e}"), "name a file in a folder you can write")
      click.echo(E.terminal(f"HTML page written to {html_path}"))
  except StoreError as e: _fail(E.terminal(e))
  except IncompatibleCapture as e: _fail(E.terminal(f"capture {key} cannot be decoded: {e}"), "re-capture it with this version")
  except KeyError as e: _fail(E.terminal(e.args[0]), E.terminal(f"list keys with: sqlite-utils {db} 'select level, label, input_key from captures'"))

@main.command("suite")
@click.option("--models", help="comma-separated model names (default: the whole suite)")
@click.option("--db", type=click.Path(dir_okay=False), help="write every model into this one store")
@click.option("--out", type=click.Path(file_okay=False), default="captures", show_default=True,
              help="without --db: one store per model, OUT/<model>.db (replaced)")
@click.option("--full", is_flag=True, help="full-size models (default: the quick versions CI runs)")
@click.option("--levels", default=",".join(HOOKED), show_default=True)
@click.option("--twice", is_flag=True, help="capture each model a second time under another PYTHONHASHSEED and report key sets that differ")
@click.option("--hash-seeds", default="1,2", show_default=True, metavar="A,B", help="with --twice: the two PYTHONHASHSEED values")
@click.option("--target", "target_name", metavar="NAME", help="also render every scheduled kernel for this named target "
              "(tinysched/codegen/target.py TARGETS), program level, without the device")
def suite_cmd(models, db, out, full, levels, twice, hash_seeds, target_name) -> None:
  """Run the real-model suite with capture on."""
  seeds = _seeds(twice, hash_seeds)
  _check_target(target_name, levels.split(","))
  if twice and target_name: _fail("--twice and --target cannot be combined yet (the second capture would not render for the target)",
                                  "run them one at a time")
  model_env = {**({"PYTHONHASHSEED": str(seeds[0])} if twice else {}), **({"TINYSCHED_CAPTURE_TARGET": target_name} if target_name else {})}
  names = models.split(",") if models else suite_models()
  unknown = [n for n in names if n not in suite_models()]
  if unknown: _fail(f"unknown model(s) {unknown}; the suite has {', '.join(suite_models())}")
  failed, unstable = 0, []
  for name in names:
    target = Path(db) if db else Path(out) / f"{name}.db"
    if not db: target.parent.mkdir(parents=True, exist_ok=True)
    before = D.last_run(target) if db and twice else 0
    # without --db the model's store replaces the old one only after a complete, non-empty run (atomic rename)
    r = run_model(name, target, quick=not full, levels=tuple(levels.split(",")), replace=not db,
                  env=model_env or None)
    if r.get("skipped"): click.echo(f"  {name}: skipped ({r['skipped']})")
    elif r.get("ok"): click.echo(f"  {name}: captured into {target} in {r['seconds']}s  {json.dumps(r.get('summary'))[:160]}")
    else:
      failed += 1
      click.echo(f"  {name}: FAILED after {r['seconds']}s: {r.get('error')}", err=True)
      if r.get("stderr"): click.echo("    " + "\n    ".join(r["stderr"].splitlines()[-15:]), err=True)
    if twice and r.get("ok") and not r.get("skipped"):
      try: d = D.capture_again(name, target, before, not full, tuple(levels.split(",")), seeds)
      except D.DeterminismError as e: _fail(str(e), e.hint)
      if d: unstable.append(name)
      click.echo("\n".join(d.lines()) if d else f"  {name}: captured again under PYTHONHASHSEED={seeds[1]}: the same keys", err=bool(d))
    if not db: compact(target)
  if failed: _fail(f"{failed} model(s) failed", "fix the model or run the others with --models")
  if unstable:
    _fail(f"model(s) {', '.join(unstable)}: two captures under PYTHONHASHSEED={seeds[0]} and ={seeds[1]} differ (unstable; the stores "
          "hold the first)", "find what iterates a set or an id()-ordered dict into the captured graphs or outputs: "
          "`replay check --twice` on the stores shows outputs that depend on the seed", code=1)

@main.group("report")
def report_grp() -> None:
  """Work with JSON reports."""

@report_grp.command("merge")
@click.argument("reports", nargs=-1, required=True)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="merged JSON report")
@report_options(leave_out=("report_json", "verbose"))  # the merged JSON report is -o
def report_merge_cmd(reports, output, report_md, junit, report_html) -> None:
  """Combine shard JSON reports (replay check --shard I/N --report-json ...) into one."""
  report_paths_writable(output, report_md, junit, report_html)
  reps = []
  for p in reports:
    try: reps.append(R.from_json(json.loads(Path(p).read_text())))
    except (OSError, ValueError, KeyError, TypeError) as e: _fail(f"{p}: not a replay JSON report ({e})")
  rep = R.merge(reps)
  write_reports(rep, report_md, output, junit, report_html)
  click.echo(R.terminal(rep))
  sys.exit(rep.exit_code())

@main.command("coverage")
@click.argument("dbs", nargs=-1)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="also write the counts as JSON (every rule, whatever --uncovered-only)")
@click.option("--uncovered-only", is_flag=True, help="list only the rules no capture exercised (and the totals)")
@click.option("--save", is_flag=True, help="also append each store's own counts to its `coverage` table (with the commit that measured them)")
def coverage_cmd(dbs, json_path, uncovered_only, save) -> None:
  """Which named scheduler, symbolic and codegen rules and grouping choices the captures (default captures/*.db)
  exercise: per rule, the captures whose replay fires it and the firings in all; rules never exercised first."""
  report_paths_writable(json_path)
  paths = _dbs(dbs)
  try: cov = C.coverage(paths)
  except C.CoverageError as e: _fail(str(e), e.hint)
  if json_path:
    try: Path(json_path).write_text(cov.to_json(), encoding="utf-8")
    except OSError as e: _fail(f"cannot write {json_path}: {e.strerror or e}", "name a file in a folder you can write")
  click.echo(C.table(cov, uncovered_only))
  if save:
    for p in paths:
      try: C.save(p, log=click.echo)
      except (StoreError, OSError) as e: _fail(f"{p}: cannot save coverage: {e}", "pass stores you can write (not in use by a capture)")

@main.command("perf")
@click.argument("dbs", nargs=-1)
@click.option("--level", type=click.Choice(LEVELS), help="only this capture level")
@click.option("--key", help="only inputs whose input key, or an output key of theirs, starts with this")
@click.option("--top", type=int, default=20, show_default=True, help="rows to print, largest drift first (0: all)")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="also write every row's history and drift as JSON (whatever --top)")
def perf_cmd(dbs, level, key, top, json_path) -> None:
  """Each kernel's time across the commits the baseline was accepted at (the stores' perf history, recorded by
  `replay accept`; default captures/*.db), largest drift first: a slow drift over many small commits shows here.
  Exit 2 when no store has a history, or the filters select no row."""
  report_paths_writable(json_path)
  paths = _dbs(dbs)
  try: h = H.history(paths, key_prefix=key, level=level)
  except H.HistoryError as e: _fail(str(e), e.hint)
  click.echo(H.text(h, top))
  if json_path:
    try: write_atomic(json_path, h.to_json())
    except OSError as e: _fail(f"cannot write {json_path}: {e.strerror or e}", "name a file in a folder you can write")
  if not h.stores: _fail(f"no perf history in {len(paths)} store(s)", H.HINT)  # (empty means fail)
  if not h.series:
    given = " ".join(f"--{k} {v}" for k, v in (("level", level), ("key", key)) if v is not None)
    _fail(f"{given} selects no row of the perf history", "check the filter (`replay perf` without it lists every row)")

@main.command("distill")
@click.argument("sources", nargs=-1, required=True)
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False), help="the new store (replaced whole)")
@click.option("--against", "against", multiple=True, help="a baseline store whose coverage counts already (repeatable; e.g. captures/*.db)")
@click.option("--per-rule", type=int, default=3, show_default=True, help="captures wanted per rule, baseline included")
def distill_cmd(sources, out, against, per_rule) -> None:
  """Keep the few rows of SOURCES (a test suite's captures) that exercise rules the baseline exercises fewer than
  --per-rule times: a small store to commit beside the model captures (replay/baseline/distill.py)."""
  if (o := Path(out).resolve()) in {Path(p).resolve() for p in (*sources, *against)}: _fail(f"--out {out} is also an input", "write to a new file")
  if not o.parent.is_dir(): _fail(f"--out {out}: no such folder {o.parent}", "create it, or name a file in an existing folder")
  try: res = distill(list(sources), out, against=list(against), per_rule=per_rule, log=click.echo)
  except C.CoverageError as e: _fail(str(e), e.hint)
  click.echo(summary(res, per_rule))
  if not res.kept: click.echo(f"note: nothing to keep: {out} was not written (an earlier file of that name was removed)")

for _ci in (commits_cmd, bisect_cmd, accept_cmd, gate_cmd): main.add_command(_ci)  # the CI commands live in replay/cli/ci.py
for _tr in (blame_cmd, minimize_cmd): main.add_command(_tr)  # triage: replay/cli/triage.py

if __name__ == "__main__": main()
