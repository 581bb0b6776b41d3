"""The capture store: one SQLite file, written through sqlite-utils.

Tables (schema version in `meta`):
- `runs`: one row per capture run: when, git commit/dirty/branch, label, argv, device, tool versions, flags.
- `graphs`: content-addressed payloads (canonical UOp JSON or rendered source), zlib-compressed,
  deduplicated by `key` (sha256 of the uncompressed bytes, verified on every read).
- `captures`: one row per distinct (run, level, input) with its output key and summary columns
  (op names, node count, kernel count, output shapes, Tensor-level metadata, label) that make the store
  queryable with plain SQL or `sqlite-utils` without decoding anything.
- `accepts` (schema version 2): one row per capture row that `replay accept --key/--group` re-baselined: when, at
  which git commit (and whether the tree was dirty), by whom, why (`--message`), and the stored output before and
  after (both payloads stay in `graphs`). A full capture (`replay accept`, `replay suite`) writes a new store, so this
  table lists what was accepted since the last full capture.
- optional, in any version (older code ignores them): `coverage` (`replay coverage --save`) and `perf_history`
  (replay/baseline/history.py: each kernel's time, one measurement per `replay accept` on one machine).

Schema versions. A store is written in the oldest version that holds its data: version 1 (runs, graphs, captures)
until the first per-key accept, which adds `accepts` and sets version 2 in the transaction that writes it. So a
store without per-key accepts stays readable by replay from before version 2 (what `replay bisect` needs: it
replays captures with old commits' code). This code reads and writes versions 1 and 2; a newer version is refused.

Writing. WAL mode and a busy timeout let many processes write one file. The schema and its version row are
made in one `BEGIN IMMEDIATE` transaction (retried while another process holds the write lock), so no process
ever sees a half-made store; every write is a short `BEGIN IMMEDIATE` transaction, so a killed process loses at
most its unflushed batch and never corrupts the file. `compact` writes a vacuumed copy beside the store and
renames it over the store: a kill at any point leaves either the old file or the new one.

Reading (`Store(path, readonly=True)`: check, stats, show, diff) changes nothing in the store's directory:
- a rollback-journal store (what `compact` makes: the committed baselines) opens `mode=ro`: SQLite only takes
  advisory locks, so this is also correct while a writer is active;
- a WAL store whose `-wal`/`-shm` are absent, or whose WAL holds no frame, has everything in the main file and
  opens `immutable=1` (which never creates `-wal`/`-shm`). `mode=ro` alone would create them;
- a WAL store with frames in its `-wal` and no live connection (its writer was killed) is read from a private
  copy of the file and its WAL in a temporary directory (`immutable=1` would ignore the WAL's committed frames);
- a WAL store with a live connection (found with an open-file-description lock probe on the `-shm` lock bytes
  that SQLite's connections hold) opens `mode=ro` through SQLite's own protocol: the writer is changing `-wal`
  and `-shm` anyway, and a reader must take part in that protocol to see a consistent snapshot.
What is not safe, and why it is accepted: a writer that starts *after* an immutable open may checkpoint pages
under the reader. The reader then sees an error or a checksum mismatch (payloads are verified by sha256), not
a silently different result; checking a store while capturing into it again is not a supported workflow.
"""
from __future__ import annotations
import atexit, functools, hashlib, json, os, re, shutil, sqlite3, struct, tempfile, time, urllib.parse, zlib
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, cast
import sqlite_utils
from sqlite_utils.db import Table
try: import fcntl
except ImportError: fcntl = None  # type: ignore[assignment]  # no lock probe: stores with a -shm are then read the shared way
from replay.store.encode import IncompatibleCapture, MAX_PAYLOAD, _brief

SCHEMA_VERSION = 2  # the newest schema this code reads and writes (see the module docstring)
BASE_VERSION = 1    # what a store without per-key accepts is written as
# a capture level's name (which levels exist is replay.levels' registry: a row of another is incompatible when replayed)
_LEVEL_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
MAX_TEXT = 1 << 20  # a summary column longer than this (1 MiB) was not written by the recorder
BUSY_TIMEOUT_S = 30.0   # SQLite's own wait for a lock, per statement
LOCK_DEADLINE_S = 180.0  # our retries around it (many writers, slow disks), then a clear error

class StoreError(RuntimeError):
  """The file is not a usable capture store (not SQLite, a newer schema, unreadable)."""
class StoreUnavailable(StoreError):
  """The store could not be used now (locked by another writer, a disk that refuses reads or writes), whatever its
  content: a capture stops with a warning rather than stop the program (replay/record/recorder.py)."""
class _NoSchemaYet(StoreError):
  """Empty, or SQLite without tables: a store that may be being created right now."""

