"""Scheduler rules: every test asserts the kernel count AND runs the schedule and checks the values."""
import subprocess, sys, textwrap
import numpy as np
import pytest
from tinysched import Tensor, Variable, dtypes
from tinysched.ops import Ops
from tinysched.realize import run_schedule
from tinysched.schedule import ScheduleError

def rng(*shape, seed=0):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

def run(t: Tensor, kernels: int | None = None, max_kernels: int | None = None, *others: Tensor):
  """Schedule t (and others), check the kernel count, run it, return the numpy value of t."""
  sched, var_vals = t.schedule_with_vars(*others)
  kernels_only = [si for si in sched if si.ast.op is Ops.SINK]
  if kernels is not None: assert len(kernels_only) == kernels, [si.ast.pretty() for si in kernels_only]
  if max_kernels is not None: assert len(kernels_only) <= max_kernels, len(kernels_only)
  run_schedule(sched, var_vals)
  return t.numpy()

def test_elementwise_chain_with_movement_is_one_kernel():
  a, b = rng(4, 6), rng(6, 4, seed=1)
  ta, tb = Tensor(a), Tensor(b)
  out = ((ta + 1).reshape(6, 4) * tb).permute(1, 0).exp().reshape(2, 12) - 3
  np.testing.assert_allclose(run(out, 1), (np.exp(((a + 1).reshape(6, 4) * b).T).reshape(2, 12) - 3), rtol=1e-5)

def test_reduce_of_elementwise():
  a, b = rng(5, 7), rng(5, 7, seed=1)
  np.testing.assert_allclose(run((Tensor(a) + Tensor(b)).sum(1), 1), (a + b).sum(1), rtol=1e-5, atol=1e-6)

def test_reduce_then_elementwise_fuses():
  a, b = rng(5, 7), rng(5, 1, seed=1)
  np.testing.assert_allclose(run(Tensor(a).sum(1, keepdim=True) + Tensor(b), 1), a.sum(1, keepdims=True) + b, rtol=1e-5, atol=1e-6)

def test_reduce_expanded_back_is_two_kernels():
  a = rng(5, 7)
  ta = Tensor(a)
  np.testing.assert_allclose(run(ta - ta.sum(1, keepdim=True), 2), a - a.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)

def test_softmax_kernels():
  a = rng(4, 10)
  t = Tensor(a)
  m = t - t.max(1, keepdim=True)
  e = m.exp()
  sm = e / e.sum(1, keepdim=True)
  ref = np.exp(a - a.max(1, keepdims=True)); ref /= ref.sum(1, keepdims=True)
  np.testing.assert_allclose(run(sm, max_kernels=3), ref, rtol=1e-5, atol=1e-6)

def test_layernorm_kernels():
  a = rng(4, 16)
  t = Tensor(a)
  mu = t.mean(1, keepdim=True)
  xc = t - mu
  out = xc * (xc.square().mean(1, keepdim=True) + 1e-5).rsqrt()
  ref = (a - a.mean(1, keepdims=True)) / np.sqrt(a.var(1, keepdims=True) + 1e-5)
  np.testing.assert_allclose(run(out, max_kernels=3), ref, rtol=1e-4, atol=1e-5)

def test_matmul_relu_is_one_kernel():
  a, w = rng(8, 16), rng(16, 4, seed=1)
  np.testing.assert_allclose(run((Tensor(a) @ Tensor(w)).relu(), 1), np.maximum(a @ w, 0), rtol=1e-5, atol=1e-5)

def test_conv2d_bias_relu_is_one_kernel():
  x, w, b = rng(2, 3, 9, 9), rng(4, 3, 3, 3, seed=1), rng(4, seed=2)
  out = Tensor(x).conv2d(Tensor(w), Tensor(b), stride=2, padding=1).relu()
  # reference: direct convolution in numpy
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  oh = (9 + 2 - 3) // 2 + 1
  ref = np.zeros((2, 4, oh, oh), np.float32)
  for i in range(oh):
    for j in range(oh):
      ref[:, :, i, j] = np.einsum("bchw,ochw->bo", xp[:, :, 2*i:2*i+3, 2*j:2*j+3], w)
  ref = np.maximum(ref + b[None, :, None, None], 0)
  np.testing.assert_allclose(run(out, 1), ref, rtol=1e-4, atol=1e-4)

