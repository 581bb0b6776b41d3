"""The numbers of a model call (replay's `model` level): stored compactly, judged three ways.

Stored per output (`summarize`): dtype, shape, and the values themselves when there are at most FULL_LIMIT, else a
strided sample of about SAMPLE values (every k-th element of the flattened output: any element can be located) with
quantiles, mean and L2 norm of the whole output. Floats are kept as float64 bits (base64), integers as int64.

Judged (`judge`): the current code's outputs (`new`, run on the execution check's device) against
- the **reference**: the same call in float64 on the NUMPY interpreter, with the current code. Off by more than the
  tolerance: `wrong` (the code computes something else than its own float64 twin: a narrower accumulator, a lost cast);
- the **stored** outputs: off by more than the tolerance: `mismatch` (the code's meaning changed: the reference moves
  with the code, so an `nn` or optimizer bug that is in both is caught here).
Integers (tokens, argmax) must equal the stored ones exactly; they are `wrong` where they leave the reference that the
stored ones matched.

Error of a float output: ||a - b||_2 / ||b||_2 over the stored elements (norm-wise relative error: elements near zero
do not dominate it), infinite when NaN/inf sit at other places. Tolerance, fixed per output when it is captured
(`policy`): max(FLOOR_ULPS units of roundoff of the call's dtype, GROWTH x the output's error against the reference at
capture), so a float16 model is judged by float16's precision and an output that is inherently noisy (an Adam update
where the second moment is tiny) keeps the headroom it had, and no more.
"""
from __future__ import annotations
import base64, math
from typing import Any
import numpy as np

FULL_LIMIT = 2048
SAMPLE = 2048
QUANTILES = (0.0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0)
UNIT_ROUNDOFF = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float32": 2.0 ** -24, "float64": 2.0 ** -53}
FLOOR_ULPS = 4
GROWTH = 4.0

def _enc(a: np.ndarray) -> str: return base64.b64encode(a.tobytes()).decode()

def summarize(a: np.ndarray, dtype: str) -> dict[str, Any]:
  """One output, compactly (see the module doc). `a`: float64 or int64 (replay.execute.calls.host_array)."""
  flat = a.reshape(-1)
  stride = 1 if flat.size <= FULL_LIMIT else math.ceil(flat.size / SAMPLE)
  sample = flat[::stride]
  d: dict[str, Any] = {"dtype": dtype, "shape": list(a.shape), "stride": stride, "kind": "int" if a.dtype.kind in "iub" else "float"}
  if d["kind"] == "int":
    d["values"] = _enc(sample.astype("<i8"))
    return d
  d["values"] = _enc(sample.astype("<f8"))
  fin = flat[np.isfinite(flat)]
  d["nonfinite"] = int(flat.size - fin.size)
  if fin.size:
    d["quantiles"] = [float(q) for q in np.quantile(fin, QUANTILES)]
    d["mean"], d["l2"] = float(fin.mean()), float(np.sqrt(np.square(fin).sum()))
  return d

def values(s: dict) -> np.ndarray:
  """The stored elements of a summary (ValueError for a malformed one)."""
  if not isinstance(s, dict) or not isinstance(s.get("values"), str): raise ValueError("an output summary without values")
  raw = base64.b64decode(s["values"], validate=True)
  return np.frombuffer(raw, "<i8" if s.get("kind") == "int" else "<f8")

def rel_err(a: np.ndarray, b: np.ndarray) -> float:
  """||a - b|| / ||b|| over the finite elements; inf when NaN/inf do not sit at the same places with the same values."""
  fa, fb = np.isfinite(a), np.isfinite(b)
  if (fa != fb).any() or not np.array_equal(a[~fa], b[~fb], equal_nan=True): return math.inf
  num = float(np.sqrt(np.square(a[fa] - b[fb]).sum()))
  if num == 0.0: return 0.0
  den = float(np.sqrt(np.square(b[fb]).sum()))
  return num / den if den > 0 else math.inf

