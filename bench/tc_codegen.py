"""The code generator's tensor-core kernels (Opt TC, tinysched/codegen/tensor_core.py) on an NVIDIA GPU, beside the same
kernel without tensor cores (the heuristic for the device with `tensor_cores` cleared) and torch's matmul, in one process.

Per case: the heuristic's opts, each side's kernel time (median of --runs, OpenCL profiling events; torch by CUDA events),
TFLOPS as 2*M*N*K*batch, and the error of our result against torch's float32 product of the same fp16/bf16 inputs (max
|diff| / max |ref|). Then variants of the 4096 fp16 kernel: each tile (Opt TC amounts) and one staging step (no cp.async).

  OCL_ICD_VENDORS=/usr/local/nvidia/lib64/libnvidia-opencl.so.1 TINYSCHED_DEVICE=OPENCL python3 bench/tc_codegen.py [--cases ...]

Prints JSON lines; writes $OUT/tc_codegen.json when OUT is set.
"""
from __future__ import annotations
import argparse, dataclasses, json, os, statistics, sys, time
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np

# name: (batch, M, K, N, dtype, A stored transposed (K, M), B stored transposed (N, K))
CASES = {"mm4096_f16": (1, 4096, 4096, 4096, "float16", False, False), "mm4096_bf16": (1, 4096, 4096, 4096, "bfloat16", False, False),
         "mm4096_f16_bt": (1, 4096, 4096, 4096, "float16", False, True), "mm4096_f16_at": (1, 4096, 4096, 4096, "float16", True, False),
         "mm1024_f16": (1, 1024, 1024, 1024, "float16", False, False), "bmm_f16": (32, 512, 64, 512, "float16", False, False),
         "mm8192_f16": (1, 8192, 8192, 8192, "float16", False, False)}

def _torch_time(fn, runs: int) -> float:
  import torch
  for _ in range(3): fn()
  torch.cuda.synchronize()
  ts = []
  for _ in range(runs):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); fn(); e.record(); torch.cuda.synchronize()  # noqa: E702
    ts.append(s.elapsed_time(e) * 1e-3)
  return statistics.median(ts)

