"""`replay bisect GOOD BAD [DB...]`: the first commit between GOOD and BAD whose code makes stored captures diverge.

1. The selected rows of the stores (default captures/*.db; --level, --label) are copied into one temporary store,
   written in the oldest store schema (replay/store/sqlite.py), so older commits' replay can read it.
2. In one temporary git worktree, BAD's own `replay check` replays that copy (`python -m replay.cli check` with the
   worktree first on PYTHONPATH, as `replay commits` runs each commit's code): the rows that are `changed` or `error`
   there are the *probe set*, copied into a second, smaller store. Nothing diverging at BAD: exit 2.
3. GOOD's code must reproduce the stored outputs of the probe set (all `identical`); otherwise the stores were not
   made by code like GOOD's, no commit in between can be called good or bad against them, and it is exit 2 with what
   to do (the commits the captures were made at are named).
4. `git bisect start BAD GOOD` and `git bisect run STEP` in the worktree. STEP is this module's `step_main`, run from
   this checkout's replay package (never from the commit under test): it replays the probe store with the checked-out
   commit's `replay check` and exits 0 (good: every probe capture identical), 1 (bad: any changed or error) or 125
   (skip: the commit cannot run them: import error, no replay CLI, a store it cannot open, a capture it cannot
   decode, no report, over --timeout). Its own failures exit 128, which stops the bisect instead of blaming a commit.
5. The first bad commit is printed with its subject and the probe captures that diverge there; exit 0. When skipped
   commits leave several candidates, they are listed with why each was skipped; exit 2.

**By verdict** (`--until wrong|mismatch|unstable|changed`; default: the worst verdict seen at BAD). The first commit that
diverges is not always the one that broke something: an equivalent refactor changes hundreds of captures, numbers
equal, several commits before the codegen bug that makes numbers wrong. So BAD's replay runs the execution check on
every capture (`--exec-all`: a kernel whose AST is unchanged can still compute wrong numbers through broken codegen),
each capture gets a verdict class (`wrong`, `mismatch`, `unstable`: its execution verdict or its replay's determinism;
`changed`: its output diverged, an error included), the probe set is the captures of the asked class at BAD, and
each step runs the execution check on them (`--exec-all`) and is bad when one of them shows that class or a worse one
(`wrong` > `mismatch` > `unstable` > `changed`). `--until changed` is the divergence bisect above.

Bisect state lives in the temporary worktree (git keeps BISECT_* files and refs/bisect/* per worktree), so the
user's checkout, and any bisect going on in it, are never touched. The worktree, the stores and the bisect state
are removed after success, failure, Ctrl-C and SIGTERM: SIGTERM raises the same exception as Ctrl-C
(replay.baseline.checkouts.interruptible), and every replay or `git bisect run` runs in its own process group, which is
stopped as a whole (git, the step, the replay it started and its workers) before the worktree is removed.
"""
from __future__ import annotations
import json, os, signal, subprocess, sys, time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from replay import git as G
from replay.store.sqlite import Store, StoreError, copy_rows
from replay.baseline.checkouts import CommitsError, Worktrees, interruptible, repo_root, resolve, signals_deferred, subprocess_env
from replay.errors import HintedError

Log = Callable[[str], None]
GOOD, BAD, SKIP, ABORT = 0, 1, 125, 128  # `git bisect run` exit codes of a step
DIVERGED = ("changed", "error", "unstable")  # what a replay check (replay_at) reports as diverging (unstable: its determinism step)
UNTIL = ("wrong", "mismatch", "unstable", "changed")  # the verdict classes a bisect can look for, worst first
ProbeKey = tuple[str, str]  # (level, input_key)

class BisectError(HintedError):
  """A bisect that cannot start or cannot decide: the message and what to do next (exit 2)."""

