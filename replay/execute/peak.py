"""A device's peak, measured: what a throughput figure of the execution check is held against.

Two hand-written kernels, launched and timed through the same path as the kernels under test (the device's
`run_source` and its profiling events):
- copy: float4 loads and stores over buffers from 64 KiB (cache-resident) to 64 MiB, bytes read + written per second;
  the best size counts, so a kernel whose data sits in a cache is held against the cache's bandwidth, not memory's.
- FMA: 16 independent 16-wide fma chains per work-item (no dependence between them, as wide as the widest vector unit
  PoCL or a GPU compiler will use), 2 FLOPs per lane and fma, float32 and, where the device has it, float16; the loop
  count is doubled until a launch takes at least MIN_LAUNCH_S.
Each is the best of ROUNDS launches. A GFLOP/s or GB/s figure above these is not a result but a bug, in the cost model
(tinysched/cost.py) or in the timer: replay/execute/timing.py re-measures the peak (the cached one may have been taken
on a loaded machine) and times the kernel again before it refuses such a figure.

The measurement is cached per device (its name, vendor and driver) in `cache_root()/peak`, and only ever raised: a
later measurement that comes out lower (a busier machine) does not lower it. A check's first timed job measures it
where no earlier run did, one worker at a time (a lock file beside the entry), so the figure may start low on a busy
machine; a kernel above it makes the next measurement, which keeps the higher value.
"""
from __future__ import annotations
import contextlib, fcntl, hashlib, json, time
from dataclasses import dataclass
from typing import Any
import numpy as np
from tinysched.device import Buffer, Device
from tinysched.dtype import dtypes
from tinysched.helpers import cache_root, write_cache_entry

ROUNDS = 5
MIN_LAUNCH_S = 2e-3
COPY_SIZES = tuple(1 << k for k in range(12, 23, 2))  # float4 elements: 64 KiB .. 64 MiB per buffer
FMA_THREADS = 1 << 16

@dataclass(frozen=True)
class Peak:
  device: str
  gflops: float  # FLOP/s / 1e9: the FMA kernel, the better of float32 and float16
  gbps: float    # bytes/s / 1e9: the copy kernel at its best size
  def fraction(self, gflops: float, gbps: float) -> float:
    """How close a launch came to the device's roof: the larger of its share of peak FLOP/s and of peak bandwidth."""
    return max(gflops / self.gflops if self.gflops > 0 else 0.0, gbps / self.gbps if self.gbps > 0 else 0.0)
  def to_dict(self) -> dict[str, Any]: return {"device": self.device, "gflops": round(self.gflops, 3), "gbps": round(self.gbps, 3)}

_COPY = "__kernel void peak_copy(__global const float4* a, __global float4* b) { int i = get_global_id(0); b[i] = a[i]; }"

def _fma_source(half: bool) -> str:
  t, ext = ("half16", "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n") if half else ("float16", "")
  chains = range(16)
  init = " ".join(f"{t} x{j} = ({t})(s + {j});" for j in chains)
  body = " ".join(f"x{j} = fma(x{j}, m, c);" for j in chains)
  total = " + ".join(f"x{j}" for j in chains)
  scal = "half" if half else "float"
  # every lane of every chain reaches out, so no fma can be dropped; m and c come from the host, so none can be folded
  lanes = " + ".join(f"r.s{k:x}" for k in range(16))
  return (f"{ext}__kernel void peak_fma(__global {scal}* out, int n, {scal} m, {scal} c) {{ {scal} s = ({scal})(get_global_id(0) & 7);"
          f" {init} for (int i = 0; i < n; i++) {{ {body} }} {t} r = {total}; out[get_global_id(0)] = {lanes}; }}")

def _best(fn, rounds: int = ROUNDS) -> float:
  return min(fn() for _ in range(rounds))

def _measure(device: str) -> Peak:
  be: Any = Device[device]  # (a backend that runs sources: peak() asks before it measures)
  gbps = 0.0
  for n in COPY_SIZES:
    a, b = Buffer(device, n * 4, dtypes.float32), Buffer(device, n * 4, dtypes.float32)
    a.allocate(); b.allocate()
    be.run_source("peak_copy", _COPY, [a, b], (n,))  # warm: compiled, pages touched
    t = _best(lambda: be.run_source("peak_copy", _COPY, [a, b], (n,)))
    if t > 0: gbps = max(gbps, 2 * n * 16 / t / 1e9)
  gflops = 0.0
  for half in (False, True) if getattr(getattr(be, "target", None), "has_fp16", False) else (False,):
    out = Buffer(device, FMA_THREADS, dtypes.float16 if half else dtypes.float32)
    out.allocate()
    src, sc = _fma_source(half), (np.float16 if half else np.float32)
    n = 8
    while True:
      args = (np.int32(n), sc(0.999), sc(0.001))
      t = _best(lambda: be.run_source("peak_fma", src, [out], (FMA_THREADS,), None, args))
      if t >= MIN_LAUNCH_S or n >= 1 << 16: break
      n *= 2
    if t > 0: gflops = max(gflops, FMA_THREADS * n * 16 * 16 * 2 / t / 1e9)
  return Peak(device, gflops, gbps)

def _ident(device: str) -> str:
  be = Device[device]
  t = getattr(be, "target", None)
  return json.dumps([device, getattr(t, "name", None), getattr(t, "vendor", None), getattr(t, "version", None),
                     getattr(t, "driver_version", None)], sort_keys=True, default=str)

def _path(device: str) -> Any:
  return cache_root() / "peak" / (hashlib.sha256(_ident(device).encode()).hexdigest()[:32] + ".json")

_known: dict[str, Peak] = {}

def _read(device: str) -> Peak | None:
  try:
    d = json.loads(_path(device).read_text())
    if d.get("ident") != _ident(device) or not all(isinstance(d.get(k), (int, float)) and d[k] > 0 for k in ("gflops", "gbps")): return None
    return Peak(device, float(d["gflops"]), float(d["gbps"]))
  except (OSError, ValueError, AttributeError): return None

def peak(device: str, fresh: bool = False) -> Peak | None:
  """The device's measured peak (None: a device without hand-written kernels, the interpreter). Measured once per
  device and cached; `fresh`: measure again now (kept only where it is higher)."""
  if not hasattr(Device[device], "run_source"): return None
  have = None if fresh else _known.get(device)
  if have is None:
    with _measuring(device):  # one process measures at a time (the workers of a check start together); the others wait
      have = (None if fresh else _read(device)) or _measured(device)
  _known[device] = have
  return have

def _measured(device: str) -> Peak:
  got, had = _measure(device), _read(device)
  if had is not None: got = Peak(device, max(got.gflops, had.gflops), max(got.gbps, had.gbps))
  try: write_cache_entry(_path(device), json.dumps({"ident": _ident(device), "gflops": got.gflops, "gbps": got.gbps,
                                                     "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}).encode())
  except OSError: pass  # (a read-only cache: measured again next process)
  return got

@contextlib.contextmanager
def _measuring(device: str):
  path = _path(device).with_suffix(".lock")
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a")
  except OSError:
    yield
    return
  with f:
    fcntl.flock(f, fcntl.LOCK_EX)
    try: yield
    finally: fcntl.flock(f, fcntl.LOCK_UN)

__all__ = ["Peak", "peak", "ROUNDS"]
