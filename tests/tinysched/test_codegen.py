"""Code generation: kernel normalization, Opts, determinism of to_program, device limits, and
optimized vs unoptimized kernels giving the same numbers (run on OpenCL when a device exists)."""
from __future__ import annotations
import dataclasses, os, subprocess, sys, textwrap
import numpy as np
import pytest
from tinysched import Tensor, dtypes, Variable
from tinysched.ops import Ops
from tinysched.uop import UOp
from tinysched import capture_hook
from tinysched.codegen import (Opt, OptOps, Kernel, KernelError, KernelOptError, Target, GENERIC_GPU, GENERIC_CPU, to_program,
                               default_opts, UnsupportedDTypeError)
from tinysched.codegen.opencl import render_const
from tests.tinysched.kernels import needs_cl, _kernels, _random_inputs, _run_both

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# *** kernel normalization and opts ***

def test_matmul_normalizes_to_two_output_axes_and_one_reduce():
  si = _kernels(Tensor.empty(8, 16) @ Tensor.empty(16, 4))[0]
  k = Kernel(si.ast)
  assert (k.full_shape, k.n_out, k.n_red) == ((8, 4, 16), 2, 1)
  assert k.name == "r_8_4_16"

def test_contiguous_elementwise_merges_to_one_axis():
  si = _kernels(Tensor.empty(4, 8, 16) + 1)[0]
  k = Kernel(si.ast)
  assert k.full_shape == (512,) and k.name == "E_512"
  k.apply_opt(Opt(OptOps.UPCAST, 0, 4))
  k.apply_opt(Opt(OptOps.LOCAL, 0, 32))
  assert k.name == "E_4_32_4"

def test_permuted_elementwise_keeps_axes():
  si = _kernels(Tensor.empty(4, 8).T + 1)[0]
  assert Kernel(si.ast).full_shape == (8, 4)

def test_opt_values_round_trip():
  o = Opt(OptOps.UPCAST, 1, 4)
  assert Opt.from_tuple(o.to_tuple()) == o and repr(o) == "Opt(OptOps.UPCAST, 1, 4)"
  with pytest.raises(ValueError): Opt.from_tuple(("NOPE", 0, 1))
  with pytest.raises(dataclasses.FrozenInstanceError): o.amount = 2  # type: ignore[misc]

@pytest.mark.parametrize("opt,msg", [
  (Opt(OptOps.UPCAST, 0, 3), "does not divide"),
  (Opt(OptOps.LOCAL, 5, 2), "out of range"),
  (Opt(OptOps.UNROLL, 1, 2), "out of range"),
  (Opt(OptOps.STAGE, 0, 0), "written by this kernel"),
  (Opt(OptOps.STAGE, 7, 0), "not loaded inside the reduce"),
])
def test_bad_opts_are_clear_errors(opt, msg):
  si = _kernels(Tensor.empty(8, 16) @ Tensor.empty(16, 4))[0]
  with pytest.raises(KernelOptError, match=msg): Kernel(si.ast, [opt])

def test_failed_opt_leaves_kernel_unchanged():
  si = _kernels(Tensor.empty(8, 16) @ Tensor.empty(16, 4))[0]
  k = Kernel(si.ast, [Opt(OptOps.GROUP, 0, 4)])
  before = k.name
  with pytest.raises(KernelOptError, match="only one GROUP"): k.apply_opt(Opt(OptOps.GROUP, 0, 2))
  assert k.name == before and k.applied == [Opt(OptOps.GROUP, 0, 4)]

def test_symbolic_axis_rejects_opts_but_renders():
  v = Variable("n", 1, 32)
  si = _kernels_vars(Tensor.empty(32, 8).shrink(((0, v.bind(5)), None)) * 2)[0]
  k = Kernel(si.ast)
  with pytest.raises(KernelOptError, match="symbolic"): k.apply_opt(Opt(OptOps.UPCAST, 0, 2))
  src = to_program(si.ast, (), GENERIC_CPU).src
  assert "const int n" in src

def _kernels_vars(t: Tensor) -> list:
  sched, _ = t.schedule_with_vars()
  return [si for si in sched if si.ast.op is Ops.SINK]

