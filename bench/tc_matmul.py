"""How far a plain tensor-core matmul written in OpenCL C gets on an NVIDIA GPU (issue 44, before any codegen work): a
hand-written kernel, not the code generator's. 128x128 output tiles per work-group of 8 warps, each warp 64x32 of it as
4x4 `mma.sync.m16n8k16` (fp16 in, fp32 accumulate, inline PTX), operands staged through local memory with 16-byte
loads; no ldmatrix, no cp.async, no double buffering (the steps a codegen Opt would add). Checked against torch's
float32 product of the same fp16 inputs, timed with OpenCL profiling events beside torch's fp16 matmul (CUDA events), in
one process on one card.

`OCL_ICD_VENDORS=/usr/local/nvidia/lib64/libnvidia-opencl.so.1 python3 bench/tc_matmul.py [N]` (N a multiple of 128, default
4096). Prints JSON; writes $OUT/tc_matmul.json when OUT is set.
"""
from __future__ import annotations
import json, os, sys, time
import numpy as np

SRC = r"""
#define BM 128
#define BN 128
#define BK 32
#define PACK(lo, hi) ((uint)(lo) | ((uint)(hi) << 16))
__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void tc_matmul(__global const ushort* A, __global const ushort* B, __global float* C, int M, int N, int K) {
  __local ushort As[BM * BK];   // [m][k]
  __local ushort Bs[BK * BN];   // [k][n]
  int tid = get_local_id(0), warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  int bm = get_group_id(1) * BM, bn = get_group_id(0) * BN;
  int wm = (warp >> 2) * 64, wn = (warp & 3) * 32;
  float acc[4][4][4];
  for (int i = 0; i < 4; i++) for (int j = 0; j < 4; j++) for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;
  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int i = 0; i < 2; i++) {
      int v = tid + i * 256, r = v >> 2, c = (v & 3) * 8;
      int rb = v >> 4, cb = (v & 15) * 8;
#ifdef NO_VLOAD
      for (int e = 0; e < 8; e++) {
        As[r * BK + c + e] = A[(size_t)(bm + r) * K + k0 + c + e];
        Bs[rb * BN + cb + e] = B[(size_t)(k0 + rb) * N + bn + cb + e];
      }
#else
      vstore8(vload8(0, A + (size_t)(bm + r) * K + k0 + c), 0, As + r * BK + c);
      vstore8(vload8(0, B + (size_t)(k0 + rb) * N + bn + cb), 0, Bs + rb * BN + cb);
#endif
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int kk = 0; kk < BK; kk += 16) {
      uint a[4][4], b[4][2];
      for (int mi = 0; mi < 4; mi++) {
        int r = wm + mi * 16 + g;
        __local ushort* p0 = As + r * BK + kk + t * 2;
        __local ushort* p1 = As + (r + 8) * BK + kk + t * 2;
        a[mi][0] = PACK(p0[0], p0[1]); a[mi][1] = PACK(p1[0], p1[1]);
        a[mi][2] = PACK(p0[8], p0[9]); a[mi][3] = PACK(p1[8], p1[9]);
      }
      for (int ni = 0; ni < 4; ni++) {
        int c = wn + ni * 8 + g;
        b[ni][0] = PACK(Bs[(kk + t * 2) * BN + c], Bs[(kk + t * 2 + 1) * BN + c]);
        b[ni][1] = PACK(Bs[(kk + t * 2 + 8) * BN + c], Bs[(kk + t * 2 + 9) * BN + c]);
      }
#ifdef NO_MMA
      for (int mi = 0; mi < 4; mi++) for (int ni = 0; ni < 4; ni++) acc[mi][ni][0] += (float)(a[mi][0] & 1u) + (float)(b[ni][0] & 1u);
#else
      for (int mi = 0; mi < 4; mi++) for (int ni = 0; ni < 4; ni++)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+f"(acc[mi][ni][0]), "+f"(acc[mi][ni][1]), "+f"(acc[mi][ni][2]), "+f"(acc[mi][ni][3])
                     : "r"(a[mi][0]), "r"(a[mi][1]), "r"(a[mi][2]), "r"(a[mi][3]), "r"(b[ni][0]), "r"(b[ni][1]));
#endif
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int mi = 0; mi < 4; mi++) for (int ni = 0; ni < 4; ni++) {
    int r = bm + wm + mi * 16 + g, c = bn + wn + ni * 8 + t * 2;
    C[(size_t)r * N + c] = acc[mi][ni][0]; C[(size_t)r * N + c + 1] = acc[mi][ni][1];
    C[(size_t)(r + 8) * N + c] = acc[mi][ni][2]; C[(size_t)(r + 8) * N + c + 1] = acc[mi][ni][3];
  }
}
"""

