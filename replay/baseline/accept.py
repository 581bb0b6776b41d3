"""`replay accept`: a new baseline. Without --key/--group the whole suite is captured again (`run_accept`): into a
temporary folder next to captures/, compared with the committed baseline, then captures/<model>.db replaced and
captures/README.md rewritten. With them (`accept_rows`) single capture rows are re-baselined instead.

`replay accept --key K... / --group G...`:

Each named row's stored output becomes what the current code makes of its stored input; every other row stays
byte-identical. Who accepted what, at which commit and why (`--message`) goes into the store's `accepts` table
(replay/store/sqlite.py; the first per-key accept makes a store schema version 2), and `replay check` reports list those
accepts until the next full capture (`replay accept` without --key, `replay suite`) writes a new store.

Selecting rows:
- `--key K`: K is a prefix of a capture's *input* key, as reports print it (`input 3f9a...`, the JSON report's
  `input_key`). It must name exactly one capture input (the same input may have rows in several runs or stores:
  all of them are accepted); a prefix that matches nothing or several inputs is refused (exit 2).
- `--group G`: a group of `replay check` over the same stores and filters: its number in the `#` column of the
  Markdown and HTML reports (replay.report.text.ordered_groups: failing groups first, then largest first), or its signature
  as the terminal prints it (exact, or a prefix that only one group's signature starts with). Only `changed` groups
  can be accepted.

Nothing is written unless every selected row can be accepted: a row whose input cannot be decoded, or on which the
current code raises, stops the command before any store is touched. Each store is updated in one transaction.
"""
from __future__ import annotations
import datetime, getpass, os, re, shutil, tempfile, time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from tinysched import capture_hook
from replay import git as G, levels
from replay.store.encode import IncompatibleCapture, key_of
from replay.store.sqlite import Store, StoreError
from replay.errors import HintedError
from replay import check
from replay.check import Selection
from replay.report.text import ordered_groups
from replay.levels import HOOKED, LEVELS
from replay.baseline.checkouts import CommitsError, head_state, interruptible, list_models, pythonpath, repo_root, signals_deferred
from replay.baseline.coverage import save as save_coverage  # it compacts the store: one file to commit
from replay.baseline.extras import EXTRAS, capture_extra
from replay.baseline import history
from replay.baseline.suite import run_model

Log = Callable[[str], None]
_HEX = re.compile(r"[0-9a-f]+")

class AcceptError(HintedError):
  """A selection or a row that cannot be accepted: the message and what to do next (exit 2)."""

@dataclass
class Row:
  db: str
  row: dict

@dataclass
class AcceptResult:
  accepted: list[dict] = field(default_factory=list)   # the log rows written, with "db"
  unchanged: list[Row] = field(default_factory=list)   # selected rows that already replay identically

def _rows(paths: list[str], level: str | None, label: str | None) -> list[Row]:
  out: list[Row] = []
  for p in paths:
    try: s = Store(p, readonly=True)
    except StoreError as e: raise AcceptError(str(e), "pass capture stores written by `replay capture` or `replay suite`") from None
    try: out += [Row(str(p), r) for r in s.captures(level=level, label=label)]
    finally: s.close()
  return out

def select_keys(paths: list[str], keys: list[str], level: str | None = None, label: str | None = None) -> list[Row]:
  """The rows each key prefix names (see the module docstring); raises AcceptError for a bad, unknown or ambiguous key."""
  rows = _rows(paths, level, label)
  chosen: dict[tuple[str, int], Row] = {}
  where = ", ".join(paths)
  for k in keys:
    if not _HEX.fullmatch(k):
      raise AcceptError(f"--key {k!r}: not a key prefix (keys are lowercase hexadecimal)",
                        "copy the input key of a capture from `replay check` output or its JSON report (input_key)")
    hits = [r for r in rows if r.row["input_key"].startswith(k)]
    if not hits:
      raise AcceptError(f"--key {k}: no capture in {where} has an input key starting with it" + (f" (at level {level})" if level else "")
                        + (f" (label {label})" if label else ""),
                        "copy the key from `replay check` output ('input ...' of an example) or from its JSON report (input_key); "
                        "`replay check DB --key K` shows what a prefix selects")
    inputs = sorted({(r.row["level"], r.row["input_key"]) for r in hits})
    if len(inputs) > 1:
      shown = ", ".join(f"{lv} {ik[:16]}" for lv, ik in inputs[:5]) + (" ..." if len(inputs) > 5 else "")
      raise AcceptError(f"--key {k}: ambiguous, it starts {len(inputs)} different capture inputs ({shown})",
                        "give more characters of the key (or --level)")
    for r in hits: chosen[(r.db, r.row["id"])] = r
  return [chosen[k] for k in sorted(chosen)]

