"""`replay commits BASE HEAD` and `replay accept`: capture the model suite with a given commit's code.

`commits` checks both commits out as temporary git worktrees, runs the capture suite in each with that
commit's own code (`python -m replay.suite MODEL --quick` with the worktree first on PYTHONPATH, one fresh
process per model, through replay.suite.run_model), diffs the two capture sets with replay.compare, and
removes the worktrees again: after success, failure, Ctrl-C or SIGTERM (SIGTERM is turned into the same
exception as Ctrl-C, so every `finally` runs and subprocess.run kills the model process it waits for).

A commit without the suite runner (replay/suite.py or tinysched/models/suite.py) gets the current
checkout's runner files copied into its worktree (never over files it has), and the output says so.

`accept` re-captures the suite into a temporary folder next to captures/, shows what changed against the
committed baseline, then replaces captures/<model>.db and rewrites captures/README.md.
"""
from __future__ import annotations
import contextlib, json, os, shutil, signal, sqlite3, subprocess, sys, tempfile, threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator
from replay import git as G
from replay.store import LEVELS, Store, StoreError
from replay.suite import run_model
from replay.errors import HintedError

HOOK_FILE = "tinysched/capture_hook.py"
RUNNER_FILES = ("replay/suite.py", "tinysched/models/suite.py")
MODELS_DIR = "tinysched/models"
Log = Callable[[str], None]

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
    if (tree / rel).exists(): continue
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

@dataclass
class Side:
  name: str                  # "BASE" / "HEAD"
  ref: str
  sha: str
  subject: str = ""
  tree: Path | None = None
  db: Path | None = None
  copied: list[str] = field(default_factory=list)   # runner files taken from the current checkout
  runs: list[dict] = field(default_factory=list)     # run_model results
  counts: dict = field(default_factory=dict)         # {label: {level: n, "kernels_scheduled": n}}

@dataclass
class CommitsResult:
  base: Side
  head: Side
  report: object             # replay.check.Report of compare(base.db, head.db)
  models: list[str]
  notes: list[str]
  kept: Path | None = None
  def failures(self) -> list[tuple[Side, dict]]:
    return [(s, r) for s in (self.base, self.head) for r in s.runs if not r.get("ok")]

def store_counts(db: Path) -> dict[str, dict[str, int]]:
  """{label: {level: captures, "kernels_scheduled": sum of kernel counts of schedule captures}} of one store."""
  out: dict[str, dict[str, int]] = {}
  if not db.exists(): return out
  c = sqlite3.connect(f"file:{db.resolve()}?mode=ro", uri=True)
  try:
    for label, level, n, k in c.execute("SELECT coalesce(label,''), level, count(*), coalesce(sum(kernel_count),0) FROM captures "
                                        "GROUP BY 1, 2 ORDER BY 1, 2"):
      d = out.setdefault(label, {})
      d[level] = n
      if level == "schedule": d["kernels_scheduled"] = k
  except sqlite3.DatabaseError: pass  # an unreadable store shows up in the comparison instead
  finally: c.close()
  return out

def _capture(side: Side, models: list[str], quick: bool, levels: tuple[str, ...], timeout: float | None, log: Log) -> None:
  assert side.tree is not None and side.db is not None
  with pythonpath(side.tree):
    for m in models:
      log(f"  {side.name} {side.sha[:8]}: capturing {m} ...")
      r = run_model(m, side.db, quick=quick, levels=levels, cwd=str(side.tree), timeout=timeout)
      side.runs.append(r)
      if r.get("skipped"): log(f"    {m}: skipped ({r['skipped']})")
      elif r.get("ok"): log(f"    {m}: done in {r['seconds']}s")
      else: log(f"    {m}: FAILED after {r['seconds']}s: {r.get('error')}")
  if not side.db.exists(): Store(side.db).close()  # nothing captured: an empty store still compares