# the schema; reading checks that these tables and columns exist, so a crafted store fails at open, not midway
_SCHEMA: dict[str, dict[str, type]] = {
  "meta": {"key": str, "value": str},
  "runs": {"id": int, "started": str, "finished": str, "git_commit": str, "git_dirty": int, "git_branch": str, "label": str, "argv": str,
           "device": str, "python": str, "numpy": str, "pyopencl": str, "tinysched": str, "levels": str, "env": str, "host": str},
  "graphs": {"key": str, "kind": str, "data": bytes, "size": int, "node_count": int, "ops": str},
  "captures": {"id": int, "run_id": int, "seq": int, "level": str, "label": str, "input_key": str, "output_key": str, "var_vals": str,
               "assigns": str, "node_count": int, "kernel_count": int, "op_names": str, "output_shapes": str, "metadata": str, "extra": str},
}
# version 2: the per-key accept log (made by the first per-key accept; checked on open when the version says it is there)
_ACCEPTS: dict[str, type] = {"id": int, "time": str, "git_commit": str, "git_dirty": int, "who": str, "message": str, "capture_id": int,
                             "run_id": int, "seq": int, "level": str, "label": str, "input_key": str, "old_output_key": str,
                             "new_output_key": str}
# optional, any version: rule coverage measured over this store's rows (`replay coverage --save`), one row per rule per
# measurement; older code ignores the table
_COVERAGE: dict[str, type] = {"id": int, "measurement": int, "measured": str, "git_commit": str, "git_dirty": int, "captures_total": int,
                              "module": str, "matcher": str, "rule": str, "captures": int, "firings": int}
# optional, any version: the perf history (replay/baseline/history.py), one row per timed capture input per measurement (a
# measurement: one accept timed on one machine; device_class names the kind of device, not the host); older code ignores it
_PERF: dict[str, type] = {"id": int, "measurement": int, "time": str, "git_commit": str, "git_dirty": int, "device": str, "device_class": str,
                          "level": str, "label": str, "input_key": str, "output_key": str, "seconds": float, "flops": int, "bytes": int,
                          "gflops": float, "gbps": float, "peak_fraction": float, "peak_gflops": float, "peak_gbps": float}
_TEXT_COLUMNS = ("label", "var_vals", "assigns", "op_names", "output_shapes", "metadata", "extra")
_HEX64 = re.compile(r"[0-9a-f]{64}")

def pause_point(step: str) -> None:
  """Crash tests: with REPLAY_PAUSE_AT=<step> the process announces the step (on stderr, and appended as
  "<step> <pid>" to the file REPLAY_PAUSE_NOTIFY names, if set) and waits there to be killed."""
  if os.environ.get("REPLAY_PAUSE_AT") != step: return
  os.write(2, f"REPLAY-PAUSED {step}\n".encode())
  if note := os.environ.get("REPLAY_PAUSE_NOTIFY"):
    with open(note, "a") as f: f.write(f"{step} {os.getpid()}\n")
  while True: time.sleep(60)

def _busy(e: sqlite3.Error) -> bool:
  return getattr(e, "sqlite_errorcode", None) in (5, 6) or "locked" in str(e) or "busy" in str(e)

def _retry(fn: Callable[[], Any], what: str, path: Path) -> Any:
  """fn() until it does not fail with SQLITE_BUSY/LOCKED (SQLite gives up at once in some lock-upgrade races,
  without its busy handler), with backoff, then a clear error."""
  deadline, delay = time.monotonic() + LOCK_DEADLINE_S, 0.005
  while True:
    try: return fn()
    except sqlite3.OperationalError as e:
      if not _busy(e): raise
      if time.monotonic() > deadline:
        raise StoreUnavailable(f"{path}: still locked by another process after {LOCK_DEADLINE_S:.0f}s ({what}: {e})") from None
      time.sleep(delay)
      delay = min(delay * 2, 0.25)

# *** opening read-only without touching anything ***

# (st_dev, st_ino) -> (pid, count) of store files this process holds locking SQLite connections on. Closing any
# descriptor of a file drops all of this process's POSIX locks on it, SQLite's included, so for those files no
# descriptor is opened and closed here: they count as in use.
_LOCKED_HERE: dict[tuple[int, int], tuple[int, int]] = {}
_SNAPSHOTS: dict[tuple, Path] = {}   # (path, stat of db and wal) -> private copy, shared with forked workers
_SNAPSHOT_OWNER = os.getpid()

def _ident(p: Path) -> tuple[int, int] | None:
  try: st = os.stat(p)
  except OSError: return None
  return st.st_dev, st.st_ino

def _locked_here(p: Path) -> bool:
  return _LOCKED_HERE.get(_ident(p) or (-1, -1), (0, 0))[0] == os.getpid()

def _hold(ident: tuple[int, int], delta: int) -> None:
  pid, n = _LOCKED_HERE.get(ident, (os.getpid(), 0))
  n = (n if pid == os.getpid() else 0) + delta  # entries inherited through fork belong to the parent
  if n > 0: _LOCKED_HERE[ident] = (os.getpid(), n)
  else: _LOCKED_HERE.pop(ident, None)

def _shm_in_use(db: Path) -> bool:
  """Does any connection (of any process, this one included) have the WAL index open? Each holds a read lock
  on the -shm lock bytes 120..128 while it is open; a killed process's locks are gone."""
  shm = Path(f"{db}-shm")
  if not shm.exists(): return False
  if fcntl is None or not hasattr(fcntl, "F_OFD_GETLK"): return True  # cannot tell: take SQLite's protocol, the safe side
  try: fd = os.open(shm, os.O_RDONLY | os.O_CLOEXEC)
  except OSError: return True
  try:
    # struct flock {short l_type, l_whence; off_t l_start, l_len; pid_t l_pid}: may a write lock be placed?
    got = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 120, 9, 0))
    return struct.unpack("hhqqi4x", got)[0] != fcntl.F_UNLCK
  except OSError: return True
  finally: os.close(fd)

