"""A disk cache of code generation, opt-in: `cached_program(ast, opts, target)` is `to_program(ast, opts, target)`,
without lowering the kernel again in a later process (the OpenCL runtime's program lookup goes through it).

Why: lowering and rendering one kernel takes milliseconds of Python, and a fresh process pays it for every distinct
kernel although the code that renders it has not changed. replay's execution-check workers turn it on (each is a fresh
process that lowers every captured kernel again): about 2.5 s of the 15 s main job.

Correctness rests on the key: sha256 over the *code fingerprint*, the AST's content key, the opts and the target's
stable text. The fingerprint covers the code two ways:
- the files: every .py file of the tinysched package (relative path and bytes), the Python and numpy versions;
- the code as loaded: the bytecode of every function and method that the tinysched modules hold at the first use in the
  process, so a module attribute replaced before that (a plant installed at start-up, as replay's tests do) is part of
  the key. Checked again on every use: a function, class, matcher or container replaced since (a monkeypatch after the
  first use, a test's plant) makes the digest be taken again (`code_fingerprint`). Not seen: a function added to or
  swapped inside a module-level container in place, a function's __code__ replaced, a module loaded after the digest,
  the names of this module and of the capture slot (`_NOT_CHECKED`).
Bypassed (neither read nor written) while the rules are watched or limited (`watched`). Not stored: programs whose
launch sizes are symbolic (their Variables would have to be rebuilt). A hit is reported to a capture as to_program
reports a rendering (`report_program`), so capturing never changes what the cache does.
`TINYSCHED_PROGRAM_CACHE=1` turns it on; entries are JSON under `$TINYSCHED_CACHE/programs/`, a folder used only when it
is this user's alone (`tinysched.helpers.trusted_cache_dir`).

An entry is named by the hash of its key, and records the whole key (the fingerprint, the AST's key, the opts, the
target) and a sha256 of key and program: it is used only for exactly that key. A file copied over another entry (two
kernels swapped: the execution check would call the right code `wrong`), an edited, unparsable or malformed one is
refused (counted: `tinysched.helpers.cache_rejections`), and the program rendered and written again.
"""
from __future__ import annotations
import functools, hashlib, itertools, json, operator, os, sys, types
from pathlib import Path
from typing import Any, Sequence
import numpy as np
from tinysched.helpers import cache_root, write_cache_entry, trusted_cache_dir, reject_cache_entry
from tinysched.dtype import dtypes
from tinysched.uop import UOp
from tinysched import rewrite as RW
from tinysched.rewrite import PatternMatcher
from tinysched.codegen.kernel import Opt
from tinysched.cost import ProgramCost
from tinysched.codegen.target import Target, device_class
from tinysched.codegen.program import Program, report_program, to_program

FORMAT = 3  # bump when the entry layout changes (an entry of another format is a plain miss)

def fingerprint_of(root: Path) -> str:
  """sha256 of a package's source (relative path and bytes of every .py file under `root`, in path order), the Python
  version and numpy's version."""
  h = hashlib.sha256(f"{FORMAT}\0{sys.version_info[:3]}\0{np.__version__}\0".encode())
  for p in sorted(root.rglob("*.py")):
    h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
  return h.hexdigest()

def _const_text(c: Any, h) -> None:
  if isinstance(c, types.CodeType): _code(c, h)
  elif isinstance(c, frozenset): h.update(repr(sorted(map(repr, c))).encode())  # a set's order follows the hash seed
  else: h.update(repr(c).encode())

def _code(co: types.CodeType, h) -> None:
  h.update(co.co_code + repr(co.co_names).encode())
  for c in co.co_consts: _const_text(c, h)