def verdict_class(r: dict) -> str | None:
  """A report row's verdict class (UNTIL), or None when it replays identically and computes what it should."""
  ex: dict = r["exec"] if isinstance(r.get("exec"), dict) else {}
  if (v := ex.get("verdict")) in ("wrong", "mismatch", "unstable"): return v
  if r.get("outcome") == "unstable": return "unstable"
  return "changed" if r.get("outcome") in DIVERGED else None

def at_least(cls: str | None, until: str) -> bool:
  """Whether verdict class `cls` is `until` or worse (UNTIL's order)."""
  return cls is not None and UNTIL.index(cls) <= UNTIL.index(until)

@dataclass
class Replay:
  """One commit's replay of a store: its verdict, the outcome of every capture and (with the execution check) its
  verdict class."""
  verdict: int                                         # GOOD / BAD / SKIP
  outcomes: dict[ProbeKey, str] = field(default_factory=dict)
  reason: str = ""
  classes: dict[ProbeKey, str] = field(default_factory=dict)
  def diverging(self, until: str = "changed") -> list[ProbeKey]:
    if until == "changed": return sorted(k for k, o in self.outcomes.items() if o in DIVERGED)
    return sorted(k for k, c in self.classes.items() if at_least(c, until))
  def worst(self) -> str | None:
    """The worst verdict class of any capture (None: every one identical and right)."""
    found = [c for c in self.classes.values()] + (["changed"] if any(o in DIVERGED for o in self.outcomes.values()) else [])
    return min(found, key=UNTIL.index) if found else None

@dataclass
class Step:
  sha: str
  subject: str
  replay: Replay

@dataclass
class BisectResult:
  good: str
  bad: str
  first_bad: str
  subject: str
  diverging: list[tuple[str, str, str, list[str]]]   # (level, input key, outcome there, original stores)
  steps: list[Step]
  probe_count: int
  left_out: list[str]                                 # notes: captures BAD cannot decode, ...
  until: str = "changed"                               # the verdict class looked for (UNTIL)
  worst_at_bad: str | None = None                      # the worst class seen at BAD

# *** running a command as a process group ***

def run_group(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float | None = None, stdout=subprocess.PIPE,
              stderr=subprocess.PIPE) -> tuple[int | None, str, str]:
  """(exit code or None on timeout, stdout, stderr) of `cmd` in its own process group (captured unless other files are
  given). On timeout, Ctrl-C or SIGTERM (any exception while waiting) the whole group is stopped (SIGTERM, then SIGKILL)
  before this returns or re-raises."""
  p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=stdout, stderr=stderr, text=True, start_new_session=True)
  try:
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out or "", err or ""
  except subprocess.TimeoutExpired:
    stop_group(p)
    return None, "", f"ran past {timeout}s"
  except BaseException:
    stop_group(p)
    raise

def stop_group(p: subprocess.Popen, grace: float = 5.0) -> None:
  """Stop `p` and everything in its process group: SIGTERM to the group, then, for what is still there after `grace`
  seconds (members clean up first: a bisect step stops its own replay's group), SIGKILL. Never raises."""
  def alive() -> bool:
    try: os.killpg(p.pid, 0)
    except (ProcessLookupError, PermissionError): return False
    return True
  try: os.killpg(p.pid, signal.SIGTERM)
  except (ProcessLookupError, PermissionError): pass
  deadline = time.monotonic() + grace
  while time.monotonic() < deadline:
    if p.poll() is not None and not alive(): return
    time.sleep(0.05)
  try: os.killpg(p.pid, signal.SIGKILL)
  except (ProcessLookupError, PermissionError): pass
  try: p.wait(timeout=grace)
  except subprocess.TimeoutExpired: pass

# *** stores ***

def select_rows(paths: list[str], level: str | None, label: str | None) -> list[tuple[str, dict]]:
  """The rows to bisect over; raises BisectError for a store that cannot be read or a selection that is empty."""
  picks: list[tuple[str, dict]] = []
  for p in paths:
    try: s = Store(p, readonly=True)
    except StoreError as e: raise BisectError(str(e), "pass capture stores written by `replay capture` or `replay suite`") from None
    try: picks += [(str(p), r) for r in s.captures(level=level, label=label) if not r.get("_invalid")]
    finally: s.close()
  if not picks:
    raise BisectError(f"no captures in {', '.join(paths)}" + (f" at level {level}" if level else "") + (f" with label {label}" if label else ""),
                      "pass other stores, or drop --level/--label")
  return picks