def test_max_pool2d_is_one_kernel():
  x = rng(2, 3, 8, 8)
  ref = x.reshape(2, 3, 4, 2, 4, 2).max(axis=(3, 5))
  np.testing.assert_allclose(run(Tensor(x).max_pool2d(), 1), ref)

def test_small_tensor_times_large_expand_realizes_before_expand():
  a, b = rng(4, 1), rng(4, 64, seed=1)
  small = Tensor(a).exp()  # an op on the small tensor: computed once, not once per broadcast element
  out = small.expand(4, 64) * Tensor(b)
  sched = out.schedule()
  assert len(sched) == 2
  # the first kernel stores the small (4,1) tensor: 4 elements
  assert sched[0].outputs[0].size == 4
  run_schedule(sched)
  np.testing.assert_allclose(out.numpy(), np.exp(a) * b, rtol=1e-5)

def test_unsafe_pad_realizes():
  a = np.abs(rng(4, 4)) + 0.5
  out = Tensor(a).log2().pad(((1, 1), (1, 1))).sum()
  np.testing.assert_allclose(run(out, 2), np.log2(a).sum(), rtol=1e-4)

def test_safe_pad_fuses():
  a = rng(4, 4)
  out = (Tensor(a) * 2).pad(((1, 1), (1, 1))).sum()
  np.testing.assert_allclose(run(out, 1), (a * 2).sum(), rtol=1e-4)

def test_cse_same_reduce_twice():
  a = rng(6, 6)
  t = Tensor(a)
  np.testing.assert_allclose(run(t.sum() + t.sum(), 1), 2 * a.sum(), rtol=1e-5)

def test_reduce_feeding_two_outputs_is_one_multioutput_kernel():
  a = rng(6, 8)
  t = Tensor(a)
  s = t.sum(1, keepdim=True)
  o1, o2 = s * 2, s + 1
  sched = o1.schedule(o2)
  assert len(sched) == 1 and len(sched[0].outputs) == 2
  assert sorted(sched[0].output_idxs) == [0, 1]  # outputs take the first DEFINE_GLOBAL numbers
  run_schedule(sched)
  np.testing.assert_allclose(o1.numpy(), a.sum(1, keepdims=True) * 2, rtol=1e-5)
  np.testing.assert_allclose(o2.numpy(), a.sum(1, keepdims=True) + 1, rtol=1e-5)

def test_assign_is_one_kernel():
  a, b = rng(4, 4), rng(4, 4, seed=1)
  x = Tensor(a).realize()
  x.assign(x + Tensor(b))
  np.testing.assert_allclose(run(x, 1), a + b, rtol=1e-6)
  # it wrote in place: the same buffer
  np.testing.assert_allclose(x.numpy(), a + b, rtol=1e-6)

def test_assign_reads_before_writes():
  a, b = rng(4, 4), rng(4, 4, seed=1)
  x, y = Tensor(a).realize(), Tensor(b).realize()
  # y's assign is scheduled first in program order, but x's update reads y's old value: it must run first
  x_new = x + y          # reads the old y
  y.assign(y * 2)
  x.assign(x_new)
  sched = y.schedule(x)
  assert len(sched) == 2
  run_schedule(sched)
  np.testing.assert_allclose(x.numpy(), a + b, rtol=1e-6)
  np.testing.assert_allclose(y.numpy(), b * 2, rtol=1e-6)

def test_assigns_reading_each_others_targets_is_a_cycle():
  x, y = Tensor(rng(4)).realize(), Tensor(rng(4, seed=1)).realize()
  x_new, y_new = x + y, y - x
  x.assign(x_new)
  y.assign(y_new)
  with pytest.raises(ScheduleError, match="cycle detected in graph"):
    x.schedule(y)