def select_groups(rep, groups: list[str]) -> list[Row]:
  """The rows of the named groups of a `replay check` report `rep` (see the module docstring); raises AcceptError."""
  gs = ordered_groups(rep)  # numbered as the Markdown and HTML reports number them
  listing = "; ".join(f"#{i + 1} {g['outcome']} x{g['count']}" for i, g in enumerate(gs[:8])) or "none: nothing changed"
  wanted: dict[tuple[str, int, int, str, str], None] = {}
  for name in groups:
    if name.isdigit():
      i = int(name)
      if not 1 <= i <= len(gs):
        raise AcceptError(f"--group {name}: there are {len(gs)} group(s) in this check ({listing})",
                          "use a number from the '#' column of `replay check --report-md/--report-html` (or a signature) for the same stores")
      g = gs[i - 1]
    else:
      exact = [g for g in gs if (g["signature"] or "") == name]
      pref = exact or [g for g in gs if (g["signature"] or "").startswith(name)]
      if not pref:
        raise AcceptError(f"--group {name!r}: no group's signature is or starts with that ({listing})",
                          "copy the signature from `replay check` output (the text after '[changed] xN'), or pass the group's number")
      if len(pref) > 1:
        raise AcceptError(f"--group {name!r}: {len(pref)} groups' signatures start with that", "give more of the signature, or the group's number")
      g = pref[0]
    if g["outcome"] != "changed":
      raise AcceptError(f"--group {name}: that group is {g['outcome']}, not changed: only changed outputs can be accepted",
                        "fix the code (errors) or re-capture (incompatible captures) instead")
    for m in g["members"]: wanted[(m.db, m.run_id, m.seq, m.level, m.input_key)] = None
  out: list[Row] = []
  for db in sorted({w[0] for w in wanted}):
    for r in _rows([db], None, None):
      if (db, r.row["run_id"], r.row["seq"], r.row["level"], r.row["input_key"]) in wanted: out.append(r)
  return out

def _who() -> str:
  name = G.query(["config", "user.name"], None) or ""
  email = G.query(["config", "user.email"], None) or ""
  if name: return f"{name} <{email}>" if email else name
  try: return getpass.getuser()
  except Exception: return os.environ.get("USER", "") or "unknown"

def reoptimize_default() -> bool:
  """Whether rows are replayed as the gate replays them by default: program rows choose their opts again (--reoptimize)
  unless REPLAY_REOPTIMIZE=0, as in ci/replay-gate."""
  return os.environ.get("REPLAY_REOPTIMIZE", "1") != "0"