# *** one commit's replay ***

def replay_at(tree: Path, db: Path, report: Path, jobs: int = 1, timeout: float | None = None,
              expect: set[ProbeKey] | None = None, until: str = "changed", run_exec: bool = False) -> Replay:
  """Replay `db` with the code checked out in `tree` (its own `replay check`; `run_exec`: with `--exec-all`), judged as a
  bisect step looking for `until`."""
  report.unlink(missing_ok=True)
  cmd = [sys.executable, "-m", "replay.cli", "check", str(db), "-j", str(jobs), "--report-json", str(report)] + (["--exec-all"] if run_exec else [])
  rc, _, err = run_group(cmd, tree, subprocess_env(tree), timeout)
  last = (err.strip().splitlines() or [f"exit {rc}"])[-1][:300]
  if rc is None: return Replay(SKIP, reason=f"replay check {last}")
  try: doc = json.loads(report.read_text())
  except (OSError, ValueError): return Replay(SKIP, reason=f"no report from its replay check (exit {rc}): {last}")
  return judge(doc, expect, until)

def judge(doc: dict, expect: set[ProbeKey] | None = None, until: str = "changed") -> Replay:
  """The verdict of a step from its `replay check` JSON report (see the module docstring)."""
  if not isinstance(doc, dict) or not isinstance(doc.get("results"), list): return Replay(SKIP, reason="its replay check wrote no readable report")
  if doc.get("fatal"): return Replay(SKIP, reason=f"cannot open the store: {str(doc['fatal'][0])[:300]}")
  out: dict[ProbeKey, str] = {}
  classes: dict[ProbeKey, str] = {}
  for r in doc["results"]:
    if not isinstance(r, dict): continue
    k, o = (str(r.get("level")), str(r.get("input_key"))), str(r.get("outcome"))
    if out.get(k) not in DIVERGED: out[k] = o  # one input in several runs: the worst counts
    if (c := verdict_class(r)) is not None and (k not in classes or UNTIL.index(c) < UNTIL.index(classes[k])): classes[k] = c
  res = Replay(SKIP, out, classes=classes)
  if until != "changed":
    if bad := res.diverging(until):
      res.verdict, res.reason = BAD, ", ".join(f"{lv} {ik[:12]} {classes[(lv, ik)]}" for lv, ik in bad[:4]) + (" ..." if len(bad) > 4 else "")
      return res
    if missing := sorted((expect or set()) - set(out)):
      res.reason = f"{len(missing)} capture(s) not replayed (e.g. {missing[0][0]} {missing[0][1][:12]})"
      return res
    if skipped := [r for r in doc["results"] if isinstance(r, dict) and (r.get("exec") or {}).get("verdict") in ("failed", "timeout", "skipped")
                   and (str(r.get("level")), str(r.get("input_key"))) in (expect or set())]:
      ex = skipped[0]["exec"]
      res.reason = f"{len(skipped)} capture(s) could not be executed ({ex.get('verdict')}: {str(ex.get('reason') or ex.get('error') or '')[:120]})"
      return res
    shown = sorted({c for c in classes.values()}, key=UNTIL.index)
    res.verdict, res.reason = GOOD, f"{len(out)} replayed, none {until}" + (f" (seen: {', '.join(shown)})" if shown else "")
    return res
  bad = res.diverging()
  if bad: res.verdict, res.reason = BAD, ", ".join(f"{lv} {ik[:12]} {out[(lv, ik)]}" for lv, ik in bad[:4]) + (" ..." if len(bad) > 4 else "")
  elif missing := sorted((expect or set()) - set(out)):
    res.reason = f"{len(missing)} capture(s) not replayed (e.g. {missing[0][0]} {missing[0][1][:12]})"
  elif odd := sorted(k for k, o in out.items() if o != "identical"):
    res.reason = f"cannot decode {len(odd)} capture(s) ({out[odd[0]]}: {odd[0][0]} {odd[0][1][:12]})"
  else: res.verdict, res.reason = GOOD, f"{len(out)} identical"
  return res

