"""The capture store: one SQLite file, written through sqlite-utils.

Tables (schema version in `meta`):
- `runs`: one row per capture run: when, git commit/dirty/branch, label, argv, device, tool versions, flags.
- `graphs`: content-addressed payloads (canonical UOp JSON or rendered source), zlib-compressed,
  deduplicated by `key` (sha256 of the uncompressed bytes, verified on every read).
- `captures`: one row per distinct (run, level, input) with its output key and summary columns
  (op names, node count, kernel count, output shapes, Tensor-level metadata, label) that make the store
  queryable with plain SQL or `sqlite-utils` without decoding anything.

WAL mode and a busy timeout let many processes write one file; writes are batched in short
transactions, so a killed process loses at most its unflushed batch and never corrupts the file.
"""
from __future__ import annotations
import hashlib, json, os, sqlite3, zlib
from pathlib import Path
from typing import Any, Iterable, Iterator
import sqlite_utils
from replay.encode import IncompatibleCapture

SCHEMA_VERSION = 1
LEVELS = ("kernel", "schedule", "program")

class StoreError(RuntimeError):
  """The file is not a usable capture store (not SQLite, a newer schema, unreadable)."""

def _connect(path: str | os.PathLike, readonly: bool) -> sqlite3.Connection:
  p = Path(path)
  if readonly:
    if not p.exists(): raise StoreError(f"{p}: no such capture file")
    # immutable=0 + mode=ro: never writes, not even the WAL index, so the input stays byte-identical
    conn = sqlite3.connect(f"file:{p.resolve()}?mode=ro", uri=True, timeout=30, check_same_thread=False)
  else:
    p.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(p), timeout=30, check_same_thread=False)
  conn.execute("PRAGMA busy_timeout=30000")
  try: conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
  except sqlite3.DatabaseError as e:
    conn.close()
    raise StoreError(f"{p}: not a capture store ({e}); pass a .db file written by `replay capture`") from None
  return conn

