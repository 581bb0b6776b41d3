"""The execution check: run a capture's stored (old) and current (new) kernels on a device, each side on its
own buffers, and check both against an independent reference.

Sides, by capture level:
- kernel: old = the stored AST, new = today's `full_ast_rewrite` of the stored pre-sink; both rendered by
  today's code generator;
- schedule: old = the stored kernel list, new = today's `schedule_graph` of the stored big graph; when the
  lists differ (kernels merged or split), every buffer both write is compared and the report maps old
  kernels to the new ones that write the same buffers;
- program: old = the stored OpenCL source exactly as captured, launched with its captured launch
  dimensions; new = today's codegen for the stored AST and optimization choices.
`replay diff`/`commits` pair two stores instead: both sides are stored, nothing is recomputed.

The reference, which shares no index code with the compiler (the NUMPY interpreter evaluates views from
shape/strides/offset/mask, floats accumulate in float64):
1. every kernel of each side, as it runs, against the interpreter on a copy of the device buffers just
   before it: a device, runtime or codegen bug is caught at the kernel that has it, and errors cannot
   compound along a deep model, so the tolerance stays tight. Outputs that hang on a float decision with
   near-equal operands (a recomputed value compared with a stored max) are left unjudged and counted
   (`undecidable_elements`): no reference that rounds differently from the device can decide them;
2. schedule level: both kernel lists, run by the interpreter from the same inputs, against the
   scheduler's input graph evaluated op by op (`replay.reference`): a realize or fusion bug (a padded
   view over an unsafe op that is no longer realized) shows even when old and new agree.

Verdicts: `equivalent` (old ≈ new, both ≈ reference), `mismatch` (old and new differ), `wrong` (a side
disagrees with the reference, also when old and new agree), `unstable` (a side, run twice on the same
inputs, gives different bits), `failed` (could not compile or run), `timeout`, `skipped` (with the reason).
Nothing is reused between the sides: each is launched on fresh buffers and timed on its own.

Kernels run in worker processes (`python -m replay.execcheck worker`) fed one job per line, so a kernel that
hangs or crashes the driver becomes `timeout`/`failed` and the check goes on with a fresh worker. A job's
time limit comes from a calibration run and its size (or --timeout); one that times out is retried once
alone with twice the time before it counts.

Timing: one warm-up, then rounds that interleave old, new and old again; each side's time is the minimum
over rounds; the noise is how far the two old series disagree. `slower`/`faster` only beyond
max(threshold, 2 x noise) plus an absolute floor. FLOPs and bytes per kernel come from the AST.
"""
from __future__ import annotations
import json, os, select, subprocess, sys, tempfile, threading, time, traceback
from pathlib import Path
from typing import Any, Callable
import numpy as np
from replay.execinputs import compare, domains, seeded_fill, same_bits, discontinuous, judged_as
from tinysched.cost import kernel_cost

MIN_TIMEOUT_S = 120.0        # the floor of a job's time limit; scaled up by the calibration run and the job's size
SECONDS_PER_ELEMENT = 2e-6   # added to a job's limit per buffer element (the reference's cost grows with it)
MIN_SLOWER_S = 20e-6         # a kernel is only "slower" if it also lost at least this much time

# *** building jobs (in the parent, with the current code) ***

def _enc(ast) -> str:
  from replay.encode import encode_graph
  return encode_graph([ast]).decode()

def _specs(graph) -> dict[int, list]:
  from tinysched.ops import Ops
  return {u.arg[0]: [u.arg[1][1], u.arg[1][2].name] for u in graph.toposort() if u.op is Ops.BUFFER}

class _Sides:
  """Where a job's two sides come from. `replay check`: old = the stored output, new = the current code on the stored
  input. `replay diff`/`commits` (paired): old and new are both stored, in two stores, and nothing is recomputed."""
  def __init__(self, store, input_key: str, stored_key: str, ex: dict, old_store=None, new_key: str | None = None, new_ex: dict | None = None):
    self.store, self.input_key, self.stored_key, self.ex = store, input_key, stored_key, ex
    self.old_store, self.new_key, self.new_ex = old_store or store, new_key, new_ex
    self.current: dict | None = None  # the current code's output, when the caller has it (see build_job)
  @property
  def paired(self) -> bool: return self.new_key is not None
  def input(self) -> bytes: return self.store.blob(self.input_key)
  def decoded_input(self, decode: Callable[[bytes], Any]) -> Any:
    """The stored input decoded: as the replay decoded it when it hands it over (current["inputs"]), else from the store."""
    if self.current is not None and "inputs" in self.current: return self.current["inputs"]
    return decode(self.input())
  @property
  def identical(self) -> bool:
    """The current output is byte-identical to the stored one (the replay compared their keys): the stored output then
    decodes to the very objects the current code made (decoding is interning), which need not be decoded again."""
    return bool(self.current is not None and self.current.get("identical"))
  def old_output(self) -> bytes: return self.old_store.blob(self.stored_key)
  def new_output(self) -> bytes: return self.store.blob(self.new_key)

def _kernel_job(src: _Sides, names: dict) -> dict:
  from replay.runner import decode_output
  from replay.encode import decode_kernel_input, bound_values
  from tinysched.schedule import full_ast_rewrite
  pre, vv, asg = src.decoded_input(decode_kernel_input)
  names.update(bound_values(pre, vv))
  if src.paired: new_ast, new_map = decode_output("kernel", src.new_output()), list((src.new_ex or {}).get("bufs") or [])
  elif src.current is not None: new_ast, new_map = src.current["output"], list(src.current["bufs"])
  else:
    new_ast, ctx = full_ast_rewrite(pre, vv, asg)
    new_map = [b.arg[0] for b in ctx.bufs]
  old_ast = new_ast if src.identical else decode_output("kernel", src.old_output())
  old_map = list(src.ex.get("bufs") or new_map)  # older rows have no map: the same signature as today's
  if not new_map: new_map = old_map
  old_enc = _enc(old_ast)
  new_enc = old_enc if new_ast is old_ast else _enc(new_ast)
  return {"specs": _specs(pre), "old": [["ast", old_enc, old_map]], "new": [["ast", new_enc, new_map]],
          "reference": {"kind": "kernels", "side": "old"}, "domains": domains([pre])}

