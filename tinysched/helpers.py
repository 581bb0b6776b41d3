"""Small, dependency-free utilities shared by every module."""
from __future__ import annotations
import contextlib, contextvars, functools, itertools, math, os, stat, sys, tempfile
from pathlib import Path
from typing import Callable, Iterable, TypeVar, Any

T = TypeVar("T")

def prod(xs: Iterable[Any], start: Any = 1) -> Any: return math.prod(xs, start=start)  # start * x0 * x1 ..., any objects with *
def dedup(xs: Iterable[T]) -> list[T]: return list(dict.fromkeys(xs))  # keeps first-seen order: deterministic
def all_int(xs: Iterable[Any]) -> bool: return all(type(x) is int for x in xs)
def all_same(xs: list[Any]) -> bool: return all(x == xs[0] for x in xs[1:])
def argsort(xs: list[Any]) -> list[int]: return sorted(range(len(xs)), key=xs.__getitem__)
def flatten(xss: Iterable[Iterable[T]]) -> list[T]: return list(itertools.chain.from_iterable(xss))
def merge_dicts(ds: Iterable[dict]) -> dict:
  out: dict = {}
  for d in ds:
    for k, v in d.items():
      if k in out and out[k] != v: raise ValueError(f"cannot merge dicts: key {k} has values {out[k]} and {v}")
      out[k] = v
  return out
def make_tuple(x: int | Iterable[int], n: int) -> tuple[int, ...]: return (x,)*n if isinstance(x, int) else tuple(x)
def round_up(x: int, a: int) -> int: return (x + a - 1) // a * a

def _env_as(key: str, default: Any) -> Any:
  """The environment variable `key` converted to the type of `default`, or `default` when it is not set."""
  raw = os.environ.get(key)
  return default if raw is None else type(default)(raw)

@functools.lru_cache(maxsize=None)
def getenv(key: str, default: Any = 0) -> Any:
  """_env_as, read once per (key, default) for the process; tests that change the environment clear the cache."""
  return _env_as(key, default)
DEBUG = getenv("DEBUG", 0)

# *** flags readable from the environment and overridable in a `with Context(NAME=value):` block ***
_CONTEXT: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("tinysched_context", default={})

class ContextFlag:
  """A switch: the innermost `Context(key=...)` value if one is active, else the environment (read at each use, so a
  test may set it), else `default`. Truthiness and int() give its value."""
  def __init__(self, key: str, default: Any = 0): self.key, self.default = key, default
  @property
  def value(self) -> Any:
    ctx = _CONTEXT.get()
    return ctx[self.key] if self.key in ctx else _env_as(self.key, self.default)
  def __bool__(self) -> bool: return bool(self.value)
  def __int__(self) -> int: return int(self.value)
  def __repr__(self) -> str: return f"ContextFlag({self.key}={self.value!r})"

@contextlib.contextmanager
def Context(**flags: Any):
  """`with Context(FUSE_ARANGE=1): ...` overrides ContextFlags for the block (per thread / async task)."""
  token = _CONTEXT.set({**_CONTEXT.get(), **flags})
  try: yield
  finally: _CONTEXT.reset(token)

# scheduler switch (tinygrad 0.10.0, where it defaults off): recompute an arange (a sum of masked constants) inside
# the kernels that read it, where codegen folds it to a closed form. On by default here: without it an embedding
# lookup costs vocab x tokens x dim (GPT-2's 50257 x 768 over 64 tokens: 1,686 ms instead of ~1 ms on PoCL).
# FUSE_ARANGE=0 gives the seed's default schedule exactly.
FUSE_ARANGE = ContextFlag("FUSE_ARANGE", 1)

# scheduler switch (tinygrad 0.10.0, off by default there and here): a reduce read through a view only by another reduce
# of the same op (a convolution's weight gradient) is not stored; the two become one reduce in the reader's kernel.
FUSE_CONV_BW = ContextFlag("FUSE_CONV_BW", 0)

def cache_root() -> Path:
  """Where tinysched keeps its disk caches: $TINYSCHED_CACHE, else ~/.cache/tinysched (OpenCL binaries in `opencl/`,
  rendered programs in `programs/`). Read a cache folder through `trusted_cache_dir`, never directly."""
  return Path(os.environ.get("TINYSCHED_CACHE") or Path.home() / ".cache" / "tinysched")