def _new_output(store: Store, row: dict, reoptimize: bool) -> dict | None:
  """The update of one row (new key, payload, output summary, extra), or None when it already replays identically.
  The row is replayed as `replay check` replays it (`reoptimize`: a program row chooses its opts again, Level.reoptimizes),
  so what the gate reports as changed is what is accepted. Raises AcceptError when the row cannot be accepted."""
  name = f"{row['level']} {row['input_key'][:16]} ({store.path})"
  try:
    level = levels.get(row["level"])
    inputs = level.decode_input(store.blob(row["input_key"]))
  except Exception as e:  # noqa: BLE001 (any decoding failure is the input's)
    raise AcceptError(f"{name}: its stored input cannot be decoded ({e}); there is no current output to accept",
                      "re-capture the baseline with `replay accept` (without --key)") from None
  full: dict = {}
  try:
    with capture_hook.paused(): out, data, _ = level.run_row(inputs, row, reoptimize, full)  # accepting must not capture itself
  except IncompatibleCapture as e:
    raise AcceptError(f"{name}: the current code cannot read it ({e})", "re-capture the baseline with `replay accept` (without --key)") from None
  except Exception as e:  # noqa: BLE001 (the code under test raised: that is not an output)
    raise AcceptError(f"{name}: the current code raises on it ({type(e).__name__}: {e}); an error cannot be accepted",
                      f"fix the regression (`replay check {store.path} --key {row['input_key'][:16]} -v` shows the traceback)") from None
  key = key_of(data)
  if key == row["output_key"]: return None
  return {"id": row["id"], "output_key": key, "op_names": row["op_names"], "output_shapes": row["output_shapes"],
          "kernel_count": row["kernel_count"], **level.output_summary(out, data, key), "extra": level.accepted_extra(row, full)}

def accept_rows(rows: list[Row], message: str, log: Log = print, reoptimize: bool | None = None) -> AcceptResult:
  """Re-baseline `rows` with the current code's outputs: all of them are replayed first (as the gate replays them:
  `reoptimize`, default `reoptimize_default()`), and nothing is written when any cannot be accepted (AcceptError); then
  each store is updated in one transaction."""
  reoptimize = reoptimize_default() if reoptimize is None else reoptimize
  if not message.strip(): raise AcceptError("--message is empty", "say why these outputs are right, e.g. -m 'ADD operands reordered: cosmetic'")
  res = AcceptResult()
  by_db: dict[str, list[dict]] = {}
  for r in rows: by_db.setdefault(r.db, []).append(r.row)
  plans: list[tuple[str, list[dict], list[dict]]] = []
  sha, dirty = G.code_commit()
  who, now = _who(), datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
  for db in sorted(by_db):
    try: s = Store(db, readonly=True)
    except StoreError as e: raise AcceptError(str(e)) from None
    try:
      updates, entries = [], []
      memo: dict[tuple, dict | None] = {}
      for row in by_db[db]:
        k = (row["level"], row["input_key"], row["output_key"], *levels.get(row["level"]).replay_key(row, reoptimize))
        if k not in memo: memo[k] = _new_output(s, row, reoptimize)
        u = memo[k] and {**memo[k], "id": row["id"]}  # type: ignore[dict-item]
        if u is None:
          res.unchanged.append(Row(db, row))
          continue
        updates.append(u)
        entries.append({"time": now, "git_commit": sha, "git_dirty": dirty, "who": who, "message": message, "capture_id": row["id"],
                        "run_id": row["run_id"], "seq": row["seq"], "level": row["level"], "label": row["label"], "input_key": row["input_key"],
                        "old_output_key": row["output_key"], "new_output_key": u["output_key"]})
    finally: s.close()
    if updates: plans.append((db, updates, entries))
  for db, updates, entries in plans:  # every row could be accepted: write, one transaction per store
    try:
      s = Store(db)
      try: s.accept(updates, entries)
      finally: s.close()
    except StoreError as e:
      done = sorted({a["db"] for a in res.accepted})
      raise AcceptError(f"{db}: cannot be written ({e}); it is unchanged" + (f" (already updated: {', '.join(done)})" if done else ""),
                        "make the store writable (or free its lock) and run the same command again: rows already accepted are skipped") from None
    res.accepted += [{**e, "db": db} for e in entries]
    log(f"  {db}: accepted {len(entries)} row(s)")
  return res

# *** replay accept: the whole suite captured again ***

@dataclass
class SuiteAccepted:
  root: Path
  captures: Path
  replaced: list[Path]
  summaries: list[str]
  skipped: list[str]
  stale: list[Path]
  readme: Path
  notes: list[str] = field(default_factory=list)  # what did not go as asked but leaves the new baseline whole (the perf history)