def _schedule_job(src: _Sides, names: dict) -> dict:
  from replay.runner import decode_output
  from replay.encode import decode_schedule_input, bound_values, encode_graph
  from tinysched.ops import Ops
  from tinysched.schedule import schedule_graph
  graph, vv, flags = src.decoded_input(decode_schedule_input)
  names.update(bound_values(graph, vv))
  if src.paired:
    new_asts, new_maps = decode_output("schedule", src.new_output()), (src.new_ex or {}).get("bufs")
    if not new_maps or len(new_maps) != len(new_asts): return {"skip": "the new capture has no buffer map for its kernels (re-capture it)"}
    new = [["ast", _enc(a), list(m)] for a, m in zip(new_asts, new_maps)]
  else:
    kernels, vv2 = (src.current["kernels"], src.current["var_vals"]) if src.current is not None else schedule_graph(graph, vv, flags)
    names.update({v.arg[0]: x for v, x in {**vv, **vv2}.items()})
    new = [["ast", _enc(k.ast), [b.arg[0] for b in k.bufs]] for k in kernels]
  # identical: the stored kernels are the current ones, already encoded in `new` (only a check's job has `current`)
  old_encs = [e[1] for e in new] if src.identical else [_enc(a) for a in decode_output("schedule", src.old_output())]
  maps = src.ex.get("bufs")
  if not maps or len(maps) != len(old_encs): return {"skip": "the capture has no buffer map for its kernels (re-capture it)"}
  old = [["ast", e, list(m)] for e, m in zip(old_encs, maps)]
  outputs = sorted({s.src[0].arg[0] for s in graph.src if s.op is Ops.VIEW and s.src and s.src[0].op is Ops.BUFFER})
  return {"specs": _specs(graph), "old": old, "new": new, "outputs": outputs, "domains": domains([graph]),
          "reference": {"kind": "graph", "graph": encode_graph([graph]).decode()}}

def _program_job(src: _Sides, names: dict) -> dict:
  from replay.encode import parse
  from replay.program import replay_program_full, launch_json
  launch = src.ex.get("launch")
  if not launch: return {"skip": "the capture has no launch dimensions for its stored source (captured before they were recorded; re-capture it)"}
  doc = src.decoded_input(parse)
  ast = doc.roots()[0]
  if src.paired:
    new_src, new_launch = src.new_output().decode(), (src.new_ex or {}).get("launch")
    if not new_launch: return {"skip": "the new capture has no launch dimensions for its source (re-capture it)"}
  else:
    prg = src.current["program"] if src.current is not None else replay_program_full(doc)
    new_src, new_launch = prg.src, launch_json(prg)
  size = sum(n for n, _ in _program_specs(ast, names)[0].values())  # for the time limit and the run order
  return {"specs": None, "size": size, "ast": _enc(ast), "old": [["src", launch["name"], src.old_output().decode(), launch]],
          "new": [["src", new_launch["name"], new_src, new_launch]], "reference": {"kind": "kernels", "side": "ast"},
          "domains": domains([ast], lambda u: u.arg if u.op.name == "DEFINE_GLOBAL" else None)}

def build_job(db: str, level: str, input_key: str, stored_key: str, extra: str | None, var_vals: str | None,
              old_db: str | None = None, new_key: str | None = None, new_extra: str | None = None, current: dict | None = None,
              store=None) -> dict:
  """Everything the worker needs, computed here with the current code (or, with old_db/new_key, read from two stores).
  `current`: the current code's output for this input, already computed by the replay (its object under "output",
  plus what replay.runner.run_input puts in `full`); `store`: `db` already open."""
  from replay.store import Store
  names = json.loads(var_vals or "{}")
  builders = {"kernel": _kernel_job, "schedule": _schedule_job, "program": _program_job}
  if level not in builders: return {"skip": f"no execution check at {level} level"}
  own = store is None
  if own: store = Store(db, readonly=True)
  old_store = Store(old_db, readonly=True) if old_db else None
  try:
    sides = _Sides(store, input_key, stored_key, json.loads(extra or "{}"), old_store, new_key, json.loads(new_extra or "null"))
    sides.current = None if new_key else current
    job = builders[level](sides, names)
  finally:
    if own: store.close()
    if old_store is not None: old_store.close()
  if "skip" in job: return job
  return {**job, "level": level, "names": names, "seed": int(input_key[:8], 16)}

def job_key(db: str, level: str, input_key: str, stored_key: str, extra: str | None, var_vals: str | None,
            old_db: str | None = None, new_key: str | None = None, new_extra: str | None = None) -> tuple:
  """What makes two captures one job: keys name contents, so a check job is the same in whichever store its rows are;
  a paired job (replay diff) also depends on the new row and both stores."""
  return (level, input_key, stored_key, extra, var_vals) + ((db, old_db, new_key, new_extra) if new_key else ())

def build_failure(e: Exception) -> dict:
  return {"verdict": "failed", "error": f"cannot build the job with the current code: {type(e).__name__}: {e}", "log": traceback.format_exc()[-4000:]}

def prebuild(store, row: dict, current: dict) -> tuple[tuple, dict]:
  """(job_key, job) for a row `replay check` has just replayed, from the output it computed (see build_job)."""
  args = (str(store.path), row["level"], row["input_key"], row["output_key"], row.get("extra"), row.get("var_vals"))
  try: job = build_job(*args, current=current, store=store)
  except Exception as e: job = build_failure(e)
  return job_key(*args), job

# *** inside the worker ***

def _dtype(name: str):
  from tinysched.dtype import dtypes
  return dtypes.from_name(name)

def _program_specs(ast, names: dict[str, int]) -> tuple[dict[int, tuple[int, Any]], dict[str, int]]:
  """Buffer sizes of a bare kernel AST (program level has no BUFFER nodes): the largest position any of its views
  reaches, evaluated by the reference's view code. Unbound Variables take their largest value."""
  from tinysched.ops import Ops
  from replay.reference import reach
  from tinysched.realize import kernel_vars
  vv = {v: names.get(v.arg[0], v.arg[2]) for v in kernel_vars(ast)}
  specs: dict[int, tuple[int, Any]] = {}
  for u in ast.toposort():
    if u.op in (Ops.LOAD, Ops.STORE):
      g = u.src[0]
      hi = max(reach(u.src[1].arg, vv), 1)
      old = specs.get(g.arg, (0, g.dtype.base))[0]
      specs[g.arg] = (max(old, hi), g.dtype.base)
  return dict(sorted(specs.items())), {v.arg[0]: x for v, x in vv.items()}