def run_case(name: str, runs: int, variants: bool) -> dict:
  import torch
  from tinysched import Tensor, Device
  from tinysched.dtype import dtypes
  from tinysched.ops import Ops
  from tinysched.realize import run_schedule
  from tinysched.codegen import heuristic, tensor_core, tc_match
  from tinysched.codegen.kernel import Kernel, Opt, OptOps
  B, M, K, N, dt, at, bt = CASES[name]
  dev = Device[Device.DEFAULT]
  tdt = getattr(torch, dt)
  g = torch.Generator(device="cuda").manual_seed(0)
  ta = torch.randn(*((B,) if B > 1 else ()), *((K, M) if at else (M, K)), device="cuda", generator=g).to(tdt)
  tb = torch.randn(*((B,) if B > 1 else ()), *((N, K) if bt else (K, N)), device="cuda", generator=g).to(tdt)
  def host(t):  # the bits, as our Tensor takes them (bfloat16 as its uint16 bits)
    return t.cpu().view(torch.int16).numpy().view(np.uint16) if dt == "bfloat16" else t.cpu().numpy()
  tt = lambda t: t.transpose(-1, -2)  # noqa: E731
  A = Tensor(host(ta), dtype=getattr(dtypes, dt)) if dt != "bfloat16" else Tensor(host(ta)).bitcast(dtypes.bfloat16)
  Bt = Tensor(host(tb), dtype=getattr(dtypes, dt)) if dt != "bfloat16" else Tensor(host(tb)).bitcast(dtypes.bfloat16)
  A, Bt = A.realize(), Bt.realize()
  out = (A.transpose(-1, -2) if at else A) @ (Bt.transpose(-1, -2) if bt else Bt)
  sched = out.schedule()
  run_schedule(sched, plan_memory=False)
  si = [s for s in sched if s.ast.op is Ops.SINK][-1]
  ref = ((tt(ta) if at else ta).float() @ (tt(tb) if bt else tb).float())
  refn = ref.cpu().numpy()
  flops = 2 * B * M * N * K
  def got() -> np.ndarray:
    x = si.bufs[0].numpy()
    if dt == "bfloat16": x = (x.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return x.astype(np.float32).reshape(refn.shape)
  def measure(opts) -> dict:
    try:
      dev.run(si.ast, list(si.bufs), {}, list(opts))
      err = float(np.abs(got() - refn).max() / np.abs(refn).max())
      t = statistics.median(dev.run(si.ast, list(si.bufs), {}, list(opts)) for _ in range(runs))
      return {"opts": [str(o) for o in opts], "us": round(t * 1e6, 1), "tflops": round(flops / t / 1e12, 2), "max_rel_err": err}
    except Exception as e:  # noqa: BLE001  (a variant that does not build is a result to report)
      return {"opts": [str(o) for o in opts], "error": f"{type(e).__name__}: {str(e)[:300]}"}
  res: dict = {"case": name, "shape": [B, M, K, N], "dtype": dt, "a_transposed": at, "b_transposed": bt}
  res["ours_tc"] = measure(heuristic.default_opts(si.ast, dev.target))
  res["ours_no_tc"] = measure(heuristic.default_opts(si.ast, dataclasses.replace(dev.target, tensor_cores="")))
  res["torch"] = {"us": round((t := _torch_time(lambda: (tt(ta) if at else ta) @ (tt(tb) if bt else tb), runs)) * 1e6, 1),
                  "tflops": round(flops / t / 1e12, 2)}
  if "tflops" in res["ours_tc"]: res["ratio_vs_torch"] = round(res["ours_tc"]["tflops"] / res["torch"]["tflops"], 3)
  if variants:
    res["tiles"] = {a: measure([Opt(OptOps.TC, 0, a)]) for a in tc_match.TILES}
    T = tc_match.Tile
    extra = {"128x128w8_s3_swz": T(128, 128, 2, 4, 3, True), "128x128w8_s2_swz": T(128, 128, 2, 4, 2, True),
             "128x128w4_s2": T(128, 128, 2, 2, 2, False), "256x128w8_s2_swz": T(256, 128, 4, 2, 2, True),
             "128x128w8_s1": T(128, 128, 2, 4, 1, False), "64x128w4_s3_swz": T(64, 128, 2, 2, 3, True),
             "128x64w4_s4_swz": T(128, 64, 2, 2, 4, True)}
    k = Kernel(si.ast)
    mt = tc_match.match(k)
    res["variants"] = {}
    for vname, tile in extra.items():
      try:
        lm = tensor_core.local_bytes(k, mt, tile)  # type: ignore[arg-type]
        if lm > dev.target.local_mem_size: raise ValueError(f"{lm} bytes of local memory")
        src = tensor_core.render(k, mt, tile, "tc_variant")  # type: ignore[arg-type]
        gs = (N // tile.bn * tile.threads, M // tile.bm, B)
        dev.run_source("tc_variant", src, list(si.bufs), gs, (tile.threads, 1, 1))
        err = float(np.abs(got() - refn).max() / np.abs(refn).max())
        t = statistics.median(dev.run_source("tc_variant", src, list(si.bufs), gs, (tile.threads, 1, 1)) for _ in range(runs))
        res["variants"][vname] = {"us": round(t * 1e6, 1), "tflops": round(flops / t / 1e12, 2), "max_rel_err": err}
      except Exception as e:  # noqa: BLE001
        res["variants"][vname] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
  return res

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--cases", default=",".join(CASES))
  ap.add_argument("--runs", type=int, default=10)
  a = ap.parse_args()
  import torch
  from tinysched import Device
  dev = Device[Device.DEFAULT]
  head = {"date": time.strftime("%Y-%m-%d"), "device": dev.target.name, "tensor_cores": dev.target.tensor_cores, "torch": torch.__version__,
          "card": torch.cuda.get_device_name()}
  print(json.dumps(head), flush=True)
  out = [head]
  for name in a.cases.split(","):
    t0 = time.perf_counter()
    try: r = run_case(name, a.runs, variants=name == "mm4096_f16")
    except Exception as e:  # noqa: BLE001
      r = {"case": name, "error": f"{type(e).__name__}: {str(e)[:400]}"}
    r["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(r), flush=True)
    out.append(r)
  if os.environ.get("OUT"):
    with open(os.path.join(os.environ["OUT"], "tc_codegen.json"), "w") as f: json.dump(out, f, indent=1)

if __name__ == "__main__":
  main()