def unit_roundoff(*dtype_names: str) -> float:
  """The coarsest unit roundoff of the named dtypes (float32 for a name with none: an int output)."""
  return max(UNIT_ROUNDOFF.get(n, UNIT_ROUNDOFF["float32"]) for n in dtype_names)

def policy(call_dtype: str, out: dict, ref_err: float) -> dict[str, Any]:
  """The tolerance an output is judged with from now on (stored with it at capture)."""
  floor = FLOOR_ULPS * unit_roundoff(call_dtype, out["dtype"])
  tol = max(floor, GROWTH * ref_err) if math.isfinite(ref_err) else floor
  return {"tol": tol, "ref_err": ref_err, "rule": f"max({FLOOR_ULPS} units of roundoff of {call_dtype}, {GROWTH:g} x the error "
                                                     f"against the float64 reference at capture)"}

def _beyond(a: np.ndarray, b: np.ndarray, tol: float) -> np.ndarray:
  """Positions (in the stored elements) where a and b differ by more than tol x b's largest magnitude."""
  scale = max(float(np.abs(b[np.isfinite(b)]).max(initial=0.0)), 1e-30)
  return np.flatnonzero(~np.isclose(a, b, rtol=0.0, atol=tol * scale, equal_nan=True))

def compare_output(name: str, new: dict, stored: dict, ref: dict | None, call_dtype: str,
                   names: tuple[str, str] = ("current", "stored")) -> list[dict]:
  """Findings ({"kind": wrong|mismatch, ...}) for one output: `new`, `stored` and `ref` are summaries of the current
  output, the stored one (with its policy) and the reference's (or None)."""
  shape = list(stored["shape"])
  if list(new["shape"]) != shape or new["kind"] != stored["kind"] or int(new["stride"]) != int(stored["stride"]):
    return [{"kind": "mismatch", "output": name, "where": f"output {name!r}: {new['kind']} of shape {list(new['shape'])} now, "
                                                        f"{stored['kind']} of shape {shape} stored"}]
  stride = int(stored["stride"])
  old, cur = values(stored), values(new)
  refs = values(ref) if ref is not None and list(ref["shape"]) == shape and int(ref["stride"]) == stride else None
  label = f"output {name!r} ({stored['dtype']}, shape {shape})"
  at = lambda i: [int(x) for x in np.unravel_index(int(i) * stride, shape)] if shape else []
  found: list[dict] = []
  if stored["kind"] == "int":
    if (cur != old).any():
      i = int(np.flatnonzero(cur != old)[0])
      off_ref = refs is not None and bool((cur != refs.astype(np.int64)).any()) and not bool((old != refs.astype(np.int64)).any())
      found.append({"kind": "wrong" if off_ref else "mismatch", "output": name, "n_diff": int((cur != old).sum()), "first_diff": at(i),
                    "where": f"{label}: {int(cur[i])} {names[0]}, {int(old[i])} {names[1]} at {at(i)}"
                             + (f", the reference says {int(refs[i])}" if refs is not None else "")})
    return found
  pol: dict = stored["policy"] if isinstance(stored.get("policy"), dict) else {}
  tol = float(pol.get("tol", FLOOR_ULPS * unit_roundoff(call_dtype, stored["dtype"])))
  at_capture = pol.get("ref_err")
  def finding(kind: str, base: np.ndarray, e: float, what: str) -> dict:
    bad = _beyond(cur, base, tol)
    return {"kind": kind, "output": name, "max_rel_err": e, "tolerance": tol, "max_abs_err": _max_abs(cur, base), "n_diff": int(bad.size),
            "first_diff": at(bad[0]) if bad.size else None, "where": f"{label}: {what}: relative error {e:.3g} > tolerance {tol:.3g}"}
  if refs is not None and (e := rel_err(cur, refs)) > tol:
    f = finding("wrong", refs, e, f"{names[0]} vs the float64 reference")
    if isinstance(at_capture, float): f["where"] += f" (the {names[1]} outputs: {at_capture:.3g})"
    found.append(f)
  if (e := rel_err(cur, old)) > tol: found.append(finding("mismatch", old, e, f"{names[0]} vs {names[1]}"))
  return found