def test_indexing_past_int32_uses_long():
  si = _kernels(Tensor.empty((1 << 31) + 8, dtype=dtypes.int8) + 1)[0]  # nothing is allocated: only the AST is built
  src = to_program(si.ast, (), GENERIC_CPU).src
  assert "long gidx0 = get_global_id(0);" in src, src
  small = to_program(_kernels(Tensor.empty(1 << 20, dtype=dtypes.int8) + 1)[0].ast, (), GENERIC_CPU).src
  assert "long" not in small and "int gidx0" in small, small

def test_indexing_past_int64_is_a_clear_error():
  si = _kernels(Tensor.empty(1 << 31).expand(1 << 32, 1 << 31).shrink(((0, 1 << 32), (0, 1 << 31))).reshape(1 << 63).contiguous())
  with pytest.raises(KernelError, match="64-bit indexing"): Kernel(si[0].ast)

def test_not_a_kernel_ast():
  with pytest.raises(KernelError): Kernel(UOp.const(dtypes.int32, 1))

# *** rendering ***

def test_kernel_names_and_float4():
  si = _kernels(Tensor.empty(1024) + Tensor.empty(1024))[0]
  p = to_program(si.ast, (Opt(OptOps.UPCAST, 0, 4),), GENERIC_GPU)
  assert p.name == "E_256_4" and "float4" in p.src and p.global_size == (256,) and p.local_size is None
  r = _kernels(Tensor.empty(4, 16).sum(1))[0]
  assert to_program(r.ast, (), GENERIC_GPU).name == "r_4_16"

def test_unaligned_view_is_not_vectorized():
  x = Tensor.empty(1025)
  si = _kernels(x[1:] + 1)[0]  # reads start at element 1: float4 loads would be misaligned
  src = to_program(si.ast, (Opt(OptOps.UPCAST, 0, 4),), GENERIC_GPU).src
  assert "float4*)(data1" not in src and "float4*)(data0" in src

@pytest.mark.parametrize("val,dt,want", [
  (float("inf"), dtypes.float32, "INFINITY"), (float("-inf"), dtypes.float32, "(-INFINITY)"), (float("nan"), dtypes.float32, "NAN"),
  (0.1, dtypes.float32, "0.10000000149011612f"), (-2.5, dtypes.float64, "(-2.5)"), (1.0, dtypes.float16, "((half)1.0f)"),
  (-2**31, dtypes.int32, "(-2147483647-1)"), (7, dtypes.uint32, "7u"), (-3, dtypes.int64, "(-3l)"), (200, dtypes.uint8, "((uchar)200)"),
  (True, dtypes.bool, "1"),
])
def test_constants_render_exactly(val, dt, want):
  assert render_const(val, dt) == want

def test_half_without_fp16_is_storage_and_double_without_fp64_names_the_device():
  no16 = dataclasses.replace(GENERIC_GPU, name="FakeGPU 3000", has_fp16=False)
  si = _kernels(Tensor.empty(16, dtype=dtypes.float16) * 2)[0]
  src = to_program(si.ast, (), no16).src  # half as storage: core OpenCL, float arithmetic (tests/tinysched/test_dtypes_bf16.py)
  assert "cl_khr_fp16" not in src and "vload_half(" in src and "vstore_half_rte(" in src
  no64 = dataclasses.replace(GENERIC_GPU, name="FakeGPU 3000", has_fp64=False)
  si = _kernels(Tensor.empty(16, dtype=dtypes.float64) * 2)[0]
  with pytest.raises(UnsupportedDTypeError, match="FakeGPU 3000.*cl_khr_fp64"): to_program(si.ast, (), no64)
  assert "cl_khr_fp16" in to_program(_kernels(Tensor.empty(16, dtype=dtypes.float16) * 2)[0].ast, (), GENERIC_GPU).src

def test_device_limits_are_clear_errors():
  si = _kernels(Tensor.empty(64, 64) @ Tensor.empty(64, 64))[0]
  small = dataclasses.replace(GENERIC_GPU, name="TinyGPU", max_work_group_size=64, local_mem_size=256)
  with pytest.raises(KernelOptError, match="work-group size 256 exceeds TinyGPU's max work-group size 64"):
    to_program(si.ast, (Opt(OptOps.LOCAL, 0, 16), Opt(OptOps.LOCAL, 1, 16)), small)
  opts = (Opt(OptOps.LOCAL, 0, 8), Opt(OptOps.LOCAL, 1, 8), Opt(OptOps.UNROLL, 0, 8), Opt(OptOps.STAGE, 1, 0), Opt(OptOps.STAGE, 2, 0))
  with pytest.raises(KernelOptError, match="bytes of local memory, TinyGPU has 256"): to_program(si.ast, opts, small)
  # the heuristic respects the limits of the device it targets
  p = to_program(si.ast, None, small)
  assert p.local_size is None or int(np.prod(p.local_size)) <= 64