def test_assign_chain_order():
  a = rng(8)
  x = Tensor(a).realize()
  snapshot = (x * 1.5).contiguous()  # reads x before the assign below
  x.assign(x + 1)
  sched = x.schedule(snapshot)
  assert len([si for si in sched if si.ast.op is Ops.SINK]) == 2
  run_schedule(sched)
  np.testing.assert_allclose(snapshot.numpy(), a * 1.5, rtol=1e-6)
  np.testing.assert_allclose(x.numpy(), a + 1, rtol=1e-6)

def test_augmented_assign_non_contiguous_self_read_errors():
  x = Tensor(rng(4, 4)).realize()
  x.assign(x + x.T)
  with pytest.raises(ScheduleError, match="contiguous"):
    x.schedule()

def test_symbolic_shrink_with_bound_variable():
  a = rng(10, 4)
  v = Variable("start_pos", 1, 10)
  t = Tensor(a)
  out = (t.shrink(((0, v.bind(3)), (0, 4))) * 2).sum(0)
  sched, var_vals = out.schedule_with_vars()
  assert len(sched) == 1
  ast = sched[0].ast
  names = {x.arg[0] for x in ast.toposort() if x.op is Ops.DEFINE_VAR} | \
          {vv.arg[0] for x in ast.toposort() if x.op is Ops.VIEW and not x.src for vv in x.arg.vars()}
  assert "start_pos" in names
  assert all(x.op is not Ops.BIND for x in ast.toposort())
  assert {k.arg[0]: val for k, val in var_vals.items()} == {"start_pos": 3}
  run_schedule(sched, var_vals)
  np.testing.assert_allclose(out.numpy(), (a[:3] * 2).sum(0), rtol=1e-5)

def test_symbolic_kernel_is_reused_across_values():
  a = rng(10, 4)
  v = Variable("n", 1, 10)
  asts = []
  for n in (2, 5):
    out = (Tensor(a).shrink(((0, v.bind(n)), (0, 4))) + 1).sum(0)
    sched, vv = out.schedule_with_vars()
    asts.append(sched[0].ast)
    run_schedule(sched, vv)
    np.testing.assert_allclose(out.numpy(), (a[:n] + 1).sum(0), rtol=1e-5)
  assert asts[0] is asts[1]

def test_cast_to_bigger_dtype_stores_smaller():
  a = rng(4, 8)
  out = Tensor(a).sum(1).cast(dtypes.float64) * 2
  np.testing.assert_allclose(run(out, max_kernels=2), a.sum(1).astype(np.float64) * 2, rtol=1e-5)

def test_big_reduce_splits():
  a = rng(1 << 16)
  np.testing.assert_allclose(run(Tensor(a).sum(), 2), a.sum(), rtol=1e-4)

def test_cycle_in_kernel_errors():
  a = rng(4)
  x = Tensor(a).realize()
  old = x + 0.5  # fused read of x before the assign...
  x.assign(x * 2)
  both = x + old  # ...and after it, in one kernel
  with pytest.raises(ScheduleError, match="cycle"):
    both.schedule()

DETERMINISM_SCRIPT = textwrap.dedent("""
  import os, sys
  os.environ["TINYSCHED_DEVICE"] = "NUMPY"
  sys.path.insert(0, os.getcwd())
  from tinysched import Tensor
  Tensor.manual_seed(7)
  x = Tensor.rand(8, 16)
  w1, w2 = Tensor.rand(16, 32), Tensor.rand(32, 4)
  h = (x @ w1).relu()
  out = (h @ w2)
  m = out.max(1, keepdim=True)
  e = (out - m).exp()
  sm = e / e.sum(1, keepdim=True)
  loss = (sm * sm).mean()
  for si in loss.schedule():
    print(si.ast.key)
    print(si.ast.pretty())
""")

