"""Proof results kept between runs, keyed by what they depend on: the code they reason about (the source of the
compiler modules a proof reads and of replay/prove itself) and, for a capture, its stored input, output and row facts.
A warm run of the whole baseline reads instead of proving.

An entry is a JSON file named by its key that also holds the key: a file that is not valid JSON, or whose key is not
the one asked for (copied or renamed from elsewhere), is a miss, never a result. The folder is made 0700; one owned by
another user or writable by others is not used (the proofs then run uncached, and `status()` says why).

The key sees the code on disk and the code as loaded: every function reachable from tinysched's modules (module
attributes, methods of their classes, the rule functions inside their PatternMatchers) is hashed by its bytecode and
constants, so a function patched at run time (a test's plant, a user's monkeypatch) gives another key, not a stale
"proven".
"""
from __future__ import annotations
import hashlib, json, os, stat, sys, tempfile, types
from pathlib import Path
from typing import Any
import tinysched
from tinysched.rewrite import PatternMatcher
from replay.prove import smt

VERSION = 1  # bump when the stored result's form changes
_ROOT = Path(tinysched.__file__).resolve().parent
_PROVE = Path(__file__).resolve().parent

def code_fingerprint() -> str:
  """sha256 over the source of every tinysched module and of replay/prove (path and bytes, sorted), plus the Python and
  z3 versions: any edit to the compiler or to the proofs gives new keys."""
  h = hashlib.sha256(f"v{VERSION} py{sys.version_info[:3]} z3 {smt.z3.get_version_string() if smt.z3 else None}".encode())
  for base in (_ROOT, _PROVE):
    for p in sorted(base.rglob("*.py")):
      h.update(str(p.relative_to(base.parent)).encode() + b"\0" + p.read_bytes() + b"\0")
  return h.hexdigest()

def _code_bytes(c: types.CodeType) -> bytes:
  """A code object by what it does: its bytecode, names and constants, nested code objects included (their repr would
  hold a memory address)."""
  out = [c.co_code, repr(c.co_names).encode(), c.co_qualname.encode()]
  for k in c.co_consts: out.append(_code_bytes(k) if isinstance(k, types.CodeType) else _const_bytes(k))
  return b"\0".join(out)

def _const_bytes(k: Any) -> bytes:
  # a frozenset constant (`x in {"a", "b"}`) prints in hash-seed order: sorted by repr, so every process agrees
  if isinstance(k, frozenset): return b"frozenset(" + b",".join(sorted(_const_bytes(x) for x in k)) + b")"
  if isinstance(k, tuple): return b"(" + b",".join(_const_bytes(x) for x in k) + b")"
  return repr(k).encode()

def _fn_bytes(f: Any) -> bytes | None:
  f = getattr(f, "__func__", f)  # a bound or class method: its function
  code = getattr(f, "__code__", None)
  return _code_bytes(code) if isinstance(code, types.CodeType) else None

def runtime_fingerprint() -> str:
  """sha256 over the functions tinysched has loaded as they are now (patched ones included), in a fixed order."""
  h = hashlib.sha256()
  for name in sorted(m for m in sys.modules if m == "tinysched" or m.startswith("tinysched.")):
    mod = sys.modules[name]
    for attr, obj in sorted(vars(mod).items()):
      items: list[tuple[str, Any]] = [(attr, obj)]
      if isinstance(obj, type) and obj.__module__ == name: items += sorted((f"{attr}.{k}", v) for k, v in vars(obj).items())
      if isinstance(obj, PatternMatcher): items += [(f"{attr}[{i}]", r[1]) for i, r in enumerate(obj.rules)]
      for label, o in items:
        if (b := _fn_bytes(o)) is not None: h.update(f"{name}.{label}".encode() + b"\0" + b)
  return h.hexdigest()

def default_dir() -> Path:
  return Path(os.environ.get("REPLAY_PROOF_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tinysched" / "proofs")

class ProofCache:
  """get(kind, parts) / put(kind, parts, result) for JSON-able results; `parts` (strings) make the key with the code
  fingerprint. `hits` and `misses` are counted for the report."""
  def __init__(self, folder: Path | None = None):
    self.folder = Path(folder) if folder is not None else default_dir()
    self.code = code_fingerprint() + runtime_fingerprint()
    self.hits = self.misses = 0
    self.unusable: str | None = self._check()

  def _check(self) -> str | None:
    try:
      self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
      st = self.folder.stat()
    except OSError as e: return f"cannot make {self.folder}: {e.strerror or e}"
    if st.st_uid != os.getuid(): return f"{self.folder} belongs to another user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH): return f"{self.folder} is writable by others"
    return None

  def key(self, kind: str, parts: list[str]) -> str:
    return hashlib.sha256("\0".join([self.code, kind, *parts]).encode()).hexdigest()

  def get(self, kind: str, parts: list[str]) -> Any:
    if self.unusable: return None
    k = self.key(kind, parts)
    try: doc = json.loads((self.folder / k[:2] / f"{k}.json").read_text())
    except (OSError, ValueError):
      self.misses += 1
      return None
    if not isinstance(doc, dict) or doc.get("key") != k:
      self.misses += 1
      return None
    self.hits += 1
    return doc.get("result")

  def put(self, kind: str, parts: list[str], result: Any) -> None:
    if self.unusable: return
    k = self.key(kind, parts)
    d = self.folder / k[:2]
    try:
      d.mkdir(exist_ok=True, mode=0o700)
      fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
      with os.fdopen(fd, "w") as f: json.dump({"key": k, "result": result}, f, sort_keys=True)
      os.replace(tmp, d / f"{k}.json")
    except OSError: pass  # a full or read-only disk costs the next run its speed, not this run its result

  def status(self) -> str:
    if self.unusable: return f"proof cache not used: {self.unusable}"
    return f"proof cache {self.folder}: {self.hits} hit(s), {self.misses} miss(es)"