def run_commits(base_ref: str, head_ref: str, models: list[str] | None = None, quick: bool = True, levels: tuple[str, ...] = LEVELS,
                level: str | None = None, keep: bool = False, tmp_dir: str | None = None, timeout: float | None = None,
                cwd: Path | str | None = None, log: Log = print, after_compare=None) -> CommitsResult:
  """Capture the suite at both commits in temporary worktrees and compare the captures (HEAD against BASE).
  `after_compare(report)` runs while both stores still exist (the execution check of `--exec`)."""
  from replay.compare import compare
  root = repo_root(cwd)
  base = Side("BASE", base_ref, resolve(root, base_ref))
  head = Side("HEAD", head_ref, resolve(root, head_ref))
  for s in (base, head): s.subject = _ask(["log", "-1", "--format=%s", s.sha], root)
  notes: list[str] = []
  with interruptible(), Worktrees(root, tmp_dir) as wt:
    log(f"replay commits: BASE {base.sha[:8]} {base.subject!r} -> HEAD {head.sha[:8]} {head.subject!r}")
    log(f"  worktrees in {wt.tmp}")
    for s in (base, head):
      s.tree = wt.add(s.name.lower(), s.sha)
      s.db = wt.tmp / f"{s.name.lower()}-{s.sha[:8]}.db"
      if not (s.tree / HOOK_FILE).exists():
        raise CommitsError(f"{s.name} {s.ref} ({s.sha[:8]}) predates the capture hooks ({HOOK_FILE} is missing)",
                           "pick a newer commit that has the capture hooks")
      missing = [r for r in RUNNER_FILES if not (s.tree / r).exists()]
      s.copied = add_runner(s.tree, root)
      if missing:
        notes.append(f"{s.name} {s.sha[:8]} has no suite runner ({', '.join(missing)} missing): using the current checkout's "
                     f"runner ({', '.join(s.copied)}) against {s.name}'s code")
        log(f"  note: {notes[-1]}")
    suites = {s.name: list_models(s.tree) for s in (base, head)}
    names = models or suites["HEAD"]
    if unknown := [m for m in names if m not in suites["BASE"] and m not in suites["HEAD"]]:
      raise CommitsError(f"unknown model(s) {unknown}: BASE's suite has {', '.join(suites['BASE']) or 'nothing'}, "
                         f"HEAD's has {', '.join(suites['HEAD']) or 'nothing'}", "pick names from those with --models")
    for s in (base, head):
      # a model only one commit has is not a failure: its captures show up as added or removed
      if absent := [m for m in names if m not in suites[s.name]]:
        notes.append(f"{', '.join(absent)} not in {s.name}'s suite: {'added' if s is base else 'removed'} captures show that")
        log(f"  note: {notes[-1]}")
      _capture(s, [m for m in names if m in suites[s.name]], quick, levels, timeout, log)
    for s in (base, head): s.counts = store_counts(s.db)
    rep = compare(str(base.db), str(head.db), level=level, allow_empty=True)
    if after_compare is not None: after_compare(rep)
    if keep:
      wt.keep = True
      notes.append(f"kept worktrees and stores in {wt.tmp} (remove with: git worktree remove --force <path>; git worktree prune)")
    else:  # the stores are deleted with the worktrees: name the commits instead of paths that will not exist
      rep.sources = [f"BASE {base.sha[:8]} ({base.ref})", f"HEAD {head.sha[:8]} ({head.ref})"]
      for r in rep.results: r.db = f"HEAD {head.sha[:8]}"
    return CommitsResult(base, head, rep, names, notes, wt.tmp if keep else None)

def counts_table(res: CommitsResult) -> str:
  """Captures per model and level, BASE -> HEAD (with the number of kernels the schedules produced)."""
  lines = ["captures per model (BASE -> HEAD):"]
  labels = sorted(set(res.base.counts) | set(res.head.counts))
  for lb in labels:
    b, h = res.base.counts.get(lb, {}), res.head.counts.get(lb, {})
    cols = [f"{k} {b.get(k, 0)} -> {h.get(k, 0)}" + (" *" if b.get(k, 0) != h.get(k, 0) else "")
            for k in (*LEVELS, "kernels_scheduled") if b.get(k) or h.get(k)]
    lines.append(f"  {lb or '-':20s} " + "   ".join(cols))
  if not labels: lines.append("  (nothing captured)")
  return "\n".join(lines)

# *** replay accept ***

@dataclass
class AcceptResult:
  root: Path
  captures: Path
  replaced: list[Path]
  summaries: list[str]
  skipped: list[str]
  stale: list[Path]
  readme: Path

