"""What the `replay` commands share: the error exit, the --exec options and how they run, the report options."""
from __future__ import annotations
import sys
import click

def _fail(msg: str, hint: str | None = None, code: int = 2) -> None:
  click.echo(f"replay: error: {msg}", err=True)
  if hint: click.echo(f"  next: {hint}", err=True)
  sys.exit(code)

DEFAULT_GLOB = "captures/*.db"

def _dbs(paths: tuple[str, ...]) -> list[str]:
  """The capture stores a command was given, or captures/*.db of the current directory (none: exit 2)."""
  if paths: return list(paths)
  import glob, os
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
                  ("report_json", ("--report-json",), "write the JSON report (schema in replay/report.py)"),
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
  import os
  from pathlib import Path
  for p in paths:
    if not p: continue
    d = Path(p).resolve().parent
    if Path(p).is_dir(): _fail(f"cannot write the report {p}: it is a directory", "name a file")
    if not d.is_dir(): _fail(f"cannot write the report {p}: the folder {d} does not exist", "create it, or name a file in an existing folder")
    if not os.access(d, os.W_OK) or (Path(p).exists() and not os.access(p, os.W_OK)):
      _fail(f"cannot write the report {p}: permission denied", "name a file in a folder you can write")

def html_drawings(rep):
  """The AST drawings of a report's HTML page (replay.drawing), made while the stores are there to read."""
  from replay import drawing
  from replay.report import ordered_groups
  return drawing.draw_results([m for g in ordered_groups(rep) for m in g["members"]])

def write_reports(rep, report_md: str | None, report_json: str | None, junit: str | None, report_html: str | None = None,
                  drawings=None) -> None:
  """Write the report files the options asked for (an unwritable one: exit 2). `drawings`: made by html_drawings(rep)
  when the stores may be gone by now (replay commits); otherwise drawn here."""
  from pathlib import Path
  from replay import report as R
  def write(path: str, make) -> None:
    try: text = make()
    except OSError as e: _fail(f"cannot make the report {path}: {e}")
    try: Path(path).write_text(text, encoding="utf-8")
    except OSError as e: _fail(f"cannot write the report {path}: {e.strerror or e}", "name a file in a folder you can write")
  if report_md: write(report_md, lambda: R.markdown(rep, html_name=Path(report_html).name if report_html else None))
  if report_json:
    try: R.write_json(rep, report_json)
    except OSError as e: _fail(f"cannot write the report {report_json}: {e.strerror or e}", "name a file in a folder you can write")
  if junit: write(junit, lambda: R.junit(rep))
  if report_html:
    from replay import report_html as H
    write(report_html, lambda: H.render(rep, drawings if drawings is not None else html_drawings(rep)))

def _exec_device(exec_mode, device):
  """The execution check's device, checked before any replay runs (a bad name fails at the start, exit 2)."""
  if not exec_mode: return device
  from replay.execcheck import check_device
  try: return check_device(device)
  except ValueError as e: _fail(str(e), "pick an existing device: OPENCL, OPENCL:<n> or NUMPY (`python -c 'from tinysched.runtime.opencl import "
                                "list_devices as l; print(l())'` lists OpenCL devices)")

def run_exec(rep, exec_mode, device, slower_threshold=0.10, timeout=None, perf_gate=None) -> None:
  """--exec / --exec-all on a replay report (check, diff and commits share it)."""
  rep.perf_gate = perf_gate
  if not exec_mode: return
  from replay.check import terminal_progress
  from replay.execcheck import exec_report, DeviceUnusable
  # every kernel of the store (--exec-all) is a correctness sweep: fewer timing runs than for the changed ones
  try: exec_report(rep, mode=exec_mode, device=device, slower_threshold=slower_threshold, progress=terminal_progress(),
                   timing_runs=5 if exec_mode == "changed" else 1, timeout_s=timeout)
  except DeviceUnusable as e: _fail(str(e), "check the device with `replay check --exec --device NUMPY`, or run without --exec")