def test_two_processes_give_identical_asts(tmp_path):
  outs = []
  for seed in ("1", "2"):
    r = subprocess.run([sys.executable, "-c", DETERMINISM_SCRIPT], capture_output=True, text=True, env={"PYTHONHASHSEED": seed, "PATH": ""},
                       cwd=str(__import__("pathlib").Path(__file__).parents[2]))
    assert r.returncode == 0, r.stderr
    outs.append(r.stdout)
  assert outs[0] == outs[1]
  assert outs[0].count("SINK") >= 3

def test_ops_between_tensors_of_one_symbolic_length():
  # the same symbolic dim on both sides broadcasts (x != x is decided for integers)
  a = rng(10)
  v = Variable("s", 1, 10).bind(4)
  t = Tensor(a)[0:v]
  out = (t * t + t / 2.0).sum()
  sched, var_vals = out.schedule_with_vars()
  run_schedule(sched, var_vals)
  np.testing.assert_allclose(out.numpy(), (a[:4] * a[:4] + a[:4] / 2).sum(), rtol=1e-5)

def test_bound_variable_constant_feeding_a_reduce():
  # a Variable standing for a constant broadcast into a reduce used to crash the swizzle push (VIEW of a shapeless
  # DEFINE_VAR taken for a swizzle); the same kernel serves every binding
  from tinysched import Variable
  asts = []
  for val in (2, 3):
    v = Variable("token", 0, 3).bind(val)
    t = Tensor(v).reshape(1, 1).expand(4, 3).sum(0)
    asts.append([si.ast for si in t.schedule_with_vars()[0]])
    v = Variable("token", 0, 3).bind(val)
    np.testing.assert_equal(Tensor(v).reshape(1, 1).expand(4, 3).sum(0).numpy(), [4 * val] * 3)
    np.testing.assert_equal((Tensor.arange(4) == Tensor(v).reshape(1).expand(4)).numpy(), np.arange(4) == val)
  assert len(asts[0]) == 1 and asts[0] == asts[1]

@pytest.mark.parametrize("r, c", [(1, 1), (1, 5), (5, 1), (3, 4), (6, 6), (7, 3)])
def test_tril_triu_masks_cost_no_kernel(r, c):
  # the triangle is a view of one padded constant (VALID conditions in the consumer), as in tinygrad 0.10.0: a
  # causal mask adds no kernel to attention
  a = rng(r, c)
  x = Tensor(a).realize()
  for d in range(-r - 1, c + 2):
    np.testing.assert_array_equal(run(x.tril(d), 1), np.tril(a, d))
    np.testing.assert_array_equal(run(x.triu(d), 1), np.triu(a, d))

def test_a_reduce_stored_alone_is_stored_before_a_widening_cast():
  # the sum is read by another reduce (so stored alone) through a cast to float64: the kernel stores the float32 sum
  # (half the bytes) and the cast happens in the reader
  from tinysched import dtypes
  x = Tensor.rand(4, 8).realize()
  build = lambda: x.sum(1).cast(dtypes.float64).reshape(2, 2).sum(1)  # noqa: E731
  ks = [si for si in build().schedule() if si.ast.op is Ops.SINK]
  assert len(ks) == 2
  assert [s.src[0].dtype.base for s in ks[0].ast.src] == [dtypes.float32]
  assert np.allclose(build().numpy(), x.numpy().sum(1).astype(np.float64).reshape(2, 2).sum(1))

def test_a_kernel_names_the_tensor_calls_it_computes():
  # ScheduleItem.metadata comes from the kernel's computed buffers (computes): every fused op's Tensor call, in graph
  # order, and a kernel only its own (the reduce stored alone and the elementwise kernel reading it)
  from tinysched.schedule import create_schedule_with_vars
  a = Tensor.ones(4, 4).contiguous().realize()
  s = (a * 2 + 1).exp().sum(1)
  out = s.reshape(4, 1).expand(4, 4) - a
  sched, _ = create_schedule_with_vars([out.lazydata])
  assert [[m.name for m in si.metadata] for si in sched] == [["mul", "add", "exp", "sum"], ["sub"]]