def main(n: int) -> dict:
  import pyopencl as cl
  import torch
  out: dict = {"date": time.strftime("%Y-%m-%d"), "n": n}
  gpu = next(d for p in cl.get_platforms() if "NVIDIA" in p.name for d in p.get_devices())
  out["card"] = gpu.name
  ctx = cl.Context([gpu])
  q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
  if os.environ.get("TC_VARIANTS"):  # (which part fails, where the whole kernel does)
    rep = {}
    for name, opts in (("no_mma", ["-DNO_MMA"]), ("no_vload", ["-DNO_VLOAD"])):
      try:
        kv = cl.Program(ctx, SRC).build(options=opts).tc_matmul
        z = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, n * n * 4)
        kv(q, (n // 128 * 256, n // 128), (256, 1), z, z, z, np.int32(n), np.int32(n), np.int32(n)).wait()
        rep[name] = "ran"
      except Exception as e: rep[name] = f"{type(e).__name__}: {str(e)[:200]}"  # noqa: BLE001
    out["variants"] = rep
  prg = cl.Program(ctx, SRC).build()
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((n, n)).astype(np.float16), rng.standard_normal((n, n)).astype(np.float16)
  mf = cl.mem_flags
  ab = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a.view(np.uint16))
  bb = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b.view(np.uint16))
  cb = cl.Buffer(ctx, mf.WRITE_ONLY, n * n * 4)
  k = prg.tc_matmul
  k.set_args(ab, bb, cb, np.int32(n), np.int32(n), np.int32(n))
  gs, ls = (n // 128 * 256, n // 128), (256, 1)
  cl.enqueue_nd_range_kernel(q, k, gs, ls).wait()
  times = []
  for _ in range(20):
    ev = cl.enqueue_nd_range_kernel(q, k, gs, ls)
    ev.wait()
    times.append((ev.profile.end - ev.profile.start) * 1e-9)
  got = np.empty((n, n), np.float32)
  cl.enqueue_copy(q, got, cb)
  q.finish()
  ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
  want = (ta.float() @ tb.float()).cpu().numpy()
  out["ours"] = {"ms": min(times) * 1e3, "tflops": 2 * n**3 / min(times) / 1e12,
                 "max_rel_err": float(np.abs(got - want).max() / np.abs(want).max())}
  for _ in range(3): ta @ tb
  torch.cuda.synchronize()
  tt = []
  for _ in range(20):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); ta @ tb; e.record(); torch.cuda.synchronize()
    tt.append(s.elapsed_time(e) * 1e-3)
  out["torch_fp16"] = {"ms": min(tt) * 1e3, "tflops": 2 * n**3 / min(tt) / 1e12, "version": torch.__version__}
  out["ratio"] = out["ours"]["tflops"] / out["torch_fp16"]["tflops"]
  return out

if __name__ == "__main__":
  res = main(int(sys.argv[1]) if len(sys.argv) > 1 else 4096)
  text = json.dumps(res, indent=1)
  print(text)
  if os.environ.get("OUT"):
    with open(os.path.join(os.environ["OUT"], "tc_matmul.json"), "w") as f: f.write(text)
