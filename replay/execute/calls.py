"""Running one model call (tinysched/models/calls.py) as replay's `model` level sees it.

A call's *spec* is what the call is without the compiler: {"call": registered name, "dtype": float dtype it runs in,
"seed", "flags": scheduler ContextFlags set around it}. `run_call` runs it in this process on one device, from a clean
front-end state (Tensor's seed, training and no_grad switches), with tinysched's capture hook pointed at a collector:

- every big graph the call schedules, in order, with its bound Variables and flags (what the front end built);
- a digest of every host array copied into a Tensor (the data no graph holds: weights, inputs, Tensor.rand draws);
- its outputs as host arrays;
- with `trace=True`, the front-end functions it ran (FRONT_END files), each with a digest of its source, so a later
  change to one of them is named when the call's graphs or numbers change (and `replay coverage` lists them).

A call runs on the process's default device (a capture's) or the one named: the replay runs it on the NUMPY interpreter
(GRAPH_DEVICE: its workers are forked, and OpenCL does not survive a fork), the execution check on its device. Its graphs
name their buffers' device, which the model level writes as one placeholder: a call builds the same graphs on NUMPY and
on OpenCL, so keys are the same on every machine. Its reference is the same call with dtype float64 on the NUMPY
interpreter (replay/execute/numbers.py)."""
from __future__ import annotations
import contextlib, hashlib, importlib, inspect, sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator
import numpy as np
import tinysched
from tinysched import Tensor, capture_hook
from tinysched.device import Device
from tinysched.dtype import DType, dtypes
from tinysched.helpers import Context
from tinysched.uop import UOp
if TYPE_CHECKING: from tinysched.models.calls import ModelCall

REFERENCE_DEVICE = GRAPH_DEVICE = "NUMPY"
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
# the front end: the files whose functions build graphs from user code (traced for coverage and change attribution)
FRONT_END = ("tensor.py", "function.py", "lazy.py", "reduce.py", "nn/", "models/")
_ROOT = Path(tinysched.__file__).resolve().parent

class CallError(ValueError):
  """A spec this code cannot run: an unknown call or dtype, bad flags (the stored input is then incompatible)."""

@dataclass
class CallRun:
  graphs: list[tuple[UOp, dict[str, int], dict[str, int]]] = field(default_factory=list)  # (big graph, {var: value}, flags)
  host: list[list] = field(default_factory=list)     # [dtype name, shape, sha256 prefix] per host array, in order
  outputs: dict[str, np.ndarray] = field(default_factory=dict)
  dtypes: dict[str, str] = field(default_factory=dict)  # each output's dtype as the call returned it
  functions: dict[str, str] | None = None            # front-end function -> digest of its source (trace=True)
  device: str = ""                                   # where it ran
  kernels: list[UOp] = field(default_factory=list)   # the distinct kernel ASTs its schedules made, in order (collect=True)

def registry() -> dict[str, ModelCall]:
  """tinysched's registered model calls, imported when first asked for: replay also runs against checkouts whose
  tinysched has none (`replay commits`, `bisect`), where only this level's rows are unreadable."""
  try: from tinysched.models.calls import CALLS  # (at use: an older checkout's tinysched has none, see above)
  except ImportError as e: raise CallError(f"this tinysched has no model calls (tinysched.models.calls: {e})") from None
  return CALLS

def spec_of(call: ModelCall) -> dict[str, Any]:
  return {"call": call.name, "dtype": call.dtype, "seed": call.seed, "flags": dict(call.flags)}

def check_spec(spec: Any) -> tuple[ModelCall, DType, int, dict[str, int]]:
  """(the registered call, its dtype, seed, flags) of a spec; CallError names what this code cannot run."""
  if not isinstance(spec, dict) or set(spec) != {"call", "dtype", "seed", "flags"}:
    got = sorted(spec) if isinstance(spec, dict) else type(spec).__name__
    raise CallError(f"a model call spec has the fields call, dtype, seed, flags; got {got}")
  calls = registry()
  call = calls.get(spec["call"]) if isinstance(spec["call"], str) else None
  if call is None: raise CallError(f"model call {str(spec['call'])[:80]!r} is not registered in tinysched.models.calls ({', '.join(calls)})")
  if spec["dtype"] not in FLOAT_DTYPES: raise CallError(f"model call dtype {str(spec['dtype'])[:20]!r}: not one of {', '.join(FLOAT_DTYPES)}")
  if type(spec["seed"]) is not int or not 0 <= spec["seed"] < 2**32: raise CallError(f"model call seed {spec['seed']!r} is not a 32-bit int")
  flags = spec["flags"]
  if not isinstance(flags, dict) or any(k not in ("FUSE_ARANGE", "FUSE_CONV_BW") or type(v) is not int for k, v in flags.items()):
    raise CallError(f"model call flags {flags!r}: only FUSE_ARANGE and FUSE_CONV_BW, as ints")
  return call, getattr(dtypes, spec["dtype"]), spec["seed"], dict(flags)

def _digest(x: np.ndarray) -> str:
  return hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()[:32]

# tinysched.capture_hook's names for the two capture points a call's run keeps (see its docstring)
SCHEDULE_POINT, HOST_POINT = "schedule", "host"

class _Collector:
  """The capture hook while a call runs: schedules and host data are kept, every other capture point ignored."""
  def __init__(self, run: CallRun):
    self.run = run
    self.seen: set[UOp] = set()
  def __call__(self, point: str, inputs: Any, output: Any, info: dict | None = None) -> None:
    if point == SCHEDULE_POINT:
      sink, var_vals, flags = inputs
      self.run.graphs.append((sink, {v.arg[0]: int(x) for v, x in var_vals.items()}, dict(flags)))
      self.run.kernels.extend(a for a in output if a not in self.seen)
      self.seen.update(output)
    elif point == HOST_POINT:
      x, d = inputs
      self.run.host.append([d.name, list(x.shape), _digest(x)])

