"""One job's verdict: both sides run on their own buffers, every kernel checked against the interpreter as it runs (and,
at schedule level, both kernel lists against the scheduler's input graph), old compared with new, each side run twice
for stability, then timed. Verdicts: equivalent, mismatch, wrong, unstable, failed, skipped (replay/execute/__init__.py)."""
from __future__ import annotations
import json, traceback
from typing import Any
import numpy as np
from tinysched.device import Device
from tinysched.dtype import dtypes, bf16_bits, bf16_float
from tinysched.realize import kernel_vars
from replay.store.encode import decode_graph
from replay.execute import reference as REF
from replay.execute.reference import uncertain_outputs
from replay.execute.inputs import compare, seeded_fill, same_bits, discontinuous, judged_as
from replay.execute.jobs import program_specs
from replay.execute.launch import _Side, _fresh, _interpret, _outputs_of, _over_memory, _unlaunchable
from replay.execute.timing import _timing
from replay.execute import numbers as model_numbers

def _dtype(name: str):
  """The dtype a job's specs name."""
  return dtypes.from_name(name)

class _KernelCheck:
  # (the reference of one kernel: its outputs, and per output the elements a few ULP of input noise can flip)
  """Checks every kernel of a side as it runs: the interpreter evaluates the kernel on a copy of the device buffers as
  they were just before it, and its outputs must match the device's. Errors cannot compound along a kernel list, so the
  tolerance stays tight however deep the model is. Interpretations are memoized on (kernel, input bits): a side whose
  kernel saw exactly the same inputs as the other side's does not pay twice (the device runs are never shared)."""
  def __init__(self, specs, names) -> None:
    self.specs, self.names, self.undecidable = specs, names, 0
    self.findings: list[dict] = []
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
    m = it[2] if it[0] == "ast" else sorted(before)
    doubt = uncertain_outputs(ast, [before[i] for i in m], {v: self.names[v.arg[0]] for v in kernel_vars(ast)})
    if doubt is None: return ref, {}
    return ref, {m[k]: d for k, d in doubt.items() if m[k] in ref}

