"""FUSE_ARANGE (scheduler switch from tinygrad 0.10.0) and nested reduces that fold in the code generator.

With FUSE_ARANGE on (the default here; tinygrad 0.10.0 defaults it off), an arange (a sum of masked constants) is not stored: it is
recomputed inside the kernels that read it, where `reduce_masked_const_to_count` folds it to `v` and `reduce_masked_point_to_load`
turns an embedding's compare `v == id` into one guarded load of the weight: no loop over the vocabulary.
"""
import numpy as np
import pytest
from tinysched import Tensor, nn
from tinysched.ops import Ops
from tinysched.helpers import Context, FUSE_ARANGE
from tinysched.rewrite import PatternMatcher
from tinysched.codegen import Kernel, GENERIC_GPU, to_program
from tinysched.codegen import lowerer
from tinysched.codegen.kernel import KernelError
from tests.tinysched.kernels import HAS_CL

needs_cl = pytest.mark.skipif(not HAS_CL, reason="no OpenCL device (install pocl-opencl-icd)")
DEVICES = ["NUMPY", pytest.param("OPENCL", marks=needs_cl)]

def _kernels(t: Tensor) -> list:
  return [si for si in t.schedule() if si.ast.op is Ops.SINK]

def _arange_consumer(device=None) -> Tensor:
  # the arange is read through an expand, so without fusion it is stored first
  return (Tensor.arange(10, device=device).reshape(10, 1).expand(10, 10) * Tensor.arange(10, device=device).reshape(1, 10)).sum(0)

# *** the flag ***

def test_flag_default_on_env_and_context(monkeypatch):
  monkeypatch.delenv("FUSE_ARANGE", raising=False)
  assert FUSE_ARANGE  # on by default here (tinygrad 0.10.0 defaults it off): embeddings must not loop over the vocabulary
  monkeypatch.setenv("FUSE_ARANGE", "0")
  assert not FUSE_ARANGE
  with Context(FUSE_ARANGE=1):
    assert FUSE_ARANGE
    with Context(FUSE_ARANGE=0): assert not FUSE_ARANGE
    assert FUSE_ARANGE
  assert not FUSE_ARANGE

@pytest.mark.parametrize("flag,n", [(0, 2), (1, 1)])
def test_arange_consumer_kernel_count(flag, n):
  with Context(FUSE_ARANGE=flag): assert len(_kernels(_arange_consumer())) == n

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("flag", [0, 1])
def test_arange_consumer_numbers(device, flag):
  with Context(FUSE_ARANGE=flag): got = _arange_consumer(device).numpy()
  np.testing.assert_array_equal(got, (np.arange(10).reshape(10, 1) * np.arange(10).reshape(1, 10)).sum(0))

def test_env_flag_fuses(monkeypatch):
  monkeypatch.setenv("FUSE_ARANGE", "1")
  assert len(_kernels(_arange_consumer())) == 1

def test_arange_output_not_fused():
  # an arange that is itself an output is stored (a contiguous base), also with the flag on
  with Context(FUSE_ARANGE=1):
    assert len(_kernels(Tensor.arange(10))) == 1  # schedule() does not run it: numbers from a fresh tensor
    np.testing.assert_array_equal(Tensor.arange(10).numpy(), np.arange(10))

# *** the embedding ***

def _embedding(vocab: int, dim: int, ids: np.ndarray, device=None) -> tuple[nn.Embedding, Tensor]:
  emb = nn.Embedding(vocab, dim)
  if device is not None: emb.weight = emb.weight.to(device)
  emb.weight.realize()
  return emb, Tensor(ids, device=device).realize()

def _gather_src(vocab: int, dim: int, tokens: int) -> str:
  emb, idx = _embedding(vocab, dim, np.zeros((1, tokens), dtype=np.int32))
  with Context(FUSE_ARANGE=1): ks = _kernels(emb(idx))
  assert len(ks) == 1
  return to_program(ks[0].ast, None, GENERIC_GPU).src

def test_embedding_kernel_count_off():
  emb, idx = _embedding(1000, 32, np.zeros((1, 64), dtype=np.int32))
  with Context(FUSE_ARANGE=0): assert len(_kernels(emb(idx))) == 2  # arange, then the gather
  with Context(FUSE_ARANGE=1): assert len(_kernels(emb(idx))) == 1

def test_embedding_no_vocab_loop():
  src = _gather_src(1000, 32, 64)
  assert "for (" not in src and "1000" in src  # the vocabulary only shows up as the bound of the guard

def test_embedding_no_vocab_loop_gpt2_shape(monkeypatch):
  # GPT-2's 50257 x 768; SPLIT_REDUCEOP would split the vocab reduce (lazy.py) before the scheduler sees it
  monkeypatch.setenv("SPLIT_REDUCEOP", "0")
  from tinysched.helpers import getenv
  getenv.cache_clear()
  try: assert "for (" not in _gather_src(50257, 768, 64)
  finally: getenv.cache_clear()

