"""TinyJit: record the kernel launches of one call of a function and replay them on later calls (tinygrad's name and
semantics; our code).

    @TinyJit
    def step(x: Tensor, start_pos: UOp) -> Tensor: ...

- Call 1 runs the function normally (a warm-up: lazy caches fill, programs compile). Call 2 runs it again with
  `tinysched.realize.RECORDER` installed and records every item that runs: the kernel AST (the device's program
  cache holds its program), the device Buffers it binds, the Variables it reads; COPY items too (a copy is replayed
  as the same copy). Calls 3+ replay those launches in order: the function body does not run, no lazy graph is
  built and the scheduler is not called. Each launch is made ready once, at the recording (`Backend.prepare`: on
  OpenCL its own kernel object with the buffers that do not change bound), so a replay sets only the inputs and the
  Variables of a launch before enqueueing it.
- Inputs are the Tensor arguments, positional and keyword (keywords in name order); each is realized first. A replay
  binds the buffers of this call's inputs where the recorded call's inputs were bound, and checks every input against
  the recorded one: device, dtype, shape and view (layout). A difference is a `JitError` (a ValueError and a
  RuntimeError) naming the argument and both values. Plain arguments (int, float, str, bool, None and tuples of
  them) must equal the recorded call's: their values were baked into the recorded kernels.
- Variables: a bound Variable passed as an argument (`Variable("start_pos", 1, 99).bind(i)`) or bound in an input's
  view is rebound on every call; every launch takes its var_vals from the current call. A Variable bound inside the
  function body (not reachable from the arguments) cannot be rebound: recording it is a `JitError`.
- Outputs: the returned Tensors (a Tensor, or tuples / lists / dicts of them) are realized in the recorded call. A
  replay returns new Tensor objects over the *recorded output buffers*: each call writes the same memory, so a
  Tensor returned by one call is overwritten by the next call; copy it to keep it (`.numpy()`, or `Tensor(out.numpy())`;
  not `out + 0` or `out.contiguous()`, which fold back to the same buffer). An output that is an input's memory (an in-place
  assign) is this call's input.
  A returned Tensor passed back as an input (`y = f(f(x))`) is read as it was before the call: the replay reads it from
  a copy (made on the device, `Backend.copy`; an output that is that input's memory is then over the copy), and a
  single launch whose input is memory it writes works on a copy. Such an input that the function also assigns in place
  is a `JitError` (its memory would take both the assign and the output).
- Buffers: every buffer the recorded launches use that is not an input (intermediates, outputs, weights the function
  reads from its closure) is kept by the jit and reused as is: intermediates are allocated once, in the recorded
  call, and never again. Tensors created inside the function from Python data (Tensor.rand/randn too: they are drawn
  on the host here, so a jitted dropout repeats one mask: pass random tensors as arguments), and weights replaced by a
  new Tensor object after the recording, are the recorded call's (as in tinygrad): update weights in place with
  `assign`. Python work in the body (control flow on values, `.numpy()`) runs in the first two calls only.
- Capture (replay/ via tinysched/capture_hook.py) sees the recorded call, and the warm-up call, which schedule; a
  replayed call schedules and compiles nothing, so it is never captured.

A replay runs each launch the backend prepared (`Backend.prepare`) directly and counts the call's launches in
GlobalCounters together (`run_launches`); `jit.per_launch = True` sends every launch through the general path instead
(realize.exec_item and the backend's exec_ast, as run_schedule does): the same bits, more host time per launch.

`TinyJit.reset()` forgets the recording (the next call is a warm-up again). Nested jitted calls during a recording
are refused, and so are Tensors inside a list / tuple / dict argument (they would not be rebound). An input that is
not realized yet is realized before the call (that schedules the input's own graph, not the function's). Other
arguments (a model object, a callable) are not checked; a jitted method has one recording for all instances of its
class, as in tinygrad.
"""
from __future__ import annotations
import functools, inspect
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar
from tinysched.ops import Ops
from tinysched.uop import UOp
from tinysched.shape import ShapeTracker
from tinysched.dtype import DType
from tinysched.device import Backend, Buffer, Device
from tinysched.lazy import LazyBuffer
from tinysched.tensor import Tensor
from tinysched.errors import JitError
from tinysched import realize
from tinysched.cost import buffers_cost, buffers_bytes, kernel_flops
from tinysched.helpers import GlobalCounters