def _wal_has_frames(db: Path) -> bool:
  try: size = os.path.getsize(f"{db}-wal")
  except OSError: return False
  return size > 32  # a 32-byte header and no frame: nothing committed in it

def _snapshot(db: Path, journal: str = "-wal") -> Path:
  """A private, self-contained copy of a store whose writer is gone (with its WAL or hot rollback journal), for
  reading without touching the original."""
  sig = tuple((os.stat(x).st_mtime_ns, os.stat(x).st_size) if os.path.exists(x) else None for x in (db, f"{db}{journal}"))
  k = (str(db.resolve()), sig)
  if (snap := _SNAPSHOTS.get(k)) is not None and snap.exists(): return snap
  d = Path(tempfile.mkdtemp(prefix="replay-snapshot-"))
  snap = d / "store.db"
  shutil.copyfile(db, snap)
  if os.path.exists(f"{db}{journal}"): shutil.copyfile(f"{db}{journal}", f"{snap}{journal}")
  c = sqlite3.connect(snap, isolation_level=None)
  try:  # fold the WAL into the copy (or roll the journal back), so it reads like any closed store
    c.execute("SELECT count(*) FROM sqlite_master").fetchone()
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.execute("PRAGMA journal_mode=DELETE")
  except sqlite3.DatabaseError as e:
    shutil.rmtree(d, ignore_errors=True)
    raise StoreError(f"{db}: not a capture store ({e})") from None
  finally: c.close()
  _SNAPSHOTS[k] = snap
  return snap

@atexit.register
def _drop_snapshots() -> None:
  if os.getpid() != _SNAPSHOT_OWNER: return  # forked workers share the parent's copies
  for snap in _SNAPSHOTS.values(): shutil.rmtree(snap.parent, ignore_errors=True)

def _header(p: Path) -> bytes:
  try:
    with open(p, "rb") as f: return f.read(100)
  except OSError as e: raise StoreUnavailable(f"{p}: cannot be read ({e.strerror})") from None

def _check_file(p: Path, must_exist: bool) -> None:
  if not p.exists():
    if must_exist: raise StoreError(f"{p}: no such capture file")
    if not p.parent.is_dir(): raise StoreError(f"{p}: directory {p.parent} does not exist")
    return
  if not p.is_file(): raise StoreError(f"{p}: is {'a directory' if p.is_dir() else 'not a regular file'}, not a capture store")
  if _locked_here(p): return  # our own connection has it: known to be SQLite (and reading it here would drop its locks)
  h = _header(p)
  if h and not h.startswith(b"SQLite format 3\x00"):
    raise StoreError(f"{p}: not a capture store (not an SQLite file); pass a .db file written by `replay capture`")
  if not h and must_exist: raise _NoSchemaYet(f"{p}: empty file, not a capture store (the capture that made it stopped before writing)")

def _connect_readonly(p: Path) -> tuple[sqlite3.Connection, str]:
  """(connection, how) following the policy in the module docstring; `how` is for messages and tests."""
  _check_file(p, must_exist=True)
  uri = "file:" + urllib.parse.quote(str(p.resolve()))
  sidecars = os.path.exists(f"{p}-wal") or os.path.exists(f"{p}-shm")
  if _locked_here(p) or (sidecars and _shm_in_use(p)): how, target = "shared", f"{uri}?mode=ro"
  elif not sidecars or not _wal_has_frames(p):
    # rollback-journal stores take advisory locks only, and see a live writer's commits consistently
    wal_mode = _header(p)[18:19] == b"\x02"
    how, target = ("immutable", f"{uri}?mode=ro&immutable=1") if wal_mode else ("ro", f"{uri}?mode=ro")
  else:
    snap = _snapshot(p)
    how, target = "snapshot", "file:" + urllib.parse.quote(str(snap)) + "?mode=ro&immutable=1"
  try: conn = sqlite3.connect(target, uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None)
  except sqlite3.Error as e: raise StoreUnavailable(f"{p}: cannot be opened ({e})") from None
  if how == "ro" and os.path.exists(f"{p}-journal"):
    # a writer died mid-transaction: a read-only connection cannot roll its hot journal back; a private copy can
    try: conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError:
      conn.close()
      snap = _snapshot(p, "-journal")
      conn = sqlite3.connect(f"file:{urllib.parse.quote(str(snap))}?mode=ro&immutable=1", uri=True, check_same_thread=False, isolation_level=None)
      how = "snapshot"
  return conn, how

# *** the store ***

# TEXT values are decoded leniently: SQLite stores whatever bytes a writer gave (CAST(X'ff' AS TEXT)), and the default
# decoder raises on invalid UTF-8 at fetch time, crashing a read midway. backslashreplace shows such a byte as the text
# `\xff` (valid UTF-8 decodes exactly as before); surrogateescape would round-trip but give strings that crash every
# later UTF-8 write (a report, the terminal, a copy into another store).
_decode_text = functools.partial(str, encoding="utf-8", errors="backslashreplace")

