"""Capture: record what tinysched's scheduler and code generator do, into a capture store.

Switch it on with
- the environment: `TINYSCHED_CAPTURE=path.db` (+ `TINYSCHED_CAPTURE_LABEL`, `TINYSCHED_CAPTURE_LEVELS=kernel,schedule,program`);
  tinysched finds this module through the `tinysched.capture` entry point, so tinysched never imports replay;
- the context manager `with replay.capture(path, label=...)`;
- the command `replay capture --db PATH --label L -- <command ...>`.

Each capture is encoded when it happens (cheap: the graphs are small and encodings are memoized by node),
kept as rows and payloads, and written in batches: every `FLUSH_EVERY` captures, when capture stops, at exit, on
SIGTERM and on KeyboardInterrupt. The capturer keeps no strong reference to what it was shown (a pre-sink, a big
graph): the program it observes frees them exactly when it would without capture.

Capture never changes what the observed program does: any failure of the capture itself (a full disk, a read-only or
locked store, an encoding error) disables capture for the rest of the process with one warning on stderr naming the
store and what it kept, and the program goes on and exits as it would have. replay's own runners (`replay capture`,
`replay suite`, `replay accept`) set TINYSCHED_CAPTURE_STRICT=1: the process then exits 2 at its end, so an incomplete
capture is never taken for a whole one.
"""
from __future__ import annotations
import atexit, contextlib, datetime, json, os, platform, signal, socket, sys, threading, weakref
from pathlib import Path
from typing import Callable, Any, Iterator
import numpy
import tinysched
from tinysched import capture_hook
from tinysched.codegen.program import to_program
from tinysched.codegen.target import TARGETS, UnknownTargetError, named_target
from tinysched.device import Device
from tinysched.uop import UOp
from replay import levels
from replay.levels import HOOKED, LEVELS, RowWriter, names as level_names
from replay.store.encode import key_of
from replay.store.sqlite import Store, StoreError, StoreUnavailable, graph_row, dumps, pause_point
from replay.git import query as _git, code_commit  # metadata: None when git cannot tell, within 10s

FLUSH_EVERY = 512
# the level whose calls list the kernels of a schedule (big graphs: flushed more often; a capture target renders each of
# their kernels for another device) and the level those renders come back as (rendered sources)
SCHEDULE = next(n for n in LEVELS if levels.get(n).lists_kernels)
RENDERED = next(n for n in LEVELS if levels.get(n).runs_stored_source)
SCHEDULE_FLUSH_EVERY = 16
ENV_FLAGS = ("TINYSCHED_DEVICE", "FUSE_ARANGE", "SPLIT_REDUCEOP", "REDUCEOP_SPLIT_THRESHOLD", "REDUCEOP_SPLIT_SIZE", "CAST_BEFORE_VIEW", "NOOPT")

def run_info(label: str, levels: tuple[str, ...]) -> dict[str, Any]:
  src = Path(tinysched.__file__).resolve().parent.parent
  try:
    import pyopencl  # optional: only its version is recorded (a machine without OpenCL captures on NUMPY)
    pcl = pyopencl.VERSION_TEXT
  except Exception: pcl = None
  sha, dirty = code_commit()
  return {"started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
          "git_commit": sha, "git_dirty": dirty,
          "git_branch": _git(["rev-parse", "--abbrev-ref", "HEAD"], src), "label": label, "argv": json.dumps(sys.argv),
          "device": Device.DEFAULT, "python": platform.python_version(), "numpy": numpy.__version__, "pyopencl": pcl,
          "tinysched": getattr(tinysched, "__version__", "0.1.0"), "levels": ",".join(levels),
          "env": dumps({k: os.environ[k] for k in ENV_FLAGS if k in os.environ}), "host": socket.gethostname()}