def _max_abs(a: np.ndarray, b: np.ndarray) -> float:
  f = np.isfinite(a) & np.isfinite(b)
  return float(np.abs(a[f] - b[f]).max(initial=0.0))

def verdict(findings: list[dict], compared: list[str], extra: dict | None = None) -> dict[str, Any]:
  """A job's verdict from its findings: wrong before mismatch; equivalent when there is none."""
  res: dict[str, Any] = {**(extra or {}), "judged": "model call", "compared_outputs": compared}
  if not findings:
    return {**res, "verdict": "equivalent"}
  worst = next((f for f in findings if f["kind"] == "wrong"), findings[0])
  return {**res, "verdict": worst["kind"], "where": worst["where"], "output": worst["output"], "max_rel_err": worst.get("max_rel_err"),
          "max_abs_err": worst.get("max_abs_err"), "n_diff": worst.get("n_diff"), "first_diff": worst.get("first_diff"),
          "tolerance": worst.get("tolerance"), "findings": findings[:8]}

def summaries(outputs: dict[str, np.ndarray], dtypes: dict[str, str]) -> dict[str, dict]:
  return {k: summarize(a, dtypes.get(k, a.dtype.name)) for k, a in outputs.items()}

def judge(spec: dict, stored: dict[str, dict], new: dict[str, dict], ref: dict[str, dict] | None, extra: dict | None = None,
          names: tuple[str, str] = ("current", "stored")) -> dict[str, Any]:
  """The verdict of one call: every stored output against the current one and the reference (summaries)."""
  findings: list[dict] = []
  for name in sorted(stored):
    if name not in new: findings.append({"kind": "mismatch", "output": name, "where": f"output {name!r}: stored, no longer returned by the call"})
    else: findings += compare_output(name, new[name], stored[name], (ref or {}).get(name), spec["dtype"], names)
  findings += [{"kind": "mismatch", "output": n, "where": f"output {n!r}: returned now, not stored"} for n in sorted(set(new) - set(stored))]
  return verdict(findings, sorted(stored), extra)

def judge_job(job: dict, device: str) -> dict[str, Any]:
  """A model-level job (replay/levels/model.py build_job): the call's numbers on `device` (the replay's run when it ran
  there, else run now) against the stored ones and the float64 twin (run now on NUMPY, or the one stored at capture when
  the replay found the call's graphs and host data unchanged), judged. A paired job (`replay diff`) judges the two
  stored runs: nothing is run."""
  from replay.execute.calls import REFERENCE_DEVICE, run_call  # (the call runner imports the models)
  spec = job["spec"]
  if job.get("paired"):
    return judge(spec, job["stored"], job["numbers"], job.get("twin"),
                 {"device": job.get("numbers_device"), "reference": "each run's float64 twin, stored at its capture; old and new runs compared"},
                 ("new capture", "old capture"))
  if job.get("numbers") is not None and job.get("numbers_device") == device: new = job["numbers"]
  else:
    run = run_call(spec, device, collect=False)
    new = summaries(run.outputs, run.dtypes)
  if job.get("twin") is not None:
    return judge(spec, job["stored"], new, job["twin"],
                 {"device": device, "reference": "the call's float64 twin stored at capture (the call's graphs and host data are unchanged)"})
  ref = run_call(spec, REFERENCE_DEVICE, dtype="float64", collect=False)
  return judge(spec, job["stored"], new, summaries(ref.outputs, ref.dtypes),
               {"device": device, "reference": f"the same call in float64 on {REFERENCE_DEVICE}, with the current code"})

__all__ = ["judge", "judge_job", "summaries", "FULL_LIMIT", "SAMPLE", "GROWTH", "FLOOR_ULPS", "compare_output", "policy", "rel_err",
           "summarize", "values", "verdict"]
