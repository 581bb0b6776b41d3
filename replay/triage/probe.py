"""Probes: run one version of the code (a checkout) on capture inputs, with an optional rewrite limit, in a process of
its own. `replay blame` and `replay minimize` ask two probes (old code and new code) the same questions.

The server is a standalone script (PROBE_SCRIPT) run with the checkout first on the import path, so it works for
checkouts older than this module: it uses only a level's `decode_input`/`run` (`replay.runner` in checkouts before the
level classes) and, for the limit,
`tinysched.rewrite.rewrite_limit`, or the same limit put around `PatternMatcher.rewrite_named` when the checkout
predates it. Each request runs in a forked child of the warm server: whatever a limited rewrite leaves in
memo tables (the view algebra's) dies with the child, and a hang or crash costs only that request.
"""
from __future__ import annotations
import hashlib, json, subprocess, sys
from pathlib import Path
from typing import Any
from replay.baseline.checkouts import subprocess_env

PROBE_SCRIPT = r'''
import hashlib, json, os, sys, traceback
from tinysched import rewrite as RW
try:
  from replay import levels as _levels
  def decode_input(level, data): return _levels.get(level).decode_input(data)
  def run_input(level, inputs): return _levels.get(level).run(inputs)
except ImportError:  # a checkout from before the level classes (replay/levels/)
  from replay.runner import decode_input, run_input

if not hasattr(RW, "rewrite_limit"):  # an older checkout: the same limit around rewrite_named
  import contextlib
  import hashlib as _hl
  class _Limit:
    def __init__(self, n): self.n, self.spent, self.last, self._h = n, 0, None, _hl.sha256()
    digest = property(lambda self: self._h.hexdigest())
  _cur = [None]
  _orig = RW.PatternMatcher.rewrite_named
  def _limited(self, u, ctx=None):
    r = _orig(self, u, ctx)
    L = _cur[0]
    if r is None or L is None: return r
    if L.spent >= L.n: return None
    L.spent += 1; L.last = (r[1], u, r[0]); L._h.update(f"{r[1]}|{u.key}|{r[0].key if hasattr(r[0], 'key') else repr(r[0])};".encode())
    return r
  RW.PatternMatcher.rewrite_named = _limited
  @contextlib.contextmanager
  def _rewrite_limit(n):
    prev, _cur[0] = _cur[0], _Limit(n)
    try: yield _cur[0]
    finally: _cur[0] = prev
  RW.rewrite_limit = _rewrite_limit

def pass_digests(level, inputs):
  # the code generator's lowering, pass by pass: a digest of what each named pass left emitted (the content keys of the
  # nodes placed so far) and how many rule applications the whole replay had made by then, for the last lowering the
  # replay ran (the heuristic may lower a kernel several times)
  from tinysched.codegen import lowerer as LW
  digests = []
  orig = LW.run_passes
  with RW.rewrite_limit(1 << 60) as L:
    def traced(k, target, passes=LW.LOWERING_PASSES, after=None, rule_trace=None):
      def hook(name, lw):
        if after is not None: after(name, lw)
        if passes and name == passes[0].name: digests.clear()
        placed = getattr(getattr(lw, "em", None), "placed", None) or {}
        h = hashlib.sha256("|".join(sorted(u.key.hex() if isinstance(u.key, bytes) else str(u.key) for u in placed)).encode()).hexdigest()
        digests.append([name, h, len(placed), L.spent])
      return orig(k, target, passes, hook, rule_trace)
    LW.run_passes = traced
    try: run_input(level, inputs)
    finally: LW.run_passes = orig
  return digests

def answer(req):
  data = req["input"].encode()
  try:
    inputs = decode_input(req["level"], data)
    if req.get("passes"):
      try: return {"passes": pass_digests(req["level"], inputs)}
      except Exception as e: return {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    if req.get("limit") is None:
      if req.get("extra"):  # what a row records beside the output for its execution job: checkouts with level classes
        full = {}
        lv = _levels.get(req["level"])
        _, out = lv.run(inputs, full)
        if hasattr(lv, "extra_of"): extra = lv.extra_of(full)
        else:  # (level classes from before extra_of: a program's launch sizes are what its job needs)
          from replay.levels.program import launch_json
          extra = {"launch": launch_json(full["program"])} if "program" in full else {}
        return {"key": hashlib.sha256(out).hexdigest(), "output": out.decode(), "extra": extra}
      _, out = run_input(req["level"], inputs)
      return {"key": hashlib.sha256(out).hexdigest(), "output": out.decode() if req.get("output") else None}
    L = None
    try:
      with RW.rewrite_limit(int(req["limit"])) as L:
        _, out = run_input(req["level"], inputs)
      res = {"key": hashlib.sha256(out).hexdigest(), "output": out.decode() if req.get("output") else None}
    except Exception as e:  # a half-rewritten graph may well fail a later pass: the applications so far still count
      res = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    last = None
    if L is not None and L.last is not None:
      name, u, ret = L.last
      show = lambda x: x.pretty()[:600] if hasattr(x, "pretty") else repr(x)[:600]
      last = [name, show(u), show(ret)]
    return {**res, "spent": L.spent if L else 0, "trace": L.digest if L else None, "last": last}
  except Exception as e:
    return {"error": f"{type(e).__name__}: {str(e)[:300]}"}

for line in sys.stdin:
  req = json.loads(line)
  r, w = os.pipe()
  pid = os.fork()
  if pid == 0:
    os.close(r)
    try: msg = json.dumps(answer(req))
    except BaseException as e: msg = json.dumps({"error": f"{type(e).__name__}: {e}"})
    with os.fdopen(w, "w") as f: f.write(msg)
    os._exit(0)
  os.close(w)
  with os.fdopen(r) as f: msg = f.read()
  _, status = os.waitpid(pid, 0)
  if not msg: msg = json.dumps({"error": f"the probe process died (status {status})"})
  sys.stdout.write(msg + "\n"); sys.stdout.flush()
'''