def _callable(name: str, v: Any, h, depth: int = 0) -> None:
  if depth > 3: return
  while hasattr(v, "__wrapped__"): v = v.__wrapped__  # lru_cache and the like: the function they wrap
  if isinstance(v, (staticmethod, classmethod)): v = v.__func__
  if isinstance(v, property): v = v.fget
  if isinstance(v, functools.partial): v = v.func
  if isinstance(v, PatternMatcher):  # a matcher held in a module: its rules' functions, in order (a plant may swap one)
    for i, rule in enumerate(v.rules): _callable(f"{name}.rules[{i}]", rule[1], h, depth + 1)
  elif isinstance(v, tuple):  # a named tuple that holds a function (lowerer.Pass), a tuple of them
    for i, e in enumerate(v): _value(f"{name}[{i}]", e, h, depth + 1)
  elif isinstance(v, types.FunctionType):
    h.update(name.encode() + b"\0")
    _code(v.__code__, h)
    # what a function made at run time carries besides its code: defaults and closed-over functions or constants
    for i, d in enumerate(v.__defaults__ or ()): _value(f"{name}.default{i}", d, h, depth + 1)
    for i, c in enumerate(v.__closure__ or ()):
      try: x = c.cell_contents
      except ValueError: continue  # an empty cell
      _value(f"{name}.cell{i}", x, h, depth + 1)

def _value(name: str, x: Any, h, depth: int) -> None:
  """A default or closed-over value: functions and matchers by their code, plain constants by repr, tuples element by
  element; other objects are left out (their repr can hold a memory address, which differs in every process)."""
  if isinstance(x, (bool, int, float, str, bytes, type(None))): h.update(repr(x).encode())
  elif isinstance(x, tuple):
    for i, e in enumerate(x): _value(f"{name}[{i}]", e, h, depth)
  else: _callable(name, x, h, depth)

def live_digest() -> str:
  """sha256 of the bytecode of every function the loaded tinysched modules hold (module functions, methods of the
  classes they define, functions inside module-level dicts, lists and tuples), by module and name."""
  h = hashlib.sha256()
  for mname in sorted(m for m in sys.modules if m == "tinysched" or m.startswith("tinysched.")):
    mod = sys.modules[mname]
    for name, v in sorted(vars(mod).items(), key=lambda kv: kv[0]):
      key = f"{mname}.{name}"
      if isinstance(v, type) and v.__module__ == mname:
        for an, av in sorted(vars(v).items(), key=lambda kv: kv[0]): _callable(f"{key}.{an}", av, h)
      elif isinstance(v, dict):
        for i, x in enumerate(v.values()): _callable(f"{key}[{i}]", x, h)
      elif isinstance(v, (list, tuple)):
        for i, x in enumerate(v): _callable(f"{key}[{i}]", x, h)
      else: _callable(key, v, h)
  return h.hexdigest()

@functools.lru_cache(maxsize=1)
def _files_fingerprint() -> str:
  """fingerprint_of the tinysched package, read once per process (a process runs the code it loaded, not the files)."""
  return fingerprint_of(Path(__file__).resolve().parent.parent)

# what code_fingerprint's check leaves out of live_digest's namespaces, and why: neither renders anything
_NOT_CHECKED = {"tinysched.capture_hook": "the capture slot: replay swaps its hook around every replay (capture_hook.paused)",
                __name__: "this cache: its tests replace the names it calls (to_program, report_program) to watch it hit or miss; the "
                          "code behind them (codegen.program, opencl, lowerer...) is checked"}

def _digest_covers() -> list:
  """The namespaces live_digest reads (every tinysched module loaded and the classes it defines) but _NOT_CHECKED."""
  out: list = []
  for mname in sorted(m for m in list(sys.modules) if m == "tinysched" or m.startswith("tinysched.")):
    if mname in _NOT_CHECKED or (mod := sys.modules.get(mname)) is None: continue
    out.append(ns := vars(mod))
    out += [vars(v) for v in list(ns.values()) if isinstance(v, type) and v.__module__ == mname]
  return out

def _is_code(x: Any) -> bool: return callable(x) or isinstance(x, (PatternMatcher, staticmethod, classmethod, property, tuple, list, dict))

# code_fingerprint's last take, updated in place: [the namespaces compared as one list, their values then (in one list,
# and per namespace), the namespaces seen to hold state ([namespace, its values]: compared one by one), the fingerprint]
_TAKEN: list = []