class _Side:
  """One side's kernels, launched on a device: AST kernels through today's codegen, stored sources as they are."""
  def __init__(self, device: str, items: list, names: dict[str, int]):
    from replay.encode import decode_graph
    self.device, self.names = device, names
    self.items = [(it[0], decode_graph(it[1].encode())[0], list(it[2])) if it[0] == "ast" else tuple(it) for it in items]
  def run(self, bufs: dict[int, Any], timed: bool = False, check=None, host: dict[int, np.ndarray] | None = None,
          final: dict[int, np.ndarray] | None = None) -> list[float]:
    """Run every kernel once, in order; returns per-kernel seconds when timed. `check(k, item, before, after)` sees
    each kernel's buffers (host copies) just before and just after it ran. `host`: the contents `bufs` were filled
    with; with it, a kernel's inputs are read from host copies kept up to date with every kernel's outputs (each
    output is read back from the device anyway) instead of from the device again; `final` (with `host` and `check`)
    receives those copies as they are at the end: every buffer's contents, read back once."""
    from tinysched.device import Device
    be = Device[self.device]
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
    from tinysched.ops import Ops
    from tinysched.realize import kernel_vars
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
  than this device allows, half precision it lacks), or None. That is not a failure of the code under test."""
  if t is None: return None
  for it in items:
    _, name, src, launch = it
    local = launch.get("local") or []
    if local and (int(np.prod(local)) > t.max_work_group_size or any(a > b for a, b in zip(local, t.max_work_item_sizes))):
      return f"{name} was generated for a work-group of {list(local)}, more than {device} allows ({t.max_work_group_size}, {list(t.max_work_item_sizes)})"
    # the renderer enables these extensions exactly when a kernel uses half / double
    if "cl_khr_fp16" in src and not t.has_fp16: return f"{name} uses half precision, which {device} ({t.name}) lacks"
    if "cl_khr_fp64" in src and not t.has_fp64: return f"{name} uses double precision, which {device} ({t.name}) lacks"
  return None

def _launch_source(be, name: str, src: str, launch: dict, args: list, names: dict[str, int]) -> float:
  from replay.encode import decode_graph
  from tinysched.uop import sym_infer
  if not hasattr(be, "run_source"): raise RuntimeError(f"device {be.name} cannot run OpenCL source (program-level captures need an OpenCL device)")
  by_name: dict = {}
  gs = []
  for g in launch["global"]:
    if isinstance(g, int): gs.append(g); continue
    u = decode_graph(g["uop"].encode())[0]
    for x in u.toposort():
      if x.op.name == "DEFINE_VAR": by_name[x] = names[x.arg[0]]
    gs.append(int(sym_infer(u, by_name)))
  bits = launch.get("var_bits") or [32] * len(launch["vars"])
  scalars = [(np.int64 if b == 64 else np.int32)(names[v]) for v, b in zip(launch["vars"], bits)]
  if any(g <= 0 for g in gs): return 0.0
  return be.run_source(name, src, args, tuple(gs), tuple(launch["local"]) if launch.get("local") else None, scalars)

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
  from tinysched.device import Buffer
  return {i: Buffer(device, specs[i][0], specs[i][1]).allocate().copyin(host[i]) for i in host}

def _outputs_of(it, side) -> list[int]:
  """The buffers one kernel item writes."""
  from tinysched.ops import Ops
  if it[0] != "ast": return sorted({s.src[0].arg for s in side.ast.src if s.op is Ops.STORE})
  _, ast, m = it
  if ast.op is Ops.SINK: return sorted({m[s.src[0].arg] for s in ast.src if s.op is Ops.STORE})
  return [m[0]] if m else []

def _interpret(it, side, bufs: dict[int, np.ndarray], names: dict[str, int]) -> None:
  """One kernel item on numpy buffers, in place, by the reference interpreter (floats accumulate in float64).
  A stored OpenCL source (program level) is checked against the AST it was generated from."""
  from tinysched.ops import Ops
  from tinysched.realize import kernel_vars
  from tinysched.runtime.interpreter import exec_ast
  ast, m = (it[1], it[2]) if it[0] == "ast" else (side.ast, sorted(bufs))  # program level: DEFINE_GLOBAL i is buffer i
  args = [bufs[i] for i in m]
  if ast.op is Ops.COPY: args[0][:] = args[1].view(args[0].dtype)[:args[0].size]
  elif ast.op is Ops.SINK: exec_ast(ast, args, {v: names[v.arg[0]] for v in kernel_vars(ast)}, reference=True)

class _KernelCheck:
  # (the reference of one kernel: its outputs, and per output the elements a few ULP of input noise can flip)
  """Checks every kernel of a side as it runs: the interpreter evaluates the kernel on a copy of the device buffers as
  they were just before it, and its outputs must match the device's. Errors cannot compound along a kernel list, so the
  tolerance stays tight however deep the model is. Interpretations are memoized on (kernel, input bits): a side whose
  kernel saw exactly the same inputs as the other side's does not pay twice (the device runs are never shared)."""
  def __init__(self, specs, names):
    self.specs, self.names, self.findings, self.undecidable = specs, names, [], 0
    self.memo: dict[tuple, list[tuple[dict[int, np.ndarray], tuple[dict, dict]]]] = {}  # (kernel, buffers) -> [(inputs, reference)]
  def __call__(self, side_name: str, k: int, it, side, before: dict[int, np.ndarray], after: dict[int, np.ndarray]) -> None:
    key = (it[1].key if it[0] == "ast" else it[2], tuple(it[2]) if it[0] == "ast" else ())
    seen = self.memo.setdefault(key, [])
    # inputs compared bit for bit (a memcmp, cheaper than hashing them)
    hit = next((n for n, (inp, _) in enumerate(seen) if inp.keys() == before.keys() and all(same_bits(inp[i], before[i]) for i in before)), None)
    if hit is None:
      got = self._reference(it, side, before, sorted(after))
      seen.append((before, got))
    else: got = seen.pop(hit)[1]  # the other side's: used once, so its input copies are not held for the whole job
    ref, undecidable = got
    for i in sorted(after):
      c = compare(ref[i], after[i], judged_as(self.specs[i][1].name, [it[1] if it[0] == "ast" else side.ast]), undecidable.get(i))
      if not c["equal"]:
        self.findings.append({**c, "kind": "wrong", "buffer": i, "kernel": k, "sides": f"{side_name} kernel {k} vs reference"})
        return
      if c.get("n_undecidable"): self.undecidable += c["n_undecidable"]
  def _reference(self, it, side, before: dict[int, np.ndarray], outs: list[int]) -> tuple[dict, dict]:
    def run(inputs: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
      bufs = {i: b.copy() if i in outs else b for i, b in inputs.items()}  # the interpreter writes only the outputs
      _interpret(it, side, bufs, self.names)
      return {i: bufs[i] for i in outs}
    ref = run(before)
    ast = it[1] if it[0] == "ast" else side.ast
    if not discontinuous(ast): return ref, {}
    # a decision on float values: the outputs that hang on a near tie are left unjudged (counted in the report)
    from replay.reference import uncertain_outputs
    from tinysched.realize import kernel_vars
    m = it[2] if it[0] == "ast" else sorted(before)
    doubt = uncertain_outputs(ast, [before[i] for i in m], {v: self.names[v.arg[0]] for v in kernel_vars(ast)})
    if doubt is None: return ref, {}
    return ref, {m[k]: d for k, d in doubt.items() if m[k] in ref}

def _graph_check(job: dict, sides: dict[str, "_Side"], host, specs, names) -> tuple[list[dict], str | None]:
  """Schedule level: the scheduler's input graph evaluated op by op against each side's kernel list run by the
  interpreter from the same inputs (numpy on both ends, so only a scheduling difference can make them differ:
  a realize or fusion bug, or a kernel that computes the wrong thing)."""
  from replay.encode import decode_graph
  from replay import reference as REF
  graph = decode_graph(job["reference"]["graph"].encode())[0]
  try: written, undefined = REF.evaluate(graph, host, REF.graph_vars(graph, names))
  except REF.TooLarge as e: return [], f"not evaluated: {e}"
  findings: list[dict] = []
  seen: dict[str, dict[int, np.ndarray]] = {}
  for name, side in sides.items():
    ident = json.dumps(job[name])
    mine = set(_written_bufs(side))  # the interpreter writes only these, in place: the rest is read from host as it is
    if (bufs := seen.get(ident)) is None:
      bufs = {i: a.copy() if i in mine else a for i, a in host.items()}
      for it in side.items: _interpret(it, side, bufs, names)
      seen[ident] = bufs
    for i in sorted(mine & set(written) - undefined):
      # the graph does not say which intermediates are stored (rounded, for bfloat16): see reference.evaluate
      c = compare(written[i], bufs[i], judged_as(specs[i][1].name, _asts(side)), intermediate_rounding=True)
      if not c["equal"]:
        findings.append({**c, "kind": "wrong", "buffer": i, "sides": f"{name} kernels vs the input graph"})
        break
  return findings, None

def run_job(job: dict, device: str, timing_runs: int, slower_threshold: float = 0.10) -> dict:
  """Run a built job (see build_job): old and new on `device`, each kernel checked against the interpreter; at schedule
  level both kernel lists against the input graph too; compare, and time."""
  from replay.encode import decode_graph
  names = dict(job["names"])
  old, new = _Side(device, job["old"], names), _Side(device, job["new"], names)
  if job["specs"] is None:  # program level
    from tinysched.device import Device
    if (why := _unlaunchable(getattr(Device[device], "target", None), device, [it for side in (old, new) for it in side.items])):
      return {"device": device, "verdict": "skipped", "reason": why}
    ast = decode_graph(job["ast"].encode())[0]
    old.ast = new.ast = ast
    specs, extra_names = _program_specs(ast, names)
    names.update({k: v for k, v in extra_names.items() if k not in names})
  else: specs = {int(i): (size, _dtype(dt)) for i, (size, dt) in job["specs"].items()}
  # only the buffers a kernel touches (and the outputs) get memory: a pre-sink also names the fused intermediates it
  # never stores, which can be vocab x tokens x dim large
  used = {i for side in (old, new) for it in side.items for i in side.touched(it)} | set(job.get("outputs") or [])
  specs = {i: sd for i, sd in specs.items() if i in used}
  if (why := _over_memory(sum(int(size) * dt.itemsize for size, dt in specs.values()))):
    return {"device": device, "verdict": "skipped", "reason": why}
  doms = {int(k): v for k, v in (job.get("domains") or {}).items()}
  host = {i: seeded_fill(size, dt, job["seed"] + i, doms.get(i)) for i, (size, dt) in specs.items()}
  res: dict[str, Any] = {"device": device, "seed": job["seed"], "old_kernels": len(old.items), "new_kernels": len(new.items)}
  got: dict[str, dict[int, np.ndarray]] = {}
  unstable: dict[str, list[int]] = {}
  check = _KernelCheck(specs, names)
  warm: dict[str, dict[int, Any]] = {}
  for name, side in (("old", old), ("new", new)):
    try:
      bufs = _fresh(device, host, specs)
      final: dict[int, np.ndarray] = {}
      side.run(bufs, check=lambda k, it, before, after, name=name, side=side: check(name, k, it, side, before, after), host=host,
               final=final)
      # what the kernels write and the graph's outputs, not the inputs (they can be vocabulary-sized tables): the copies
      # the per-kernel check already read back
      written = sorted(set(_written_bufs(side)) | set(job.get("outputs") or []))
      got[name] = {i: final[i] if i in final else bufs[i].numpy() for i in written}
      # the same inputs once more: a side that changes its bits is unstable (this run is also the timing's warm-up)
      again = warm[name] = _fresh(device, host, specs)
      side.run(again)
      if (flaky := [i for i in written if not same_bits(again[i].numpy(), got[name][i])]): unstable[name] = flaky
    except Exception as e:
      return {**res, "verdict": "failed", "side": name, "error": f"{type(e).__name__}: {e}", "log": traceback.format_exc()[-4000:]}
  findings: list[dict] = list(check.findings)
  if check.undecidable: res["undecidable_elements"] = check.undecidable
  res["reference"] = "each kernel on the interpreter, from the device's inputs to it"
  if job["reference"]["kind"] == "graph":
    try: gf, note = _graph_check(job, {"old": old, "new": new}, host, specs, names)
    except Exception as e:
      return {**res, "verdict": "failed", "side": "reference", "error": f"the reference could not evaluate this capture: {type(e).__name__}: {e}",
              "log": traceback.format_exc()[-4000:]}
    findings += gf
    res["reference"] += "; both kernel lists against the scheduler's input graph, op by op" + (f" ({note})" if note else "")
  w_old, w_new = _written_bufs(old), _written_bufs(new)
  both = sorted(set(w_old) & set(w_new) | set(job.get("outputs") or []))
  if job["level"] == "schedule" and len(old.items) != len(new.items): res["kernel_map"] = _kernel_map(old, new)
  # kernel lists that differ (fusion) may round bfloat16 intermediates at different places
  regrouped = job["level"] == "schedule" and [a.key for a in _asts(old)] != [a.key for a in _asts(new)]
  old_vs_new = {i: compare(got["old"][i], got["new"][i], judged_as(specs[i][1].name, _asts(old) + _asts(new)), intermediate_rounding=regrouped)
                for i in both}
  findings[:0] = [{**c, "kind": "mismatch", "buffer": i, "sides": "old vs new"} for i, c in reversed(old_vs_new.items()) if not c["equal"]]
  res["compared_buffers"] = both
  res["wrong_sides"] = sorted({f["sides"].split()[0] for f in findings if f["kind"] == "wrong"}) or None
  if unstable: res["unstable_sides"] = {k: v[:5] for k, v in unstable.items()}
  if findings:
    mism = [f for f in findings if f["kind"] == "mismatch"]
    worst = max(mism or findings, key=lambda f: (f["n_nonfinite"], f.get("max_abs_err") or 0.0))
    res.update(verdict="mismatch" if mism else "wrong", max_abs_err=worst.get("max_abs_err"), max_rel_err=worst.get("max_rel_err"),
               max_ulp=worst.get("max_ulp"), n_diff=worst["n_diff"], n_nonfinite=worst["n_nonfinite"], first_diff=worst.get("first_diff", []),
               buffer=worst["buffer"], where=worst["sides"], findings=findings[:8])
  elif unstable:
    side = sorted(unstable)[0]
    res.update(verdict="unstable", side=side, buffer=unstable[side][0],
               error=f"the {side} kernels gave different bits on two runs with the same inputs (buffers {unstable[side][:5]})")
  else:
    errs = list(old_vs_new.values())
    res.update(verdict="equivalent", max_abs_err=max((e["max_abs_err"] or 0.0 for e in errs), default=0.0),
               max_rel_err=max((e.get("max_rel_err") or 0.0 for e in errs), default=0.0))
  if timing_runs:
    try: res.update(_timing(old, new, warm["old"], warm["new"], specs, timing_runs, slower_threshold))
    except Exception as e: res["timing_error"] = f"{type(e).__name__}: {e}"
  return res

def _asts(side: _Side) -> list:
  """The kernel ASTs a side runs (program level: the AST its source was made from)."""
  out = [it[1] for it in side.items if it[0] == "ast"]
  return out or ([side.ast] if getattr(side, "ast", None) is not None else [])

def _written_bufs(side: _Side) -> list[int]:
  return sorted({i for it in side.items for i in _outputs_of(it, side)})

def _kernel_map(old: _Side, new: _Side) -> list[dict]:
  """For each old kernel, the new kernels that write any buffer it wrote (a fusion change's old -> new)."""
  nw = [set(_outputs_of(it, new)) for it in new.items]
  return [{"old": i, "writes": sorted(w), "new": [j for j, x in enumerate(nw) if x & w]}
          for i, w in enumerate(set(_outputs_of(it, old)) for it in old.items)]

def _timing(old: _Side, new: _Side, bo: dict[int, Any], bn: dict[int, Any], specs, runs: int, threshold: float) -> dict:
  """Each side timed on its own buffers, which have been run once already (compiled, caches warm)."""
  so, sn, so2 = [], [], []
  for _ in range(runs):  # interleaved: a machine-wide slowdown hits both sides alike
    so.append(old.run(bo, timed=True)); sn.append(new.run(bn, timed=True)); so2.append(old.run(bo, timed=True))
  t_old = [min(x) for x in zip(*so)] if so and so[0] else []
  t_old2 = [min(x) for x in zip(*so2)] if so2 and so2[0] else []
  t_new = [min(x) for x in zip(*sn)] if sn and sn[0] else []
  o, o2, n = sum(t_old), sum(t_old2), sum(t_new)
  noise = abs(o - o2) / max(min(o, o2), 1e-12) if o and o2 else 0.0
  margin = max(threshold, 2 * noise)
  out: dict[str, Any] = {"old_time_s": min(o, o2) if o2 else o, "new_time_s": n, "noise": noise, "timing_runs": runs,
                         "old_kernel_times_s": t_old, "new_kernel_times_s": t_new}
  base = out["old_time_s"]
  out["slower"] = bool(base and n > base * (1 + margin) + MIN_SLOWER_S)
  out["faster"] = bool(base and n * (1 + margin) + MIN_SLOWER_S < base)
  sizes = {i: s for i, (s, _) in specs.items()}
  flops = bytes_ = 0
  for it in new.items:
    if it[0] != "ast": continue
    _, ast, m = it
    f, b = kernel_cost(ast, {k: sizes[i] for k, i in enumerate(m)}, {k: specs[i][1].itemsize for k, i in enumerate(m)})
    flops += f; bytes_ += b
  if not any(it[0] == "ast" for it in new.items) and getattr(new, "ast", None) is not None:
    flops, bytes_ = kernel_cost(new.ast, sizes, {i: specs[i][1].itemsize for i in specs})
  out.update(flops=flops, bytes=bytes_)
  if n > 0: out.update(gflops=flops / n / 1e9, gbps=bytes_ / n / 1e9)
  return out

# *** batch compiles ahead of the jobs ***

def _job_kernels(jobs: list[dict]) -> list[str]:
  """The distinct kernel items of the jobs, both sides, in job order, as the JSON lines a compile process reads:
  ["ast", encoded] or ["src", name, source]."""
  out: dict[str, None] = {}  # insertion-ordered
  for j in sorted(jobs, key=lambda j: j["id"]):
    for it in list(j.get("old") or []) + list(j.get("new") or []):
      out.setdefault(json.dumps(["ast", it[1]] if it[0] == "ast" else ["src", it[1], it[2]]))
  return list(out)

PRECOMPILE_MIN = 8  # fewer kernels than this: a compile process's start (~0.5 s) would cost about what batching saves

def _precompile_cmd(device: str) -> list[str]: return [sys.executable, "-m", "replay.execcheck", "precompile", device]

def _precompile_marker(device: str, items: list[str]) -> Path:
  """A file that exists once these kernels were batch-compiled by this very code for this device: a warm run then
  starts no compile process. Only speed depends on it (a kernel whose cache entry is gone is compiled by its worker)."""
  import hashlib
  from tinysched.codegen.program_cache import code_fingerprint
  from tinysched.helpers import cache_root
  h = hashlib.sha256()
  for part in [code_fingerprint(), device, *items]: h.update(part.encode() + b"\0")
  return cache_root() / "precompiled" / h.hexdigest()

def precompile(jobs: list[dict], device: str, workers: int, progress: bool = False) -> int:
  """Compile every kernel the jobs will launch, in batches, in `workers` processes, before the jobs run: a cold run
  then pays each compiler start once per batch instead of once per kernel (tinysched.runtime.opencl: prebuild). This
  only fills the disk caches; the jobs compile (or find) each kernel themselves as before. A compile process that
  fails or hangs costs only its speed-up. Returns the number of kernel items handed out (0: nothing to do)."""
  from tinysched.device import Device
  from tinysched.helpers import disk_cache_enabled, write_atomic
  if not disk_cache_enabled() or os.environ.get("REPLAY_PRECOMPILE", "1") == "0": return 0
  try: compiles = getattr(Device[device], "compiles", False)
  except Exception: return 0  # opening the device is the jobs' business: they report it
  if not compiles: return 0
  items = _job_kernels(jobs)
  if len(items) < PRECOMPILE_MIN: return 0
  marker = _precompile_marker(device, items)
  if marker.exists(): return 0
  if progress: sys.stderr.write(f"  compiling {len(items)} kernels in batches (first run of this code on {device}) ...\n"); sys.stderr.flush()
  n = max(1, min(workers, len(items)))
  shares = [items[i * len(items) // n:(i + 1) * len(items) // n] for i in range(n)]  # contiguous: one model's kernels together
  procs = []
  for share in shares:
    f = tempfile.TemporaryFile(mode="w+")
    f.write("".join(it + "\n" for it in share)); f.seek(0)
    procs.append((subprocess.Popen(_precompile_cmd(device), stdin=f, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), f))
  deadline = time.monotonic() + MIN_TIMEOUT_S + 2.0 * max(len(s) for s in shares)
  ok = True
  for p, f in procs:
    try: ok &= p.wait(timeout=max(1.0, deadline - time.monotonic())) == 0
    except subprocess.TimeoutExpired:
      p.kill(); p.wait(); ok = False
    f.close()
  if ok: write_atomic(marker, b"")
  return len(items)

def _precompile_main(device: str) -> None:
  from replay.encode import decode_graph
  from tinysched.device import Device
  os.environ.setdefault("TINYSCHED_PROGRAM_CACHE", "1")  # what it renders, the workers then read (see _worker_main)
  asts, sources = [], []
  for line in sys.stdin:
    it = json.loads(line)
    if it[0] == "ast": asts.append(decode_graph(it[1].encode())[0])
    else: sources.append((it[1], it[2]))
  Device[device].prebuild(asts, sources)

def _worker_main(device: str, timing_runs: int, slower_threshold: float) -> None:
  # a fresh process lowering every captured kernel again: reuse what this very code rendered before (the cache keys on
  # the sources and on the code as loaded, planted bugs included: tinysched/codegen/program_cache.py)
  os.environ.setdefault("TINYSCHED_PROGRAM_CACHE", "1")
  for line in sys.stdin:
    job = json.loads(line)
    try: out = run_job(job, device, timing_runs, slower_threshold)
    except Exception as e: out = {"verdict": "failed", "error": f"{type(e).__name__}: {e}", "log": traceback.format_exc()[-4000:]}
    sys.stdout.write(json.dumps({"id": job["id"], **out}, default=str) + "\n")
    sys.stdout.flush()

# *** in the parent ***

def default_device() -> str:
  from tinysched.device import Device
  return Device.DEFAULT

def check_device(device: str | None) -> str:
  """The device name, canonical, or a ValueError saying which devices exist (before any job runs)."""
  from tinysched.device import Device
  try:
    name = Device.canonicalize(device) if device else default_device()
    Device[name]
  except Exception as e:
    what = f"device {device!r}" if device else f"the default device (TINYSCHED_DEVICE={os.environ.get('TINYSCHED_DEVICE')!r})"
    raise ValueError(f"{what} cannot be opened: {e}") from None
  return name

def job_size(job: dict) -> int:
  """Elements a job's buffers hold (program level: as its builder measured them)."""
  if "size" in job: return int(job["size"])
  return sum(int(s) for s, _ in (job.get("specs") or {}).values()) if job.get("specs") else 1 << 16

class DeviceUnusable(RuntimeError):
  """The device opened but cannot run the execution check's calibration kernel (a broken driver, a missing compiler)."""

def calibrate(device: str) -> float:
  """Seconds a worker needs for a tiny job end to end (start, imports, one compile): how slow this machine is now."""
  t0 = time.perf_counter()
  r = subprocess.run([sys.executable, "-m", "replay.execcheck", "calibrate", device], capture_output=True, text=True, timeout=600)
  if r.returncode != 0: raise DeviceUnusable(f"the execution check cannot run on {device}: {r.stderr.strip().splitlines()[-1:] or r.returncode}")
  return time.perf_counter() - t0

def timeout_for(job: dict, calibration_s: float) -> float:
  """A job's limit: never below MIN_TIMEOUT_S, scaled by how slow the machine is now and by the job's size."""
  return max(MIN_TIMEOUT_S, 30 * calibration_s) + SECONDS_PER_ELEMENT * job_size(job) * max(1.0, calibration_s)

def _run_serial(take: Callable[[], dict | None], device: str, timing_runs: int, limit: Callable[[dict], float], slower_threshold: float,
                progress: Callable[[], None] | None) -> dict[int, dict]:
  """Run the jobs `take()` hands out (None: no more) one at a time in a worker process; a worker that hangs past a
  job's limit is killed (the job is `timeout`), one that dies blames its job (`failed`); either way a fresh worker
  takes the next job."""
  results: dict[int, dict] = {}
  proc, errf = None, None
  def stop() -> None:
    nonlocal proc
    if proc is not None:
      proc.kill(); proc.wait()
      proc = None
  try:
    while (job := take()) is not None:
      if proc is None:
        # stderr goes to a file: a full pipe (compiler warnings) must never block the worker while we wait on stdout
        errf = tempfile.TemporaryFile(mode="w+")
        proc = subprocess.Popen([sys.executable, "-m", "replay.execcheck", "worker", device, str(timing_runs), str(slower_threshold)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errf, text=True, bufsize=1)
      assert proc.stdin and proc.stdout and errf
      try:
        proc.stdin.write(json.dumps(job) + "\n")
        proc.stdin.flush()
      except (BrokenPipeError, OSError): pass  # it died: reading below says so
      ready, _, _ = select.select([proc.stdout], [], [], limit(job))
      if not ready:
        results[job["id"]] = {"verdict": "timeout", "error": f"no result within {limit(job):.0f}s (kernel hung, or the machine is overloaded)"}
        stop()
      elif not (line := proc.stdout.readline()):  # the worker died (a driver crash): blame the job it was running
        proc.wait()
        errf.seek(0)
        results[job["id"]] = {"verdict": "failed", "error": f"the worker process exited with {proc.returncode}", "log": errf.read()[-2000:]}
        proc = None
      else:
        out = json.loads(line)
        results[out["id"]] = out
      if progress: progress()
    if proc is not None:
      proc.stdin.close()  # type: ignore[union-attr]
      proc.wait()
      proc = None
  finally: stop()
  return results

def _job_queue(jobs: list[dict], workers: int, lock: threading.Lock) -> Callable[[int], dict | None]:
  """take(worker) -> the next job for that worker, or None when all are handed out. Biggest first, so the run ends soon
  after its longest job rather than after one worker's unlucky share. Jobs of one group (one store: one model, whose
  kernel- and schedule-level jobs share kernels) go to one worker, which compiles each kernel once; a worker whose
  groups are done takes the biggest job left anywhere."""
  groups: dict[str, list[dict]] = {}
  for j in sorted(jobs, key=lambda j: (-job_size(j), j["id"])): groups.setdefault(str(j.get("group", "")), []).append(j)
  load = [0] * workers
  owner: dict[str, int] = {}
  for g in sorted(groups, key=lambda g: (-sum(job_size(j) + (1 << 16) for j in groups[g]), g)):  # biggest group to the least loaded
    w = min(range(workers), key=lambda w: (load[w], w))
    owner[g] = w
    load[w] += sum(job_size(j) + (1 << 16) for j in groups[g])
  def take(worker: int) -> dict | None:
    with lock:
      mine = [g for g in groups if groups[g] and owner[g] == worker] or [g for g in groups if groups[g]]
      if not mine: return None
      g = min(mine, key=lambda g: (-job_size(groups[g][0]), groups[g][0]["id"]))
      return groups[g].pop(0)
  return take

def run_jobs(jobs: list[dict], device: str | None = None, timing_runs: int = 5, timeout_s: float | None = None,
             progress: Callable[[int, int], None] | None = None, workers: int = 1, slower_threshold: float = 0.10) -> dict[int, dict]:
  """Run jobs in `workers` worker processes. `timeout_s` None: each job's limit comes from a calibration run and
  its size (timeout_for); the calibration runs beside the first jobs, and when it fails (DeviceUnusable) no further
  job is started and the failure is raised. A job that times out is run again alone with twice its limit before it
  counts."""
  device = device or default_device()
  # the calibration runs beside the first jobs (it only sets limits): until it is known, limits assume a machine
  # of normal speed (cal 1 s); a job that times out meanwhile on a slow machine is retried with the measured limit
  cal: list = []
  def calibrate_bg() -> None:
    try: cal.append(calibrate(device))
    except Exception as e: cal.append(e)
  cal_thread = threading.Thread(target=calibrate_bg, daemon=True, name="replay-calibration")
  if timeout_s is None and jobs: cal_thread.start()
  def limit(j: dict) -> float:
    if timeout_s is not None: return timeout_s
    return timeout_for(j, cal[0] if cal and not isinstance(cal[0], Exception) else 1.0)
  done = [0]
  lock = threading.Lock()
  def tick() -> None:
    with lock:
      done[0] += 1
      if progress: progress(min(done[0], len(jobs)), len(jobs))
  n = max(1, min(workers, len(jobs)))
  precompile(jobs, device, max(n, min(2, os.cpu_count() or 1)), progress=progress is not None)
  queue = _job_queue(jobs, n, lock)
  def take(w: int) -> dict | None: return None if cal and isinstance(cal[0], Exception) else queue(w)  # unusable: stop
  out: dict[int, dict] = {}
  if n > 1:
    import concurrent.futures as cf
    with cf.ThreadPoolExecutor(n) as ex:  # threads only wait on worker processes
      futs = [ex.submit(_run_serial, lambda w=w: take(w), device, timing_runs, limit, slower_threshold, tick) for w in range(n)]
      for f in futs: out.update(f.result())
  else: out = _run_serial(lambda: take(0), device, timing_runs, limit, slower_threshold, tick)
  if cal_thread.is_alive() or cal: cal_thread.join()
  if cal and isinstance(cal[0], Exception): raise cal[0]
  for j in jobs:  # a timeout under load is retried alone before it counts
    if out.get(j["id"], {}).get("verdict") == "timeout":
      alone = [j]
      again = _run_serial(lambda: alone.pop() if alone else None, device, timing_runs, lambda x: 2 * limit(x), slower_threshold, None)
      out[j["id"]] = {**again[j["id"]], "retried": True}
  return out

def _workers_for(device: str, timing_runs: int = 5) -> int:
  """Worker processes: two on a CPU device (its kernels share the cores with the reference). On a GPU one while
  timings matter (kernels of other workers would share the device and blur them), and for a correctness sweep
  (--exec-all: one timing run) one per four cores up to four, since the CPU reference is then most of the work."""
  cores = os.cpu_count() or 1
  if device == "NUMPY": return min(2, cores)
  try:
    from tinysched.device import Device
    if not Device[device].target.is_gpu: return min(2, cores)  # type: ignore[attr-defined]
    return 1 if timing_runs > 1 else max(1, min(4, cores // 4))
  except Exception: return 1

def exec_report(rep, mode: str = "changed", device: str | None = None, slower_threshold: float = 0.10, timing_runs: int = 5,
                timeout_s: float | None = None, progress: Callable[[int, int], None] | None = None) -> None:
  """Attach `exec` verdicts to a replay Report: changed captures (mode "changed") or every capture ("all")."""
  from replay.store import Store
  chosen = [r for r in rep.results if r.outcome == "changed" or (mode == "all" and r.outcome == "identical")]
  if not chosen: return
  dev = check_device(device)
  rows: dict[tuple, dict] = {}
  for db in sorted({r.db for r in chosen} | {r.pair["old_db"] for r in chosen if r.pair}):
    s = Store(db, readonly=True)
    try:
      for row in s.captures(): rows[(db, row["run_id"], row["seq"], row["level"])] = row
    finally: s.close()
  from tinysched.device import Device
  runs_source = hasattr(Device[dev], "run_source")
  # jobs `replay check` built while it replayed (from the outputs it had just computed, not computed again)
  prebuilt: dict[tuple, dict] = {}
  for r in rep.results:
    if (pj := r.__dict__.pop("exec_job", None)) is not None: prebuilt.setdefault(pj[0], pj[1])
  jobs: list[dict] = []
  by_key: dict[tuple, int] = {}
  job_of: dict[int, int] = {}  # index in chosen -> job id
  for n, r in enumerate(chosen):
    if r.level == "program" and not runs_source:
      r.exec = {"verdict": "skipped", "reason": f"program-level captures hold OpenCL source: {dev} cannot run it (use --device OPENCL)"}
      continue
    if rep.paired and not r.pair:
      r.exec = {"verdict": "skipped", "reason": "in one store only: nothing to run it against"}
      continue
    if r.pair:  # replay diff: old row in the old store, new row in this one
      row = rows.get((r.pair["old_db"], *r.pair["old"], r.level))
      new_row = rows.get((r.db, *r.pair["new"], r.level))
      if row is None or new_row is None: continue
      if new_row["input_key"] != row["input_key"]:
        r.exec = {"verdict": "skipped", "reason": "the two captures have different inputs (the front end changed): their numbers are not comparable"}
        continue
    else:
      row, new_row = rows.get((r.db, r.run_id, r.seq, r.level)), None
      if row is None: continue
    # one job per distinct input, stored output and buffer map, in whichever store it is (keys name contents): its
    # verdict is reported for every capture that shares it. Paired jobs also depend on the new row and both stores.
    k = job_key(r.db, r.level, r.input_key, r.stored_key, row.get("extra"), row.get("var_vals"),
                *((r.pair["old_db"], r.new_key, new_row.get("extra")) if new_row is not None else ()))
    if k not in by_key:
      by_key[k] = len(jobs)
      if (job := prebuilt.get(k)) is None:
        try: job = build_job(r.db, r.level, r.input_key, r.stored_key, row.get("extra"), row.get("var_vals"),
                             *((r.pair["old_db"], r.new_key, new_row.get("extra")) if new_row is not None else ()))
        except Exception as e: job = build_failure(e)
      jobs.append({"id": len(jobs), "group": r.db, **job})  # group: which worker should prefer it (see run_jobs)
    job_of[n] = by_key[k]
  runnable = [j for j in jobs if "skip" not in j and "verdict" not in j]
  out = run_jobs(runnable, dev, timing_runs, timeout_s, progress, workers=_workers_for(dev, timing_runs), slower_threshold=slower_threshold)
  for j in jobs:
    if "skip" in j: out[j["id"]] = {"verdict": "skipped", "reason": j["skip"]}
    elif "verdict" in j: out[j["id"]] = {k: v for k, v in j.items() if k != "id"}
  for n, r in enumerate(chosen):
    if n in job_of: r.exec = dict(out.get(job_of[n], {"verdict": "failed", "error": "no result"}))

def _calibrate_main(device: str) -> None:
  """A tiny kernel end to end on `device`: the yardstick for time limits, and a check that the device works."""
  from tinysched import Tensor
  from tinysched.device import Device
  Device.DEFAULT = device
  (Tensor.arange(64).reshape(8, 8).float().sum(1) + 1).numpy()

if __name__ == "__main__":
  os.environ["TINYSCHED_PROFILE"] = "1"  # the workers and the calibration time kernels: a profiling queue, whatever the caller set
  if len(sys.argv) >= 3 and sys.argv[1] == "worker":
    _worker_main(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 5, float(sys.argv[4]) if len(sys.argv) > 4 else 0.10)
  elif len(sys.argv) >= 3 and sys.argv[1] == "calibrate": _calibrate_main(sys.argv[2])
  elif len(sys.argv) >= 3 and sys.argv[1] == "precompile": _precompile_main(sys.argv[2])
  else: raise SystemExit("usage: python -m replay.execcheck worker DEVICE [TIMING_RUNS [SLOWER_THRESHOLD]] | calibrate DEVICE | precompile DEVICE")
