"""The CI gate: decide pass/fail from a `replay check` JSON report, its exit code and the accept marker.

Rules (`decide`), in order; the first that applies wins:
1. no report, an unreadable report, fatal stores, errors or incompatible captures, or an exit code other
   than 0/1: FAIL, always (the replay itself did not work; `[replay:accept]` cannot accept what was not checked);
2. any result whose `exec.verdict` is `wrong` (a kernel disagrees with the independent reference, even when old
   and new agree), `mismatch` (old and new kernels compute different numbers), `unstable` (different bits on
   two runs), `failed` (a kernel could not be run) or `timeout` (it hung): FAIL, always: wrong or unverified
   numbers are not a reviewable change; the same for a `--perf-gate` regression, for a throughput figure above the
   device's measured peak (`exec.throughput_refused`: a bug of the cost model or timer), and for a capture whose replay
   `outcome` is `unstable` (the determinism check, on by default: its output differs between processes, and the
   reason says whether the hash seed or the allocation order exposed it);
3. exit code 0 and nothing changed: PASS;
4. changes (exit code 1): PASS only when accepted (`[replay:accept]` in the PR title or the head commit
   message) and every changed capture's execution verdict is `equivalent`: a change whose numbers were not
   checked (verdict `skipped`, or none: no execution check ran, as with --no-exec or REPLAY_EXEC=0) is never
   accepted by the marker; it is re-baselined with `replay accept` in the same commit, or checked where the
   execution check can run it. Else FAIL.

`accept_marker` finds the marker in $REPLAY_PR_TITLE, the GitHub event file ($GITHUB_EVENT_PATH:
pull_request.title, or head_commit.message on a push) and the head commit message (`git log -1 --format=%B`,
of the PR's head commit when the event names it).
"""
from __future__ import annotations
import importlib.util, json, os, signal
from pathlib import Path
from typing import Callable, Mapping
from replay import check
from replay.check import Options, Selection
from replay.errors import HintedError
from replay.git import query
from replay.report import text as R
from replay.prove.run import refuted_in
from replay.report.files import ReportPaths, write_reports
from replay.execute.verdicts import FAIL_VERDICTS as ALWAYS_FAIL_VERDICTS
from replay.check.determinism import EXPOSED

MARKER = "[replay:accept]"

def _verdict(r: dict) -> str | None: return (r.get("exec") or {}).get("verdict")