# *** whose cache folders are read, and which entries were refused ***
# A cache entry is code that runs (an OpenCL binary) or decides what runs (a rendered program, a device's half support):
# read from a folder another user can write, it is their code. Checks are per use (a stat or two), so a folder fixed
# while a process runs is used again; warnings are once per folder per process.
_warned_folders: set[str] = set()   # membership only
_rejected: dict[str, int] = {}      # cache folder -> entries refused there by this process

def _warn_once(key: str, text: str) -> None:
  if key in _warned_folders: return
  _warned_folders.add(key)
  print(f"tinysched: {text}", file=sys.stderr)

def _make_private(folder: Path) -> None:
  """mkdir -p, each folder made here 0700 whatever the umask (mkdir's mode is masked by it: chmod after)."""
  missing: list[Path] = []
  p = folder
  while not p.exists():
    missing.append(p)
    if p.parent == p: break
    p = p.parent
  for m in reversed(missing):
    try: os.mkdir(m, 0o700)
    except FileExistsError: continue  # another process made it first: checked like any other folder
    os.chmod(m, 0o700)

def _untrusted(folder: Path) -> tuple[str, str] | None:
  """(the problem, what to do) when `folder` must not be read as a cache, made (0700) if missing; None when it is fine."""
  try:
    if not folder.exists(): _make_private(folder)
    st = os.stat(folder)
  except OSError as e: return f"it cannot be made or read ({e.strerror or e})", "set TINYSCHED_CACHE to a folder of your own"
  if not stat.S_ISDIR(st.st_mode): return "it is not a folder", "remove it, or set TINYSCHED_CACHE to a folder of your own"
  if st.st_uid != os.geteuid():
    return (f"it belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()}): its owner could put there what this process would run",
            f"set TINYSCHED_CACHE to a folder of your own (or remove {folder}: it is made again, 0700)")
  if st.st_mode & 0o022:
    who = "group and others" if st.st_mode & 0o022 == 0o022 else "group" if st.st_mode & 0o020 else "others"
    return (f"it is writable by {who} (mode {stat.S_IMODE(st.st_mode):o}): they could put there what this process would run",
            f"run `chmod 700 {folder}`, or set TINYSCHED_CACHE to a folder of your own")
  return None

def trusted_cache_dir(folder: Path) -> Path | None:
  """`folder` (a cache under cache_root(), made 0700 with the root where missing) when it and the root belong to this
  process's user and neither is writable by group or others; else None, with one warning per folder per process, and
  the caller works without that disk cache (same results, rebuilt each time)."""
  root = cache_root()
  chain = [root, folder] if folder != root and folder.is_relative_to(root) else [folder]
  for f in chain:
    if (bad := _untrusted(f)) is not None:
      why, fix = bad
      _warn_once(f"folder:{f}", f"not using the disk cache folder {f}: {why}. To fix: {fix}. Until then that cache is off (same "
                                "results, rebuilt each time).")
      return None
  return folder

def reject_cache_entry(path: Path, why: str) -> None:
  """Count an entry a cache refused to use (`cache_rejections`); the first one in a folder is reported on stderr."""
  folder = str(path.parent)
  _rejected[folder] = _rejected.get(folder, 0) + 1
  _warn_once(f"entry:{folder}", f"ignored a disk cache entry in {folder} ({path.name}: {why}); what it held is built again. An entry "
                                "is used only for the exact key it was stored under (later ones in this folder are counted, not shown: "
                                "tinysched.helpers.cache_rejections()).")

def cache_rejections() -> dict[str, int]:
  """{cache folder: entries this process refused there} (copied from another key, corrupted, unparsable)."""
  return dict(_rejected)

def disk_cache_enabled() -> bool:
  """The OpenCL binary cache (and what fills it ahead: replay's batch compiles) is on unless TINYSCHED_DISK_CACHE is 0."""
  return os.environ.get("TINYSCHED_DISK_CACHE", "1") not in ("0", "")