R = TypeVar("R")
_PLAIN = (int, float, str, bool, type(None))

def _shape_str(shape: tuple) -> str:
  return "(" + ", ".join(str(s) if isinstance(s, int) else s.render_sym() for s in shape) + ("," if len(shape) == 1 else "") + ")"

def _plain(x: Any) -> bool: return isinstance(x, _PLAIN) or (isinstance(x, tuple) and all(_plain(y) for y in x))
def _same(a: Any, b: Any) -> bool:
  """The same plain value: equal and of one type (2 and 2.0 build different kernels), nan equal to nan."""
  if type(a) is not type(b): return False
  if isinstance(a, tuple): return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
  return a == b or repr(a) == repr(b)

@dataclass(frozen=True)
class InputSpec:
  """What a replay requires of one Tensor argument: the recorded call's view (Variables unbound), dtype, device."""
  name: str
  st: ShapeTracker
  dtype: DType
  device: str

@dataclass(frozen=True)
class _Size:
  """What tinysched.cost.buffers_bytes reads of a Buffer: kept for a launch in place of this call's Buffers, which a
  deferred count would otherwise keep alive until the counters are read."""
  size: int
  nbytes: int

@dataclass(frozen=True)
class Launch:
  """One recorded item. `bufs` are its device Buffers, with None where a call's input is bound; `binds` says what:
  (position, input index, None) for the input's own buffer, or (position, input index, (size, dtype, byte offset
  from the input's)) for a view of the input's memory."""
  ast: UOp
  backend: Backend
  bufs: tuple[Buffer | None, ...]
  binds: tuple[tuple[int, int, tuple[int, DType, int] | None], ...]
  vars: tuple[UOp, ...]
  cost: tuple[int, int] | None = None  # (FLOPs, bytes) for GlobalCounters when no Variable changes it: computed once
  prepared: Callable | None = None     # the backend's launch with its fixed arguments bound once (Backend.prepare), or None
  sizes: tuple[_Size, ...] = ()        # each buffer's size, for the bytes of a launch with Variables (a call's inputs have the recorded sizes)

  @property
  def writes(self) -> tuple[int, ...]:
    """Positions of the buffers this launch writes: each STORE's, or a COPY's destination."""
    return tuple(store.src[0].arg for store in self.ast.src) if self.ast.op is Ops.SINK else (0,)

  def buffers(self, inputs: list[Buffer]) -> tuple[Buffer, ...]:
    if not self.binds: return self.bufs  # type: ignore[return-value]
    out = list(self.bufs)
    for pos, i, view in self.binds:
      b = inputs[i]
      if view is None: out[pos] = b
      else:
        size, dtype, delta = view
        out[pos] = Buffer(b.device, size, dtype, base=b.base, offset=b.offset + delta)
    return tuple(out)  # type: ignore[arg-type]

@dataclass
class Recording:
  """The recording: launches in run order, what the inputs must be, how to rebuild the return value."""
  inputs: tuple[InputSpec, ...]
  names: tuple[str, ...]                     # every argument, in _arguments order
  plain: tuple[tuple[str, Any], ...]         # plain (non-Tensor, non-Variable) arguments, by name
  var_args: tuple[tuple[str, UOp], ...]      # arguments that are bound Variables: their (unbound) Variable
  launches: list[Launch]
  ret: Any                                   # the return value, its Tensors replaced by _Out
  written: frozenset = frozenset()           # ids of the base buffers the launches write, other than inputs (lookup only)
  assigned: frozenset = frozenset()          # indices of the inputs a launch writes in place
  def intermediates(self) -> list[Buffer]:
    """The buffers the launches keep across calls (not bound per call), first-use order."""
    seen: dict[int, Buffer] = {}  # id -> buffer, insertion (first-use) ordered: only membership is keyed by id
    for ln in self.launches:
      for b in ln.bufs:
        if b is not None and id(b) not in seen: seen[id(b)] = b
    return list(seen.values())