def decide(report_json: dict | None, exit_code: int, accept: bool) -> tuple[bool, str]:
  """(passed, reason) of the gate for one `replay check` (or merged) JSON report and the exit code of the command."""
  if not isinstance(report_json, dict) or report_json.get("schema") != "tinysched-replay-report":
    return False, (f"replay check exited {exit_code} without a readable JSON report: it crashed or was misused; "
                   "see its output above, fix that, and run it again")
  summary = report_json.get("summary") or {}
  results = report_json.get("results") or []
  code = max(int(exit_code), int(report_json.get("exit_code") or 0))
  fatal = report_json.get("fatal") or []
  if report_json.get("stopped"):
    return False, (f"the check was stopped by {report_json['stopped']} after {len(results)} of {report_json.get('selected', '?')} captures: "
                   "a partial report decides nothing; run it again to the end")
  if fatal: return False, f"{len(fatal)} capture store(s) could not be read ({fatal[0]}); fix or re-capture them (replay accept)"
  if not results and not report_json.get("allow_empty"):
    return False, ("the check replayed no capture (its filters or shards selected none, or the stores are empty): a run that checked "
                   "nothing does not pass; fix the selection, or pass --allow-empty to `replay check` where an empty run is expected")
  errors, incompatible = int(summary.get("error", 0)), int(summary.get("incompatible", 0))
  if errors or incompatible:
    what = ", ".join(f"{n} {k}" for k, n in (("error(s)", errors), ("incompatible capture(s)", incompatible)) if n)
    return False, (f"{what}: the current code raised on stored inputs or cannot read them; [replay:accept] does not accept "
                   "errors: fix the regression, or re-capture obsolete inputs with `replay accept`")
  unstable_rows = [r for r in results if isinstance(r, dict) and r.get("outcome") == "unstable"]
  if unstable := max(int(summary.get("unstable", 0) or 0), len(unstable_rows)): return False, _unstable_reason(unstable, unstable_rows)
  if refuted := refuted_in(report_json.get("proofs")):
    return False, (f"{len(refuted)} proof(s) found a counterexample (a rule or a kernel's index is wrong for the values shown, whether "
                   "or not a test reaches them), which [replay:accept] cannot accept; see the report's proofs, fix the rule or the indexing")
  bad = {v: sum(_verdict(r) == v for r in results) for v in ALWAYS_FAIL_VERDICTS}
  if bad["wrong"]:
    models = sum(_verdict(r) == "wrong" and (r.get("exec") or {}).get("judged") == "model call" for r in results)
    what = f" ({models} of them model calls: the front end's numbers left their float64 twin)" if models else ""
    return False, (f"{bad['wrong']} capture(s) compute numbers that disagree with the independent numpy reference (exec wrong){what}: "
                   "a device, runtime, codegen, scheduler or front-end bug, which [replay:accept] cannot accept; see the report's failures")
  if bad["mismatch"]:
    models = sum(_verdict(r) == "mismatch" and (r.get("exec") or {}).get("judged") == "model call" for r in results)
    what = f" ({models} of them model calls: the front end now computes other numbers than stored)" if models else ""
    return False, (f"{bad['mismatch']} changed kernel(s) compute different numbers (exec mismatch){what}: a miscompile or a change of "
                   "meaning, which [replay:accept] cannot accept; fix the scheduler/codegen/front-end change")
  if bad["unstable"]:
    return False, (f"{bad['unstable']} kernel list(s) gave different bits on two runs with the same inputs (exec unstable): "
                   "a race or uninitialized read, which [replay:accept] cannot accept")
  if bad["failed"] or bad["timeout"]:
    what = ", ".join(f"{n} {k}" for k, n in (("failed to run", bad["failed"]), ("timed out (hung?)", bad["timeout"])) if n)
    return False, (f"kernels in the execution check: {what}; their numbers are unverified, which [replay:accept] cannot accept: "
                   "fix them (see the report), then run again")
  if (refused := [r for r in results if isinstance(r, dict) and (r.get("exec") or {}).get("throughput_refused")]):
    return False, (f"{len(refused)} kernel(s) measured above the device's measured peak ({_row(refused[0])}: "
                   f"{refused[0]['exec']['throughput_refused']}): a bug in the harness's cost model or timer, not a result; fix it")
  if code not in (0, 1): return False, f"replay check exited {code} (errors or bad usage); see its output above"
  if (slow := summary.get("perf_regressions")):
    return False, f"{slow} capture(s) got slower beyond --perf-gate {report_json.get('perf_gate')}% and their noise: fix the slowdown"
  changed = int(summary.get("changed", 0))
  if code == 0 and not changed: return True, "nothing changed: every capture replays identically"
  if not changed:  # exit 1 with nothing the report explains: do not guess
    return False, "replay check exited 1 but the report shows no change; look at its output above"
  exec_ok = summary.get("exec", {}).get("equivalent")
  numbers = f" ({exec_ok} checked numerically equivalent)" if exec_ok else ""
  if accept:
    changed_rows = [r for r in results if isinstance(r, dict) and r.get("outcome") == "changed"]
    # the marker waives a reviewable change of checked numbers only: every changed row needs the verdict `equivalent`
    if (n := changed - sum(_verdict(r) == "equivalent" for r in changed_rows)) > 0:
      return False, _unverified_reason(n, [r for r in changed_rows if _verdict(r) != "equivalent"])
    return True, f"{changed} changed capture(s){numbers} accepted by {MARKER}"
  return False, (f"{changed} capture(s) changed{numbers}; review the diffs. If intended: run `replay accept` and commit the new "
                 f"captures, or put {MARKER} in the PR title or head commit message")