def cache_limit_bytes() -> int:
  """How much one disk cache folder may hold: $TINYSCHED_CACHE_MB megabytes (default 1024; 0 or inf: no limit). Entries
  are keyed by the code that made them, so a compiler engineer's every change adds a new set: unbounded, they fill a
  disk. Returns 0 for no limit, else at least one byte."""
  raw = os.environ.get("TINYSCHED_CACHE_MB", "1024")
  try: mb = float(raw)
  except ValueError: mb = math.nan
  if math.isnan(mb) or mb < 0:
    raise ValueError(f"TINYSCHED_CACHE_MB must be a number of megabytes (0 or inf: no limit), got {raw!r}")
  return 0 if mb == 0 or math.isinf(mb) else max(1, int(mb * 2**20))

def prune_cache(folder: Path, limit: int) -> int:
  """Delete the oldest entries (by modification time, then name) of a cache folder until it holds at most 3/4 of
  `limit` bytes, if it holds more than `limit`; returns how many were deleted. Another process deleting or writing at
  the same time costs only a rebuild: a missing entry is rendered or compiled again."""
  if limit <= 0: return 0
  entries: list[tuple[float, str, int]] = []
  try:
    with os.scandir(folder) as it:
      for e in it:
        if e.name.startswith(".tmp-") or not e.is_file(follow_symlinks=False): continue
        with contextlib.suppress(OSError):
          st = e.stat(follow_symlinks=False)
          entries.append((st.st_mtime, e.name, st.st_size))
  except OSError: return 0
  total = sum(size for _, _, size in entries)
  if total <= limit: return 0
  deleted = 0
  for _, name, size in sorted(entries):
    if total <= limit * 3 // 4: break
    with contextlib.suppress(OSError):
      os.unlink(folder / name)
      deleted += 1
    total -= size
  return deleted

cache_limit_bytes()  # a bad TINYSCHED_CACHE_MB fails at import, not at a first cache write in the middle of a run
_written: dict[str, int] = {}  # cache folder -> bytes this process wrote there since it last pruned it (lookup only)

