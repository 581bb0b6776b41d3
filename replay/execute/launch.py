"""Running one side's kernels on a device: AST kernels through today's code generator, stored OpenCL sources as they
were captured, each on fresh device buffers; the reference interpreter runs one kernel item on numpy buffers. Also
whether a job fits this machine's memory, and whether stored sources fit this device at all.

A stored launch (sizes, Variables, argument dtypes) is data from a store: checked before anything is enqueued
(`stored_launch`, then the device's own check in run_source). One that no kernel was made for (a size of 0 or 2**31,
too many dims, a Variable it does not name) raises BadLaunch, which the job reports as `failed` with the reason: a
wrong size would read and write past the buffers (a crash, or numbers called `wrong`)."""
from __future__ import annotations
import os, time
from typing import Any
import numpy as np
from tinysched.device import Buffer, Device
from tinysched.ops import Ops
from tinysched.realize import kernel_vars
from tinysched.runtime.interpreter import exec_ast
from tinysched.uop import UOp, sym_infer
from replay.store.encode import decode_graph

class _Side:
  """One side's kernels, launched on a device: AST kernels through today's codegen, stored sources as they are."""
  ast: UOp  # program level only: the AST the stored sources were made from, set by the caller (absent otherwise)
  def __init__(self, device: str, items: list, names: dict[str, int]):
    self.device, self.names = device, names
    self.items = [(it[0], decode_graph(it[1].encode())[0], list(it[2])) if it[0] == "ast" else tuple(it) for it in items]
    for it in self.items:  # a stored launch's form is checked before any kernel of the job runs (BadLaunch: the job fails, saying why)
      if it[0] != "ast": stored_launch(it[1], it[3], None)  # (its Variables' values: at launch, once the job has named them all)
  def run(self, bufs: dict[int, Any], timed: bool = False, check=None, host: dict[int, np.ndarray] | None = None,
          final: dict[int, np.ndarray] | None = None) -> list[float]:
    """Run every kernel once, in order; returns per-kernel seconds when timed. `check(k, item, before, after)` sees
    each kernel's buffers (host copies) just before and just after it ran. `host`: the contents `bufs` were filled
    with; with it, a kernel's inputs are read from host copies kept up to date with every kernel's outputs (each
    output is read back from the device anyway) instead of from the device again; `final` (with `host` and `check`)
    receives those copies as they are at the end: every buffer's contents, read back once."""
    be = Device[self.device]
    for it in self.items:  # a stored launch naming buffers the job does not have (the kernel's own count: run_source)
      if it[0] != "ast" and (missing := [i for i in self.touched(it) if i not in bufs]):
        raise BadLaunch(f"the stored launch of kernel {it[1]} cannot be run: it names {len(it[3]['dtypes'])} buffers, the job has "
                        f"{len(bufs)} (no buffer {missing[0]})")
    times = []
    mirror = dict(host) if host is not None else None  # never written in place: entries are replaced by fresh reads
    for k, it in enumerate(self.items):
      before = None if check is None else \
        {i: mirror[i] if mirror is not None else bufs[i].numpy() for i in self.touched(it)}
      t0 = time.perf_counter()
      t = self.run_one(be, it, bufs, timed)
      if t is None:  # no profiling event: wall time around a synchronize
        be.synchronize()
        t = time.perf_counter() - t0
      if timed: times.append(t)
      if check is not None:
        be.synchronize()
        after = {i: bufs[i].numpy() for i in _outputs_of(it, self)}
        if mirror is not None: mirror.update(after)
        check(k, it, before, after)
    if final is not None and mirror is not None and check is not None: final.update(mirror)
    return times
  def touched(self, it) -> list[int]:
    return sorted(set(it[2])) if it[0] == "ast" else list(range(len(it[3]["dtypes"])))
  def run_one(self, be, it, bufs: dict[int, Any], timed: bool) -> float | None:
    """Launch one kernel item; its device time when the backend measures it, else None."""
    if it[0] != "ast":
      _, name, src, launch = it
      return _launch_source(be, name, src, launch, [bufs[i] for i in range(len(launch["dtypes"]))], self.names)
    _, ast, m = it
    args = [bufs[i] for i in m]
    if ast.op is not Ops.SINK:
      if ast.op is Ops.COPY: args[0].copyin(args[1].numpy().view(args[0].dtype.np)[:args[0].size])
      return 0.0
    vv = {v: self.names[v.arg[0]] for v in kernel_vars(ast)}
    if timed and hasattr(be, "run"): return be.run(ast, args, vv)
    be.exec_ast(ast, args, vv)
    return None