class Store:
  def __init__(self, path: str | os.PathLike, readonly: bool = False, allow_empty: bool = False):
    """readonly: never writes (see the module docstring). A read-only store without any capture is refused
    (StoreError) unless allow_empty: a check that replays nothing must not pass."""
    self.path, self.readonly = Path(path), readonly
    self._ident: tuple[int, int] | None = None
    deadline = time.monotonic() + 5.0
    while True:
      try: return self._open(allow_empty)
      except _NoSchemaYet:
        # its creator may be between making the file and committing the schema (one transaction): wait a little
        if not readonly or time.monotonic() > deadline or not self._maybe_being_created(): raise
        time.sleep(0.1)

  @property
  def db(self) -> sqlite_utils.Database:
    # a reader made on first use: replaying reads through plain SQL, and the first Database() of a process loads
    # sqlite-utils' plugins (~16 ms of every `replay check`)
    if (db := self.__dict__.get("_db")) is None: db = self._db = sqlite_utils.Database(self.conn)
    return db

  def _maybe_being_created(self) -> bool: return not _locked_here(self.path) and _shm_in_use(self.path)  # a live connection

  def _open(self, allow_empty: bool) -> None:
    readonly = self.readonly
    if readonly:
      self.conn, self.how = _connect_readonly(self.path)
    else:
      _check_file(self.path, must_exist=False)
      try: self.conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None)
      except sqlite3.Error as e: raise StoreUnavailable(f"{self.path}: cannot be opened for writing ({e})") from None
      self.how = "write"
    self.conn.text_factory = _decode_text
    if self.how in ("write", "shared") and (ident := _ident(self.path)) is not None:
      self._ident = ident
      _hold(ident, +1)
    try:
      self.conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
      if not readonly: self._db = sqlite_utils.Database(self.conn)
      if readonly: self._check_readable(allow_empty)
      else: self._ensure_schema()
    except sqlite3.DatabaseError as e:
      self.close()
      if _busy(e): raise StoreUnavailable(f"{self.path}: locked by another process for over {BUSY_TIMEOUT_S:.0f}s ({e})") from None
      raise StoreError(f"{self.path}: not a capture store ({e}); pass a .db file written by `replay capture`") from None
    except BaseException:
      self.close()
      raise

  def _tables(self) -> set[str]: return {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}

  def _ensure_schema(self) -> None:
    """Make the schema if the file has none, in one transaction with its version row; concurrent creators wait
    for each other and all but the first find it made."""
    tables = _retry(self._tables, "reading the schema", self.path)
    if "meta" not in tables or self._version_row() is None:
      if tables - set(_SCHEMA): raise StoreError(f"{self.path}: SQLite file without a capture schema (tables: {', '.join(sorted(tables))})")
      pause_point("create:opened")
      def wal() -> None:
        if self.conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal" and \
           self.conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] != "wal":
          raise sqlite3.OperationalError("database is locked (journal mode not changed)")
      _retry(wal, "switching to WAL", self.path)
      pause_point("create:wal")
      self._write(self._create, "creating the schema")
      pause_point("create:committed")
    self._check_schema()
    self._check_version()

  def _create(self) -> None:
    tables = self._tables()
    if "meta" in tables and self._version_row() is not None: return  # another process made it while we waited
    if tables & {"runs", "captures"}:
      # a store made by an older version and killed half-way: finish it, unless it already holds data
      if any(self.conn.execute(f"SELECT EXISTS(SELECT 1 FROM {t})").fetchone()[0] for t in tables & {"runs", "captures", "graphs"}):
        raise StoreError(f"{self.path}: capture store without a schema version but with data: not made by this code")
    pause_point("create:begun")
    for name, cols in _SCHEMA.items():
      fks = [("run_id", "runs", "id")] if name == "captures" else None
      cast(Table, self.db[name]).create(cols, pk="key" if name in ("meta", "graphs") else "id", foreign_keys=fks, if_not_exists=True)
    caps = cast(Table, self.db["captures"])  # every name here is a table, never a view
    caps.create_index(["run_id", "level", "input_key"], unique=True, if_not_exists=True)
    caps.create_index(["input_key"], if_not_exists=True)
    caps.create_index(["output_key"], if_not_exists=True)
    caps.create_index(["label", "level"], if_not_exists=True)
    pause_point("create:tables")
    self.conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)", (str(BASE_VERSION),))
    pause_point("create:version")

  def _check_readable(self, allow_empty: bool) -> None:
    tables = self._tables()
    if not tables: raise _NoSchemaYet(f"{self.path}: empty SQLite file, not a capture store (the capture that made it stopped before "
                                    "writing its schema): capture into it again, or delete it")
    if "meta" not in tables:
      raise StoreError(f"{self.path}: SQLite file without a capture schema (tables: {', '.join(sorted(tables))})")
    self._check_schema()
    self._check_version()
    if not allow_empty and not self.conn.execute("SELECT EXISTS(SELECT 1 FROM captures)").fetchone()[0]:
      runs = self.conn.execute("SELECT count(*) FROM runs").fetchone()[0]
      raise StoreError(f"{self.path}: no captures in this store ({runs} run(s) recorded nothing; a capture that was killed before "
                       "its first flush leaves this): there is nothing to replay, capture again (`replay suite`, `replay capture`)")

  def _check_schema(self) -> None:
    tables = self._tables()
    for name, cols in _SCHEMA.items():
      if name not in tables: raise StoreError(f"{self.path}: incompatible capture store: table {name!r} is missing")
      have = {r[1] for r in self.conn.execute(f"PRAGMA table_info({name})")}
      if missing := [c for c in cols if c not in have]:
        raise StoreError(f"{self.path}: incompatible capture store: table {name!r} lacks column(s) {', '.join(missing)}")
    if 2 <= self.version() <= SCHEMA_VERSION:  # (a newer version is refused by _check_version, with its own message)
      if "accepts" not in tables: raise StoreError(f"{self.path}: incompatible capture store: version 2 without its table 'accepts'")
      have = {r[1] for r in self.conn.execute("PRAGMA table_info(accepts)")}
      if missing := [c for c in _ACCEPTS if c not in have]:
        raise StoreError(f"{self.path}: incompatible capture store: table 'accepts' lacks column(s) {', '.join(missing)}")

  def _version_row(self) -> Any:
    try: return self.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    except sqlite3.OperationalError: return None

  def version(self) -> int:
    """The store's schema version (0 when it has no readable version row; _check_version says why that is refused)."""
    row = self._version_row()
    try: return int(row[0]) if row is not None else 0
    except (TypeError, ValueError): return 0

  def _check_version(self) -> None:
    row = self._version_row()
    if row is None:
      raise StoreError(f"{self.path}: capture store without a schema version (its creation was interrupted by an older version of "
                       "replay): capture into it again, or delete it")
    try: v = int(row[0])
    except (TypeError, ValueError): raise StoreError(f"{self.path}: bad schema version {_brief(row[0])}") from None
    if v > SCHEMA_VERSION:
      raise StoreError(f"{self.path}: schema version {v} is newer than this code understands ({SCHEMA_VERSION}); "
                       "upgrade tinysched/replay, or re-capture with this version")
    if v < BASE_VERSION: raise StoreError(f"{self.path}: schema version {v} is older than {BASE_VERSION}: re-capture it")

  def close(self) -> None:
    try: self.conn.close()
    finally:
      # only once SQLite has closed its descriptors may this process open and close some of its own on the file
      if self._ident is not None: _hold(self._ident, -1)
      self._ident = None

  # *** writing ***
  def _write(self, fn: Callable[[], Any], what: str) -> Any:
    """fn() in one BEGIN IMMEDIATE transaction: the write lock is taken first, so it never has to be upgraded
    from a read lock (which SQLite refuses at once, without waiting, when another writer got in between)."""
    if self.readonly: raise StoreError(f"{self.path}: opened read-only")
    _retry(lambda: self.conn.execute("BEGIN IMMEDIATE"), what, self.path)
    try:
      out = fn()
      _retry(lambda: self.conn.execute("COMMIT"), what, self.path)
      return out
    except BaseException:
      if self.conn.in_transaction: self.conn.execute("ROLLBACK")
      raise

  def new_run(self, info: dict[str, Any]) -> int:
    cols = [c for c in _SCHEMA["runs"] if c not in ("id", "finished")]
    sql = f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join(':' + c for c in cols)})"
    # (an INSERT sets lastrowid)
    return self._write(lambda: int(self.conn.execute(sql, {k: info.get(k) for k in cols}).lastrowid), "recording a run")  # type: ignore[arg-type]
  def finish_run(self, run_id: int, finished: str) -> None:
    self._write(lambda: self.conn.execute("UPDATE runs SET finished=? WHERE id=?", (finished, run_id)), "finishing a run")

  def write_batch(self, graphs: list[dict], captures: list[dict]) -> None:
    """One transaction: payloads first (ignored when present), then the capture rows (a row already there for
    the same run, level and input is kept)."""
    def go() -> None:
      self.conn.executemany("INSERT OR IGNORE INTO graphs (key, kind, data, size, node_count, ops) VALUES "
                            "(:key, :kind, :data, :size, :node_count, :ops)", graphs)
      pause_point("write:graphs")
      self.conn.executemany("INSERT OR IGNORE INTO captures (run_id, seq, level, label, input_key, output_key, var_vals, assigns, "
                            "node_count, kernel_count, op_names, output_shapes, metadata, extra) VALUES (:run_id, :seq, :level, :label, "
                            ":input_key, :output_key, :var_vals, :assigns, :node_count, :kernel_count, :op_names, :output_shapes, "
                            ":metadata, :extra)", captures)
    self._write(go, "writing captures")

  def accept(self, updates: list[dict], log: list[dict]) -> None:
    """Per-key accept, in one transaction: the new output payloads (`graphs` rows, kept when present), each capture
    row's new output key and output summary (`updates`: {"id", "output_key", "op_names", "output_shapes", "kernel_count"},
    and "extra" where the level records more beside the output),
    and the log rows (`log`: the `accepts` columns but id). A version-1 store becomes version 2 in the same
    transaction, so a failure at any point leaves the store as it was."""
    graphs = [u["graph"] for u in updates if u.get("graph")]
    def go() -> None:
      if self.version() < 2:
        cast(Table, self.db["accepts"]).create(_ACCEPTS, pk="id", if_not_exists=True)
        self.conn.execute("UPDATE meta SET value='2' WHERE key='schema_version'")
      self.conn.executemany("INSERT OR IGNORE INTO graphs (key, kind, data, size, node_count, ops) VALUES "
                            "(:key, :kind, :data, :size, :node_count, :ops)", graphs)
      for u in updates:
        n = self.conn.execute("UPDATE captures SET output_key=:output_key, op_names=:op_names, output_shapes=:output_shapes, "
                              "kernel_count=:kernel_count WHERE id=:id", {k: u[k] for k in ("id", "output_key", "op_names", "output_shapes",
                                                                                              "kernel_count")}).rowcount
        if n != 1: raise StoreError(f"{self.path}: capture row {u['id']} vanished while accepting; nothing was changed")
        if u.get("extra") is not None: self.conn.execute("UPDATE captures SET extra=? WHERE id=?", (u["extra"], u["id"]))
        # a row must never point at an output this store does not hold (it would read as incompatible from then on)
        if not self.conn.execute("SELECT EXISTS(SELECT 1 FROM graphs WHERE key=?)", (u["output_key"],)).fetchone()[0]:
          raise StoreError(f"{self.path}: no payload for the new output {u['output_key'][:16]} of capture row {u['id']}; nothing was changed")
      pause_point("accept:updated")
      cols = [c for c in _ACCEPTS if c != "id"]
      self.conn.executemany(f"INSERT INTO accepts ({', '.join(cols)}) VALUES ({', '.join(':' + c for c in cols)})",
                            [{c: r.get(c) for c in cols} for r in log])
    self._write(go, "accepting captures")

  def save_coverage(self, measured: dict[str, Any], rules: list[dict]) -> None:
    """One coverage measurement (`measured`: time, git_commit, git_dirty, captures_total; `rules`: module, matcher, rule,
    captures, firings per rule of the inventory), in one transaction, into the optional `coverage` table."""
    def go() -> None:
      cast(Table, self.db["coverage"]).create(_COVERAGE, pk="id", if_not_exists=True)
      n = self.conn.execute("SELECT coalesce(max(measurement), 0) + 1 FROM coverage").fetchone()[0]
      cols = [c for c in _COVERAGE if c != "id"]
      self.conn.executemany(f"INSERT INTO coverage ({', '.join(cols)}) VALUES ({', '.join(':' + c for c in cols)})",
                            [{c: {**measured, **r, "measurement": n}.get(c) for c in cols} for r in rules])
    self._write(go, "saving coverage")

  def save_perf(self, measured: dict[str, Any], rows: list[dict]) -> int:
    """Append one perf measurement (`measured`: time, git_commit, git_dirty, device, device_class; `rows`: level, label,
    input_key, output_key, seconds, flops, bytes, gflops, gbps, peak_fraction, peak_gflops, peak_gbps per timed input) to the
    optional `perf_history` table, in one transaction; returns its measurement number (the table's last plus one)."""
    def go() -> int:
      self._perf_table()
      n = int(self.conn.execute("SELECT coalesce(max(measurement), 0) + 1 FROM perf_history").fetchone()[0])
      self._insert_perf([{**measured, **r, "measurement": n} for r in rows])
      return n
    return self._write(go, "saving the perf history")

  def copy_perf(self, rows: list[dict]) -> int:
    """Add perf_history rows read from another store (`perf_history()`), keeping their measurement numbers, in one
    transaction; measurements this store already has are left out (copying twice adds nothing). Returns the rows added."""
    def go() -> int:
      self._perf_table()
      have = {r[0] for r in self.conn.execute("SELECT DISTINCT measurement FROM perf_history")}
      new = [r for r in rows if r.get("measurement") not in have]
      self._insert_perf(new)
      return len(new)
    return self._write(go, "copying the perf history")

  def _perf_table(self) -> None:
    cast(Table, self.db["perf_history"]).create(_PERF, pk="id", if_not_exists=True)
    self._check_perf_columns()

  def _insert_perf(self, rows: list[dict]) -> None:
    cols = [c for c in _PERF if c != "id"]
    self.conn.executemany(f"INSERT INTO perf_history ({', '.join(cols)}) VALUES ({', '.join(':' + c for c in cols)})",
                          [{c: r.get(c) for c in cols} for r in rows])

  def _check_perf_columns(self) -> None:
    have = {r[1] for r in self.conn.execute("PRAGMA table_info(perf_history)")}
    if missing := [c for c in _PERF if c not in have]:
      raise StoreError(f"{self.path}: incompatible perf history: table 'perf_history' lacks column(s) {', '.join(missing)}")

  # *** reading ***
  def perf_history(self) -> list[dict]:
    """The perf history's rows (the `perf_history` columns), oldest measurement first, in the order each was written;
    empty when the store has none. A table without its columns is refused (StoreError), not read half."""
    if "perf_history" not in self._tables(): return []
    self._check_perf_columns()
    cur = self.conn.execute(f"SELECT {', '.join(_PERF)} FROM perf_history ORDER BY measurement, id")
    return [dict(zip(_PERF, r)) for r in cur]

  def coverage_runs(self) -> list[dict]:
    """Saved coverage measurements, oldest first: {measurement, measured, git_commit, git_dirty, captures_total, rules: [...]}."""
    if "coverage" not in self._tables(): return []
    out: dict[int, dict] = {}
    for r in self.conn.execute(f"SELECT {', '.join(_COVERAGE)} FROM coverage ORDER BY id"):
      d = dict(zip(_COVERAGE, r))
      head = {k: d[k] for k in ("measurement", "measured", "git_commit", "git_dirty", "captures_total")}
      m = out.setdefault(d["measurement"], head | {"rules": []})
      m["rules"].append({k: d[k] for k in ("module", "matcher", "rule", "captures", "firings")})
    return list(out.values())

  def accepts(self) -> list[dict]:
    """The per-key accept log, oldest first (empty for a version-1 store)."""
    if self.version() < 2: return []
    cur = self.conn.execute(f"SELECT {', '.join(_ACCEPTS)} FROM accepts ORDER BY id")
    return [dict(zip(_ACCEPTS, r)) for r in cur]

  def graph_rows(self, keys: Iterable[str]) -> list[dict]:
    """The stored `graphs` rows of these keys as they are (compressed), for copying payloads into another store."""
    cols = ("key", "kind", "data", "size", "node_count", "ops")
    out = []
    for k in sorted(set(keys)):
      row = self.conn.execute(f"SELECT {', '.join(cols)} FROM graphs WHERE key=?", (k,)).fetchone()
      if row is not None: out.append(dict(zip(cols, row)))
    return out

  def blob(self, key: str) -> bytes:
    """A payload, decompressed (at most MAX_PAYLOAD bytes: a small row must not inflate to gigabytes) and verified."""
    if type(key) is not str or not _HEX64.fullmatch(key): raise IncompatibleCapture(f"malformed payload key {_brief(key)}")
    try: row = self.conn.execute("SELECT CASE WHEN length(data) <= ? THEN data END, typeof(data), length(data) FROM graphs WHERE key=?",
                                 (MAX_PAYLOAD, key)).fetchone()
    except sqlite3.DatabaseError as e: raise IncompatibleCapture(f"payload {key[:16]} cannot be read ({e})") from None
    if row is None: raise IncompatibleCapture(f"payload {key[:16]} is missing from {self.path}")
    data, kind, n = row
    if kind != "blob": raise IncompatibleCapture(f"payload {key[:16]} is stored as {kind}, not compressed bytes")
    if data is None: raise IncompatibleCapture(f"payload {key[:16]} is {n} bytes compressed, over the limit of {MAX_PAYLOAD}")
    d = zlib.decompressobj()
    try: out = d.decompress(data, MAX_PAYLOAD + 1)
    except zlib.error as e: raise IncompatibleCapture(f"payload {key[:16]} is corrupted ({e})") from None
    if len(out) > MAX_PAYLOAD or d.unconsumed_tail:
      raise IncompatibleCapture(f"payload {key[:16]} decompresses to more than {MAX_PAYLOAD} bytes (the limit; REPLAY_MAX_PAYLOAD_MB "
                                "raises it for a store you trust)")
    if not d.eof: raise IncompatibleCapture(f"payload {key[:16]} is corrupted (truncated)")
    if hashlib.sha256(out).hexdigest() != key: raise IncompatibleCapture(f"payload {key[:16]} is corrupted (checksum mismatch)")
    return out

  def captures(self, level: str | None = None, label: str | None = None, key: str | None = None) -> Iterator[dict]:
    """Capture rows as dicts. A row whose columns do not have the types the recorder writes still comes out, with
    those fields made safe and the reason under "_invalid" (it replays as `incompatible`)."""
    cols = list(_SCHEMA["captures"])
    # long values come out as NULL plus their length: a crafted 1 GB column must not be loaded to be refused
    sel = ", ".join([f"CASE WHEN length({c}) <= {MAX_TEXT} THEN {c} END AS {c}" for c in cols] +
                    [f"typeof({c}) AS \"{c}:type\"" for c in cols] + [f"length({c}) AS \"{c}:len\"" for c in cols])
    q = f"SELECT {sel} FROM captures WHERE 1=1"; args: list[Any] = []
    if level: q, args = q + " AND level=?", args + [level]
    if label: q, args = q + " AND label=?", args + [label]
    if key: q, args = q + " AND (input_key LIKE ? OR output_key LIKE ?)", args + [key + "%", key + "%"]
    cur = self.conn.execute(q + " ORDER BY run_id, seq, id", args)
    names = [c[0] for c in cur.description]
    for r in cur:
      d = dict(zip(names, r))
      yield _clean_row({c: d[c] for c in cols}, {c: (d[f"{c}:type"], d[f"{c}:len"]) for c in cols})
  def runs(self) -> list[dict]:
    cur = self.conn.execute("SELECT * FROM runs ORDER BY id")
    cols = [c[0] for c in cur.description]
    return [dict(zip(cols, r)) for r in cur]