def test_embedding_gpt2_shape_with_the_reduce_split():
  # the default SPLIT_REDUCEOP: the arange is not split (lazy.py leaves a masked-constant sum whole when FUSE_ARANGE is
  # on) and the gather's split stages fold: no loop longer than the split factor (29) is left anywhere
  import re
  from tinysched import dtypes
  emb = nn.Embedding(50257, 768)
  idx = Tensor(np.arange(64, dtype=np.int32).reshape(1, 64) * 785, dtype=dtypes.int32)
  with Context(FUSE_ARANGE=1): asts = [k.ast for k in _kernels(emb(idx))]
  bounds = [int(b) for a in asts for b in re.findall(r"ridx\d+ < (\d+)", to_program(a, None, GENERIC_GPU).src)]
  assert len(asts) <= 3 and max(bounds, default=0) <= 29, bounds
  with Context(FUSE_ARANGE=1): got = emb(idx).numpy()
  np.testing.assert_array_equal(got, emb.weight.numpy()[idx.numpy()])

def test_planted_no_point_fold_loop_comes_back(monkeypatch):
  # without the point fold the inner arange still folds, but the vocab reduce needs its loop: codegen refuses the fused
  # kernel clearly, and the scheduler (which asks codegen) keeps the arange in its own kernel instead
  emb, idx = _embedding(1000, 32, np.zeros((1, 64), dtype=np.int32))
  with Context(FUSE_ARANGE=1): fused = _kernels(emb(idx))
  assert len(fused) == 1
  rules = [r for r in lowerer.reduce_folds.rules if r[2] != "reduce_masked_point_to_load"]
  assert len(rules) == len(lowerer.reduce_folds.rules) - 1
  pm = PatternMatcher([])
  pm.rules = rules
  monkeypatch.setattr(lowerer, "reduce_folds", pm)
  with pytest.raises(KernelError, match="reduce inside a reduce"): to_program(fused[0].ast, None, GENERIC_GPU)
  with Context(FUSE_ARANGE=1): assert len(_kernels(emb(idx))) == 2

@pytest.mark.parametrize("device", DEVICES)
def test_embedding_exact(device):
  rng = np.random.default_rng(0)
  vocab, dim = 1000, 32
  ids = rng.integers(0, vocab, size=(1, 64)).astype(np.int32)
  ids[0, :3] = [0, vocab - 1, 7]
  emb, idx = _embedding(vocab, dim, ids, device)
  w = emb.weight.numpy()
  with Context(FUSE_ARANGE=1): got = emb(idx).numpy()
  with Context(FUSE_ARANGE=0): ref = emb(idx).numpy()
  np.testing.assert_array_equal(got, w[ids])
  np.testing.assert_array_equal(got, ref)

@pytest.mark.parametrize("device", DEVICES)
def test_embedding_out_of_range_ids_are_zero(device):
  # the loop's semantics: an id that matches no row sums to 0 (the guarded load must not read out of bounds)
  vocab, dim = 50, 8
  ids = np.array([[-1, 0, 49, 50, 1 << 30]], dtype=np.int32)
  emb, idx = _embedding(vocab, dim, ids, device)
  w = emb.weight.numpy()
  with Context(FUSE_ARANGE=1): got = emb(idx).numpy()
  exp = np.zeros((1, 5, dim), dtype=np.float32)
  exp[0, 1], exp[0, 2] = w[0], w[49]
  np.testing.assert_array_equal(got, exp)

@pytest.mark.parametrize("device", DEVICES)
def test_nested_fold_inside_a_loop(device):
  # the inner arange folds, the outer sum of i*j keeps its loop: the folded value is read with the loop's index
  with Context(FUSE_ARANGE=1):
    np.testing.assert_array_equal(_arange_consumer(device).numpy(), 45 * np.arange(10))
    assert len(_kernels(_arange_consumer(device))) == 1

def test_kernel_accepts_nested_reduce():
  emb, idx = _embedding(100, 8, np.zeros((1, 4), dtype=np.int32))
  with Context(FUSE_ARANGE=1): ks = _kernels(emb(idx))
  k = Kernel(ks[0].ast)
  assert k.nested and k.n_red == 2 and sorted(k.red_axes.values()) == [(0,), (1,)]

# *** an arange that cannot be inlined stays stored ***

def _bilinear(x: np.ndarray, size) -> Tensor: return Tensor(x).interpolate(size, mode="linear")