def code_fingerprint() -> str:
  """The files' fingerprint and the loaded code's digest: taken at the first use, and again whenever a value that is
  code to live_digest (a function, class, matcher, container) has been replaced in the namespaces it covered, or
  replaced one: a patch after the first use changes the key (a digest takes ~40 ms, so only then). Each call compares
  those namespaces' values (~3,500) with the last ones in C (==: values that are equal give the same digest). Values
  that are no code may change without a new digest; a namespace seen to (GlobalCounters' counts, after each realize)
  is compared on its own from then on."""
  if not _TAKEN: return _take()
  spaces, values, per_space, moving, fp = _TAKEN
  now: list = []
  for ns in spaces: now.extend(ns.values())
  try: same = now == values
  except Exception: same = False  # (a replaced value whose == cannot answer, a numpy array)
  if not same:
    if not _only_state(values, now): return _take()
    steady = [(ns, old) for ns, old in zip(spaces, per_space) if _same_values(old, ns.values())]
    moving += [[ns, tuple(ns.values())] for ns, old in zip(spaces, per_space) if not _same_values(old, ns.values())]
    _TAKEN[:] = [[ns for ns, _ in steady], [v for _, old in steady for v in old], [old for _, old in steady], moving, fp]
  for m in moving:
    if _same_values(m[1], m[0].values()): continue
    if not _only_state(m[1], vals := tuple(m[0].values())): return _take()
    m[1] = vals
  return fp

def _take() -> str:
  """code_fingerprint taken afresh (with what it covers now)."""
  spaces = _digest_covers()
  per_space = [tuple(ns.values()) for ns in spaces]
  fp = hashlib.sha256((_files_fingerprint() + live_digest()).encode()).hexdigest()
  _TAKEN[:] = [spaces, list(itertools.chain.from_iterable(per_space)), per_space, [], fp]
  return fp

def _same_values(old: tuple, new: Any) -> bool: return len(old) == len(new) and all(map(operator.is_, old, new))

def _only_state(old: Sequence, new: Sequence) -> bool:
  """`new` has replaced no code of `old`'s and brought none (what changed is state: counters)."""
  replaced = itertools.compress(zip(old, new), map(operator.is_not, old, new))  # (found in C)
  return len(old) == len(new) and not any(_is_code(x) or _is_code(y) for x, y in replaced)

def enabled() -> bool: return os.environ.get("TINYSCHED_PROGRAM_CACHE", "0") == "1"

def _folder() -> Path: return cache_root() / "programs"

def key_material(ast: UOp, opts: Sequence[Opt] | None, target: Target) -> str:
  """The whole key of an entry: what the program depends on (an entry records it; its file is named by its hash)."""
  o = "none" if opts is None else ",".join(repr(x) for x in opts)
  return "\0".join([code_fingerprint(), ast.key, o, target.stable_repr()])

def entry_key(ast: UOp, opts: Sequence[Opt] | None, target: Target) -> str:
  return hashlib.sha256(key_material(ast, opts, target).encode()).hexdigest()

class _OtherFormat(ValueError): """An entry of an earlier (or later) FORMAT: a miss, not a refusal."""

def _digest(key: str, prg: dict) -> str:
  return hashlib.sha256(json.dumps([key, prg], sort_keys=True).encode()).hexdigest()

def _encode(p: Program, key: str) -> str:
  prg = {"name": p.name, "src": p.src, "global": list(p.global_size), "local": None if p.local_size is None else list(p.local_size),
         "dtypes": [d.name for d in p.buf_dtypes], "outs": list(p.outs), "opts": [list(o.to_tuple()) for o in p.opts], "local_mem": p.local_mem,
         "cost": None if p.cost is None else [p.cost.flops, list(p.cost.accesses)]}
  return json.dumps({"format": FORMAT, "key": key, "program": prg, "sha256": _digest(key, prg)})

def _key_matches(recorded: Any, wanted: str) -> bool:
  """Whether an entry's recorded key is the one asked for (one place, so a test can take the check away)."""
  return recorded == wanted

