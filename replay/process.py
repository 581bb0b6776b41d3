"""Child processes that never outlive the command that started them, and runs that a signal stops at once."""
from __future__ import annotations
import contextlib, ctypes, os, signal, subprocess, sys, threading, time
from typing import Any, Callable, Iterator
# Loaded before any thread of ours can fork: each registers a lock of its own as a pair of fork hooks (acquire before,
# release after, in the parent). A module first imported by one thread while another forks through `spawn` (its
# preexec_fn runs the hooks) gets its release hook run without the acquire: the lock is taken from whoever holds it,
# and ThreadPoolExecutor.submit then fails with "release unlocked lock" (tests/replay/test_fork_hooks.py).
import concurrent.futures.thread, logging  # noqa: E401,F401

def parent_death_signal() -> Callable[[], None] | None:
  """A preexec function making the child receive SIGTERM when this process dies (Linux prctl PR_SET_PDEATHSIG), so
  a killed `replay accept`/`replay suite` leaves no model process behind; None where prctl is not available."""
  if not sys.platform.startswith("linux"): return None
  try: prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the child should only make the call
  except (OSError, AttributeError): return None
  parent = os.getpid()
  def arm() -> None:
    prctl(1, int(signal.SIGTERM), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent: os._exit(143)  # the parent died before the call took effect
  return arm

# *** stopping a run: SIGINT/SIGTERM end every child at once and leave a partial result ***

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
KILL_AFTER_S = 0.5           # a child that has not exited this long after SIGTERM gets SIGKILL

class Stopped(KeyboardInterrupt):
  """The user stopped the run (Ctrl-C, SIGTERM). A KeyboardInterrupt, so code that cleans up after Ctrl-C handles both;
  `exit_code` is the shell's convention for death by that signal (130 SIGINT, 143 SIGTERM)."""
  def __init__(self, signum: int):
    super().__init__(signal.Signals(signum).name)
    self.signum = signum
  @property
  def name(self) -> str: return signal.Signals(self.signum).name
  @property
  def exit_code(self) -> int: return 128 + self.signum

class _Run:
  """What a stoppable run shares between its threads: the signal that stopped it (None while running), the child
  processes to end then, and whether the main thread may be interrupted by an exception right now."""
  def __init__(self) -> None:
    self.lock = threading.Lock()
    self.signum: int | None = None
    self.children: dict[int, subprocess.Popen] = {}   # pid -> process (a child runs in its own session: pid = its group)
    self.raising = True
    self.owner = os.getpid()
    self.stopping = threading.Event()  # set by the signal handler: the watcher thread (stoppable) then finishes the helpers

_RUN = _Run()

def stopped() -> Stopped | None:
  """The stop of the current run, or None while it goes on: loops that hand out work ask before each step."""
  return Stopped(_RUN.signum) if _RUN.signum is not None else None

def spawn(cmd: list[str], **kw: Any) -> subprocess.Popen:
  """subprocess.Popen for a helper process of a run (a worker, a compile, a calibration): in its own session, so a
  terminal's Ctrl-C reaches only this process, which then ends the helpers itself (and can tell its own stop from a
  crash); dead with this process (parent-death signal); ended at once by `stop_children`. Refused once the run is
  stopped, so no thread starts a new helper during the stop."""
  with _RUN.lock:
    if (s := stopped()) is not None: raise s
    p = subprocess.Popen(cmd, start_new_session=True, preexec_fn=parent_death_signal(), **kw)
    _RUN.children[p.pid] = p
  return p

def release(p: subprocess.Popen) -> None:
  """Forget a helper that was waited for."""
  with _RUN.lock: _RUN.children.pop(p.pid, None)

def run_helper(cmd: list[str], timeout: float, **kw: Any) -> subprocess.CompletedProcess:
  """subprocess.run through `spawn`: output captured as text; a timeout kills the helper (TimeoutExpired as usual)."""
  p = spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
  try:
    try: out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
      _end([p], 0.0)
      raise
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)
  finally: release(p)

def _end(procs: list[subprocess.Popen], grace: float) -> None:
  """SIGTERM to each helper's session, then SIGKILL to what is left after `grace` seconds; reaped."""
  for sig in ((signal.SIGTERM, signal.SIGKILL) if grace > 0 else (signal.SIGKILL,)):
    for p in procs:
      if p.poll() is None:
        try: os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError): pass
    if sig == signal.SIGTERM:
      deadline = time.monotonic() + grace
      for p in procs:
        try: p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired: pass
  for p in procs:
    try: p.wait(timeout=1.0)
    except subprocess.TimeoutExpired: pass