def test_an_arange_whose_reader_would_be_malformed_stays_stored():
  # interpolate's two gathers reduce one dim at two sizes: inlining their aranges gives a kernel no backend can run
  # (views (..., 5, 3) and (..., 5, 5) in one kernel); the scheduler sees it and keeps those aranges stored
  x = np.random.default_rng(0).random((1, 2, 4, 5)).astype(np.float32)
  with Context(FUSE_ARANGE=0): want = _bilinear(x, (7, 3)).numpy()
  with Context(FUSE_ARANGE=1):
    from tinysched.scheduling.kernel_ast import well_formed
    assert all(well_formed(si.ast) for si in _kernels(_bilinear(x, (7, 3))))
    np.testing.assert_allclose(_bilinear(x, (7, 3)).numpy(), want, rtol=1e-6, atol=1e-6)

def test_without_the_fallback_the_kernel_is_malformed(monkeypatch):
  # the check above can fail: with the fallback planted away, the malformed kernel reaches the backend
  import tinysched.schedule as S
  from tinysched.scheduling.kernel_ast import well_formed
  monkeypatch.setattr(S, "_misfused_aranges", lambda pres, facts, memo: frozenset())
  x = np.random.default_rng(0).random((1, 2, 4, 5)).astype(np.float32)
  with Context(FUSE_ARANGE=1): assert not all(well_formed(si.ast) for si in _kernels(_bilinear(x, (7, 3))))

def test_well_formed_accepts_the_embedding_gather():
  from tinysched.scheduling.kernel_ast import well_formed
  emb = nn.Embedding(300, 8)
  emb.weight.realize()
  with Context(FUSE_ARANGE=1): ks = _kernels(emb(Tensor([[3, 299, 0]])))
  assert len(ks) == 1 and well_formed(ks[0].ast)

def test_an_arange_read_through_a_reshape_into_a_reduce():
  # the inlined arange's output is reshaped under the consumer's reduce: the view push cannot express it, so the
  # arange stays stored (this crashed the exec check's own calibration under FUSE_ARANGE=1)
  with Context(FUSE_ARANGE=1): got = (Tensor.arange(64).reshape(8, 8).float().sum(1) + 1).numpy()
  np.testing.assert_array_equal(got, np.arange(64).reshape(8, 8).sum(1) + 1)

def _strided_setitem() -> Tensor:
  t = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).realize()
  t[0:2, 1::2] = -1.0  # a strided slice assign: its arange ends up under a reduce that keeps its loop
  return t

def _lowers(t: Tensor) -> bool:
  from tinysched.codegen.kernel import KernelError
  try:
    for si in t.schedule():
      if si.ast.op is Ops.SINK: to_program(si.ast, None, GENERIC_GPU)
  except KernelError: return False
  return True

def test_an_arange_codegen_cannot_fold_stays_stored():
  # inlined under a reduce that keeps its loop, the arange would be a nested reduce that needs a loop of its own, which
  # codegen refuses: the scheduler asks codegen's first passes and keeps such an arange stored (OpenCL-only failure
  # before: the NUMPY interpreter loops over anything)
  assert _lowers(_strided_setitem())
  want = np.arange(12, dtype=np.float32).reshape(3, 4)
  want[0:2, 1::2] = -1.0
  np.testing.assert_array_equal(_strided_setitem().numpy(), want)

def test_without_the_codegen_question_the_kernel_cannot_be_lowered(monkeypatch):
  import tinysched.schedule as S
  from tinysched.scheduling.kernel_ast import well_formed
  monkeypatch.setattr(S, "_runnable", well_formed)  # the check as it was: shapes only
  assert not _lowers(_strided_setitem())

def test_a_load_inside_a_folded_loads_index_is_guarded_too():
  # the point fold reads W[ids[r]] at r := p; when no r matches, p may lie outside ids: ids[p] must be guarded as well
  from tinysched.codegen.folds import _guard_loads
  from tinysched.dtype import dtypes
  from tinysched.uop import UOp
  r, p = UOp(Ops.DEFINE_VAR, dtypes.int, (), ("r", 0, 9)), UOp(Ops.DEFINE_VAR, dtypes.int, (), ("p", -5, 20))
  g0, g1 = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 0), UOp(Ops.DEFINE_GLOBAL, dtypes.int32.ptr(), (), 1)
  ids = UOp(Ops.LOAD, dtypes.int32, (UOp(Ops.INDEX, g1.dtype, (g1, r)),))
  w = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, g0.dtype, (g0, ids)),))
  guard = UOp(Ops.CMPLT, dtypes.bool, (p, UOp.const(dtypes.int, 10)))
  out = _guard_loads(w, r, p, guard)
  loads = [u for u in out.toposort() if u.op is Ops.LOAD]
  assert len(loads) == 2 and all(len(u.src) == 2 and guard in u.src[1].toposort() for u in loads)