# *** the step command `git bisect run` runs ***

# run from this checkout's replay (first on sys.path, the worktree's folder taken off it), never from the commit under test
_BOOT = ("import sys; sys.path[:] = [sys.argv[1]] + [p for p in sys.path if p not in ('', '.')]; "
         "from replay.triage.bisect import step_main; sys.exit(step_main(sys.argv[2:]))")

def step_command(probe: Path, log: Path, expect: Path, jobs: int, timeout: float | None, until: str = "changed") -> list[str]:
  here = str(G.THIS_CHECKOUT)
  return [sys.executable, "-c", _BOOT, here, str(probe), str(log), str(expect), str(jobs), str(timeout or 0), until]

def step_main(argv: list[str]) -> int:
  """A `git bisect run` step in the worktree (the current directory): 0 good, 1 bad, 125 skip, 128 abort. Its replay runs
  in a process group of its own (so a timeout stops all of it); SIGTERM (which `replay bisect` sends to git's group when
  it is interrupted) raises here like Ctrl-C, so that group is stopped too before the step exits."""
  def on_term(signum: int, frame) -> None: raise KeyboardInterrupt(signal.Signals(signum).name)
  signal.signal(signal.SIGTERM, on_term)
  try:
    probe, log, expect_file, jobs, timeout = Path(argv[0]), Path(argv[1]), Path(argv[2]), int(argv[3]), float(argv[4]) or None
    until = argv[5] if len(argv) > 5 else "changed"
    tree = Path.cwd()
    sha = G.git(["rev-parse", "HEAD"], tree)
    expect = {(lv, ik) for lv, ik in json.loads(expect_file.read_text())}
    res = replay_at(tree, probe, log.with_name(f"step-{sha[:12]}.json"), jobs, timeout, expect, until, run_exec=until != "changed")
    with open(log, "a") as f:
      f.write(json.dumps({"sha": sha, "verdict": res.verdict, "reason": res.reason, "outcomes": sorted([*k, o] for k, o in res.outcomes.items()),
                          "classes": sorted([*k, c] for k, c in res.classes.items())}) + "\n")
    word = {GOOD: "good", BAD: "bad", SKIP: "skip"}[res.verdict]
    sys.stderr.write(f"  bisect: {sha[:10]} {G.subject(tree, sha)[:60]!r}: {word} ({res.reason})\n")
    sys.stderr.flush()
    return res.verdict
  except BaseException as e:  # noqa: BLE001 (our own failure must stop the bisect, not mark the commit bad: exit 1 would)
    sys.stderr.write(f"replay bisect: the step failed ({type(e).__name__}: {e}); stopping the bisect\n")
    return ABORT

def _steps(log: Path, root: Path) -> list[Step]:
  out: list[Step] = []
  if not log.exists(): return out
  for line in log.read_text().splitlines():
    d = json.loads(line)
    out.append(Step(d["sha"], G.subject(root, d["sha"]), Replay(d["verdict"], {(lv, ik): o for lv, ik, o in d["outcomes"]}, d["reason"],
                                                                {(lv, ik): c for lv, ik, c in d.get("classes", [])})))
  return out

# *** the command ***

