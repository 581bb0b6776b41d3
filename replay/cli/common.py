"""What the `replay` commands share: the error exit, the --exec options and how they run, the report options."""
from __future__ import annotations
import errno, glob, os, sqlite3, sys, time
from pathlib import Path
from typing import Callable, NoReturn
import click
from replay import check, process
from replay.check import Options, Report, Selection
from replay.report import escape as E, files as F

def _fail(msg: str, hint: str | None = None, code: int = 2) -> NoReturn:
  click.echo(f"replay: error: {msg}", err=True)
  if hint: click.echo(f"  next: {hint}", err=True)
  sys.exit(code)

DEFAULT_GLOB = "captures/*.db"

# errors of the disk under a store or a report: the user can act on them (free space, permissions), so they are a message
# and exit 2, never a traceback
STORAGE_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EIO, errno.EFBIG}
PATH_PARAMS = ("db", "dbs", "old_db", "new_db", "captures_dir", "out", "sources")

class Command(click.Command):
  """A `replay` command: its parameters are kept where the group's error handling can name the stores (Commands)."""
  def invoke(self, ctx: click.Context):
    ctx.meta["replay.params"] = dict(ctx.params)  # (meta is shared by the whole context tree: Commands reads it on a failure)
    return super().invoke(ctx)

class Commands(click.Group):
  """The `replay` group: what no command should show as a traceback is turned into its documented exit here, in one place.
  - a stop by SIGINT/SIGTERM (replay.process.Stopped, or Ctrl-C in a command that does not handle it): a line, exit 130/143;
  - a storage error (SQLite's "database or disk is full", "attempt to write a readonly database", "database is locked", an
    OSError of the disk): a message naming the command's stores and the error, what to do next, exit 2."""
  command_class = Command
  def invoke(self, ctx: click.Context):
    try: return super().invoke(ctx)
    except process.Stopped as e:
      click.echo(f"\nreplay: stopped by {e.name}", err=True)
      sys.exit(e.exit_code)
    except KeyboardInterrupt:
      click.echo("\nreplay: stopped by SIGINT", err=True)
      sys.exit(130)
    except sqlite3.Error as e: _storage_failure(ctx, f"{type(e).__name__}: {e}")
    except OSError as e:
      if e.errno not in STORAGE_ERRNOS: raise
      _storage_failure(ctx, f"{e.strerror or e}" + (f": {e.filename}" if e.filename else ""))

def _storage_failure(ctx: click.Context, what: str) -> NoReturn:
  sub = ctx.invoked_subcommand or ""
  params = ctx.meta.get("replay.params", {})
  paths = [str(p) for k in PATH_PARAMS for v in [params.get(k)] if v for p in (v if isinstance(v, (list, tuple)) else [v])]
  where = f" (stores: {', '.join(paths)})" if paths else ""
  _fail(E.terminal_line(f"replay {sub}: a store or file could not be read or written{where}: {what}"),  # (a path may be anything)
        "free space on that disk or make the file writable (a locked database: wait for the other writer), then run it again; "
        "what was written before is kept")

def _dbs(paths: tuple[str, ...]) -> list[str]:
  """The capture stores a command was given, or captures/*.db of the current directory (none: exit 2)."""
  if paths: return list(paths)
  found = sorted(glob.glob(DEFAULT_GLOB))
  if not found: _fail(f"no capture stores given and none match {DEFAULT_GLOB} in {os.getcwd()}",
                      "pass DB paths, or run `replay suite` / `replay capture` to make captures")
  return found

def exec_options(f):
  """--exec/--exec-all and their settings, for every command that can run kernels."""
  for opt in reversed([
      click.option("--exec", "exec_mode", flag_value="changed", default=None, help="run changed kernels old vs new vs the reference on a device"),
      click.option("--exec-all", "exec_mode", flag_value="all", help="run every captured kernel old vs new vs the reference"),
      click.option("--device", default=None, help="device for --exec (default: Device.DEFAULT); checked before anything runs"),
      click.option("--timeout", type=float, default=None, help="seconds per execution job (default: from a calibration run and the job's size)"),
      click.option("--perf-gate", type=float, default=None, metavar="PCT", help="fail when new kernels are slower by more than PCT%% beyond noise")]):
    f = opt(f)
  return f

