"""`replay upgrade DB...`: rewrite a store's graph payloads written by older format versions in today's form.

Reading an old store already works through the steps (replay/store/upgrade.py), every time it is read; rewriting it
once makes the store's keys today's: a row's output key then equals what the current code writes for the same graph.
An output is re-encoded by the current encoder (decoded through the steps, encoded again), so it is byte for byte what
the code writes; an input (with its var_vals, opts, target...) is the upgraded document in canonical form. A payload
whose bytes do not change keeps its key. Every key that changed is rewritten in the capture rows and the per-key accept
log, and the map old -> new is kept in the store's `meta` table (`format_upgrades`), so a report or an accept made
before can be followed to the row.

Atomic as `compact` is: the work is done on a copy beside the store, checked, and renamed over it; a kill at any point
leaves the old store (and at most a hidden temporary file, removed by the next run).
"""
from __future__ import annotations
import datetime, json, os, sqlite3, zlib
from dataclasses import dataclass, field
from pathlib import Path
from replay.store.encode import FORMAT, VERSION, IncompatibleCapture, key_of, todays_bytes
from replay.store.sqlite import BUSY_TIMEOUT_S, MAX_PAYLOAD, Store, StoreError, _fsync, pause_point, remove_stale_temps, replace_store

@dataclass
class Upgraded:
  path: str
  payloads: int = 0                                   # graph payloads read
  rewritten: dict[str, str] = field(default_factory=dict)  # old key -> new key
  kept: int = 0                                       # older payloads whose bytes did not change (their key stays)
  versions: dict[int, int] = field(default_factory=dict)  # payloads per version found

def _today(data: bytes) -> tuple[int | None, bytes | None]:
  """(version, today's bytes or None when current) of one payload: (None, None) for what is not a graph document."""
  try: doc = json.loads(data)
  except (ValueError, UnicodeDecodeError): return None, None
  if type(doc) is not dict or doc.get("format") != FORMAT or type(doc.get("version")) is not int: return None, None
  try: return doc["version"], todays_bytes(data)
  except IncompatibleCapture as e: raise StoreError(f"a payload of version {doc['version']} cannot be upgraded: {e}") from None

def upgrade_store(path: str | os.PathLike) -> Upgraded:
  """Rewrite `path` in today's format version (see the module docstring). Raises StoreError."""
  p = Path(path)
  Store(p, readonly=True, allow_empty=True).close()  # a usable store, or a clear StoreError
  res = Upgraded(str(p))
  remove_stale_temps(p.parent, f".{p.name}.upgrade-*.tmp*")
  tmp = p.with_name(f".{p.name}.upgrade-{os.getpid()}.tmp")
  tmp.unlink(missing_ok=True)
  try:
    src = sqlite3.connect(p, isolation_level=None, timeout=BUSY_TIMEOUT_S)
    try: src.execute("VACUUM INTO ?", (str(tmp),))
    finally: src.close()
    pause_point("upgrade:copied")
    db = sqlite3.connect(tmp, isolation_level=None)
    try:
      db.execute("BEGIN")
      for key, data, kind, node_count, ops in db.execute("SELECT key, data, kind, node_count, ops FROM graphs ORDER BY key").fetchall():
        res.payloads += 1
        raw = zlib.decompressobj().decompress(data, MAX_PAYLOAD)
        v, new = _today(raw)
        if v is not None: res.versions[v] = res.versions.get(v, 0) + 1
        if new is None: continue
        if (nk := key_of(new)) == key:
          res.kept += 1
          continue
        res.rewritten[key] = nk
        db.execute("DELETE FROM graphs WHERE key=?", (key,))
        db.execute("INSERT OR IGNORE INTO graphs (key, kind, data, size, node_count, ops) VALUES (?, ?, ?, ?, ?, ?)",
                   (nk, kind, zlib.compress(new, 6), len(new), node_count, ops))
      pause_point("upgrade:rewritten")
      tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
      for old, new_key in res.rewritten.items():
        db.execute("UPDATE captures SET input_key=? WHERE input_key=?", (new_key, old))
        db.execute("UPDATE captures SET output_key=? WHERE output_key=?", (new_key, old))
        if "accepts" in tables:
          for col in ("input_key", "old_output_key", "new_output_key"): db.execute(f"UPDATE accepts SET {col}=? WHERE {col}=?", (new_key, old))
      if res.rewritten:
        prev = db.execute("SELECT value FROM meta WHERE key='format_upgrades'").fetchone()
        log = json.loads(prev[0]) if prev else []
        log.append({"to": VERSION, "from": sorted(v for v in res.versions if v < VERSION), "keys": res.rewritten,
                    "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")})
        db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('format_upgrades', ?)", (json.dumps(log, sort_keys=True),))
      db.execute("COMMIT")
      if db.execute("PRAGMA journal_mode").fetchone()[0] != "delete": db.execute("PRAGMA journal_mode=DELETE")
      if db.execute("PRAGMA quick_check").fetchone()[0] != "ok": raise StoreError(f"{p}: the upgraded copy failed its integrity check")
    finally: db.close()
    if not res.rewritten: return res  # nothing older than today: the store stays as it is
    _fsync(tmp)
    pause_point("upgrade:verified")
    replace_store(tmp, p)
  finally:
    for suffix in ("", "-journal", "-wal", "-shm"): Path(f"{tmp}{suffix}").unlink(missing_ok=True)
  return res