def _row(r: dict) -> str:
  return f"{r.get('level')} {str(r.get('input_key') or '')[:16]} ({r.get('label') or '-'}, {r.get('db')})"

def _unstable_reason(n: int, rows: list[dict]) -> str:
  """Why unstable captures fail: what differed (an example row and its processes' outputs) and which perturbation exposed it."""
  by: dict[str, int] = {}
  for r in rows:
    e = (r.get("unstable") or {}).get("exposed_by") or "not attributed"
    by[e] = by.get(e, 0) + 1
  exposed = "; ".join(f"{k} for {v} capture(s)" + (f" ({EXPOSED[k]})" if k in EXPOSED else "") for k, v in sorted(by.items(), key=lambda kv: -kv[1]))
  eg = f". E.g. {_row(rows[0])}: {(rows[0].get('reason') or '').splitlines()[0]}" if rows else ""
  return (f"{n} capture(s) give different outputs in different processes (unstable): a determinism bug, which {MARKER} cannot "
          f"accept. Exposed by: {exposed}{eg}. See the unstable groups' diffs (one process's output against another's), fix the "
          "iteration order, then run again")

def _unverified_reason(n: int, rows: list[dict], shown: int = 5) -> str:
  """Why changed captures without the verdict `equivalent` are not accepted by the marker, which rows, and what to do."""
  why: dict[str, list[dict]] = {}
  for r in rows:
    v, skip = _verdict(r), (r.get("exec") or {}).get("reason")
    if not v: k = "not executed (no execution check ran: --no-exec, REPLAY_EXEC=0, or a level it does not run)"
    else: k = f"exec {v}" + (f": {skip}" if v == "skipped" and skip else "")
    why.setdefault(k, []).append(r)
  parts = [f"{len(rs)} {k}" for k, rs in sorted(why.items(), key=lambda kv: -len(kv[1]))]
  listed = ", ".join(_row(r) for r in rows[:shown]) + (f" and {len(rows) - shown} more" if len(rows) > shown else "")
  return (f"{n} changed capture(s) have no `equivalent` execution verdict ({'; '.join(parts) or 'not in the report'}), and {MARKER} accepts "
          f"only changes whose numbers were checked: {listed or '(rows not listed in the report)'}. Run the execution check where it can "
          "run them (a machine with OpenCL: `replay check --exec --device OPENCL`, or ci/replay-gate without REPLAY_EXEC=0), or "
          "re-baseline them with `replay accept` in the same commit")

def determinism_note(report_json: dict | None) -> str | None:
  """A line for the gate when the report's determinism check did not run or could not compare (nothing then fails on it)."""
  if not isinstance(report_json, dict) or report_json.get("schema") != "tinysched-replay-report": return None
  d = report_json.get("determinism")
  if not isinstance(d, dict):
    return ("determinism was not checked (a report of `replay check --no-determinism`, or of an older replay): outputs that differ "
            "between processes would pass unseen")
  if d.get("skipped"): return f"determinism not checked: {d['skipped']}"
  return None

def failure_exit(report_json: dict | None, exit_code: int) -> int:
  """Exit code of a failed gate: 2 when the replay itself did not work (errors, incompatible, no report), else 1."""
  if not isinstance(report_json, dict): return 2
  if (sig := report_json.get("stopped")) in ("SIGINT", "SIGTERM", "SIGHUP"): return 128 + int(signal.Signals[sig])
  s = report_json.get("summary") or {}
  if report_json.get("fatal") or s.get("error") or s.get("incompatible") or max(exit_code, int(report_json.get("exit_code") or 0)) >= 2: return 2
  if any(_verdict(r) in ("failed", "timeout") for r in report_json.get("results") or []): return 2
  return 1

def load_report(path: str | os.PathLike | None) -> dict | None:
  """The JSON report at `path`, or None when it is missing or not JSON (decide() then fails with a clear reason)."""
  if not path: return None
  try: doc = json.loads(Path(path).read_text())
  except (OSError, ValueError): return None
  return doc if isinstance(doc, dict) else None