def _change_summary(name: str, old: Path, new: Path) -> str:
  if not old.exists(): return f"  {name}: new store (no baseline before)"
  try: rep = check.run(Selection((str(new),), against=str(old)))
  except check.CheckError as e: return f"  {name}: the old baseline is unreadable ({e}); replaced"
  c = rep.counts()
  head = f"  {name}: {len(rep.results)} captures: " + ", ".join(f"{k} {v}" for k, v in c.items() if v)
  if not (c["changed"] or c["error"] or c["incompatible"]): return head + "  (unchanged)"
  lines = [head]
  for g in rep.groups()[:8]: lines.append(f"    [{g['outcome']}] x{g['count']}  {(g['signature'] or '')[:140]}")
  return "\n".join(lines)

def _carry_history(old: Path, new: Path, log: Log) -> str | None:
  """The old store's perf history into the new one (the new store replaces it), or a note saying why it could not be."""
  try: n = history.carry(old, new)
  except StoreError as e:
    note = f"{old.stem}: its perf history was not carried over ({e})"
    log(f"  {note}")
    return note
  if n: log(f"  {old.stem}: perf history carried over ({n} row(s))")
  return None

def _record_history(root: Path, cap: Path, stores: list[Path], log: Log) -> str | None:
  """One perf-history measurement on the replaced stores, at the commit the baseline was accepted at; or a note saying
  why none was written. The new baseline is in place already, so nothing here can undo it."""
  sha, dirty = head_state(root, exclude=str(cap.relative_to(root)) if cap.is_relative_to(root) else None)  # (the new stores dirty the tree)
  log("perf history:")
  try:
    with pythonpath(root): history.record(stores, log, commit=(sha, int(dirty)))  # timed with the checkout's code
  except history.HistoryError as e: note = f"perf history not recorded: {e}" + (f" ({e.hint})" if e.hint else "")
  except KeyboardInterrupt as e: note = f"perf history not recorded: interrupted ({e or 'SIGINT'})"
  else: return None
  log(f"  {note}; the new baseline is in place")
  return note

def run_accept(models: list[str] | None = None, captures_dir: str = "captures", levels: tuple[str, ...] = HOOKED,
               timeout: float | None = None, cwd: Path | str | None = None, log: Log = print, perf: bool = True) -> SuiteAccepted:
  """Capture the suite (`models`, default all and the extra members) into new stores, carry each old store's perf history
  into its new one, show the changes, replace the stores, then (`perf`) time every row of them and record a perf-history
  measurement (replay/baseline/history.py)."""
  root = repo_root(cwd)
  cap = root / captures_dir
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
  notes: list[str] = []
  try:
    with interruptible():
      results = []
      with pythonpath(root):
        for m in names:
          log(f"  capturing {m} ...")
          if m in EXTRAS:  # after the models: `tests` is distilled against the other stores (the new ones where made)
            found = [*cap.glob("*.db"), *tmp.glob("*.db")]
            stores = sorted({p.stem: p for p in found if p.stem != m and (p.stem in suite or p.stem in EXTRAS)}.values())
            t0 = time.perf_counter()
            try: r = capture_extra(m, tmp / f"{m}.db", root, stores, timeout, log)
            except (HintedError, StoreError) as e:  # BaselineError, or a store or coverage error from distilling
              hint = e.hint if isinstance(e, HintedError) else None
              r = {"model": m, "ok": False, "seconds": round(time.perf_counter() - t0, 2), "error": f"{e} ({hint})" if hint else str(e)}
          else: r = run_model(m, tmp / f"{m}.db", quick=True, levels=levels, cwd=str(root), timeout=timeout)
          results.append(r)
          if r.get("skipped"): log(f"    skipped ({r['skipped']}): its baseline is kept")
          elif r.get("ok"): log(f"    done in {r['seconds']}s")
          else:
            tail = ("\n      " + "\n      ".join(r["stderr"].splitlines()[-10:])) if r.get("stderr") else ""
            log(f"    FAILED after {r['seconds']}s: {r.get('error')}" + tail)
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
        if note := _carry_history(cap / f"{m}.db", tmp / f"{m}.db", log): notes.append(note)  # (before save_coverage compacts)
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
  if perf and replaced and (note := _record_history(root, cap, replaced, log)): notes.append(note)
  stale = [p for p in sorted(cap.glob("*.db")) if p.stem not in names] if not models else []
  readme = write_captures_readme(root, cap)
  return SuiteAccepted(root, cap, replaced, summaries, skipped, stale, readme, notes)