class Capturer:
  """Receives hook calls and writes them to one store; one per process.

  The hook drops exact repeats (same nodes, same values) and encodes the rest at once into pending rows and payloads
  (bytes, no references to the caller's graphs: capture must not keep a graph alive that the program dropped); the
  SQLite transaction happens in `flush`, every FLUSH_EVERY pending rows (or SCHEDULE_FLUSH_EVERY schedules, whose
  graphs are big), at stop, at exit and on SIGTERM."""
  def __init__(self, path: str | os.PathLike, label: str = "", levels: tuple[str, ...] = HOOKED, target: Any = None):
    bad = [lv for lv in levels if lv not in level_names()]
    if bad: raise ValueError(f"unknown capture level(s) {bad}: choose from {', '.join(level_names())}")
    if target is not None and RENDERED not in levels:
      raise ValueError(f"a capture target renders {RENDERED}-level captures: add the {RENDERED} level")
    # a named Target (tinysched/codegen/target.py TARGETS): every scheduled kernel is also rendered for it, with its
    # default opts, under capture (program rows only; nothing runs), so a machine without the device captures its code
    self.target = target
    self.rendered: weakref.WeakSet[UOp] = weakref.WeakSet()  # kernel ASTs already rendered for `target` (weak: see the class)
    self.target_failed: list[str] = []
    self.path, self.label, self.levels = Path(path), label, tuple(levels)
    self.store = Store(self.path)
    try: self.run_id = self.store.new_run(run_info(label, self.levels))
    except BaseException:
      self.store.close()
      raise
    pause_point("run:started")
    self.seq = 0
    # encoded, not yet written (kept until their transaction commits: a failed flush is retried at the next)
    self.graphs: dict[str, dict] = {}  # payload key -> graphs row
    self.rows: list[dict] = []         # capture rows, in call order
    self.seen_now: set[tuple[str, str]] = set()  # (level, input_key) of `rows` (merged into `seen` once written)
    # output AST -> its pending row, for the schedule call that follows (RowWriter; weak: see the class)
    self.kernel_rows: weakref.WeakKeyDictionary[UOp, dict] = weakref.WeakKeyDictionary()
    self.yields = False  # a session capture (pytest --replay-capture): an explicit capture inside it pauses it
    self.accept: Callable[[], bool] | None = None  # asked before each capture: False drops it (a test patched the rules)
    self.dropped = 0
    self.queued_schedules = 0
    # identities of the calls already recorded, by the first node of each (weak: a repeat is only a repeat while its
    # nodes live; one made again later is dropped by its input key instead, in `written`)
    self.recent: weakref.WeakKeyDictionary[UOp, set] = weakref.WeakKeyDictionary()
    self.recent_plain: set = set()  # the identities of calls that hold no node (membership only)
    self.seen: set[tuple[str, str]] = set()  # (level, input_key) written by this run
    self.lock = threading.RLock()
    self.closed = False
    self.depth = 0                      # > 0 while this process is inside the capturer (see _on_sigterm)
    self.exit_code: int | None = None   # set by SIGTERM arriving inside the capturer
    self.failed: str | None = None      # why capture stopped (see _fail): nothing more is recorded

  def __call__(self, level: str, inputs: Any, output: Any, info: dict | None = None) -> None:
    if self.closed or (level not in self.levels and not (level == SCHEDULE and self.target is not None)): return
    if self.accept is not None and not self.accept():
      self.dropped += 1
      return
    self.depth += 1
    try:
      self._record(level, inputs, output, info)
      if level == SCHEDULE and self.target is not None: self._render_for_target(output)
    except Exception as e: self._fail(e, f"recording a {level}-level capture")  # noqa: BLE001 (never into the observed program)
    finally:
      self.depth -= 1
      if self.exit_code is not None and self.depth == 0: self._exit_now()

  def _render_for_target(self, asts: list[UOp]) -> None:
    """Render each new kernel of a schedule for the capture target: to_program's own hook records the program row. A
    kernel the target cannot take (an unsupported dtype, a limit) is counted and named at close, never raised into the
    program being captured."""
    for ast in asts:
      if ast in self.rendered: continue
      self.rendered.add(ast)
      try: to_program(ast, None, self.target)
      except Exception as e:  # noqa: BLE001 (the user's program must not fail because another device could not take a kernel)
        self.target_failed.append(f"{type(e).__name__}: {e}".splitlines()[0][:200])

  def _exit_now(self) -> None:
    code = self.exit_code or 143
    try: stop()
    finally: os._exit(code)

  def _record(self, level: str, inputs: Any, output: Any, info: dict | None) -> None:
    if level not in self.levels: return  # a schedule call seen only for the capture target
    with self.lock:
      lv = levels.get(level)
      ident, inputs = lv.identity(inputs, output)
      anchor = next((x for x in ident if isinstance(x, UOp)), None)  # (a level whose calls hold no node: kept as it is)
      seen = self.recent_plain if anchor is None else self.recent.setdefault(anchor, set())
      rest = _weak(tuple(x for x in ident if x is not anchor))
      if rest in seen and not lv.capture_always: return
      seen.add(rest)
      lv.write(self._writer(), inputs, output, info, self.label)  # the label when it happened (relabel may change it)
      if level == SCHEDULE: self.queued_schedules += 1
      if len(self.rows) >= FLUSH_EVERY or self.queued_schedules >= SCHEDULE_FLUSH_EVERY: self.flush()

  def _writer(self) -> RowWriter:
    def graph(data: bytes, kind: str, stats: dict | None = None) -> str:
      key = key_of(data)
      if key not in self.graphs: self.graphs[key] = graph_row(key, data, kind, (stats or {}).get("node_count"), (stats or {}).get("ops", ()))
      return key
    def written(level: str, in_key: str) -> bool: return (level, in_key) in self.seen or (level, in_key) in self.seen_now
    def add(level: str, in_key: str, out_key: str, label: str, **summary: Any) -> dict | None:
      if written(level, in_key): return None
      self.seen_now.add((level, in_key))
      row = {"run_id": self.run_id, "seq": self.seq + len(self.rows) + 1, "level": level, "label": label, "input_key": in_key,
             "output_key": out_key, "var_vals": None, "assigns": None, "node_count": None, "kernel_count": None, "op_names": None,
             "output_shapes": None, "metadata": None, "extra": None, **summary}
      self.rows.append(row)
      return row
    return RowWriter(graph, add, written, kernel_rows=self.kernel_rows)

  def _fail(self, e: BaseException, doing: str) -> None:
    """Capture failed: stop capturing for the rest of the process, with one warning naming the store, what it kept and
    what was lost; nothing is raised into the observed program (see the module docstring)."""
    with self.lock:
      if self.failed is not None: return
      self.failed = f"{type(e).__name__}: {e}".splitlines()[0][:300]
      lost = len(self.rows)
      self.rows.clear(); self.graphs.clear(); self.seen_now.clear(); self.kernel_rows.clear()
      self.closed = True
      if capture_hook.HOOK is self: capture_hook.HOOK = None  # the capture points cost nothing from now on
      try: self.store.close()
      except Exception: pass  # noqa: BLE001 (a store that failed may fail to close too)
      FAILURES.append(f"{self.path}: {self.failed}")
      sys.stderr.write(f"replay: warning: capture into {self.path} stopped while {doing}: {self.failed}\n"
                       f"  kept: the {self.seq} capture(s) written before (run {self.run_id}); not captured: {lost} pending and all that "
                       "follows. The program goes on without capture.\n"
                       "  next: free space on that disk, or make the store writable (or name another with TINYSCHED_CAPTURE), and capture again\n")
      sys.stderr.flush()

  def flush(self) -> None:
    with self.lock:
      # the pending rows are only dropped once their transaction committed: a flush interrupted by SIGTERM (SystemExit)
      # or an error leaves them for the flush at exit
      if not self.rows: return
      rows = list(self.rows)
      self.store.write_batch(list(self.graphs.values()), rows)
      self.seen |= self.seen_now
      self.seq += len(rows)
      self.rows.clear()
      self.graphs.clear()
      self.seen_now.clear()
      self.kernel_rows.clear()
      self.queued_schedules = 0

  def close(self) -> None:
    with self.lock:
      if self.closed: return
      try: self._close()
      except Exception as e: self._fail(e, "writing its last captures")  # noqa: BLE001 (see _fail)

  def _close(self) -> None:
    with self.lock:
      self.flush()
      if self.target_failed:
        sys.stderr.write(f"replay: capture target {self.target.name}: {len(self.target_failed)} kernel(s) could not be rendered for it "
                         f"(not captured), first: {self.target_failed[0]}\n")
      if self.dropped:  # pytest --replay-capture: calls made while a test had patched the scheduler's or codegen's rules
        sys.stderr.write(f"replay: {self.dropped} call(s) not captured into {self.store.path}: made while the rules were patched\n")
      self.store.finish_run(self.run_id, datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
      self.store.close()
      self.closed = True

# *** switching capture on and off ***

_active: Capturer | None = None
FAILURES: list[str] = []  # the captures of this process that failed (Capturer._fail): "path: why"

def strict() -> bool:
  """TINYSCHED_CAPTURE_STRICT=1 (replay's own runners): a failed capture makes the process exit 2 at its end."""
  return os.environ.get("TINYSCHED_CAPTURE_STRICT", "") not in ("", "0")

def _weak(x: Any) -> Any:
  """An identity with its nodes weakly referenced (equal while they live, hashed as they are)."""
  if isinstance(x, UOp): return weakref.ref(x)
  return tuple(_weak(y) for y in x) if isinstance(x, tuple) else x

_paused: list[Capturer] = []  # session captures paused by an explicit capture inside them (innermost last)

def relabel(label: str) -> None:
  """Label what the active capture records from now on (pytest --replay-capture: the running test's node id)."""
  if _active is not None: _active.label = label

def start(path: str | os.PathLike, label: str = "", levels: tuple[str, ...] = HOOKED, target: Any = None) -> Capturer:
  global _active
  if _active is not None and _active.yields:  # a test of capture itself, inside a session capture: pause the session
    _active.flush()
    _paused.append(_active)
    _active = capture_hook.HOOK = None
  if _active is not None: raise RuntimeError(f"capture is already on (into {_active.path}); stop it first")
  if capture_hook.HOOK is capture_hook._first_call: capture_hook.HOOK = None  # an explicit start wins over the environment
  _active = Capturer(path, label, levels, target)
  capture_hook.HOOK = _active
  return _active

def stop() -> None:
  global _active
  if _active is None: return
  capture_hook.HOOK = None
  c, _active = _active, None
  try: c.close()
  finally:
    if _paused and not c.yields:  # the explicit capture is over: the session capture goes on
      _active = _paused.pop()
      capture_hook.HOOK = _active

@contextlib.contextmanager
def capture(path: str | os.PathLike, label: str = "", levels: tuple[str, ...] = HOOKED, target: Any = None) -> Iterator[Capturer]:
  """Capture everything tinysched schedules and compiles inside the block into the store at `path`. `target` (a
  Target, e.g. TARGETS["nvidia-like-gpu"]): also render every scheduled kernel for it (program level)."""
  c = start(path, label, levels, target)
  try: yield c
  finally: stop()

def _on_sigterm(signum, frame):
  # Flush, then leave at once. Raising SystemExit instead can be swallowed (when the signal lands in a weakref
  # callback or __del__) and the process would run on. If the signal interrupted the capturer itself, it exits
  # when that call returns, so no half-built batch is written twice.
  c = _active
  if c is not None and c.depth > 0:
    c.exit_code = 128 + signum
    return
  try: stop()
  finally: os._exit(128 + signum)

def _stop_at_exit() -> None:
  stop()  # (a failure is a warning: Capturer._fail)
  if FAILURES and strict():
    # a runner of replay's own asked: an incomplete capture must not look like a whole one (an exception in an atexit
    # hook would be printed and ignored, exit status 0)
    sys.stdout.flush()
    os._exit(2)

class CaptureConfigError(SystemExit):
  """TINYSCHED_CAPTURE* names something unusable: the process stops with status 2 and says which variable."""

def _config_error(var: str, value: str, why: str, hint: str) -> CaptureConfigError:
  sys.stderr.write(f"replay: error: {var}={value!r}: {why}\n  next: {hint}\n")
  sys.stderr.flush()
  return CaptureConfigError(2)

def env_config() -> tuple[Path, str, tuple[str, ...]] | None:
  """(path, label, levels) from the environment, validated; None when TINYSCHED_CAPTURE is unset or empty.
  Raises CaptureConfigError, naming the variable and its value, for anything that would fail later."""
  raw = os.environ.get("TINYSCHED_CAPTURE")
  if not raw: return None
  raw_levels = os.environ.get("TINYSCHED_CAPTURE_LEVELS")
  levels = HOOKED if raw_levels is None else tuple(x.strip() for x in raw_levels.split(",") if x.strip())
  if bad := [lv for lv in levels if lv not in level_names()]:
    raise _config_error("TINYSCHED_CAPTURE_LEVELS", raw_levels or "", f"unknown capture level(s) {', '.join(bad)}",
                        f"use a comma-separated subset of {','.join(LEVELS)}, or unset it for the default ones")
  if not levels:
    raise _config_error("TINYSCHED_CAPTURE_LEVELS", raw_levels or "", "names no capture level",
                        f"use a comma-separated subset of {','.join(LEVELS)}, or unset it for the default ones")
  path = Path(raw).expanduser()
  if path.is_dir(): raise _config_error("TINYSCHED_CAPTURE", raw, "is a directory", "name a .db file, e.g. TINYSCHED_CAPTURE=run.db")
  if not path.parent.is_dir():
    raise _config_error("TINYSCHED_CAPTURE", raw, f"directory {path.parent} does not exist (replay does not create it)",
                        "create the directory, or name a file in an existing one")
  return path, os.environ.get("TINYSCHED_CAPTURE_LABEL", ""), levels

def env_target(levels: tuple[str, ...] = HOOKED):
  """The Target TINYSCHED_CAPTURE_TARGET names (tinysched/codegen/target.py TARGETS), or None when unset; exits 2
  naming the value and the known names for an unknown one."""
  raw = os.environ.get("TINYSCHED_CAPTURE_TARGET")
  if not raw: return None
  try: t = named_target(raw)
  except UnknownTargetError:
    raise _config_error("TINYSCHED_CAPTURE_TARGET", raw, "names no known target", f"use one of {', '.join(TARGETS)}, or unset it") from None
  if RENDERED not in levels:
    raise _config_error("TINYSCHED_CAPTURE_TARGET", raw, f"renders {RENDERED}-level captures, but TINYSCHED_CAPTURE_LEVELS leaves {RENDERED} out",
                        f"add {RENDERED} to TINYSCHED_CAPTURE_LEVELS, or unset TINYSCHED_CAPTURE_TARGET")
  return t

def check_env() -> None:
  """Called by tinysched at import when TINYSCHED_CAPTURE is set (capture_hook.autoload): the settings are checked
  before any user code runs, though capture itself starts at the first capture point. Exits 2 naming the variable."""
  if (cfg := env_config()) is None: return
  env_target(cfg[2])
  path = cfg[0]
  if path.is_file() and path.stat().st_size:
    with open(path, "rb") as f: head = f.read(16)
    if head != b"SQLite format 3\x00":
      raise _config_error("TINYSCHED_CAPTURE", os.environ["TINYSCHED_CAPTURE"],
                          "not an SQLite file, so not a capture store (an existing file is never overwritten)",
                          "name a new .db file or a store written by `replay capture`, or unset TINYSCHED_CAPTURE")

def install_from_env() -> None:
  """Entry point `tinysched.capture`: start capturing when TINYSCHED_CAPTURE names a file. Every setting is
  checked here, at the first point replay is loaded, so a misconfiguration stops the program with a message
  naming the variable instead of failing later (at exit, or in the middle of the user's work)."""
  if _active is not None: return
  if capture_hook.HOOK is capture_hook._first_call: capture_hook.HOOK = None
  if (cfg := env_config()) is None: return
  path, label, levels = cfg
  target = env_target(levels)
  atexit.register(_stop_at_exit)
  try: start(path, label, levels, target)
  except StoreError as e:
    if not isinstance(e, StoreUnavailable):  # the file is not a store this code can write (its content): a misconfiguration
      raise _config_error("TINYSCHED_CAPTURE", os.environ["TINYSCHED_CAPTURE"], f"not usable as a capture store: {e}",
                          "name a new .db file or a store written by `replay capture`, or unset TINYSCHED_CAPTURE") from None
    return _start_failed(path, e)
  except Exception as e: return _start_failed(path, e)  # noqa: BLE001 (a full or read-only disk: the program runs on uncaptured)
  if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
    signal.signal(signal.SIGTERM, _on_sigterm)

def _start_failed(path: Path, e: BaseException) -> None:
  """Capture could not start for a reason of the moment (a full or read-only disk, a locked store): one warning, and the
  program runs on uncaptured (strict runners exit 2 at the end: _stop_at_exit)."""
  FAILURES.append(f"{path}: {type(e).__name__}: {e}")
  sys.stderr.write(f"replay: warning: capture into {path} could not start: {type(e).__name__}: {e}\n  nothing is captured; the program "
                   "goes on without capture.\n  next: name a new .db file or a store written by `replay capture` in a writable folder "
                   "with TINYSCHED_CAPTURE, or unset it\n")
  sys.stderr.flush()