def test_default_opts_per_device():
  mm = _kernels(Tensor.empty(1024, 1024) @ Tensor.empty(1024, 1024))[0].ast
  gpu = default_opts(mm, GENERIC_GPU)
  assert {o.op for o in gpu} == {OptOps.UPCAST, OptOps.LOCAL, OptOps.UNROLL, OptOps.STAGE}
  assert default_opts(mm, GENERIC_GPU) == gpu  # pure
  cpu = default_opts(mm, GENERIC_CPU)
  assert cpu and all(o.op in (OptOps.UPCAST, OptOps.UNROLL) for o in cpu)
  big_sum = _kernels(Tensor.empty(1 << 20).sum())[0].ast
  assert any(o.op is OptOps.GROUP for o in default_opts(big_sum, GENERIC_GPU))
  ew = _kernels(Tensor.empty(1 << 20) + 1)[0].ast
  assert Opt(OptOps.UPCAST, 0, 4) in default_opts(ew, GENERIC_GPU)

# GPT-2 small at 64 tokens: every layer's matmul is 64 x K @ K x N, and the tied head is 64 x 768 @ 768 x 50257
SKINNY = [(64, 768, 2304), (64, 3072, 768), (64, 768, 50257)]

@pytest.mark.parametrize("M,K,N", SKINNY, ids=[f"{m}x{k}x{n}" for m, k, n in SKINNY])
def test_skinny_matmul_splits_the_reduce_on_a_gpu(M, K, N):
  """Fewer 128x128 tiles than compute units: the reduce is split over the work-group (GROUP) and not staged; a square
  matmul with enough tiles keeps the staged tiles. Planted: without the split the skinny choice is the staged tile."""
  from tinysched.codegen.target import NVIDIA_LIKE_GPU
  from tinysched.codegen import heuristic
  ast = _kernels(Tensor.empty(M, K) @ Tensor.empty(K, N))[0].ast
  opts = default_opts(ast, NVIDIA_LIKE_GPU)
  assert any(o.op is OptOps.GROUP for o in opts) and not any(o.op is OptOps.STAGE for o in opts), opts
  assert any(o.op is OptOps.UPCAST for o in opts)
  sq = _kernels(Tensor.empty(2048, 2048) @ Tensor.empty(2048, 2048))[0].ast
  assert any(o.op is OptOps.STAGE for o in default_opts(sq, NVIDIA_LIKE_GPU))
  real = heuristic._gpu_split_reduce
  try:
    heuristic._gpu_split_reduce = lambda *a: False
    assert not any(o.op is OptOps.GROUP for o in default_opts(ast, NVIDIA_LIKE_GPU))
  finally: heuristic._gpu_split_reduce = real

@needs_cl
@pytest.mark.parametrize("M,K,N", [(64, 768, 2304), (16, 256, 1000)], ids=["qkv", "odd_n"])
def test_skinny_matmul_gpu_opts_compute_the_product(M, K, N):
  """The split-reduce opts chosen for the GPU run on the local OpenCL device and give numpy's product."""
  from tinysched.codegen.target import NVIDIA_LIKE_GPU
  from tinysched.runtime.opencl import run_ast as cl_run
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)
  ast = _kernels(Tensor.empty(M, K) @ Tensor.empty(K, N))[0].ast
  opts = default_opts(ast, NVIDIA_LIKE_GPU)
  assert any(o.op is OptOps.GROUP for o in opts), opts
  out = np.zeros(M * N, np.float32)
  cl_run(ast, [out, a.reshape(-1), b.reshape(-1)], opts=opts)
  np.testing.assert_allclose(out.reshape(M, N), a @ b, rtol=1e-4, atol=1e-4 * np.sqrt(K))

RESNET_CONVS = [(64, 56, 1), (256, 14, 1), (512, 7, 1), (128, 56, 2)]

