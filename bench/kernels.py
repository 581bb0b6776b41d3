#!/usr/bin/env python3
"""Kernel benchmarks on an OpenCL device: copy (the bandwidth ceiling), add, softmax, sum, matmul.

Every number is kernel time from OpenCL profiling events (the median of --runs runs after
--warmup runs), summed over the kernels one operation schedules, shown as GB/s (bytes the
operation must move at least once: inputs read once, outputs written once) or TFLOPS (2*M*N*K).
On a CPU device (PoCL) the default size is small and numpy runs the same operations for
comparison. Prints a Markdown table with the device and date, then one JSON line.

  python bench/kernels.py                      # TINYSCHED_DEVICE / first GPU / first device
  python bench/kernels.py --device OPENCL:1 --size large --runs 20
  python bench/kernels.py --dtype float16 --torch   # half (bfloat16 too): checked against float32 math on the same
                                                    # rounded inputs; torch CUDA beside it where it exists

--dtype sets the element type of add, softmax, sum and matmul (copy stays float4). Checks for a narrow dtype compare
with numpy in float32 on the inputs rounded to that dtype, at that dtype's precision. --torch times the same
operation with torch on CUDA (events, same median) when torch with CUDA is importable, else says why not.
"""
from __future__ import annotations
import argparse, datetime, json, os, platform, statistics, sys, time
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tinysched import Tensor, dtypes  # noqa: E402
from tinysched.ops import Ops  # noqa: E402
from tinysched.device import Device, Buffer  # noqa: E402

SIZES = {
  # name: (elementwise/sum elements, softmax rows=cols, matmul M=N=K)
  "large": (64 * 1024 * 1024, 4096, 4096),
  "small": (4 * 1024 * 1024, 1024, 512),
}

COPY_SRC = """__kernel void copy_f4(__global float4* restrict dst, __global const float4* restrict src) {
  int i = get_global_id(0);
  dst[i] = src[i];
}
"""

def median_time(fn, warmup: int, runs: int) -> float:
  for _ in range(warmup): fn()
  return statistics.median(fn() for _ in range(runs))

def time_schedule(backend, sched) -> float:
  """Kernel time of one run of a schedule (seconds, profiling events)."""
  t = 0.0
  for si in sched:
    if si.ast.op is not Ops.SINK: raise RuntimeError(f"benchmark schedules must be kernels only, got {si.ast.op}")
    t += backend.run(si.ast, list(si.bufs), {})
  return t

def prepare(out: Tensor):
  """Schedule `out`, run it once (so inputs exist and kernels compile), return the kernel schedule."""
  sched = [si for si in out.schedule()]
  from tinysched.realize import run_schedule
  run_schedule(sched, plan_memory=False)
  return [si for si in sched if si.ast.op is Ops.SINK]

def numpy_time(fn, warmup: int, runs: int) -> float:
  def one():
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t
  return median_time(one, warmup, runs)

def _torch(want: bool):
  """torch, when --torch was asked for and CUDA is usable; else None (and why, on stderr)."""
  if not want: return None
  try: import torch
  except ImportError:
    print("bench/kernels.py: --torch: torch is not installed", file=sys.stderr)
    return None
  if not torch.cuda.is_available():
    print("bench/kernels.py: --torch: torch has no CUDA device here", file=sys.stderr)
    return None
  torch.backends.cuda.matmul.allow_tf32 = False  # fp32 matmul as fp32 (no TF32), as ours
  return torch

def _torch_dtype(name: str):
  import torch
  return getattr(torch, name)