@contextlib.contextmanager
def _clean_front_end(device: str, seed: int) -> Iterator[None]:
  """A fresh front end: Tensor's RNG at `seed`, inference mode with gradients on, Tensors on `device` (all restored)."""
  prev = (Device.DEFAULT, Tensor.training, Tensor.no_grad, Tensor._seed, Tensor._rng_counter)
  Device.DEFAULT = device
  Tensor.training, Tensor.no_grad = False, False
  Tensor.manual_seed(seed)
  try: yield
  finally: Device.DEFAULT, Tensor.training, Tensor.no_grad, Tensor._seed, Tensor._rng_counter = prev

def host_array(v: Any) -> np.ndarray:
  """An output as a host array: floats as float64, integers and bools as int64 (bfloat16 comes back as float32)."""
  a = v.numpy() if isinstance(v, Tensor) else np.asarray(v)
  if a.dtype.kind in "biu": return a.astype(np.int64)
  return a.astype(np.float64)

def run_call(spec: dict, device: str | None = None, dtype: str | None = None, trace: bool = False, collect: bool = True) -> CallRun:
  """Run the call a spec names on `device` (default: Device.DEFAULT) in its own dtype, or `dtype` (float64 for the
  reference); see the module doc. collect=False: only the outputs (no graphs or host digests; the scheduler's memo then
  works as in a user's program)."""
  call, dt, seed, flags = check_spec(spec)
  if dtype is not None: dt = getattr(dtypes, dtype)
  device = Device.canonicalize(device) if device else Device.DEFAULT
  run = CallRun(device=device)
  out_dtypes: dict[str, str] = {}
  prev_hook = capture_hook.HOOK
  capture_hook.HOOK = _Collector(run) if collect else None
  tracer = _Tracer() if trace else None
  try:
    with _clean_front_end(device, seed), Context(**flags):
      if tracer is not None: tracer.start()
      try:
        outs = call.fn(dt, seed)
        tensors = [v for v in outs.values() if isinstance(v, Tensor)]
        if tensors: Tensor.realize(*tensors)
      finally:
        if tracer is not None: tracer.stop()
      for k, v in outs.items():
        out_dtypes[k] = v.dtype.name if isinstance(v, Tensor) else np.asarray(v).dtype.name
        run.outputs[k] = host_array(v)
  finally: capture_hook.HOOK = prev_hook
  run.dtypes = out_dtypes
  if tracer is not None: run.functions = tracer.functions()
  return run

# *** which front-end functions a call runs ***

def _front_end_file(filename: str) -> str | None:
  """The path of a front-end file relative to the tinysched package ("nn/optim.py"), or None."""
  try: rel = Path(filename).resolve().relative_to(_ROOT).as_posix()
  except (ValueError, OSError): return None
  return rel if any(rel == f or (f.endswith("/") and rel.startswith(f)) for f in FRONT_END) else None

class _Tracer:
  """sys.setprofile while a call runs: the code objects of front-end files that were entered (once each)."""
  def __init__(self) -> None:
    self.codes: dict[Any, str] = {}   # code object -> its file, relative to tinysched
    self.skip: set[Any] = set()
  def _profile(self, frame, event: str, arg: Any) -> None:
    if event != "call": return
    code = frame.f_code
    if code in self.codes or code in self.skip: return
    rel = _front_end_file(code.co_filename)
    if rel is None: self.skip.add(code)
    else: self.codes[code] = rel
  def start(self) -> None: sys.setprofile(self._profile)
  def stop(self) -> None: sys.setprofile(None)
  def functions(self) -> dict[str, str]:
    out: dict[str, str] = {}
    for code, rel in self.codes.items():
      name = function_name(rel, code.co_qualname)
      if name not in out and (h := source_digest(name)) is not None: out[name] = h
    return dict(sorted(out.items()))

def function_name(rel: str, qualname: str) -> str:
  """`module:Qual.name` of a traced function, cut at its first `<locals>`/`<lambda>`/comprehension: a nested function is
  named (and its source digested) as part of the function that defines it."""
  mod = "tinysched." + rel.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
  parts: list[str] = []
  for p in qualname.split("."):
    if p.startswith("<"): break
    parts.append(p)
  return f"{mod}:{'.'.join(parts) or '<module>'}"

def resolve(name: str) -> Any:
  """The object a `module:Qual.name` names in the current code (None when it is gone)."""
  mod, _, qual = name.partition(":")
  try: obj: Any = importlib.import_module(mod)
  except ImportError: return None
  if qual == "<module>": return obj
  for p in qual.split("."):
    obj = inspect.getattr_static(obj, p, None)
    if obj is None: return None
    if isinstance(obj, (staticmethod, classmethod)): obj = obj.__func__
    if isinstance(obj, property): obj = obj.fget
  return obj

def source_digest(name: str) -> str | None:
  """A digest of the current source of what `name` names (None when it is gone or has no source: a C function)."""
  obj = resolve(name)
  if obj is None: return None
  try: src = inspect.getsource(obj)
  except (OSError, TypeError): return None
  return hashlib.sha256(src.encode()).hexdigest()[:16]

def changed_functions(stored: dict[str, str]) -> list[str]:
  """The front-end functions a stored call ran whose source is different now (or gone), sorted."""
  return [n for n, h in sorted(stored.items()) if source_digest(n) != h]

__all__ = ["CallError", "CallRun", "FRONT_END", "GRAPH_DEVICE", "REFERENCE_DEVICE", "changed_functions", "check_spec", "host_array", "run_call",
           "source_digest", "spec_of"]
