"""`replay accept --key K... / --group G...`: re-baseline single capture rows instead of re-capturing the suite.

Each named row's stored output becomes what the current code makes of its stored input; every other row stays
byte-identical. Who accepted what, at which commit and why (`--message`) goes into the store's `accepts` table
(replay/store.py; the first per-key accept makes a store schema version 2), and `replay check` reports list those
accepts until the next full capture (`replay accept` without --key, `replay suite`) writes a new store.

Selecting rows:
- `--key K`: K is a prefix of a capture's *input* key, as reports print it (`input 3f9a...`, the JSON report's
  `input_key`). It must name exactly one capture input (the same input may have rows in several runs or stores:
  all of them are accepted); a prefix that matches nothing or several inputs is refused (exit 2).
- `--group G`: a group of `replay check` over the same stores and filters: its number in the `#` column of the
  Markdown and HTML reports (replay.report.ordered_groups: failing groups first, then largest first), or its signature
  as the terminal prints it (exact, or a prefix that only one group's signature starts with). Only `changed` groups
  can be accepted.

Nothing is written unless every selected row can be accepted: a row whose input cannot be decoded, or on which the
current code raises, stops the command before any store is touched. Each store is updated in one transaction.
"""
from __future__ import annotations
import getpass, os, re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from replay import git as G
from replay.encode import IncompatibleCapture, encode_graph, key_of
from replay.store import Store, StoreError, dumps, graph_row
from replay.errors import HintedError

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
  from replay.report import ordered_groups
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

def _new_output(store: Store, row: dict) -> dict | None:
  """The update of one row (new key, payload, output summary), or None when it already replays identically.
  Raises AcceptError when the row cannot be accepted."""
  from replay.recorder import _shapes
  from replay.runner import decode_input, run_input
  from tinysched import capture_hook
  name = f"{row['level']} {row['input_key'][:16]} ({store.path})"
  try: inputs = decode_input(row["level"], store.blob(row["input_key"]))
  except Exception as e:  # noqa: BLE001 (any decoding failure is the input's)
    raise AcceptError(f"{name}: its stored input cannot be decoded ({e}); there is no current output to accept",
                      "re-capture the baseline with `replay accept` (without --key)") from None
  try:
    with capture_hook.paused(): out, data = run_input(row["level"], inputs)  # accepting must not capture itself
  except IncompatibleCapture as e:
    raise AcceptError(f"{name}: the current code cannot read it ({e})", "re-capture the baseline with `replay accept` (without --key)") from None
  except Exception as e:  # noqa: BLE001 (the code under test raised: that is not an output)
    raise AcceptError(f"{name}: the current code raises on it ({type(e).__name__}: {e}); an error cannot be accepted",
                      f"fix the regression (`replay check {store.path} --key {row['input_key'][:16]} -v` shows the traceback)") from None
  key = key_of(data)
  if key == row["output_key"]: return None
  u = {"id": row["id"], "output_key": key, "op_names": row["op_names"], "output_shapes": row["output_shapes"], "kernel_count": row["kernel_count"]}
  if row["level"] == "program":
    u["graph"] = graph_row(key, data, "source")
    return u
  asts = [out] if row["level"] == "kernel" else list(out)
  so: dict = {}
  if asts: assert encode_graph(asts, stats=so) == data  # the same bytes the stats describe
  u["graph"] = graph_row(key, data, "ast" if row["level"] == "kernel" else "ast_list", so.get("node_count"), so.get("ops", ()))
  u["op_names"] = " ".join(so.get("ops", ()))
  u["output_shapes"] = dumps(_shapes(out)) if row["level"] == "kernel" else dumps([_shapes(a) for a in asts])
  u["kernel_count"] = 1 if row["level"] == "kernel" else len(asts)
  return u

def accept_rows(rows: list[Row], message: str, log: Log = print) -> AcceptResult:
  """Re-baseline `rows` with the current code's outputs: all of them are replayed first, and nothing is written when
  any cannot be accepted (AcceptError); then each store is updated in one transaction."""
  import datetime
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
      memo: dict[tuple[str, str, str], dict | None] = {}
      for row in by_db[db]:
        k = (row["level"], row["input_key"], row["output_key"])
        if k not in memo: memo[k] = _new_output(s, row)
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