def _sizes(xs: Any, what: str) -> tuple[int, ...]:
  if not isinstance(xs, list) or not 1 <= len(xs) <= 3 or not all(type(x) is int and x >= 1 for x in xs):
    raise ValueError(f"{what} size {xs!r} is not 1 to 3 integers of at least 1")
  return tuple(xs)

def _decode(text: str, key: str | None = None) -> Program:
  """The Program of an entry's text; ValueError (KeyError, TypeError) for one that is not an entry of this FORMAT whose
  hash holds (and, given `key`, stored under it), or that no renderer made (sizes that are no launch)."""
  d = json.loads(text)
  if not isinstance(d, dict): raise ValueError(f"not an entry: a JSON {type(d).__name__}")
  if d.get("format") != FORMAT: raise _OtherFormat(f"format {d.get('format')}")
  prg = d["program"]
  if not isinstance(prg, dict) or d["sha256"] != _digest(d["key"], prg): raise ValueError("its content does not match its hash")
  if key is not None and not _key_matches(d["key"], key): raise ValueError("stored for another key (copied from another kernel, code or target)")
  gs, ls = _sizes(prg["global"], "global"), None if prg["local"] is None else _sizes(prg["local"], "local")
  if ls is not None and len(ls) != len(gs): raise ValueError(f"local size {ls} does not match global size {gs}")
  bufs = tuple(dtypes.from_name(n) for n in prg["dtypes"])
  outs = tuple(int(i) for i in prg["outs"])
  if not all(0 <= i < len(bufs) for i in outs): raise ValueError(f"outputs {outs} are not among its {len(bufs)} buffers")
  cost = prg["cost"]
  if cost is not None:
    if not (isinstance(cost, list) and len(cost) == 2 and type(cost[0]) is int and isinstance(cost[1], list)
            and len(cost[1]) == len(bufs) and all(type(a) is int and a >= 0 for a in cost[1]) and cost[0] >= 0):
      raise ValueError(f"its cost {cost!r:.80} is not FLOPs and an access count per buffer")
    cost = ProgramCost(cost[0], tuple(cost[1]))
  return Program(str(prg["name"]), str(prg["src"]), gs, ls, bufs, outs, (), tuple(Opt.from_tuple(o) for o in prg["opts"]), int(prg["local_mem"]),
                 cost)

def watched() -> bool:
  """Whether someone watches or limits the rules as they fire (rewrite_limit, rules_off, FIRED, TRACE): a cached program
  would then hide every rule the lowering applies (a cause search or a blame would see none, coverage would miss them)."""
  return RW.LIMIT is not None or RW.FIRED is not None or RW.TRACE is not None

def cached_program(ast: UOp, opts: Sequence[Opt] | None, target: Target) -> Program:
  """to_program(ast, opts, target), read from the disk cache when this code rendered it before (module docstring)."""
  if not enabled() or watched() or (folder := trusted_cache_dir(_folder())) is None: return to_program(ast, opts, target)
  target = device_class(target)  # (the key names the class to_program renders for: devices of one class share entries)
  key = key_material(ast, opts, target)
  path = folder / f"{hashlib.sha256(key.encode()).hexdigest()}.json"
  try: hit = _decode(path.read_text(), key)
  except (OSError, _OtherFormat): pass  # missing, or written by another version of this cache: render it
  except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:  # refused (counted): render it
    reject_cache_entry(path, f"{type(e).__name__}: {e}" if not isinstance(e, ValueError) else str(e))
  else:
    report_program(ast, target, hit, opts is not None)  # a capture records a hit as the rendering it stands for
    return hit
  p = to_program(ast, opts, target)
  if not p.vars and all(isinstance(g, int) for g in p.global_size) and (p.cost is None or p.cost.at() == (p.cost.flops, p.cost.accesses)):
    write_cache_entry(path, _encode(p, key).encode())  # (a concurrent reader sees the whole entry or none)
  return p

__all__ = ["cached_program", "code_fingerprint", "fingerprint_of", "live_digest", "entry_key", "key_material"]