def write_cache_entry(path: Path, data: bytes) -> bool:
  """write_atomic for a disk cache entry. A folder is pruned to the limit (cache_limit_bytes) at a process's first write
  into it, and again whenever the process has written a quarter of the limit there since (a long replay or training
  run): a scan of the folder now and then, on the path that is compiling or rendering anyway. A limit changed to a bad
  value after import keeps the folder unpruned rather than failing a compile."""
  key = str(path.parent)
  try: limit = cache_limit_bytes()
  except ValueError: limit = 0
  if (since := _written.get(key)) is None or (limit and since >= limit // 4):
    prune_cache(path.parent, limit)
    since = 0
  _written[key] = since + len(data)
  return write_atomic(path, data)

def write_atomic(path: Path, data: bytes) -> bool:
  """Write a disk cache entry whole: a concurrent reader sees the old file or the new one, never a part. False where the
  disk refuses (read-only, full): a cache only costs a rebuild then; no temporary file is left behind. Folders made
  here are 0700 and the entry 0600, whatever the umask."""
  tmp = None
  try:
    _make_private(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")  # 0600 whatever the umask (only this user reads an entry)
    with os.fdopen(fd, "wb") as f: f.write(data)
    os.replace(tmp, path)
    return True
  except OSError:
    if tmp is not None:
      with contextlib.suppress(OSError): os.unlink(tmp)
    return False

def cdiv(a: int, b: int) -> int:
  """C-style integer division (truncates toward zero), the semantics of Ops.IDIV."""
  q = abs(a) // abs(b)
  return q if (a < 0) == (b < 0) else -q
def cmod(a: int, b: int) -> int:
  """C-style remainder (sign of the dividend), the semantics of Ops.MOD."""
  return a - b * cdiv(a, b)

# *** GlobalCounters: what has run since the last reset ***
class _Deferred:
  """A sum whose terms may be callables, called only when the sum is read: kernel times a device reports later (OpenCL
  profiling events: reading one waits for its kernel), FLOPs at a launch's Variable values. Past `MAX` pending terms
  the older ones are summed, all but the newest `keep` (those may still be running): bounded memory."""
  MAX = 4096
  __slots__ = ("total", "pending", "keep")
  pending: list[Callable[[], Any]]
  def __init__(self, total: Any = 0, keep: int = 0): self.total, self.pending, self.keep = total, [], keep
  def add(self, x: Any) -> None:
    if not callable(x):
      self.total += x
      return
    self.pending.append(x)
    if len(self.pending) > self.MAX: self.drain(self.keep)
  def extend(self, xs: list[Callable[[], Any]]) -> None:
    """add() of each callable in xs, in one step."""
    self.pending.extend(xs)
    if len(self.pending) > self.MAX: self.drain(self.keep)
  def drain(self, keep: int = 0) -> None:
    """Call every pending term but the newest `keep`."""
    cut = max(len(self.pending) - keep, 0)
    now, self.pending = self.pending[:cut], self.pending[cut:]
    self.total += sum(f() for f in now)
  def read(self) -> Any:
    self.drain()
    return self.total
  def set(self, v: Any) -> None:
    """The sum becomes `v`; pending terms are forgotten, not called."""
    self.pending.clear()
    self.total = v

def _deferred_property(attr: str) -> property:
  return property(lambda cls: getattr(cls, attr).read(), lambda cls, v: getattr(cls, attr).set(v))

class _Counters(type):
  """GlobalCounters' metaclass: `time_sum_s`, `global_ops` and `global_mem` are class-level properties over deferred
  sums, so the kernel times a device reports later are waited for, and symbolic FLOPs and bytes computed, only when the
  value is read."""
  time_sum_s = _deferred_property("_time")
  global_ops = _deferred_property("_ops")
  global_mem = _deferred_property("_mem")

class GlobalCounters(metaclass=_Counters):
  """tinygrad's counters of the work run since the last `GlobalCounters.reset()` (class attributes, process-wide):

  - `kernel_count`: items that ran work: every kernel and every COPY, from `run_schedule` (Tensor.realize) and from
    TinyJit replays alike. EMPTY and BUFFER_VIEW items run nothing and do not count, so for a schedule without them
    the count after realizing it is `len(schedule)`.
  - `global_ops`: FLOPs and `global_mem`: bytes moved, summed over the kernels that ran, as tinysched/cost.py defines
    them (from each kernel's AST and the Buffers it binds; symbolic dims at this run's Variable values, computed when
    the value is read). A COPY adds its bytes (the destination's size) to `global_mem` and no FLOPs.
  - `time_sum_s`: seconds spent in kernels as the device reports them: OPENCL the profiling event of each launch
    (read when the value is read: reading it waits for the kernels launched so far), NUMPY the interpreter's wall
    time per kernel (it runs synchronously). Copies add no time.
  """
  kernel_count: int = 0
  _ops = _Deferred(0)                                 # FLOPs: a callable per launch at Variable values
  _mem = _Deferred(0)                                 # bytes: a callable per TinyJit call whose launches have Variables
  _time = _Deferred(0.0, keep=_Deferred.MAX // 2)     # seconds: a callable per launch whose time is reported later

  @classmethod
  def reset(cls) -> None:
    """Every counter back to 0 (launches not yet timed are forgotten, not waited for)."""
    cls.kernel_count, cls.global_ops, cls.global_mem = 0, 0, 0
    cls.time_sum_s = 0.0

  @classmethod
  def count(cls, ops: int | Callable[[], int], mem: int, t: Any = None) -> None:
    """Add one item that ran: its FLOPs (a number, or a callable computing it when global_ops is read), its bytes, its
    time (None: not reported; a float: seconds; a callable: a device's later report, called when time_sum_s is read)."""
    cls.kernel_count += 1
    cls._ops.add(ops)
    cls._mem.add(mem)
    if t is not None: cls._time.add(t)

  @classmethod
  def count_many(cls, n: int, ops: int | Callable[[], int], mem: int | Callable[[], int], times: list[Callable[[], float]]) -> None:
    """Add `n` kernels at once (a TinyJit call's launches): their summed FLOPs and bytes (each a number, or a callable
    computing it when read) and the device's later report of each one's time."""
    cls.kernel_count += n
    cls._ops.add(ops)
    cls._mem.add(mem)
    cls._time.extend(times)