@pytest.mark.parametrize("C,S,stride", RESNET_CONVS, ids=[f"c{c}s{s}x{st}" for c, s, st in RESNET_CONVS])
def test_resnet_conv_gets_channel_tiles_and_a_split_reduce_on_a_gpu(C, S, stride):
  """ResNet-18's 3x3 convolutions at one image: 8 output channels per thread and the channel reduce split over 16
  threads. Planted: without the convolution rule they get neither."""
  from tinysched.codegen.target import NVIDIA_LIKE_GPU
  from tinysched.codegen import heuristic
  ast = _kernels(Tensor.empty(1, C // stride, S, S).conv2d(Tensor.empty(C, C // stride, 3, 3), padding=1, stride=stride))[0].ast
  want = {Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.GROUP, 0, 16)}
  assert want <= set(default_opts(ast, NVIDIA_LIKE_GPU))
  real = heuristic._gpu_conv
  try:
    heuristic._gpu_conv = lambda *a: False
    assert not want <= set(default_opts(ast, NVIDIA_LIKE_GPU))
  finally: heuristic._gpu_conv = real

@needs_cl
def test_conv_gpu_opts_compute_the_convolution():
  """The convolution opts chosen for the GPU run on the local OpenCL device and give the unoptimized kernel's numbers."""
  from tinysched.codegen.target import NVIDIA_LIKE_GPU
  from tinysched.runtime.opencl import run_ast as cl_run
  rng = np.random.default_rng(1)
  x, w = rng.standard_normal((1, 32, 14, 14), dtype=np.float32), rng.standard_normal((48, 32, 3, 3), dtype=np.float32)
  ast = _kernels(Tensor.empty(1, 32, 14, 14).conv2d(Tensor.empty(48, 32, 3, 3), padding=1))[0].ast
  opts = default_opts(ast, NVIDIA_LIKE_GPU)
  assert Opt(OptOps.GROUP, 0, 16) in opts, opts
  got, ref = np.zeros(48 * 14 * 14, np.float32), np.zeros(48 * 14 * 14, np.float32)
  cl_run(ast, [got, x.reshape(-1), w.reshape(-1)], opts=opts)
  cl_run(ast, [ref, x.reshape(-1), w.reshape(-1)], opts=())
  np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
  assert np.abs(ref).max() > 1  # not a vacuous comparison of zeros

@needs_cl
def test_plant_group_combine_dropped_is_caught(monkeypatch):
  """The two numeric checks above go red when the GROUP combine is skipped (each thread's partial sum stored as the
  result): they check the split reduce, not only that opts were chosen."""
  from tinysched.codegen import lowerer
  from tinysched.device import Device
  monkeypatch.setattr(Device["OPENCL"].dev, "programs", {})  # rendered before the plant: render again
  monkeypatch.setattr(lowerer, "_group_reduce", lambda lw, assigns, out_combos: assigns)
  with pytest.raises(AssertionError): test_skinny_matmul_gpu_opts_compute_the_product(64, 768, 2304)
  with pytest.raises(AssertionError): test_conv_gpu_opts_compute_the_convolution()

def test_program_capture_hook():
  si = _kernels(Tensor.empty(8) + 1)[0]
  seen = []
  old = capture_hook.HOOK
  capture_hook.HOOK = lambda level, inputs, output, *rest: seen.append((level, inputs, output))
  try: p = to_program(si.ast, (), GENERIC_CPU)
  finally: capture_hook.HOOK = old
  assert seen == [("program", (si.ast, (), GENERIC_CPU), p.src)]

def test_target_round_trips():
  assert Target.from_dict(GENERIC_GPU.to_dict()) == GENERIC_GPU
  with pytest.raises(ValueError, match="unknown Target fields"): Target.from_dict({"nope": 1})

# *** determinism across processes ***

_DETERMINISM_SCRIPT = textwrap.dedent("""
  import hashlib, sys
  sys.path.insert(0, {root!r})
  from tinysched import Tensor, dtypes, Variable
  from tinysched.ops import Ops
  from tinysched.codegen import to_program, GENERIC_GPU, GENERIC_CPU, default_opts
  def progs():
    Tensor.manual_seed(0)
    x, w = Tensor.empty(64, 32), Tensor.empty(32, 64)
    yield (x @ w).relu()
    yield x.softmax(-1)
    yield Tensor.empty(2, 3, 8, 8).conv2d(Tensor.empty(4, 3, 3, 3), padding=1)
    yield (Tensor.empty(16, dtype=dtypes.int32) // 3).cast(dtypes.float32).pad(((2, 1),)).flip(0)
    yield Tensor.empty(1 << 16).sum()
    v = Variable("n", 1, 32)
    yield Tensor.empty(32, 8).shrink(((0, v.bind(3)), None)).sum(0)
  h = hashlib.sha256()
  for t in progs():
    sched, _ = t.schedule_with_vars()
    for si in sched:
      if si.ast.op is not Ops.SINK: continue
      for tgt in (GENERIC_GPU, GENERIC_CPU):
        h.update(to_program(si.ast, None, tgt).src.encode())
  print(h.hexdigest())
""")

def test_source_is_byte_identical_across_processes():
  script = _DETERMINISM_SCRIPT.format(root=ROOT)
  env = {**os.environ, "TINYSCHED_DEVICE": "NUMPY", "PYTHONHASHSEED": "random"}
  outs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120) for _ in range(2)]
  for o in outs: assert o.returncode == 0, o.stderr
  assert outs[0].stdout == outs[1].stdout and len(outs[0].stdout.strip()) == 64