def _unlaunchable(t, device: str, items: list) -> str | None:
  """Why stored sources cannot run on `device` with target `t` (captured for another target: a work-group larger
  than this device allows, half precision it lacks), or None. That is not a failure of the code under test. A launch
  that is malformed rather than too large is left to `stored_launch` (a failure, with its reason)."""
  if t is None: return None
  for it in items:
    _, name, src, launch = it
    local = (launch.get("local") or []) if isinstance(launch, dict) else []
    if not isinstance(local, list) or not all(_is_int(x) and x >= 1 for x in local): continue
    if local and (int(np.prod(local)) > t.max_work_group_size or any(a > b for a, b in zip(local, t.max_work_item_sizes))):
      return (f"{name} was generated for a work-group of {list(local)}, more than {device} allows "
              f"({t.max_work_group_size}, {list(t.max_work_item_sizes)})")
    # the renderer enables these extensions exactly when a kernel uses half / double
    if "cl_khr_fp16" in src and not t.has_fp16: return f"{name} uses half precision, which {device} ({t.name}) lacks"
    if "cl_khr_fp64" in src and not t.has_fp64: return f"{name} uses double precision, which {device} ({t.name}) lacks"
    # tinysched/codegen/tensor_core.py: inline PTX that only an NVIDIA compiler for sm_80 and later builds
    if "mma.sync" in src and not t.tensor_cores: return f"{name} uses tensor cores (inline PTX mma.sync), which {device} ({t.name}) lacks"
  return None

class BadLaunch(ValueError):
  """A stored launch that cannot be run as it is: never enqueued (the job fails with this reason)."""

def _is_int(x: Any) -> bool: return type(x) is int

def stored_launch(name: str, launch: Any, names: dict[str, int] | None) -> tuple[tuple[int, ...], tuple[int, ...] | None, list, int]:
  """(global sizes, local sizes or None, scalar arguments, buffer count) of a stored launch, or BadLaunch saying what is
  wrong: 1 to 3 global dims, each an integer of at least 1 (a symbolic one evaluated at the job's Variables may be 0: an
  empty launch), local sizes integers of at least 1 for the same dims, Variables the job names with 32 or 64 bits each.
  `names` None: the form only (symbolic sizes are then given as 0, no scalars). The device checks the rest against the
  kernel and its limits (tinysched.runtime.opencl.launch_bounds)."""
  def bad(why: str): raise BadLaunch(f"the stored launch of kernel {name} cannot be run: {why}")
  if not isinstance(launch, dict): bad(f"not a launch: {launch!r:.80}")
  glob, local, vars_, dts = launch.get("global"), launch.get("local"), launch.get("vars", []), launch.get("dtypes")
  if not isinstance(glob, list) or not 1 <= len(glob) <= 3: bad(f"a launch has 1 to 3 global dims, got {glob!r:.80}")
  if not isinstance(vars_, list) or not all(isinstance(v, str) for v in vars_): bad(f"its Variables are not a list of names: {vars_!r:.80}")
  if names is not None and (missing := [v for v in vars_ if v not in names]):
    bad(f"it needs values for Variables {missing}, which the job does not name")
  bits = launch.get("var_bits") or [32] * len(vars_)
  if not isinstance(bits, list) or len(bits) != len(vars_) or any(b not in (32, 64) for b in bits): bad(f"Variable widths {bits!r:.80} for {vars_}")
  if not isinstance(dts, list) or not all(isinstance(d, str) for d in dts): bad(f"its buffer dtypes are not a list of names: {dts!r:.80}")
  gs: list[int] = []
  for g in glob:
    if _is_int(g):
      if g < 1: bad(f"global size {glob} has a dim below 1")
      gs.append(g)
      continue
    if not isinstance(g, dict) or not isinstance(g.get("uop"), str):
      bad(f"global size {glob!r:.80} holds {g!r:.20}, neither an integer nor a symbolic size")
    if names is None:
      gs.append(0)
      continue
    try:
      u = decode_graph(g["uop"].encode())[0]
      by_name = {x: names[x.arg[0]] for x in u.toposort() if x.op.name == "DEFINE_VAR"}
      gs.append(int(sym_infer(u, by_name)))
    except Exception as e: bad(f"a symbolic global size cannot be evaluated ({type(e).__name__}: {e})")
    if gs[-1] < 0: bad(f"global size {gs} has a dim below 0 at the job's Variables")
  if local is not None and local != []:
    if not isinstance(local, list) or len(local) != len(glob) or not all(_is_int(x) and x >= 1 for x in local):
      bad(f"local size {local!r:.80} is not one integer of at least 1 per global dim ({len(glob)})")
  scalars = [] if names is None else [(np.int64 if b == 64 else np.int32)(names[v]) for v, b in zip(vars_, bits)]
  return tuple(gs), tuple(local) if local else None, scalars, len(dts)