@dataclass(frozen=True)
class _Out:
  """A returned Tensor: a fixed realized LazyBuffer, or a view `st` of input `inp`'s memory (base shape `shape`)."""
  lb: LazyBuffer | None
  inp: int = -1
  shape: tuple[int, ...] = ()
  st: ShapeTracker | None = None

class TinyJit(Generic[R]):
  """Decorate a function whose Tensor work should be recorded once and replayed: see the module docstring."""
  def __init__(self, fxn: Callable[..., R]):
    if not callable(fxn): raise TypeError(f"TinyJit needs a function, got {type(fxn).__name__}")
    self.fxn = fxn
    self.per_launch = False  # True: replays take the general path launch by launch (run_launches), for comparing with it
    self.name = getattr(fxn, "__qualname__", getattr(fxn, "__name__", repr(fxn)))
    try: params = list(inspect.signature(fxn).parameters.values())
    except (TypeError, ValueError): params = []
    self._positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    functools.update_wrapper(self, fxn)
    self.reset()

  def reset(self) -> None:
    """Forget the recording: the next call is a warm-up, the one after it records again."""
    self.calls = 0
    self.recording: Recording | None = None

  def __get__(self, obj, objtype=None):  # a jitted method: bind `self` like a function does
    return self if obj is None else functools.partial(self.__call__, obj)

  # *** arguments ***
  def _arg_name(self, i: int) -> str:
    return f"argument {i} ({self._positional[i]!r})" if i < len(self._positional) else f"argument {i}"

  def _arguments(self, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """(name, value) of every argument: positional in order, then keywords sorted by name (the call's keyword order
    must not change which input is which)."""
    return [(self._arg_name(i), a) for i, a in enumerate(args)] + [(f"argument {k!r}", kwargs[k]) for k in sorted(kwargs)]

  def _inputs(self, named: list[tuple[str, Any]]) -> tuple[list[tuple[str, Tensor]], dict[UOp, int]]:
    """The Tensor arguments (realized) and the values of the Variables bound in the arguments."""
    tensors: list[tuple[str, Tensor]] = []
    var_vals: dict[UOp, int] = {}
    where: dict[UOp, str] = {}
    def bound(v: UOp, val: int, name: str) -> None:
      if v in var_vals and var_vals[v] != val:
        raise JitError(f"TinyJit {self.name}: Variable {v.arg[0]!r} is bound to {var_vals[v]} by {where[v]} and to {val} by {name}")
      var_vals[v], where[v] = val, name
    for name, a in named:
      if isinstance(a, Tensor):
        if not a.lazydata.is_realized: a.realize()
        if not a.lazydata.is_realized:
          raise JitError(f"TinyJit {self.name}: {name} is a constant Tensor with no buffer (its value would be baked into the "
                         "recorded kernels): pass a realized tensor, e.g. Tensor(value).contiguous().realize()")
        tensors.append((name, a))
        for v, val in a.lazydata.st.unbind()[1].items(): bound(v, val, name)
      elif isinstance(a, (tuple, list, dict)) and _tensors_in(a):
        raise JitError(f"TinyJit {self.name}: {name} holds Tensors inside a {type(a).__name__}: the jit only binds Tensors passed as "
                       "arguments themselves (the ones inside would be the recorded call's on every replay); pass each as an argument")
      elif isinstance(a, UOp):
        if a.op is not Ops.BIND:
          raise JitError(f"TinyJit {self.name}: {name} is an unbound {a.op.name}: pass a bound Variable (Variable(...).bind(value))")
        bound(*a.unbind(), name)
    return tensors, var_vals

  # *** calls ***
  def __call__(self, *args, **kwargs) -> R:
    if realize.RECORDER is not None:
      raise JitError(f"TinyJit {self.name} was called while another TinyJit records a call: nested jits are not supported")
    named = self._arguments(args, kwargs)
    tensors, var_vals = self._inputs(named)
    if self.recording is not None: return self._replay(named, tensors, var_vals)
    if self.calls == 0:  # warm-up
      ret = self.fxn(*args, **kwargs)
      _realize(_tensors_in(ret))
      self.calls = 1
      return ret
    ret, self.recording = self._record(args, kwargs, named, tensors, var_vals)
    self.calls = 2
    return ret

  def _distinct(self, tensors: list[tuple[str, Tensor]]) -> dict[int, int]:
    """id(input buffer) -> input index; two inputs on one buffer are an error (a replay could not tell them apart)."""
    own: dict[int, int] = {}
    for i, (name, t) in enumerate(tensors):
      b = t.lazydata.base.realized
      if (j := own.get(id(b))) is not None:
        raise JitError(f"TinyJit {self.name}: {tensors[j][0]} and {name} are the same buffer: pass distinct tensors")
      own[id(b)] = i
    return own

  def _record(self, args, kwargs, named, tensors, var_vals) -> tuple[Any, Recording]:
    own = self._distinct(tensors)  # id(input buffer) -> input index (lookup only); checked before the body runs
    items: list[tuple[Any, dict[UOp, int]]] = []
    realize.RECORDER = lambda si, kv: items.append((si, kv))
    try:
      ret = self.fxn(*args, **kwargs)
      outs = _tensors_in(ret)
      _realize(outs)
    finally: realize.RECORDER = None
    in_bufs = [t.lazydata.base.realized for _, t in tensors]
    bases: dict[int, int] = {}     # id(base of an input's memory) -> input index (lookup only)
    for k, b in enumerate(in_bufs): bases.setdefault(id(b.base), k)
    launches: list[Launch] = []
    for si, kv in items:
      if si.ast.op in (Ops.EMPTY, Ops.BUFFER_VIEW): continue  # nothing runs (a view's memory is its source's)
      if (missing := [v for v in kv if v not in var_vals]):
        v = missing[0]
        raise JitError(f"TinyJit {self.name}: a kernel uses Variable {v.arg[0]!r} (bound to {kv[v]}) that no argument binds, so a "
                       "replay could not rebind it: pass the bound Variable as an argument")
      bufs: list[Buffer | None] = []
      binds: list[tuple[int, int, tuple[int, DType, int] | None]] = []
      for pos, b in enumerate(si.bufs):
        if (i := own.get(id(b))) is not None:
          binds.append((pos, i, None))
          bufs.append(None)
        elif (i := bases.get(id(b.base))) is not None:
          if b._base is None:  # the whole memory behind an input that is itself a view of it
            raise JitError(f"TinyJit {self.name}: a kernel uses the whole buffer behind {tensors[i][0]}, which is a view of it: pass the "
                           "buffer itself, or a contiguous copy")
          binds.append((pos, i, (b.size, b.dtype, b.offset - in_bufs[i].offset)))
          bufs.append(None)
        else: bufs.append(b)
      backend = Device[si.outputs[0].device]
      cost = buffers_cost(si.ast, si.bufs, kv) if not kv and si.ast.op is Ops.SINK else None
      sizes = tuple(_Size(b.size, b.nbytes) for b in si.bufs) if cost is None else ()
      launches.append(Launch(si.ast, backend, tuple(bufs), tuple(binds), tuple(kv), cost, backend.prepare(si.ast, bufs, tuple(kv)), sizes))
    for n, t in enumerate(outs):
      if not all(isinstance(s, int) for s in t.shape):
        raise JitError(f"TinyJit {self.name}: returned Tensor {n} has the symbolic shape {_shape_str(t.shape)}: a replay cannot "
                       "rebind an output's shape; return a fixed-shape tensor")
    spec = tuple(InputSpec(name, t.lazydata.st.unbind()[0], t.dtype, t.device) for name, t in tensors)
    plain = tuple((name, a) for name, a in named if _plain(a))
    var_args = tuple((name, a.unbind()[0]) for name, a in named if isinstance(a, UOp))
    written = frozenset(id(b.base) for ln in launches for pos in ln.writes if (b := ln.bufs[pos]) is not None)
    assigned = frozenset(i for ln in launches for pos, i, _ in ln.binds if pos in ln.writes)
    rec = Recording(spec, tuple(n for n, _ in named), plain, var_args, launches, _map_tensors(ret, lambda t: _out_spec(t, own)),
                    written, assigned)
    return ret, rec

  def _check(self, named, tensors) -> None:
    c = self.recording
    assert c is not None
    if tuple(n for n, _ in named) != c.names:
      raise JitError(f"TinyJit {self.name}: this call passes {', '.join(n for n, _ in named) or 'no arguments'}; the recorded call "
                     f"passed {', '.join(c.names) or 'none'}")
    if [n for n, _ in tensors] != [s.name for s in c.inputs]:
      raise JitError(f"TinyJit {self.name}: this call passes Tensors as {[n for n, _ in tensors]}, the recorded call passed "
                     f"{[s.name for s in c.inputs]}")
    self._distinct(tensors)
    for (name, t), s in zip(tensors, c.inputs):
      if t.device != s.device: raise JitError(f"TinyJit {self.name}: {name} is on {t.device}, the recorded call's was on {s.device}")
      if t.dtype != s.dtype: raise JitError(f"TinyJit {self.name}: {name} has dtype {t.dtype!r}, the recorded call's had {s.dtype!r}")
      st = t.lazydata.st.unbind()[0] if t.lazydata.st is not s.st else s.st
      if st.shape != s.st.shape:
        raise JitError(f"TinyJit {self.name}: {name} has shape {_shape_str(t.shape)}, the recorded call's had {_shape_str(s.st.shape)}: "
                       "the recorded kernels are built for that shape (use another TinyJit, or reset() this one)")
      if st != s.st:
        raise JitError(f"TinyJit {self.name}: {name} has shape {_shape_str(t.shape)} as recorded but another layout (view "
                       f"{st.views} vs the recorded {s.st.views}): pass it as the recorded call did (e.g. .contiguous().realize())")
    now = dict((n, a) for n, a in named)
    for name, val in c.plain:
      if name not in now or not _same(now[name], val):
        raise JitError(f"TinyJit {self.name}: {name} is {now.get(name, '<missing>')!r}, the recorded call's was {val!r}: plain "
                       "arguments are baked into the recorded kernels (pass a bound Variable to change a number per call)")
    for name, v in c.var_args:
      a = now.get(name)
      if not isinstance(a, UOp) or a.op is not Ops.BIND or a.src[0] is not v:
        raise JitError(f"TinyJit {self.name}: {name} must be Variable {v.arg[0]!r} bound to a value, as in the recorded call; got {a!r}")

  def _replay(self, named, tensors, var_vals) -> Any:
    self._check(named, tensors)
    c = self.recording
    assert c is not None
    inputs = [t.lazydata.base.realized for _, t in tensors]
    # an input in memory the launches write (an earlier call's output passed back: y = f(f(x))) is read from a copy, or
    # a launch would read what an earlier launch of this call already wrote. One the call also assigns in place has no
    # right answer (its memory would take both the assign and the output): refused
    if c.written:
      for i, b in enumerate(inputs):
        if id(b.base) in c.written and i in c.assigned:
          raise JitError(f"TinyJit {self.name}: {tensors[i][0]} is assigned in place by the function and is the memory of one of "
                         "this jit's own outputs (passed back from an earlier call): pass a copy (Tensor(out.numpy())), or "
                         "return the assigned tensor itself")
      inputs = [_copy(b) if id(b.base) in c.written else b for b in inputs]
    run_launches(c.launches, inputs, var_vals, self.per_launch)
    return _map_tensors(c.ret, lambda o: _out_tensor(o, inputs), leaf=_Out)

def run_launches(launches: list[Launch], inputs: list[Buffer], var_vals: dict[UOp, int], per_launch: bool = False) -> None:
  """A replayed call: every recorded launch on this call's inputs and Variables, in order. A prepared launch
  (Backend.prepare) is run directly, and the call's prepared launches are counted together (GlobalCounters.count_many;
  the bytes and FLOPs of those with Variables when the counters are read): per launch, only the backend's enqueue and
  what changed since the recording are left on the host. The rest (a COPY, a kernel on the interpreter) go through
  realize.exec_item, as in run_schedule.
  `per_launch`: every launch through exec_item and the backend's general exec_ast instead, the reference the prepared
  path must match bit for bit (tests/tinysched/test_jit_replay_path.py)."""
  n, ops, mem = 0, 0, 0
  times: list[Callable[[], float]] = []
  varied: list[Launch] = []
  for ln in launches:
    bufs = ln.buffers(inputs)
    if per_launch or ln.prepared is None:
      realize.exec_item(ln.ast, bufs, {v: var_vals[v] for v in ln.vars} if ln.vars else {}, ln.backend, ln.cost)
      continue
    t = ln.prepared(bufs, var_vals)
    n += 1
    if t is not None: times.append(t if callable(t) else functools.partial(float, t))
    if ln.cost is not None:
      ops += ln.cost[0]
      mem += ln.cost[1]
    else: varied.append(ln)
  if not n: return
  if not varied:
    GlobalCounters.count_many(n, ops, mem, times)
    return
  def at(v: tuple[UOp, ...]) -> dict[UOp, int]: return {x: var_vals[x] for x in v}
  GlobalCounters.count_many(n, lambda: ops + sum(kernel_flops(ln.ast, at(ln.vars)) for ln in varied),
                            lambda: mem + sum(buffers_bytes(ln.ast, ln.sizes, at(ln.vars)) for ln in varied), times)

def _tensors_in(ret: Any) -> list[Tensor]:
  out: list[Tensor] = []
  _map_tensors(ret, out.append)
  return out

def _realize(ts: list[Tensor]) -> None:
  if ts: ts[0].realize(*ts[1:])

def _map_tensors(x: Any, fn: Callable[[Any], Any], leaf: type = Tensor) -> Any:
  """x with every `leaf` (a Tensor, or an _Out) inside tuples, lists and dict values replaced by fn(leaf)."""
  if isinstance(x, leaf): return fn(x)
  if isinstance(x, tuple) and not hasattr(x, "_fields"): return tuple(_map_tensors(y, fn, leaf) for y in x)
  if isinstance(x, list): return [_map_tensors(y, fn, leaf) for y in x]
  if isinstance(x, dict): return {k: _map_tensors(v, fn, leaf) for k, v in x.items()}
  return x

def _out_spec(t: Tensor, own: dict[int, int]) -> _Out:
  lb = t.lazydata
  buf = lb.base.realized
  if buf is not None and (i := own.get(id(buf))) is not None:
    return _Out(None, i, lb.base.shape, lb.st)  # type: ignore[arg-type]  # a realized base has an int shape
  return _Out(lb)

def _copy(b: Buffer) -> Buffer:
  """`b` in new memory: a copy of its whole base (on the device, in order with the launches), so every view a launch
  takes of it keeps its offset."""
  base = Buffer(b.device, b.base.size, b.base.dtype).allocate()
  Device[b.device].copy(base, b.base)
  return base if b._base is None else Buffer(b.device, b.size, b.dtype, base=base, offset=b.offset)

def _out_tensor(o: _Out, inputs: list[Buffer]) -> Tensor:
  if o.lb is not None: return Tensor(o.lb)
  base = LazyBuffer.from_buffer(inputs[o.inp], o.shape)
  assert o.st is not None
  return Tensor(base if o.st.contiguous and o.st.shape == o.shape else base._view(o.st))

__all__ = ["TinyJit", "Recording", "Launch", "InputSpec", "JitError", "run_launches"]