# the report options of every command that writes a report: (parameter, option names, help)
REPORT_OPTIONS = (("report_md", ("--report-md",), "write a Markdown report (PR comment / job summary)"),
                  ("report_json", ("--report-json",), "write the JSON report (schema in replay/report/text.py)"),
                  ("junit", ("--junit",), "write JUnit XML"),
                  ("report_html", ("--report-html",), "write the HTML report: one self-contained page (every group and member, "
                                                      "side-by-side diffs, AST drawings) to open in a browser or keep as a CI artifact"),
                  ("verbose", ("-v", "--verbose"), "print diffs and tracebacks"))

def report_options(leave_out: tuple[str, ...] = (), **helps: str):
  """Decorator: the report files (--report-md, --report-json, --junit) and -v/--verbose, the same names and kinds in
  every command. `leave_out` names parameters a command has no use for; `helps` words a help text for one command
  (the gate's files are the check's, and its Markdown report may be read instead)."""
  if unknown := sorted({*leave_out, *helps} - {param for param, _, _ in REPORT_OPTIONS}):
    raise TypeError(f"report_options: no report option {unknown}")  # a misspelt name would otherwise be ignored
  def decorate(f):
    for param, names, text in reversed(REPORT_OPTIONS):
      if param in leave_out: continue
      kind = {"is_flag": True} if param == "verbose" else {"type": click.Path(dir_okay=False)}
      f = click.option(*names, param, help=helps.get(param, text), **kind)(f)
    return f
  return decorate

def report_paths_writable(*paths: str | None) -> None:
  """Fail at once (exit 2) when a report file cannot be written, before a long replay runs for nothing."""
  for p in paths:
    if not p: continue
    d = Path(p).resolve().parent
    if Path(p).is_dir(): _fail(f"cannot write the report {p}: it is a directory", "name a file")
    if not d.is_dir(): _fail(f"cannot write the report {p}: the folder {d} does not exist", "create it, or name a file in an existing folder")
    if not os.access(d, os.W_OK) or (Path(p).exists() and not os.access(p, os.W_OK)):
      _fail(f"cannot write the report {p}: permission denied", "name a file in a folder you can write")

def write_reports(rep: Report, report_md: str | None, report_json: str | None, junit: str | None, report_html: str | None = None,
                  drawings: dict | None = None) -> None:
  """Write the report files the options asked for (an unwritable one: exit 2)."""
  try: F.write_reports(rep, F.ReportPaths(report_md, report_json, junit, report_html), drawings)
  except F.ReportWriteError as e: _fail(str(e), e.hint)

def run_check(selection: Selection, options: Options) -> Report:
  """replay.check.run, its CheckError printed with what to do next (exit 2)."""
  try: return check.run(selection, options)
  except check.CheckError as e: _fail(str(e), e.hint)

def exec_device(exec_mode: str | None, device: str | None) -> str | None:
  """The execution check's device, checked before anything runs (a bad name fails at the start, exit 2)."""
  try: return check.validate(Selection(()), Options(exec=exec_mode, device=device))
  except check.CheckError as e: _fail(str(e), e.hint)

def terminal_progress() -> Callable[[int, int], None] | None:
  if not sys.stderr.isatty():
    if not os.environ.get("REPLAY_PROGRESS"): return None
    t0 = time.perf_counter()
    def lines(done: int, total: int) -> None:  # for logs: one line per step
      sys.stderr.write(f"  progress {done}/{total} at {time.perf_counter() - t0:.1f}s\n"); sys.stderr.flush()
    return lines
  def show(done: int, total: int) -> None:
    width = 30
    filled = int(width * done / max(total, 1))
    sys.stderr.write(f"\r  replaying [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done >= total: sys.stderr.write("\n")
    sys.stderr.flush()
  return show