def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--device", default=None, help="OPENCL or OPENCL:<n> (default: TINYSCHED_DEVICE if it is OpenCL, else OPENCL)")
  ap.add_argument("--size", choices=("auto", "large", "small"), default="auto", help="auto: small on a CPU device, large otherwise")
  ap.add_argument("--runs", type=int, default=10)
  ap.add_argument("--warmup", type=int, default=2)
  ap.add_argument("--no-numpy", action="store_true", help="skip the numpy comparison on CPU devices")
  ap.add_argument("--only", default="", help="comma-separated subset of copy,add,softmax,sum,matmul")
  ap.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32", help="element type (copy stays float32)")
  ap.add_argument("--torch", action="store_true", help="also time torch on CUDA (when available)")
  args = ap.parse_args(argv)

  try:
    from tinysched.runtime.opencl import opencl_available
  except ImportError:
    print("bench/kernels.py: pyopencl is not installed (pip install pyopencl)", file=sys.stderr)
    return 2
  if not opencl_available():
    print("bench/kernels.py: no OpenCL device found (install an ICD such as pocl-opencl-icd, or set OCL_ICD_FILENAMES)", file=sys.stderr)
    return 2
  env_dev = os.environ.get("TINYSCHED_DEVICE", "")
  device = args.device or (env_dev if env_dev.upper().startswith("OPENCL") else "OPENCL")
  device = Device.canonicalize(device)
  Device.DEFAULT = device
  backend = Device[device]
  tgt = backend.target
  size = args.size if args.size != "auto" else ("large" if tgt.is_gpu else "small")
  n_elem, sm_n, mm_n = SIZES[size]
  with_numpy = not tgt.is_gpu and not args.no_numpy
  only = set(x.strip() for x in args.only.split(",") if x.strip())
  want = lambda name: not only or name in only  # noqa: E731
  rows: list[dict] = []
  rng = np.random.default_rng(0)
  dt = getattr(dtypes, args.dtype)
  isz = dt.itemsize
  # tolerance for a narrow dtype's result, and the inputs as that dtype's values (what the device really computes on)
  tol = {"float32": 1e-3, "float16": 2e-2, "bfloat16": 6e-2}[args.dtype]
  def narrow(a: np.ndarray) -> np.ndarray: return Tensor(a).cast(dt).realize()
  def back(a: np.ndarray) -> np.ndarray: return Tensor(a).cast(dt).cast(dtypes.float32).numpy()
  th = _torch(args.torch)
  def torch_time(fn) -> float | None:
    if th is None: return None
    import torch
    for _ in range(args.warmup): fn()
    ts = []
    for _ in range(args.runs):
      a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
      a.record(); fn(); b.record(); torch.cuda.synchronize()
      ts.append(a.elapsed_time(b) / 1e3)
    return statistics.median(ts)

  def record(op: str, shape: str, secs: float, amount: float, unit: str, np_secs: float | None, ok: bool | None, kernels: int,
             torch_secs: float | None = None) -> None:
    rate = amount / secs / (1e9 if unit == "GB/s" else 1e12)
    row = {"op": op, "shape": shape, "dtype": "float32" if op == "copy" else args.dtype, "kernels": kernels, "ms": secs * 1e3, unit: rate, "ok": ok}
    if torch_secs is not None:
      row["torch_ms"] = torch_secs * 1e3
      row["torch_" + unit] = amount / torch_secs / (1e9 if unit == "GB/s" else 1e12)
    if np_secs is not None:
      row["numpy_ms"] = np_secs * 1e3
      row["numpy_" + unit] = amount / np_secs / (1e9 if unit == "GB/s" else 1e12)
    rows.append(row)
    print(f"  {op:8s} {shape:18s} {secs*1e3:9.3f} ms  {rate:9.2f} {unit}" + (f"   numpy {np_secs*1e3:9.3f} ms" if np_secs else "") +
          (f"   torch {torch_secs*1e3:9.3f} ms" if torch_secs else ""), file=sys.stderr, flush=True)

  print(f"device {device}: {tgt.name} ({tgt.vendor}, driver {tgt.driver_version}), size {size}", file=sys.stderr)

  # copy: a hand-written float4 kernel, the bandwidth ceiling
  if want("copy"):
    nbytes = n_elem * 4
    src = Buffer(device, n_elem, dtypes.float32).allocate().copyin(rng.standard_normal(n_elem, dtype=np.float32))
    dst = Buffer(device, n_elem, dtypes.float32).allocate()
    secs = median_time(lambda: backend.run_source("copy_f4", COPY_SRC, [dst, src], (n_elem // 4,), (256,) if tgt.is_gpu else None),
                       args.warmup, args.runs)
    ok = bool(np.array_equal(dst.numpy()[:1024], src.numpy()[:1024]))
    np_secs = None
    if with_numpy:
      a, b = np.empty(n_elem, np.float32), rng.standard_normal(n_elem, dtype=np.float32)
      np_secs = numpy_time(lambda: np.copyto(a, b), args.warmup, args.runs)
    record("copy", f"{n_elem}", secs, 2 * nbytes, "GB/s", np_secs, ok, 1)
    del src, dst

  if want("add"):
    an, bn = rng.standard_normal(n_elem, dtype=np.float32), rng.standard_normal(n_elem, dtype=np.float32)
    a, b = narrow(an), narrow(bn)
    out = a + b
    sched = prepare(out)
    secs = median_time(lambda: time_schedule(backend, sched), args.warmup, args.runs)
    ok = bool(np.allclose(out.cast(dtypes.float32).numpy()[:4096], back(an[:4096]) + back(bn[:4096]), rtol=tol, atol=tol))
    np_secs = None
    if with_numpy:
      o = np.empty_like(an)
      np_secs = numpy_time(lambda: np.add(an, bn, out=o), args.warmup, args.runs)
    tt = None
    if th is not None:
      ta, tb = (th.tensor(v, device="cuda").to(_torch_dtype(args.dtype)) for v in (an, bn))
      tt = torch_time(lambda: ta + tb)
    record("add", f"{n_elem}", secs, 3 * n_elem * isz, "GB/s", np_secs, ok, len(sched), tt)
    del a, b, out, sched

  if want("softmax"):
    xn = rng.standard_normal((sm_n, sm_n), dtype=np.float32)
    x = narrow(xn)
    out = x.softmax(-1)
    sched = prepare(out)
    secs = median_time(lambda: time_schedule(backend, sched), args.warmup, args.runs)
    xr = back(xn[:8]) if args.dtype != "float32" else xn
    def np_softmax(v=xn):
      e = np.exp(v - v.max(1, keepdims=True))
      return e / e.sum(1, keepdims=True)
    ok = bool(np.allclose(out.cast(dtypes.float32).numpy()[:8], np_softmax(xr[:8]), rtol=1e-4 if args.dtype == "float32" else tol,
                          atol=1e-6 if args.dtype == "float32" else tol / 10))
    np_secs = numpy_time(np_softmax, args.warmup, args.runs) if with_numpy else None
    tt = None
    if th is not None:
      tx = th.tensor(xn, device="cuda").to(_torch_dtype(args.dtype))
      tt = torch_time(lambda: tx.softmax(-1))
    record("softmax", f"{sm_n}x{sm_n}", secs, 2 * sm_n * sm_n * isz, "GB/s", np_secs, ok, len(sched), tt)
    del x, out, sched

  if want("sum"):
    an = rng.standard_normal(n_elem, dtype=np.float32)
    a = narrow(an)
    out = a.sum() if args.dtype == "float32" else a.cast(dtypes.float32).sum()  # a narrow sum of 64M elements would round away
    sched = prepare(out)
    secs = median_time(lambda: time_schedule(backend, sched), args.warmup, args.runs)
    ref = (back(an) if args.dtype != "float32" else an).astype(np.float64).sum()
    ok = bool(np.isclose(out.item(), ref, rtol=1e-3, atol=1e-1 if args.dtype == "float32" else 2.0))
    np_secs = numpy_time(lambda: an.sum(), args.warmup, args.runs) if with_numpy else None
    tt = None
    if th is not None:
      ts_ = th.tensor(an, device="cuda").to(_torch_dtype(args.dtype))
      tt = torch_time(lambda: ts_.float().sum() if args.dtype != "float32" else ts_.sum())
    record("sum", f"{n_elem}", secs, n_elem * isz, "GB/s", np_secs, ok, len(sched), tt)
    del a, out, sched

  if want("matmul"):
    an, bn = rng.standard_normal((mm_n, mm_n), dtype=np.float32), rng.standard_normal((mm_n, mm_n), dtype=np.float32)
    a, b = narrow(an), narrow(bn)
    out = a @ b
    sched = prepare(out)
    runs = max(3, args.runs // 2) if not tgt.is_gpu else args.runs
    secs = median_time(lambda: time_schedule(backend, sched), args.warmup, runs)
    ar, br = (back(an[:4]), back(bn)) if args.dtype != "float32" else (an[:4], bn)
    # a K-long dot product of unit normals is ~sqrt(K): a narrow result carries that times its precision
    ok = bool(np.allclose(out.cast(dtypes.float32).numpy()[:4], ar @ br, rtol=1e-3 if args.dtype == "float32" else tol,
                          atol=1e-3 if args.dtype == "float32" else tol * np.sqrt(mm_n)))
    np_secs = numpy_time(lambda: an @ bn, args.warmup, runs) if with_numpy else None
    tt = None
    if th is not None:
      ta, tb = (th.tensor(v, device="cuda").to(_torch_dtype(args.dtype)) for v in (an, bn))
      tt = torch_time(lambda: ta @ tb)
    record("matmul", f"{mm_n}x{mm_n}x{mm_n}", secs, 2 * mm_n ** 3, "TFLOPS", np_secs, ok, len(sched), tt)
    del a, b, out, sched

  # *** report ***
  ceiling = next((r["GB/s"] for r in rows if r["op"] == "copy"), None)
  date = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
  print(f"\n### tinysched kernels on {tgt.name}\n")
  print(f"{date} · {device} · {tgt.vendor} · driver {tgt.driver_version} · {'GPU' if tgt.is_gpu else 'CPU'} · size `{size}` · "
        f"median of {args.runs} runs after {args.warmup} warm-up · host {platform.node()}\n")
  with_torch = any("torch_ms" in r for r in rows)
  head = "| op | shape | dtype | kernels | time (ms) | rate | % of copy |" + (" numpy (ms) | numpy rate |" if with_numpy else "") + \
         (" torch CUDA (ms) | torch rate |" if with_torch else "") + " check |"
  print(head)
  print("|" + "---|" * (head.count("|") - 1))
  for r in rows:
    unit = "GB/s" if "GB/s" in r else "TFLOPS"
    pct = f"{100 * r['GB/s'] / ceiling:.0f}%" if unit == "GB/s" and ceiling else ""
    line = f"| {r['op']} | {r['shape']} | {r['dtype']} | {r['kernels']} | {r['ms']:.3f} | {r[unit]:.2f} {unit} | {pct} |"
    if with_numpy:
      line += f" {r['numpy_ms']:.3f} | {r['numpy_' + unit]:.2f} {unit} |" if "numpy_ms" in r else " | |"
    if with_torch:
      line += f" {r['torch_ms']:.3f} | {r['torch_' + unit]:.2f} {unit} |" if "torch_ms" in r else " | |"
    line += f" {'ok' if r['ok'] else 'MISMATCH'} |"
    print(line)
  print("\nGB/s counts the bytes an operation must move (inputs once, outputs once); softmax reads its input more than once.")
  print(json.dumps({"bench": "tinysched-kernels", "date": date, "device": device, "name": tgt.name, "vendor": tgt.vendor,
                    "driver": tgt.driver_version, "is_gpu": tgt.is_gpu, "size": size, "runs": args.runs, "results": rows}))
  return 0 if all(r["ok"] is not False for r in rows) else 1

if __name__ == "__main__":
  sys.exit(main())