def _change_summary(name: str, old: Path, new: Path) -> str:
  from replay.compare import compare
  if not old.exists(): return f"  {name}: new store (no baseline before)"
  try: rep = compare(str(old), str(new))
  except StoreError as e: return f"  {name}: the old baseline is unreadable ({e}); replaced"
  c = rep.counts()
  head = f"  {name}: {len(rep.results)} captures: " + ", ".join(f"{k} {v}" for k, v in c.items() if v)
  if not (c["changed"] or c["error"] or c["incompatible"]): return head + "  (unchanged)"
  lines = [head]
  for g in rep.groups()[:8]: lines.append(f"    [{g['outcome']}] x{g['count']}  {(g['signature'] or '')[:140]}")
  return "\n".join(lines)

def run_accept(models: list[str] | None = None, captures_dir: str = "captures", levels: tuple[str, ...] = LEVELS,
               timeout: float | None = None, cwd: Path | str | None = None, log: Log = print) -> AcceptResult:
  root = repo_root(cwd)
  cap = root / captures_dir
  from replay.baseline import EXTRAS, BaselineError, capture_extra
  suite = list_models(root)
  names = models or [*suite, *EXTRAS]
  if unknown := [m for m in names if m not in suite and m not in EXTRAS]:
    raise CommitsError(f"unknown model(s) {unknown}", f"the suite has {', '.join(suite)}; beside it the baseline has {', '.join(EXTRAS)}")
  names = sorted(names, key=lambda m: m in EXTRAS)  # the extra members after the models (stable otherwise)
  cap.mkdir(parents=True, exist_ok=True)
  # the new stores are made beside the baseline (same file system: the final move is a rename) and only
  # replace it once every model captured: a failure or Ctrl-C leaves the old baseline untouched
  tmp = Path(tempfile.mkdtemp(prefix=".replay-accept-", dir=cap.parent))
  replaced: list[Path] = []
  summaries: list[str] = []
  skipped: list[str] = []
  try:
    with interruptible():
      results = []
      with pythonpath(root):
        for m in names:
          log(f"  capturing {m} ...")
          if m in EXTRAS:  # after the models: `tests` is distilled against the other stores (the new ones where made)
            stores = sorted({p.stem: p for p in [*cap.glob("*.db"), *tmp.glob("*.db")] if p.stem != m and (p.stem in suite or p.stem in EXTRAS)}.values())
            try: r = capture_extra(m, tmp / f"{m}.db", root, stores, timeout, log)
            except (HintedError, StoreError) as e:  # BaselineError, or a store or coverage error from distilling
              r = {"model": m, "ok": False, "seconds": 0, "error": f"{e} ({e.hint})" if getattr(e, "hint", None) else str(e)}
          else: r = run_model(m, tmp / f"{m}.db", quick=True, levels=levels, cwd=str(root), timeout=timeout)
          results.append(r)
          if r.get("skipped"): log(f"    skipped ({r['skipped']}): its baseline is kept")
          elif r.get("ok"): log(f"    done in {r['seconds']}s")
          else: log(f"    FAILED after {r['seconds']}s: {r.get('error')}" + ("\n      " + "\n      ".join(r["stderr"].splitlines()[-10:]) if r.get("stderr") else ""))
      failed = [r["model"] for r in results if not r.get("ok")]
      if failed:
        raise CommitsError(f"model(s) {', '.join(failed)} failed: the baseline in {cap} is unchanged",
                           "fix the model (see above), or accept the others with --models")
      log("changes against the current baseline:")
      for r in results:
        m = r["model"]
        if r.get("skipped") or not (tmp / f"{m}.db").exists():
          if not r.get("skipped"): log(f"  {m}: captured nothing; its baseline is kept")
          skipped.append(m)
          continue
        from replay.coverage import save as save_coverage  # it compacts the store: one file to commit
        save_coverage(str(tmp / f"{m}.db"), log=lambda s: log(f"  {Path(s.split(':', 1)[0]).name}:{s.split(':', 1)[1]}"))
        summaries.append(_change_summary(m, cap / f"{m}.db", tmp / f"{m}.db"))
        log(summaries[-1])
      with signals_deferred():  # replace the stores together
        for r in results:
          m = r["model"]
          if m in skipped: continue
          for suffix in ("-wal", "-shm"): Path(f"{cap / m}.db{suffix}").unlink(missing_ok=True)
          os.replace(tmp / f"{m}.db", cap / f"{m}.db")
          replaced.append(cap / f"{m}.db")
  finally: shutil.rmtree(tmp, ignore_errors=True)
  stale = [p for p in sorted(cap.glob("*.db")) if p.stem not in names] if not models else []
  readme = write_captures_readme(root, cap)
  return AcceptResult(root, cap, replaced, summaries, skipped, stale, readme)