def _launch_source(be, name: str, src: str, launch: dict, args: list, names: dict[str, int]) -> float:
  if not hasattr(be, "run_source"): raise RuntimeError(f"device {be.name} cannot run OpenCL source (program-level captures need an OpenCL device)")
  gs, ls, scalars, nbufs = stored_launch(name, launch, names)
  if nbufs != len(args): raise BadLaunch(f"the stored launch of kernel {name} cannot be run: it names {nbufs} buffers, the job has {len(args)}")
  if any(g == 0 for g in gs): return 0.0  # a Variable made a size 0: nothing to run
  return be.run_source(name, src, args, gs, ls, scalars)

# copies of the buffers a job holds at once: host inputs, both sides' device buffers, their warm-up run, what is read back
EXEC_COPIES = 6

def _available_bytes() -> int | None:
  """REPLAY_EXEC_MEM_MB, else half of the memory the kernel reports available now (Linux), else None (no limit)."""
  if (mb := os.environ.get("REPLAY_EXEC_MEM_MB")): return int(float(mb) * (1 << 20))
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"): return int(line.split()[1]) * 1024 // 2
  except OSError: pass
  return None

def _over_memory(buffer_bytes: int) -> str | None:
  """Why a job whose buffers take `buffer_bytes` is not run here (it would be killed for memory, and say nothing), or None."""
  need, have = buffer_bytes * EXEC_COPIES, _available_bytes()
  if have is None or need <= have: return None
  return (f"its buffers need about {need / 2**30:.1f} GiB here ({buffer_bytes / 2**30:.1f} GiB, {EXEC_COPIES} copies), more than "
          f"this machine can spare ({have / 2**30:.1f} GiB; REPLAY_EXEC_MEM_MB sets the budget)")

def _fresh(device: str, host: dict[int, np.ndarray], specs: dict[int, tuple[int, Any]]) -> dict[int, Any]:
  return {i: Buffer(device, specs[i][0], specs[i][1]).allocate().copyin(host[i]) for i in host}

def _outputs_of(it, side) -> list[int]:
  """The buffers one kernel item writes."""
  if it[0] != "ast": return sorted({s.src[0].arg for s in side.ast.src if s.op is Ops.STORE})
  _, ast, m = it
  if ast.op is Ops.SINK: return sorted({m[s.src[0].arg] for s in ast.src if s.op is Ops.STORE})
  return [m[0]] if m else []

def _interpret(it, side, bufs: dict[int, np.ndarray], names: dict[str, int]) -> None:
  """One kernel item on numpy buffers, in place, by the reference interpreter (floats accumulate in float64).
  A stored OpenCL source (program level) is checked against the AST it was generated from."""
  ast, m = (it[1], it[2]) if it[0] == "ast" else (side.ast, sorted(bufs))  # program level: DEFINE_GLOBAL i is buffer i
  args = [bufs[i] for i in m]
  if ast.op is Ops.COPY: args[0][:] = args[1].view(args[0].dtype)[:args[0].size]
  elif ast.op is Ops.SINK: exec_ast(ast, args, {v: names[v.arg[0]] for v in kernel_vars(ast)}, reference=True)