def run_bisect(good_ref: str, bad_ref: str, paths: list[str], level: str | None = None, label: str | None = None, jobs: int = 1,
               timeout: float | None = None, tmp_dir: str | None = None, cwd: Path | str | None = None, log: Log = print,
               until: str | None = None) -> BisectResult:
  """See the module docstring. `until`: the verdict class to look for (UNTIL; None: the worst seen at BAD). Raises
  BisectError (exit 2) or KeyboardInterrupt (Ctrl-C, SIGTERM); cleans up either way."""
  if until is not None and until not in UNTIL: raise BisectError(f"--until {until!r}: not a verdict class", f"choose from {', '.join(UNTIL)}")
  try:
    root = repo_root(cwd)
    good, bad = resolve(root, good_ref), resolve(root, bad_ref)
  except CommitsError as e: raise BisectError(str(e), e.hint) from None
  if good == bad: raise BisectError(f"GOOD and BAD are the same commit ({good[:10]})", "pass an older GOOD commit whose code reproduces the stores")
  try: ordered = G.is_ancestor(root, good, bad)
  except G.GitError as e: raise BisectError(str(e)) from None
  if not ordered:
    raise BisectError(f"GOOD {good_ref} ({good[:10]}) is not an ancestor of BAD {bad_ref} ({bad[:10]})",
                      "pass a GOOD commit from BAD's history (`git log BAD` lists them), e.g. `git merge-base GOOD BAD`")
  picks = select_rows(paths, level, label)
  origin: dict[ProbeKey, list[str]] = {}  # which stores hold each input (in the order given)
  for db, r in picks:
    if db not in (dbs := origin.setdefault((r["level"], r["input_key"]), [])): dbs.append(db)
  good_s, bad_s = G.subject(root, good), G.subject(root, bad)
  with interruptible(), Worktrees(root, tmp_dir, prefix="replay-bisect-") as wt:
    tree = None
    try:
      log(f"replay bisect: GOOD {good[:10]} {good_s!r} .. BAD {bad[:10]} {bad_s!r}; {len(picks)} capture row(s) from {len(paths)} store(s)")
      copy_rows(wt.tmp / "all.db", picks)
      try: tree = wt.add("tree", bad)
      except CommitsError as e: raise BisectError(str(e), e.hint) from None
      # the execution check at BAD unless only divergence is asked for: it finds the worst verdict class there
      at_bad = replay_at(tree, wt.tmp / "all.db", wt.tmp / "bad.json", jobs, timeout, until=until or "changed", run_exec=until != "changed")
      if at_bad.verdict == SKIP and not at_bad.outcomes:
        raise BisectError(f"BAD {bad[:10]} cannot replay the captures: {at_bad.reason}",
                          "pick a BAD commit whose `replay check` runs on these stores")
      worst = at_bad.worst()
      if until is None: until = worst or "changed"
      log(f"  worst verdict at BAD: {worst or 'none (every capture identical and right)'}; looking for the first commit where captures are {until}"
          + (" or worse" if until != "wrong" else ""))
      probe = at_bad.diverging(until)
      left_out = []
      if odd := sorted(k for k, o in at_bad.outcomes.items() if o == "incompatible"):
        left_out.append(f"{len(odd)} capture(s) BAD cannot decode are left out (e.g. {odd[0][0]} {odd[0][1][:12]})")
      if not probe and until != "changed":
        raise BisectError(f"no capture is {until} at BAD {bad[:10]} (worst there: {worst or 'none'})",
                          f"bisect for what BAD shows: --until {worst}" if worst
                          else "pick a BAD commit where the captures diverge or compute wrong numbers")
      if not probe:
        raise BisectError(f"nothing diverges at BAD {bad[:10]}: all {len(at_bad.outcomes)} capture(s) replay identically there"
                          + (f" ({left_out[0]})" if left_out else ""),
                          "pick a BAD commit where `replay check` on these stores reports changes or errors, or other stores")
      shown = at_bad.outcomes if until == "changed" else at_bad.classes
      log(f"  {len(probe)} capture(s) {'diverge' if until == 'changed' else 'are ' + until + ' or worse'} at BAD: "
          + ", ".join(f"{lv} {ik[:12]} {shown[(lv, ik)]}" for lv, ik in probe[:6]) + (" ..." if len(probe) > 6 else ""))
      wanted = set(probe)
      copy_rows(wt.tmp / "probe.db", [(db, r) for db, r in picks if (r["level"], r["input_key"]) in wanted])
      (wt.tmp / "probe.json").write_text(json.dumps([list(k) for k in probe]))
      try: G.checkout(tree, good)
      except G.GitError as e: raise BisectError(str(e)) from None
      at_good = replay_at(tree, wt.tmp / "probe.db", wt.tmp / "good.json", jobs, timeout, wanted, until, run_exec=until != "changed")
      if at_good.verdict != GOOD: raise _good_fails(good, at_good, picks, wanted)
      log(f"  GOOD reproduces them ({at_good.reason}); bisecting")
      try: G.bisect_start(tree, bad, good)
      except G.GitError as e: raise BisectError(str(e)) from None
      with open(wt.tmp / "bisect.out", "w") as out:
        rc, _, err = run_group(G.bisect_run_argv(step_command(wt.tmp / "probe.db", wt.tmp / "steps.jsonl", wt.tmp / "probe.json", jobs,
                                                              timeout, until)), tree, dict(os.environ), None, stdout=out, stderr=None)
      text = (wt.tmp / "bisect.out").read_text()
      steps = _steps(wt.tmp / "steps.jsonl", root)
      found = G.first_bad(text)
      if found is None:
        if cands := G.bisect_candidates(text):
          why = {s.sha: s.replay.reason for s in steps if s.replay.verdict == SKIP}
          raise BisectError("skipped commits leave several candidates for the first bad commit: "
                            + "; ".join(f"{c[:10]} {G.subject(root, c)[:50]!r}" + (f" (skipped: {why[c]})" if c in why else "") for c in cands),
                            "make those commits replayable (see why they were skipped), or look at their diffs: `git show <commit>`")
        raise BisectError(f"`git bisect run` stopped without a result (exit {rc}): {(err.strip() or text.strip()).splitlines()[-1:] or ''}",
                          "see the messages above; run `replay bisect` again")
      full = G.commit_of(root, found) or found
      there = next((s.replay for s in steps if s.sha == full), at_bad if full == bad else Replay(BAD))
      what = there.outcomes if until == "changed" else there.classes
      div = [(lv, ik, what.get((lv, ik), "?"), origin.get((lv, ik), [])) for lv, ik in there.diverging(until)]
      return BisectResult(good, bad, full, G.subject(root, full), div, steps, len(probe), left_out, until, worst)
    finally:
      if tree is not None:
        with signals_deferred(): G.bisect_reset(tree)