def store_info(db: Path) -> dict:
  """What a baseline store holds: models, commit(s) captured from, captures per level, kernels scheduled."""
  s = Store(db, readonly=True)
  try:
    runs = s.runs()
    per = {lv: 0 for lv in LEVELS}
    for lv, n in s.conn.execute("SELECT level, count(*) FROM captures GROUP BY level"): per[lv] = n
    kernels = s.conn.execute("SELECT coalesce(sum(kernel_count),0) FROM captures WHERE level='schedule'").fetchone()[0]
    distinct = s.conn.execute("SELECT count(DISTINCT output_key) FROM captures WHERE level='kernel'").fetchone()[0]
  finally: s.close()
  commits = sorted({(r["git_commit"] or "?")[:10] + (" (dirty)" if r["git_dirty"] else "") for r in runs})
  return {"labels": sorted({r["label"] or "-" for r in runs}), "commits": commits, "devices": sorted({r["device"] or "?" for r in runs}),
          "levels": per, "kernels_scheduled": kernels, "distinct_kernels": distinct, "bytes": db.stat().st_size}

def write_captures_readme(root: Path, cap: Path) -> Path:
  sha, dirty = head_state(root, exclude=str(cap.relative_to(root)) if cap.is_relative_to(root) else None)
  rel = cap.relative_to(root) if cap.is_relative_to(root) else cap
  rows = []
  for db in sorted(cap.glob("*.db")):
    try: i = store_info(db)
    except StoreError as e:
      rows.append(f"| `{db.name}` | unreadable: {e} | | | | | | | |")
      continue
    labels = ', '.join(i['labels']) if len(i['labels']) <= 4 else f"{len(i['labels'])} labels (test node ids)"
    rows.append(f"| `{db.name}` | {labels} | {', '.join(f'`{c}`' for c in i['commits'])} | {', '.join(i['devices'])} | "
                + " | ".join(str(i["levels"][lv]) for lv in LEVELS) + f" | {i['kernels_scheduled']} | {i['distinct_kernels']} | {i['bytes']/1e6:.2f} MB |")
  text = f"""# Capture baseline

The process-replay baseline: what the model suite (`tinysched/models/suite.py`, quick versions) made the
scheduler and code generator produce, plus two members beside it (replay/baseline.py): `tests.db`, this
project's Tensor/scheduler tests captured and distilled to the few rows that exercise rules no model does
(`replay distill`), and `gpu_target.db`, program-level captures rendered for an NVIDIA-like GPU target on this
CPU machine. CI replays these stores through every change (`replay check`, `ci/replay-gate`). Written by
`replay accept`; regenerate it rather than editing by hand. `replay coverage` shows which rules they exercise
(each store's `coverage` table keeps the counts measured at accept time).

Last accepted at commit `{sha or 'unknown'}`{' with uncommitted changes (dirty)' if dirty else ' (clean working tree)'}.

| store | model | captured at commit | device | {' | '.join(LEVELS)} | kernels scheduled | distinct kernel ASTs | size |
|---|---|---|---|{'---:|' * len(LEVELS)}---:|---:|---:|
{chr(10).join(rows) if rows else '| (no stores) | | | | ' + ' | ' * len(LEVELS) + ' | | |'}

Captures per level: `kernel` = (pre-sink, var_vals, assigns) -> kernel AST; `schedule` = one
`create_schedule` call -> its list of kernel ASTs; `program` = AST + optimization choices -> source.

## Regenerate

```
replay accept                      # the whole suite: re-capture, show the changes, replace {rel}/*.db, rewrite this file
replay accept --models mlp,cnn     # only some models (or members: tests, gpu_target)
git add {rel}/                     # then commit
```

Check the current code against this baseline with `replay check` (or `replay check {rel}/*.db --exec`).
Inspect a store with `replay stats {rel}/<model>.db` or plain SQL (`sqlite-utils {rel}/<model>.db "select level, count(*) from captures group by level"`).
"""
  (cap / "README.md").write_text(text)
  return cap / "README.md"