class ProbeError(RuntimeError): pass

class Probe:
  """A warm server running `tree`'s code. ask() -> {"key": sha256 of the output bytes, ...} or {"error": ...}."""
  def __init__(self, tree: Path, name: str) -> None:
    self.tree, self.name, self.asked = Path(tree), name, 0
    self.proc = subprocess.Popen([sys.executable, "-c", PROBE_SCRIPT], cwd=self.tree, env=subprocess_env(self.tree), stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
  def ask(self, level: str, data: bytes, limit: int | None = None, output: bool = False, passes: bool = False,
          extra: bool = False) -> dict[str, Any]:
    """`passes`: the lowering's digest after each named pass instead ({"passes": [[name, digest, nodes], ...]});
    `extra`: the output and what a row records beside it for its execution job ({"extra": launch sizes, buffer maps};
    an error from a checkout before the level classes)."""
    assert self.proc.stdin and self.proc.stdout
    self.asked += 1
    try:
      self.proc.stdin.write(json.dumps({"level": level, "input": data.decode(), "limit": limit, "output": output, "passes": passes,
                                        "extra": extra}) + "\n")
      self.proc.stdin.flush()
      line = self.proc.stdout.readline()
    except (BrokenPipeError, OSError): line = ""
    if not line:
      err = self.proc.stderr.read() if self.proc.stderr else ""
      raise ProbeError(f"the {self.name} probe ({self.tree}) stopped: {(err.strip().splitlines() or ['no output'])[-1]}")
    return json.loads(line)
  def close(self) -> None:
    if self.proc.poll() is None:
      try: self.proc.stdin.close()  # type: ignore[union-attr]
      except OSError: pass
      try: self.proc.wait(timeout=10)
      except subprocess.TimeoutExpired: self.proc.kill(); self.proc.wait()
  def __enter__(self) -> Probe: return self
  def __exit__(self, *exc) -> None: self.close()

def outcome(a: dict) -> str:
  """What two probe answers are compared by: the output's key, or the error."""
  return a["key"] if "key" in a else "error: " + a.get("error", "")

def applications(a: dict) -> str | None:
  """The digest of the rule applications a limited probe admitted (rule names and content keys, in order)."""
  return a.get("trace")

def sha(data: bytes) -> str: return hashlib.sha256(data).hexdigest()