def _graph_check(job: dict, sides: dict[str, "_Side"], host, specs, names) -> tuple[list[dict], str | None]:
  """Schedule level: the scheduler's input graph evaluated op by op against each side's kernel list run by the
  interpreter from the same inputs (numpy on both ends, so only a scheduling difference can make them differ:
  a realize or fusion bug, or a kernel that computes the wrong thing)."""
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
  level both kernel lists against the input graph too; compare, and time. A model-level job runs a model call instead
  (replay/execute/numbers.py)."""
  if job.get("kind") == "model": return model_numbers.judge_job(job, device)
  names = dict(job["names"])
  old, new = _Side(device, job["old"], names), _Side(device, job["new"], names)
  if job["specs"] is None:  # program level
    if (why := _unlaunchable(getattr(Device[device], "target", None), device, [it for side in (old, new) for it in side.items])):
      return {"device": device, "verdict": "skipped", "reason": why}
    ast = decode_graph(job["ast"].encode())[0]
    old.ast = new.ast = ast
    new.cost = job.get("new_cost")  # type: ignore[attr-defined]  # (program level only, like .ast)
    specs, extra_names = program_specs(ast, names)
    names.update({k: v for k, v in extra_names.items() if k not in names})
  else: specs = {int(i): (size, _dtype(dt)) for i, (size, dt) in job["specs"].items()}
  # only the buffers a kernel touches (and the outputs) get memory: a pre-sink also names the fused intermediates it
  # never stores, which can be vocab x tokens x dim large
  used = {i for side in (old, new) for it in side.items for i in side.touched(it)} | set(job.get("outputs") or [])
  specs = {i: sd for i, sd in specs.items() if i in used}
  if (why := _over_memory(sum(int(size) * dt.itemsize for size, dt in specs.values()))):
    return {"device": device, "verdict": "skipped", "reason": why}
  doms = {int(k): v for k, v in (job.get("domains") or {}).items()}
  res: dict[str, Any] = {"device": device, "seed": job["seed"], "old_kernels": len(old.items), "new_kernels": len(new.items)}
  for scale in INPUT_SCALES:
    host = {i: _scaled(seeded_fill(size, dt, job["seed"] + i, doms.get(i)), dt, scale) for i, (size, dt) in specs.items()}
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
    w_old, w_new = _written_bufs(old), _written_bufs(new)
    both = sorted(set(w_old) & set(w_new) | set(job.get("outputs") or []))
    # kernel lists that differ (fusion) may round bfloat16 intermediates at different places
    regrouped = bool(job.get("regroups")) and [a.key for a in _asts(old)] != [a.key for a in _asts(new)]
    old_vs_new = {i: compare(got["old"][i], got["new"][i], judged_as(specs[i][1].name, _asts(old) + _asts(new)), intermediate_rounding=regrouped)
                  for i in both}
    # at schedule level both kernel lists against the input graph too (it compares every intermediate: it may find
    # what saturated final outputs hide)
    gf: list[dict] = []
    note = None
    if job["reference"]["kind"] == "graph":
      try: gf, note = _graph_check(job, {"old": old, "new": new}, host, specs, names)
      except Exception as e:
        return {**res, "verdict": "failed", "side": "reference", "error": f"the reference could not evaluate this capture: {type(e).__name__}: {e}",
                "log": traceback.format_exc()[-4000:]}
    found = bool(check.findings or gf) or not all(c["equal"] for c in old_vs_new.values())
    # outputs that are inf/NaN everywhere on both sides cannot tell a right kernel from a wrong one (a matmul feeding
    # exp, on inputs in [0.5, 2)): unless something was found already, the same run on smaller float inputs (where there
    # are any: an output that is inf everywhere whatever the inputs, a -inf fill, is compared as it is)
    sat = _saturated(got, specs) if any(_is_floaty(dt) and i not in w_old and i not in w_new for i, (_, dt) in specs.items()) else []
    if not sat or found: break
  if scale != 1.0: res["input_scale"] = scale
  if sat and not found:
    return {**res, "verdict": "skipped", "reason": f"outputs {sat} are inf or NaN in every element on both sides, even on inputs "
            f"scaled down to {INPUT_SCALES[-1]:g}: the comparison could not tell a wrong kernel from a right one (not verified)"}
  findings: list[dict] = list(check.findings)
  if check.undecidable: res["undecidable_elements"] = check.undecidable
  res["reference"] = "each kernel on the interpreter, from the device's inputs to it"
  if job["reference"]["kind"] == "graph":
    findings += gf
    res["reference"] += "; both kernel lists against the scheduler's input graph, op by op" + (f" ({note})" if note else "")
  if job.get("regroups") and len(old.items) != len(new.items): res["kernel_map"] = _kernel_map(old, new)
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
    which = sorted(unstable)[0]
    res.update(verdict="unstable", side=which, buffer=unstable[which][0],
               error=f"the {which} kernels gave different bits on two runs with the same inputs (buffers {unstable[which][:5]})")
  else:
    errs = list(old_vs_new.values())
    res.update(verdict="equivalent", max_abs_err=max((e["max_abs_err"] or 0.0 for e in errs), default=0.0),
               max_rel_err=max((e.get("max_rel_err") or 0.0 for e in errs), default=0.0))
  # both sides the same kernels (an identical row of a sweep): timed as an A/A test, never a perf finding (replay/check/perf.py)
  same_code = json.dumps(job["old"], sort_keys=True) == json.dumps(job["new"], sort_keys=True)
  if same_code: res["same_code"] = True
  if timing_runs:
    try: res.update(_timing(old, new, warm["old"], warm["new"], specs, timing_runs, slower_threshold, same_code))
    except Exception as e: res["timing_error"] = f"{type(e).__name__}: {e}"
  return res

INPUT_SCALES = (1.0, 2.0 ** -4, 2.0 ** -8, 2.0 ** -12)  # float inputs times these, in turn, while the outputs saturate

def _scaled(x: np.ndarray, dt, scale: float) -> np.ndarray:
  """A float input buffer times `scale` (a power of two: exact, and every domain the fill respects, positive values for
  log, sqrt and 1/x, stays respected); other dtypes as they are."""
  if scale == 1.0: return x
  if dt.scalar() == dtypes.bfloat16: return bf16_bits(bf16_float(x) * np.float32(scale))
  return x * x.dtype.type(scale) if dtypes.is_float(dt) else x

def _is_floaty(dt) -> bool: return dtypes.is_float(dt) or dt.scalar() == dtypes.bfloat16

def _saturated(got: dict[str, dict[int, np.ndarray]], specs) -> list[int]:
  """Float outputs that are inf or NaN in every element on every side. (Not "mostly": a mask of -inf where a boolean
  input says so is half -inf, and where the -inf fall is exactly what the comparison checks.)"""
  out = []
  for i in sorted(set.intersection(*(set(g) for g in got.values()))):
    dt = specs[i][1] if i in specs else None
    if dt is None or not _is_floaty(dt): continue
    vals = [bf16_float(g[i]) if dt.scalar() == dtypes.bfloat16 else g[i] for g in got.values()]
    if all(v.size and not np.isfinite(v).any() for v in vals): out.append(i)
  return out

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