def _clean_row(row: dict, types: dict[str, tuple[str, int | None]]) -> dict:
  problems: list[str] = []
  def bad(col: str, why: str) -> None: problems.append(f"{col} {why}")
  for c, (kind, n) in types.items():
    if kind == "text" and n is not None and n > MAX_TEXT: bad(c, f"is {n} characters long")
  for c in ("id", "run_id", "seq"):
    if type(row[c]) is not int:
      bad(c, f"is {types[c][0]}, not an integer")
      row[c] = -1
  if type(row["level"]) is not str or not _LEVEL_NAME.fullmatch(row["level"]):
    bad("level", f"is {_brief(row['level'])}, not a level name")
    row["level"] = row["level"][:20] if type(row["level"]) is str else "?"
  for c in ("input_key", "output_key"):
    if type(row[c]) is not str or not _HEX64.fullmatch(row[c]):
      bad(c, "is NULL" if row[c] is None else f"is {_brief(row[c])}, not a sha256 hex key")
      row[c] = row[c][:64] if type(row[c]) is str else ""
  for c in _TEXT_COLUMNS:
    if row[c] is not None and type(row[c]) is not str:
      bad(c, f"holds a {types[c][0]}, not text")
      row[c] = None
  for c in ("node_count", "kernel_count"):
    if row[c] is not None and type(row[c]) is not int:
      bad(c, f"holds a {types[c][0]}, not an integer")
      row[c] = None
  if problems: row["_invalid"] = f"malformed capture row (id {row['id']}): " + "; ".join(problems)
  return row