def store_info(db: Path) -> dict:
  """What a baseline store holds: models, commit(s) captured from, captures per level, kernels scheduled."""
  s = Store(db, readonly=True)
  try:
    runs = s.runs()
    per = {lv: 0 for lv in LEVELS}
    for lv, n in s.conn.execute("SELECT level, count(*) FROM captures GROUP BY level"): per[lv] = n
    listing = [n for n in LEVELS if levels.get(n).lists_kernels]  # rows whose output is a kernel list, and one kernel AST
    single = [n for n in LEVELS if levels.get(n).output_is_kernel]
    kernels = s.conn.execute(f"SELECT coalesce(sum(kernel_count),0) FROM captures WHERE level IN ({','.join('?' * len(listing))})",
                             listing).fetchone()[0]
    distinct = s.conn.execute(f"SELECT count(DISTINCT output_key) FROM captures WHERE level IN ({','.join('?' * len(single))})",
                              single).fetchone()[0]
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
                + " | ".join(str(i["levels"][lv]) for lv in LEVELS)
                + f" | {i['kernels_scheduled']} | {i['distinct_kernels']} | {i['bytes']/1e6:.2f} MB |")
  text = f"""# Capture baseline

The process-replay baseline: what the model suite (`tinysched/models/suite.py`, quick versions) made the
scheduler and code generator produce, plus four members beside it (replay/baseline/extras.py): `tests.db`, this
project's Tensor/scheduler tests captured and distilled to the few rows that exercise rules no model does
(`replay distill`), `gpu_target.db`, program-level captures rendered for an NVIDIA-like GPU target on this
CPU machine, `index_past_2_31.db`, kernels whose indices pass 2**31 (scheduled, not run: `replay prove` checks
their int64 indexing), and `frontend.db`, the model level: each model call of `tinysched/models/calls.py` with the big
graphs it builds and the numbers it returns, judged against its float64 twin. CI replays these stores through every
change (`replay check`, `ci/replay-gate`). Written by
`replay accept`; regenerate it rather than editing by hand. `replay coverage` shows which rules they exercise
(each store's `coverage` table keeps the counts measured at accept time); `replay perf` each kernel's time at every
accept (the `perf_history` table, docs/perf-history.md).

Last accepted at commit `{sha or 'unknown'}`{' with uncommitted changes (dirty)' if dirty else ' (clean working tree)'}.

| store | model | captured at commit | device | {' | '.join(LEVELS)} | kernels scheduled | distinct kernel ASTs | size |
|---|---|---|---|{'---:|' * len(LEVELS)}---:|---:|---:|
{chr(10).join(rows) if rows else '| (no stores) | | | | ' + ' | ' * len(LEVELS) + ' | | |'}

Captures per level: `kernel` = (pre-sink, var_vals, assigns) -> kernel AST; `schedule` = one
`create_schedule` call -> its list of kernel ASTs; `program` = AST + optimization choices -> source; `model` = one model
call (name, dtype, seed, flags) -> the big graphs it builds and its host data, with its numbers beside them.

## Regenerate

```
replay accept                      # the whole suite: re-capture, show the changes, replace {rel}/*.db, rewrite this file
replay accept --models mlp,cnn     # only some models (or members: tests, gpu_target, frontend)
git add {rel}/                     # then commit
```

Check the current code against this baseline with `replay check` (or `replay check {rel}/*.db --exec`).
Inspect a store with `replay stats {rel}/<model>.db` or plain SQL
(`sqlite-utils {rel}/<model>.db "select level, count(*) from captures group by level"`).
"""
  (cap / "README.md").write_text(text)
  return cap / "README.md"