def _good_fails(good: str, at_good: Replay, picks: list[tuple[str, dict]], wanted: set[ProbeKey]) -> BisectError:
  """GOOD does not reproduce the stored outputs (or cannot run them): say so, with the commits the captures came from."""
  made_at: set[str] = set()
  for db in sorted({d for d, r in picks if (r["level"], r["input_key"]) in wanted}):
    s = Store(db, readonly=True)
    try:
      ids = {r["run_id"] for d, r in picks if d == db and (r["level"], r["input_key"]) in wanted}
      made_at |= {(run["git_commit"] or "unknown")[:10] + (" (dirty)" if run["git_dirty"] else "") for run in s.runs() if run["id"] in ids}
    finally: s.close()
  where = f"the captures were made at {', '.join(sorted(made_at))}" if made_at else "the stores do not say at which commit they were made"
  if at_good.verdict == SKIP:
    return BisectError(f"GOOD {good[:10]} cannot replay the captures that diverge at BAD: {at_good.reason}",
                       f"pick a GOOD commit that can replay them and reproduces their stored outputs ({where})")
  return BisectError(f"GOOD {good[:10]} does not reproduce the stored outputs either ({at_good.reason}): the stores were not made by code "
                     f"that behaves like GOOD, so no commit can be judged against them ({where})",
                     "pass as GOOD a commit whose `replay check` passes on these stores (e.g. the one they were captured at), or "
                     "re-capture the stores with GOOD's code (`replay accept` in a checkout of GOOD) and bisect again")