def graph_row(key: str, data: bytes, kind: str, node_count: int | None = None, ops: Iterable[str] = ()) -> dict:
  return {"key": key, "kind": kind, "data": zlib.compress(data, 6), "size": len(data), "node_count": node_count, "ops": " ".join(ops)}

def dumps(x: Any) -> str: return json.dumps(x, sort_keys=True, separators=(",", ":"))

def _fsync(p: Path) -> None:
  fd = os.open(p, os.O_RDONLY)
  try: os.fsync(fd)
  except OSError: pass  # some file systems cannot sync a directory: the rename is still atomic
  finally: os.close(fd)

def _pid_alive(pid: int) -> bool:
  try: os.kill(pid, 0)
  except ProcessLookupError: return False
  except PermissionError: return True
  return True

def remove_stale_temps(directory: Path, pattern: str) -> None:
  """Temporary files `<...>-<pid>.tmp*` left by a killed process (whose pid is gone)."""
  for t in directory.glob(pattern):
    m = re.search(r"-(\d+)\.tmp", t.name)
    if m and not _pid_alive(int(m.group(1))): t.unlink(missing_ok=True)

def replace_store(src: Path, dst: Path) -> None:
  """Move a closed store file over `dst` in one rename. `dst`'s old -wal/-shm go first: SQLite would apply a
  stale WAL to the new file."""
  for suffix in ("-wal", "-shm", "-journal"): Path(f"{dst}{suffix}").unlink(missing_ok=True)
  os.replace(src, dst)
  _fsync(dst.parent)

