"""What an NVIDIA GPU's OpenCL driver offers the code generator (issue 44's first question, before any codegen work):
the platform, whether command buffers (cl_khr_command_buffer, its mutable-dispatch part) are there, and whether warp-level
tensor-core instructions are reachable from OpenCL C through inline PTX: one m16n8k16 fp16 x fp16 -> fp32 `mma.sync`
tile, its fragments loaded by the layout PTX's ISA documents, checked against numpy; and the same tile with A's rows and
columns swapped in the fragment (the planted layout bug issue 44 names), which must come out wrong.

Run where an NVIDIA OpenCL driver is: `OCL_ICD_VENDORS=/usr/local/nvidia/lib64/libnvidia-opencl.so.1 python3 bench/gpu_recon.py`.
Prints one JSON object (and writes it to $OUT/gpu_recon.json when OUT is set).
"""
from __future__ import annotations
import json, os, sys, time
import numpy as np

MMA = r"""
// one warp computes D (16x8, fp32) = A (16x16, fp16, row-major) x B (16x8, fp16, row-major) with one mma.sync;
// the halves are moved as raw bits (ushort): no cl_khr_fp16 arithmetic is needed to feed the tensor cores
#define PACK(lo, hi) ((uint)(lo) | ((uint)(hi) << 16))
__kernel void mma_tile(__global const ushort* A, __global const ushort* B, __global float* D) {
  int lane = get_local_id(0), g = lane >> 2, t = lane & 3;
#ifdef SWAP_A
  #define AT(r, c) A[(c) * 16 + (r)]
#else
  #define AT(r, c) A[(r) * 16 + (c)]
#endif
  uint a0 = PACK(AT(g, t*2), AT(g, t*2+1)), a1 = PACK(AT(g+8, t*2), AT(g+8, t*2+1));
  uint a2 = PACK(AT(g, t*2+8), AT(g, t*2+9)), a3 = PACK(AT(g+8, t*2+8), AT(g+8, t*2+9));
  uint b0 = PACK(B[(t*2)*8 + g], B[(t*2+1)*8 + g]), b1 = PACK(B[(t*2+8)*8 + g], B[(t*2+9)*8 + g]);
  float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  D[g*8 + t*2] = d0; D[g*8 + t*2 + 1] = d1; D[(g+8)*8 + t*2] = d2; D[(g+8)*8 + t*2 + 1] = d3;
}
"""

def main() -> dict:
  import pyopencl as cl
  out: dict = {"date": time.strftime("%Y-%m-%d"), "platforms": []}
  gpu = None
  for p in cl.get_platforms():
    for d in p.get_devices():
      ext = d.extensions.split()
      info = {"platform": p.name, "version": p.version, "device": d.name, "driver": d.driver_version, "opencl_c": d.opencl_c_version,
              "compute_units": d.max_compute_units, "command_buffer": [e for e in ext if "command_buffer" in e],
              "fp16": "cl_khr_fp16" in ext, "subgroups": [e for e in ext if "subgroup" in e], "n_extensions": len(ext)}
      out["platforms"].append(info)
      if gpu is None and d.type & cl.device_type.GPU and "NVIDIA" in p.name: gpu = d
  if gpu is None:
    out["mma"] = "no NVIDIA GPU platform"
    return out
  ctx = cl.Context([gpu])
  q = cl.CommandQueue(ctx)
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((16, 16)).astype(np.float16), rng.standard_normal((16, 8)).astype(np.float16)
  want = a.astype(np.float32) @ b.astype(np.float32)
  mf = cl.mem_flags
  ab = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a.view(np.uint16))
  bb = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b.view(np.uint16))
  for name, opts in (("mma", []), ("mma_swapped_a", ["-DSWAP_A"])):
    try:
      prg = cl.Program(ctx, MMA).build(options=opts)
      d = np.zeros((16, 8), np.float32)
      db = cl.Buffer(ctx, mf.WRITE_ONLY, d.nbytes)
      prg.mma_tile(q, (32,), (32,), ab, bb, db)
      cl.enqueue_copy(q, d, db)
      q.finish()
      err = float(np.abs(d - want).max())
      out[name] = {"max_abs_err": err, "right": bool(np.allclose(d, want, rtol=1e-3, atol=1e-3))}
    except Exception as e:  # noqa: BLE001 (the driver's refusal is the answer)
      out[name] = {"error": f"{type(e).__name__}: {str(e)[:1500]}"}
  return out

if __name__ == "__main__":
  res = main()
  text = json.dumps(res, indent=1)
  print(text)
  if os.environ.get("OUT"):
    with open(os.path.join(os.environ["OUT"], "gpu_recon.json"), "w") as f: f.write(text)
  sys.exit(0)