def stop_children(grace: float = KILL_AFTER_S) -> None:
  """End every helper the run started (see spawn)."""
  with _RUN.lock: procs = list(_RUN.children.values())
  _end(procs, grace)

def _signal_helpers(sig: int) -> None:
  """Send `sig` to every helper's session. Safe inside a signal handler: no lock (the handler runs between two bytecodes
  of the main thread, which may hold any lock), only a snapshot of the table and kill calls."""
  for pid in list(_RUN.children):
    try: os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError): pass

def _on_signal(signum: int, frame: Any) -> None:
  # (no thread started, no lock taken here: see _signal_helpers; the watcher thread of `stoppable` does the rest)
  if os.getpid() != _RUN.owner: raise KeyboardInterrupt  # a forked child that kept the handler: behave as by default
  if _RUN.signum is not None:  # a second signal: the user insists; no cleanup beyond killing the helpers
    _signal_helpers(signal.SIGKILL)
    os._exit(128 + signum)
  _RUN.signum = signum
  _signal_helpers(signal.SIGTERM)
  _RUN.stopping.set()
  if _RUN.raising: raise Stopped(signum)

def _watch() -> None:
  """Once the run is stopped: SIGKILL to the helpers SIGTERM did not end (and to any a thread started meanwhile), reaped."""
  _RUN.stopping.wait()
  if _RUN.signum is not None: stop_children()

@contextlib.contextmanager
def stoppable() -> Iterator[None]:
  """A run that SIGINT and SIGTERM stop within a second or two: the first signal ends every helper (spawn) and raises
  Stopped in the main thread (inside `no_raise`, only marks the run stopped: the threads there see their helpers gone
  and return what they finished); a second signal kills the helpers and exits at once. A SIGINT that was ignored when
  the run started stays ignored (nohup, a parent that handles Ctrl-C itself). Outside the main thread: nothing to do
  (handlers can only be set there), the caller's handlers stay."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  old = {s: signal.getsignal(s) for s in STOP_SIGNALS}
  _RUN.signum, _RUN.raising, _RUN.owner = None, True, os.getpid()
  _RUN.stopping.clear()
  watcher = threading.Thread(target=_watch, name="replay-stop", daemon=True)
  watcher.start()
  for s in STOP_SIGNALS:
    if old[s] != signal.SIG_IGN: signal.signal(s, _on_signal)
  try: yield
  finally:
    for s, h in old.items(): signal.signal(s, h if h is not None else signal.SIG_DFL)
    _RUN.stopping.set()
    watcher.join()
    stop_children()
    _RUN.signum = None

@contextlib.contextmanager
def no_raise() -> Iterator[None]:
  """Within the block a stop only marks the run stopped (see stoppable): for code whose threads must return their
  partial results rather than be abandoned by an exception in the main thread. The caller asks `stopped()` after it."""
  was, _RUN.raising = _RUN.raising, False
  try: yield
  finally: _RUN.raising = was

def ignore_in_forked_worker() -> None:
  """A multiprocessing worker's initializer: the parent ends its workers on a stop, a terminal's Ctrl-C must not make
  each of them print a traceback first."""
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  signal.signal(signal.SIGTERM, signal.SIG_DFL)

def forked(fn: Callable[[], Any], quiet: bool = False) -> Any:
  """fn() in a forked child, its result sent back as JSON; None when it raised or died. For a replay whose leftovers
  must not outlive it: a rewrite with rules refused or limited leaves derived results in memo tables, and a device a
  child opens (OpenCL) is never opened in this process (a child forked after that would hang in the driver).
  `quiet`: the child's stderr goes nowhere (a compiler's complaints about a candidate the answer already calls failed)."""
  import json  # (only this helper speaks JSON)
  r, w = os.pipe()
  pid = os.fork()
  if pid == 0:  # pragma: no cover (the child)
    os.close(r)
    if quiet: os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    try: msg = json.dumps(fn())
    except BaseException: msg = "null"  # noqa: BLE001 (the caller reads a failed question as no answer)
    with os.fdopen(w, "w") as f: f.write(msg)
    os._exit(0)
  os.close(w)
  with os.fdopen(r) as f: msg = f.read()
  os.waitpid(pid, 0)
  try: return json.loads(msg) if msg else None
  except ValueError: return None