def copy_rows(dst: Path, picks: list[tuple[str, dict]]) -> None:
  """A new store `dst` holding the capture rows `picks` ((source store, row) pairs), their runs and payloads, compacted
  to one file. It has no per-key accepts, so it is written in the oldest schema (readable by older replay code)."""
  out = Store(dst)
  try:
    for db in sorted({d for d, _ in picks}):
      rows = [r for d, r in picks if d == db]
      src = Store(db, readonly=True)
      try:
        runs = {r["id"]: r for r in src.runs()}
        new_run: dict[int, int] = {}
        for rid in sorted({r["run_id"] for r in rows}):
          info = runs.get(rid) or {"label": rows[0]["label"]}
          new_run[rid] = out.new_run(info)
          if info.get("finished"): out.finish_run(new_run[rid], info["finished"])
        graphs = src.graph_rows([k for r in rows for k in (r["input_key"], r["output_key"])])
        cols = ("seq", "level", "label", "input_key", "output_key", "var_vals", "assigns", "node_count", "kernel_count", "op_names",
                "output_shapes", "metadata", "extra")
        out.write_batch(graphs, [{**{c: r[c] for c in cols}, "run_id": new_run[r["run_id"]]} for r in rows])
      finally: src.close()
  finally: out.close()
  compact(dst)