def _git_message(cwd: str | None, rev: str = "HEAD") -> str:
  """The message of commit `rev`, or "" when git cannot tell (outside a repository, an unknown commit, git missing)."""
  return query(["log", "-1", "--format=%B", rev], cwd, timeout=30) or ""

def accept_sources(env: Mapping[str, str] | None = None, cwd: str | None = None) -> list[tuple[str, str]]:
  """(where, text) of every place the accept marker may be: PR title, push head commit, head commit message."""
  env = os.environ if env is None else env
  out: list[tuple[str, str]] = []
  if env.get("REPLAY_PR_TITLE"): out.append(("the PR title (REPLAY_PR_TITLE)", env["REPLAY_PR_TITLE"]))
  head_sha = None
  if ev_path := env.get("GITHUB_EVENT_PATH"):
    try: ev = json.loads(Path(ev_path).read_text())
    except (OSError, ValueError): ev = {}
    if isinstance(ev, dict):
      if isinstance(pr := ev.get("pull_request"), dict):
        out.append(("the PR title", str(pr.get("title") or "")))
        head_sha = (pr.get("head") or {}).get("sha")
      if isinstance(hc := ev.get("head_commit"), dict): out.append(("the pushed head commit message", str(hc.get("message") or "")))
  # on a pull_request event the checkout is a merge commit: the PR's own head commit carries the message
  msg = (_git_message(cwd, head_sha) if head_sha else "") or _git_message(cwd)
  if msg: out.append(("the head commit message", msg))
  return out

def accept_marker(env: Mapping[str, str] | None = None, cwd: str | None = None) -> str | None:
  """Where `[replay:accept]` was found (case-insensitive), or None."""
  for where, text in accept_sources(env, cwd):
    if MARKER in text.lower(): return where
  return None

def summary_markdown(passed: bool, reason: str, report_md: str | None, accepted_by: str | None, note: str | None = None) -> str:
  head = f"## {'✅' if passed else '❌'} replay gate: {'PASS' if passed else 'FAIL'}\n\n{reason}\n"
  if accepted_by: head += f"\n{MARKER} found in {accepted_by}.\n"
  if note: head += f"\nNote: {note}.\n"
  return head + ("\n" + report_md if report_md else "") + "\n"

def write_step_summary(text: str, path: str | None = None) -> str | None:
  """Append to $GITHUB_STEP_SUMMARY (or `path`); returns where it went."""
  path = path or os.environ.get("GITHUB_STEP_SUMMARY")
  if not path: return None
  with open(path, "a") as f: f.write(text)
  return path

def report_markdown(report_json: dict | None, md_path: str | None) -> str | None:
  """The Markdown report: the file `replay check` wrote, else rendered from the JSON report."""
  if md_path and Path(md_path).is_file(): return Path(md_path).read_text()
  if not isinstance(report_json, dict): return None
  try:
    return R.markdown(R.from_json(report_json))
  except Exception: return None  # an odd report still gets its decision written

def run_check(selection: Selection, options: Options, paths: ReportPaths, log: Callable[[str], None] = print,
              show: Callable[[str], None] = print) -> tuple[dict | None, int]:
  """The check the gate decides on, run in this process as `replay check` runs it: (its JSON report, its exit code).
  The terminal report goes to `show`, report files to `paths`; a check that cannot run or crashes is logged and gives
  no report (exit 2), which `decide` fails with its reason."""
  try:
    rep = check.run(selection, options)
    show(R.terminal(rep))
    write_reports(rep, paths)
  except HintedError as e:
    log(f"replay: error: {e}" + (f"\n  next: {e.hint}" if e.hint else ""))
    return None, 2
  except Exception as e:  # noqa: BLE001 (a crash of the check is a gate failure with its reason, not a traceback)
    log(f"replay check crashed: {type(e).__name__}: {e}")
    return None, 2
  return R.to_json(rep), rep.exit_code()

def exec_available() -> bool:
  try: return importlib.util.find_spec("replay.execute.pool") is not None
  except (ImportError, ValueError): return False