# *** optimized and unoptimized kernels agree (on the OpenCL device) ***

def _opt_cases():
  Tensor.manual_seed(1)
  mm = _kernels(Tensor.empty(64, 32) @ Tensor.empty(32, 64))[0]
  yield "matmul", mm, [(), (Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 0, 4)),
                       (Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 4),
                        Opt(OptOps.LOCAL, 1, 4), Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UNROLL, 0, 8), Opt(OptOps.STAGE, 1, 0),
                        Opt(OptOps.STAGE, 2, 0)),
                       default_opts(mm.ast, GENERIC_GPU)]
  conv = _kernels(Tensor.empty(2, 3, 9, 9).conv2d(Tensor.empty(8, 3, 3, 3), padding=1))[0]
  yield "conv", conv, [(), default_opts(conv.ast, GENERIC_GPU), (Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 1, 0))]
  x = Tensor.empty(32, 256)
  sm = _kernels(x.softmax(-1))
  yield "softmax_max", sm[0], [(), (Opt(OptOps.UNROLL, 0, 4), Opt(OptOps.GROUP, 0, 16)), (Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 4))]
  yield "softmax_expsum", sm[1], [(), (Opt(OptOps.GROUP, 0, 32), Opt(OptOps.LOCAL, 0, 2))]
  yield "softmax_div", sm[2], [(), (Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.LOCAL, 1, 16), Opt(OptOps.LOCAL, 0, 4))]
  colsum = _kernels(Tensor.empty(64, 128).sum(0))[0]
  yield "colsum", colsum, [(), (Opt(OptOps.LOCAL, 0, 32), Opt(OptOps.GROUP, 0, 8)), (Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 8))]
  big = _kernels(Tensor.empty(1 << 16).sum())
  yield "sum_split", big[0], [(), default_opts(big[0].ast, GENERIC_GPU)]
  pad = _kernels(Tensor.empty(30, 32).pad(((1, 1), (0, 0))).flip(0) * 2)[0]
  yield "pad_flip", pad, [(), (Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.LOCAL, 0, 4))]
  prodk = _kernels((Tensor.empty(8, 12) * 0.1 + 1).prod(1))[0]
  yield "prod", prodk, [(), (Opt(OptOps.UNROLL, 0, 0), Opt(OptOps.UPCAST, 0, 2))]
  # every unrolled step of the reduce reads the same value (stride 0): step-major updates must still all count
  bcast = _kernels((Tensor.empty(16, 1).expand(16, 32) * Tensor.empty(1, 32).expand(16, 32)).sum(1))[0]
  yield "broadcast_sum", bcast, [(), (Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 4)), (Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UNROLL, 0, 0))]

OPT_CASES = ["matmul", "conv", "softmax_max", "softmax_expsum", "softmax_div", "colsum", "sum_split", "pad_flip", "prod", "broadcast_sum"]

@needs_cl
@pytest.mark.parametrize("name", OPT_CASES)
def test_optimized_equals_unoptimized(name):
  cases = {n: (si, optsets) for n, si, optsets in _opt_cases()}
  # each name is a case and each case has its test: a renamed or added case cannot pass by running nothing
  assert list(cases) == OPT_CASES
  si, optsets = cases[name]
  arrays = _random_inputs(si.ast, [b.size for b in si.bufs], seed=3)
  for opts in optsets:
    _run_both(si.ast, arrays, opts=tuple(opts), tol=2e-4)