class Store:
  def __init__(self, path: str | os.PathLike, readonly: bool = False):
    self.path, self.readonly = Path(path), readonly
    self.conn = _connect(path, readonly)
    self.db = sqlite_utils.Database(self.conn)
    tables = set(self.db.table_names())
    if "meta" not in tables:
      if readonly:
        if tables: raise StoreError(f"{self.path}: SQLite file without a capture schema (tables: {', '.join(sorted(tables))})")
        raise StoreError(f"{self.path}: empty file, not a capture store")
      self._create()
    self._check_version()

  def _create(self) -> None:
    with self.conn:
      self.conn.execute("PRAGMA journal_mode=WAL")
      self.db["meta"].create({"key": str, "value": str}, pk="key", if_not_exists=True)
      self.db["meta"].insert({"key": "schema_version", "value": str(SCHEMA_VERSION)}, ignore=True)
      self.db["runs"].create({"id": int, "started": str, "finished": str, "git_commit": str, "git_dirty": int, "git_branch": str,
                              "label": str, "argv": str, "device": str, "python": str, "numpy": str, "pyopencl": str,
                              "tinysched": str, "levels": str, "env": str, "host": str}, pk="id", if_not_exists=True)
      self.db["graphs"].create({"key": str, "kind": str, "data": bytes, "size": int, "node_count": int, "ops": str},
                               pk="key", if_not_exists=True)
      self.db["captures"].create({"id": int, "run_id": int, "seq": int, "level": str, "label": str, "input_key": str,
                                  "output_key": str, "var_vals": str, "assigns": str, "node_count": int, "kernel_count": int,
                                  "op_names": str, "output_shapes": str, "metadata": str, "extra": str},
                                 pk="id", foreign_keys=[("run_id", "runs", "id")], if_not_exists=True)
      self.db["captures"].create_index(["run_id", "level", "input_key"], unique=True, if_not_exists=True)
      self.db["captures"].create_index(["input_key"], if_not_exists=True)
      self.db["captures"].create_index(["output_key"], if_not_exists=True)
      self.db["captures"].create_index(["label", "level"], if_not_exists=True)

  def _check_version(self) -> None:
    try: row = self.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    except sqlite3.DatabaseError as e: raise StoreError(f"{self.path}: unreadable capture store ({e})") from None
    if row is None: raise StoreError(f"{self.path}: capture store without a schema version")
    try: v = int(row[0])
    except ValueError: raise StoreError(f"{self.path}: bad schema version {row[0]!r}") from None
    if v > SCHEMA_VERSION:
      raise StoreError(f"{self.path}: schema version {v} is newer than this code understands ({SCHEMA_VERSION}); "
                       "upgrade tinysched/replay, or re-capture with this version")
    if v < SCHEMA_VERSION: raise StoreError(f"{self.path}: schema version {v} is older than {SCHEMA_VERSION}: re-capture it")

  def close(self) -> None: self.conn.close()

  # *** writing ***
  def new_run(self, info: dict[str, Any]) -> int:
    with self.conn:
      cur = self.conn.execute("INSERT INTO runs (started, git_commit, git_dirty, git_branch, label, argv, device, python, numpy, pyopencl, "
                              "tinysched, levels, env, host) VALUES (:started, :git_commit, :git_dirty, :git_branch, :label, :argv, :device, "
                              ":python, :numpy, :pyopencl, :tinysched, :levels, :env, :host)", {k: info.get(k) for k in (
                                "started", "git_commit", "git_dirty", "git_branch", "label", "argv", "device", "python", "numpy", "pyopencl",
                                "tinysched", "levels", "env", "host")})
      return int(cur.lastrowid)
  def finish_run(self, run_id: int, finished: str) -> None:
    with self.conn: self.conn.execute("UPDATE runs SET finished=? WHERE id=?", (finished, run_id))

  def write_batch(self, graphs: list[dict], captures: list[dict]) -> None:
    """One transaction: payloads first (ignored when present), then the capture rows (a row already there for
    the same run, level and input is kept)."""
    with self.conn:
      self.conn.executemany("INSERT OR IGNORE INTO graphs (key, kind, data, size, node_count, ops) VALUES "
                            "(:key, :kind, :data, :size, :node_count, :ops)", graphs)
      self.conn.executemany("INSERT OR IGNORE INTO captures (run_id, seq, level, label, input_key, output_key, var_vals, assigns, "
                            "node_count, kernel_count, op_names, output_shapes, metadata, extra) VALUES (:run_id, :seq, :level, :label, "
                            ":input_key, :output_key, :var_vals, :assigns, :node_count, :kernel_count, :op_names, :output_shapes, "
                            ":metadata, :extra)", captures)

  # *** reading ***
  def blob(self, key: str) -> bytes:
    row = self.conn.execute("SELECT data FROM graphs WHERE key=?", (key,)).fetchone()
    if row is None: raise IncompatibleCapture(f"payload {key[:16]} is missing from {self.path}")
    try: data = zlib.decompress(row[0])
    except (zlib.error, TypeError) as e: raise IncompatibleCapture(f"payload {key[:16]} is corrupted ({e})") from None
    if hashlib.sha256(data).hexdigest() != key: raise IncompatibleCapture(f"payload {key[:16]} is corrupted (checksum mismatch)")
    return data
  def captures(self, level: str | None = None, label: str | None = None, key: str | None = None) -> Iterator[dict]:
    q, args = "SELECT * FROM captures WHERE 1=1", []
    if level: q, args = q + " AND level=?", args + [level]
    if label: q, args = q + " AND label=?", args + [label]
    if key: q, args = q + " AND (input_key LIKE ? OR output_key LIKE ?)", args + [key + "%", key + "%"]
    cur = self.conn.execute(q + " ORDER BY run_id, seq, id", args)
    cols = [c[0] for c in cur.description]
    for row in cur: yield dict(zip(cols, row))
  def runs(self) -> list[dict]:
    cur = self.conn.execute("SELECT * FROM runs ORDER BY id")
    cols = [c[0] for c in cur.description]
    return [dict(zip(cols, r)) for r in cur]

def graph_row(key: str, data: bytes, kind: str, node_count: int | None = None, ops: Iterable[str] = ()) -> dict:
  return {"key": key, "kind": kind, "data": zlib.compress(data, 6), "size": len(data), "node_count": node_count, "ops": " ".join(ops)}

def dumps(x: Any) -> str: return json.dumps(x, sort_keys=True, separators=(",", ":"))

def compact(path: str | os.PathLike) -> None:
  """One self-contained file to commit: the WAL checkpointed into it, rollback journal mode, vacuumed."""
  if not Path(path).exists(): return
  c = sqlite3.connect(path)
  try:
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.execute("PRAGMA journal_mode=DELETE")
    c.execute("VACUUM")
  finally: c.close()