def compact(path: str | os.PathLike) -> None:
  """One self-contained file to commit: a vacuumed copy in rollback-journal mode, written beside the store and
  renamed over it, so a kill at any point leaves a complete store (the old or the new) and at most a hidden
  temporary file, removed by the next compaction. Run it when no other process uses the store."""
  p = Path(path)
  if not p.exists(): return
  remove_stale_temps(p.parent, f".{p.name}.compact-*.tmp*")
  tmp = p.with_name(f".{p.name}.compact-{os.getpid()}.tmp")
  tmp.unlink(missing_ok=True)
  try:
    src = sqlite3.connect(p, isolation_level=None, timeout=BUSY_TIMEOUT_S)
    try:
      pause_point("compact:opened")
      src.execute("VACUUM INTO ?", (str(tmp),))
      pause_point("compact:copied")
    finally: src.close()  # the last connection checkpoints and deletes the store's -wal and -shm
    if os.path.exists(f"{p}-wal"): raise StoreError(f"{p}: in use by another process, not compacted (close it and run again)")
    dst = sqlite3.connect(tmp, isolation_level=None)
    try:
      if dst.execute("PRAGMA journal_mode").fetchone()[0] != "delete": dst.execute("PRAGMA journal_mode=DELETE")
      if dst.execute("PRAGMA quick_check").fetchone()[0] != "ok": raise StoreError(f"{p}: the compacted copy failed its integrity check")
    finally: dst.close()
    _fsync(tmp)
    pause_point("compact:verified")
    replace_store(tmp, p)
    pause_point("compact:replaced")
  finally:
    for suffix in ("", "-journal", "-wal", "-shm"): Path(f"{tmp}{suffix}").unlink(missing_ok=True)
